//! Issue 20 item 3: the daemon is killed at every persisted step of a
//! microVM pause (a failpoint aborts it there, as `kill -9` would) and
//! restarted on the same data dir. The sandbox must come back running (its
//! QEMU was still alive) or paused on the newest complete state, with its
//! files and its memory (same boot) intact; on an earlier snapshot, with the
//! progress lost recorded, when the new state is damaged; failed, with a
//! reason, only when nothing restorable exists. Needs the guest image
//! (STASIS_IMAGE_DIR).

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn image_available() -> bool {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(_) => true,
        None => {
            eprintln!(
                "pause crash test NOT RUN: STASIS_IMAGE_DIR is not set (scripts/test.sh sets it)"
            );
            false
        }
    }
}

/// Each crash point, in the order a pause reaches them, and the state the
/// restarted daemon must settle on.
const STEPS: &[(&str, &str)] = &[
    // QEMU alive (running or stopped): continued.
    ("pause.pausing", "running"),
    ("save.stopped", "running"),
    ("save.migrated", "running"),
    ("save.ram-saved", "running"),
    ("pause.meta-written", "running"),
    // QEMU gone, memory state complete: the pause is finished.
    ("pause.quit", "paused"),
    // (from here the VM runs on a disk chain resumed from the store, the
    // node's files dropped first: the flatten runs)
    ("pause.disk-top-copied", "paused"),
    ("pause.disk-committed", "paused"),
    ("pause.disk-exported", "paused"),
    ("pause.staged", "paused"),
    ("pause.intent-written", "paused"),
    ("pause.stored", "paused"),
    ("pause.recorded", "paused"),
];

fn sandbox_dir(d: &Daemon, id: &str) -> PathBuf {
    d.dir.join("sandboxes").join(id)
}

/// Arm `point`, run `script` in the sandbox (which also resumes it), ask
/// for a pause, and check the daemon died there.
async fn crash_pause_at(d: &mut Daemon, id: &str, point: &str, script: &str) {
    crash_pause_with(d, id, point, script, json!({})).await
}

/// [`crash_pause_at`] with the pause request's body.
async fn crash_pause_with(d: &mut Daemon, id: &str, point: &str, script: &str, body: Value) {
    d.envs = vec![("STASIS_FAILPOINT".into(), point.into())];
    d.restart().await;
    d.envs.clear();
    d.http().sh(id, script).await;
    let url = format!("{}/v1/sandboxes/{id}/pause", d.url);
    let r = d
        .client()
        .post(url)
        .json(&body)
        .timeout(Duration::from_secs(120))
        .send()
        .await;
    assert!(
        r.is_err(),
        "the pause was answered ({:?}): failpoint {point} was never reached",
        r.map(|r| r.status())
    );
    let child = d.child.as_mut().unwrap();
    let st = child.wait().unwrap();
    assert!(!st.success(), "daemon exited cleanly at {point}");
}

async fn pause_snapshots_of(h: &common::Http, id: &str) -> Vec<String> {
    let all = h.ok("GET", "/v1/snapshots", None).await;
    all.as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "pause" && s["source_sandbox"] == id)
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

fn assert_no_stage(d: &Daemon, id: &str, point: &str) {
    let stage = sandbox_dir(d, id).join("pause-stage");
    assert!(!stage.exists(), "{point}: {} left behind", stage.display());
}

