//! Property test over the API's inputs, through the real router in-process
//! (`tower::ServiceExt::oneshot`) on a real daemon state with one running
//! process sandbox: hostile JSON bodies, path parameters with traversal and
//! invalid UTF-8, hostile query strings, huge headers and bodies always get
//! a 4xx with a JSON error body, never a 5xx or a panic; the file API
//! (reads, ranged reads, writes, exclusive writes, list, stat, recursive
//! remove, mkdir, rename), whatever path or symlink it is given, leaves a
//! canary file outside the sandbox untouched and unread.
//!
//! `harness = false`: the process backend re-executes this test binary as
//! its sandbox shim, which must be dispatched before anything else runs.

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};
use tower::ServiceExt;

use stasis_server::auth::RateLimit;
use stasis_server::daemon::{open, DaemonConfig};
use stasis_server::http::limit::Limiter;
use stasis_server::http::{router, AppState};

struct Env {
    app: Router,
    token: String,
    sandbox: String,
    canary: PathBuf,
    canary_text: String,
}

async fn call(env: &Env, req: Request<Body>) -> (StatusCode, Vec<u8>) {
    let resp = env
        .app
        .clone()
        .oneshot(req)
        .await
        .expect("router is infallible");
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 64 << 20)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    (status, body)
}

fn req(env: &Env, method: &str, uri: &str, body: Vec<u8>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {}", env.token))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request")
}

/// A 4xx whose body is `{"error": {"code", "message"}}`.
fn check_4xx(what: &str, status: StatusCode, body: &[u8]) -> Result<(), TestCaseError> {
    prop_assert!(
        status.is_client_error(),
        "{what}: status {status}: {}",
        String::from_utf8_lossy(body)
    );
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        TestCaseError::fail(format!(
            "{what}: error body is not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        ))
    })?;
    prop_assert!(v["error"]["code"].is_string(), "{what}: {v}");
    prop_assert!(v["error"]["message"].is_string(), "{what}: {v}");
    Ok(())
}

/// Percent-encode arbitrary bytes as one path segment or query value.
fn enc(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// JSON that is never a valid request body: non-objects, or objects whose
/// keys are all unknown (`x_...`) so a required field is missing or an
/// unknown field is refused.
fn hostile_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        Just(json!("../../etc/passwd")),
        Just(json!(u64::MAX)),
    ];
    let tree = leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        tree.clone()
            .prop_filter("not an object", |v| !v.is_object()),
        prop::collection::btree_map("x_[a-z]{1,8}", tree, 1..5)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
    ]
}

/// A hostile body: JSON as above, or raw bytes (invalid UTF-8, truncated JSON).
fn hostile_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        hostile_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        // Not empty nor blank nor `{}`: a pause takes an empty body, so such
        // bytes are a valid request there, not a hostile one.
        prop::collection::vec(any::<u8>(), 1..256).prop_filter("a valid body", |b| {
            let t = String::from_utf8_lossy(b);
            let t = t.trim();
            !t.is_empty() && t.replace(char::is_whitespace, "") != "{}"
        }),
        Just(b"{\"argv\": [\"sh\", \"-c\"".to_vec()),
        Just(vec![0xff, 0xfe, b'{', b'}']),
    ]
}

/// Path segments: traversal, encoded separators, NUL, invalid UTF-8, long.
fn hostile_segment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"..".to_vec()),
        Just(b"../../etc/passwd".to_vec()),
        Just(b"..%2f..%2fetc".to_vec()),
        Just(b"sb-\0".to_vec()),
        Just(vec![0xc3, 0x28]),
        Just(vec![b'a'; 5000]),
        prop::collection::vec(any::<u8>(), 1..80),
        "[a-z./-]{1,30}".prop_map(String::into_bytes),
    ]
}

/// File-API paths aimed at the canary (by traversal, absolute host path,
/// /proc tricks, symlinks created inside the sandbox).
fn hostile_file_path(canary: &Path) -> impl Strategy<Value = Vec<u8>> {
    let abs = canary.display().to_string();
    let rel = abs.trim_start_matches('/').to_string();
    prop_oneof![
        (0usize..12).prop_map(move |n| format!("{}{rel}", "../".repeat(n)).into_bytes()),
        Just(abs.clone().into_bytes()),
        Just(format!("/proc/1/root{abs}").into_bytes()),
        Just(format!("/proc/self/root{abs}").into_bytes()),
        Just(b"link-abs".to_vec()),
        Just(b"link-rel".to_vec()),
        Just(b"link-root/tmp".to_vec()),
        Just(format!("link-root{abs}").into_bytes()),
        Just(format!("link-dir/{}", canary.file_name().unwrap().to_string_lossy()).into_bytes()),
        Just(b"../../etc/passwd".to_vec()),
        prop::collection::vec(any::<u8>(), 1..64),
    ]
}

