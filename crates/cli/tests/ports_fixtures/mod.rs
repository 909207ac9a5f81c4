//! Shared by the exposed-port tests: the server run inside sandboxes
//! (`srv.py`), a minimal WebSocket client, waiting for a server to start.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::Http;

pub const SRV: &str = include_str!("srv.py");

pub fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// A WebSocket handshake at `path` on the daemon, then each message sent
/// (masked binary frames) and its echo read back. Err: the status line of
/// a refused handshake.
pub async fn ws_echo(
    base: &str,
    path: &str,
    token: Option<&str>,
    msgs: &[&[u8]],
) -> Result<Vec<Vec<u8>>, String> {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    ws_echo_as(base, "test", path, &auth, msgs).await
}

/// [`ws_echo`] with another `Host` and extra header lines (each ending `\r\n`).
pub async fn ws_echo_as(
    base: &str,
    host: &str,
    path: &str,
    extra: &str,
    msgs: &[&[u8]],
) -> Result<Vec<Vec<u8>>, String> {
    let mut s = tokio::net::TcpStream::connect(addr_of(base)).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let status = head.lines().next().unwrap_or("").to_string();
    if !status.contains(" 101 ") {
        return Err(status);
    }
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    let mut out = Vec::new();
    for m in msgs {
        let mask = [0x11u8, 0x22, 0x33, 0x44];
        let mut f = vec![0x82u8];
        if m.len() < 126 {
            f.push(0x80 | m.len() as u8);
        } else {
            f.push(0x80 | 126);
            f.extend_from_slice(&(m.len() as u16).to_be_bytes());
        }
        f.extend_from_slice(&mask);
        f.extend(m.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        s.write_all(&f).await.unwrap();
        let mut h = [0u8; 2];
        s.read_exact(&mut h).await.unwrap();
        assert_eq!(h[0], 0x82, "an unmasked final binary frame back");
        let n = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                s.read_exact(&mut l).await.unwrap();
                u16::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut data = vec![0u8; n];
        s.read_exact(&mut data).await.unwrap();
        out.push(data);
    }
    Ok(out)
}

/// GET `path` until the sandbox's server answers (it is still starting).
pub async fn wait_serving(h: &Http, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = h.call("GET", path, None).await;
        if r.status != 502 {
            return;
        }
        assert!(Instant::now() < deadline, "{path} never served: {}", r.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
