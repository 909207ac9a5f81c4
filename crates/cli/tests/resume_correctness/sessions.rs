//! Points 4 and 10: sessions and background processes continue, across pauses and a daemon kill -9.

use super::*;

// ----- point 4 --------------------------------------------------------------------

fn ticks(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.trim().parse().ok()))
        .collect()
}

/// A session printing ticks and a background process started by exec keep
/// running across pause/resume and a daemon restart while paused: the session is listed with the same id, its output stream
/// continues at growing offsets with no tick missing or repeated, and the
/// background process has the same pid and keeps writing.
pub(super) async fn sessions_and_background_processes_continue(b: B) {
    let mut d = TestDaemon::start(&format!("p4_sessions::{}", b.name())).await;
    let mut h = d.http();
    let id = h.create(manifest(b, json!({"on_idle": "nothing"}))).await;
    let ticker = start_session(
        &h,
        &id,
        &[
            "sh",
            "-c",
            "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.3; done",
        ],
    )
    .await;
    let py = start_session(&h, &id, &["python3", "-i", "-u", "-q"]).await;
    h.send(&id, &py, "n = 41\n").await;
    let bg = h
        .sh(
            &id,
            "nohup sh -c 'while :; do echo x >> bg.log; sleep 0.3; done' >/dev/null 2>&1 </dev/null & echo $!",
        )
        .await;
    let bg_pid = bg.trim().to_string();
    let (text, off1) = h.session_until(&id, &ticker, 0, "tick 3\n").await;
    let before: Vec<String> = sessions(&h, &id)
        .await
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        before.contains(&ticker) && before.contains(&py),
        "{before:?}"
    );
    let last_before = *ticks(&text).last().unwrap();
    let bg_lines_before = h
        .sh(&id, "wc -l < bg.log")
        .await
        .trim()
        .parse::<u64>()
        .unwrap();
    pause(&h, &id).await;
    h = d.restart().await;
    assert_eq!(h.state(&id).await["state"], "paused");
    // Listing sessions reconnects (resumes) it: same ids, still running.
    let after = sessions(&h, &id).await;
    let mut ids: Vec<String> = after
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    let mut want = before.clone();
    ids.sort();
    want.sort();
    assert_eq!(ids, want, "session ids changed across resume");
    for s in &after {
        assert_eq!(s["running"], true, "{s}");
    }
    // The tick stream continues from where it was, at growing offsets.
    let target = format!("tick {}\n", last_before + 5);
    let (more, off2) = h.session_until(&id, &ticker, off1, &target).await;
    assert!(off2 > off1);
    let all = h
        .ok(
            "GET",
            &format!("/v1/sandboxes/{id}/sessions/{ticker}/output?offset=0"),
            None,
        )
        .await;
    let all_ticks = ticks(all["data"].as_str().unwrap());
    let expected: Vec<u64> = (0..all_ticks.len() as u64).collect();
    assert_eq!(all_ticks, expected, "the tick stream has a gap or repeat");
    assert!(ticks(&more).first().copied() > Some(last_before) || more.is_empty());
    // The python session still has its variable.
    h.send(&id, &py, "print('n is', n + 1)\n").await;
    h.session_until(&id, &py, 0, "n is 42").await;
    // The background process: same pid, still writing.
    assert_eq!(
        h.sh(&id, &format!("kill -0 {bg_pid} && echo alive")).await,
        "alive\n"
    );
    let n1 = h
        .sh(&id, "wc -l < bg.log")
        .await
        .trim()
        .parse::<u64>()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n2 = h
        .sh(&id, "wc -l < bg.log")
        .await
        .trim()
        .parse::<u64>()
        .unwrap();
    assert!(
        n1 >= bg_lines_before && n2 > n1,
        "background process stopped writing: {bg_lines_before} {n1} {n2}"
    );
}

