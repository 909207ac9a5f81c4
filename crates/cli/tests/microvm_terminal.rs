//! A terminal in a microVM through the daemon's attach WebSocket: a pause
//! while attached detaches the client (close 4000, with the offset it got
//! to); output the shell produced meanwhile is replayed when it reattaches
//! from that offset (which resumes the sandbox), and it is the same shell
//! (same pid). Keystroke round trip printed as a FIGURE. Then the same
//! microVM's exposed ports through the daemon (token, signed URL, 502 for a
//! loopback-only server, resume on traffic). Needs the guest
//! image (STASIS_IMAGE_DIR); without it the test says so and passes.

mod common;

use common::Daemon;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn attach(d: &Daemon, path: &str) -> Ws {
    let url = format!("{}{path}", d.url.replacen("http://", "ws://", 1));
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", d.token()).parse().unwrap(),
    );
    tokio_tungstenite::connect_async(req).await.unwrap().0
}

/// Output until `needle` shows; text messages are returned as they come.
async fn until(ws: &mut Ws, needle: &str, got: &mut String) -> Vec<Value> {
    let mut texts = Vec::new();
    let t = Instant::now();
    while !got.contains(needle) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no {needle:?} in {got:?}"
        );
        match tokio::time::timeout(Duration::from_secs(60), ws.next()).await {
            Ok(Some(Ok(Message::Binary(b)))) => got.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(Ok(Message::Text(t)))) => texts.push(serde_json::from_str(&t).unwrap()),
            other => panic!("{other:?} while waiting for {needle:?} in {got:?}"),
        }
    }
    texts
}