#[tokio::test]
async fn microvm_pause_survives_a_daemon_crash_at_every_step() {
    if !image_available() {
        return;
    }
    let mut d = Daemon::start(&[]).await;
    let id = d
        .http()
        .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    let h = d.http();
    let boot_id = h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await;
    // RAM-only state: a variable of a shell that keeps running in the guest.
    h.sh(
        &id,
        "nohup sh -c 'echo $$ > /tmp/ram-pid; exec sleep 100000' >/dev/null 2>&1 & sleep 0.5",
    )
    .await;
    let ram_pid = h.sh(&id, "cat /tmp/ram-pid").await;

    for (k, (point, want)) in STEPS.iter().enumerate() {
        if *point == "pause.disk-top-copied" {
            let h = d.http();
            h.ok(
                "POST",
                &format!("/v1/sandboxes/{id}/pause"),
                Some(json!({})),
            )
            .await;
            h.ok("POST", &format!("/v1/sandboxes/{id}/evict"), None)
                .await;
        }
        let mark = format!("echo {k} > /workspace/m-{k}; sync");
        crash_pause_at(&mut d, &id, point, &mark).await;
        d.restart().await;
        let h = d.http();
        let st = h.state(&id).await;
        assert_eq!(st["state"], *want, "crash at {point}: {st}");
        assert_no_stage(&d, &id, point);
        if *want == "paused" {
            assert_eq!(st["pause_kind"], "memory", "{point}: {st}");
            let snaps = pause_snapshots_of(&h, &id).await;
            assert_eq!(
                snaps,
                vec![st["pause_snapshot"].as_str().unwrap().to_string()],
                "{point}: exactly the recorded pause snapshot is kept: {st}"
            );
        }
        // Files and memory as they were at the pause: same boot, the process
        // still there, every marker present.
        assert_eq!(
            h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await,
            boot_id,
            "{point}: the guest rebooted"
        );
        assert_eq!(
            h.sh(&id, &format!("kill -0 {} && echo alive", ram_pid.trim()))
                .await,
            "alive\n",
            "{point}"
        );
        assert_eq!(
            h.sh(&id, &format!("cat /workspace/m-{k}")).await,
            format!("{k}\n"),
            "{point}"
        );
        eprintln!("crash at {point}: {want}, state intact");
    }

    // A stage that does not verify (memory state damaged after the VM quit):
    // paused on the previous pause snapshot, the progress since it lost.
    let h = d.http();
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    let previous = h.state(&id).await["pause_snapshot"].clone();
    let late = "echo late > /workspace/late; sync; sleep 0.3";
    crash_pause_at(&mut d, &id, "pause.disk-exported", late).await;
    damage(&sandbox_dir(&d, &id).join("pause-stage/memory.state"));
    d.restart().await;
    let h = d.http();
    let st = h.state(&id).await;
    assert_eq!(st["state"], "paused", "{st}");
    assert_eq!(st["pause_snapshot"], previous, "{st}");
    let lost = st["progress_lost_ms"].as_i64().unwrap_or(-1);
    assert!(lost >= 300, "progress lost not recorded: {st}");
    assert!(
        st["reason"].as_str().unwrap().contains("progress lost"),
        "{st}"
    );
    assert_no_stage(&d, &id, "damaged stage");
    assert_eq!(
        h.sh(&id, "test -e /workspace/late && echo kept || echo lost")
            .await,
        "lost\n"
    );
    assert_eq!(
        h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await,
        boot_id
    );
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;

    // Nothing restorable at all (first pause, damaged): failed, saying why.
    let id2 = h
        .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    crash_pause_at(&mut d, &id2, "pause.disk-exported", "true").await;
    damage(&sandbox_dir(&d, &id2).join("pause-stage/memory.state"));
    d.restart().await;
    let h = d.http();
    let st: Value = h.state(&id2).await;
    assert_eq!(st["state"], "failed", "{st}");
    assert!(
        st["reason"]
            .as_str()
            .unwrap()
            .contains("no earlier snapshot exists"),
        "{st}"
    );
    h.ok("DELETE", &format!("/v1/sandboxes/{id2}"), None).await;
}

