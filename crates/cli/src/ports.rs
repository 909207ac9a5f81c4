//! `stasis port`: signed URLs to a port a sandbox serves, their revocation,
//! and `forward`, a local listener that relays HTTP and WebSocket traffic
//! to the sandbox port through the daemon (like `kubectl port-forward`, at
//! the HTTP level: each request carries the API token to the daemon, which
//! never leaves it for the sandbox).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request};
use clap::Subcommand;
use hyper_util::rt::TokioIo;
use serde_json::json;

use stasis_core::{Error, Result};
use stasis_server::ports::proxy::{self, Activity, Target};

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum PortCmd {
    /// Make a signed URL that opens PORT of sandbox ID without a token, until it expires.
    Url {
        id: String,
        port: u16,
        /// Lifetime: seconds, or a number with s, m, h or d (5s to 7d).
        #[arg(long, default_value = "1h")]
        ttl: String,
    },
    /// Revoke one signed URL of PORT (by its id), or all of them.
    Revoke {
        id: String,
        port: u16,
        url_id: Option<String>,
    },
    /// Listen locally and relay HTTP and WebSocket traffic to PORT of sandbox ID.
    Forward {
        id: String,
        port: u16,
        /// Local address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        local: SocketAddr,
    },
}

/// `1h`, `30m`, `90s`, `2d` or plain seconds.
pub fn parse_ttl(s: &str) -> Result<u64> {
    let bad = || {
        Error::invalid(format!(
            "--ttl: expected seconds or a number with s, m, h or d (got {s:?})"
        ))
    };
    let s = s.trim();
    let (num, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
        Some(_) => (s, 's'),
        None => return Err(bad()),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

fn check_port(port: u16) -> Result<u16> {
    if port == 0 {
        return Err(Error::invalid("port: must be 1-65535"));
    }
    Ok(port)
}

/// `stasis port ...`.
pub async fn port(c: &Client, cmd: PortCmd, json: bool) -> Result<()> {
    match cmd {
        PortCmd::Url { id, port, ttl } => {
            let ttl_secs = parse_ttl(&ttl)?;
            let port = check_port(port)?;
            let mut v = c
                .post(
                    &format!("/v1/sandboxes/{id}/ports/{port}/urls"),
                    json!({"ttl_secs": ttl_secs}),
                )
                .await?;
            // The URL as this client reaches the daemon.
            let path = v["path"].as_str().unwrap_or_default().to_string();
            v["url"] = json!(format!("{}{}", c.base(), path));
            print_value(json, &v, |v| {
                v["url"].as_str().unwrap_or_default().to_string()
            });
        }
        PortCmd::Revoke { id, port, url_id } => {
            let port = check_port(port)?;
            let path = match &url_id {
                Some(u) => format!("/v1/sandboxes/{id}/ports/{port}/urls/{u}"),
                None => format!("/v1/sandboxes/{id}/ports/{port}/urls"),
            };
            c.delete(&path).await?;
            let v =
                json!({"revoked": url_id.clone().unwrap_or_else(|| "all".into()), "port": port});
            print_value(json, &v, |_| match &url_id {
                Some(u) => format!("revoked port URL {u}"),
                None => format!("revoked every signed URL of port {port}"),
            });
        }
        PortCmd::Forward { id, port, local } => {
            forward(c, id, check_port(port)?, local, json).await?
        }
    }
    Ok(())
}

/// The daemon's `host:port` from its URL (plain http only).
fn daemon_addr(base: &str) -> Result<String> {
    let rest = base.strip_prefix("http://").ok_or_else(|| {
        Error::invalid(format!(
            "port forward needs an http:// daemon URL (got {base})"
        ))
    })?;
    let host = rest.split('/').next().unwrap_or(rest);
    Ok(if host.contains(':') && !host.ends_with(']') {
        host.to_string()
    } else {
        format!("{host}:80")
    })
}

async fn forward(c: &Client, id: String, port: u16, local: SocketAddr, json: bool) -> Result<()> {
    // Fail early on a missing sandbox or a bad token.
    c.sandbox(&id).await?;
    let daemon = daemon_addr(c.base())?;
    let mut add = HeaderMap::new();
    if let Some(t) = c.token() {
        let v = HeaderValue::from_str(&format!("Bearer {t}"))
            .map_err(|_| Error::invalid("the API token is not a valid header value"))?;
        add.insert(axum::http::header::AUTHORIZATION, v);
    }
    let listener = tokio::net::TcpListener::bind(local)
        .await
        .map_err(|e| Error::invalid(format!("--local {local}: {e}")))?;
    let bound = listener.local_addr()?;
    let v = json!({"listening": bound.to_string(), "sandbox": id, "port": port});
    print_value(json, &v, |_| {
        format!("forwarding http://{bound} -> sandbox {id} port {port} (Ctrl-C to stop)")
    });
    let prefix = format!("/v1/sandboxes/{id}/ports/{port}");
    let shared = Arc::new((daemon, prefix, add, port));
    loop {
        let (sock, _) = listener.accept().await?;
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move {
                    let (daemon, prefix, add, port) = &*shared;
                    let r = relay_one(daemon, prefix, add.clone(), *port, req).await;
                    Ok::<_, std::convert::Infallible>(r.unwrap_or_else(error_response))
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(sock), svc)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "forwarded connection ended");
            }
        });
    }
}

async fn relay_one(
    daemon: &str,
    prefix: &str,
    add_headers: HeaderMap,
    port: u16,
    req: Request<hyper::body::Incoming>,
) -> Result<axum::http::Response<Body>> {
    let stream = tokio::net::TcpStream::connect(daemon)
        .await
        .map_err(|e| Error::internal(format!("cannot reach the daemon at {daemon}: {e}")))?;
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let target = Target {
        port,
        path_and_query: format!("{prefix}{pq}"),
        prefix: String::new(),
        client: None,
        max_body: u64::MAX,
        add_headers,
    };
    let activity: Activity = Arc::new(|_, _| {});
    let (parts, body) = req.into_parts();
    let req = Request::from_parts(parts, Body::new(body));
    proxy::relay(stream, req, target, activity).await
}

fn error_response(e: Error) -> axum::http::Response<Body> {
    let body = json!({"error": {"code": e.code, "message": e.message}}).to_string();
    axum::http::Response::builder()
        .status(e.code.http_status())
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("static response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("1h").unwrap(), 3600);
        assert_eq!(parse_ttl("30m").unwrap(), 1800);
        assert_eq!(parse_ttl("90").unwrap(), 90);
        assert_eq!(parse_ttl("90s").unwrap(), 90);
        assert_eq!(parse_ttl("2d").unwrap(), 172800);
        for bad in ["", "h", "1w", "-1h", "1.5h", "abc"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn daemon_addresses() {
        assert_eq!(
            daemon_addr("http://127.0.0.1:7070").unwrap(),
            "127.0.0.1:7070"
        );
        assert_eq!(daemon_addr("http://host").unwrap(), "host:80");
        assert!(daemon_addr("https://host").is_err());
    }
}
