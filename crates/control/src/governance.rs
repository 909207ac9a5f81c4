//! Key governance and data residency: the master-key generation every node
//! must hold (recorded in the metadata), master-key rotation and
//! retirement, per-tenant data-key rotation, crypto-erasure of a tenant,
//! and region pinning of tenants. The key mechanics are the store's
//! (`stasis_store::keyring`); this module ties them to the metadata
//! (tenants' key-encryption keys, generations), the audit log and the nodes.

use std::sync::Arc;

use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use stasis_core::{Error, ErrorCode, Result, TenantId};
use stasis_meta::{KekRow, MasterKeyRow, Meta, NewAuditEntry};
use stasis_store::{Kek, KekSource, MasterKey, Store};

use crate::manager::{Ctx, Manager};
pub use crate::region::{region_allows, validate_region, Region};
use stasis_access::auth::Identity;

/// Tenants' key-encryption keys, kept in the metadata database: the store
/// alone (or a copy of it) never suffices to unwrap a tenant's data keys.
pub struct MetaKeks(pub Meta);

#[async_trait::async_trait]
impl KekSource for MetaKeks {
    async fn tenant_kek(&self, tenant: &TenantId, create: bool) -> Result<Kek> {
        Ok(match self.0.tenant_kek(tenant, create).await? {
            KekRow::Key(k) => Kek::Key(k),
            KekRow::Missing => Kek::None,
            KekRow::Erased => Kek::Erased,
        })
    }
}

/// For a store opened outside the daemon (tools, tests) on a stopped or
/// running daemon's data dir: tenants' key-encryption keys from its SQLite
/// metadata, without which no tenant data key unwraps.
pub async fn use_data_dir_keks(store: &Store, data_dir: &std::path::Path) -> Result<()> {
    let meta = Meta::open(&data_dir.join("meta.db")).await?;
    store.set_kek_source(Arc::new(MetaKeks(meta)));
    Ok(())
}

/// At startup: key-encryption keys from the metadata, and the master-key
/// generation in use, which this node must hold (else it refuses to start).
pub async fn attach(meta: &Meta, store: &Store) -> Result<MasterKeyRow> {
    store.set_kek_source(Arc::new(MetaKeks(meta.clone())));
    let held = store.master_fingerprints();
    let cur = match meta.current_master_key().await? {
        Some(k) => k,
        None => {
            meta.init_master_key(&store.current_master_fingerprint())
                .await?
        }
    };
    if !held.contains(&cur.fingerprint) {
        return Err(Error::invalid(format!(
            "the master key file holds no key of generation {} (fingerprint {}), the generation \
             this deployment uses since a rotation: add that key to the file (this node holds {})",
            cur.generation,
            cur.fingerprint,
            held.join(", ")
        )));
    }
    store.set_current_master(&cur.fingerprint)?;
    Ok(cur)
}

fn admin_actor(who: &Identity) -> String {
    format!("admin:{}", who.token_id)
}

