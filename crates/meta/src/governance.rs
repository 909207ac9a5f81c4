//! Governance metadata: master-key generations, tenants' key-encryption
//! keys (destroyed at erasure) and tenants' region pinning.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use stasis_core::{now_ms, Error, Result, TenantId};

use crate::Meta;

fn db_err(e: sqlx::Error) -> Error {
    Error::internal(format!("governance metadata: {e}"))
}

/// One master key the deployment has used (never the key itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MasterKeyRow {
    pub fingerprint: String,
    pub generation: i64,
    /// `current`, `rotating` (a rotation to it started), `previous`, `retired`.
    pub state: String,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at_ms: Option<i64>,
}

/// A tenant's key-encryption key as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KekRow {
    Key([u8; 32]),
    /// None yet.
    Missing,
    /// Destroyed by erasure.
    Erased,
}

fn decode_mk(row: &sqlx::any::AnyRow) -> Result<MasterKeyRow> {
    Ok(MasterKeyRow {
        fingerprint: row.try_get("fingerprint").map_err(db_err)?,
        generation: row.try_get("generation").map_err(db_err)?,
        state: row.try_get("state").map_err(db_err)?,
        created_at_ms: row.try_get("created_at_ms").map_err(db_err)?,
        retired_at_ms: row.try_get("retired_at_ms").map_err(db_err)?,
    })
}

const MK_COLS: &str = "fingerprint, generation, state, created_at_ms, retired_at_ms";

