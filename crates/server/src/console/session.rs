//! Console sessions: a browser exchanges an API token once for a random
//! session id kept in an httpOnly, SameSite=Strict cookie. Only the id's
//! hash is stored (`stasis_meta::console_sessions`); the session stands for
//! the token it was made with, so revoking or expiring that token ends it.
//!
//! CSRF: every state-changing request made with the cookie must carry
//! `x-csrf-token`, HMAC-SHA256 of the session id under a server secret (a
//! [`crate::daemon_key::DaemonKey`]: kept sealed in the metadata database,
//! so it survives restarts and every node of a cluster checks the same
//! tokens); the server recomputes it, never stores it, and nobody without
//! the secret can derive it from a session id. The page gets it from the
//! sign-in answer or `GET /ui/session`. A cookie request whose `Origin`
//! names another host is refused outright (cross-site WebSockets included).
//!
//! The cookie is `Path=/`: the pages call both `/ui/...` and `/v1/...`
//! (every API route a tenant has), and a cookie has one path. It never
//! reaches a sandbox: the port proxy strips `stasis_*` cookies, and on the
//! ports domain the cookie (host-only) is not sent at all. Over TLS it is
//! `__Host-stasis_session`, which a browser accepts only without `Domain`
//! and with `Path=/`, so a page on a sibling host cannot plant one.

use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;

use axum::http::{HeaderMap, Method};
use stasis_core::{now_ms, Error, ErrorCode, Result};
use stasis_meta::console_sessions::ConsoleSession;
use stasis_meta::{Meta, NewAuditEntry};

use crate::auth::{live_token, unauthorized, Identity};
use crate::scope::Scopes;

/// The session cookie's name.
pub const COOKIE: &str = "stasis_session";
/// Its name over TLS (the browser enforces host-only, `Path=/`, `Secure`).
pub const SECURE_COOKIE: &str = "__Host-stasis_session";
/// Name of the CSRF secret in `daemon_keys`.
pub const CSRF_KEY_NAME: &str = "console-csrf-key-v1";
/// The header carrying the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Prefix of a session id (the cookie's value).
const PREFIX: &str = "scs_";
/// How long a session lasts (never longer than its token).
pub const SESSION_TTL_MS: i64 = 12 * 3600 * 1000;

/// A fresh session id: `scs_` + 32 random bytes, base64url.
pub fn generate_id() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    format!(
        "{PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    )
}

fn derive(ctx: &str, id: &str) -> String {
    hex::encode(blake3::derive_key(ctx, id.as_bytes()))
}

/// What is stored for a session id.
pub fn hash_id(id: &str) -> String {
    derive("stasis 2026-12 console session v1", id)
}

/// The CSRF token of a session: HMAC-SHA256 of its id under the server's
/// CSRF secret.
pub fn csrf_of(key: &[u8; 32], id: &str) -> String {
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    m.update(b"stasis console csrf v2\0");
    m.update(id.as_bytes());
    hex::encode(m.finalize().into_bytes())
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The session id in a request's cookies, if any (shape-checked only); the
/// TLS name first.
pub fn cookie_id(headers: &HeaderMap) -> Option<String> {
    let named = |name: &str| {
        for v in headers.get_all(axum::http::header::COOKIE) {
            let Ok(s) = v.to_str() else { continue };
            for part in s.split(';') {
                if let Some((k, val)) = part.trim().split_once('=') {
                    if k == name && val.starts_with(PREFIX) && val.len() <= 128 {
                        return Some(val.to_string());
                    }
                }
            }
        }
        None
    };
    named(SECURE_COOKIE).or_else(|| named(COOKIE))
}

/// The host a request was addressed to.
fn host(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
}

/// A cookie request from a page of another origin is refused: `Origin`,
/// when present, must name the host the request was sent to.
pub fn check_origin(headers: &HeaderMap) -> Result<()> {
    let Some(origin) = headers.get(axum::http::header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let origin_host = origin
        .split_once("://")
        .map(|(_, h)| h.trim_end_matches('/'))
        .unwrap_or("");
    match host(headers) {
        Some(h) if !origin_host.is_empty() && origin_host.eq_ignore_ascii_case(h) => Ok(()),
        _ => Err(Error::new(
            ErrorCode::Forbidden,
            "cross-origin request refused for a console session",
        )),
    }
}

/// A state-changing method needs the session's CSRF token in `x-csrf-token`.
pub fn check_csrf(key: &[u8; 32], method: &Method, headers: &HeaderMap, id: &str) -> Result<()> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let given = headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if constant_eq(given.as_bytes(), csrf_of(key, id).as_bytes()) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorCode::Forbidden,
            "missing or wrong x-csrf-token for this console session",
        ))
    }
}

/// Whether the page was reached over TLS (through a TLS-terminating proxy
/// saying so, or an https `Origin`): the cookie is then `Secure`.
pub fn over_tls(headers: &HeaderMap) -> bool {
    let proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin = headers
        .get(axum::http::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    proto.eq_ignore_ascii_case("https") || origin.starts_with("https://")
}

/// The `Set-Cookie` value of a session (`max_age_s` 0 clears it). `Path=/`:
/// see the module's notes.
pub fn set_cookie(id: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        if secure { SECURE_COOKIE } else { COOKIE },
        max_age_s.max(0),
        if secure { "; Secure" } else { "" }
    )
}

