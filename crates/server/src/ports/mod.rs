//! Exposed ports: the daemon's proxy to servers that run inside sandboxes,
//! and the signed URLs that open one port of one sandbox to whoever holds
//! the link, without an API token, until it expires or is revoked.
//!
//! - [`token`]: the signed URL token (format, signature, checks);
//! - [`proxy`]: relaying one HTTP request or WebSocket to a sandbox port;
//! - [`metrics`]: requests, bytes and denials;
//! - [`host`]: host routing, `<port>-<sandbox>.<ports domain>`.
//!
//! This module is the service around them: the signing key (random, made
//! by the first daemon that needs it, sealed under the store's master key
//! and kept in the metadata database so every node of a cluster verifies
//! the same URLs), issuing and revoking URLs (audited), and checking a
//! presented token (signature, expiry, the revocation table). Connecting
//! to the port is the manager's (`Manager::connect_port`: resume on
//! traffic, the idle clock); waiting briefly for a server that is still
//! starting is [`connect_waiting`].
//!
//! Where a sandbox's pages are served: on the ports domain, each port has
//! its own origin and a browser authenticates with a signed URL once (its
//! token then rides in [`PORT_COOKIE`], host-only on that origin). The
//! daemon-origin forms (`/p/...`, `/v1/sandboxes/{id}/ports/...`) are for
//! CLI and API use and are confined ([`proxy::confine_to_opaque_origin`]).

pub mod host;
pub mod metrics;
pub mod proxy;
pub mod token;

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use stasis_core::{now_ms, Error, ErrorCode, Result, SandboxId};
use stasis_meta::port_urls::ALL_URLS;
use stasis_meta::{Meta, NewAuditEntry};
use stasis_store::Store;

use crate::daemon_key::DaemonKey;
use crate::manager::Ctx;
pub use host::PortsDomain;
pub use metrics::{DenyReason, PortMetrics};
pub use token::{Claims, Denial};

/// Shortest and longest lifetime of a signed URL.
pub const MIN_URL_TTL: Duration = Duration::from_secs(5);
pub const MAX_URL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The path prefix of signed URLs: `/p/{token}/...`.
pub const SIGNED_PREFIX: &str = "/p/";

/// Name of the key in `daemon_keys`.
const KEY_NAME: &str = "port-url-key-v1";

/// On a port's own origin: the cookie holding the signed URL's token after
/// a browser opened the URL (host-only, so no other origin ever gets it;
/// named apart from the console's session and, like every `stasis_*`
/// cookie, never relayed into the sandbox).
pub const PORT_COOKIE: &str = "stasis_port";
/// On a port's own origin: the query parameter a signed URL carries its
/// token in (exchanged for [`PORT_COOKIE`] on a `GET`).
pub const PORT_TOKEN_PARAM: &str = "stasis_port_token";
/// On a port's own origin: the header a client (not a browser) may send
/// the token in instead.
pub const PORT_TOKEN_HEADER: &str = "x-stasis-port-token";
/// How long a port request waits for a listener by default.
pub const DEFAULT_LISTEN_WAIT: Duration = Duration::from_secs(5);

/// How the daemon serves exposed ports.
#[derive(Debug, Clone)]
pub struct PortsConfig {
    /// Each port on its own origin under this domain (`--ports-domain`).
    pub domain: Option<PortsDomain>,
    /// How long a request waits for a server that does not listen yet
    /// before it is answered 502 (`--port-listen-wait-ms`; zero: not at all).
    pub listen_wait: Duration,
}

impl Default for PortsConfig {
    fn default() -> Self {
        PortsConfig {
            domain: None,
            listen_wait: DEFAULT_LISTEN_WAIT,
        }
    }
}

/// A signed URL as issued.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PortUrl {
    /// The URL id (for revoking this one URL).
    pub id: String,
    /// Path of the URL on the daemon (`/p/{token}/`, for CLI and API use).
    pub path: String,
    /// The URL to open: on the port's own origin when the daemon has a
    /// ports domain (`<port>-<sandbox>.<domain>/?stasis_port_token=...`),
    /// else the path on the daemon's address.
    pub url: String,
    pub port: u16,
    pub expires_at_ms: i64,
}

