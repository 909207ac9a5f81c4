//! A Dockerfile with RUN, COPY, ADD (a local .tar.gz, unpacked), ENV,
//! WORKDIR, USER and CMD, built FROM the stasis base (a local context, no
//! network), run on both backends: files, environment and working directory
//! as built; RUN steps after USER and every exec and session of the sandbox
//! (on a terminal too) run as that user; a session with no command runs the
//! image's CMD; a request may still name root.
//! Needs the guest image (STASIS_IMAGE_DIR, which leaves the stasis base
//! beside it); without it the test says so and passes.

mod common;

use common::{Daemon, Http};
use serde_json::{json, Value};

const DOCKERFILE: &str = "FROM stasis-base:bookworm\n\
    RUN useradd --create-home --uid 1500 app\n\
    ENV APP_MODE=test\n\
    WORKDIR /home/app/work\n\
    COPY hello.txt ./\n\
    ADD vendor.tar.gz /opt/vendor/\n\
    RUN chown -R app:app /home/app/work\n\
    USER app\n\
    RUN id -un > built-as.txt && touch /home/app/work/own.txt\n\
    CMD [\"python3\", \"-c\", \"import os; print('default command as', os.getuid())\"]\n";

const CHECK: &str = "id -un; id -u; cat built-as.txt hello.txt; stat -c %U own.txt; \
                     echo $APP_MODE $HOME; pwd; touch new.txt && stat -c %U new.txt; \
                     touch /etc/x 2>/dev/null || echo no-root; \
                     cat /opt/vendor/lib/v.py; stat -c %u /opt/vendor/lib/v.py";
const EXPECTED: &str = "app\n1500\napp\nhello\napp\ntest /home/app\n/home/app/work\napp\nno-root\n\
                        VERSION = 2\n4242\n";

/// The archive the Dockerfile ADDs: `lib/v.py`, owned by 4242 (kept).
fn vendor_tar_gz() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let data = b"VERSION = 2\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_uid(4242);
    h.set_gid(4242);
    b.append_data(&mut h, "lib/v.py", &data[..]).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &b.into_inner().unwrap()).unwrap();
    gz.finish().unwrap()
}

async fn check(http: &Http, sb: &str) {
    assert_eq!(http.sh(sb, CHECK).await, EXPECTED, "on {sb}");
    // A request may still run as root.
    let r = http
        .ok(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["id", "-u"], "user": "root"})),
        )
        .await;
    assert_eq!(r["stdout"], "0\n", "{r}");
    // ... but not as someone the image does not know: 400, naming `user`.
    let r = http
        .call(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["id"], "user": "nosuchuser"})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("nosuchuser"),
        "{}",
        r.body
    );
    // A session with no command runs the image's CMD, as the user.
    let s = http
        .ok(
            "POST",
            &format!("/v1/sandboxes/{sb}/sessions"),
            Some(json!({})),
        )
        .await;
    let sid = s["id"].as_str().unwrap();
    http.session_until(sb, sid, 0, "default command as 1500")
        .await;
    // On a terminal too.
    let s = http
        .ok(
            "POST",
            &format!("/v1/sandboxes/{sb}/sessions"),
            Some(json!({"argv": ["sh", "-c",
                                 "test -t 1 && echo tty-user=$(id -un) done; sleep 30"],
                        "pty": {"cols": 80, "rows": 24}})),
        )
        .await;
    let sid = s["id"].as_str().unwrap();
    let (out, _) = http.session_until(sb, sid, 0, " done").await;
    assert!(out.contains("tty-user=app done"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dockerfile_image_with_user_runs_as_built_on_both_backends() {
    let Some(img) = std::env::var_os("STASIS_IMAGE_DIR") else {
        eprintln!("Dockerfile USER test NOT RUN: STASIS_IMAGE_DIR is not set");
        return;
    };
    assert!(
        std::path::Path::new(&img).join("base-rootfs").is_dir(),
        "the guest image build leaves base-rootfs beside the image; rebuild it (scripts/setup.sh)"
    );
    let d = Daemon::start(&[]).await;
    let http = d.http();
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(ctx.path().join("Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(ctx.path().join("hello.txt"), "hello\n").unwrap();
    std::fs::write(ctx.path().join("vendor.tar.gz"), vendor_tar_gz()).unwrap();
    let c = ctx.path().display().to_string();
    let o = d.cli(&["image", "build", "-t", "app:1", &c]);
    assert!(o.status.success(), "{o:?}");
    let info: Value = http.ok("GET", "/v1/images/app:1", None).await;
    assert_eq!(info["record"]["config"]["user"], "app");

    let sb = http
        .create(json!({"backend": "process", "image": "app:1",
                       "lifecycle": {"on_idle": "nothing"}}))
        .await;
    let rec = http.ok("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    assert_eq!(rec["manifest"]["user"], "app", "{rec}");
    check(&http, &sb).await;
    http.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None)
        .await;

    let t0 = std::time::Instant::now();
    let vm = http
        .create(json!({"backend": "microvm", "image": "app:1",
                       "lifecycle": {"on_idle": "nothing"}}))
        .await;
    println!(
        "figure: microVM create from a Dockerfile-built image (first, disk built) {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    check(&http, &vm).await;
    http.ok("DELETE", &format!("/v1/sandboxes/{vm}"), None)
        .await;
}
