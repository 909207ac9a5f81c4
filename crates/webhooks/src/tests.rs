//! Endpoints, signatures, ordering, retries and dead letters against a
//! receiver on loopback.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use stasis_core::{now_ms, ErrorCode};
use stasis_store::MasterKey;

use super::*;

type Seen = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// A receiver that records requests; answers `status` to each.
async fn receiver(status: StatusCode) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let s2 = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: HeaderMap, body: axum::body::Bytes| {
            let s = s2.clone();
            async move {
                s.lock().unwrap().push((h, body.to_vec()));
                status
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, seen)
}

struct Env {
    _dir: tempfile::TempDir,
    hooks: Arc<Webhooks>,
    meta: Meta,
    t: TenantId,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
    let store = Store::open(
        &format!("file://{}", dir.path().display()),
        MasterKey::insecure_dev(),
    )
    .await
    .unwrap();
    let t = TenantId::parse("t-a").unwrap();
    meta.create_tenant(&t, "a").await.unwrap();
    meta.create_tenant(&TenantId::parse("t-b").unwrap(), "b")
        .await
        .unwrap();
    let hooks = Webhooks::new(
        meta.clone(),
        store,
        WebhookPolicy::new(&["127.0.0.1".into()]).unwrap(),
    );
    Env {
        _dir: dir,
        hooks,
        meta,
        t,
    }
}

fn fast() -> DeliveryConfig {
    DeliveryConfig {
        poll: Duration::from_millis(20),
        attempts: 3,
        backoff: Duration::from_millis(20),
        backoff_max: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
    }
}

