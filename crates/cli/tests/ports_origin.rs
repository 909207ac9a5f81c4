//! What a sandbox serves never shares the console's origin or cookies (real
//! daemon, process backend, loopback only; the ports domain's names do not
//! resolve here, so requests name the port host in `Host` themselves):
//! the daemon's cookies are cut out of requests into the sandbox and out of
//! its responses on every form of port URL, HTTP and WebSocket; the
//! daemon-origin forms are confined with `Content-Security-Policy: sandbox`;
//! a port host serves only its port (never `/ui` or `/v1`) and takes a
//! signed URL (exchanged for a host-only cookie), its header or a token; a
//! request to a server still starting waits for it instead of a 502; the
//! console's CSRF token survives a restart; the event feed's ids count one
//! tenant's entries only.

mod common;
mod ports_fixtures;

use std::time::Duration;

use common::Daemon;
use ports_fixtures::{ws_echo, ws_echo_as, SRV};
use serde_json::{json, Value};

const DOMAIN: &str = "ports.localhost";

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

fn all(r: &reqwest::Response, name: &str) -> Vec<String> {
    r.headers()
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

async fn json_of(r: reqwest::Response) -> Value {
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ports_keep_off_the_consoles_origin() {
    let mut d = Daemon::start(&["--ports-domain", DOMAIN, "--port-listen-wait-ms", "60000"]).await;
    let h = d.http();
    let id = h.create(json!({})).await;
    let put = h
        .raw(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=srv.py"),
            SRV.as_bytes().to_vec(),
        )
        .await;
    assert!(put.status < 300, "{}", put.body);

    // Servers that listen only a while after they are started: requests
    // sent at once wait for them (HTTP and WebSocket) instead of a 502.
    for port in [8002, 8005] {
        h.ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["sh", "-c", format!("sleep 2; exec python3 srv.py {port}")]})),
        )
        .await;
    }
    let p8002 = format!("/v1/sandboxes/{id}/ports/8002");
    let r = h.call("GET", &format!("{p8002}/headers"), None).await;
    assert_eq!(r.status, 200, "waited for the listener: {}", r.body);
    let echoed = ws_echo(
        &d.url,
        &format!("/v1/sandboxes/{id}/ports/8005/ws"),
        Some(&d.token()),
        &[b"early"],
    )
    .await
    .expect("the WebSocket waited for its listener");
    assert_eq!(echoed, [b"early".to_vec()]);

    // A viewer signed in to the console.
    let anon = no_redirects();
    let login = anon
        .post(format!("{}/ui/login", d.url))
        .json(&json!({"token": d.token()}))
        .send()
        .await
        .unwrap();
    let session = all(&login, "set-cookie")[0]
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert!(session.starts_with("stasis_session=scs_"), "{session}");
    let csrf = json_of(login).await["csrf"].as_str().unwrap().to_string();
    let viewer = format!("{session}; app=1; __Host-stasis_session=scs_other");

    // The token route: the session never reaches the sandbox; the app's
    // own cookie does.
    let r =
        h.c.get(format!("{}{p8002}/headers", d.url))
            .header("cookie", &viewer)
            .send()
            .await
            .unwrap();
    let seen = json_of(r).await;
    assert_eq!(seen["cookie"], "app=1", "{seen}");

    // A signed URL: issued on the port's own origin; its /p/ form is
    // confined and strips the session the same way.
    let u = h
        .ok("POST", &format!("{p8002}/urls"), Some(json!({})))
        .await;
    let path = u["path"].as_str().unwrap().to_string();
    let tok = path
        .trim_start_matches("/p/")
        .trim_end_matches('/')
        .to_string();
    let port_host = format!("8002-{id}.{DOMAIN}:{}", d.url.rsplit(':').next().unwrap());
    assert_eq!(
        u["url"],
        format!("http://8002-{id}.{DOMAIN}/?stasis_port_token={tok}")
    );
    let r = anon
        .get(format!("{}{path}headers", d.url))
        .header("cookie", &viewer)
        .send()
        .await
        .unwrap();
    let csp = all(&r, "content-security-policy").join(", ");
    assert!(csp.starts_with("sandbox "), "{csp}");
    assert!(!csp.contains("allow-same-origin"), "{csp}");
    assert_eq!(all(&r, "x-content-type-options"), ["nosniff"]);
    assert_eq!(all(&r, "x-frame-options"), ["DENY"]);
    assert_eq!(json_of(r).await["cookie"], "app=1");

    // A sandbox cannot plant or clear the daemon's cookies.
    let on_daemon = [
        h.c.get(format!("{}{p8002}/setcookie", d.url)),
        anon.get(format!("{}{path}setcookie", d.url)),
        anon.get(format!("{}/setcookie", d.url))
            .header("host", &port_host)
            .header("x-stasis-port-token", &tok),
    ];
    for rb in on_daemon {
        let r = rb.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(all(&r, "set-cookie"), ["app=1; Path=/"]);
    }

    // The port host: only the port, never the console or the API.
    let on_host = |p: &str| anon.get(format!("{}{p}", d.url)).header("host", &port_host);
    let r = on_host("/headers")
        .header("cookie", &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no credentials for the port");
    let r = on_host("/ui/session")
        .header("x-stasis-port-token", &tok)
        .header("cookie", &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.text().await.unwrap(),
        "no such page here",
        "the sandbox's answer"
    );
    let r = on_host("/headers")
        .header("x-stasis-port-token", &tok)
        .header("cookie", &viewer)
        .send()
        .await
        .unwrap();
    assert!(
        all(&r, "content-security-policy").is_empty(),
        "its own origin"
    );
    let seen = json_of(r).await;
    assert_eq!(seen["cookie"], "app=1", "{seen}");
    assert_eq!(seen["host"], "localhost:8002");
    assert_eq!(seen["x-forwarded-host"], port_host.as_str());
    assert!(seen.get("x-stasis-port-token").is_none(), "{seen}");
    // A browser opening the URL: the token becomes a host-only cookie and
    // leaves the address.
    let r = on_host(&format!("/?a=1&stasis_port_token={tok}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(all(&r, "location"), ["/?a=1"]);
    let set = all(&r, "set-cookie");
    assert_eq!(set.len(), 1);
    assert!(
        set[0].starts_with(&format!("stasis_port={tok}; Path=/; HttpOnly")),
        "{set:?}"
    );
    assert!(
        !set[0].to_ascii_lowercase().contains("domain"),
        "host-only: {set:?}"
    );
    let r = on_host("/headers")
        .header("cookie", format!("stasis_port={tok}; app=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await["cookie"],
        "app=2",
        "the URL cookie is not relayed"
    );
    // The URL opens its own port only; a token works too.
    let other = format!("8003-{id}.{DOMAIN}");
    let r = anon
        .get(format!("{}/headers", d.url))
        .header("host", &other)
        .header("x-stasis-port-token", &tok)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r =
        h.c.get(format!("{}/headers", d.url))
            .header("host", &port_host)
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 200);
    // WebSocket on the port host.
    let echoed = ws_echo_as(
        &d.url,
        &port_host,
        "/ws",
        &format!("x-stasis-port-token: {tok}\r\n"),
        &[b"via host"],
    )
    .await
    .unwrap();
    assert_eq!(echoed, [b"via host".to_vec()]);

    // The console's CSRF token is keyed by a secret kept in the database:
    // the same after a restart, and it still authorizes.
    d.restart().await;
    let r = anon
        .get(format!("{}/ui/session", d.url))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(r).await["csrf"], csrf.as_str());
    let r = anon
        .post(format!("{}/ui/logout", d.url))
        .header("cookie", &session)
        .header("x-csrf-token", "0".repeat(64))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = anon
        .post(format!("{}/ui/logout", d.url))
        .header("cookie", &session)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

/// The `id:` of each `audit` event of an SSE stream until `n` arrived.
async fn audit_ids(r: reqwest::Response, n: usize) -> Vec<i64> {
    let mut r = r;
    let mut text = String::new();
    let mut ids = Vec::new();
    while ids.len() < n {
        let chunk = r.chunk().await.unwrap().expect("the feed ended");
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let ev: String = text.drain(..end + 2).collect();
            let field = |name: &str| {
                ev.lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            };
            if field("event:").as_deref() == Some("audit") {
                ids.push(field("id:").unwrap().parse().unwrap());
            }
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn event_ids_count_each_tenants_own_entries() {
    let d = Daemon::start(&[]).await;
    let admin = d.http_as(Some(&d.admin_token()));
    let other = admin.new_tenant("t-other").await;
    let (a, b) = (d.http(), d.http_as(Some(&other)));
    // Interleaved activity of two tenants.
    a.create(json!({})).await;
    b.create(json!({})).await;
    b.create(json!({})).await;
    a.create(json!({})).await;
    let mine = a.ok("GET", "/v1/audit", None).await;
    let n = mine.as_array().unwrap().len();
    assert!(n >= 2, "{mine}");
    // From the start (Last-Event-ID 0): ids 1..=n, no gaps for the other's.
    let feed = |last: usize| {
        a.c.get(format!("{}/v1/events", d.url))
            .header("last-event-id", last.to_string())
            .send()
    };
    let ids = tokio::time::timeout(Duration::from_secs(120), async {
        audit_ids(feed(0).await.unwrap(), n).await
    })
    .await
    .expect("the feed delivered the tenant's entries");
    assert_eq!(ids, (1..=n as i64).collect::<Vec<_>>());
    // Resuming after the first: the rest, with the same ids.
    let rest = tokio::time::timeout(Duration::from_secs(120), async {
        audit_ids(feed(1).await.unwrap(), n - 1).await
    })
    .await
    .expect("the resumed feed delivered the rest");
    assert_eq!(rest, (2..=n as i64).collect::<Vec<_>>());
}
