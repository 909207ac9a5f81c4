//! Issue 2 end to end: the real daemon, driven over HTTP and through the CLI,
//! on the process backend.

mod common;

use common::{pids_in_cgroups, Daemon};
use serde_json::json;
use std::time::Duration;

/// Killed processes leave the cgroup asynchronously: allow a moment, then
/// insist that nothing of the sandbox is left.
async fn assert_no_sandbox_processes(parent: &str) {
    for _ in 0..50 {
        if pids_in_cgroups(parent).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("processes left in {parent}: {:?}", pids_in_cgroups(parent));
}

fn process(extra: serde_json::Value) -> serde_json::Value {
    let mut m = json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}});
    if let (Some(m), Some(e)) = (m.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    m
}

#[tokio::test]
async fn demo_runs_end_to_end() {
    let out = std::process::Command::new(common::BIN)
        .args(["demo", "--backend", "process", "--idle-secs", "2", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let steps: Vec<String> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_string())
        .collect();
    assert!(
        steps.iter().any(|s| s.contains("paused automatically")),
        "{steps:?}"
    );
    assert!(
        steps.iter().any(|s| s.contains("python still has x = 42")),
        "{steps:?}"
    );
    assert!(
        steps.iter().any(|s| s.contains("file survived")),
        "{steps:?}"
    );
}

#[tokio::test]
async fn api_errors_are_json_with_codes() {
    let d = Daemon::start(&["--max-file-mb", "1"]).await;
    let h = d.http();
    // Unknown sandbox, malformed id.
    let r = h.call("GET", "/v1/sandboxes/sb-doesnotexist", None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["error"]["code"], "not_found");
    let r = h.call("GET", "/v1/sandboxes/..%2F..%2Fetc", None).await;
    assert_eq!(r.status, 400, "{}", r.body);
    // Invalid manifest names the field; unknown fields are refused.
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"resources": {"memory_mb": 1}}})),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["error"]["code"], "invalid_manifest");
    assert_eq!(r.body["error"]["field"], "resources.memory_mb");
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"backend": "docker"}})),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = h.raw("POST", "/v1/sandboxes", b"{not json".to_vec()).await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["code"].is_string(), "{}", r.body);
    // No half-made sandbox was left by any of the above.
    assert_eq!(
        h.ok("GET", "/v1/sandboxes", None)
            .await
            .as_array()
            .unwrap()
            .len(),
        0
    );

    let id = h.create(process(json!({}))).await;
    // Oversized upload: 413, and nothing written.
    let big = vec![b'x'; 2 * 1024 * 1024];
    let r = h
        .raw(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=big.bin"),
            big,
        )
        .await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "payload_too_large");
    let r = h
        .call(
            "GET",
            &format!("/v1/sandboxes/{id}/files?path=big.bin"),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    // Empty argv, absurd timeout.
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": []})),
        )
        .await;
    assert_eq!(r.status, 400);
    // Pause twice -> 409.
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body["error"]["code"], "invalid_state");
    // Resume of a running sandbox -> 409.
    h.ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
        .await;
    let r = h
        .call("POST", &format!("/v1/sandboxes/{id}/resume"), None)
        .await;
    assert_eq!(r.status, 409);
    // Exec on a destroyed sandbox -> 409.
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["true"]})),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_no_sandbox_processes(&d.cgroup_parent).await;
    // Unknown endpoint.
    let r = h.call("GET", "/v1/nope", None).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.body["error"]["code"], "not_found");
}

#[tokio::test]
async fn openapi_document_lists_the_api() {
    let d = Daemon::start(&[]).await;
    let v = d.http().ok("GET", "/openapi.json", None).await;
    let paths = v["paths"].as_object().unwrap();
    for p in [
        "/v1/sandboxes",
        "/v1/sandboxes/{id}/exec",
        "/v1/sandboxes/{id}/pause",
        "/v1/snapshots/{id}/restore",
    ] {
        assert!(paths.contains_key(p), "missing {p}");
    }
}

#[tokio::test]
async fn exec_timeout_kills_the_process_tree() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(process(json!({}))).await;
    let t = std::time::Instant::now();
    let v = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["sh", "-c", "sleep 300 & sleep 300 & echo started; wait"], "timeout_ms": 1000})),
        )
        .await;
    assert_eq!(v["timed_out"], true, "{v}");
    assert!(t.elapsed() < Duration::from_secs(30));
    // Nothing of it survives: only the sandbox's init is left.
    let ps = h
        .sh(
            &id,
            "ps -eo comm= 2>/dev/null || ls /proc | grep -c '^[0-9]'",
        )
        .await;
    assert!(!ps.contains("sleep"), "{ps}");
}