async fn happen(e: &Env, action: &str, target: &str) {
    e.meta
        .audit(NewAuditEntry {
            tenant: e.t.clone(),
            actor: "alice".into(),
            action: action.into(),
            target: target.into(),
            detail: serde_json::json!({"k": 1}),
        })
        .await
        .unwrap();
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn events_arrive_signed_in_order_once_each() {
    let e = env().await;
    let (url, seen) = receiver(StatusCode::OK).await;
    happen(&e, "create", "sb-before").await; // before the endpoint: not sent
    let created = e
        .hooks
        .create(&e.t, "alice", &CreateWebhook { url, events: None })
        .await
        .unwrap();
    assert!(created.secret.starts_with("whsec_"));
    let task = e.hooks.spawn("n1".into(), fast());
    let t0 = std::time::Instant::now();
    happen(&e, "create", "sb-1").await;
    happen(&e, "exec", "sb-1").await; // not an event
    happen(&e, "pause", "sb-1").await;
    happen(&e, "delete", "snap-1").await;
    until("3 events", || seen.lock().unwrap().len() >= 3).await;
    println!(
        "webhook delivery latency (3 events, loopback): {} ms",
        t0.elapsed().as_millis()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 3, "exactly the events after creation");
    let types: Vec<String> = got
        .iter()
        .map(|(_, b)| {
            serde_json::from_slice::<serde_json::Value>(b).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        types,
        ["sandbox.created", "sandbox.paused", "snapshot.deleted"]
    );
    for (h, body) in &got {
        let sig = h[sign::HEADER].to_str().unwrap();
        assert!(
            sign::verify(created.secret.as_bytes(), sig, body, now_ms() / 1000, 300),
            "{sig}"
        );
        assert!(!sign::verify(
            b"whsec_wrong",
            sig,
            body,
            now_ms() / 1000,
            300
        ));
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(
            h["stasis-event-id"].to_str().unwrap(),
            v["id"].as_str().unwrap()
        );
        assert_eq!(v["tenant"], "t-a");
        assert_eq!(v["actor"], "alice");
    }
    let list = e.hooks.list(&e.t).await.unwrap();
    assert_eq!((list[0].delivered, list[0].failed), (3, 0));
    task.abort();
}

#[tokio::test]
async fn a_failing_endpoint_retries_then_dead_letters_and_moves_on() {
    let e = env().await;
    let (url, seen) = receiver(StatusCode::INTERNAL_SERVER_ERROR).await;
    let w = e
        .hooks
        .create(
            &e.t,
            "alice",
            &CreateWebhook {
                url,
                events: Some(vec!["sandbox.paused".into()]),
            },
        )
        .await
        .unwrap();
    let task = e.hooks.spawn("n1".into(), fast());
    happen(&e, "create", "sb-1").await; // filtered out
    happen(&e, "pause", "sb-1").await;
    happen(&e, "pause", "sb-2").await;
    until("2 dead letters", || seen.lock().unwrap().len() >= 6).await;
    let mut dead = Vec::new();
    for _ in 0..100 {
        dead = e.hooks.dead_letters(&e.t, &w.info.id).await.unwrap();
        if dead.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert_eq!(dead[0].attempts, 3);
    assert!(dead[0].last_error.contains("500"), "{}", dead[0].last_error);
    assert_eq!(dead[0].payload["target"], "sb-1");
    assert_eq!(
        seen.lock().unwrap().len(),
        6,
        "3 attempts each, the filtered event never"
    );
    task.abort();
}

#[tokio::test]
async fn endpoints_are_checked_and_private_to_their_tenant() {
    let e = env().await;
    for (url, events, code, field) in [
        ("http://10.0.0.1/h", None, ErrorCode::Forbidden, "url"),
        (
            "file:///etc/passwd",
            None,
            ErrorCode::InvalidArgument,
            "url",
        ),
        (
            "http://127.0.0.1/h",
            Some(vec!["sandbox.exploded".to_string()]),
            ErrorCode::InvalidArgument,
            "events",
        ),
        (
            "http://127.0.0.1/h",
            Some(vec![]),
            ErrorCode::InvalidArgument,
            "events",
        ),
    ] {
        let err = e
            .hooks
            .create(
                &e.t,
                "a",
                &CreateWebhook {
                    url: url.into(),
                    events,
                },
            )
            .await
            .unwrap_err();
        assert_eq!(
            (err.code, err.field.as_deref()),
            (code, Some(field)),
            "{url}: {err}"
        );
    }
    let w = e
        .hooks
        .create(
            &e.t,
            "a",
            &CreateWebhook {
                url: "http://127.0.0.1:1/h".into(),
                events: None,
            },
        )
        .await
        .unwrap();
    let b = TenantId::parse("t-b").unwrap();
    assert_eq!(
        e.hooks.delete(&b, "x", &w.info.id).await.unwrap_err().code,
        ErrorCode::NotFound
    );
    assert_eq!(
        e.hooks.dead_letters(&b, &w.info.id).await.unwrap_err().code,
        ErrorCode::NotFound
    );
    assert!(e.hooks.list(&b).await.unwrap().is_empty());
    e.hooks.delete(&e.t, "a", &w.info.id).await.unwrap();
    assert!(e.hooks.list(&e.t).await.unwrap().is_empty());
    // The secret is stored sealed, never as text.
    assert!(!e
        .meta
        .webhook_list(None)
        .await
        .unwrap()
        .iter()
        .any(|h| h.secret_sealed.starts_with(b"whsec_")));
}

/// The example receiver accepts stasis' signature, and refuses a forged
/// one and a replayed (old) one; a redelivery is acknowledged but handled once.
#[tokio::test]
async fn the_example_receiver_refuses_forged_and_replayed_requests() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/webhook_receiver.py"
    );
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let secret = "whsec_example";
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .args(["--port", "0", "--port-file"])
        .arg(&port_file)
        .env("STASIS_WEBHOOK_SECRET", secret)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    until("the receiver's port", || port_file.exists()).await;
    let url = format!(
        "http://127.0.0.1:{}/",
        std::fs::read_to_string(&port_file).unwrap()
    );
    let http = reqwest::Client::new();
    let body = br#"{"id":"evt-7","type":"sandbox.paused"}"#;
    let post = |sig: String| {
        http.post(&url)
            .header(sign::HEADER, sig)
            .body(body.to_vec())
            .send()
    };
    let now = now_ms() / 1000;
    assert_eq!(
        post(sign::sign(secret.as_bytes(), now, body))
            .await
            .unwrap()
            .status(),
        200
    );
    let forged = sign::sign(b"whsec_guess", now, body);
    assert_eq!(post(forged).await.unwrap().status(), 401, "forged");
    let replayed = sign::sign(secret.as_bytes(), now - 3600, body);
    assert_eq!(
        post(replayed).await.unwrap().status(),
        401,
        "replayed an hour later"
    );
    let again = post(sign::sign(secret.as_bytes(), now, body))
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.text().await.unwrap(), "duplicate\n");
    child.kill().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    let lines = String::from_utf8(out.stdout).unwrap();
    assert_eq!(lines.lines().count(), 1, "handled once: {lines}");
}
