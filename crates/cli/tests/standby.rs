//! Standby under the node's RAM cap (microVM): with a cap that holds one
//! stopped QEMU, each new standby releases the one held longest; a released
//! sandbox is an ordinary paused one (its pause was stored before the hold)
//! and every sandbox comes back with its memory (same boot, the same
//! process) and its files, whichever way back it takes. Needs the guest
//! image (STASIS_IMAGE_DIR).

mod common;

use common::Daemon;
use serde_json::json;

#[tokio::test]
async fn standby_eviction_under_the_ram_cap_never_loses_a_sandbox() {
    if std::env::var_os("STASIS_IMAGE_DIR").is_none() {
        eprintln!("standby test NOT RUN: STASIS_IMAGE_DIR is not set (scripts/test.sh sets it)");
        return;
    }
    let mut d = Daemon::start(&[]).await;
    let h = d.http();
    let mut boxes = Vec::new();
    for k in 0..3 {
        let id = h
            .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing", "standby_secs": 600}}))
            .await;
        h.sh(&id, &format!("echo box-{k} > /workspace/who; sync"))
            .await;
        h.sh(
            &id,
            "nohup sh -c 'echo $$ > /tmp/pid; exec sleep 100000' >/dev/null 2>&1 & sleep 0.3",
        )
        .await;
        let boot = h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await;
        let pid = h.sh(&id, "cat /tmp/pid").await.trim().to_string();
        boxes.push((id, boot, pid));
    }
    // A cap that holds one of these guests but not two: the daemon restarted
    // with it (the running QEMUs are re-attached).
    let mut rss = 0u64;
    for (id, _, _) in &boxes {
        let u = h
            .ok("GET", &format!("/v1/sandboxes/{id}/usage"), None)
            .await;
        rss = rss.max(u["rss_bytes"].as_u64().unwrap());
    }
    let cap_mb = (rss * 3 / 2) >> 20;
    eprintln!(
        "guest RSS up to {} MiB: standby cap {cap_mb} MiB",
        rss >> 20
    );
    d.set_extra(&["--standby-max-mb", &cap_mb.to_string()]);
    d.restart().await;
    let h = d.http();
    for (i, (id, _, _)) in boxes.iter().enumerate() {
        let p = h
            .ok(
                "POST",
                &format!("/v1/sandboxes/{id}/pause"),
                Some(json!({"standby": true})),
            )
            .await;
        assert_eq!(p["state"], "paused", "{p}");
        // The newest is held; every older one has been released.
        for (j, (other, _, _)) in boxes.iter().enumerate().take(i + 1) {
            let st = h.state(other).await;
            assert_eq!(st["state"], "paused", "{st}");
            assert_eq!(
                st.get("standby").is_some_and(|s| !s.is_null()),
                j == i,
                "after pausing {i}: sandbox {j}: {st}"
            );
        }
    }
    // Back, each of them: the newest from standby, the others from their
    // local files. Nothing lost.
    for (k, (id, boot, pid)) in boxes.iter().enumerate().rev() {
        let r = h
            .ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
            .await;
        let want = if k == boxes.len() - 1 {
            "path_standby"
        } else {
            "path_local"
        };
        assert_eq!(r["timing"]["breakdown"][want], 1, "sandbox {k}: {r}");
        assert_eq!(h.sh(id, "cat /workspace/who").await, format!("box-{k}\n"));
        assert_eq!(
            &h.sh(id, "cat /proc/sys/kernel/random/boot_id").await,
            boot,
            "sandbox {k} rebooted"
        );
        assert_eq!(
            h.sh(id, &format!("kill -0 {pid} && echo alive")).await,
            "alive\n",
            "sandbox {k}"
        );
    }
    for (id, _, _) in &boxes {
        h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    }
}

/// The process backend's frozen processes, through the real daemon: with
/// `--frozen-secs 0` a memory pause is let go at the reaper's next pass (no
/// process or cgroup left for it on the host), the record says
/// `pause_kind: filesystem` with the reason, the audit says what was lost,
/// and the next request starts it afresh from its files. A sandbox whose
/// manifest asks `keep_frozen` keeps its processes (a background job's pid
/// survives the pause).
#[tokio::test]
async fn frozen_processes_are_let_go_and_the_pause_says_so() {
    let d = Daemon::start(&["--frozen-secs", "0"]).await;
    let h = d.http();
    let id = h
        .create(json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    h.sh(&id, "echo kept > /workspace/f").await;
    let p = h
        .ok("POST", &format!("/v1/sandboxes/{id}/pause"), None)
        .await;
    assert_eq!(p["pause_kind"], "memory", "{p}");
    let mut rec = serde_json::Value::Null;
    for _ in 0..100 {
        rec = h.ok("GET", &format!("/v1/sandboxes/{id}"), None).await;
        if rec["pause_kind"] == "filesystem" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(rec["state"], "paused", "{rec}");
    assert_eq!(rec["pause_kind"], "filesystem", "{rec}");
    assert!(
        rec["reason"]
            .as_str()
            .unwrap_or("")
            .contains("frozen window ended"),
        "{rec}"
    );
    assert!(rec.get("standby").is_none_or(|s| s.is_null()), "{rec}");
    let audit = h.ok("GET", &format!("/v1/audit?target={id}"), None).await;
    let text = audit.to_string();
    assert!(text.contains("pause_downgraded"), "{text}");
    let metrics = h.call("GET", "/metrics", None).await.body;
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(
        metrics.contains("stasis_pauses_downgraded_total 1"),
        "{metrics}"
    );
    // Fresh processes, the same files.
    assert_eq!(h.sh(&id, "cat /workspace/f").await, "kept\n");

    // keep_frozen: the same background process after the pause.
    let kept = h
        .create(
            json!({"backend": "process", "lifecycle": {"on_idle": "nothing", "keep_frozen": true}}),
        )
        .await;
    h.sh(
        &kept,
        "nohup sh -c 'echo $$ > /tmp/pid; exec sleep 100000' >/dev/null 2>&1 & sleep 0.3",
    )
    .await;
    let pid = h.sh(&kept, "cat /tmp/pid").await;
    h.ok("POST", &format!("/v1/sandboxes/{kept}/pause"), None)
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let rec = h.ok("GET", &format!("/v1/sandboxes/{kept}"), None).await;
    assert_eq!(rec["pause_kind"], "memory", "{rec}");
    assert!(rec["standby"]["ram_bytes"].as_u64().is_some(), "{rec}");
    assert_eq!(
        h.sh(&kept, "cat /tmp/pid; kill -0 $(cat /tmp/pid) && echo alive")
            .await,
        format!("{pid}alive\n")
    );
}
