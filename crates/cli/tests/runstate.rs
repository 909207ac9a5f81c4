//! Issue 5 end to end: run state, idempotent tool calls, approvals and the
//! signed RunState document, through the real daemon (process backend),
//! including SIGKILL of the daemon between a call's intent and its result.

mod common;

use common::Daemon;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn process(lifecycle: Value) -> Value {
    json!({"backend": "process", "lifecycle": lifecycle})
}

/// A request with an actor header; returns (status, body).
async fn call_as(
    d: &Daemon,
    actor: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut rb = d
        .client()
        .request(m, format!("{}{}", d.url, path))
        .header("x-stasis-actor", actor);
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    let r = rb.send().await.expect("request");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn new_run(d: &Daemon, sandbox: &str) -> String {
    let (st, v) = call_as(
        d,
        "agent",
        "POST",
        "/v1/runs",
        Some(json!({"sandbox": sandbox})),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("run-"), "{id}");
    assert_eq!(v["status"], "running");
    id
}

fn tool(key: &str, script: &str, approval: bool) -> Value {
    json!({
        "idempotency_key": key,
        "kind": "exec",
        "argv": ["sh", "-c", script],
        "side_effecting": true,
        "requires_approval": approval,
        "timeout_ms": 60000,
    })
}

fn step_kinds(run: &Value) -> Vec<String> {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap().to_string())
        .collect()
}