async fn setup(dir: &Path) -> Env {
    let data = dir.join("data");
    let mut cfg = DaemonConfig::new(data.clone());
    cfg.accel = stasis_backend_microvm::AccelChoice::Tcg;
    cfg.images_dir = dir.join("no-images");
    cfg.cgroup_parent = format!("stasis-fuzz-{}", std::process::id());
    cfg.max_file_bytes = 1 << 20;
    let daemon = open(&cfg).await.expect("daemon state");
    let app = router(AppState {
        manager: daemon.manager.clone(),
        doctor: std::sync::Arc::new(daemon.doctor),
        limiter: std::sync::Arc::new(Limiter::new(RateLimit {
            per_sec: 0,
            burst: 0,
        })),
        runs: daemon.runs.clone(),
        webhooks: daemon.webhooks.clone(),
        ports: std::sync::Arc::new(stasis_server::ports::Ports::new(
            daemon.manager.metrics().registry(),
            Default::default(),
        )),
        console: Default::default(),
    });
    let token = std::fs::read_to_string(data.join("token"))
        .unwrap()
        .trim()
        .to_string();
    let canary_dir = dir.join("outside");
    std::fs::create_dir_all(&canary_dir).unwrap();
    let canary = canary_dir.join("canary.txt");
    let canary_text = format!("canary-{}-do-not-read", std::process::id());
    std::fs::write(&canary, &canary_text).unwrap();
    let mut env = Env {
        app,
        token,
        sandbox: String::new(),
        canary,
        canary_text,
    };
    let body = json!({"manifest": {"backend": "process", "lifecycle": {"on_idle": "nothing"}}});
    let (st, b) = call(
        &env,
        req(
            &env,
            "POST",
            "/v1/sandboxes",
            serde_json::to_vec(&body).unwrap(),
        ),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{}", String::from_utf8_lossy(&b));
    let v: Value = serde_json::from_slice(&b).unwrap();
    env.sandbox = v["id"].as_str().unwrap().to_string();
    // Symlinks inside the sandbox that point out of it.
    let abs = env.canary.display().to_string();
    let dir_abs = canary_dir.display().to_string();
    let script = format!(
        "ln -s {abs} link-abs && ln -s ../../../../../../../..{abs} link-rel && \
         ln -s / link-root && ln -s {dir_abs} link-dir && echo ok"
    );
    let exec = json!({"argv": ["sh", "-c", script]});
    let (st, b) = call(
        &env,
        req(
            &env,
            "POST",
            &format!("/v1/sandboxes/{}/exec", env.sandbox),
            serde_json::to_vec(&exec).unwrap(),
        ),
    )
    .await;
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["stdout"], "ok\n", "{v}");
    env
}

fn json_routes(sb: &str) -> Vec<(&'static str, String)> {
    vec![
        ("POST", "/v1/sandboxes".into()),
        ("POST", format!("/v1/sandboxes/{sb}/exec")),
        ("POST", format!("/v1/sandboxes/{sb}/exec/stream")),
        ("POST", format!("/v1/sandboxes/{sb}/sessions")),
        ("POST", format!("/v1/sandboxes/{sb}/sessions/s1/input")),
        ("POST", format!("/v1/sandboxes/{sb}/pause")),
        ("POST", format!("/v1/sandboxes/{sb}/snapshots")),
        ("POST", format!("/v1/sandboxes/{sb}/fork")),
        ("POST", "/v1/snapshots/snap-x/restore".into()),
        ("POST", "/v1/runs".into()),
        ("POST", "/v1/runs/resume".into()),
        ("POST", "/v1/runs/run-x/steps".into()),
        ("POST", "/v1/runs/run-x/tool-calls".into()),
        ("POST", "/v1/runs/run-x/approvals/c1/approve".into()),
        ("POST", "/v1/runs/run-x/approvals/c1/reject".into()),
        ("POST", "/v1/admin/tenants".into()),
        ("POST", "/v1/templates".into()),
    ]
}

