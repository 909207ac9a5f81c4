//! API tokens and who holds them: the token format, the bootstrap of the
//! default tenant's and the admin's token files, the lookup of a token by
//! its hash, and the caller's [`Identity`] that tenancy and the audit log
//! use. The HTTP side (the `Authorization` header, the extractors, the rate
//! limiter) is the HTTP edge's (`stasis-server`'s `http::auth`); [`RateLimit`] is the daemon's setting
//! for it.

use std::path::Path;

use base64::Engine;
use rand::RngCore;

use stasis_core::{now_ms, Error, ErrorCode, Result, TenantId};
use stasis_meta::tenants::NewTokenRecord;
use stasis_meta::{hash_token, Meta, TokenRecord};

use crate::scope::Scopes;

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

/// Who is calling: one token, either a tenant's or an admin's.
#[derive(Debug, Clone)]
pub struct Identity {
    pub token_id: String,
    pub tenant: Option<TenantId>,
    pub is_admin: bool,
    /// Recorded in the audit log: `x-stasis-actor` when given, else "api".
    pub actor: String,
    /// What the token may do (see `crate::scope`).
    pub scopes: Scopes,
    /// The one sandbox a per-sandbox token is limited to.
    pub sandbox: Option<String>,
    /// When the token stops working (tokens it mints expire no later).
    pub expires_at_ms: Option<i64>,
}

pub fn unauthorized(msg: &str) -> Error {
    Error::new(ErrorCode::Unauthorized, msg)
}

/// The live token record of `token` (401 for an unknown, revoked or
/// expired one).
pub async fn live_token(meta: &Meta, token: &str) -> Result<TokenRecord> {
    let rec = meta
        .token_by_hash(&hash_token(token))
        .await?
        .ok_or_else(|| unauthorized("invalid or revoked token"))?;
    if rec.expired(now_ms()) {
        return Err(unauthorized("token expired"));
    }
    Ok(rec)
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
        .is_some_and(|t| t.is_admin == admin && !t.expired(now_ms())))
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
            .insert_token(&NewTokenRecord {
                id: &generate_token_id(),
                tenant: (!admin).then_some(&tenant),
                name: if admin {
                    "bootstrap-admin"
                } else {
                    "bootstrap"
                },
                hash: &hash_token(&token),
                is_admin: admin,
                ..Default::default()
            })
            .await?;
        write_secret_file(&path, &token)?;
        created.push(rec);
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