async fn audit_actions(d: &Daemon, target: &str) -> Vec<(String, String)> {
    let (_, v) = call_as(
        d,
        "t",
        "GET",
        &format!("/v1/audit?target={target}&limit=1000"),
        None,
    )
    .await;
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn idempotent_retry_reject_path_and_signed_state() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let sb = h
        .create(
            json!({"backend": "process", "lifecycle": {"on_idle": "nothing"},
                       "env": {"DB_PASSWORD": "hunter2-from-manifest"}}),
        )
        .await;
    let run = new_run(&d, &sb).await;
    let calls = format!("/v1/runs/{run}/tool-calls");

    // A model step and a handover are recorded in order.
    for (kind, data) in [
        ("model_step", json!({"text": "I will write a log line"})),
        ("handover", json!({"to": "writer"})),
    ] {
        let (st, v) = call_as(
            &d,
            "agent",
            "POST",
            &format!("/v1/runs/{run}/steps"),
            Some(json!({"kind": kind, "data": data})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
    }

    // A side-effecting call runs once; its retry gets the recorded result.
    let mut body = tool(
        "log-1",
        "echo x >> /workspace/log; echo hi; echo \"token=${SECRET_TOKEN:+set}\"",
        false,
    );
    body["env"] = json!({"SECRET_TOKEN": "s3cr3t-token-value"});
    let (st, first) = call_as(&d, "agent", "POST", &calls, Some(body.clone())).await;
    assert_eq!(st, 200, "{first}");
    assert_eq!(first["outcome"], "succeeded", "{first}");
    assert_eq!(first["replayed"], false);
    assert_eq!(first["call"]["result"]["stdout"], "hi\ntoken=set\n");
    for _ in 0..3 {
        let (st, again) = call_as(&d, "agent", "POST", &calls, Some(body.clone())).await;
        assert_eq!(st, 200, "{again}");
        assert_eq!(again["replayed"], true);
        assert_eq!(again["call"]["id"], first["call"]["id"]);
        assert_eq!(again["call"]["result"], first["call"]["result"]);
    }
    assert_eq!(h.sh(&sb, "wc -l < /workspace/log").await.trim(), "1");
    // The same key for another call is refused.
    let (st, v) = call_as(
        &d,
        "agent",
        "POST",
        &calls,
        Some(tool("log-1", "rm -rf /workspace", false)),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["field"], "idempotency_key");

    // Reject path: held, rejected with a reason, never run; the run continues.
    let (st, held) = call_as(
        &d,
        "agent",
        "POST",
        &calls,
        Some(tool("wipe", "echo wiped >> /workspace/wiped", true)),
    )
    .await;
    assert_eq!(st, 202, "{held}");
    assert_eq!(held["outcome"], "awaiting_approval");
    assert_eq!(held["run"]["status"], "waiting_approval");
    let call = held["call"]["id"].as_str().unwrap().to_string();
    // Env values cannot ride on a held call.
    let mut with_env = tool("held-env", "true", true);
    with_env["env"] = json!({"K": "v"});
    let (st, _) = call_as(&d, "agent", "POST", &calls, Some(with_env)).await;
    assert_eq!(st, 400);
    let (st, v) = call_as(
        &d,
        "bob",
        "POST",
        &format!("/v1/runs/{run}/approvals/{call}/reject"),
        Some(json!({"reason": "too destructive"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["outcome"], "rejected");
    assert_eq!(v["run"]["status"], "running");
    let rejected = v["run"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "rejected")
        .unwrap()
        .clone();
    assert_eq!(rejected["actor"], "bob");
    assert_eq!(rejected["data"]["reason"], "too destructive");
    assert!(rejected["at_ms"].as_i64().unwrap() > 0);
    // Deciding twice is refused; the retry of the key reports the rejection.
    let (st, _) = call_as(
        &d,
        "alice",
        "POST",
        &format!("/v1/runs/{run}/approvals/{call}/approve"),
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(st, 409);
    let (st, v) = call_as(
        &d,
        "agent",
        "POST",
        &calls,
        Some(tool("wipe", "echo wiped >> /workspace/wiped", true)),
    )
    .await;
    assert_eq!((st, v["outcome"].as_str()), (200, Some("rejected")), "{v}");
    let r = h.exec(&sb, &["test", "-e", "/workspace/wiped"]).await;
    assert_eq!(r["exit_code"], 1, "a rejected call ran");

    let (_, got) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}"), None).await;
    assert_eq!(
        step_kinds(&got),
        vec![
            "model_step",
            "handover",
            "tool_call_requested",
            "tool_call_result",
            "tool_call_requested",
            "waiting_for_approval",
            "rejected"
        ]
    );

    // The signed state document: versioned, names env vars, holds no secret values.
    let (st, doc) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}/state"), None).await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["format"], "stasis.runstate");
    assert_eq!(doc["version"], 1);
    let text = doc.to_string();
    assert!(text.contains("SECRET_TOKEN"), "env names are recorded");
    assert!(
        !text.contains("s3cr3t-token-value"),
        "env value leaked into the state: {text}"
    );
    assert!(
        !text.contains("hunter2-from-manifest"),
        "manifest secret leaked into the state"
    );
    // The run record and the database hold no value either.
    let db = std::fs::read(d.dir.join("meta.db")).unwrap();
    let wal = std::fs::read(d.dir.join("meta.db-wal")).unwrap_or_default();
    for blob in [&db, &wal] {
        assert!(
            !blob.windows(18).any(|w| w == b"s3cr3t-token-value"),
            "env value stored in the metadata db"
        );
    }

    // Resuming from it works; any tampering is refused.
    let (st, rep) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(doc.clone())).await;
    assert_eq!(st, 200, "{rep}");
    assert_eq!(rep["sandbox"]["manifest_changed"], false);
    assert_eq!(rep["sandbox"]["id"], sb.as_str());
    for (ptr, val) in [
        ("/state/run/status", json!("completed")),
        ("/state/run/tool_calls/1/state", json!("succeeded")),
        ("/state/run/steps/6/actor", json!("mallory")),
        ("/state/run/tenant", json!("t-other")),
        ("/state/sandbox/id", json!("sb-0000")),
    ] {
        let mut t = doc.clone();
        *t.pointer_mut(ptr).unwrap_or_else(|| panic!("{ptr}")) = val;
        let (st, v) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(t)).await;
        assert_eq!(st, 422, "{ptr}: {v}");
        assert_eq!(v["error"]["code"], "integrity_error");
    }
    let mut t = doc.clone();
    t["version"] = json!(99);
    let (st, v) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(t)).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["field"], "version");

    // The audit log has the call and the decision, with their actors, and is intact.
    let acts = audit_actions(&d, &run).await;
    assert!(acts.contains(&("exec".into(), "agent".into())), "{acts:?}");
    assert!(acts.contains(&("reject".into(), "bob".into())), "{acts:?}");
    let (st, _) = call_as(&d, "t", "GET", "/v1/audit/verify", None).await;
    assert_eq!(
        st, 403,
        "the chain spans tenants: verifying it is for the operator"
    );
    let v = d
        .http_as(Some(&d.admin_token()))
        .ok("GET", "/v1/audit/verify", None)
        .await;
    assert_eq!(v["ok"], true, "{v}");
    // The run endpoints are in the OpenAPI document.
    let (_, api) = call_as(&d, "t", "GET", "/openapi.json", None).await;
    assert!(api["paths"]["/v1/runs/{id}/tool-calls"].is_object());
    assert!(api["paths"]["/v1/runs/resume"].is_object());

    // The CLI sees the same.
    let out = d.cli(&["--json", "runs", "ls"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ls: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ls[0]["id"], run.as_str());
    let out = d.cli(&["runs", "state", &run]);
    let doc2: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc2["state"]["run"]["id"], run.as_str());
    // Completing the run ends it; nothing more can be appended.
    let (st, v) = call_as(
        &d,
        "agent",
        "POST",
        &format!("/v1/runs/{run}/steps"),
        Some(json!({"kind": "completed"})),
    )
    .await;
    assert_eq!((st, v["status"].as_str()), (200, Some("completed")), "{v}");
    let (st, _) = call_as(
        &d,
        "agent",
        "POST",
        &calls,
        Some(tool("late", "true", false)),
    )
    .await;
    assert_eq!(st, 409);
}