/// A pause into standby (the stopped QEMU kept after the pause is stored),
/// the daemon killed at its steps: before the hold the QEMU is continued;
/// after it, the restarted daemon ends the standby it cannot vouch for
/// (kills the held QEMU), finishes or records the pause, and the next resume
/// comes from the files the pause left on this host (bound to the stored
/// snapshot when the settling recorded it) or from the store, with the same
/// boot, the process still there, every file.
#[tokio::test]
async fn microvm_standby_pause_survives_a_daemon_crash() {
    if !image_available() {
        return;
    }
    let mut d = Daemon::start(&[]).await;
    let id = d
        .http()
        .create(
            json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing", "standby_secs": 600}}),
        )
        .await;
    let h = d.http();
    let boot_id = h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await;
    h.sh(
        &id,
        "nohup sh -c 'echo $$ > /tmp/ram-pid; exec sleep 100000' >/dev/null 2>&1 & sleep 0.5",
    )
    .await;
    let ram_pid = h.sh(&id, "cat /tmp/ram-pid").await;
    let steps: &[(&str, &str, &str)] = &[
        ("pause.meta-written", "running", ""),
        ("pause.staged", "paused", "local"),
        ("pause.stored", "paused", "local"),
        // Recorded, but killed before the local files were bound to the
        // snapshot: they cannot be vouched for, the store's copy resumes.
        ("pause.recorded", "paused", "store"),
    ];
    for (k, (point, want, path)) in steps.iter().enumerate() {
        let mark = format!("echo {k} > /workspace/s-{k}; sync");
        crash_pause_with(&mut d, &id, point, &mark, json!({"standby": true})).await;
        d.restart().await;
        let h = d.http();
        let st = h.state(&id).await;
        assert_eq!(st["state"], *want, "crash at {point}: {st}");
        assert!(st.get("standby").is_none(), "{point}: still held: {st}");
        assert_no_stage(&d, &id, point);
        if *want == "paused" {
            let r = h
                .ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
                .await;
            let key = format!("path_{path}");
            assert_eq!(r["timing"]["breakdown"][&key], 1, "{point}: {r}");
        }
        assert_eq!(
            h.sh(&id, "cat /proc/sys/kernel/random/boot_id").await,
            boot_id,
            "{point}: the guest rebooted"
        );
        assert_eq!(
            h.sh(&id, &format!("kill -0 {} && echo alive", ram_pid.trim()))
                .await,
            "alive\n",
            "{point}"
        );
        assert_eq!(
            h.sh(&id, &format!("cat /workspace/s-{k}")).await,
            format!("{k}\n"),
            "{point}"
        );
        eprintln!("standby crash at {point}: {want}, state intact");
    }
    d.http()
        .ok("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}

/// Flip bytes in the middle of a file (size unchanged).
fn damage(p: &Path) {
    use std::io::{Seek, SeekFrom, Write};
    let len = std::fs::metadata(p).unwrap().len();
    let mut f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(len / 2)).unwrap();
    f.write_all(b"damaged!").unwrap();
}

/// The process backend: its processes live under a supervisor that outlives
/// the daemon, and its writable layer always survives. A crash before the
/// sandbox is frozen leaves it running (the pause is abandoned); a crash after
/// leaves it paused. Either way every file is there and no pause snapshot but
/// the recorded one.
#[tokio::test]
async fn process_pause_survives_a_daemon_crash_at_every_step() {
    let mut d = Daemon::start(&[]).await;
    let id = d
        .http()
        .create(json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    for (k, (point, want)) in [
        ("pause.pausing", "running"),
        ("pause.staged", "paused"),
        ("pause.intent-written", "paused"),
        ("pause.stored", "paused"),
        ("pause.recorded", "paused"),
    ]
    .iter()
    .enumerate()
    {
        crash_pause_at(&mut d, &id, point, &format!("echo {k} > m-{k}")).await;
        d.restart().await;
        let h = d.http();
        let st = h.state(&id).await;
        assert_eq!(st["state"], *want, "crash at {point}: {st}");
        assert_no_stage(&d, &id, point);
        let snaps = pause_snapshots_of(&h, &id).await;
        let recorded: Vec<String> = st["pause_snapshot"]
            .as_str()
            .map(|s| vec![s.to_string()])
            .unwrap_or_default();
        assert_eq!(snaps, recorded, "{point}: {st}");
        for j in 0..=k {
            assert_eq!(
                h.sh(&id, &format!("cat m-{j}")).await,
                format!("{j}\n"),
                "{point}"
            );
        }
    }
    d.http()
        .ok("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
}
