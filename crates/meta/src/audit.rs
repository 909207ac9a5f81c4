//! Append-only, hash-chained audit log.
//!
//! Entry n stores `hash_n = blake3(hash_{n-1} || canonical(entry_n))`. Editing
//! an entry breaks its own hash; deleting one breaks the next entry's link
//! (and the sequence numbers, which must be dense). Triggers refuse
//! UPDATE/DELETE on the table (SQLite `RAISE(ABORT)`, PostgreSQL plpgsql);
//! the chain catches edits made around them (e.g. directly on the database
//! file, or by a superuser who drops the triggers).

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};

use crate::{Engine, Meta};

use stasis_core::{now_ms, Error, Result, TenantId};

const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAuditEntry {
    pub tenant: TenantId,
    pub actor: String,
    /// create, exec, pause, resume, snapshot, restore, fork, download, delete, expire, ...
    pub action: String,
    /// What it was done to (a sandbox or snapshot id).
    pub target: String,
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub seq: i64,
    pub ts_ms: i64,
    pub tenant: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub detail: serde_json::Value,
    pub prev_hash: String,
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditVerification {
    pub ok: bool,
    pub entries: i64,
    /// First sequence number at which the chain breaks, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The hashed fields of one entry.
struct Hashed<'a> {
    seq: i64,
    ts: i64,
    tenant: &'a str,
    actor: &'a str,
    action: &'a str,
    target: &'a str,
    detail: &'a str,
}

fn entry_hash(prev: &str, f: &Hashed<'_>) -> String {
    let canonical =
        serde_json::json!([f.seq, f.ts, f.tenant, f.actor, f.action, f.target, f.detail])
            .to_string();
    let mut h = blake3::Hasher::new();
    h.update(prev.as_bytes());
    h.update(canonical.as_bytes());
    h.finalize().to_hex().to_string()
}

fn db_err(e: sqlx::Error) -> Error {
    Error::internal(format!("audit: {e}"))
}

pub(crate) async fn append(meta: &Meta, e: NewAuditEntry) -> Result<AuditEntry> {
    // Two appenders must not read the same tail and fork the chain: SQLite's
    // BEGIN IMMEDIATE takes the database write lock up front; on PostgreSQL
    // an EXCLUSIVE table lock serializes appenders (readers still read).
    let mut conn = meta.begin().await?;
    let result = async {
        if meta.engine() == Engine::Postgres {
            sqlx::query("LOCK TABLE audit IN EXCLUSIVE MODE")
                .execute(&mut *conn)
                .await
                .map_err(db_err)?;
        }
        let tail = sqlx::query("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        let (seq, prev) = match tail {
            Some(r) => (r.get::<i64, _>(0) + 1, r.get::<String, _>(1)),
            None => (1, GENESIS.to_string()),
        };
        let ts = now_ms();
        let detail = e.detail.to_string();
        let hash = entry_hash(
            &prev,
            &Hashed {
                seq,
                ts,
                tenant: e.tenant.as_str(),
                actor: &e.actor,
                action: &e.action,
                target: &e.target,
                detail: &detail,
            },
        );
        sqlx::query(
            "INSERT INTO audit (seq, ts_ms, tenant, actor, action, target, detail, prev_hash, hash)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(seq)
        .bind(ts)
        .bind(e.tenant.as_str())
        .bind(&e.actor)
        .bind(&e.action)
        .bind(&e.target)
        .bind(&detail)
        .bind(&prev)
        .bind(&hash)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
        Ok(AuditEntry {
            seq,
            ts_ms: ts,
            tenant: e.tenant.as_str().to_string(),
            actor: e.actor,
            action: e.action,
            target: e.target,
            detail: e.detail,
            prev_hash: prev,
            hash,
        })
    }
    .await;
    Meta::end(&mut conn, result.is_ok()).await?;
    result
}

fn decode(r: &AnyRow) -> AuditEntry {
    let detail: String = r.get("detail");
    AuditEntry {
        seq: r.get("seq"),
        ts_ms: r.get("ts_ms"),
        tenant: r.get("tenant"),
        actor: r.get("actor"),
        action: r.get("action"),
        target: r.get("target"),
        detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
        prev_hash: r.get("prev_hash"),
        hash: r.get("hash"),
    }
}

pub(crate) async fn list(
    pool: &AnyPool,
    tenant: Option<&TenantId>,
    target: Option<&str>,
    limit: i64,
) -> Result<Vec<AuditEntry>> {
    let rows = sqlx::query(
        "SELECT * FROM audit WHERE ($1 IS NULL OR tenant = $1) AND ($2 IS NULL OR target = $2)
         ORDER BY seq DESC LIMIT $3",
    )
    .bind(tenant.map(|t| t.as_str().to_string()))
    .bind(target)
    .bind(limit)
    .fetch_all(pool)
    .await
    .map_err(db_err)?;
    let mut out: Vec<AuditEntry> = rows.iter().map(decode).collect();
    out.reverse();
    Ok(out)
}

impl Meta {
    /// `tenant`'s position in the audit log at `seq`: how many of its
    /// entries have a sequence number up to it.
    pub async fn audit_tenant_position(&self, tenant: &TenantId, seq: i64) -> Result<i64> {
        tenant_position(&self.pool, tenant.as_str(), seq).await
    }

    /// The sequence number of `tenant`'s entry at `position` (1-based).
    pub async fn audit_tenant_seq_at(
        &self,
        tenant: &TenantId,
        position: i64,
    ) -> Result<Option<i64>> {
        tenant_seq_at(&self.pool, tenant.as_str(), position).await
    }
}

/// How many of `tenant`'s entries have a sequence number up to `seq`: the
/// tenant's own position in the log (dense per tenant, revealing nothing of
/// other tenants' entries).
pub(crate) async fn tenant_position(pool: &AnyPool, tenant: &str, seq: i64) -> Result<i64> {
    let row = sqlx::query("SELECT COUNT(*) AS n FROM audit WHERE tenant = $1 AND seq <= $2")
        .bind(tenant)
        .bind(seq)
        .fetch_one(pool)
        .await
        .map_err(db_err)?;
    row.try_get::<i64, _>("n").map_err(db_err)
}

/// The sequence number of `tenant`'s entry at `position` (1-based), if the
/// tenant has that many.
pub(crate) async fn tenant_seq_at(
    pool: &AnyPool,
    tenant: &str,
    position: i64,
) -> Result<Option<i64>> {
    if position < 1 {
        return Ok(None);
    }
    let row = sqlx::query("SELECT seq FROM audit WHERE tenant = $1 ORDER BY seq LIMIT 1 OFFSET $2")
        .bind(tenant)
        .bind(position - 1)
        .fetch_optional(pool)
        .await
        .map_err(db_err)?;
    row.map(|r| r.try_get::<i64, _>("seq").map_err(db_err))
        .transpose()
}

/// `tenant`'s entries after `seq`, oldest first.
pub(crate) async fn after(
    pool: &AnyPool,
    tenant: &str,
    seq: i64,
    limit: i64,
) -> Result<Vec<AuditEntry>> {
    let rows =
        sqlx::query("SELECT * FROM audit WHERE tenant = $1 AND seq > $2 ORDER BY seq LIMIT $3")
            .bind(tenant)
            .bind(seq)
            .bind(limit)
            .fetch_all(pool)
            .await
            .map_err(db_err)?;
    Ok(rows.iter().map(decode).collect())
}

pub(crate) async fn verify(pool: &AnyPool) -> Result<AuditVerification> {
    let rows = sqlx::query("SELECT * FROM audit ORDER BY seq")
        .fetch_all(pool)
        .await
        .map_err(db_err)?;
    let mut prev = GENESIS.to_string();
    for (expect_seq, r) in (1i64..).zip(rows.iter()) {
        let seq: i64 = r.get("seq");
        let broken = |problem: String| AuditVerification {
            ok: false,
            entries: rows.len() as i64,
            broken_at: Some(seq),
            problem: Some(problem),
        };
        if seq != expect_seq {
            return Ok(broken(format!("entry {expect_seq} is missing")));
        }
        let stored_prev: String = r.get("prev_hash");
        if stored_prev != prev {
            return Ok(broken("link to the previous entry does not match".into()));
        }
        let detail: String = r.get("detail");
        let h = entry_hash(
            &prev,
            &Hashed {
                seq,
                ts: r.get("ts_ms"),
                tenant: r.get::<&str, _>("tenant"),
                actor: r.get::<&str, _>("actor"),
                action: r.get::<&str, _>("action"),
                target: r.get::<&str, _>("target"),
                detail: &detail,
            },
        );
        let stored: String = r.get("hash");
        if h != stored {
            return Ok(broken("entry content does not match its hash".into()));
        }
        prev = stored;
    }
    Ok(AuditVerification {
        ok: true,
        entries: rows.len() as i64,
        broken_at: None,
        problem: None,
    })
}

#[cfg(test)]
mod tests {
    use crate::Meta;

    use super::*;

    #[tokio::test]
    async fn chain_detects_edits_and_deletions() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            chain_detects_edits_and_deletions_on(&db.meta).await;
        }
    }

    async fn chain_detects_edits_and_deletions_on(m: &Meta) {
        let drop_trigger = |name: &str| match m.engine() {
            Engine::Sqlite => format!("DROP TRIGGER {name}"),
            Engine::Postgres => format!("DROP TRIGGER {name} ON audit"),
        };
        let t = TenantId::parse("t-a").unwrap();
        for i in 0..5 {
            m.audit(NewAuditEntry {
                tenant: t.clone(),
                actor: "alice".into(),
                action: "exec".into(),
                target: format!("sb-{i}"),
                detail: serde_json::json!({"i": i}),
            })
            .await
            .unwrap();
        }
        assert!(m.audit_verify().await.unwrap().ok);
        // Triggers refuse edits through SQL.
        assert!(
            sqlx::query("UPDATE audit SET actor = 'mallory' WHERE seq = 2")
                .execute(m.pool())
                .await
                .is_err()
        );
        // An attacker who drops the triggers and edits an entry is caught.
        assert!(sqlx::query("DELETE FROM audit WHERE seq = 3")
            .execute(m.pool())
            .await
            .is_err());
        sqlx::query(&drop_trigger("audit_no_update"))
            .execute(m.pool())
            .await
            .unwrap();
        sqlx::query(&drop_trigger("audit_no_delete"))
            .execute(m.pool())
            .await
            .unwrap();
        sqlx::query("UPDATE audit SET actor = 'mallory' WHERE seq = 2")
            .execute(m.pool())
            .await
            .unwrap();
        let v = m.audit_verify().await.unwrap();
        assert!(!v.ok);
        assert_eq!(v.broken_at, Some(2));
        // Restore it, then delete an entry: caught too.
        sqlx::query("UPDATE audit SET actor = 'alice' WHERE seq = 2")
            .execute(m.pool())
            .await
            .unwrap();
        assert!(m.audit_verify().await.unwrap().ok);
        sqlx::query("DELETE FROM audit WHERE seq = 3")
            .execute(m.pool())
            .await
            .unwrap();
        let v = m.audit_verify().await.unwrap();
        assert_eq!(v.broken_at, Some(4));
        assert_eq!(
            m.audit_list(Some(&t), Some("sb-1"), 10)
                .await
                .unwrap()
                .len(),
            1
        );
    }
}

