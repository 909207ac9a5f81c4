//! Tenancy boundaries through the real daemon: authentication (401), admin
//! routes (403), per-token rate limits (429), cross-tenant access to every
//! endpoint (404, the same answer as for an id that does not exist), and
//! secrets that never reach a stored artifact.
//!
//! Every denial attempt prints one `denied: ...` line; the total is printed
//! at the end of each test.

mod common;

use common::{Daemon, Http};
use serde_json::{json, Value};

#[path = "boundaries_tenancy/scopes.rs"]
mod scopes;

fn process(extra: Value) -> Value {
    let mut m = json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}});
    if let (Some(m), Some(e)) = (m.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            m.insert(k.clone(), v.clone());
        }
    }
    m
}

struct Count(usize);

impl Count {
    fn denied(&mut self, what: &str) {
        self.0 += 1;
        println!("denied: {what}");
    }
}

/// One request as `who`; the body is JSON unless `raw` is given.
async fn send(who: &Http, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let r = who.call(method, path, body).await;
    (r.status, r.body)
}

/// `who` asks for `real` (another tenant's object) and for `missing` (an id
/// that does not exist): both must be 404 with the same body, ids aside.
#[allow(clippy::too_many_arguments)]
async fn same_as_missing(
    n: &mut Count,
    who: &Http,
    method: &str,
    path_of: &dyn Fn(&str) -> String,
    real: &str,
    missing: &str,
    body: Option<Value>,
    what: &str,
) {
    let (s1, b1) = send(who, method, &path_of(real), body.clone()).await;
    let (s2, b2) = send(who, method, &path_of(missing), body).await;
    assert_eq!(
        s1, 404,
        "{what}: another tenant's object answered {s1}: {b1}"
    );
    assert_eq!(s2, 404, "{what}: missing object answered {s2}: {b2}");
    let norm = |b: &Value, id: &str| b.to_string().replace(id, "<ID>");
    assert_eq!(
        norm(&b1, real),
        norm(&b2, missing),
        "{what}: answer differs from a missing id's"
    );
    assert_eq!(b1["error"]["code"], "not_found", "{what}: {b1}");
    n.denied(&format!("{what} ({method} {})", path_of("{id}")));
}