/// The port proxy's shared state: the signing key (loaded once), the
/// configuration and metrics.
pub struct Ports {
    key: DaemonKey,
    config: PortsConfig,
    metrics: PortMetrics,
}

/// A port number from a path segment: 1-65535, else 400.
pub fn parse_port(s: &str) -> Result<u16> {
    match s.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        _ => Err(
            Error::invalid(format!("port: must be a number 1-65535 (got {s:?})"))
                .with_field("port"),
        ),
    }
}

/// A TTL in seconds within the bounds, else 400.
pub fn check_ttl(ttl_secs: u64) -> Result<Duration> {
    let ttl = Duration::from_secs(ttl_secs);
    if ttl < MIN_URL_TTL || ttl > MAX_URL_TTL {
        return Err(Error::invalid(format!(
            "ttl_secs: must be {}-{} (got {ttl_secs})",
            MIN_URL_TTL.as_secs(),
            MAX_URL_TTL.as_secs()
        ))
        .with_field("ttl_secs"));
    }
    Ok(ttl)
}

/// The 403 a refused signed URL answers.
pub fn denial_error(d: Denial) -> Error {
    Error::new(ErrorCode::Forbidden, d.message())
}

/// `connect`, tried again while it fails with `port_unreachable` (a server
/// still starting, e.g. in a booting microVM) until `wait` has passed; then
/// the last error. Other errors are answered at once.
pub async fn connect_waiting<T, F, Fut>(wait: Duration, mut connect: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(50);
    loop {
        match connect().await {
            Err(e) if e.code == ErrorCode::PortUnreachable => {
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Err(e);
                }
                tokio::time::sleep(pause.min(deadline - now)).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            r => return r,
        }
    }
}

/// The `Set-Cookie` value carrying a signed URL's token on its port's
/// origin: host-only (no `Domain`), httpOnly, Lax (a link from elsewhere
/// opens the page signed in), until the URL expires.
pub fn port_cookie(token: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{PORT_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
        max_age_s.max(0),
        if secure { "; Secure" } else { "" }
    )
}

/// The token in a request's [`PORT_COOKIE`], if any.
pub fn port_cookie_token(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == PORT_COOKIE)
        .map(|(_, v)| v.to_string())
}

/// A query string without [`PORT_TOKEN_PARAM`], and the token it carried.
pub fn take_token_param(query: Option<&str>) -> (Option<String>, Option<String>) {
    let Some(q) = query else { return (None, None) };
    let mut token = None;
    let rest: Vec<&str> = q
        .split('&')
        .filter(|kv| match kv.split_once('=') {
            Some((k, v)) if k == PORT_TOKEN_PARAM => {
                token = Some(v.to_string());
                false
            }
            _ => *kv != PORT_TOKEN_PARAM,
        })
        .collect();
    let rest = (!rest.is_empty()).then(|| rest.join("&"));
    (rest, token)
}

impl Ports {
    pub fn new(registry: &prometheus::Registry, config: PortsConfig) -> Self {
        Ports {
            key: DaemonKey::new(KEY_NAME),
            config,
            metrics: PortMetrics::new(registry),
        }
    }

    pub fn metrics(&self) -> &PortMetrics {
        &self.metrics
    }

    pub fn config(&self) -> &PortsConfig {
        &self.config
    }

    /// The signing key shared by every daemon of the database.
    async fn key(&self, meta: &Meta, store: &Store) -> Result<&[u8; 32]> {
        self.key.get(meta, store).await
    }

    /// Issue a signed URL for `port` of the caller's sandbox `id` (which
    /// must exist and be the caller's: 404 otherwise), audited.
    pub async fn issue(
        &self,
        meta: &Meta,
        store: &Store,
        ctx: &Ctx,
        id: &SandboxId,
        port: u16,
        ttl: Duration,
    ) -> Result<(String, Claims)> {
        meta.get_for(&ctx.tenant, id).await?;
        let now = now_ms();
        let claims = Claims {
            sandbox: id.clone(),
            port,
            expires_at_ms: now + ttl.as_millis() as i64,
            issued_at_ms: now,
            url_id: token::new_url_id(),
        };
        let key = self.key(meta, store).await?;
        let tok = token::sign(key, &claims)
            .ok_or_else(|| Error::internal("could not sign a port URL".to_string()))?;
        let detail = serde_json::json!({
            "port": port, "url_id": claims.url_id, "ttl_secs": ttl.as_secs(),
            "expires_at_ms": claims.expires_at_ms,
        });
        audit(meta, ctx, "port_url_issue", id, detail).await;
        Ok((tok, claims))
    }

