//! Point 3: idle policies, paths, filesystem, destroy and TTL.

use super::*;

// ----- point 3 --------------------------------------------------------------------

/// "Keep memory" on the idle path, and reads never change the policy: the
/// idle reaper pauses with memory (a python variable survives); GET and list
/// of a paused sandbox leave it paused; session list/read reconnect (resume)
/// it; neither, nor a daemon restart, changes its manifest, and the same idle
/// policy pauses it again afterwards.
pub(super) async fn idle_keep_memory_and_reads_never_change_policy(b: B) {
    let mut d = TestDaemon::start(&format!("p3_idle_keep_memory::{}", b.name())).await;
    let mut h = d.http();
    let created = h
        .ok(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": manifest(b, json!({"idle_timeout_secs": 3, "on_idle": "pause", "paused_ttl_secs": 3600}))})),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_string();
    let policy = policy_of(&created);
    let sid = start_session(&h, &id, &["python3", "-i", "-u", "-q"]).await;
    h.send(&id, &sid, "x = 6 * 7\nprint('set', x)\n").await;
    let (_, off) = h.session_until(&id, &sid, 0, "set 42").await;
    let p = h.wait_state(&id, "paused", b.slow()).await;
    assert_eq!(
        p["pause_kind"], "memory",
        "idle pause did not keep memory: {p}"
    );
    wait_audit(&h, &id, "pause/idle", |e| {
        e["action"] == "pause" && e["detail"]["why"] == "idle"
    })
    .await;
    // Reading a paused sandbox: it stays paused, policy unchanged.
    for _ in 0..3 {
        let g = h.state(&id).await;
        assert_eq!(g["state"], "paused");
        assert_eq!(policy_of(&g), policy);
        let l = h.ok("GET", "/v1/sandboxes", None).await;
        let me = l
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id.as_str());
        assert_eq!(policy_of(me.unwrap()), policy);
        let l = h.ok("GET", "/v1/sandboxes?state=paused", None).await;
        assert!(l.as_array().unwrap().iter().any(|s| s["id"] == id.as_str()));
    }
    // Reconnecting: list sessions and read output (resumes it).
    let ss = sessions(&h, &id).await;
    assert_eq!(ss.len(), 1, "{ss:?}");
    assert_eq!(ss[0]["id"], sid.as_str());
    h.send(&id, &sid, "print('still', x)\n").await;
    h.session_until(&id, &sid, off, "still 42").await;
    let g = h.state(&id).await;
    assert_eq!(g["state"], "running");
    assert_eq!(policy_of(&g), policy, "reconnecting changed the policy");
    // A restart changes nothing either; the same policy pauses it again, with memory.
    h = d.restart().await;
    assert_eq!(policy_of(&h.state(&id).await), policy);
    let p = h.wait_state(&id, "paused", b.slow()).await;
    assert_eq!(p["pause_kind"], "memory", "{p}");
    h.send(&id, &sid, "print('again', x)\n").await;
    h.session_until(&id, &sid, off, "again 42").await;
    assert_eq!(policy_of(&h.state(&id).await), policy);
}

/// `on_idle: pause_filesystem` (files survive, processes do not),
/// `on_idle: destroy`, and `paused_ttl_secs` (a paused sandbox is destroyed
/// with its snapshot and directory). `max_lifetime_secs` is in p6.
pub(super) async fn policy_paths_filesystem_destroy_ttl(b: B) {
    let d = TestDaemon::start(&format!("p3_policy_paths::{}", b.name())).await;
    let h = d.http();
    // Each sandbox is used as soon as it exists: with a 3 s idle window, one
    // created early could otherwise go idle while the others still boot.
    let (fs, gone, ttl) = tokio::join!(
        async {
            let id = h
                .create(manifest(
                    b,
                    json!({"idle_timeout_secs": 3, "on_idle": "pause_filesystem"}),
                ))
                .await;
            let a = h
                .sh(
                    &id,
                    "echo durable > f.txt; sync; sleep 1000 >/dev/null 2>&1 & echo started",
                )
                .await;
            assert_eq!(a, "started\n");
            id
        },
        async {
            let id = h
                .create(manifest(
                    b,
                    json!({"idle_timeout_secs": 3, "on_idle": "destroy"}),
                ))
                .await;
            h.sh(&id, "echo x > f.txt").await;
            id
        },
        async {
            let id = h
                .create(manifest(
                    b,
                    json!({"idle_timeout_secs": 3, "on_idle": "pause", "paused_ttl_secs": 5}),
                ))
                .await;
            h.sh(&id, "echo x > f.txt").await;
            id
        },
    );
    let fs_policy = policy_of(&h.state(&fs).await);
    let (p_fs, _, p_ttl) = tokio::join!(
        h.wait_state(&fs, "paused", b.slow()),
        h.wait_state(&gone, "destroyed", b.slow()),
        h.wait_state(&ttl, "paused", b.slow()),
    );
    assert_eq!(p_fs["pause_kind"], "filesystem", "{p_fs}");
    assert_eq!(p_ttl["pause_kind"], "memory", "{p_ttl}");
    assert!(
        !d.d.dir.join("sandboxes").join(&gone).exists(),
        "destroyed sandbox dir left behind"
    );
    // pause_filesystem: files come back, processes do not; policy unchanged.
    assert_eq!(h.sh(&fs, "cat f.txt").await, "durable\n");
    let ps = h.sh(&fs, "ps -eo args= || true").await;
    assert!(!ps.contains("sleep 1000"), "{ps}");
    assert_eq!(policy_of(&h.state(&fs).await), fs_policy);
    // paused_ttl_secs: destroyed, snapshot and directory removed.
    let snap = p_ttl["pause_snapshot"].as_str().unwrap().to_string();
    assert_eq!(
        p_ttl["expires_at_ms"].as_i64().unwrap() - p_ttl["paused_at_ms"].as_i64().unwrap(),
        5000
    );
    h.wait_state(&ttl, "destroyed", b.slow()).await;
    assert_eq!(
        h.call("GET", &format!("/v1/snapshots/{snap}"), None)
            .await
            .status,
        404
    );
    assert!(!d.d.dir.join("sandboxes").join(&ttl).exists());
    for id in [&gone, &ttl] {
        wait_audit(&h, id, "expire", |e| e["action"] == "expire").await;
    }
}
