//! The E2B control plane end to end over its router, on the control plane
//! with the fake backend (no root, no daemon): what the SDK sends in, what
//! it parses out, and the control plane's state after each call.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use stasis_backend::fake::FakeBackend;
use stasis_backend::Backend;
use stasis_control::{Manager, ManagerConfig, Snapshots};
use stasis_core::{BackendKind, OnIdle, OnLifetime, SandboxId, SandboxState, TenantId};
use stasis_e2b::auth::api_key_of_token;
use stasis_e2b::E2b;
use stasis_meta::Meta;
use stasis_store::{MasterKey, Store};

struct T {
    _tmp: tempfile::TempDir,
    m: Arc<Manager>,
    app: axum::Router,
    key: String,
    other: String,
}

async fn token(meta: &Meta, tenant: &str) -> String {
    let t = TenantId::parse(tenant).unwrap();
    meta.create_tenant(&t, tenant).await.unwrap();
    let token = stasis_access::auth::generate_token();
    meta.insert_token(&stasis_meta::tenants::NewTokenRecord {
        id: &stasis_access::auth::generate_token_id(),
        tenant: Some(&t),
        name: "t",
        hash: &stasis_meta::hash_token(&token),
        is_admin: false,
        scopes: None,
        expires_at_ms: None,
        sandbox: None,
        rotated_from: None,
    })
    .await
    .unwrap();
    api_key_of_token(&token)
}

async fn setup() -> T {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("sandboxes")).unwrap();
    std::fs::create_dir_all(data.join("store")).unwrap();
    let meta = Meta::open(&data.join("meta.db")).await.unwrap();
    let store = Store::open(
        &format!("file://{}", data.join("store").display()),
        MasterKey::insecure_dev(),
    )
    .await
    .unwrap();
    let key = token(&meta, "t-acme").await;
    let other = token(&meta, "t-other").await;
    let mut cfg = ManagerConfig::new(data);
    cfg.default_backend = BackendKind::Process;
    let backend: Arc<dyn Backend> = Arc::new(FakeBackend::new(BackendKind::Process));
    let m = Manager::new(cfg, meta, Snapshots::new(store), vec![backend]);
    let app = stasis_e2b::router(E2b::new(m.clone(), Some("sb.test:8443".into())));
    T {
        _tmp: tmp,
        m,
        app,
        key,
        other,
    }
}

impl T {
    async fn call_as(
        &self,
        key: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value, axum::http::HeaderMap) {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("x-api-key", key);
        let body = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Body::from(b.to_string())
            }
            None => Body::empty(),
        };
        let resp = self
            .app
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        let v = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
        };
        (parts.status, v, parts.headers)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (s, v, _) = self.call_as(&self.key.clone(), method, path, body).await;
        (s, v)
    }

    async fn create(&self, body: Value) -> String {
        let (s, v) = self.call("POST", "/v2/sandboxes", Some(body)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["sandboxID"].as_str().unwrap().to_string()
    }

    async fn record(&self, id: &str) -> stasis_meta::SandboxRecord {
        self.m
            .meta()
            .get(&SandboxId::parse(id).unwrap())
            .await
            .unwrap()
    }
}