    /// Revoke one URL (`url_id`) of a port, or all of the port's URLs
    /// issued until now, audited. 404 for another tenant's sandbox.
    pub async fn revoke(
        &self,
        meta: &Meta,
        ctx: &Ctx,
        id: &SandboxId,
        port: u16,
        url_id: Option<&str>,
    ) -> Result<()> {
        meta.get_for(&ctx.tenant, id).await?;
        if let Some(u) = url_id {
            let ok = u.len() == 24 && u.bytes().all(|b| b.is_ascii_hexdigit());
            if !ok {
                return Err(Error::invalid(format!("url_id: not a port URL id ({u:?})"))
                    .with_field("url_id"));
            }
        }
        // A revocation is needed only while the URLs it covers can live.
        let keep_until = now_ms() + MAX_URL_TTL.as_millis() as i64 + 60_000;
        let target = url_id.map(str::to_ascii_lowercase);
        meta.revoke_port_url(id, port, target.as_deref().unwrap_or(ALL_URLS), keep_until)
            .await?;
        let detail = serde_json::json!({"port": port, "url_id": target});
        audit(meta, ctx, "port_url_revoke", id, detail).await;
        Ok(())
    }

    /// Check a presented token: signature, expiry, revocation. A refusal
    /// is counted and answered 403.
    pub async fn check(&self, meta: &Meta, store: &Store, tok: &str) -> Result<Claims> {
        let key = self.key(meta, store).await?;
        let r = match token::verify(key, tok, now_ms()) {
            Ok(c) => {
                let revoked = meta
                    .port_url_revoked(&c.sandbox, c.port, &c.url_id, c.issued_at_ms)
                    .await?;
                if revoked {
                    Err(Denial::Revoked)
                } else {
                    Ok(c)
                }
            }
            Err(d) => Err(d),
        };
        r.map_err(|d| {
            self.metrics.denied(DenyReason::Url(d));
            denial_error(d)
        })
    }

    /// [`Ports::check`], and the token must open `port` of `sandbox` (the
    /// port host it was presented on): 403 otherwise.
    pub async fn check_for(
        &self,
        meta: &Meta,
        store: &Store,
        tok: &str,
        sandbox: &SandboxId,
        port: u16,
    ) -> Result<Claims> {
        let c = self.check(meta, store, tok).await?;
        if &c.sandbox != sandbox || c.port != port {
            self.metrics.denied(DenyReason::Url(Denial::BadSignature));
            return Err(Error::new(
                ErrorCode::Forbidden,
                "this port URL opens another port or sandbox",
            ));
        }
        Ok(c)
    }
}

