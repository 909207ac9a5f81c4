//! Authentication of the HTTP API.
//!
//! Every request outside [`PUBLIC_PATHS`] (and the console's own `/ui`
//! paths) must carry `Authorization: Bearer <token>`, or the web console's
//! session cookie (`crate::console::session`: a state-changing request with
//! it also needs its CSRF token, and a cross-origin one is refused). The token is hashed and looked up by its hash (so nothing is
//! compared byte by byte against a stored secret); a missing, unknown or
//! revoked token is answered 401 before any handler runs. The caller's
//! [`Identity`] goes into the request's extensions, where the [`Authed`] and
//! [`AdminAuthed`] extractors find it. Each token has its own token bucket
//! ([`super::limit`]); an empty bucket is answered 429 with `Retry-After`.
//! Tokens themselves (their shape, bootstrap, lookup) are [`crate::auth`]'s.

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::{request::Parts, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use stasis_core::{Error, ErrorCode, Result};
use stasis_meta::Meta;

use super::error::ApiError;
use super::state::AppState;
use crate::auth::{live_token, unauthorized, Identity, TOKEN_PREFIX};
use crate::manager::Ctx;
use crate::scope::Scopes;

/// Paths answered without a token.
pub const PUBLIC_PATHS: &[&str] = &["/healthz", "/readyz", "/openapi.json", "/metrics"];

/// Paths under this prefix are signed port URLs: the URL is the credential
/// (checked by [`super::ports`]), no token.
pub use crate::ports::SIGNED_PREFIX;

/// The bearer token of a request, checked for shape only.
fn bearer(headers: &HeaderMap) -> Result<&str> {
    let v = headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| unauthorized("missing Authorization: Bearer <token>"))?;
    let v = v
        .to_str()
        .map_err(|_| unauthorized("malformed Authorization header"))?;
    let (scheme, token) = v
        .split_once(' ')
        .ok_or_else(|| unauthorized("malformed Authorization header (expected Bearer <token>)"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(unauthorized("only Bearer tokens are accepted"));
    }
    let token = token.trim();
    if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
        return Err(unauthorized("invalid or revoked token"));
    }
    Ok(token)
}

fn actor(headers: &HeaderMap) -> Result<String> {
    match headers.get("x-stasis-actor") {
        Some(v) => {
            let s = v
                .to_str()
                .map_err(|_| Error::invalid("x-stasis-actor must be visible ASCII"))?;
            if s.is_empty() || s.len() > 128 {
                return Err(Error::invalid("x-stasis-actor must be 1-128 characters"));
            }
            Ok(s.to_string())
        }
        None => Ok("api".to_string()),
    }
}

/// Resolve the caller of a request (401 on anything but a live token).
pub async fn identify(meta: &Meta, headers: &HeaderMap) -> Result<Identity> {
    let token = bearer(headers)?;
    let rec = live_token(meta, token).await?;
    Ok(Identity {
        scopes: Scopes::from_stored(rec.scopes.as_deref()),
        sandbox: rec.sandbox,
        expires_at_ms: rec.expires_at_ms,
        token_id: rec.id,
        tenant: rec.tenant,
        is_admin: rec.is_admin,
        actor: actor(headers)?,
    })
}

/// The scope check of a tenant token's request (see `crate::scope`):
/// 403 when the route needs a scope the token lacks, or lies outside the
/// sandbox the token is limited to. Admin tokens are checked by the
/// admin extractors; unmatched paths get the router's 404.
fn check_scope(id: &Identity, req: &Request) -> Result<()> {
    if id.is_admin {
        return Ok(());
    }
    let Some(template) = req.extensions().get::<MatchedPath>() else {
        return Ok(());
    };
    crate::scope::permit(
        id.scopes,
        id.sandbox.as_deref(),
        req.method(),
        template.as_str(),
        req.uri().path(),
    )
}

