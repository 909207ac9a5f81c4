//! Exposed ports: the daemon's proxy to servers that run inside sandboxes,
//! and the signed URLs that open one port of one sandbox to whoever holds
//! the link, without an API token, until it expires or is revoked.
//!
//! - [`token`]: the signed URL token (format, signature, checks);
//! - [`proxy`]: relaying one HTTP request or WebSocket to a sandbox port;
//! - [`metrics`]: requests, bytes and denials.
//!
//! This module is the service around them: the signing key (random, made
//! by the first daemon that needs it, sealed under the store's master key
//! and kept in the metadata database so every node of a cluster verifies
//! the same URLs), issuing and revoking URLs (audited), and checking a
//! presented token (signature, expiry, the revocation table). Connecting
//! to the port is the manager's (`Manager::connect_port`: resume on
//! traffic, the idle clock).

pub mod metrics;
pub mod proxy;
pub mod token;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;
use utoipa::ToSchema;

use stasis_core::{now_ms, Error, ErrorCode, Result, SandboxId, TenantId};
use stasis_meta::port_urls::ALL_URLS;
use stasis_meta::{Meta, NewAuditEntry};
use stasis_store::Store;

use crate::manager::Ctx;
pub use metrics::{DenyReason, PortMetrics};
pub use token::{Claims, Denial};

/// Shortest and longest lifetime of a signed URL.
pub const MIN_URL_TTL: Duration = Duration::from_secs(5);
pub const MAX_URL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The path prefix of signed URLs: `/p/{token}/...`.
pub const SIGNED_PREFIX: &str = "/p/";

/// Name of the key in `daemon_keys`, and the sealing context.
const KEY_NAME: &str = "port-url-key-v1";
pub(crate) use crate::governance::DAEMON_KEY_TENANT as KEY_TENANT;

/// A signed URL as issued.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PortUrl {
    /// The URL id (for revoking this one URL).
    pub id: String,
    /// Path of the URL on the daemon (`/p/{token}/`).
    pub path: String,
    /// The full URL, when the daemon knows its public address.
    pub url: String,
    pub port: u16,
    pub expires_at_ms: i64,
}

/// The port proxy's shared state: the signing key (loaded once) and metrics.
pub struct Ports {
    key: OnceCell<[u8; 32]>,
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

impl Ports {
    pub fn new(registry: &prometheus::Registry) -> Self {
        Ports {
            key: OnceCell::new(),
            metrics: PortMetrics::new(registry),
        }
    }

    pub fn metrics(&self) -> &PortMetrics {
        &self.metrics
    }

    /// The signing key shared by every daemon of the database.
    async fn key(&self, meta: &Meta, store: &Store) -> Result<&[u8; 32]> {
        self.key
            .get_or_try_init(|| async {
                let tenant = TenantId::parse(KEY_TENANT)?;
                let fresh: [u8; 32] = rand::random();
                let sealed = store.seal_secret(&tenant, KEY_NAME, &fresh);
                let stored = meta.daemon_key_or_insert(KEY_NAME, &sealed).await?;
                let key = store.open_secret(&tenant, KEY_NAME, &stored)?;
                key.try_into().map_err(|_| {
                    Error::internal("the stored port URL key is not 32 bytes".to_string())
                })
            })
            .await
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
        let ports = Ports::new(&reg);
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
        let other = Ports::new(&prometheus::Registry::new());
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