#[cfg(test)]
mod concurrency_tests {
    use super::*;

    /// Appenders on separate connections (two daemons) never fork the chain.
    #[tokio::test]
    async fn concurrent_appenders_keep_one_chain() {
        let mut metas = vec![];
        let db = crate::testdb::sqlite().await;
        metas.push((db.meta.clone(), db.meta.clone()));
        if let Some(url) = crate::testing::pg_fresh_database_from_env().await.unwrap() {
            metas.push((
                Meta::connect(&url).await.unwrap(),
                Meta::connect(&url).await.unwrap(),
            ));
        }
        for (a, b) in metas {
            eprintln!("engine {}", a.engine().as_str());
            let t = TenantId::parse("t-a").unwrap();
            let entry = |i: usize| NewAuditEntry {
                tenant: t.clone(),
                actor: format!("node{}", i % 2),
                action: "exec".into(),
                target: format!("sb-{i}"),
                detail: serde_json::json!({ "i": i }),
            };
            let futs = (0..16).map(|i| {
                let m = if i % 2 == 0 { a.clone() } else { b.clone() };
                let e = entry(i);
                async move { m.audit(e).await }
            });
            for r in futures_join_all(futs).await {
                r.unwrap();
            }
            let v = a.audit_verify().await.unwrap();
            assert!(v.ok, "{v:?}");
            assert_eq!(v.entries, 16);
        }
    }

    async fn futures_join_all<F: std::future::Future + Send + 'static>(
        futs: impl Iterator<Item = F>,
    ) -> Vec<F::Output>
    where
        F::Output: Send + 'static,
    {
        let handles: Vec<_> = futs.map(tokio::spawn).collect();
        let mut out = vec![];
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    }
}