#[tokio::test]
async fn cross_tenant_access_is_not_found_everywhere() {
    let d = Daemon::start(&[]).await;
    let a = d.http();
    let admin = d.http_as(Some(&d.admin_token()));
    let b = d.http_as(Some(&admin.new_tenant("t-bravo").await));
    let mut n = Count(0);

    // Tenant A (t-default): a sandbox with a file, a session, a snapshot, a
    // run with a call held for approval, audit entries.
    let sa = a.create(process(json!({}))).await;
    a.sh(&sa, "echo a-data > /workspace/a.txt").await;
    let sess = a
        .ok(
            "POST",
            &format!("/v1/sandboxes/{sa}/sessions"),
            Some(json!({"argv": ["cat"]})),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let snap = a
        .ok(
            "POST",
            &format!("/v1/sandboxes/{sa}/snapshots"),
            Some(json!({})),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = a.ok("POST", "/v1/runs", Some(json!({"sandbox": sa}))).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let held = a
        .call(
            "POST",
            &format!("/v1/runs/{run}/tool-calls"),
            Some(
                json!({"idempotency_key": "k1", "kind": "exec", "argv": ["true"],
                        "side_effecting": true, "requires_approval": true}),
            ),
        )
        .await;
    assert_eq!(held.status, 202, "{}", held.body);
    let call = held.body["call"]["id"].as_str().unwrap().to_string();
    let doc = a.ok("GET", &format!("/v1/runs/{run}/state"), None).await;

    let sb_missing = "sb-00000000000000000000000000000000";
    let snap_missing = "snap-00000000000000000000000000000000";
    let run_missing = "run-00000000000000000000000000000000";

    // Sandbox endpoints.
    let sandbox_routes: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", "".into(), None),
        (
            "POST",
            "/exec".into(),
            Some(json!({"argv": ["cat", "/workspace/a.txt"]})),
        ),
        (
            "POST",
            "/exec/stream".into(),
            Some(json!({"argv": ["true"]})),
        ),
        ("GET", "/files?path=a.txt".into(), None),
        ("GET", "/files/list?path=.".into(), None),
        ("POST", "/sessions".into(), Some(json!({"argv": ["cat"]}))),
        ("GET", "/sessions".into(), None),
        (
            "POST",
            format!("/sessions/{sess}/input"),
            Some(json!({"data": "x\n"})),
        ),
        ("GET", format!("/sessions/{sess}/output"), None),
        ("DELETE", format!("/sessions/{sess}"), None),
        ("POST", "/pause".into(), Some(json!({}))),
        ("POST", "/resume".into(), None),
        ("GET", "/usage".into(), None),
        ("GET", "/outputs".into(), None),
        ("POST", "/snapshots".into(), Some(json!({}))),
        ("POST", "/fork".into(), Some(json!({"count": 1}))),
        ("DELETE", "".into(), None),
    ];
    for (method, suffix, body) in &sandbox_routes {
        let f = |id: &str| format!("/v1/sandboxes/{id}{suffix}");
        same_as_missing(
            &mut n,
            &b,
            method,
            &f,
            &sa,
            sb_missing,
            body.clone(),
            "sandbox",
        )
        .await;
    }
    // File upload (raw body).
    for id in [&sa, sb_missing] {
        let r = b
            .raw(
                "PUT",
                &format!("/v1/sandboxes/{id}/files?path=b.txt"),
                b"b".to_vec(),
            )
            .await;
        assert_eq!(r.status, 404, "{}", r.body);
    }
    n.denied("sandbox (PUT /v1/sandboxes/{id}/files)");

    // Snapshot endpoints.
    let snapshot_routes: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "", None),
        ("GET", "/export", None),
        ("POST", "/restore", Some(json!({}))),
        ("DELETE", "", None),
    ];
    for (method, suffix, body) in &snapshot_routes {
        let f = |id: &str| format!("/v1/snapshots/{id}{suffix}");
        same_as_missing(
            &mut n,
            &b,
            method,
            &f,
            &snap,
            snap_missing,
            body.clone(),
            "snapshot",
        )
        .await;
    }

    // Run endpoints.
    let run_routes: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", "".into(), None),
        ("GET", "/state".into(), None),
        ("POST", "/steps".into(), Some(json!({"kind": "model_step"}))),
        (
            "POST",
            "/tool-calls".into(),
            Some(json!({"idempotency_key": "k2", "kind": "exec", "argv": ["true"]})),
        ),
        (
            "POST",
            format!("/approvals/{call}/approve"),
            Some(json!({})),
        ),
        ("POST", format!("/approvals/{call}/reject"), Some(json!({}))),
    ];
    for (method, suffix, body) in &run_routes {
        let f = |id: &str| format!("/v1/runs/{id}{suffix}");
        same_as_missing(
            &mut n,
            &b,
            method,
            &f,
            &run,
            run_missing,
            body.clone(),
            "run",
        )
        .await;
    }
    // A run bound to A's sandbox, and resuming A's run from its document.
    for id in [sa.as_str(), sb_missing] {
        let (s, v) = send(&b, "POST", "/v1/runs", Some(json!({"sandbox": id}))).await;
        assert_eq!(s, 404, "{v}");
        assert_eq!(v["error"]["code"], "not_found");
    }
    n.denied("run bound to another tenant's sandbox (POST /v1/runs)");
    let (s, v) = send(&b, "POST", "/v1/runs/resume", Some(doc.clone())).await;
    assert_eq!(s, 404, "{v}");
    n.denied("resume another tenant's run document (POST /v1/runs/resume)");
    let (s, v) = send(
        &b,
        "POST",
        "/v1/runs/resume",
        Some(json!({"document": doc, "sandbox": sa})),
    )
    .await;
    assert_eq!(s, 404, "{v}");
    n.denied("move another tenant's run (POST /v1/runs/resume with sandbox)");

    // Lists and aggregates show B nothing of A.
    let list = b.ok("GET", "/v1/sandboxes", None).await;
    assert_eq!(list, json!([]), "B sees sandboxes: {list}");
    n.denied("list sandboxes (GET /v1/sandboxes)");
    let list = b.ok("GET", "/v1/snapshots", None).await;
    assert_eq!(list, json!([]), "B sees snapshots: {list}");
    n.denied("list snapshots (GET /v1/snapshots)");
    let list = b.ok("GET", "/v1/runs", None).await;
    assert_eq!(list, json!([]), "B sees runs: {list}");
    n.denied("list runs (GET /v1/runs)");
    let audit = b.ok("GET", "/v1/audit", None).await;
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["tenant"] == "t-bravo"),
        "B sees other tenants' audit entries: {audit}"
    );
    n.denied("audit entries (GET /v1/audit)");
    for target in [&sa, &snap] {
        let audit = b
            .ok("GET", &format!("/v1/audit?target={target}"), None)
            .await;
        assert_eq!(audit, json!([]), "{audit}");
    }
    n.denied("audit entries of A's objects (GET /v1/audit?target=)");
    let stats = b.ok("GET", "/v1/store/stats", None).await;
    let a_stats = a.ok("GET", "/v1/store/stats", None).await;
    assert_ne!(stats, a_stats, "B's store stats are A's: {stats}");
    for (k, v) in stats.as_object().unwrap() {
        if let Some(x) = v.as_u64() {
            assert_eq!(x, 0, "B's store stats count A's bytes ({k}): {stats}");
        }
    }
    n.denied("store stats (GET /v1/store/stats)");

    // Nothing B tried changed A's objects.
    let rec = a.ok("GET", &format!("/v1/sandboxes/{sa}"), None).await;
    assert_eq!(rec["state"], "running", "{rec}");
    assert_eq!(
        a.sh(&sa, "cat /workspace/a.txt; ls /workspace").await,
        "a-data\na.txt\n"
    );
    a.ok("GET", &format!("/v1/snapshots/{snap}"), None).await;
    let r = a.ok("GET", &format!("/v1/runs/{run}"), None).await;
    assert!(
        r["tool_calls"].to_string().contains("awaiting_approval"),
        "A's held call was decided: {r}"
    );
    let sessions = a
        .ok("GET", &format!("/v1/sandboxes/{sa}/sessions"), None)
        .await;
    assert!(sessions.to_string().contains(&sess), "{sessions}");
    assert_eq!(
        a.ok("GET", "/v1/snapshots", None)
            .await
            .as_array()
            .unwrap()
            .len(),
        1,
        "B created a snapshot of A's sandbox"
    );

    println!("cross-tenant attempts: {}, all denied", n.0);
    assert!(n.0 >= 35, "only {} attempts", n.0);
}

