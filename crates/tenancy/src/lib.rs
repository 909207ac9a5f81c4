//! Tenant administration (tenants, secrets; tokens are `stasis_access::tokens`')
//! and secret delivery.
//!
//! Secret values are sealed with a key derived from the store's master key
//! before they reach the metadata database, opened only to build the
//! environment of the one exec or session that needs them, and never
//! written anywhere else (not the audit log, not the run state, not logs).

use std::collections::BTreeMap;

use stasis_core::manifest::validate_env_name;
use stasis_core::{Error, ErrorCode, Manifest, Result, TenantId};
use stasis_meta::{Meta, NewAuditEntry, Tenant};
use stasis_store::Store;

use stasis_access::auth::Identity;

/// Largest secret value accepted.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;

fn admin_actor(who: &Identity) -> String {
    format!("admin:{}", who.token_id)
}

async fn audit(
    meta: &Meta,
    tenant: &TenantId,
    who: &Identity,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) {
    let e = NewAuditEntry {
        tenant: tenant.clone(),
        actor: admin_actor(who),
        action: action.into(),
        target: target.into(),
        detail,
    };
    if let Err(e) = meta.audit(e).await {
        tracing::warn!(error = %e, action, "audit append failed");
    }
}

fn check_name(name: &str, field: &str) -> Result<()> {
    if name.trim().is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(
            Error::invalid(format!("{field} must be 1-128 printable characters")).with_field(field),
        );
    }
    Ok(())
}

pub async fn create_tenant(
    meta: &Meta,
    who: &Identity,
    id: Option<&str>,
    name: &str,
) -> Result<Tenant> {
    check_name(name, "name")?;
    let id = match id {
        Some(s) => TenantId::parse(s).map_err(|e| e.with_field("id"))?,
        None => TenantId::generate(),
    };
    let t = meta.create_tenant(&id, name).await?;
    audit(
        meta,
        &id,
        who,
        "tenant_create",
        id.as_str(),
        serde_json::json!({"name": name}),
    )
    .await;
    Ok(t)
}

fn check_secret_name(name: &str) -> Result<()> {
    if !validate_env_name(name) || name.len() > 128 {
        return Err(Error::invalid(format!(
            "secret name {name:?} must be a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)"
        ))
        .with_field("name"));
    }
    Ok(())
}

/// Register (or replace) a tenant secret. The audit entry names it, never its value.
pub async fn set_secret(
    meta: &Meta,
    store: &Store,
    who: &Identity,
    tenant: &TenantId,
    name: &str,
    value: &str,
) -> Result<()> {
    check_secret_name(name)?;
    if value.len() > MAX_SECRET_BYTES || value.contains('\0') {
        return Err(Error::invalid(format!(
            "a secret value is at most {MAX_SECRET_BYTES} bytes and has no NUL"
        ))
        .with_field("value"));
    }
    meta.get_tenant(tenant).await?;
    let sealed = store.seal_secret(tenant, name, value.as_bytes());
    let replaced = meta.put_secret(tenant, name, &sealed).await?;
    audit(
        meta,
        tenant,
        who,
        "secret_set",
        name,
        serde_json::json!({"replaced": replaced}),
    )
    .await;
    Ok(())
}

pub async fn delete_secret(
    meta: &Meta,
    who: &Identity,
    tenant: &TenantId,
    name: &str,
) -> Result<()> {
    check_secret_name(name)?;
    meta.get_tenant(tenant).await?;
    meta.delete_secret(tenant, name).await?;
    audit(
        meta,
        tenant,
        who,
        "secret_delete",
        name,
        serde_json::json!({}),
    )
    .await;
    Ok(())
}

pub async fn secret_names(meta: &Meta, tenant: &TenantId) -> Result<Vec<String>> {
    meta.get_tenant(tenant).await?;
    meta.secret_names(tenant).await
}

/// A manifest may only name secrets its tenant has registered (400 naming the entry).
pub async fn check_manifest_secrets(meta: &Meta, tenant: &TenantId, man: &Manifest) -> Result<()> {
    if man.secrets.is_empty() {
        return Ok(());
    }
    let have = meta.secret_names(tenant).await?;
    for (i, s) in man.secrets.iter().enumerate() {
        if !have.contains(s) {
            return Err(Error::new(
                ErrorCode::InvalidManifest,
                format!("secret {s:?} is not registered for this tenant"),
            )
            .with_field(format!("secrets[{i}]")));
        }
    }
    Ok(())
}

/// The values of the secrets a manifest names, for one exec or session.
pub async fn resolve_secrets(
    meta: &Meta,
    store: &Store,
    tenant: &TenantId,
    man: &Manifest,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (i, name) in man.secrets.iter().enumerate() {
        let sealed = match meta.secret_sealed(tenant, name).await {
            Ok(s) => s,
            Err(e) if e.code == ErrorCode::NotFound => {
                return Err(Error::new(
                    ErrorCode::InvalidManifest,
                    format!("secret {name:?} named by the manifest is no longer registered"),
                )
                .with_field(format!("secrets[{i}]")))
            }
            Err(e) => return Err(e),
        };
        let value = store.open_secret(tenant, name, &sealed)?;
        let value = String::from_utf8(value)
            .map_err(|_| Error::internal(format!("secret {name} is not UTF-8")))?;
        out.insert(name.clone(), value);
    }
    Ok(out)
}

/// Every secret value of the tenant, by name: what a template must not hold.
pub async fn all_secret_values(
    meta: &Meta,
    store: &Store,
    tenant: &TenantId,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for name in meta.secret_names(tenant).await? {
        let sealed = match meta.secret_sealed(tenant, &name).await {
            Ok(s) => s,
            // Deleted since it was listed: nothing to look for.
            Err(e) if e.code == ErrorCode::NotFound => continue,
            Err(e) => return Err(e),
        };
        let value = store.open_secret(tenant, &name, &sealed)?;
        out.insert(name, String::from_utf8_lossy(&value).into_owned());
    }
    Ok(out)
}
