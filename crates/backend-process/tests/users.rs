//! Commands run as the manifest's `user` (an image's USER) or their own,
//! resolved in the sandbox's `/etc/passwd` and `/etc/group`: real ids, the
//! user's HOME and groups, no capabilities left; a user the sandbox does
//! not know is the caller's error, for an exec and for a session.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stasis_backend::Backend;
use stasis_core::{ErrorCode, Manifest, SessionSpec};

fn lines(r: &stasis_core::ExecResult) -> Vec<String> {
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    out(r).lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_as_the_manifests_user_or_their_own() {
    let e = env("users");
    // The test's root is the host's: its passwd names nobody (65534).
    let spec = e.spec(Manifest {
        user: Some("nobody".into()),
        ..Default::default()
    });
    e.be.create(&spec).await.unwrap();
    let who = "id -u; id -g; echo $HOME; echo $USER; grep CapEff /proc/self/status";
    let r = run(&e, &spec, sh(who)).await;
    assert_eq!(
        lines(&r),
        [
            "65534",
            "65534",
            "/nonexistent",
            "nobody",
            "CapEff:\t0000000000000000"
        ]
    );
    // The user cannot write where only root can; root (a request's own
    // user) still can.
    let r = run(&e, &spec, sh("echo x > /etc/stasis-user-test")).await;
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("Permission denied"),
        "{r:?}"
    );
    let mut as_root = sh("echo x > /etc/stasis-user-test && id -u");
    as_root.user = Some("0".into());
    assert_eq!(lines(&run(&e, &spec, as_root).await), ["0"]);

    // A numeric user need not exist; its files are its own.
    let mut r = sh("id -u; id -g; id -G; touch /tmp/mine; stat -c %u:%g /tmp/mine; echo $HOME");
    r.user = Some("4242:4243".into());
    assert_eq!(
        lines(&run(&e, &spec, r).await),
        ["4242", "4243", "4243", "4242:4243", "/"]
    );
    // A request's HOME wins over the passwd entry's.
    let mut r = sh("echo $HOME");
    r.env = BTreeMap::from([("HOME".to_string(), "/tmp".to_string())]);
    assert_eq!(lines(&run(&e, &spec, r).await), ["/tmp"]);

    // Unknown users and groups: an error naming the field, nothing runs.
    for bad in ["nosuchuser", "nobody:nosuchgroup"] {
        let mut r = sh("touch /tmp/ran");
        r.user = Some(bad.into());
        let err = e.be.exec(&spec.id, r, None).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{err:?}");
        assert_eq!(err.field.as_deref(), Some("user"), "{err:?}");
        assert!(err.message.contains("unable to find"), "{err:?}");
    }
    let r = run(&e, &spec, sh("test -e /tmp/ran && echo ran || echo no")).await;
    assert_eq!(lines(&r), ["no"]);

    // Sessions: the manifest's user, on a terminal too; a bad user is refused.
    let mut s = SessionSpec {
        argv: vec!["/bin/sh".into(), "-c".into(), "id -u; sleep 30".into()],
        env: BTreeMap::new(),
        cwd: None,
        pty: Some(stasis_core::PtySize { cols: 80, rows: 24 }),
        user: None,
    };
    let info = e.be.session_start(&spec.id, s.clone()).await.unwrap();
    let t = Instant::now();
    let mut text = String::new();
    let mut off = 0;
    while !text.contains("65534") {
        assert!(t.elapsed() < Duration::from_secs(30), "{text:?}");
        let o =
            e.be.session_read(&spec.id, &info.id, off, wait())
                .await
                .unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
    s.user = Some("nosuchuser".into());
    let err = e.be.session_start(&spec.id, s).await.unwrap_err();
    assert_eq!(err.field.as_deref(), Some("user"), "{err:?}");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
}