#[tokio::test]
async fn tokens_and_admin_routes() {
    let d = Daemon::start(&[]).await;
    let mut n = Count(0);
    // The bootstrap token files are private.
    use std::os::unix::fs::PermissionsExt;
    for f in ["token", "admin.token"] {
        let mode = std::fs::metadata(d.dir.join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f} mode {mode:o}");
    }
    let admin = d.http_as(Some(&d.admin_token()));
    let tenant = d.http();

    // Public routes need no token.
    let none = d.http_as(None);
    for p in ["/healthz", "/openapi.json"] {
        let r = none.call("GET", p, None).await;
        assert_eq!(r.status, 200, "{p}");
    }

    // No token, a malformed header, an unknown token: 401 everywhere.
    let unknown = d.http_as(Some("stk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
    let probes: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "/v1/sandboxes", None),
        ("POST", "/v1/sandboxes", Some(json!({}))),
        ("GET", "/v1/doctor", None),
        ("GET", "/v1/snapshots", None),
        ("GET", "/v1/runs", None),
        ("GET", "/v1/audit", None),
        ("GET", "/v1/admin/tenants", None),
        ("GET", "/v1/no-such-route", None),
    ];
    for (who, name) in [(&none, "no token"), (&unknown, "unknown token")] {
        for (m, p, body) in &probes {
            let r = who.call(m, p, body.clone()).await;
            assert_eq!(r.status, 401, "{name} {m} {p}: {}", r.body);
            assert_eq!(r.body["error"]["code"], "unauthorized");
            n.denied(&format!("{name}: {m} {p}"));
        }
    }
    for header in [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer not-a-token",
        "stk_x",
    ] {
        let r = reqwest::Client::new()
            .get(format!("{}/v1/sandboxes", d.url))
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "{header}");
        n.denied(&format!("malformed Authorization {header:?}"));
    }

    // Tenant tokens on admin routes: 403; admin tokens on tenant routes: 403.
    let admin_probes: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "/v1/admin/tenants", None),
        ("POST", "/v1/admin/tenants", Some(json!({"name": "x"}))),
        ("GET", "/v1/admin/tenants/t-default/tokens", None),
        (
            "POST",
            "/v1/admin/tenants/t-default/tokens",
            Some(json!({"name": "x"})),
        ),
        ("DELETE", "/v1/admin/tokens/tok-123", None),
        ("GET", "/v1/admin/tenants/t-default/secrets", None),
        (
            "PUT",
            "/v1/admin/tenants/t-default/secrets/K",
            Some(json!({"value": "v"})),
        ),
        ("DELETE", "/v1/admin/tenants/t-default/secrets/K", None),
    ];
    for (m, p, body) in &admin_probes {
        let r = tenant.call(m, p, body.clone()).await;
        assert_eq!(r.status, 403, "tenant token {m} {p}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "forbidden");
        n.denied(&format!("tenant token on admin route: {m} {p}"));
    }
    let r = admin.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    n.denied("admin token on a tenant route: GET /v1/sandboxes");

    // A token works until it is revoked, then 401. Creation and revocation
    // are audited (in the tenant's log), the token text never.
    let t2 = admin.new_tenant("t-two").await;
    let two = d.http_as(Some(&t2));
    two.ok("GET", "/v1/sandboxes", None).await;
    let toks = admin
        .ok("GET", "/v1/admin/tenants/t-two/tokens", None)
        .await;
    let tok_id = toks[0]["id"].as_str().unwrap().to_string();
    assert!(!toks.to_string().contains(&t2), "token text listed: {toks}");
    admin
        .ok("DELETE", &format!("/v1/admin/tokens/{tok_id}"), None)
        .await;
    let r = two.call("GET", "/v1/sandboxes", None).await;
    assert_eq!(r.status, 401, "{}", r.body);
    n.denied("revoked token: GET /v1/sandboxes");
    let r = admin
        .call("DELETE", &format!("/v1/admin/tokens/{tok_id}"), None)
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let t3 = admin.new_token("t-two").await;
    let audit = d.http_as(Some(&t3)).ok("GET", "/v1/audit", None).await;
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for a in ["tenant_create", "token_create", "token_revoke"] {
        assert!(actions.contains(&a), "{a} not audited: {audit}");
    }
    assert!(!audit.to_string().contains(&t2) && !audit.to_string().contains(&t3));
    // The database holds hashes only.
    let db = std::fs::read(d.dir.join("meta.db")).unwrap_or_default();
    let wal = std::fs::read(d.dir.join("meta.db-wal")).unwrap_or_default();
    for t in [&t2, &t3, &d.token(), &d.admin_token()] {
        assert!(!common::contains(&db, t.as_bytes()) && !common::contains(&wal, t.as_bytes()));
    }

    println!("auth attempts: {}, all denied", n.0);
}

