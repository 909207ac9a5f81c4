//! Point 5: the guest clock follows the host after pause and restore.

use super::*;

// ----- point 5 --------------------------------------------------------------------

/// Guest wall clock vs host: `date +%s.%N` in the guest is bracketed by host
/// times taken before and after the exec; allowed skew 1 s.
async fn clock_skew(h: &Http, id: &str) -> f64 {
    let t0 = now_secs();
    let out = h.sh(id, "date +%s.%N").await;
    let t1 = now_secs();
    let g: f64 = out.trim().parse().unwrap();
    if g < t0 {
        g - t0
    } else if g > t1 {
        g - t1
    } else {
        0.0
    }
}

async fn guest_monotonic(h: &Http, id: &str) -> f64 {
    h.sh(id, "cut -d' ' -f1 /proc/uptime")
        .await
        .trim()
        .parse()
        .unwrap()
}

/// Pause, wait 5 s, resume: the guest's wall clock is within 1 s of the
/// host's; the same after restoring a snapshot 5 s after it was taken.
///
/// Monotonic clocks, as observed: on the microVM the guest's CLOCK_MONOTONIC
/// (and /proc/uptime) does not advance while the sandbox is paused — the
/// guest's clocks stop with its vCPUs when QEMU stops, the migrated state
/// carries the virtual clock, and a resume continues it where it stopped;
/// only the wall clock (CLOCK_REALTIME) is stepped to the host's by the agent
/// before the first request. So intervals measured with the monotonic clock
/// inside the guest exclude paused time; timestamps (`time.time()`, `date`,
/// TLS validity checks) are right. On the process backend the sandbox shares
/// the host kernel: both clocks simply keep running during the freeze.
pub(super) async fn guest_clock_follows_host(b: B) {
    let d = TestDaemon::start(&format!("p5_clock::{}", b.name())).await;
    let h = d.http();
    let id = h.create(manifest(b, json!({"on_idle": "nothing"}))).await;
    let skew0 = clock_skew(&h, &id).await;
    assert!(skew0.abs() < 1.0, "skew before any pause: {skew0}");
    let m0 = guest_monotonic(&h, &id).await;
    let w0 = Instant::now();
    pause(&h, &id).await;
    let paused_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
        .await;
    let paused_for = paused_at.elapsed().as_secs_f64();
    let skew = clock_skew(&h, &id).await;
    let m1 = guest_monotonic(&h, &id).await;
    let wall = w0.elapsed().as_secs_f64();
    let mono = m1 - m0;
    eprintln!(
        "[p5::{}] after a {paused_for:.1} s pause: wall-clock skew {skew:.3} s; guest monotonic advanced {mono:.1} s over {wall:.1} s of host time",
        b.name()
    );
    assert!(skew.abs() < 1.0, "guest clock off by {skew} s after resume");
    if b == B::Microvm {
        assert!(
            mono < wall - 4.0,
            "guest monotonic clock advanced during the pause: {mono} s of {wall} s"
        );
    } else {
        assert!(mono > wall - 1.0, "{mono} vs {wall}");
    }
    if b == B::Microvm {
        // From standby (the stopped QEMU kept and continued): the clock is
        // set before the guest serves the first request after the resume,
        // even though the resume no longer waits for it.
        let v = h
            .ok(
                "POST",
                &format!("/v1/sandboxes/{id}/pause"),
                Some(json!({"keep_memory": true, "standby": true})),
            )
            .await;
        assert_eq!(v["state"], "paused", "{v}");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let r = h
            .ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
            .await;
        let skew = clock_skew(&h, &id).await;
        eprintln!(
            "[p5::microvm] after 5 s in standby ({}): skew {skew:.3} s",
            r["timing"]["breakdown"]
        );
        assert!(
            skew.abs() < 1.0,
            "guest clock off by {skew} s after standby"
        );
    }
    // Restore 5 s after the snapshot was taken.
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    let skew_snap = clock_skew(&h, &id).await;
    assert!(skew_snap.abs() < 1.0, "skew after snapshot: {skew_snap}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let child = h
        .ok(
            "POST",
            &format!("/v1/snapshots/{}/restore", snap["id"].as_str().unwrap()),
            None,
        )
        .await;
    let child = child["id"].as_str().unwrap();
    let skew_child = clock_skew(&h, child).await;
    eprintln!(
        "[p5::{}] restored 5 s after the snapshot: skew {skew_child:.3} s",
        b.name()
    );
    assert!(
        skew_child.abs() < 1.0,
        "restored guest clock off by {skew_child} s"
    );
}
