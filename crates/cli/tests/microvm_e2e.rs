//! Issue 3 through the real daemon: a microVM sandbox is paused (its QEMU
//! gone), resumed mid-execution, and forked. Needs the guest image
//! (STASIS_IMAGE_DIR, set by scripts/test.sh); without it the test says so.

mod common;

use common::Daemon;
use serde_json::json;
use std::time::Duration;

fn image_available() -> bool {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(_) => true,
        None => {
            eprintln!("microVM end-to-end test NOT RUN: STASIS_IMAGE_DIR is not set (scripts/test.sh sets it)");
            false
        }
    }
}

#[tokio::test]
async fn microvm_pause_resume_mid_execution_and_fork() {
    if !image_available() {
        return;
    }
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    // A counter that runs in the background, and an interpreter with state.
    // (Renamed into place: a reader never sees the file truncated.)
    h.sh(&id, "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 &").await;
    let s = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["python3", "-i", "-u", "-q"]})),
        )
        .await;
    let sid = s["id"].as_str().unwrap().to_string();
    h.send(&id, &sid, "secret = 'kept-in-ram'; print('ready')\n")
        .await;
    let (_, off) = h.session_until(&id, &sid, 0, "ready").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before: u64 = h.sh(&id, "cat /tmp/count").await.trim().parse().unwrap();
    assert!(before > 0);
    let boot_id = h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await;

    let p = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(p["state"], "paused");
    assert_eq!(p["pause_kind"], "memory");
    // A paused microVM has no process, no CPU, no RAM on the host.
    let u = h
        .ok("GET", &format!("/v1/sandboxes/{id}/usage"), None)
        .await;
    assert_eq!(u["host_processes"], 0, "{u}");
    assert_eq!(u["rss_bytes"], 0, "{u}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The next request resumes it: the counter continued from where it was
    // (not restarted: same boot), and the interpreter kept its variable.
    let after: u64 = h.sh(&id, "cat /tmp/count").await.trim().parse().unwrap();
    assert!(after >= before, "counter went back: {before} -> {after}");
    assert_eq!(
        h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await,
        boot_id,
        "the guest rebooted"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later: u64 = h.sh(&id, "cat /tmp/count").await.trim().parse().unwrap();
    assert!(
        later > after,
        "counter stopped after resume: {after} -> {later}"
    );
    h.send(&id, &sid, "print('secret is', secret)\n").await;
    h.session_until(&id, &sid, off, "secret is kept-in-ram")
        .await;
    // Guest wall clock follows the host after the pause.
    let guest: f64 = h.sh(&id, "date +%s.%N").await.trim().parse().unwrap();
    let host = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (guest - host).abs() < 2.0,
        "guest clock off by {} s",
        guest - host
    );

    // Fork 2 from a fresh snapshot: both start with the state, then diverge.
    h.sh(&id, "echo parent > /workspace/lineage").await;
    let kids = h.fork(&id, 2).await;
    for (i, k) in kids.iter().enumerate() {
        assert_eq!(h.sh(k, "cat /workspace/lineage").await, "parent\n");
        h.sh(k, &format!("echo child{i} > /workspace/mine")).await;
    }
    assert_eq!(h.sh(&kids[0], "cat /workspace/mine").await, "child0\n");
    assert_eq!(h.sh(&kids[1], "cat /workspace/mine").await, "child1\n");
    assert_ne!(
        h.sh(&kids[0], "hostname").await,
        h.sh(&kids[1], "hostname").await,
        "forks share an identity"
    );
    // The parent is untouched by its children.
    assert_eq!(
        h.sh(&id, "test -e /workspace/mine && echo leaked || echo clean")
            .await,
        "clean\n"
    );
    for k in &kids {
        h.ok("DELETE", &format!("/v1/sandboxes/{k}"), None).await;
    }
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}

#[tokio::test]
async fn microvm_whose_qemu_dies_goes_to_failed_with_a_reason() {
    if !image_available() {
        return;
    }
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    h.sh(&id, "echo hi > /workspace/x").await;
    // Kill this sandbox's QEMU from outside.
    let out = std::process::Command::new("pkill")
        .args(["-9", "-f", &format!("stasis-{id}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "no QEMU process named after {id}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["true"], "timeout_ms": 20000})),
        )
        .await;
    assert!(
        r.status >= 400,
        "exec on a dead VM answered {}: {}",
        r.status,
        r.body
    );
    assert!(r.body["error"]["message"].is_string(), "{}", r.body);
    let st = h.wait_state(&id, "failed", Duration::from_secs(60)).await;
    assert!(
        st["reason"].as_str().unwrap_or("").contains("VM is gone"),
        "{st}"
    );
    // It can still be destroyed cleanly.
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}