/// Manifests refused for their shape, type or range, with the field named.
fn manifest_cases() -> Vec<(Value, &'static str)> {
    let big = json!(18446744073709551616.0);
    vec![
        (json!([]), "manifest"),
        (json!([1, "process"]), "manifest"),
        (json!("process"), "manifest"),
        (json!({"resources": []}), "resources"),
        (json!({"resources": [1.0, 512]}), "resources"),
        (json!({"lifecycle": [5, "destroy"]}), "lifecycle"),
        (json!({"network": []}), "network"),
        (json!({"env": [["A", "1"]]}), "env"),
        (json!({"mounts": [[]]}), "mounts[0]"),
        (
            json!({"resources": {"memory_mb": -1}}),
            "resources.memory_mb",
        ),
        (
            json!({"resources": {"memory_mb": big}}),
            "resources.memory_mb",
        ),
        (
            json!({"resources": {"memory_mb": "x"}}),
            "resources.memory_mb",
        ),
        (
            json!({"resources": {"memory_mb": 1.5}}),
            "resources.memory_mb",
        ),
        (
            json!({"resources": {"memory_mb": u64::MAX}}),
            "resources.memory_mb",
        ),
        (json!({"resources": {"pids": -5}}), "resources.pids"),
        (json!({"resources": {"disk_mb": -1}}), "resources.disk_mb"),
        (
            json!({"resources": {"disk_mb": u64::MAX}}),
            "resources.disk_mb",
        ),
        (json!({"resources": {"cpus": 1e300}}), "resources.cpus"),
        (
            json!({"lifecycle": {"idle_timeout_secs": -1}}),
            "lifecycle.idle_timeout_secs",
        ),
        (
            json!({"lifecycle": {"on_idle": "bogus"}}),
            "lifecycle.on_idle",
        ),
        (
            json!({"lifecycle": {"max_lifetime_secs": u64::MAX}}),
            "lifecycle.max_lifetime_secs",
        ),
        (
            json!({"lifecycle": {"max_lifetime_secs": 1e16}}),
            "lifecycle.max_lifetime_secs",
        ),
        (
            json!({"lifecycle": {"max_lifetime_secs": 10_000_000_000_000_000u64}}),
            "lifecycle.max_lifetime_secs",
        ),
        (
            json!({"lifecycle": {"paused_ttl_secs": u64::MAX}}),
            "lifecycle.paused_ttl_secs",
        ),
        (
            json!({"lifecycle": {"idle_timeout_secs": u64::MAX}}),
            "lifecycle.idle_timeout_secs",
        ),
        (
            json!({"lifecycle": {"checkpoint_secs": u64::MAX}}),
            "lifecycle.checkpoint_secs",
        ),
        (json!({"image": "/usr/.."}), "image"),
        (json!({"image": "/etc/.."}), "image"),
        (json!({"image": "/var/../"}), "image"),
        (json!({"image": "../../.."}), "image"),
    ]
}

/// Request bodies (and the session read's wait) with a duration or count
/// that cannot be held or is beyond its documented maximum.
fn body_cases(sb: &str) -> Vec<(&'static str, String, Value, &'static str)> {
    let exec = format!("/v1/sandboxes/{sb}/exec");
    vec![
        (
            "POST",
            exec.clone(),
            json!({"argv": ["true"], "timeout_ms": -1}),
            "timeout_ms",
        ),
        (
            "POST",
            exec.clone(),
            json!({"argv": ["true"], "timeout_ms": 18446744073709551616.0}),
            "timeout_ms",
        ),
        (
            "POST",
            exec.clone(),
            json!({"argv": ["true"], "timeout_ms": u64::MAX}),
            "timeout_ms",
        ),
        ("POST", exec, json!({"argv": "true"}), "argv"),
        (
            "POST",
            format!("/v1/sandboxes/{sb}/snapshots"),
            json!({"ttl_secs": u64::MAX}),
            "ttl_secs",
        ),
        (
            "POST",
            format!("/v1/sandboxes/{sb}/snapshots"),
            json!({"ttl_secs": 0}),
            "ttl_secs",
        ),
        (
            "POST",
            format!("/v1/sandboxes/{sb}/snapshots"),
            json!({"ttl_secs": -1}),
            "ttl_secs",
        ),
        (
            "POST",
            format!("/v1/sandboxes/{sb}/fork"),
            json!({"count": 1u64 << 40}),
            "count",
        ),
        (
            "POST",
            format!("/v1/sandboxes/{sb}/fork"),
            json!({"count": 0}),
            "count",
        ),
        (
            "POST",
            format!("/v1/sandboxes/{sb}/sessions/s1/resize"),
            json!({"cols": 80, "rows": 24, "x_unknown": 1}),
            "x_unknown",
        ),
        (
            "GET",
            format!("/v1/sandboxes/{sb}/sessions/s1/output?wait_ms=60001"),
            Value::Null,
            "wait_ms",
        ),
        (
            "GET",
            format!("/v1/sandboxes/{sb}/sessions/s1/output?wait_ms=18446744073709551615"),
            Value::Null,
            "wait_ms",
        ),
    ]
}

