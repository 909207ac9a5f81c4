//! Scoped, expiring, per-sandbox and rotated tokens through the real daemon.

use super::*;

fn tool(key: &str, approval: bool) -> Value {
    json!({
        "idempotency_key": key,
        "kind": "exec",
        "argv": ["sh", "-c", "echo ran >> /workspace/ran; echo ok"],
        "side_effecting": true,
        "requires_approval": approval,
        "timeout_ms": 60000,
    })
}

async fn mint(who: &Http, body: Value) -> (String, String) {
    let v = who.ok("POST", "/v1/tokens", Some(body)).await;
    (
        v["token"].as_str().unwrap().to_string(),
        v["id"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn scopes_limit_what_a_token_does() {
    let d = Daemon::start(&[]).await;
    let mut n = Count(0);
    let owner = d.http();
    let sb = owner.create(process(json!({}))).await;
    let other = owner.create(process(json!({}))).await;

    let (approver_t, _) = mint(
        &owner,
        json!({"name": "finance", "scopes": ["approve"], "ttl_secs": 3600}),
    )
    .await;
    let (exec_t, _) = mint(&owner, json!({"name": "agent", "scopes": ["exec"]})).await;
    let (read_t, _) = mint(&owner, json!({"name": "viewer", "scopes": ["read"]})).await;
    let (term_t, _) = mint(
        &owner,
        json!({"name": "terminal", "scopes": ["exec"], "sandbox": sb}),
    )
    .await;
    let approver = d.http_as(Some(&approver_t));
    let agent = d.http_as(Some(&exec_t));
    let viewer = d.http_as(Some(&read_t));
    let term = d.http_as(Some(&term_t));

    // The agent (exec) records a held tool call; it cannot approve it.
    let run = agent
        .ok("POST", "/v1/runs", Some(json!({"sandbox": sb})))
        .await;
    let run = run["id"].as_str().unwrap().to_string();
    let held = agent
        .ok(
            "POST",
            &format!("/v1/runs/{run}/tool-calls"),
            Some(tool("pay", true)),
        )
        .await;
    assert_eq!(held["outcome"], "awaiting_approval", "{held}");
    let call = held["call"]["id"].as_str().unwrap().to_string();
    let approve = format!("/v1/runs/{run}/approvals/{call}/approve");
    let (st, v) = send(&agent, "POST", &approve, Some(json!({"reason": "mine"}))).await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{v}"
    );
    n.denied("exec token approving");

    // The approver reads the run and approves; it cannot exec or create.
    approver.ok("GET", &format!("/v1/runs/{run}"), None).await;
    for (m, p, body) in [
        (
            "POST",
            format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["true"]})),
        ),
        (
            "POST",
            "/v1/sandboxes".to_string(),
            Some(process(json!({}))),
        ),
        (
            "POST",
            format!("/v1/runs/{run}/tool-calls"),
            Some(tool("x", false)),
        ),
        ("POST", "/v1/tokens".to_string(), Some(json!({"name": "x"}))),
    ] {
        let (st, v) = send(&approver, m, &p, body).await;
        assert_eq!(st, 403, "approver {m} {p}: {v}");
        n.denied(&format!("approver {m} {p}"));
    }
    let v = approver
        .ok("POST", &approve, Some(json!({"reason": "budget ok"})))
        .await;
    assert_eq!(v["outcome"], "succeeded", "{v}");
    let ran = owner.exec(&sb, &["cat", "/workspace/ran"]).await;
    assert_eq!(ran["stdout"], "ran\n", "the held call ran once: {ran}");

    // Read-only reads, and nothing else.
    viewer.ok("GET", &format!("/v1/sandboxes/{sb}"), None).await;
    viewer.ok("GET", "/v1/audit", None).await;
    for (m, p) in [
        ("POST", format!("/v1/sandboxes/{sb}/pause")),
        ("DELETE", format!("/v1/sandboxes/{sb}")),
    ] {
        let (st, _) = send(&viewer, m, &p, Some(json!({}))).await;
        assert_eq!(st, 403, "viewer {m} {p}");
        n.denied(&format!("read token {m} {p}"));
    }

    // A per-sandbox token reaches its sandbox only.
    let v = term
        .ok(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["echo", "hi"]})),
        )
        .await;
    assert_eq!(v["stdout"], "hi\n");
    for (m, p) in [
        ("POST", format!("/v1/sandboxes/{other}/exec")),
        ("GET", "/v1/sandboxes".to_string()),
        ("GET", format!("/v1/runs/{run}")),
    ] {
        let (st, v) = send(&term, m, &p, Some(json!({"argv": ["true"]}))).await;
        assert_eq!(st, 403, "sandbox token {m} {p}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(&sb), "{v}");
        n.denied(&format!("sandbox token {m} {p}"));
    }

    // Tokens list their scopes, expiry and last use (never their text).
    let toks = owner.ok("GET", "/v1/tokens", None).await;
    let fin = toks
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "finance")
        .unwrap();
    assert_eq!(fin["scopes"], json!(["approve"]));
    assert!(fin["expires_at_ms"].as_i64().unwrap() > 0);
    assert!(fin["last_used_at_ms"].as_i64().is_some(), "{fin}");
    assert!(!toks.to_string().contains(&approver_t));
    println!("scope denials: {}", n.0);
}

#[tokio::test]
async fn rotation_without_downtime_and_expiry() {
    let d = Daemon::start(&[]).await;
    let owner = d.http();
    let (old_t, old_id) = mint(&owner, json!({"name": "ci", "scopes": ["read", "exec"]})).await;
    let old = d.http_as(Some(&old_t));
    let v = owner
        .ok(
            "POST",
            &format!("/v1/tokens/{old_id}/rotate"),
            Some(json!({"overlap_secs": 2})),
        )
        .await;
    assert_eq!(v["rotated_from"], old_id.as_str());
    let new = d.http_as(Some(v["token"].as_str().unwrap()));
    // Both work during the overlap ...
    old.ok("GET", "/v1/sandboxes", None).await;
    new.ok("GET", "/v1/sandboxes", None).await;
    // ... then only the new one.
    tokio::time::sleep(std::time::Duration::from_millis(2300)).await;
    let r = old.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{}",
        r.body
    );
    new.ok("GET", "/v1/sandboxes", None).await;
    // The log says who rotated what.
    let audit = owner.ok("GET", "/v1/audit", None).await;
    assert!(audit.to_string().contains("token_rotate"), "{audit}");
    // Bad requests name their field.
    for (body, field) in [
        (json!({"name": "x", "scopes": ["root"]}), "scopes"),
        (json!({"name": "x", "ttl_secs": 1}), "ttl_secs"),
        (json!({"name": "x", "sandbox": "sbx-missing"}), ""),
    ] {
        let r = owner.call("POST", "/v1/tokens", Some(body.clone())).await;
        if field.is_empty() {
            assert_eq!(r.status, 404, "{body}: {}", r.body);
        } else {
            assert_eq!(r.status, 400, "{body}: {}", r.body);
            assert_eq!(r.body["error"]["field"], field);
        }
    }
}