/// A sign-in: who the session acts as.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SignedIn {
    /// The new session id (goes only into the cookie).
    #[serde(skip)]
    pub id: String,
    pub csrf: String,
    pub tenant: Option<String>,
    pub admin: bool,
    pub actor: String,
    pub expires_at_ms: i64,
}

/// The actor a session's decisions are recorded under.
fn actor_name(given: Option<&str>, token_name: &str) -> Result<String> {
    let a = given.map(str::trim).filter(|s| !s.is_empty());
    let a = match a {
        Some(a) => a.to_string(),
        None if token_name.is_empty() => "console".to_string(),
        None => format!("console:{token_name}"),
    };
    if a.len() > 128 || a.chars().any(|c| c.is_control()) {
        return Err(Error::invalid("name must be 1-128 printable characters").with_field("actor"));
    }
    Ok(a)
}

/// Exchange a token for a session (401 for an unknown, revoked or expired token).
pub async fn sign_in(
    meta: &Meta,
    csrf_key: &[u8; 32],
    token: &str,
    actor: Option<&str>,
) -> Result<SignedIn> {
    let token = token.trim();
    if !token.starts_with(crate::auth::TOKEN_PREFIX) || token.len() > 128 {
        return Err(unauthorized("invalid or revoked token"));
    }
    let rec = live_token(meta, token).await?;
    let now = now_ms();
    let mut expires = now + SESSION_TTL_MS;
    if let Some(t) = rec.expires_at_ms {
        expires = expires.min(t);
    }
    let id = generate_id();
    let actor = actor_name(actor, &rec.name)?;
    meta.console_session_insert(&ConsoleSession {
        id_hash: hash_id(&id),
        token_id: rec.id.clone(),
        actor: actor.clone(),
        created_at_ms: now,
        expires_at_ms: expires,
    })
    .await?;
    if let Some(tenant) = &rec.tenant {
        meta.audit(NewAuditEntry {
            tenant: tenant.clone(),
            actor: actor.clone(),
            action: "console_sign_in".into(),
            target: rec.id.clone(),
            detail: serde_json::json!({ "expires_at_ms": expires }),
        })
        .await?;
    }
    Ok(SignedIn {
        csrf: csrf_of(csrf_key, &id),
        tenant: rec.tenant.map(|t| t.as_str().to_string()),
        admin: rec.is_admin,
        actor,
        expires_at_ms: expires,
        id,
    })
}

/// The session `id` stands for, as the token's identity with the session's
/// actor (401 when the session or its token is gone).
pub async fn resolve(meta: &Meta, id: &str) -> Result<(Identity, ConsoleSession)> {
    let s = meta
        .console_session(&hash_id(id))
        .await?
        .ok_or_else(|| unauthorized("console session expired or signed out; sign in again"))?;
    let rec = match meta.get_token(&s.token_id).await {
        Ok(r) => r,
        Err(e) if e.code == ErrorCode::NotFound => {
            return Err(unauthorized("the session's token no longer exists"))
        }
        Err(e) => return Err(e),
    };
    if rec.revoked_at_ms.is_some() || rec.expired(now_ms()) {
        return Err(unauthorized(
            "the session's token was revoked or has expired",
        ));
    }
    let id = Identity {
        scopes: Scopes::from_stored(rec.scopes.as_deref()),
        sandbox: rec.sandbox,
        expires_at_ms: Some(s.expires_at_ms),
        token_id: rec.id,
        tenant: rec.tenant,
        is_admin: rec.is_admin,
        actor: s.actor.clone(),
    };
    Ok((id, s))
}

