//! Exposed ports on the real daemon (process backend, loopback only): a
//! Python `http.server` and a WebSocket echo inside a sandbox reached
//! through the daemon's proxy with the tenant's token and with signed URLs;
//! resume on traffic; 502 with nothing listening (the sandbox unharmed);
//! expired, revoked, tampered and malformed URLs refused with 403 and
//! counted; another tenant gets 404; the CLI's `port url`, `port revoke`
//! and `port forward`. Prints the denial counts and the proxy's figures
//! (`STASIS_PORTS_BENCH_MB`, default 8, sets the download size).

mod common;
mod ports_fixtures;

use std::time::{Duration, Instant};

use common::{Daemon, Http};
use ports_fixtures::{addr_of, wait_serving, ws_echo, SRV};
use serde_json::{json, Value};

fn code(r: &common::Resp) -> String {
    r.body["error"]["code"].as_str().unwrap_or("").to_string()
}

async fn issue(h: &Http, id: &str, port: u16, ttl: u64) -> Value {
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/ports/{port}/urls"),
        Some(json!({"ttl_secs": ttl})),
    )
    .await
}

/// The denial counts of the proxy's metrics, by reason.
async fn denials(d: &Daemon) -> Vec<(String, u64)> {
    let text = reqwest::get(format!("{}/metrics", d.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("stasis_port_proxy_denials_total{reason=\""))
        .map(|l| {
            let (reason, rest) = l.split_once("\"}").unwrap();
            (reason.to_string(), rest.trim().parse().unwrap())
        })
        .collect()
}

fn count(d: &[(String, u64)], reason: &str) -> u64 {
    d.iter().find(|(r, _)| r == reason).map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ports_through_the_daemon() {
    // Request bodies through the proxy are limited like file uploads.
    let d = Daemon::start(&["--max-file-mb", "4"]).await;
    let h = d.http();
    let id = h.create(json!({})).await;
    let bench_mb: usize = std::env::var("STASIS_PORTS_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let put = h
        .raw(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=srv.py"),
            SRV.as_bytes().to_vec(),
        )
        .await;
    assert!(put.status < 300, "{}", put.body);
    h.sh(
        &id,
        &format!(
            "mkdir -p www && echo hello-from-sandbox > www/hello.txt && \
             head -c {} /dev/urandom > www/big.bin",
            bench_mb << 20
        ),
    )
    .await;
    for argv in [
        json!([
            "python3",
            "-m",
            "http.server",
            "8000",
            "--bind",
            "127.0.0.1",
            "--directory",
            "www"
        ]),
        json!(["python3", "srv.py", "8002"]),
    ] {
        h.ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({ "argv": argv })),
        )
        .await;
    }
    let p8000 = format!("/v1/sandboxes/{id}/ports/8000");
    let p8002 = format!("/v1/sandboxes/{id}/ports/8002");
    wait_serving(&h, &format!("{p8000}/hello.txt")).await;
    wait_serving(&h, &format!("{p8002}/headers")).await;

    // With the token: a file, a sandbox server's own 404 (relayed as is,
    // not turned into a daemon error), a POST body, the headers it saw.
    let r = h.call("GET", &format!("{p8000}/hello.txt"), None).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, Some("hello-from-sandbox\n"))
    );
    let r = h.call("GET", &format!("{p8002}/nothing"), None).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (404, Some("no such page here"))
    );
    let r = h
        .raw("POST", &format!("{p8002}/echo"), b"posted body".to_vec())
        .await;
    assert_eq!((r.status, r.body.as_str()), (200, Some("posted body")));
    let mb: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
    let r =
        h.c.post(format!("{}{p8002}/echo", d.url))
            .body(mb.clone())
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.unwrap() == mb, "a 3 MiB body round trip");
    // A body declared over the limit: 413 before any of it is read, and
    // the connection closes (the client may still be sending it).
    let head = format!(
        "POST {p8002}/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\n\
         Content-Length: {}\r\n\r\n",
        d.token(),
        5u64 << 20
    );
    let mut s = tokio::net::TcpStream::connect(addr_of(&d.url))
        .await
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, head.as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut s, &mut answer)
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(answer.contains("payload_too_large"), "{answer}");
    let seen = h.ok("GET", &format!("{p8002}/headers?q=1"), None).await;
    println!("headers the sandbox saw: {seen}");
    assert!(seen.get("authorization").is_none(), "token leaked: {seen}");
    assert_eq!(seen[":path"], "/headers?q=1");
    assert_eq!(seen["host"], "localhost:8002");
    assert_eq!(seen["x-forwarded-proto"], "http");
    assert_eq!(seen["x-forwarded-prefix"], p8002);
    assert_eq!(seen["x-forwarded-host"], addr_of(&d.url));
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1");

    // A WebSocket with the token (and without: 401).
    let echoed = ws_echo(
        &d.url,
        &format!("{p8002}/ws"),
        Some(&d.token()),
        &[b"ping", &[7u8; 300]],
    )
    .await
    .unwrap();
    assert_eq!(echoed, vec![b"ping".to_vec(), vec![7u8; 300]]);
    let refused = ws_echo(&d.url, &format!("{p8002}/ws"), None, &[b"x"]).await;
    assert!(refused.unwrap_err().contains(" 401 "));

    // Bad ports and TTLs: 400 naming the field.
    for bad in ["0", "65536", "abc", "-1"] {
        let r = h
            .call("GET", &format!("/v1/sandboxes/{id}/ports/{bad}/x"), None)
            .await;
        assert_eq!(
            (r.status, code(&r).as_str()),
            (400, "invalid_argument"),
            "{bad}: {}",
            r.body
        );
        let r = h
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/ports/{bad}/urls"),
                Some(json!({})),
            )
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
    }
    for ttl in [0u64, 4, 604_801] {
        let r = h
            .call(
                "POST",
                &format!("{p8000}/urls"),
                Some(json!({"ttl_secs": ttl})),
            )
            .await;
        assert_eq!(
            (r.status, r.body["error"]["field"].as_str()),
            (400, Some("ttl_secs")),
            "{ttl}"
        );
    }
    let r = h
        .call("POST", &format!("{p8000}/urls"), Some(json!({"ttl": 60})))
        .await;
    assert_eq!(r.status, 400, "unknown field: {}", r.body);

    // Nothing listening: 502 port_unreachable, the sandbox unharmed.
    let r = h
        .call("GET", &format!("/v1/sandboxes/{id}/ports/9/"), None)
        .await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (502, "port_unreachable"),
        "{}",
        r.body
    );
    assert_eq!(h.state(&id).await["state"], "running");
    assert_eq!(h.sh(&id, "echo still-fine").await, "still-fine\n");

    // A signed URL: no token needed, HTTP and WebSocket.
    let anon = d.http_as(None);
    let u = issue(&h, &id, 8000, 60).await;
    let path = u["path"].as_str().unwrap().to_string();
    assert!(path.starts_with("/p/") && path.ends_with('/'), "{u}");
    assert_eq!(u["url"], format!("{}{path}", d.url));
    assert_eq!(u["port"], 8000);
    let r = anon.call("GET", &format!("{path}hello.txt"), None).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, Some("hello-from-sandbox\n"))
    );
    // Without its trailing slash the URL redirects to it (relative links).
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let bare = format!("{}{}?x=1", d.url, path.trim_end_matches('/'));
    let r = no_follow.get(&bare).send().await.unwrap();
    assert_eq!(r.status(), 308);
    assert_eq!(r.headers()["location"], format!("{path}?x=1").as_str());
    let ws = issue(&h, &id, 8002, 60).await;
    let ws_path = ws["path"].as_str().unwrap().to_string();
    let echoed = ws_echo(&d.url, &format!("{ws_path}ws"), None, &[b"signed"])
        .await
        .unwrap();
    assert_eq!(echoed, vec![b"signed".to_vec()]);
    // Its token does not open the port of another URL (signature covers it).
    let r = anon.call("GET", &format!("{ws_path}hello.txt"), None).await;
    assert_eq!(
        r.status, 404,
        "8002 serves its own 404 for this: {}",
        r.body
    );

    // Refusals: tampered, malformed, another sandbox's or port's (a changed
    // byte), expired, revoked one by one and all at once.
    let before = denials(&d).await;
    let tok = path.trim_start_matches("/p/").trim_end_matches('/');
    let mut t = tok.as_bytes().to_vec();
    let i = t.len() / 2;
    t[i] = if t[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(t).unwrap();
    let r = anon
        .call("GET", &format!("/p/{tampered}/hello.txt"), None)
        .await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (403, "forbidden"),
        "{}",
        r.body
    );
    let r = anon.call("GET", "/p/not-a-token/hello.txt", None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let short = issue(&h, &id, 8000, 5).await;
    let revoked = issue(&h, &id, 8000, 60).await;
    h.ok(
        "DELETE",
        &format!("{p8000}/urls/{}", revoked["id"].as_str().unwrap()),
        None,
    )
    .await;
    let r = anon
        .call(
            "GET",
            &format!("{}hello.txt", revoked["path"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(r.status, 403);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("revoked"));
    // The first URL still works; revoking all of port 8000 ends it, and a
    // URL issued afterwards works.
    assert_eq!(
        anon.call("GET", &format!("{path}hello.txt"), None)
            .await
            .status,
        200
    );
    h.ok("DELETE", &format!("{p8000}/urls"), None).await;
    assert_eq!(
        anon.call("GET", &format!("{path}hello.txt"), None)
            .await
            .status,
        403
    );
    let fresh = issue(&h, &id, 8000, 60).await;
    assert_eq!(
        anon.call(
            "GET",
            &format!("{}hello.txt", fresh["path"].as_str().unwrap()),
            None
        )
        .await
        .status,
        200
    );
    // Port 8002's URL was not revoked with 8000's.
    assert!(ws_echo(&d.url, &format!("{ws_path}ws"), None, &[b"x"])
        .await
        .is_ok());
    let r = h
        .call("DELETE", &format!("{p8000}/urls/not-an-id"), None)
        .await;
    assert_eq!(r.status, 400);
    tokio::time::sleep(Duration::from_millis(5200)).await;
    let r = anon
        .call(
            "GET",
            &format!("{}hello.txt", short["path"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(r.status, 403);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("expired"));
    let after = denials(&d).await;
    println!("port proxy denial counts (before -> after this test's refusals):");
    for (reason, n) in &after {
        println!("  {reason}: {} -> {n}", count(&before, reason));
    }
    for (reason, want) in [
        ("bad_signature", 1),
        ("malformed", 1),
        ("revoked", 2),
        ("expired", 1),
    ] {
        assert!(
            count(&after, reason) >= count(&before, reason) + want,
            "{reason}: {after:?}"
        );
    }
    assert!(count(&after, "unreachable") >= 1, "{after:?}");

    // Another tenant: 404 for the proxy and the URL routes.
    let admin = d.http_as(Some(&d.admin_token()));
    let other = d.http_as(Some(&admin.new_tenant("t-ports-other").await));
    for (m, p) in [
        ("GET", format!("{p8000}/hello.txt")),
        ("POST", format!("{p8000}/urls")),
        ("DELETE", format!("{p8000}/urls")),
    ] {
        let r = other.call(m, &p, None).await;
        assert_eq!(
            (r.status, code(&r).as_str()),
            (404, "not_found"),
            "{m} {p}: {}",
            r.body
        );
    }
    // A signed URL still works for anyone who holds it: that is its point.
    assert_eq!(
        other
            .call(
                "GET",
                &format!("{}hello.txt", fresh["path"].as_str().unwrap()),
                None
            )
            .await
            .status,
        200
    );

    // Audit: issued and revoked URLs, with their port and TTL.
    let audit = h
        .ok("GET", &format!("/v1/audit?target={id}&limit=1000"), None)
        .await;
    let actions: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(actions.contains(&"port_url_issue"), "{actions:?}");
    assert!(actions.contains(&"port_url_revoke"), "{actions:?}");
    let issued = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "port_url_issue")
        .unwrap();
    assert_eq!(issued["detail"]["port"], 8000);
    assert_eq!(issued["detail"]["ttl_secs"], 60);

    // Resume on traffic: a paused sandbox answers through the proxy (token
    // and signed URL), running again.
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    assert_eq!(h.state(&id).await["state"], "paused");
    let r = h.call("GET", &format!("{p8000}/hello.txt"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(h.state(&id).await["state"], "running");
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    let r = anon
        .call(
            "GET",
            &format!("{}hello.txt", fresh["path"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(h.state(&id).await["state"], "running");

    // The CLI: a URL with --ttl, revoked by id; bad input exits non-zero.
    let out = d.cli(&["port", "url", &id, "8000", "--ttl", "2m"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(url.starts_with(&format!("{}/p/", d.url)), "{url}");
    let got = reqwest::get(format!("{url}hello.txt")).await.unwrap();
    assert_eq!(got.status(), 200);
    let out = d.cli(&["--json", "port", "url", &id, "8000"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let url_id = v["id"].as_str().unwrap().to_string();
    let out = d.cli(&["port", "revoke", &id, "8000", &url_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = reqwest::get(format!("{}hello.txt", v["url"].as_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(got.status(), 403);
    for bad in [
        vec!["port", "url", &id, "0"],
        vec!["port", "url", &id, "8000", "--ttl", "1w"],
        vec!["port", "url", &id, "8000", "--ttl", "1s"],
        vec!["port", "url", "sb-nope", "8000"],
    ] {
        let out = d.cli(&bad);
        assert!(!out.status.success(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{bad:?}: {err}");
    }

    // `stasis port forward`: a local listener relaying HTTP and WebSocket.
    let mut fwd = std::process::Command::new(common::BIN)
        .args(["--url", &d.url, "--json", "port", "forward", &id, "8002"])
        .env("STASIS_DATA_DIR", &d.dir)
        .env_remove("STASIS_TOKEN")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let line = {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(fwd.stdout.take().unwrap());
        let mut s = String::new();
        // The JSON object printed at start (pretty, several lines).
        loop {
            let mut l = String::new();
            assert!(r.read_line(&mut l).unwrap() > 0, "forward exited");
            s.push_str(&l);
            if l.starts_with('}') {
                break;
            }
        }
        s
    };
    let v: Value = serde_json::from_str(&line).unwrap();
    let local = format!("http://{}", v["listening"].as_str().unwrap());
    let got = reqwest::get(format!("{local}/headers")).await.unwrap();
    assert_eq!(got.status(), 200);
    let seen: Value = got.json().await.unwrap();
    assert!(seen.get("authorization").is_none(), "{seen}");
    assert_eq!(seen[":path"], "/headers");
    let echoed = ws_echo(&local, "/ws", None, &[b"forwarded"]).await.unwrap();
    assert_eq!(echoed, vec![b"forwarded".to_vec()]);
    let _ = fwd.kill();
    let _ = fwd.wait();

    figures(&d, &h, &id, &p8000, bench_mb).await;
    // Requests by authentication and kind, bytes both ways.
    let text = reqwest::get(format!("{}/metrics", d.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str, labels: &[&str]| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter(|l| labels.iter().all(|x| l.contains(x)))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    let requests = "stasis_port_proxy_requests_total";
    assert!(value(requests, &[r#"via="token""#, r#"kind="http""#]) >= 10);
    assert!(value(requests, &[r#"via="token""#, r#"kind="websocket""#]) >= 1);
    assert!(value(requests, &[r#"via="signed_url""#, r#"kind="http""#]) >= 5);
    assert!(value(requests, &[r#"via="signed_url""#, r#"kind="websocket""#]) >= 2);
    let bytes = "stasis_port_proxy_bytes_total";
    assert!(value(bytes, &[r#"direction="from_sandbox""#]) >= (bench_mb as u64) << 20);
    assert!(value(bytes, &[r#"direction="to_sandbox""#]) >= 3 << 20);
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}

/// Throughput of a download through the proxy against the same file from a
/// server on the host's loopback, and the p50 latency of small requests.
async fn figures(d: &Daemon, h: &Http, id: &str, p8000: &str, mb: usize) {
    let c = d.client();
    let t = Instant::now();
    let body = c
        .get(format!("{}{p8000}/big.bin", d.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let proxied = t.elapsed();
    assert_eq!(body.len(), mb << 20);
    // The same bytes served directly on the host's loopback.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bin"), &body).unwrap();
    drop(body);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut py = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let direct_url = format!("http://127.0.0.1:{port}/big.bin");
    let deadline = Instant::now() + Duration::from_secs(20);
    while reqwest::get(&direct_url).await.is_err() {
        assert!(Instant::now() < deadline, "host http.server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = Instant::now();
    let n = reqwest::get(&direct_url)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .len();
    let direct = t.elapsed();
    let _ = py.kill();
    let _ = py.wait();
    assert_eq!(n, mb << 20);
    let mbps = |d: Duration| mb as f64 / d.as_secs_f64();
    let mut lat = Vec::new();
    for _ in 0..40 {
        let t = Instant::now();
        let r = h.call("GET", &format!("{p8000}/hello.txt"), None).await;
        lat.push(t.elapsed());
        assert_eq!(r.status, 200);
    }
    lat.sort();
    println!(
        "figure: {mb} MiB download through the port proxy {:.0} MiB/s ({} ms), \
         direct from a loopback http.server {:.0} MiB/s ({} ms); \
         small GET through the proxy p50 {:.1} ms, p90 {:.1} ms (sandbox {id})",
        mbps(proxied),
        proxied.as_millis(),
        mbps(direct),
        direct.as_millis(),
        lat[lat.len() / 2].as_secs_f64() * 1000.0,
        lat[lat.len() * 9 / 10].as_secs_f64() * 1000.0,
    );
}