fn id_routes() -> Vec<(&'static str, &'static str)> {
    vec![
        ("GET", "/v1/sandboxes/{}"),
        ("DELETE", "/v1/sandboxes/{}"),
        ("POST", "/v1/sandboxes/{}/exec"),
        ("GET", "/v1/sandboxes/{}/files?path=x"),
        ("GET", "/v1/sandboxes/{}/sessions"),
        ("GET", "/v1/sandboxes/SB/sessions/{}/output"),
        ("DELETE", "/v1/sandboxes/SB/sessions/{}"),
        ("POST", "/v1/sandboxes/{}/resume"),
        ("GET", "/v1/snapshots/{}"),
        ("GET", "/v1/snapshots/{}/export"),
        ("DELETE", "/v1/snapshots/{}"),
        ("GET", "/v1/runs/{}"),
        ("GET", "/v1/runs/{}/state"),
        ("POST", "/v1/runs/run-x/approvals/{}/approve"),
        ("GET", "/v1/templates/{}"),
        ("DELETE", "/v1/templates/{}"),
        ("DELETE", "/v1/templates/t/{}"),
    ]
}

fn main() {
    // Must come first: the sandbox shim is this very binary.
    stasis_backend_process::dispatch_if_shim();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("stasis-fuzz-")
        .tempdir()
        .unwrap();
    let env = rt.block_on(setup(tmp.path()));
    let passwd_before = std::fs::read("/etc/passwd").unwrap();
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut total = 0u64;
    let runner = || {
        TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        })
    };

    // 1. Hostile bodies on every JSON route: first the non-object bodies a
    // derived struct would read as a sequence of its fields, then random ones.
    let routes = json_routes(&env.sandbox);
    for (m, p) in &routes {
        for body in [&b"[]"[..], b" [ ] ", b"[{}]", b"null", b"\"x\"", b"7"] {
            let (st, b) = rt.block_on(call(&env, req(&env, m, p, body.to_vec())));
            check_4xx(
                &format!("{m} {p} {}", String::from_utf8_lossy(body)),
                st,
                &b,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            total += 1;
        }
    }
    runner()
        .run(&(0..routes.len(), hostile_body()), |(i, body)| {
            let (m, p) = &routes[i];
            let (st, b) = rt.block_on(call(&env, req(&env, m, p, body)));
            check_4xx(&format!("{m} {p}"), st, &b)
        })
        .expect("hostile JSON bodies");
    total += u64::from(cases);

    // 1b. Manifests of the wrong shape or type at any level, and durations
    // and sizes beyond what they can hold: 400 naming the field, on create
    // and restore, and never a sandbox record.
    for (m, field) in manifest_cases() {
        for (route, code) in [
            ("/v1/sandboxes", "invalid_manifest"),
            ("/v1/snapshots/snap-x/restore", "invalid_manifest"),
        ] {
            let body = serde_json::to_vec(&json!({ "manifest": m })).unwrap();
            let (st, b) = rt.block_on(call(&env, req(&env, "POST", route, body)));
            let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
            assert_eq!(st, StatusCode::BAD_REQUEST, "{route} {m}: {v}");
            assert_eq!(v["error"]["code"], code, "{route} {m}: {v}");
            assert_eq!(v["error"]["field"], field, "{route} {m}: {v}");
            let msg = v["error"]["message"].as_str().unwrap_or("");
            assert!(
                msg.starts_with(&format!("{field}: ")) && !msg.contains('\n'),
                "{route} {m}: {v}"
            );
            total += 1;
        }
    }
    let sb = env.sandbox.clone();
    for (m, p, body, field) in body_cases(&sb) {
        let (st, b) = rt.block_on(call(&env, req(&env, m, &p, body.to_string().into_bytes())));
        let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
        assert_eq!(st, StatusCode::BAD_REQUEST, "{m} {p} {body}: {v}");
        assert_eq!(v["error"]["field"], field, "{m} {p} {body}: {v}");
        total += 1;
    }
    // Wherever an object is expected, anything else is refused and named.
    let sections = ["resources", "lifecycle", "network", "env"];
    runner()
        .run(
            &(
                0..sections.len() + 2,
                hostile_json().prop_filter("not an object", |v| !v.is_object()),
            ),
            |(i, bad)| {
                let (m, field) = match i {
                    // `"manifest": null` is an absent manifest (the default).
                    0 if bad.is_null() => (json!([null]), "manifest".to_string()),
                    0 => (bad.clone(), "manifest".to_string()),
                    1 => (json!({"mounts": [bad.clone()]}), "mounts[0]".to_string()),
                    i => (
                        json!({ sections[i - 2]: bad.clone() }),
                        sections[i - 2].to_string(),
                    ),
                };
                let body = serde_json::to_vec(&json!({ "manifest": m })).unwrap();
                let (st, b) = rt.block_on(call(&env, req(&env, "POST", "/v1/sandboxes", body)));
                check_4xx(&format!("manifest {m}"), st, &b)?;
                let v: Value = serde_json::from_slice(&b).unwrap();
                prop_assert_eq!(st, StatusCode::BAD_REQUEST, "{}", v);
                prop_assert_eq!(
                    v["error"]["code"].as_str(),
                    Some("invalid_manifest"),
                    "{}",
                    v
                );
                prop_assert_eq!(v["error"]["field"].as_str(), Some(field.as_str()), "{}", v);
                Ok(())
            },
        )
        .expect("non-objects in a manifest");
    total += u64::from(cases);
    let (st, b) = rt.block_on(call(&env, req(&env, "GET", "/v1/sandboxes", vec![])));
    let list: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(1),
        "a refused create left a sandbox record: {list}"
    );

    // 2. Hostile path parameters.
    let ids = id_routes();
    let sb = env.sandbox.clone();
    runner()
        .run(&(0..ids.len(), hostile_segment()), |(i, seg)| {
            let (m, p) = ids[i];
            let uri = p.replace("SB", &sb).replace("{}", &enc(&seg));
            let (st, b) = rt.block_on(call(&env, req(&env, m, &uri, b"{}".to_vec())));
            check_4xx(&format!("{m} {uri}"), st, &b)
        })
        .expect("hostile path parameters");
    total += u64::from(cases);

    // 3. The file API with traversal and symlink escapes: whatever the
    //    answer, the canary is not read and not changed, and nothing
    //    appears next to it.
    let sb = env.sandbox.clone();
    runner()
        .run(
            &(
                hostile_file_path(&env.canary),
                0u8..8,
                prop::collection::vec(any::<u8>(), 0..64),
            ),
            |(path, op, data)| {
                let q = enc(&path);
                let text = String::from_utf8_lossy(&path).into_owned();
                let files = format!("/v1/sandboxes/{sb}/files");
                let one = |m: &str, uri: String, body: Vec<u8>| {
                    rt.block_on(call(&env, req(&env, m, &uri, body)))
                };
                let (st, b) = match op {
                    0 | 1 => {
                        let excl = if op == 1 { "&exclusive=true" } else { "" };
                        let mut r = req(&env, "PUT", &format!("{files}?path={q}{excl}"), data);
                        r.headers_mut().remove("content-type");
                        rt.block_on(call(&env, r))
                    }
                    2 => {
                        let list = one("GET", format!("{files}/list?path={q}"), vec![]);
                        prop_assert!(!list.0.is_server_error(), "list {q}: {}", list.0);
                        one("GET", format!("{files}?path={q}"), vec![])
                    }
                    3 => one(
                        "GET",
                        format!("{files}?path={q}&offset=0&length=64"),
                        vec![],
                    ),
                    4 => one("GET", format!("{files}/stat?path={q}"), vec![]),
                    5 => one("DELETE", format!("{files}?path={q}&recursive=true"), vec![]),
                    6 => one(
                        "POST",
                        format!("{files}/mkdir"),
                        json!({"path": text, "parents": true})
                            .to_string()
                            .into_bytes(),
                    ),
                    _ => one(
                        "POST",
                        format!("{files}/rename"),
                        json!({"from": text, "to": "moved"})
                            .to_string()
                            .into_bytes(),
                    ),
                };
                if op >= 5 {
                    // Put back the links a remove or rename may have taken.
                    let abs = env.canary.display().to_string();
                    let dir_abs = env.canary.parent().unwrap().display().to_string();
                    let script = format!(
                        "ln -sfn {abs} link-abs; ln -sfn ../../../../../../../..{abs} link-rel; \
                         ln -sfn / link-root; ln -sfn {dir_abs} link-dir"
                    );
                    let exec = json!({"argv": ["sh", "-c", script]})
                        .to_string()
                        .into_bytes();
                    let r = one("POST", format!("/v1/sandboxes/{sb}/exec"), exec);
                    prop_assert_eq!(r.0, StatusCode::OK);
                }
                prop_assert!(
                    !st.is_server_error(),
                    "{q}: {st} {}",
                    String::from_utf8_lossy(&b)
                );
                if !st.is_success() {
                    check_4xx(&q, st, &b)?;
                }
                prop_assert!(
                    !String::from_utf8_lossy(&b).contains(&env.canary_text),
                    "{q}: the canary was read"
                );
                prop_assert_eq!(
                    std::fs::read_to_string(&env.canary).unwrap(),
                    env.canary_text.clone(),
                    "{}: the canary changed",
                    q
                );
                let siblings = std::fs::read_dir(env.canary.parent().unwrap())
                    .unwrap()
                    .count();
                prop_assert_eq!(siblings, 1, "{}: a file appeared next to the canary", q);
                Ok(())
            },
        )
        .expect("file API confinement");
    total += u64::from(cases);

    // 4. Huge headers, huge and invalid bodies, invalid UTF-8 in queries.
    let sb = env.sandbox.clone();
    runner()
        .run(&(1usize..200_000, 0usize..4), |(len, kind)| {
            let mut r = req(&env, "GET", "/v1/sandboxes", vec![]);
            match kind {
                0 => {
                    // An actor of 1-128 characters is valid; anything longer is not.
                    r.headers_mut().insert(
                        "x-stasis-actor",
                        axum::http::HeaderValue::from_bytes(&vec![b'a'; 128 + len]).unwrap(),
                    );
                }
                1 => {
                    let v = format!("Bearer stk_{}", "A".repeat(len));
                    r.headers_mut().insert("authorization", v.parse().unwrap());
                }
                2 => {
                    let mut v = vec![b'x'; len.min(4096)];
                    v[0] = 0xff;
                    r.headers_mut().insert(
                        "x-stasis-actor",
                        axum::http::HeaderValue::from_bytes(&v).unwrap(),
                    );
                }
                _ => {
                    r = req(
                        &env,
                        "GET",
                        &format!(
                            "/v1/sandboxes/{sb}/files?path=%FF%FE{}",
                            "a".repeat(len.min(8000))
                        ),
                        vec![],
                    );
                }
            }
            let (st, b) = rt.block_on(call(&env, r));
            check_4xx(&format!("kind {kind} len {len}"), st, &b)
        })
        .expect("huge headers");
    total += u64::from(cases);
    for (m, p) in [
        ("POST", format!("/v1/sandboxes/{}/exec", env.sandbox)),
        ("POST", "/v1/sandboxes".to_string()),
        (
            "PUT",
            format!("/v1/sandboxes/{}/files?path=big", env.sandbox),
        ),
    ] {
        let (st, b) = rt.block_on(call(&env, req(&env, m, &p, vec![b' '; 3 << 20])));
        check_4xx(&format!("huge body {m} {p}"), st, &b).expect("huge body");
        assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{m} {p}");
        total += 1;
    }

    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd_before);
    // Clean up the sandbox (processes, cgroups).
    let (st, _) = rt.block_on(call(
        &env,
        req(
            &env,
            "DELETE",
            &format!("/v1/sandboxes/{}", env.sandbox),
            vec![],
        ),
    ));
    assert!(st.is_success(), "destroy: {st}");
    // One summary line in libtest's format, so scripts/test.sh counts it.
    println!("test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    println!("api_fuzz: {total} hostile requests, every one a 4xx with a JSON error (or a confined file operation); canary untouched");
}
