//! A memory-paused sandbox's frozen processes are held for the backend's
//! frozen window only (unless the manifest keeps them): past it they end,
//! the host keeps nothing running for the sandbox, and a resume starts it
//! afresh from its files.

mod common;
use common::*;
use stasis_backend::Backend;
use stasis_core::{Manifest, SessionSpec};
use std::time::Duration;

/// A shell session whose variable lives only in its memory, a file on disk.
async fn state(e: &Env, spec: &stasis_backend::SandboxSpec) -> String {
    let s =
        e.be.session_start(
            &spec.id,
            SessionSpec {
                argv: vec!["sh".into()],
                env: Default::default(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .unwrap();
    e.be.session_write(&spec.id, &s.id, b"v=42; echo set\n")
        .await
        .unwrap();
    let o = e.be.session_read(&spec.id, &s.id, 0, wait()).await.unwrap();
    assert_eq!(o.data, b"set\n");
    let r = run(e, spec, sh("echo kept > /tmp/f")).await;
    assert_eq!(r.exit_code, Some(0));
    s.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_processes_end_after_the_window_and_files_stay() {
    let e = env_with("frozen", |c| c.frozen_window = Duration::from_millis(300));
    let spec = e.create().await;
    let session = state(&e, &spec).await;
    let arts = e.tmp.path().join("a");
    e.be.pause(&spec.id, &arts, true).await.unwrap();
    // Held: the standby shows its frozen processes' RAM and its window.
    let held = e.be.standby(&spec.id).expect("a frozen sandbox is held");
    assert!(
        held.until_ms > held.since_ms && held.until_ms < held.since_ms + 5_000,
        "{held:?}"
    );
    assert_eq!(e.be.standby_all().len(), 1);
    assert!(!e.be.memory_survives_release());
    // Nothing is due before the window ends.
    assert!(e.be.housekeeping().await.is_empty());
    assert!(
        !e.cgroup_dirs().is_empty(),
        "its processes are held in their cgroups"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(e.be.housekeeping().await, vec![spec.id.clone()]);
    // Nothing of it runs on the host any more: no process, no cgroup.
    assert!(e.be.standby(&spec.id).is_none());
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    assert!(
        e.be.resume_needs_artifacts(&spec, &stasis_core::SnapshotId::generate())
            .await
    );
    // A second pass finds nothing more to do.
    assert!(e.be.housekeeping().await.is_empty());
    // The resume starts afresh from the files: the file is there, the
    // session and its variable are gone.
    e.be.resume(&spec, &arts).await.unwrap();
    assert_eq!(out(&run(&e, &spec, sh("cat /tmp/f")).await), "kept\n");
    assert!(e
        .be
        .session_read(&spec.id, &session, 0, Duration::from_millis(100))
        .await
        .is_err());
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_frozen_holds_the_processes_and_a_resume_continues_them() {
    let e = env_with("keepfrozen", |c| c.frozen_window = Duration::ZERO);
    let mut manifest = Manifest::default();
    manifest.lifecycle.keep_frozen = true;
    let spec = e.spec(manifest);
    e.be.create(&spec).await.unwrap();
    let session = state(&e, &spec).await;
    let arts = e.tmp.path().join("a");
    e.be.pause(&spec.id, &arts, true).await.unwrap();
    let held = e.be.standby(&spec.id).expect("held");
    assert_eq!(held.until_ms, i64::MAX, "kept frozen: no end");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(e.be.housekeeping().await.is_empty());
    e.be.resume(&spec, &arts).await.unwrap();
    assert!(e.be.standby(&spec.id).is_none(), "a resume ends the hold");
    // The same shell continues: its variable is there.
    e.be.session_write(&spec.id, &session, b"echo v=$v\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let t = std::time::Instant::now();
    while !String::from_utf8_lossy(&got).contains("v=42") && t.elapsed() < wait() {
        let o =
            e.be.session_read(&spec.id, &session, 0, wait())
                .await
                .unwrap();
        got = o.data;
    }
    assert!(
        String::from_utf8_lossy(&got).contains("v=42"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_within_the_window_continues_and_a_release_ends_at_once() {
    let e = env_with("frozenresume", |c| {
        c.frozen_window = Duration::from_secs(600)
    });
    let spec = e.create().await;
    let arts = e.tmp.path().join("a");
    e.be.pause(&spec.id, &arts, true).await.unwrap();
    e.be.resume(&spec, &arts).await.unwrap();
    assert!(e.be.standby(&spec.id).is_none());
    // Paused again, then released by the server (an eviction): at once.
    e.be.pause(&spec.id, &arts, true).await.unwrap();
    assert!(e.be.release_standby(&spec.id).await.unwrap());
    assert!(!e.be.release_standby(&spec.id).await.unwrap(), "idempotent");
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    // A filesystem pause holds nothing to begin with.
    e.be.resume(&spec, &arts).await.unwrap();
    e.be.pause(&spec.id, &arts, false).await.unwrap();
    assert!(e.be.standby(&spec.id).is_none());
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}