async fn send(ws: &mut Ws, s: &str) {
    ws.send(Message::Binary(s.as_bytes().to_vec().into()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_terminal_detaches_on_pause_and_replays_on_reattach() {
    let Some(img) = std::env::var_os("STASIS_IMAGE_DIR") else {
        eprintln!("microVM terminal test NOT RUN: STASIS_IMAGE_DIR is not set");
        return;
    };
    let image = std::path::Path::new(&img)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let d = Daemon::start(&[]).await;
    // QEMU survives its daemon: kill this test's whatever way it ends.
    struct KillQemus(std::path::PathBuf);
    impl Drop for KillQemus {
        fn drop(&mut self) {
            common::kill_qemus_under(&self.0);
        }
    }
    let _qemus = KillQemus(d.dir.clone());
    let h = d.http();
    let id = h
        .create(json!({"backend": "microvm", "image": image, "lifecycle": {"on_idle": "nothing"}}))
        .await;
    let base = format!("/v1/sandboxes/{id}/sessions");
    let s = h
        .ok(
            "POST",
            &base,
            Some(json!({"argv": ["sh", "-i"], "env": {"PS1": "P> "}, "pty": {"cols": 80, "rows": 24}})),
        )
        .await;
    let sid = s["id"].as_str().unwrap().to_string();
    let mut ws = attach(&d, &format!("{base}/{sid}/attach")).await;
    let mut got = String::new();
    let texts = until(&mut ws, "P> ", &mut got).await;
    assert_eq!(texts[0]["type"], "attached", "{texts:?}");
    send(&mut ws, "echo pid=$$ z$((3+4))\n").await;
    until(&mut ws, "z7", &mut got).await;
    let pid: String = got
        .rsplit("pid=")
        .next()
        .unwrap()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();

    let mut times = Vec::new();
    for i in 0..50u8 {
        let key = (b'a' + i % 26) as char;
        let t = Instant::now();
        send(&mut ws, &key.to_string()).await;
        until(&mut ws, &format!("{key}"), &mut String::new()).await;
        times.push(t.elapsed());
    }
    times.sort();
    eprintln!(
        "FIGURE microVM keystroke round trip over the attach WebSocket: p50 {:?}, p90 {:?}",
        times[25], times[45]
    );
    send(&mut ws, "\x15").await; // clear the typed line
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A pause while attached: the client is detached with the offset it
    // got to (everything sent before the detach counted), and a close 4000.
    let r = h
        .call("POST", &format!("/v1/sandboxes/{id}/pause"), None)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let t = Instant::now();
    let mut offset = None;
    loop {
        assert!(t.elapsed() < Duration::from_secs(60));
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] == "detached" {
                    offset = v["offset"].as_u64();
                }
            }
            Some(Ok(Message::Close(Some(f)))) => {
                assert_eq!(u16::from(f.code), 4000, "{f:?}");
                break;
            }
            Some(Ok(Message::Binary(_))) => {}
            other => panic!("{other:?}"),
        }
    }
    let offset = offset.expect("a detached message with the offset");
    assert_eq!(
        h.ok("GET", &format!("/v1/sandboxes/{id}"), None).await["state"],
        "paused"
    );

    // Reattach (resumes it); the client then goes away right after typing,
    // the shell's output comes while nobody is attached and the sandbox is
    // paused again; reattaching from the client's offset replays it.
    let mut ws = attach(&d, &format!("{base}/{sid}/attach?offset={offset}")).await;
    match ws.next().await {
        Some(Ok(Message::Text(t))) => {
            let v: Value = serde_json::from_str(&t).unwrap();
            assert_eq!(v["type"], "attached");
            assert_eq!(v["offset"].as_u64(), Some(offset));
        }
        other => panic!("{other:?}"),
    }
    send(&mut ws, "sleep 2; echo missed-$((40+2))\n").await;
    drop(ws);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let r = h
        .call("POST", &format!("/v1/sandboxes/{id}/pause"), None)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let mut ws = attach(&d, &format!("{base}/{sid}/attach?offset={offset}")).await;
    let mut got = String::new();
    let texts = until(&mut ws, "missed-42", &mut got).await;
    assert_eq!(texts[0]["type"], "attached");
    send(&mut ws, "echo again=$$ q$((1+8))\n").await;
    until(&mut ws, "q9", &mut got).await;
    assert!(
        got.contains(&format!("again={pid} q9")),
        "{got:?} (pid {pid})"
    );
    send(&mut ws, "exit 6\n").await;
    let mut texts = Vec::new();
    let t = Instant::now();
    while !texts.iter().any(|v: &Value| v["type"] == "exit") {
        assert!(t.elapsed() < Duration::from_secs(60));
        match ws.next().await {
            Some(Ok(Message::Text(t))) => texts.push(serde_json::from_str(&t).unwrap()),
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    }
    let exit = texts.iter().find(|v| v["type"] == "exit").unwrap();
    assert_eq!(exit["code"], 6);

    // Exposed ports of the same microVM through the daemon: a server on
    // 0.0.0.0 is reached with the token and with a signed URL; one bound to
    // the guest's loopback only is a 502 that leaves the guest as it was;
    // traffic to a paused microVM resumes it.
    assert_eq!(
        h.sh(
            &id,
            "mkdir -p /tmp/www && echo hello-from-microvm > /tmp/www/hello.txt && echo ok"
        )
        .await,
        "ok\n"
    );
    for (port, bind) in [(8000, "0.0.0.0"), (8001, "127.0.0.1")] {
        let argv = json!([
            "python3",
            "-m",
            "http.server",
            port.to_string(),
            "--bind",
            bind,
            "--directory",
            "/tmp/www"
        ]);
        h.ok("POST", &base, Some(json!({ "argv": argv }))).await;
    }
    let p8000 = format!("/v1/sandboxes/{id}/ports/8000");
    let t = Instant::now();
    let r = loop {
        let r = h.call("GET", &format!("{p8000}/hello.txt"), None).await;
        if r.status == 200 || t.elapsed() > Duration::from_secs(60) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, Some("hello-from-microvm\n"))
    );
    let r = h
        .call(
            "GET",
            &format!("/v1/sandboxes/{id}/ports/8001/hello.txt"),
            None,
        )
        .await;
    assert_eq!(r.status, 502, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "port_unreachable", "{:?}", r.body);
    assert_eq!(h.sh(&id, "echo unharmed").await, "unharmed\n");
    let u = h
        .ok(
            "POST",
            &format!("{p8000}/urls"),
            Some(json!({"ttl_secs": 600})),
        )
        .await;
    let path = u["path"].as_str().unwrap().to_string();
    let r = h
        .call("POST", &format!("/v1/sandboxes/{id}/pause"), None)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let anon = d.http_as(None);
    let t = Instant::now();
    let r = anon.call("GET", &format!("{path}hello.txt"), None).await;
    eprintln!(
        "FIGURE microVM port request to a paused sandbox (resume on traffic): {:?}",
        t.elapsed()
    );
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, Some("hello-from-microvm\n"))
    );
    assert_eq!(
        h.ok("GET", &format!("/v1/sandboxes/{id}"), None).await["state"],
        "running"
    );
    h.call("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}
