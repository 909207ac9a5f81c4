//! Points 7 and 8: forks see the latest file; restore from the store alone.

use super::*;

// ----- point 7 --------------------------------------------------------------------

/// A file written immediately before `POST /fork` is in every child (fork
/// takes a fresh snapshot of the current state), and children are separate.
pub(super) async fn fork_sees_latest_file(b: B) {
    let d = TestDaemon::start(&format!("p7_fork::{}", b.name())).await;
    let h = d.http();
    let id = h.create(manifest(b, json!({"on_idle": "nothing"}))).await;
    // An older snapshot exists: a fork must not use it.
    h.sh(&id, "echo old > state.txt").await;
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/snapshots"),
        Some(json!({})),
    )
    .await;
    let data = content(7, 50_000);
    put_file(&h, &id, "latest.bin", &data).await;
    h.exec(&id, &["sh", "-c", "echo newest > state.txt"]).await;
    let kids = h.fork(&id, 2).await;
    for k in &kids {
        assert_eq!(h.sh(k, "cat state.txt").await, "newest\n", "child {k}");
        assert!(get_file(&h, k, "latest.bin").await == data, "child {k}");
    }
    h.sh(&kids[0], "echo mine > own.txt").await;
    assert_eq!(
        h.sh(&kids[1], "test -e own.txt && echo leaked || echo separate")
            .await,
        "separate\n"
    );
    assert_eq!(h.sh(&id, "cat state.txt").await, "newest\n");
}

// ----- point 8 --------------------------------------------------------------------

/// Restore from the store alone: with the daemon stopped, everything in the
/// data dir but the store (`store/`) and the metadata DB (`meta.db*`) is
/// deleted — in particular `sandboxes/<id>` — and the daemon restarted. The
/// paused sandbox resumes (files; on the microVM also a python variable), and
/// a user snapshot restores into a new sandbox. The harness's own
/// `daemon.log` is kept (it is the test's log, not daemon state).
pub(super) async fn restore_from_store_alone(b: B) {
    let mut d = TestDaemon::start(&format!("p8_store_alone::{}", b.name())).await;
    let mut h = d.http();
    let id = h.create(manifest(b, json!({"on_idle": "nothing"}))).await;
    let data = content(8, 200_000);
    put_file(&h, &id, "data.bin", &data).await;
    h.sh(&id, "echo from-exec > note.txt").await;
    let py = start_session(&h, &id, &["python3", "-i", "-u", "-q"]).await;
    h.send(&id, &py, "v = 'in memory'\nprint('ok', v)\n").await;
    let (_, off) = h.session_until(&id, &py, 0, "ok in memory").await;
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    let snap = snap["id"].as_str().unwrap().to_string();
    h.sh(&id, "echo after-snapshot > later.txt").await;
    let p = pause(&h, &id).await;
    assert_eq!(p["pause_kind"], "memory");
    d.d.kill9();
    // The node's disk is gone: its mounts (overlay, the writable layer's
    // quota filesystem) go with it, so the files below can be removed.
    common::unmount_under(&d.d.dir);
    let mut removed = Vec::new();
    for e in std::fs::read_dir(&d.d.dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name == "store" || name.starts_with("meta.db") || name == "daemon.log" {
            continue;
        }
        let p = e.path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
        removed.push(name);
    }
    eprintln!("[p8::{}] removed from the data dir: {removed:?}", b.name());
    assert!(removed.contains(&"sandboxes".to_string()), "{removed:?}");
    assert!(!d.d.dir.join("sandboxes").join(&id).exists());
    h = d.restart().await;
    let st = h.state(&id).await;
    assert_eq!(st["state"], "paused", "{st}");
    // Resume from the store.
    assert!(get_file(&h, &id, "data.bin").await == data);
    assert_eq!(
        h.sh(&id, "cat note.txt later.txt").await,
        "from-exec\nafter-snapshot\n"
    );
    if b == B::Microvm {
        h.send(&id, &py, "print('still', v)\n").await;
        h.session_until(&id, &py, off, "still in memory").await;
    }
    // Restore the user snapshot into a new sandbox.
    let child = h
        .ok("POST", &format!("/v1/snapshots/{snap}/restore"), None)
        .await;
    let child = child["id"].as_str().unwrap();
    assert!(get_file(&h, child, "data.bin").await == data);
    assert_eq!(
        h.sh(
            child,
            "cat note.txt; test -e later.txt && echo later || echo not-later"
        )
        .await,
        "from-exec\nnot-later\n"
    );
}
