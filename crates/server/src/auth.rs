//! Authentication and rate limiting of the HTTP API.
//!
//! Every request outside [`PUBLIC_PATHS`] must carry `Authorization: Bearer
//! <token>`. The token is hashed and looked up by its hash (so nothing is
//! compared byte by byte against a stored secret); a missing, unknown or
//! revoked token is answered 401 before any handler runs. The caller's
//! [`Identity`] goes into the request's extensions, where the [`Authed`] and
//! [`AdminAuthed`] extractors find it. Each token has its own token bucket;
//! an empty bucket is answered 429 with `Retry-After`.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{request::Parts, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use rand::RngCore;

use stasis_core::{Error, ErrorCode, Result, TenantId};
use stasis_meta::{hash_token, Meta, TokenRecord};

use crate::api::{ApiError, AppState};
use crate::manager::Ctx;

/// Paths answered without a token.
pub const PUBLIC_PATHS: &[&str] = &["/healthz", "/openapi.json", "/metrics"];

/// The tenant that exists on every daemon (created at first start).
pub const DEFAULT_TENANT: &str = "t-default";

/// Prefix of every API token.
pub const TOKEN_PREFIX: &str = "stk_";

/// A fresh token: `stk_` + 32 random bytes, base64url without padding.
pub fn generate_token() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    )
}

/// A fresh token id (not secret; names the token in lists and the audit log).
pub fn generate_token_id() -> String {
    let mut b = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("tok-{hex}")
}

#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    /// Sustained requests per second per token; 0 disables the limit.
    pub per_sec: u32,
    /// Requests a token may make at once before the sustained rate applies.
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            per_sec: 200,
            burst: 400,
        }
    }
}

/// Per-token token buckets.
pub struct Limiter {
    inner: Option<DefaultKeyedRateLimiter<String>>,
}

impl Limiter {
    pub fn new(cfg: RateLimit) -> Self {
        let inner = NonZeroU32::new(cfg.per_sec).map(|rate| {
            let burst = NonZeroU32::new(cfg.burst.max(1)).expect("nonzero");
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Limiter { inner }
    }

    /// Take one request from `key`'s bucket; on refusal, the seconds to wait.
    pub fn check(&self, key: &str) -> std::result::Result<(), u64> {
        let Some(l) = &self.inner else {
            return Ok(());
        };
        match l.check_key(&key.to_string()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Err(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
            }
        }
    }
}

/// Who is calling: one token, either a tenant's or an admin's.
#[derive(Debug, Clone)]
pub struct Identity {
    pub token_id: String,
    pub tenant: Option<TenantId>,
    pub is_admin: bool,
    /// Recorded in the audit log: `x-stasis-actor` when given, else "api".
    pub actor: String,
}

fn unauthorized(msg: &str) -> Error {
    Error::new(ErrorCode::Unauthorized, msg)
}

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
    let rec: TokenRecord = meta
        .token_by_hash(&hash_token(token))
        .await?
        .ok_or_else(|| unauthorized("invalid or revoked token"))?;
    Ok(Identity {
        token_id: rec.id,
        tenant: rec.tenant,
        is_admin: rec.is_admin,
        actor: actor(headers)?,
    })
}

/// Middleware: authenticate and rate-limit every non-public request.
pub async fn authenticate(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    if PUBLIC_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let id = match identify(st.manager.meta(), req.headers()).await {
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

/// Write `text` to `path` with mode 0600, atomically (temp file + rename).
pub fn write_secret_file(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// The token in `file` is live (exists, not revoked, of the expected kind).
async fn file_token_live(meta: &Meta, file: &Path, admin: bool) -> Result<bool> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Ok(false);
    };
    Ok(meta
        .token_by_hash(&hash_token(text.trim()))
        .await?
        .is_some_and(|t| t.is_admin == admin))
}

/// First start (and every start): tenant `t-default` exists; `<data>/token`
/// holds a live token of it and `<data>/admin.token` a live admin token. A
/// missing or dead token file gets a fresh token (the old one, if any, stays
/// as it is). Both files are 0600 and written atomically.
pub async fn bootstrap(meta: &Meta, data_dir: &Path) -> Result<Vec<TokenRecord>> {
    let tenant = TenantId::parse(DEFAULT_TENANT).expect("valid tenant id");
    meta.ensure_tenant(&tenant, "default").await?;
    let mut created = Vec::new();
    for (file, admin) in [("token", false), ("admin.token", true)] {
        let path = data_dir.join(file);
        if file_token_live(meta, &path, admin).await? {
            continue;
        }
        let token = generate_token();
        let rec = meta
            .insert_token(
                &generate_token_id(),
                (!admin).then_some(&tenant),
                if admin {
                    "bootstrap-admin"
                } else {
                    "bootstrap"
                },
                &hash_token(&token),
                admin,
            )
            .await?;
        write_secret_file(&path, &token)?;
        created.push(rec);
    }
    Ok(created)
}

/// Shared auth state of the router.
pub type SharedLimiter = Arc<Limiter>;

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_bytes(auth).unwrap(),
        );
        h
    }

    #[test]
    fn tokens_are_random_and_well_formed() {
        let a = generate_token();
        let b = generate_token();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), 4 + 43);
        assert!(a[4..]
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert!(generate_token_id().starts_with("tok-"));
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

    #[test]
    fn limiter_buckets_are_per_token() {
        let l = Limiter::new(RateLimit {
            per_sec: 1,
            burst: 2,
        });
        assert!(l.check("a").is_ok());
        assert!(l.check("a").is_ok());
        let wait = l.check("a").unwrap_err();
        assert!(wait >= 1, "{wait}");
        assert!(l.check("b").is_ok(), "another token's bucket is separate");
        let off = Limiter::new(RateLimit {
            per_sec: 0,
            burst: 0,
        });
        assert!((0..1000).all(|_| off.check("a").is_ok()));
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