/// The E2B edge's paths: it authenticates its callers itself
/// (`stasis_e2b::auth`).
fn is_e2b_path(path: &str) -> bool {
    path.strip_prefix(stasis_e2b::PREFIX)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Middleware: authenticate and rate-limit every non-public request.
pub async fn authenticate(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if PUBLIC_PATHS.contains(&path) || path.starts_with(SIGNED_PREFIX) {
        return next.run(req).await;
    }
    if crate::console::is_console_path(path) || is_e2b_path(path) {
        return next.run(req).await;
    }
    // A bearer token, else the console's session cookie (with its CSRF and
    // origin checks).
    let cookie = if req
        .headers()
        .contains_key(axum::http::header::AUTHORIZATION)
    {
        None
    } else {
        crate::console::session::cookie_id(req.headers())
    };
    let found = match cookie {
        Some(sid) => {
            let (meta, store) = (st.manager.meta(), st.manager.snapshots().store());
            match st.console.csrf_key(meta, store).await {
                Ok(key) => {
                    crate::console::session::identify(
                        meta,
                        key,
                        req.method(),
                        req.uri().path(),
                        req.headers(),
                        &sid,
                    )
                    .await
                }
                Err(e) => Err(e),
            }
        }
        None => identify(st.manager.meta(), req.headers()).await,
    };
    let id = match found {
        Ok(id) => id,
        Err(e) => return ApiError(e).into_response(),
    };
    if let Err(secs) = st.limiter.check(&id.token_id) {
        let mut resp = ApiError(Error::new(
            ErrorCode::RateLimited,
            format!("rate limit of this token exceeded; retry in {secs} s"),
        ))
        .into_response();
        resp.headers_mut()
            .insert("retry-after", HeaderValue::from(secs.max(1)));
        return resp;
    }
    if let Err(e) = check_scope(&id, &req) {
        return ApiError(e).into_response();
    }
    if st
        .limiter
        .use_due(&id.token_id, super::limit::LAST_USED_EVERY)
    {
        // Off the request's path: a slow write never delays the request.
        let meta = st.manager.meta().clone();
        let token = id.token_id.clone();
        tokio::spawn(async move {
            if let Err(e) = meta.touch_token(&token, stasis_core::now_ms()).await {
                tracing::debug!(error = %e, "token last use not recorded");
            }
        });
    }
    req.extensions_mut().insert(id);
    next.run(req).await
}

fn identity(parts: &Parts) -> std::result::Result<Identity, ApiError> {
    parts
        .extensions
        .get::<Identity>()
        .cloned()
        .ok_or_else(|| ApiError(unauthorized("missing Authorization: Bearer <token>")))
}

/// Extractor: the calling tenant as a manager [`Ctx`]. Admin tokens are not
/// tenants and get 403 here.
pub struct Authed(pub Ctx);

impl Authed {
    pub fn ctx(self) -> Ctx {
        self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Authed {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> std::result::Result<Self, ApiError> {
        let id = identity(parts)?;
        match id.tenant {
            Some(tenant) if !id.is_admin => Ok(Authed(Ctx {
                tenant,
                actor: id.actor,
            })),
            _ => Err(ApiError(Error::new(
                ErrorCode::Forbidden,
                "an admin token manages tenants and tokens; use a tenant token for sandboxes",
            ))),
        }
    }
}

/// Extractor: the whole identity of a tenant token (scopes, expiry,
/// sandbox limit), for routes that act on tokens. Admin tokens get 403.
pub struct TenantIdentity(pub Identity);

impl<S: Send + Sync> FromRequestParts<S> for TenantIdentity {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> std::result::Result<Self, ApiError> {
        let id = identity(parts)?;
        if id.is_admin || id.tenant.is_none() {
            return Err(ApiError(Error::new(
                ErrorCode::Forbidden,
                "this route needs a tenant token (admins use /v1/admin/...)",
            )));
        }
        Ok(TenantIdentity(id))
    }
}

/// Extractor: an admin token (tenant tokens get 403).
pub struct AdminAuthed(pub Identity);

impl<S: Send + Sync> FromRequestParts<S> for AdminAuthed {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> std::result::Result<Self, ApiError> {
        let id = identity(parts)?;
        if !id.is_admin {
            return Err(ApiError(Error::new(
                ErrorCode::Forbidden,
                "this route needs an admin token",
            )));
        }
        Ok(AdminAuthed(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{bootstrap, generate_token, DEFAULT_TENANT};
    use stasis_meta::hash_token;

    fn headers(auth: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_bytes(auth).unwrap(),
        );
        h
    }

    #[test]
    fn bearer_header_shapes() {
        let t = generate_token();
        assert_eq!(
            bearer(&headers(format!("Bearer {t}").as_bytes())).unwrap(),
            t
        );
        assert_eq!(
            bearer(&headers(format!("bearer  {t}").as_bytes())).unwrap(),
            t
        );
        for bad in [
            b"Basic dXNlcjpwYXNz".to_vec(),
            b"Bearer".to_vec(),
            b"Bearer abc".to_vec(),
            format!("Bearer stk_{}", "A".repeat(200)).into_bytes(),
            vec![b'B', b'e', b'a', b'r', b'e', b'r', b' ', 0xff],
        ] {
            let e = bearer(&headers(&bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::Unauthorized, "{bad:?}");
        }
        assert_eq!(
            bearer(&HeaderMap::new()).unwrap_err().code,
            ErrorCode::Unauthorized
        );
    }

    #[tokio::test]
    async fn bootstrap_writes_private_token_files_once() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        let made = bootstrap(&meta, dir.path()).await.unwrap();
        assert_eq!(made.len(), 2);
        let tok = std::fs::read_to_string(dir.path().join("token")).unwrap();
        let adm = std::fs::read_to_string(dir.path().join("admin.token")).unwrap();
        for f in ["token", "admin.token"] {
            let m = std::fs::metadata(dir.path().join(f)).unwrap();
            assert_eq!(m.permissions().mode() & 0o777, 0o600);
        }
        let id = identify(&meta, &headers(format!("Bearer {}", tok.trim()).as_bytes()))
            .await
            .unwrap();
        assert_eq!(id.tenant.unwrap().as_str(), DEFAULT_TENANT);
        assert!(!id.is_admin);
        let id = identify(&meta, &headers(format!("Bearer {}", adm.trim()).as_bytes()))
            .await
            .unwrap();
        assert!(id.is_admin && id.tenant.is_none());
        // A second start keeps both; a revoked one is replaced.
        assert!(bootstrap(&meta, dir.path()).await.unwrap().is_empty());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("token")).unwrap(),
            tok
        );
        let rec = meta
            .token_by_hash(&hash_token(tok.trim()))
            .await
            .unwrap()
            .unwrap();
        meta.revoke_token(&rec.id).await.unwrap();
        let e = identify(&meta, &headers(format!("Bearer {}", tok.trim()).as_bytes()))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        assert_eq!(bootstrap(&meta, dir.path()).await.unwrap().len(), 1);
        assert_ne!(
            std::fs::read_to_string(dir.path().join("token")).unwrap(),
            tok
        );
    }
}