async fn audit(meta: &Meta, ctx: &Ctx, action: &str, id: &SandboxId, detail: serde_json::Value) {
    let e = NewAuditEntry {
        tenant: ctx.tenant.clone(),
        actor: ctx.actor.clone(),
        action: action.into(),
        target: id.as_str().into(),
        detail,
    };
    if let Err(e) = meta.audit(e).await {
        tracing::warn!(error = %e, action, "audit append failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_ttls_have_bounds() {
        assert_eq!(parse_port("8000").unwrap(), 8000);
        assert_eq!(parse_port("65535").unwrap(), 65535);
        for bad in ["0", "65536", "-1", "abc", "", "80.5", "99999999999"] {
            let e = parse_port(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
            assert_eq!(e.field.as_deref(), Some("port"));
        }
        assert!(check_ttl(5).is_ok());
        assert!(check_ttl(3600).is_ok());
        assert!(check_ttl(MAX_URL_TTL.as_secs()).is_ok());
        for bad in [0, 4, MAX_URL_TTL.as_secs() + 1] {
            assert_eq!(
                check_ttl(bad).unwrap_err().field.as_deref(),
                Some("ttl_secs")
            );
        }
    }

    #[tokio::test]
    async fn a_port_request_waits_for_a_listener_within_its_bound() {
        fn unreachable() -> Error {
            Error::new(ErrorCode::PortUnreachable, "nothing listens")
        }
        // The server listens at the third try: answered, not 502.
        let mut tries = 0;
        let r = connect_waiting(Duration::from_secs(60), || {
            tries += 1;
            let n = tries;
            async move {
                if n < 3 {
                    Err(unreachable())
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(r.unwrap(), 3);
        // Never listening: the error once the wait is over.
        let mut tries = 0;
        let e = connect_waiting(Duration::from_millis(200), || {
            tries += 1;
            async { Err::<(), _>(unreachable()) }
        })
        .await
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::PortUnreachable);
        assert!(tries >= 2, "tried again before giving up ({tries})");
        // No wait: one try. Another error: answered at once.
        let mut tries = 0;
        let e = connect_waiting(Duration::ZERO, || {
            tries += 1;
            async { Err::<(), _>(unreachable()) }
        })
        .await
        .unwrap_err();
        assert_eq!((e.code, tries), (ErrorCode::PortUnreachable, 1));
        let mut tries = 0;
        let e = connect_waiting(Duration::from_secs(60), || {
            tries += 1;
            async { Err::<(), _>(Error::not_found("sandbox")) }
        })
        .await
        .unwrap_err();
        assert_eq!((e.code, tries), (ErrorCode::NotFound, 1));
    }

    #[test]
    fn the_port_cookie_and_the_token_parameter() {
        let c = port_cookie("tok", 60, true);
        assert_eq!(
            c,
            "stasis_port=tok; Path=/; HttpOnly; SameSite=Lax; Max-Age=60; Secure"
        );
        assert!(!c.contains("Domain"), "host-only");
        assert!(crate::ports::proxy::is_daemon_cookie(PORT_COOKIE));
        let mut h = axum::http::HeaderMap::new();
        h.insert("cookie", "a=1; stasis_port=tok2".parse().unwrap());
        assert_eq!(port_cookie_token(&h).as_deref(), Some("tok2"));
        assert_eq!(
            take_token_param(Some("a=1&stasis_port_token=t&b=2")),
            (Some("a=1&b=2".into()), Some("t".into()))
        );
        assert_eq!(
            take_token_param(Some("stasis_port_token=t")),
            (None, Some("t".into()))
        );
        assert_eq!(take_token_param(Some("a=1")), (Some("a=1".into()), None));
        assert_eq!(take_token_param(None), (None, None));
    }

    #[tokio::test]
    async fn urls_are_checked_and_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        let store = Store::open(
            &format!("file://{}", dir.path().join("store").display()),
            stasis_store::MasterKey::insecure_dev(),
        )
        .await
        .unwrap();
        let reg = prometheus::Registry::new();
        let ports = Ports::new(&reg, PortsConfig::default());
        let c = Claims {
            sandbox: SandboxId::parse("sb-x").unwrap(),
            port: 8000,
            expires_at_ms: now_ms() + 60_000,
            issued_at_ms: now_ms(),
            url_id: token::new_url_id(),
        };
        let key = *ports.key(&meta, &store).await.unwrap();
        // The key is stored once: a second service over the same database
        // (another node) signs and verifies with the same one.
        let other = Ports::new(&prometheus::Registry::new(), PortsConfig::default());
        assert_eq!(*other.key(&meta, &store).await.unwrap(), key);
        let t = token::sign(&key, &c).unwrap();
        assert_eq!(ports.check(&meta, &store, &t).await.unwrap(), c);
        meta.revoke_port_url(&c.sandbox, 8000, &c.url_id, now_ms() + 60_000)
            .await
            .unwrap();
        let e = ports.check(&meta, &store, &t).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        assert!(e.message.contains("revoked"), "{}", e.message);
        let e = ports.check(&meta, &store, "garbage").await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        let text = {
            use prometheus::Encoder;
            let mut b = Vec::new();
            prometheus::TextEncoder::new()
                .encode(&reg.gather(), &mut b)
                .unwrap();
            String::from_utf8(b).unwrap()
        };
        assert!(text.contains("stasis_port_proxy_denials_total{reason=\"revoked\"} 1"));
        assert!(text.contains("stasis_port_proxy_denials_total{reason=\"malformed\"} 1"));
    }
}