impl Meta {
    pub async fn master_keys(&self) -> Result<Vec<MasterKeyRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {MK_COLS} FROM master_keys ORDER BY generation"
        ))
        .fetch_all(self.pool())
        .await
        .map_err(db_err)?;
        rows.iter().map(decode_mk).collect()
    }

    pub async fn current_master_key(&self) -> Result<Option<MasterKeyRow>> {
        Ok(self
            .master_keys()
            .await?
            .into_iter()
            .find(|k| k.state == "current"))
    }

    /// Record `fp` as generation 1 if no generation is recorded yet (first
    /// start); returns the current generation either way.
    pub async fn init_master_key(&self, fp: &str) -> Result<MasterKeyRow> {
        if let Some(k) = self.current_master_key().await? {
            return Ok(k);
        }
        sqlx::query(
            "INSERT INTO master_keys (fingerprint, generation, state, created_at_ms) \
             VALUES ($1, 1, 'current', $2) ON CONFLICT DO NOTHING",
        )
        .bind(fp)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        self.current_master_key()
            .await?
            .ok_or_else(|| Error::internal("master key generation: none recorded"))
    }

    /// A rotation to `fp` starts: it gets the next generation (kept if a
    /// previous run already gave it one).
    pub async fn begin_master_rotation(&self, fp: &str) -> Result<MasterKeyRow> {
        let all = self.master_keys().await?;
        if let Some(k) = all.iter().find(|k| k.fingerprint == fp) {
            if k.state == "retired" {
                return Err(Error::state(format!(
                    "master key {fp} was retired: use a new key"
                )));
            }
            return Ok(k.clone());
        }
        let next = all.iter().map(|k| k.generation).max().unwrap_or(0) + 1;
        sqlx::query(
            "INSERT INTO master_keys (fingerprint, generation, state, created_at_ms) \
             VALUES ($1, $2, 'rotating', $3)",
        )
        .bind(fp)
        .bind(next)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        self.master_keys()
            .await?
            .into_iter()
            .find(|k| k.fingerprint == fp)
            .ok_or_else(|| Error::internal("master key row vanished"))
    }

    /// Make `fp` the current generation (the previous current one becomes `previous`).
    pub async fn switch_master_key(&self, fp: &str) -> Result<()> {
        let mut tx = self.pool().begin().await.map_err(db_err)?;
        sqlx::query("UPDATE master_keys SET state = 'previous' WHERE state = 'current' AND fingerprint <> $1")
            .bind(fp)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query("UPDATE master_keys SET state = 'current' WHERE fingerprint = $1")
            .bind(fp)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        tx.commit().await.map_err(db_err)
    }

    pub async fn retire_master_key_row(&self, fp: &str) -> Result<()> {
        sqlx::query(
            "UPDATE master_keys SET state = 'retired', retired_at_ms = $2 \
             WHERE fingerprint = $1 AND state <> 'current'",
        )
        .bind(fp)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// The tenant's key-encryption key; `create` makes one when it has none
    /// (never after erasure).
    pub async fn tenant_kek(&self, tenant: &TenantId, create: bool) -> Result<KekRow> {
        for _ in 0..2 {
            let row = sqlx::query("SELECT kek FROM tenant_keks WHERE tenant = $1")
                .bind(tenant.as_str())
                .fetch_optional(self.pool())
                .await
                .map_err(db_err)?;
            match row {
                Some(r) => {
                    let k: Option<String> = r.try_get("kek").map_err(db_err)?;
                    return match k {
                        None => Ok(KekRow::Erased),
                        Some(h) => {
                            let b: [u8; 32] = hex::decode(h.trim())
                                .ok()
                                .and_then(|v| v.try_into().ok())
                                .ok_or_else(|| {
                                    Error::integrity(format!(
                                        "key-encryption key of tenant {tenant} is malformed"
                                    ))
                                })?;
                            Ok(KekRow::Key(b))
                        }
                    };
                }
                None if !create => return Ok(KekRow::Missing),
                None => {
                    let mut k = [0u8; 32];
                    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut k);
                    sqlx::query(
                        "INSERT INTO tenant_keks (tenant, kek, created_at_ms) VALUES ($1, $2, $3) \
                         ON CONFLICT (tenant) DO NOTHING",
                    )
                    .bind(tenant.as_str())
                    .bind(hex::encode(k))
                    .bind(now_ms())
                    .execute(self.pool())
                    .await
                    .map_err(db_err)?;
                }
            }
        }
        Err(Error::internal(
            "tenant key-encryption key: could not create or read",
        ))
    }

    /// Crypto-erasure, metadata half: destroy the tenant's key-encryption key,
    /// mark the tenant erased and revoke its tokens, in one transaction.
    pub async fn erase_tenant(&self, tenant: &TenantId) -> Result<()> {
        let now = now_ms();
        let mut tx = self.pool().begin().await.map_err(db_err)?;
        sqlx::query(
            "INSERT INTO tenant_keks (tenant, kek, created_at_ms, erased_at_ms) VALUES ($1, NULL, $2, $2) \
             ON CONFLICT (tenant) DO UPDATE SET kek = NULL, erased_at_ms = $2",
        )
        .bind(tenant.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        sqlx::query("UPDATE tenants SET erased_at_ms = $2 WHERE id = $1 AND erased_at_ms IS NULL")
            .bind(tenant.as_str())
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        sqlx::query(
            "UPDATE api_tokens SET revoked_at_ms = $2 WHERE tenant = $1 AND revoked_at_ms IS NULL",
        )
        .bind(tenant.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        tx.commit().await.map_err(db_err)
    }

    /// When the tenant was erased (None: it was not).
    pub async fn tenant_erased_at(&self, tenant: &TenantId) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT erased_at_ms FROM tenants WHERE id = $1")
            .bind(tenant.as_str())
            .fetch_optional(self.pool())
            .await
            .map_err(db_err)?;
        match row {
            Some(r) => r.try_get("erased_at_ms").map_err(db_err),
            None => Ok(None),
        }
    }

    /// Every value sealed under a master key, for resealing after a rotation:
    /// (kind, tenant, name, sealed). Kinds: `secret`, `webhook` (name: the
    /// endpoint id), `daemon` (tenant empty).
    pub async fn sealed_values(&self) -> Result<Vec<(String, String, String, Vec<u8>)>> {
        let mut out = Vec::new();
        for (kind, q) in [
            ("secret", "SELECT tenant, name, sealed FROM secrets"),
            (
                "webhook",
                "SELECT tenant, id AS name, secret_sealed AS sealed FROM webhooks",
            ),
            (
                "daemon",
                "SELECT '' AS tenant, name, sealed FROM daemon_keys",
            ),
        ] {
            for r in sqlx::query(q)
                .fetch_all(self.pool())
                .await
                .map_err(db_err)?
            {
                out.push((
                    kind.to_string(),
                    r.try_get("tenant").map_err(db_err)?,
                    r.try_get("name").map_err(db_err)?,
                    r.try_get("sealed").map_err(db_err)?,
                ));
            }
        }
        Ok(out)
    }

    /// Replace one sealed value listed by [`Meta::sealed_values`].
    pub async fn reseal_value(
        &self,
        kind: &str,
        tenant: &str,
        name: &str,
        sealed: &[u8],
    ) -> Result<()> {
        let q = match kind {
            "secret" => "UPDATE secrets SET sealed = $3 WHERE tenant = $1 AND name = $2",
            "webhook" => "UPDATE webhooks SET secret_sealed = $3 WHERE tenant = $1 AND id = $2",
            "daemon" => "UPDATE daemon_keys SET sealed = $3 WHERE $1 = '' AND name = $2",
            _ => return Err(Error::internal(format!("unknown sealed kind {kind}"))),
        };
        sqlx::query(q)
            .bind(tenant)
            .bind(name)
            .bind(sealed)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    /// Pin the tenant to `regions` (None: any region).
    pub async fn set_tenant_regions(
        &self,
        tenant: &TenantId,
        regions: Option<&[String]>,
    ) -> Result<()> {
        let v = regions.map(|r| r.join(","));
        let done = sqlx::query("UPDATE tenants SET regions = $2 WHERE id = $1")
            .bind(tenant.as_str())
            .bind(v)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::not_found(format!("tenant {tenant}")));
        }
        Ok(())
    }

    /// The regions the tenant is pinned to (None: any).
    pub async fn tenant_regions(&self, tenant: &TenantId) -> Result<Option<Vec<String>>> {
        let row = sqlx::query("SELECT regions FROM tenants WHERE id = $1")
            .bind(tenant.as_str())
            .fetch_optional(self.pool())
            .await
            .map_err(db_err)?;
        let Some(r) = row else { return Ok(None) };
        let v: Option<String> = r.try_get("regions").map_err(db_err)?;
        Ok(v.map(|s| {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn master_generations_keks_and_erasure() {
        let tmp = tempfile::tempdir().unwrap();
        let m = Meta::open(&tmp.path().join("m.db")).await.unwrap();
        assert_eq!(m.init_master_key("aa").await.unwrap().generation, 1);
        assert_eq!(m.init_master_key("bb").await.unwrap().fingerprint, "aa");
        assert_eq!(m.begin_master_rotation("bb").await.unwrap().generation, 2);
        assert_eq!(
            m.begin_master_rotation("bb").await.unwrap().state,
            "rotating"
        );
        m.switch_master_key("bb").await.unwrap();
        assert_eq!(
            m.current_master_key().await.unwrap().unwrap().fingerprint,
            "bb"
        );
        m.retire_master_key_row("aa").await.unwrap();
        assert!(m.begin_master_rotation("aa").await.is_err());
        let t = TenantId::parse("t-x").unwrap();
        m.create_tenant(&t, "x").await.unwrap();
        assert_eq!(m.tenant_kek(&t, false).await.unwrap(), KekRow::Missing);
        let k = m.tenant_kek(&t, true).await.unwrap();
        assert!(matches!(k, KekRow::Key(_)));
        assert_eq!(m.tenant_kek(&t, true).await.unwrap(), k);
        m.erase_tenant(&t).await.unwrap();
        assert_eq!(m.tenant_kek(&t, true).await.unwrap(), KekRow::Erased);
        assert!(m.tenant_erased_at(&t).await.unwrap().is_some());
        assert_eq!(m.tenant_regions(&t).await.unwrap(), None);
        m.set_tenant_regions(&t, Some(&["eu".to_string(), "us".to_string()]))
            .await
            .unwrap();
        assert_eq!(
            m.tenant_regions(&t).await.unwrap(),
            Some(vec!["eu".to_string(), "us".to_string()])
        );
    }
}