#[tokio::test]
async fn files_sessions_and_streaming_exec() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(process(json!({"env": {"GREETING": "hello"}})))
        .await;
    h.raw(
        "PUT",
        &format!("/v1/sandboxes/{id}/files?path=dir/a.txt"),
        b"alpha".to_vec(),
    )
    .await;
    let r = h
        .raw(
            "GET",
            &format!("/v1/sandboxes/{id}/files?path=dir/a.txt"),
            vec![],
        )
        .await;
    assert_eq!(r.body, "alpha");
    let ls = h
        .ok(
            "GET",
            &format!("/v1/sandboxes/{id}/files/list?path=dir"),
            None,
        )
        .await;
    assert_eq!(ls[0]["name"], "a.txt");
    // Manifest env reaches exec; request env wins.
    let out = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["sh", "-c", "echo $GREETING $X; pwd"], "env": {"X": "y"}})),
        )
        .await;
    assert_eq!(out["stdout"], "hello y\n/workspace\n");
    // Sessions keep state across calls.
    let s = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["python3", "-i", "-u", "-q"]})),
        )
        .await;
    let sid = s["id"].as_str().unwrap();
    h.send(&id, sid, "v = [1, 2, 3]\n").await;
    h.send(&id, sid, "print('sum', sum(v))\n").await;
    h.session_until(&id, sid, 0, "sum 6").await;
    // Streaming exec: NDJSON lines, then an exit line.
    let r = d
        .client()
        .post(format!("{}/v1/sandboxes/{id}/exec/stream", d.url))
        .json(&json!({"argv": ["sh", "-c", "echo one; sleep 0.2; echo two >&2; exit 3"]}))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "exit");
    assert_eq!(last["exit_code"], 3);
    assert!(
        lines
            .iter()
            .any(|l| l["stream"] == "stdout" && l["data"] == "one\n"),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["stream"] == "stderr" && l["data"] == "two\n"),
        "{text}"
    );
}

#[tokio::test]
async fn idle_pause_and_transparent_resume_keep_memory_and_files() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(process(
            json!({"lifecycle": {"idle_timeout_secs": 1, "on_idle": "pause"}}),
        ))
        .await;
    h.sh(&id, "echo kept > f.txt").await;
    let s = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["python3", "-i", "-u", "-q"]})),
        )
        .await;
    let sid = s["id"].as_str().unwrap().to_string();
    h.send(&id, &sid, "n = 41\n").await;
    let paused = h.wait_state(&id, "paused", Duration::from_secs(30)).await;
    assert_eq!(paused["pause_kind"], "memory");
    assert!(paused["expires_at_ms"].as_i64().unwrap() > paused["paused_at_ms"].as_i64().unwrap());
    // Listed as paused with its expiry.
    let listed = h.ok("GET", "/v1/sandboxes?state=paused", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    // Paused: no CPU is used.
    let u0 = h
        .ok("GET", &format!("/v1/sandboxes/{id}/usage"), None)
        .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let u1 = h
        .ok("GET", &format!("/v1/sandboxes/{id}/usage"), None)
        .await;
    assert_eq!(u0["cpu_ns"], u1["cpu_ns"], "a paused sandbox used CPU");
    // The next request resumes it transparently.
    h.send(&id, &sid, "print('n+1 =', n + 1)\n").await;
    h.session_until(&id, &sid, 0, "n+1 = 42").await;
    assert_eq!(h.state(&id).await["state"], "running");
    assert_eq!(h.sh(&id, "cat f.txt").await, "kept\n");
    let sessions = h
        .ok("GET", &format!("/v1/sandboxes/{id}/sessions"), None)
        .await;
    assert_eq!(sessions[0]["id"], sid.as_str());
}