#[tokio::test]
async fn kill9_between_intent_and_result_is_outcome_unknown_and_not_rerun() {
    let mut d = Daemon::start(&[]).await;
    let h = d.http();
    let sb = h.create(process(json!({"on_idle": "nothing"}))).await;
    let run = new_run(&d, &sb).await;
    let calls = format!("/v1/runs/{run}/tool-calls");
    let body = tool("send-1", "echo sent >> /workspace/outbox; sleep 30", false);
    let (url, b2, c2) = (d.url.clone(), body.clone(), calls.clone());
    let client = d.client();
    let inflight = tokio::spawn(async move {
        let _ = client.post(format!("{url}{c2}")).json(&b2).send().await;
    });
    // Wait until the side effect happened (the exec is now sleeping).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = h
            .call(
                "GET",
                &format!("/v1/sandboxes/{sb}/files?path=/workspace/outbox"),
                None,
            )
            .await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the call never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Intent is recorded, result is not.
    let (_, v) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}"), None).await;
    assert_eq!(v["tool_calls"][0]["state"], "intent_recorded", "{v}");
    d.kill9();
    let _ = inflight.await;
    d.restart().await;
    let h = d.http();
    // The restarted daemon settled the call before serving.
    let (_, v) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}"), None).await;
    assert_eq!(
        v["tool_calls"][0]["state"], "outcome_unknown_needs_review",
        "{v}"
    );
    assert!(d.dir.join("runstate.key").exists());

    // The retry reports the unknown outcome and does not run it again.
    for _ in 0..2 {
        let (st, v) = call_as(&d, "agent", "POST", &calls, Some(body.clone())).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["outcome"], "outcome_unknown", "{v}");
        assert_eq!(v["call"]["state"], "outcome_unknown_needs_review");
        assert_eq!(v["replayed"], true);
    }
    assert_eq!(
        h.sh(&sb, "cat /workspace/outbox").await,
        "sent\n",
        "the side effect ran twice"
    );
    let (_, v) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}"), None).await;
    assert_eq!(
        step_kinds(&v),
        vec!["tool_call_requested", "tool_call_result"]
    );
    assert_eq!(
        v["steps"][1]["data"]["state"],
        "outcome_unknown_needs_review"
    );
    // The run goes on: a new call with a new key runs.
    let (st, v) = call_as(
        &d,
        "agent",
        "POST",
        &calls,
        Some(tool("send-2", "cat /workspace/outbox | wc -l", false)),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["call"]["result"]["stdout"], "1\n");
    let acts = audit_actions(&d, &run).await;
    assert!(
        acts.iter().filter(|(a, _)| a == "exec").count() >= 3,
        "{acts:?}"
    );
}

