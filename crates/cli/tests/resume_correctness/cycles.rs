//! Points 1 and 2: pause/resume cycles keep every byte.

use super::*;

// ----- points 1 and 2 -----------------------------------------------------------

/// 20 pause/resume cycles (configurable with `STASIS_RESUME_CYCLES`), half by
/// the idle reaper and half by `POST /pause`; a quarter of the resumes are
/// explicit (`POST /resume`), the others transparent (the next request). Each
/// cycle writes a new file through the files API and appends to two old ones
/// through exec. The daemon is killed -9 and restarted once while the sandbox
/// is paused and once while it runs. At the end every byte of every file is
/// compared, in the sandbox and in a new sandbox restored from a snapshot of
/// it; the audit log shows every pause and every resume, and no resume failed.
pub(super) async fn cycles_keep_every_byte(b: B) {
    let n: usize = std::env::var("STASIS_RESUME_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
        .max(2);
    let mut d = TestDaemon::start(&format!("p1_p2_cycles::{}", b.name())).await;
    let mut h = d.http();
    let idle_secs = 4;
    let created = h
        .ok(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": manifest(b, json!({"idle_timeout_secs": idle_secs, "on_idle": "pause"}))})),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_string();
    let policy = policy_of(&created);
    // Daemon restarts (kill -9): once while paused, and twice while running
    // (both in idle-pause cycles): right after the first resume — the VM then
    // runs on the RAM file of its first pause — and later on.
    let restart_paused = n / 3;
    let restart_running = [1, (2 * n / 3) | 1];
    let mut want: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    want.insert("log.txt".into(), Vec::new());
    let (mut idle_pauses, mut explicit_pauses, mut resumes) = (0usize, 0usize, 0usize);
    let mut resume_ms = Vec::new();
    let mut pause_ms = Vec::new();
    let mut expect_kind = "memory";
    for i in 0..n {
        // The sandbox is paused here (except before the first cycle).
        if i > 0 {
            let st = h.state(&id).await;
            assert_eq!(st["state"], "paused", "cycle {i}: {st}");
            assert_eq!(st["pause_kind"], expect_kind, "cycle {i}: {st}");
            assert_eq!(policy_of(&st), policy, "cycle {i}: the policy changed");
        }
        let t = Instant::now();
        if i > 0 && i % 4 == 1 {
            let r = h
                .ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
                .await;
            assert_eq!(r["state"], "running", "cycle {i}: explicit resume: {r}");
        }
        // New file through the files API (the transparent resume happens here).
        let name = format!("cycles/f{i:02}.bin");
        let data = content(i, 1000 + 3001 * i);
        put_file(&h, &id, &name, &data).await;
        if i > 0 {
            resumes += 1;
            resume_ms.push(t.elapsed().as_millis() as u64);
        }
        want.insert(name, data);
        // Append to the oldest file and to one from half-way back.
        let old = format!("cycles/f{:02}.bin", i / 2);
        let line = format!("cycle {i:02} appended\n");
        h.sh(
            &id,
            &format!("printf '{line}' >> log.txt && printf '+{i}' >> {old} && sync"),
        )
        .await;
        want.get_mut("log.txt")
            .unwrap()
            .extend_from_slice(line.as_bytes());
        want.get_mut(&old)
            .unwrap()
            .extend_from_slice(format!("+{i}").as_bytes());
        assert_eq!(h.state(&id).await["state"], "running", "cycle {i}");
        // A cheap check every cycle: the oldest file and this cycle's old one.
        assert_eq!(
            get_file(&h, &id, "log.txt").await,
            want["log.txt"],
            "cycle {i}"
        );
        assert_eq!(get_file(&h, &id, &old).await, want[&old], "cycle {i}");
        if restart_running.contains(&i) {
            h = d.restart().await;
            let st = h.state(&id).await;
            assert_eq!(policy_of(&st), policy, "restart changed the policy");
            // Its QEMU (microVM) or its supervisor (process) survived the
            // daemon and was re-attached.
            assert_eq!(st["state"], "running", "after restart: {st}");
        }
        let tp = Instant::now();
        if i % 2 == 0 {
            let v = pause(&h, &id).await;
            assert_eq!(v["pause_kind"], "memory", "cycle {i}: {v}");
            explicit_pauses += 1;
            expect_kind = "memory";
        } else {
            let v = h.wait_state(&id, "paused", b.slow()).await;
            assert_eq!(v["pause_kind"], "memory", "cycle {i}: {v}");
            idle_pauses += 1;
            expect_kind = "memory";
        }
        pause_ms.push(tp.elapsed().as_millis() as u64);
        // Some explicit pauses drop the node's own files (microVM), so the
        // next resume comes from the store: the cycles go all three ways
        // back (an idle pause keeps the VM in standby, an explicit one keeps
        // the local files).
        if b == B::Microvm && i % 6 == 4 {
            h.ok("POST", &format!("/v1/sandboxes/{id}/evict"), None)
                .await;
        }
        if i == restart_paused {
            let before = h.state(&id).await;
            h = d.restart().await;
            let after = h.state(&id).await;
            assert_eq!(after["state"], "paused", "{after}");
            assert_eq!(after["pause_snapshot"], before["pause_snapshot"]);
            assert_eq!(after["pause_kind"], before["pause_kind"]);
            assert_eq!(policy_of(&after), policy, "restart changed the policy");
        }
        eprintln!(
            "[cycles::{}] cycle {i}/{n} done ({} pause, resume {:?} ms, pause {:?} ms)",
            b.name(),
            if i % 2 == 0 { "explicit" } else { "idle" },
            resume_ms.last(),
            pause_ms.last()
        );
    }
    // Every byte of every file, after the last pause (transparent resume).
    let t = Instant::now();
    check_files(&h, &id, &want, "after the last cycle").await;
    resumes += 1;
    resume_ms.push(t.elapsed().as_millis() as u64);
    // The audit log saw each pause and each resume; no resume failed.
    let entries = audit(&h, &id).await;
    let count = |action: &str, why: Option<&str>| {
        entries
            .iter()
            .filter(|e| {
                e["action"] == action && why.is_none_or(|w| e["detail"]["why"].as_str() == Some(w))
            })
            .count()
    };
    assert_eq!(count("pause", Some("idle")), idle_pauses, "idle pauses");
    assert_eq!(
        count("pause", Some("explicit")),
        explicit_pauses,
        "explicit pauses"
    );
    assert_eq!(count("resume", None), resumes, "resumes");
    let paths: BTreeMap<String, usize> =
        entries
            .iter()
            .filter(|e| e["action"] == "resume")
            .fold(BTreeMap::new(), |mut m, e| {
                *m.entry(e["detail"]["path"].as_str().unwrap_or("?").to_string())
                    .or_default() += 1;
                m
            });
    eprintln!("[cycles::{}] resumes by path: {paths:?}", b.name());
    if b == B::Microvm && n >= 8 {
        for p in ["standby", "local", "store"] {
            assert!(
                paths.get(p).copied().unwrap_or(0) > 0,
                "no {p} resume: {paths:?}"
            );
        }
    }
    let log = d.d.log();
    assert!(
        !log.contains("resume failed"),
        "a resume failed: {}",
        d.d.log_tail(80)
    );
    // The last state, snapshotted and restored into a new sandbox.
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    let snap_id = snap["id"].as_str().unwrap();
    let child = h
        .ok("POST", &format!("/v1/snapshots/{snap_id}/restore"), None)
        .await;
    let child = child["id"].as_str().unwrap();
    check_files(&h, child, &want, "in the restored sandbox").await;
    let total: usize = want.values().map(|v| v.len()).sum();
    eprintln!(
        "[cycles::{}] {n} cycles ({idle_pauses} idle + {explicit_pauses} explicit pauses, {resumes} resumes, 3 daemon restarts), {} files / {total} bytes intact in the sandbox and its restore; resume ms {:?}; pause ms {:?}",
        b.name(),
        want.len(),
        resume_ms,
        pause_ms
    );
}