/// Whether a session may be used for `path`. Not for the port proxy: a page
/// a sandbox serves through it would share the daemon's origin, and its
/// scripts could act with the session. The proxy takes a token or a signed URL.
pub fn check_path(path: &str) -> Result<()> {
    let proxied = path
        .strip_prefix("/v1/sandboxes/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(_, rest)| rest.starts_with("ports/"));
    if proxied {
        return Err(Error::new(
            ErrorCode::Forbidden,
            "the port proxy takes a token or a signed URL, not a console session",
        ));
    }
    Ok(())
}

/// Authenticate a request by its session cookie: the session must be live,
/// the origin the same, the path one a session may use, and a
/// state-changing request must carry the CSRF token.
pub async fn identify(
    meta: &Meta,
    csrf_key: &[u8; 32],
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    id: &str,
) -> Result<Identity> {
    check_origin(headers)?;
    check_path(path)?;
    let (ident, _) = resolve(meta, id).await?;
    check_csrf(csrf_key, method, headers, id)?;
    Ok(ident)
}

/// End the session of `id` (sign-out).
pub async fn sign_out(meta: &Meta, id: &str) -> Result<()> {
    meta.console_session_delete(&hash_id(id)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::bootstrap;
    use axum::http::HeaderValue;

    fn hdrs(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const KEY: [u8; 32] = [9; 32];

    #[test]
    fn csrf_tokens_need_the_server_secret() {
        let id = generate_id();
        // The keyless derivation a session id alone gave is refused.
        let keyless = derive("stasis 2026-12 console csrf v1", &id);
        assert_ne!(csrf_of(&KEY, &id), keyless);
        let post = |t: &str| check_csrf(&KEY, &Method::POST, &hdrs(&[(CSRF_HEADER, t)]), &id);
        assert_eq!(post(&keyless).unwrap_err().code, ErrorCode::Forbidden);
        assert!(post(&csrf_of(&KEY, &id)).is_ok());
        // Another secret (another database) makes another token.
        assert!(post(&csrf_of(&[1; 32], &id)).is_err());
        assert_eq!(csrf_of(&KEY, &id).len(), 64);
    }

    #[test]
    fn cookie_csrf_and_origin_rules() {
        let id = generate_id();
        let h = hdrs(&[("cookie", &format!("a=b; {COOKIE}={id}; c=d"))]);
        assert_eq!(cookie_id(&h).as_deref(), Some(id.as_str()));
        assert_eq!(cookie_id(&hdrs(&[("cookie", "stasis_session=x")])), None);
        // The TLS name wins over a plain one.
        let other_id = generate_id();
        let h = hdrs(&[(
            "cookie",
            &format!("{COOKIE}={other_id}; {SECURE_COOKIE}={id}"),
        )]);
        assert_eq!(cookie_id(&h).as_deref(), Some(id.as_str()));
        // GET needs no CSRF token; POST needs the right one.
        assert!(check_csrf(&KEY, &Method::GET, &HeaderMap::new(), &id).is_ok());
        let e = check_csrf(&KEY, &Method::POST, &HeaderMap::new(), &id).unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        let other = csrf_of(&KEY, &generate_id());
        assert!(check_csrf(&KEY, &Method::POST, &hdrs(&[(CSRF_HEADER, &other)]), &id).is_err());
        let good = csrf_of(&KEY, &id);
        assert!(check_csrf(&KEY, &Method::DELETE, &hdrs(&[(CSRF_HEADER, &good)]), &id).is_ok());
        // Origin must be the host itself when given.
        assert!(check_origin(&hdrs(&[("host", "127.0.0.1:7070")])).is_ok());
        assert!(check_origin(&hdrs(&[
            ("host", "127.0.0.1:7070"),
            ("origin", "http://127.0.0.1:7070")
        ]))
        .is_ok());
        assert!(check_origin(&hdrs(&[
            ("host", "127.0.0.1:7070"),
            ("origin", "http://evil.example")
        ]))
        .is_err());
        assert!(check_origin(&hdrs(&[("host", "a"), ("origin", "null")])).is_err());
        // Not through the port proxy.
        assert!(check_path("/v1/sandboxes/sb-1/ports/8080/index.html").is_err());
        assert!(check_path("/v1/sandboxes/sb-1/ports/8080/urls").is_err());
        assert!(check_path("/v1/sandboxes/sb-1/files").is_ok());
        assert!(check_path("/v1/sandboxes").is_ok());
        let c = set_cookie(&id, 60, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("Secure"));
        assert!(c.starts_with("__Host-stasis_session=") && !c.contains("Domain"));
        let c = set_cookie(&id, 60, false);
        assert!(c.starts_with("stasis_session=") && !c.contains("Secure"));
        assert!(over_tls(&hdrs(&[("x-forwarded-proto", "https")])));
        assert!(!over_tls(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn sign_in_resolve_and_sign_out() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        bootstrap(&meta, dir.path()).await.unwrap();
        let tok = std::fs::read_to_string(dir.path().join("token")).unwrap();
        let e = sign_in(&meta, &KEY, "stk_nope", None).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        let s = sign_in(&meta, &KEY, &tok, Some("alice")).await.unwrap();
        assert_eq!(s.csrf, csrf_of(&KEY, &s.id));
        assert!(!s.admin && s.actor == "alice");
        let (ident, _) = resolve(&meta, &s.id).await.unwrap();
        assert_eq!(ident.actor, "alice");
        assert_eq!(ident.tenant.unwrap().as_str(), crate::auth::DEFAULT_TENANT);
        // The stored row is the hash, never the id.
        assert!(meta.console_session(&s.id).await.unwrap().is_none());
        // Revoking the token ends the session.
        let s2 = sign_in(&meta, &KEY, &tok, None).await.unwrap();
        let (ident, _) = resolve(&meta, &s2.id).await.unwrap();
        sign_out(&meta, &s.id).await.unwrap();
        assert_eq!(
            resolve(&meta, &s.id).await.unwrap_err().code,
            ErrorCode::Unauthorized
        );
        meta.revoke_token(&ident.token_id).await.unwrap();
        assert_eq!(
            resolve(&meta, &s2.id).await.unwrap_err().code,
            ErrorCode::Unauthorized
        );
    }
}