#[tokio::test]
async fn approval_across_autopause_and_restart_runs_once() {
    let mut d = Daemon::start(&[]).await;
    let h = d.http();
    let sb = h
        .create(process(json!({"idle_timeout_secs": 1, "on_idle": "pause"})))
        .await;
    h.sh(&sb, "echo 0 > /workspace/deploys").await;
    let run = new_run(&d, &sb).await;
    let calls = format!("/v1/runs/{run}/tool-calls");
    let body = tool(
        "deploy-1",
        "echo deployed >> /workspace/deploys; wc -l < /workspace/deploys",
        true,
    );
    let (st, v) = call_as(&d, "agent", "POST", &calls, Some(body.clone())).await;
    assert_eq!(st, 202, "{v}");
    let call = v["call"]["id"].as_str().unwrap().to_string();
    // While it waits, the sandbox is left alone: it idles and auto-pauses.
    h.wait_state(&sb, "paused", Duration::from_secs(30)).await;
    let (_, doc) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}/state"), None).await;
    assert_eq!(doc["state"]["pending_approvals"], json!([call]));

    // Overnight: the daemon is killed and comes back.
    d.restart().await;
    let h = d.http();
    let (_, v) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}"), None).await;
    assert_eq!(v["status"], "waiting_approval", "{v}");
    assert_eq!(
        v["tool_calls"][0]["state"], "awaiting_approval",
        "a held call is not an unknown outcome"
    );
    // A retry by the agent is still held (and runs nothing).
    let (st, v) = call_as(&d, "agent", "POST", &calls, Some(body.clone())).await;
    assert_eq!(
        (st, v["outcome"].as_str()),
        (202, Some("awaiting_approval")),
        "{v}"
    );
    // Resuming from the stored document: verified; the approval still stands.
    let (st, rep) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(doc.clone())).await;
    assert_eq!(st, 200, "{rep}");
    assert_eq!(rep["still_pending"], json!([call]));
    assert_eq!(rep["sandbox"]["state"], "paused");

    // Approve through the CLI as alice: it runs once, resuming the sandbox.
    let out = std::process::Command::new(common::BIN)
        .args([
            "--url",
            &d.url,
            "--json",
            "approve",
            &run,
            "deploy-1",
            "--reason",
            "change window open",
        ])
        .env("STASIS_ACTOR", "alice")
        .env("STASIS_DATA_DIR", &d.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "succeeded", "{v}");
    assert_eq!(v["call"]["result"]["stdout"], "2\n");
    assert_eq!(v["run"]["status"], "running");
    let approved = v["run"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "approved")
        .unwrap()
        .clone();
    assert_eq!(approved["actor"], "alice");
    assert_eq!(approved["data"]["reason"], "change window open");
    assert_eq!(h.state(&sb).await["state"], "running");
    // Approving again, or retrying the key, runs nothing.
    let out = d.cli(&["approve", &run, &call, "--reason", "again"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid_state"));
    let (st, v) = call_as(&d, "agent", "POST", &calls, Some(body.clone())).await;
    assert_eq!((st, v["replayed"].as_bool()), (200, Some(true)), "{v}");
    assert_eq!(h.sh(&sb, "wc -l < /workspace/deploys").await.trim(), "2");
    // The old document now reports the approval as decided since.
    let (st, rep) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(doc)).await;
    assert_eq!(st, 200, "{rep}");
    assert_eq!(rep["decided_since"], json!([call]));
    let acts = audit_actions(&d, &run).await;
    assert!(
        acts.contains(&("approve".into(), "alice".into())),
        "{acts:?}"
    );
    assert!(acts.contains(&("exec".into(), "alice".into())), "{acts:?}");
}

#[tokio::test]
async fn resume_rechecks_the_sandbox() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let sb = h.create(process(json!({"on_idle": "nothing"}))).await;
    let run = new_run(&d, &sb).await;
    let (st, _) = call_as(
        &d,
        "agent",
        "POST",
        &format!("/v1/runs/{run}/tool-calls"),
        Some(tool("hold", "true", true)),
    )
    .await;
    assert_eq!(st, 202);
    let (_, doc) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}/state"), None).await;
    h.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None).await;
    let (st, v) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(doc)).await;
    assert_eq!(st, 409, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("destroyed"),
        "{v}"
    );
    // Approving a call whose sandbox is gone is refused and the call stays held.
    let (st, _) = call_as(
        &d,
        "alice",
        "POST",
        &format!("/v1/runs/{run}/approvals/hold/approve"),
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(st, 409);
    // A run bound to an unknown sandbox cannot be created.
    let (st, _) = call_as(
        &d,
        "agent",
        "POST",
        "/v1/runs",
        Some(json!({"sandbox": "sb-doesnotexist"})),
    )
    .await;
    assert_eq!(st, 404);
}

/// The README's example agent loop (examples/agent_loop.sh) runs and its
/// side effect happens exactly once across the approval and the restart.
#[tokio::test]
async fn example_agent_loop_runs() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/agent_loop.sh");
    let out = tokio::process::Command::new("bash")
        .arg(&script)
        .env("STASIS_BIN", common::BIN)
        .env_remove("STASIS_URL")
        .env_remove("STASIS_ACTOR")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("replayed=true"), "{stdout}");
    assert!(
        stdout.contains("OK: approved after a restart, sent exactly once"),
        "{stdout}"
    );
}

