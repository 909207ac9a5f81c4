//! API tokens: minting, rotation with an overlap, revocation and listing.
//!
//! An admin mints tokens for any tenant. A tenant token with the `manage`
//! scope mints tokens for its own tenant, never wider than itself: scopes
//! it holds, an expiry no later than its own, and not at all when it is
//! limited to one sandbox. A token may be limited to one of the tenant's
//! sandboxes (a terminal or port token for a browser). Rotation makes a new
//! token like the old one and lets the old one live on for an overlap
//! (both valid meanwhile), so clients switch without downtime. Every change
//! goes to the audit log; a token's text is shown once, at creation.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use stasis_core::{now_ms, Error, ErrorCode, Result, SandboxId, TenantId};
use stasis_meta::tenants::NewTokenRecord;
use stasis_meta::{hash_token, Meta, NewAuditEntry, TokenRecord};

use crate::auth::{generate_token, generate_token_id, Identity, DEFAULT_TENANT};
use crate::scope::{Scope, Scopes};

/// Shortest and longest lifetime a token may be given.
pub const MIN_TTL_SECS: u64 = 60;
pub const MAX_TTL_SECS: u64 = 366 * 24 * 3600;
/// How long the old token of a rotation stays valid by default, and at most.
pub const DEFAULT_OVERLAP_SECS: u64 = 600;
pub const MAX_OVERLAP_SECS: u64 = 7 * 24 * 3600;

/// What a new token should be.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// What the token is for (shown in lists and the audit log).
    pub name: String,
    /// `read`, `exec`, `approve`, `manage` (every scope includes `read`).
    /// Default: all of the caller's.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Lifetime in seconds (60 s to 366 days). Default: no expiry for an
    /// admin's mint, the caller's own expiry for a tenant token's.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// Limit the token to this sandbox's routes.
    #[serde(default)]
    pub sandbox: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateRequest {
    /// How long the old token stays valid (default 600 s, at most 7 days; 0 ends it now).
    #[serde(default)]
    pub overlap_secs: Option<u64>,
}

/// A token as returned once, at creation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NewToken {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub tenant: Option<TenantId>,
    pub name: String,
    pub is_admin: bool,
    pub created_at_ms: i64,
    /// None: every scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_from: Option<String>,
    /// The token itself. Shown only here; the daemon keeps only its hash.
    pub token: String,
}

fn new_token(rec: TokenRecord, token: String) -> NewToken {
    NewToken {
        id: rec.id,
        tenant: rec.tenant,
        name: rec.name,
        is_admin: rec.is_admin,
        created_at_ms: rec.created_at_ms,
        scopes: rec.scopes,
        expires_at_ms: rec.expires_at_ms,
        sandbox: rec.sandbox,
        rotated_from: rec.rotated_from,
        token,
    }
}

fn forbidden(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::Forbidden, msg)
}

/// Who did it, in the audit log.
pub fn actor_of(who: &Identity) -> String {
    if who.is_admin {
        format!("admin:{}", who.token_id)
    } else {
        format!("{}:{}", who.actor, who.token_id)
    }
}

async fn audit(
    meta: &Meta,
    tenant: Option<&TenantId>,
    who: &Identity,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) {
    let tenant = tenant
        .cloned()
        .unwrap_or_else(|| TenantId::parse(DEFAULT_TENANT).expect("tenant id"));
    let e = NewAuditEntry {
        tenant,
        actor: actor_of(who),
        action: action.into(),
        target: target.into(),
        detail,
    };
    if let Err(e) = meta.audit(e).await {
        tracing::warn!(error = %e, action, "audit append failed");
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.trim().is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(Error::invalid("name must be 1-128 printable characters").with_field("name"));
    }
    Ok(())
}

/// A tenant caller may act on its own tenant only, with `manage`, and not
/// through a per-sandbox token.
fn check_tenant_caller(who: &Identity, tenant: &TenantId) -> Result<()> {
    if who.is_admin {
        return Ok(());
    }
    if who.tenant.as_ref() != Some(tenant) {
        return Err(Error::not_found(format!("tenant {tenant}")));
    }
    if who.sandbox.is_some() {
        return Err(forbidden(
            "a token limited to one sandbox cannot manage tokens",
        ));
    }
    if !who.scopes.allows(Scope::Manage) {
        return Err(forbidden("managing tokens needs the \"manage\" scope"));
    }
    Ok(())
}

/// The expiry of a new token: `ttl` from now, never past the caller's own.
fn expiry(who: &Identity, ttl_secs: Option<u64>, now: i64) -> Result<Option<i64>> {
    let asked = match ttl_secs {
        Some(t) if !(MIN_TTL_SECS..=MAX_TTL_SECS).contains(&t) => {
            return Err(Error::invalid(format!(
                "ttl_secs must be between {MIN_TTL_SECS} and {MAX_TTL_SECS}"
            ))
            .with_field("ttl_secs"))
        }
        Some(t) => Some(now + t as i64 * 1000),
        None => None,
    };
    Ok(capped(who, asked))
}

/// An expiry `asked` (None: never), never past a tenant caller's own: the
/// cap of both minting and rotation.
fn capped(who: &Identity, asked: Option<i64>) -> Option<i64> {
    let own = if who.is_admin {
        None
    } else {
        who.expires_at_ms
    };
    match (asked, own) {
        (Some(a), Some(o)) => Some(a.min(o)),
        (a, o) => a.or(o),
    }
}