#[tokio::test]
async fn ttl_expiry_destroys_and_removes_artifacts() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(process(json!({"lifecycle": {"idle_timeout_secs": 1, "on_idle": "pause", "paused_ttl_secs": 2}}))).await;
    h.sh(&id, "echo x > f").await;
    let paused = h.wait_state(&id, "paused", Duration::from_secs(30)).await;
    let snap = paused["pause_snapshot"].as_str().unwrap().to_string();
    assert_eq!(
        h.call("GET", &format!("/v1/snapshots/{snap}"), None)
            .await
            .status,
        200
    );
    h.wait_state(&id, "destroyed", Duration::from_secs(30))
        .await;
    assert!(
        !d.dir.join("sandboxes").join(&id).exists(),
        "sandbox dir left behind"
    );
    assert_eq!(
        h.call("GET", &format!("/v1/snapshots/{snap}"), None)
            .await
            .status,
        404
    );
    assert_no_sandbox_processes(&d.cgroup_parent).await;
    let audit = h.ok("GET", &format!("/v1/audit?target={id}"), None).await;
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "expire"),
        "{audit}"
    );
}

#[tokio::test]
async fn idle_policy_paths_filesystem_and_destroy() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let fs = h
        .create(process(
            json!({"lifecycle": {"idle_timeout_secs": 1, "on_idle": "pause_filesystem"}}),
        ))
        .await;
    let gone = h
        .create(process(
            json!({"lifecycle": {"idle_timeout_secs": 1, "on_idle": "destroy"}}),
        ))
        .await;
    h.sh(&fs, "echo durable > f; sleep 1000 > /dev/null 2>&1 &")
        .await;
    let p = h.wait_state(&fs, "paused", Duration::from_secs(30)).await;
    assert_eq!(p["pause_kind"], "filesystem");
    h.wait_state(&gone, "destroyed", Duration::from_secs(30))
        .await;
    // Reading does not change the policy; the resume brings files, not processes.
    let before = h.state(&fs).await["manifest"].clone();
    assert_eq!(h.sh(&fs, "cat f").await, "durable\n");
    assert!(!h
        .sh(&fs, "ps -eo comm= 2>/dev/null || true")
        .await
        .contains("sleep"));
    assert_eq!(h.state(&fs).await["manifest"], before);
}

#[tokio::test]
async fn kill9_during_work_and_pause_then_reconcile() {
    let mut d = Daemon::start(&[]).await;
    let h = d.http();
    let a = h.create(process(json!({}))).await;
    let b = h.create(process(json!({}))).await;
    h.sh(&a, "echo a > a.txt").await;
    // Enough data in b's writable layer that its pause takes a moment.
    h.sh(
        &b,
        "head -c 60000000 /dev/urandom > big.bin; echo b > b.txt",
    )
    .await;
    let url = d.url.clone();
    let b2 = b.clone();
    let client = d.client();
    let pausing = tokio::spawn(async move {
        let b = b2;
        let _ = client
            .post(format!("{url}/v1/sandboxes/{b}/pause"))
            .json(&json!({}))
            .send()
            .await;
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    d.kill9();
    let _ = pausing.await;
    d.restart().await;
    let h = d.http();
    // No sandbox is stuck in a transitional state; both are usable again.
    for id in [&a, &b] {
        let st = h.state(id).await;
        let s = st["state"].as_str().unwrap();
        assert!(
            ["running", "paused"].contains(&s),
            "{id} is {s} after reconcile: {st}"
        );
    }
    assert_eq!(h.sh(&a, "cat a.txt").await, "a\n");
    assert_eq!(h.sh(&b, "cat b.txt").await, "b\n");
    // No orphans: only the two sandboxes' own processes are in the cgroups.
    let pids = pids_in_cgroups(&d.cgroup_parent);
    for pid in &pids {
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        assert!(
            cg.contains(&a) || cg.contains(&b),
            "pid {pid} belongs to no sandbox: {cg}"
        );
    }
}

#[tokio::test]
async fn sandbox_has_no_network() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let id = h.create(process(json!({}))).await;
    let script = format!(
        "import socket\ns = socket.socket()\ns.settimeout(3)\ntry:\n    s.connect(('127.0.0.1', {port}))\n    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e)\n"
    );
    let v = h.exec(&id, &["python3", "-c", &script]).await;
    let out = v["stdout"].as_str().unwrap();
    assert!(out.contains("refused") && !out.contains("CONNECTED"), "{v}");
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "the host listener got a connection"
    );
}