fn assert_e2b_error(s: StatusCode, v: &Value, want: u16) {
    assert_eq!(s.as_u16(), want, "{v}");
    assert_eq!(v["code"], want, "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
}

#[tokio::test]
async fn create_answers_what_the_sdk_parses_and_sets_the_lifecycle() {
    let t = setup().await;
    let (s, v) = t
        .call(
            "POST",
            "/v2/sandboxes",
            Some(
                json!({"templateID": "base", "timeout": 60, "metadata": {"sandbox_test_id": "x1"},
                "envVars": {"FOO": "bar"}, "secure": true}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["templateID"], "base");
    assert_eq!(v["envdVersion"], stasis_e2b::api::translate::ENVD_VERSION);
    assert_eq!(v["domain"], "sb.test:8443");
    assert!(v["clientID"].is_string());
    let id = v["sandboxID"].as_str().unwrap();
    // The access token opens this sandbox's data plane.
    let tok = v["envdAccessToken"].as_str().unwrap();
    assert!(tok.contains('.'));
    let r = t.record(id).await;
    assert_eq!(r.state, SandboxState::Running);
    let l = &r.manifest.lifecycle;
    assert_eq!(
        (l.max_lifetime_secs, l.on_lifetime, l.renew_secs),
        (60, OnLifetime::Pause, 60)
    );
    assert_eq!(l.on_idle, OnIdle::Nothing);
    assert_eq!(r.manifest.env.get("FOO").map(String::as_str), Some("bar"));
    // Kill on timeout, and the v1 path.
    let (s, v) = t
        .call(
            "POST",
            "/sandboxes",
            Some(json!({"templateID": "base", "autoPause": false, "timeout": 5})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let r = t.record(v["sandboxID"].as_str().unwrap()).await;
    assert_eq!(r.manifest.lifecycle.on_lifetime, OnLifetime::Destroy);
    // Audited through the control plane, as the E2B actor.
    let entries = t.m.meta().audit_list(None, Some(id), 100).await.unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e.action == "create" && e.actor == "e2b"),
        "{entries:?}"
    );
}

#[tokio::test]
async fn refusals_are_e2b_shaped() {
    let t = setup().await;
    let (s, v, _) = t
        .call_as(
            "e2b_00",
            "POST",
            "/v2/sandboxes",
            Some(json!({"templateID": "base"})),
        )
        .await;
    assert_e2b_error(s, &v, 401);
    let (s, v) = t
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"templateID": "base", "nope": 1})),
        )
        .await;
    assert_e2b_error(s, &v, 400);
    let (s, v) = t.call("POST", "/v2/sandboxes", Some(json!([1]))).await;
    assert_e2b_error(s, &v, 400);
    let (s, v) = t
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"templateID": "base", "mcp": {"x": {}}})),
        )
        .await;
    assert_e2b_error(s, &v, 400);
    assert!(v["message"].as_str().unwrap().contains("mcp"));
    let (s, v) = t
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"templateID": "snap-0000"})),
        )
        .await;
    assert_e2b_error(s, &v, 404);
    // A fork's count below 1 is refused as the request's own fault, before
    // the key is looked at (the SDK's tests send it with a dummy key).
    let (s, v, _) = t
        .call_as(
            "e2b_00",
            "POST",
            "/sandboxes/sb-test/fork",
            Some(json!({"count": 0})),
        )
        .await;
    assert_e2b_error(s, &v, 400);
    assert!(v["message"].as_str().unwrap().contains("count"));
    let (s, v) = t.call("GET", "/sandboxes/nonexisting", None).await;
    assert_e2b_error(s, &v, 404);
    let (s, v) = t.call("DELETE", "/sandboxes/not%20an%20id", None).await;
    assert_e2b_error(s, &v, 404);
    let (s, v) = t.call("GET", "/no/such/route", None).await;
    assert_e2b_error(s, &v, 404);
    // Another tenant's sandbox is not found, for every route.
    let id = t.create(json!({"templateID": "base"})).await;
    for (m, p) in [
        ("GET", format!("/sandboxes/{id}")),
        ("DELETE", format!("/sandboxes/{id}")),
        ("POST", format!("/sandboxes/{id}/pause")),
        ("POST", format!("/v2/sandboxes/{id}/connect")),
        ("GET", format!("/sandboxes/{id}/metrics")),
        ("POST", format!("/sandboxes/{id}/snapshots")),
        ("POST", format!("/sandboxes/{id}/fork")),
    ] {
        let body = (m == "POST").then(|| json!({}));
        let (s, v, _) = t.call_as(&t.other.clone(), m, &p, body).await;
        assert_e2b_error(s, &v, 404);
    }
    let (s, v, _) = t
        .call_as(
            &t.other.clone(),
            "POST",
            &format!("/sandboxes/{id}/timeout"),
            Some(json!({"timeout": 1})),
        )
        .await;
    assert_e2b_error(s, &v, 404);
    assert_eq!(t.record(&id).await.state, SandboxState::Running);
}