/// Rehydration into a sandbox restored from a snapshot: the run moves there
/// (recorded), pending approvals are re-checked, and the held call runs under
/// the manifest given at restore (narrowed: the old credential is gone, the
/// new scope applies), never the one baked into the snapshot.
#[tokio::test]
async fn resume_into_restored_sandbox_applies_the_manifest_in_force_now() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let a = h
        .create(
            json!({"backend": "process", "lifecycle": {"on_idle": "nothing"},
                       "env": {"API_TOKEN": "old-wide-token", "SCOPE": "wide"}}),
        )
        .await;
    h.sh(&a, "echo data > /workspace/f").await;
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{a}/snapshots"),
            Some(json!({})),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = new_run(&d, &a).await;
    let script = "echo \"scope=$SCOPE token=${API_TOKEN:-none}\"; cat /workspace/f";
    let (st, v) = call_as(
        &d,
        "agent",
        "POST",
        &format!("/v1/runs/{run}/tool-calls"),
        Some(tool("report", script, true)),
    )
    .await;
    assert_eq!(st, 202, "{v}");
    let call = v["call"]["id"].as_str().unwrap().to_string();
    let (_, doc) = call_as(&d, "agent", "GET", &format!("/v1/runs/{run}/state"), None).await;
    assert!(!doc.to_string().contains("old-wide-token"));

    // The original sandbox is lost; a new one is restored with a narrower manifest.
    h.ok("DELETE", &format!("/v1/sandboxes/{a}"), None).await;
    let b = h
        .ok(
            "POST",
            &format!("/v1/snapshots/{snap}/restore"),
            Some(
                json!({"manifest": {"backend": "process", "lifecycle": {"on_idle": "nothing"},
                                      "env": {"SCOPE": "narrow"}}}),
            ),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (st, v) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(doc.clone())).await;
    assert_eq!(st, 409, "resume into a destroyed sandbox: {v}");
    let (st, v) = call_as(
        &d,
        "agent",
        "POST",
        "/v1/runs/resume",
        Some(json!({"document": doc, "sandbox": "sb-doesnotexist"})),
    )
    .await;
    assert_eq!(st, 404, "{v}");
    let (st, rep) = call_as(
        &d,
        "agent",
        "POST",
        "/v1/runs/resume",
        Some(json!({"document": doc, "sandbox": b})),
    )
    .await;
    assert_eq!(st, 200, "{rep}");
    assert_eq!(rep["sandbox"]["id"], b.as_str());
    assert_eq!(rep["sandbox"]["rebound_from"], a.as_str());
    assert_eq!(rep["sandbox"]["manifest_changed"], true);
    assert_eq!(rep["still_pending"], json!([call]));
    assert_eq!(rep["run"]["sandbox"], b.as_str());
    let hand = rep["run"]["steps"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(hand["kind"], "handover");
    assert_eq!(hand["data"]["sandbox_to"], b.as_str());
    // The old document still verifies (history is a prefix) and sees the new binding.
    let (st, rep2) = call_as(&d, "agent", "POST", "/v1/runs/resume", Some(doc)).await;
    assert_eq!(st, 200, "{rep2}");
    assert_eq!(rep2["sandbox"]["id"], b.as_str());

    let (st, v) = call_as(
        &d,
        "alice",
        "POST",
        &format!("/v1/runs/{run}/approvals/{call}/approve"),
        Some(json!({"reason": "ok"})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["outcome"], "succeeded", "{v}");
    assert_eq!(
        v["call"]["result"]["stdout"],
        "scope=narrow token=none\ndata\n"
    );
}

/// A client that gives up mid-call does not cut the exec between intent and
/// result: the retry waits for and returns the recorded result.
#[tokio::test]
async fn client_disconnect_does_not_make_the_outcome_unknown() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let sb = h.create(process(json!({"on_idle": "nothing"}))).await;
    let run = new_run(&d, &sb).await;
    let calls = format!("/v1/runs/{run}/tool-calls");
    let body = tool(
        "slow-1",
        "sleep 2; echo done >> /workspace/slow; echo ok",
        false,
    );
    let r = d
        .client()
        .post(format!("{}{calls}", d.url))
        .timeout(Duration::from_millis(500))
        .json(&body)
        .send()
        .await;
    assert!(r.is_err(), "the client should have timed out");
    let (st, v) = call_as(&d, "agent", "POST", &calls, Some(body)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["outcome"], "succeeded", "{v}");
    assert_eq!(v["replayed"], true);
    assert_eq!(v["call"]["result"]["stdout"], "ok\n");
    assert_eq!(h.sh(&sb, "cat /workspace/slow").await, "done\n");
}