/// The daemon is killed -9 while a sandbox runs an interpreter session
/// holding a variable, a ticking session (a background job with buffered
/// output) and a background process started by exec; it stays down for a
/// while and is restarted on the same data dir. The sandbox is still
/// running, with the same sessions; the interpreter still has its variable;
/// the tick stream has every tick, including those printed while no daemon
/// was there; the background process has the same pid and keeps writing;
/// pause, resume and destroy work afterwards.
pub(super) async fn restart_keeps_sessions_jobs_and_output(b: B) {
    let mut d = TestDaemon::start(&format!("p10_restart_running::{}", b.name())).await;
    let mut h = d.http();
    let id = h.create(manifest(b, json!({"on_idle": "nothing"}))).await;
    let py = start_session(&h, &id, &["python3", "-i", "-u", "-q"]).await;
    h.send(&id, &py, "n = 41\n").await;
    let ticker = start_session(
        &h,
        &id,
        &[
            "sh",
            "-c",
            "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done",
        ],
    )
    .await;
    let bg_pid = h
        .sh(
            &id,
            "nohup sh -c 'while :; do echo x >> bg.log; sleep 0.2; done' >/dev/null 2>&1 </dev/null & echo $!",
        )
        .await
        .trim()
        .to_string();
    let (text, off1) = h.session_until(&id, &ticker, 0, "tick 2\n").await;
    let last_before = *ticks(&text).last().unwrap();
    // Down for a while: the ticker goes on printing into its supervisor
    // (process) or guest agent (microVM) with nobody reading.
    d.d.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    h = d.restart().await;
    assert_eq!(h.state(&id).await["state"], "running");
    let ss = sessions(&h, &id).await;
    let mut ids: Vec<&str> = ss.iter().map(|s| s["id"].as_str().unwrap()).collect();
    ids.sort();
    let mut want = vec![py.as_str(), ticker.as_str()];
    want.sort();
    assert_eq!(ids, want, "{ss:?}");
    assert!(ss.iter().all(|s| s["running"] == true), "{ss:?}");
    // What was printed while the daemon was down is there, without a gap.
    let target = format!("tick {}\n", last_before + 5);
    let (_, off2) = h.session_until(&id, &ticker, off1, &target).await;
    assert!(off2 > off1);
    let all = h
        .ok(
            "GET",
            &format!("/v1/sandboxes/{id}/sessions/{ticker}/output?offset=0"),
            None,
        )
        .await;
    let t = ticks(all["data"].as_str().unwrap());
    assert_eq!(t, (0..t.len() as u64).collect::<Vec<_>>(), "gap or repeat");
    // The interpreter kept its variable.
    h.send(&id, &py, "print('n is', n + 1)\n").await;
    h.session_until(&id, &py, 0, "n is 42").await;
    // The background process: same pid, still writing.
    assert_eq!(
        h.sh(&id, &format!("kill -0 {bg_pid} && echo alive")).await,
        "alive\n"
    );
    let count = |s: String| s.trim().parse::<u64>().unwrap();
    let n1 = count(h.sh(&id, "wc -l < bg.log").await);
    let t0 = Instant::now();
    while count(h.sh(&id, "wc -l < bg.log").await) <= n1 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "bg.log stopped growing"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Pause (with memory) and resume still work, and the session goes on.
    let p = pause(&h, &id).await;
    assert_eq!(p["pause_kind"], "memory", "{p}");
    h.send(&id, &py, "print('after', n)\n").await;
    h.session_until(&id, &py, 0, "after 41").await;
    assert_eq!(h.state(&id).await["state"], "running");
    // Destroy: nothing of the sandbox is left (process: no process in the
    // daemon's cgroups, its supervisor included).
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    h.wait_state(&id, "destroyed", b.slow()).await;
    if b == B::Process {
        let left = common::pids_in_cgroups(&d.d.cgroup_parent);
        assert!(left.is_empty(), "processes left after destroy: {left:?}");
    }
}