/// Mint a token for `tenant` (see the module doc for who may).
pub async fn create(
    meta: &Meta,
    who: &Identity,
    tenant: &TenantId,
    req: &TokenRequest,
) -> Result<NewToken> {
    check_name(&req.name)?;
    check_tenant_caller(who, tenant)?;
    meta.get_tenant(tenant).await?;
    let scopes = match &req.scopes {
        Some(names) => {
            let s = Scopes::parse(names, "scopes")?;
            if !who.is_admin && !who.scopes.contains_all(s) {
                return Err(forbidden("a token cannot grant scopes it does not have"));
            }
            Some(s.names())
        }
        None if who.is_admin || who.scopes == Scopes::all() => None,
        None => Some(who.scopes.names()),
    };
    let sandbox = match &req.sandbox {
        Some(s) => {
            let id = SandboxId::parse(s).map_err(|e| e.with_field("sandbox"))?;
            meta.get_for(tenant, &id).await?;
            Some(id.as_str().to_string())
        }
        None => None,
    };
    let expires_at_ms = expiry(who, req.ttl_secs, now_ms())?;
    let token = generate_token();
    let rec = meta
        .insert_token(&NewTokenRecord {
            id: &generate_token_id(),
            tenant: Some(tenant),
            name: &req.name,
            hash: &hash_token(&token),
            is_admin: false,
            scopes: scopes.as_deref(),
            expires_at_ms,
            sandbox: sandbox.as_deref(),
            rotated_from: None,
        })
        .await?;
    let detail = serde_json::json!({
        "name": rec.name, "scopes": rec.scopes, "expires_at_ms": rec.expires_at_ms, "sandbox": rec.sandbox,
    });
    audit(meta, Some(tenant), who, "token_create", &rec.id, detail).await;
    Ok(new_token(rec, token))
}

/// The token `id` as `who` may see it: an admin any, a tenant caller only
/// its own tenant's non-admin tokens (others are not found).
async fn visible(meta: &Meta, who: &Identity, id: &str) -> Result<TokenRecord> {
    stasis_core::id::validate_id("token", id)?;
    let rec = meta.get_token(id).await?;
    if !who.is_admin {
        let own = !rec.is_admin && rec.tenant.is_some() && rec.tenant == who.tenant;
        if !own {
            return Err(Error::not_found(format!("token {id}")));
        }
        check_tenant_caller(who, rec.tenant.as_ref().expect("tenant token"))?;
    }
    Ok(rec)
}

/// Replace token `id` by a new one with the same name, scopes, sandbox and
/// expiry; the old one stays valid for the overlap, then expires. Like
/// minting, a tenant caller never gets a token wider than itself: scopes
/// it lacks are refused, and the new token's expiry is capped at the
/// caller's own (a 1-hour token rotating a never-expiring one gets a token
/// that ends with it).
pub async fn rotate(
    meta: &Meta,
    who: &Identity,
    id: &str,
    req: &RotateRequest,
) -> Result<NewToken> {
    let old = visible(meta, who, id).await?;
    let overlap = req.overlap_secs.unwrap_or(DEFAULT_OVERLAP_SECS);
    if overlap > MAX_OVERLAP_SECS {
        return Err(
            Error::invalid(format!("overlap_secs must be at most {MAX_OVERLAP_SECS}"))
                .with_field("overlap_secs"),
        );
    }
    let now = now_ms();
    if old.revoked_at_ms.is_some() || old.expired(now) {
        return Err(Error::state(format!(
            "token {id} is revoked or expired; create a new one"
        )));
    }
    if !who.is_admin
        && !who
            .scopes
            .contains_all(Scopes::from_stored(old.scopes.as_deref()))
    {
        return Err(forbidden("a token cannot rotate a token wider than itself"));
    }
    let expires_at_ms = capped(who, old.expires_at_ms);
    let token = generate_token();
    let rec = meta
        .insert_token(&NewTokenRecord {
            id: &generate_token_id(),
            tenant: old.tenant.as_ref(),
            name: &old.name,
            hash: &hash_token(&token),
            is_admin: old.is_admin,
            scopes: old.scopes.as_deref(),
            expires_at_ms,
            sandbox: old.sandbox.as_deref(),
            rotated_from: Some(&old.id),
        })
        .await?;
    let old_until = now + overlap as i64 * 1000;
    meta.expire_token_by(&old.id, old_until).await?;
    let detail = serde_json::json!({"name": old.name, "replaced_by": rec.id, "old_valid_until_ms": old_until});
    audit(
        meta,
        old.tenant.as_ref(),
        who,
        "token_rotate",
        &old.id,
        detail,
    )
    .await;
    Ok(new_token(rec, token))
}

/// Revoke token `id` (never the caller's own: rotate it instead).
pub async fn revoke(meta: &Meta, who: &Identity, id: &str) -> Result<TokenRecord> {
    let rec = visible(meta, who, id).await?;
    if id == who.token_id {
        return Err(Error::invalid(
            "a token cannot revoke itself; rotate it, or use another token",
        ));
    }
    let rec2 = meta.revoke_token(&rec.id).await?;
    audit(
        meta,
        rec.tenant.as_ref(),
        who,
        "token_revoke",
        id,
        serde_json::json!({"name": rec.name}),
    )
    .await;
    Ok(rec2)
}

/// A tenant's tokens (never their text).
pub async fn list(meta: &Meta, who: &Identity, tenant: &TenantId) -> Result<Vec<TokenRecord>> {
    if !who.is_admin && who.tenant.as_ref() != Some(tenant) {
        return Err(Error::not_found(format!("tenant {tenant}")));
    }
    meta.get_tenant(tenant).await?;
    meta.list_tokens(Some(tenant)).await
}

#[cfg(test)]
mod tests;