#[tokio::test]
async fn rate_limit_is_per_token() {
    let d = Daemon::start(&["--rate-limit-per-sec", "1", "--rate-limit-burst", "3"]).await;
    let mut n = Count(0);
    let admin = d.http_as(Some(&d.admin_token()));
    let tenant = d.http();
    // Rate limit: a burst of 3 at 1/s. One token runs dry: 429 with
    // Retry-After; another token's bucket is untouched.
    let mut limited = None;
    for _ in 0..30 {
        let r = tenant
            .c
            .get(format!("{}/v1/sandboxes", d.url))
            .send()
            .await
            .unwrap();
        if r.status().as_u16() == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("30 requests at 1/s with a burst of 3 were never limited");
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1, "Retry-After {retry}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    n.denied("rate limit: GET /v1/sandboxes over the burst");
    let t3 = admin.new_tenant("t-other").await;
    let other = d.http_as(Some(&t3));
    assert_eq!(other.call("GET", "/v1/sandboxes", None).await.status, 200);
    // The CLI says so in one line.
    let mut out = d.cli(&["ls"]);
    for _ in 0..20 {
        if !out.status.success() {
            break;
        }
        out = d.cli(&["ls"]);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.starts_with("stasis: rate_limited:"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    n.denied("rate limit through the CLI");

    println!("rate limit attempts: {}, all denied", n.0);
}

#[tokio::test]
async fn secrets_reach_the_exec_and_no_stored_artifact() {
    let mut d = Daemon::start(&[]).await;
    let a = d.http();
    let admin = d.http_as(Some(&d.admin_token()));
    let secret = format!("s3cr3t-{}-{}", std::process::id(), common::unique("v"));
    let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();

    // Only registered secrets may be named.
    let r = a
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": process(json!({"secrets": ["API_KEY"]}))})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "secrets[0]", "{}", r.body);
    // Registered through the CLI (value on stdin), as the admin.
    let mut child = std::process::Command::new(common::BIN)
        .args([
            "--url",
            &d.url,
            "secret",
            "set",
            "--tenant",
            "t-default",
            "API_KEY",
        ])
        .env("STASIS_DATA_DIR", &d.dir)
        .env_remove("STASIS_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(secret.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = admin
        .ok("GET", "/v1/admin/tenants/t-default/secrets", None)
        .await;
    assert_eq!(names, json!(["API_KEY"]));
    // A tenant token cannot register secrets.
    let r = a
        .call(
            "PUT",
            "/v1/admin/tenants/t-default/secrets/OTHER",
            Some(json!({"value": "x"})),
        )
        .await;
    assert_eq!(r.status, 403);

    let id = a
        .create(process(
            json!({"secrets": ["API_KEY"], "env": {"PLAIN": "p"}}),
        ))
        .await;
    let rec = a.ok("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(rec["manifest_version"], 1);
    let digest = rec["manifest_digest"].as_str().unwrap().to_string();
    assert!(!rec.to_string().contains(&secret));

    // The exec gets it (shown only as hex, so the output is not the secret).
    let out = a
        .sh(
            &id,
            "printf %s \"$API_KEY\" | od -An -tx1 | tr -d ' \\n'; echo; echo $PLAIN",
        )
        .await;
    assert_eq!(out, format!("{hex}\np\n"));
    // So does a session; a run's tool call too.
    let s = a
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["sh"]})),
        )
        .await;
    let sid = s["id"].as_str().unwrap().to_string();
    a.send(&id, &sid, "echo len=${#API_KEY}\n").await;
    a.session_until(&id, &sid, 0, &format!("len={}", secret.len()))
        .await;
    a.ok(
        "DELETE",
        &format!("/v1/sandboxes/{id}/sessions/{sid}"),
        None,
    )
    .await;
    let run = a.ok("POST", "/v1/runs", Some(json!({"sandbox": id}))).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let o = a
        .ok(
            "POST",
            &format!("/v1/runs/{run}/tool-calls"),
            Some(json!({"idempotency_key": "use-key", "kind": "exec",
                        "argv": ["sh", "-c", "test -n \"$API_KEY\" && echo have-key > /workspace/used"]})),
        )
        .await;
    assert_eq!(o["outcome"], "succeeded", "{o}");
    // The sandbox writes files of its own; the secret is not among them.
    a.sh(&id, "echo work > /workspace/out.txt").await;

    // Snapshot (running) and a pause (filesystem snapshot on this backend).
    let snap = a
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    assert_eq!(snap["manifest_digest"], digest.as_str(), "{snap}");
    let snaps = a.ok("GET", "/v1/snapshots", None).await;
    assert!(snaps
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["manifest_digest"] == digest.as_str()));
    a.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    let export =
        a.c.get(format!(
            "{}/v1/snapshots/{}/export",
            d.url,
            snap["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert!(
        !common::contains(&export, secret.as_bytes()),
        "export holds the secret"
    );
    let audit = a.ok("GET", "/v1/audit", None).await;
    assert!(audit.to_string().contains("secret_set"), "{audit}");
    assert!(
        !audit.to_string().contains(&secret),
        "audit holds the secret"
    );
    let runs = a.ok("GET", &format!("/v1/runs/{run}"), None).await;
    assert!(
        !runs.to_string().contains(&secret),
        "run state holds the secret"
    );
    let state = a.ok("GET", &format!("/v1/runs/{run}/state"), None).await;
    assert!(!state.to_string().contains(&secret));

    // Stop the daemon, then scan everything it stored.
    d.kill9();
    let needle = secret.as_bytes();
    let mut scanned = 0usize;
    // 1. Every file in the data dir, raw: metadata DB (+ WAL, SHM), store
    //    objects, sandbox dirs (the writable layer), logs.
    let hits = common::files_containing(&d.dir, needle);
    assert!(hits.is_empty(), "secret found in {hits:?}");
    for f in ["meta.db", "meta.db-wal"] {
        assert!(d.dir.join(f).exists() || f.ends_with("-wal"), "{f} missing");
    }
    scanned += 1;
    // 2. Every snapshot, decrypted through the store: restored to a
    //    directory and scanned, with its record.
    let snaps = common::decrypted_snapshots(&d.dir).await;
    assert!(
        snaps.len() >= 2,
        "expected the user snapshot and the pause snapshot"
    );
    for (rec, out) in &snaps {
        assert!(
            !common::contains(rec.as_bytes(), needle),
            "secret in a record"
        );
        let hits = common::files_containing(out.path(), needle);
        assert!(hits.is_empty(), "secret in snapshot files {hits:?}");
        // The restored layer has the sandbox's files (the scan saw real data).
        let restored = common::files_containing(out.path(), b"have-key");
        assert!(!restored.is_empty(), "snapshot {rec} lacks /workspace/used");
        scanned += 1;
    }
    println!(
        "secret scan: data dir + {} decrypted snapshots, zero hits",
        scanned - 1
    );
    // And the value is really in the database, sealed: the name is there.
    let db = std::fs::read(d.dir.join("meta.db")).unwrap();
    let wal = std::fs::read(d.dir.join("meta.db-wal")).unwrap_or_default();
    assert!(common::contains(&db, b"API_KEY") || common::contains(&wal, b"API_KEY"));
}