#[tokio::test]
async fn info_list_pause_connect_timeout_kill() {
    let t = setup().await;
    let a = t
        .create(json!({"templateID": "base", "metadata": {"sandbox_test_id": "L"}}))
        .await;
    let b = t
        .create(json!({"templateID": "base", "metadata": {"sandbox_test_id": "L", "u": "1"}}))
        .await;
    let (s, v) = t.call("GET", &format!("/sandboxes/{a}"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["sandboxID"], a.as_str());
    assert_eq!(v["state"], "running");
    assert_eq!(v["metadata"], json!({"sandbox_test_id": "L"}));
    assert_eq!(
        v["lifecycle"],
        json!({"onTimeout": "pause", "autoResume": true})
    );
    for k in [
        "startedAt",
        "endAt",
        "cpuCount",
        "memoryMB",
        "diskSizeMB",
        "envdVersion",
        "clientID",
    ] {
        assert!(!v[k].is_null(), "{k} in {v}");
    }
    let end_before = v["endAt"].clone();

    // Metadata filter, newest first, pages of one with x-next-token.
    let (s, v, h) = t
        .call_as(
            &t.key.clone(),
            "GET",
            "/v2/sandboxes?metadata=sandbox_test_id%3DL&limit=1",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["sandboxID"], b.as_str());
    let next = h.get("x-next-token").unwrap().to_str().unwrap().to_string();
    let (_, v, h) = t
        .call_as(
            &t.key.clone(),
            "GET",
            &format!("/v2/sandboxes?metadata=sandbox_test_id%3DL&limit=1&nextToken={next}"),
            None,
        )
        .await;
    assert_eq!(v[0]["sandboxID"], a.as_str());
    assert!(h.get("x-next-token").is_none());
    let (_, v) = t.call("GET", "/v2/sandboxes?metadata=u%3D1", None).await;
    assert_eq!(v.as_array().unwrap().len(), 1);
    let (_, v) = t
        .call("GET", "/v2/sandboxes?template=unknown-template", None)
        .await;
    assert_eq!(v, json!([]));

    // Connect to a running sandbox never shortens its timeout; a longer one extends it.
    let (s, _) = t
        .call(
            "POST",
            &format!("/v2/sandboxes/{a}/connect"),
            Some(json!({"timeout": 10})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, v) = t.call("GET", &format!("/sandboxes/{a}"), None).await;
    assert_eq!(v["endAt"], end_before);
    t.call(
        "POST",
        &format!("/v2/sandboxes/{a}/connect"),
        Some(json!({"timeout": 600})),
    )
    .await;
    let (_, v) = t.call("GET", &format!("/sandboxes/{a}"), None).await;
    assert!(v["endAt"].as_str().unwrap() > end_before.as_str().unwrap());

    // Pause, pause again (409: the SDK answers false), listed as paused.
    let (s, _) = t
        .call("POST", &format!("/sandboxes/{a}/pause"), Some(json!({})))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v) = t
        .call("POST", &format!("/sandboxes/{a}/pause"), Some(json!({})))
        .await;
    assert_e2b_error(s, &v, 409);
    let (_, v) = t
        .call(
            "GET",
            "/v2/sandboxes?state=paused&metadata=sandbox_test_id%3DL",
            None,
        )
        .await;
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert_eq!(v[0]["state"], "paused");
    // Connect resumes it (201), with a fresh access token.
    let (s, v) = t
        .call(
            "POST",
            &format!("/v2/sandboxes/{a}/connect"),
            Some(json!({"timeout": 30})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert!(v["envdAccessToken"].is_string());
    assert_eq!(t.record(&a).await.state, SandboxState::Running);

    // Timeout: counted from now; 0 reaches it at once.
    let (s, _) = t
        .call(
            "POST",
            &format!("/sandboxes/{a}/timeout"),
            Some(json!({"timeout": 5})),
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert!(t.record(&a).await.manifest.lifecycle.max_lifetime_secs <= 7);
    let (s, v) = t
        .call("POST", &format!("/sandboxes/{a}/timeout"), Some(json!({})))
        .await;
    assert_e2b_error(s, &v, 400);

    // Kill: 204, then not found everywhere.
    let (s, _) = t.call("DELETE", &format!("/sandboxes/{a}"), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v) = t.call("DELETE", &format!("/sandboxes/{a}"), None).await;
    assert_e2b_error(s, &v, 404);
    let (s, v) = t.call("GET", &format!("/sandboxes/{a}"), None).await;
    assert_e2b_error(s, &v, 404);
    let (_, v) = t
        .call("GET", "/v2/sandboxes?metadata=sandbox_test_id%3DL", None)
        .await;
    assert_eq!(v.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn snapshots_restore_list_delete_and_fork() {
    let t = setup().await;
    let a = t
        .create(json!({"templateID": "base", "metadata": {"k": "v"}}))
        .await;
    let (s, v) = t
        .call(
            "POST",
            &format!("/sandboxes/{a}/snapshots"),
            Some(json!({})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let snap = v["snapshotID"].as_str().unwrap().to_string();
    assert_eq!(v["names"], json!([]));
    let (s, v) = t
        .call(
            "POST",
            &format!("/sandboxes/{a}/snapshots"),
            Some(json!({"name": "named-snap"})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let named = v["snapshotID"].as_str().unwrap().to_string();
    assert!(v["names"][0].as_str().unwrap().contains("named-snap"));

    let (_, v) = t.call("GET", "/snapshots", None).await;
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["snapshotID"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&snap.as_str()) && ids.contains(&named.as_str()),
        "{v}"
    );
    let (_, v) = t
        .call("GET", &format!("/snapshots?sandboxID={a}"), None)
        .await;
    assert_eq!(v.as_array().unwrap().len(), 2);
    let (_, v) = t.call("GET", "/snapshots?name=named-snap", None).await;
    assert_eq!(v.as_array().unwrap().len(), 1);
    let (_, v) = t
        .call("GET", "/snapshots?name=named-snap-does-not-exist", None)
        .await;
    assert_eq!(v, json!([]));

    // A snapshot id is a template id; a stasis template name too.
    let from_snap = t.create(json!({"templateID": snap})).await;
    assert!(t.record(&from_snap).await.source_snapshot.is_some());
    let from_name = t.create(json!({"templateID": "named-snap"})).await;
    assert_eq!(t.record(&from_name).await.state, SandboxState::Running);

    // Delete: 204, then 404 (the SDK's true, then false).
    for id in [&snap, &named] {
        let (s, _) = t.call("DELETE", &format!("/templates/{id}"), None).await;
        assert_eq!(s, StatusCode::NO_CONTENT);
        let (s, v) = t.call("DELETE", &format!("/templates/{id}"), None).await;
        assert_e2b_error(s, &v, 404);
    }

    // Fork: children carry the parent's metadata and their own timeout.
    let (s, v) = t
        .call(
            "POST",
            &format!("/sandboxes/{a}/fork"),
            Some(json!({"count": 2, "timeout": 60})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let kids = v.as_array().unwrap();
    assert_eq!(kids.len(), 2);
    for k in kids {
        let id = k["sandbox"]["sandboxID"].as_str().unwrap();
        assert_ne!(id, a);
        assert!(k["sandbox"]["envdAccessToken"].is_string());
        let (_, d) = t.call("GET", &format!("/sandboxes/{id}"), None).await;
        assert_eq!(d["metadata"], json!({"k": "v"}));
        assert!((60..=62).contains(&t.record(id).await.manifest.lifecycle.max_lifetime_secs));
    }
    t.call("DELETE", &format!("/sandboxes/{a}"), None).await;
    let (s, v) = t
        .call("POST", &format!("/sandboxes/{a}/fork"), Some(json!({})))
        .await;
    assert_e2b_error(s, &v, 404);
}

#[tokio::test]
async fn metrics_sample_the_running_sandbox() {
    let t = setup().await;
    let a = t.create(json!({"templateID": "base"})).await;
    let (s, v) = t
        .call("GET", &format!("/sandboxes/{a}/metrics"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let m = &v[0];
    for k in [
        "cpuCount",
        "cpuUsedPct",
        "memUsed",
        "memTotal",
        "memCache",
        "diskUsed",
        "diskTotal",
        "timestamp",
        "timestampUnix",
    ] {
        assert!(!m[k].is_null(), "{k} in {v}");
    }
    let (_, v) = t
        .call(
            "GET",
            &format!("/sandboxes/{a}/metrics?start=1&end=2"),
            None,
        )
        .await;
    assert_eq!(v, json!([]));
    let (_, v) = t
        .call(
            "GET",
            &format!("/sandboxes/metrics?sandbox_ids={a},sb-gone"),
            None,
        )
        .await;
    assert!(v["sandboxes"][a.as_str()].is_object(), "{v}");
}