#[tokio::test]
async fn fork_bomb_and_memory_hog_are_contained() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(process(
            json!({"resources": {"pids": 64, "memory_mb": 128}}),
        ))
        .await;
    let bomb = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 2; echo done"], "timeout_ms": 8000})),
        )
        .await;
    assert!(
        bomb["exit_code"] != 0
            || bomb["timed_out"] == true
            || bomb["stderr"].as_str().unwrap().contains("fork"),
        "{bomb}"
    );
    let hog = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["python3", "-c", "x = bytearray(1024 * 1024 * 1024); print('allocated')"], "timeout_ms": 30000})),
        )
        .await;
    assert_ne!(
        hog["exit_code"], 0,
        "a 1 GiB allocation succeeded under a 128 MiB cap: {hog}"
    );
    // The daemon still serves, and a fresh sandbox works.
    let other = h.create(process(json!({}))).await;
    assert_eq!(h.sh(&other, "echo alive").await, "alive\n");
}

#[tokio::test]
async fn snapshot_restore_and_fork_bring_files_into_new_sandboxes() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(process(json!({}))).await;
    h.sh(&id, "echo v1 > state.txt; echo gone > deleted.txt")
        .await;
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    h.sh(&id, "rm deleted.txt; echo latest > state.txt").await;
    let snap_id = snap["id"].as_str().unwrap();
    let r = h
        .ok("POST", &format!("/v1/snapshots/{snap_id}/restore"), None)
        .await;
    let child = r["id"].as_str().unwrap();
    assert_eq!(h.sh(child, "cat state.txt deleted.txt").await, "v1\ngone\n");
    // Fork takes a fresh snapshot first: children see the latest state.
    let kids = h.fork(&id, 2).await;
    for k in &kids {
        assert_eq!(
            h.sh(k, "cat state.txt; test -e deleted.txt || echo no-deleted")
                .await,
            "latest\nno-deleted\n"
        );
    }
    h.sh(&kids[0], "echo mine > own.txt").await;
    assert_eq!(
        h.sh(&kids[1], "test -e own.txt && echo leaked || echo separate")
            .await,
        "separate\n"
    );
}

#[test]
fn cli_commands_and_readable_errors() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = rt.block_on(Daemon::start(&[]));
    let out = d.cli(&["create", "--backend", "process", "--on-idle", "nothing"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = d.cli(&["exec", &id, "--", "sh", "-c", "echo hi; exit 4"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), b"payload").unwrap();
    assert!(d
        .cli(&["files", "put", &id, tmp.path().to_str().unwrap(), "p.txt"])
        .status
        .success());
    let out = d.cli(&["files", "get", &id, "p.txt"]);
    assert_eq!(out.stdout, b"payload");
    assert!(d.cli(&["pause", &id]).status.success());
    let out = d.cli(&["--json", "ls", "--state", "paused"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["id"], id.as_str());
    assert!(v[0]["expires_at_ms"].is_i64());
    assert!(d.cli(&["resume", &id]).status.success());
    assert!(d.cli(&["rm", &id]).status.success());
    // Errors: exit code != 0 and one readable line.
    let out = d.cli(&["exec", "sb-nope", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("stasis: not_found:"), "{err}");
    let out = d.cli(&["pause", &id]);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("stasis: invalid_state:"));
    let out = d.cli(&["audit", "verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // serve without a master key refuses to start.
    let out = std::process::Command::new(common::BIN)
        .args(["serve", "--data-dir", "/tmp/stasis-nokey-test"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("master key"));
}

#[tokio::test]
async fn sandbox_whose_processes_die_is_settled_not_left_running() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(process(json!({}))).await;
    h.sh(&id, "echo survives > f").await;
    // Kill everything of the sandbox from outside (as an OOM killer or an
    // operator might).
    for pid in pids_in_cgroups(&d.cgroup_parent) {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["true"]})),
        )
        .await;
    // Either the backend noticed on this request (error, then settled) or the
    // request already found it settled and resumed it.
    let st = h.state(&id).await;
    assert_ne!(st["state"], "failed", "{st}");
    if r.status != 200 {
        assert_eq!(st["state"], "paused", "{st}");
        assert_eq!(st["pause_kind"], "filesystem");
    }
    // Files are kept and the next request brings the sandbox back.
    assert_eq!(h.sh(&id, "cat f").await, "survives\n");
    assert_eq!(h.state(&id).await["state"], "running");
}