async fn audit(
    meta: &Meta,
    tenant: &str,
    actor: &str,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) {
    let Ok(t) = TenantId::parse(tenant) else {
        return;
    };
    let e = NewAuditEntry {
        tenant: t,
        actor: actor.into(),
        action: action.into(),
        target: target.into(),
        detail,
    };
    if let Err(e) = meta.audit(e).await {
        tracing::warn!(error = %e, action, "audit append failed");
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RotateOutcome {
    pub fingerprint: String,
    pub generation: i64,
    pub tenants: u64,
    pub keys_rewrapped: u64,
    pub keys_already: u64,
    /// Secrets (tenant secrets, webhook secrets, daemon keys) sealed again under the new key.
    pub secrets_resealed: u64,
    pub ms: u64,
}

/// Rotate to `key`: every data key gets a wrap under it beside its old one,
/// sealed metadata values are sealed again, then it becomes the current
/// generation. Online; a rerun after a crash finishes the job.
pub async fn rotate_master_key(
    meta: &Meta,
    store: &Store,
    who: &Identity,
    key: MasterKey,
) -> Result<RotateOutcome> {
    let fp = store.add_master_key(key);
    let row = meta.begin_master_rotation(&fp).await?;
    let rep = store.rotate_master_key(&fp).await?;
    let mut resealed = 0;
    for (kind, tenant, name, sealed) in meta.sealed_values().await? {
        let (t, n) = sealed_name(&kind, &tenant, &name)?;
        if store.secret_is_current(&t, &n, &sealed) {
            continue;
        }
        let plain = store.open_secret(&t, &n, &sealed)?;
        meta.reseal_value(&kind, &tenant, &name, &store.seal_secret(&t, &n, &plain))
            .await?;
        resealed += 1;
    }
    meta.switch_master_key(&fp).await?;
    let actor = admin_actor(who);
    for t in &rep.tenant_ids {
        audit(
            meta,
            t,
            &actor,
            "master_key_rotate",
            &fp,
            json!({"generation": row.generation}),
        )
        .await;
    }
    tracing::info!(fingerprint = %fp, generation = row.generation, tenants = rep.tenants, keys = rep.keys_rewrapped, ms = rep.ms, "master key rotated");
    Ok(RotateOutcome {
        fingerprint: fp,
        generation: row.generation,
        tenants: rep.tenants,
        keys_rewrapped: rep.keys_rewrapped,
        keys_already: rep.keys_already,
        secrets_resealed: resealed,
        ms: rep.ms,
    })
}

/// The tenant id that seals the daemon's own keys in `daemon_keys` (the
/// port-URL signing key, ...): no real tenant can have it.
pub const DAEMON_KEY_TENANT: &str = "stasis-daemon";

/// The tenant and name a sealed metadata value is bound to.
fn sealed_name(kind: &str, tenant: &str, name: &str) -> Result<(TenantId, String)> {
    Ok(match kind {
        "secret" => (TenantId::parse(tenant)?, name.to_string()),
        "webhook" => (TenantId::parse(tenant)?, stasis_webhooks::secret_name(name)),
        _ => (TenantId::parse(DAEMON_KEY_TENANT)?, name.to_string()),
    })
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RetireOutcome {
    pub fingerprint: String,
    pub tenants: u64,
    pub wraps_removed: u64,
}

/// Delete the old key's wraps; refused while anything is wrapped or sealed
/// only under it.
pub async fn retire_master_key(
    meta: &Meta,
    store: &Store,
    who: &Identity,
    fp: &str,
) -> Result<RetireOutcome> {
    // Every generation the deployment used has a row (the first start
    // records one, a rotation another): a fingerprint without one names
    // no key of this deployment.
    let Some(row) = meta
        .master_keys()
        .await?
        .into_iter()
        .find(|k| k.fingerprint == fp)
    else {
        return Err(Error::not_found(format!(
            "master key {fp}: no generation of this deployment has that fingerprint \
             (`stasis admin master-keys` lists them)"
        )));
    };
    if row.state == "current" {
        return Err(Error::state(format!(
            "master key {fp} is the current generation: rotate to a new key first"
        )));
    }
    let stale = meta
        .sealed_values()
        .await?
        .into_iter()
        .filter(|(k, t, n, s)| {
            sealed_name(k, t, n).is_ok_and(|(t, n)| !store.secret_is_current(&t, &n, s))
        })
        .count();
    if stale > 0 {
        return Err(Error::state(format!(
            "{stale} secret(s) are still sealed under an older master key: run \
             `stasis admin rotate-master-key` again"
        )));
    }
    let rep = store.retire_master_key(fp).await?;
    meta.retire_master_key_row(fp).await?;
    let actor = admin_actor(who);
    for t in &rep.tenant_ids {
        audit(meta, t, &actor, "master_key_retire", fp, json!({})).await;
    }
    Ok(RetireOutcome {
        fingerprint: fp.to_string(),
        tenants: rep.tenants,
        wraps_removed: rep.wraps_removed,
    })
}

/// The generations the deployment has used, and which of them this node holds.
pub async fn master_key_status(meta: &Meta, store: &Store) -> Result<serde_json::Value> {
    let held = store.master_fingerprints();
    let rows: Vec<_> = meta
        .master_keys()
        .await?
        .into_iter()
        .map(|k| {
            let mut v = serde_json::to_value(&k).unwrap_or_default();
            v["held_here"] = json!(held.contains(&k.fingerprint));
            v
        })
        .collect();
    Ok(json!({"keys": rows, "current_here": store.current_master_fingerprint()}))
}

/// A new data key for the tenant (new snapshots use it; older ones keep theirs).
pub async fn rotate_tenant_key(
    meta: &Meta,
    store: &Store,
    who: &Identity,
    t: &TenantId,
) -> Result<u32> {
    meta.get_tenant(t).await?;
    if meta.tenant_erased_at(t).await?.is_some() {
        return Err(Error::state(format!("tenant {t} was erased")));
    }
    let gen = store.rotate_tenant_key(t).await?;
    audit(
        meta,
        t.as_str(),
        &admin_actor(who),
        "tenant_key_rotate",
        t.as_str(),
        json!({"generation": gen}),
    )
    .await;
    Ok(gen)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EraseOutcome {
    pub tenant: String,
    pub sandboxes_destroyed: u64,
    pub key_wraps_destroyed: u64,
    /// Store objects removed at once (GC removes any left).
    pub objects_removed: u64,
}

/// Crypto-erasure: destroy the tenant's live sandboxes, then its
/// key-encryption key (every snapshot unreadable from here on, in every copy
/// of the store), its tokens and its key wraps, then its bytes.
pub async fn erase_tenant(mgr: &Manager, who: &Identity, t: &TenantId) -> Result<EraseOutcome> {
    let meta = mgr.meta();
    meta.get_tenant(t).await?;
    let ctx = Ctx {
        tenant: t.clone(),
        actor: admin_actor(who),
    };
    let mut destroyed = 0;
    for rec in mgr.list(&ctx, None).await? {
        if rec.state.is_terminal() {
            continue;
        }
        match mgr.destroy(&ctx, &rec.id).await {
            Ok(_) => destroyed += 1,
            Err(e) => tracing::warn!(sandbox = %rec.id, error = %e, "erase: destroy failed"),
        }
    }
    meta.erase_tenant(t).await?;
    let store = mgr.snapshots().store();
    let wraps = store.erase_tenant_keys(t).await?;
    audit(
        meta,
        t.as_str(),
        &admin_actor(who),
        "tenant_erase",
        t.as_str(),
        json!({"sandboxes_destroyed": destroyed, "key_wraps_destroyed": wraps}),
    )
    .await;
    let removed = match store.purge_tenant(t).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(tenant = %t, error = %e, "erase: bytes left for GC");
            0
        }
    };
    Ok(EraseOutcome {
        tenant: t.to_string(),
        sandboxes_destroyed: destroyed,
        key_wraps_destroyed: wraps,
        objects_removed: removed,
    })
}

/// Pin a tenant to regions (None or empty: any region).
pub async fn set_regions(
    meta: &Meta,
    who: &Identity,
    t: &TenantId,
    regions: Option<Vec<String>>,
) -> Result<Option<Vec<String>>> {
    let regions = regions.filter(|r| !r.is_empty());
    if let Some(rs) = &regions {
        for r in rs {
            validate_region(r)?;
        }
    }
    meta.set_tenant_regions(t, regions.as_deref()).await?;
    audit(
        meta,
        t.as_str(),
        &admin_actor(who),
        "tenant_regions",
        t.as_str(),
        json!({"regions": regions}),
    )
    .await;
    Ok(regions)
}

impl Manager {
    /// Refuse (409 `region_mismatch`, audited) an operation that would put
    /// or read the tenant's data on this node or its store when the tenant is
    /// pinned to other regions. Snapshots are never copied across regions.
    pub async fn check_region(&self, ctx: &Ctx, op: &str, target: &str) -> Result<()> {
        let here = self.region();
        let pinned = self.meta().tenant_regions(&ctx.tenant).await?;
        let Err(why) = region_allows(&here, pinned.as_deref()) else {
            return Ok(());
        };
        let e = Error::new(
            ErrorCode::RegionMismatch,
            format!("{op} refused: {why}; use a node of the tenant's regions"),
        );
        let detail = json!({
            "op": op,
            "code": e.code,
            "node_region": here.node,
            "store_region": here.store,
            "pinned": pinned,
        });
        audit(
            self.meta(),
            ctx.tenant.as_str(),
            &ctx.actor,
            "refused",
            target,
            detail,
        )
        .await;
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn retiring_a_fingerprint_the_deployment_never_used_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("store").display());
        let store = Store::open(&url, MasterKey::from_bytes([5; 32]))
            .await
            .unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        let cur = attach(&meta, &store).await.unwrap();
        let who = Identity {
            token_id: "t".into(),
            tenant: None,
            is_admin: true,
            actor: "api".into(),
            scopes: stasis_access::scope::Scopes::all(),
            sandbox: None,
            expires_at_ms: None,
        };
        let e = retire_master_key(&meta, &store, &who, "0123456789abcdef")
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound, "{e:?}");
        let e = retire_master_key(&meta, &store, &who, &cur.fingerprint)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidState, "{e:?}");
    }
}
