//! Lifecycle webhook endpoints and their dead letters.
//!
//! An endpoint is fed from the audit log: its `cursor` is the last audit
//! seq it has handled (delivered, or dead-lettered after every retry), so
//! events survive restarts and are delivered at least once, in order. In a
//! cluster one node at a time delivers an endpoint: it holds a claim that
//! expires (`claim`), renewed while it works.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use stasis_core::{now_ms, Error, Result, TenantId};

use crate::audit::AuditEntry;
use crate::Meta;

fn db_err(e: sqlx::Error) -> Error {
    Error::internal(format!("webhook metadata: {e}"))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    pub id: String,
    pub tenant: String,
    pub url: String,
    /// Event types it receives (`["*"]`: all).
    pub events: Vec<String>,
    /// The last audit seq handled.
    pub cursor: i64,
    pub created_at_ms: i64,
    pub delivered: i64,
    pub failed: i64,
    #[serde(skip)]
    pub secret_sealed: Vec<u8>,
}

/// An event an endpoint never acknowledged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub webhook: String,
    pub seq: i64,
    pub event_type: String,
    pub payload: serde_json::Value,
    pub attempts: i64,
    pub last_error: String,
    pub at_ms: i64,
}

fn decode(row: &sqlx::any::AnyRow) -> Result<Webhook> {
    let events: String = row.try_get("events").map_err(db_err)?;
    Ok(Webhook {
        id: row.try_get("id").map_err(db_err)?,
        tenant: row.try_get("tenant").map_err(db_err)?,
        url: row.try_get("url").map_err(db_err)?,
        events: events.split(',').map(String::from).collect(),
        cursor: row.try_get("cursor").map_err(db_err)?,
        created_at_ms: row.try_get("created_at_ms").map_err(db_err)?,
        delivered: row.try_get("delivered").map_err(db_err)?,
        failed: row.try_get("failed").map_err(db_err)?,
        secret_sealed: row.try_get("secret_sealed").map_err(db_err)?,
    })
}

impl Meta {
    /// A new endpoint, starting after the newest audit entry (it receives
    /// what happens from now on).
    pub async fn webhook_create(
        &self,
        id: &str,
        tenant: &TenantId,
        url: &str,
        events: &[String],
        secret_sealed: &[u8],
    ) -> Result<Webhook> {
        if events.is_empty() || events.iter().any(|e| e.is_empty() || e.contains(',')) {
            return Err(Error::internal(
                "webhook event names are non-empty, without commas",
            ));
        }
        let cursor: i64 = sqlx::query("SELECT COALESCE(MAX(seq), 0) AS m FROM audit")
            .fetch_one(self.pool())
            .await
            .map_err(db_err)?
            .try_get("m")
            .map_err(db_err)?;
        sqlx::query(
            "INSERT INTO webhooks (id, tenant, url, secret_sealed, events, cursor, created_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(id)
        .bind(tenant.as_str())
        .bind(url)
        .bind(secret_sealed)
        .bind(events.join(","))
        .bind(cursor)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        self.webhook_get(id).await
    }

    pub async fn webhook_get(&self, id: &str) -> Result<Webhook> {
        let row = sqlx::query("SELECT * FROM webhooks WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found(format!("webhook {id}")))?;
        decode(&row)
    }

    /// Endpoints of one tenant, or of every tenant with `None`.
    pub async fn webhook_list(&self, tenant: Option<&TenantId>) -> Result<Vec<Webhook>> {
        let rows = sqlx::query(
            "SELECT * FROM webhooks WHERE ($1 IS NULL OR tenant = $1) ORDER BY created_at_ms, id",
        )
        .bind(tenant.map(|t| t.as_str().to_string()))
        .fetch_all(self.pool())
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
    }

    pub async fn webhook_delete(&self, id: &str) -> Result<()> {
        sqlx::query("DELETE FROM webhook_dead WHERE webhook = $1")
            .bind(id)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        let done = sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found(format!("webhook {id}")));
        }
        Ok(())
    }

    /// Take (or renew) the right to deliver endpoint `id` until `until_ms`:
    /// true when this node holds it.
    pub async fn webhook_claim(&self, id: &str, node: &str, until_ms: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE webhooks SET claim_node = $1, claim_until_ms = $2
             WHERE id = $3 AND (claim_node = $1 OR claim_node IS NULL OR claim_until_ms < $4)",
        )
        .bind(node)
        .bind(until_ms)
        .bind(id)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(done.rows_affected() == 1)
    }

    /// The tenant's audit entries after `seq`, oldest first.
    pub async fn audit_after(&self, tenant: &str, seq: i64, limit: i64) -> Result<Vec<AuditEntry>> {
        crate::audit::after(self.pool(), tenant, seq, limit).await
    }

    /// Mark everything up to `seq` handled for `id` (never moves back),
    /// counting a delivery or a failure.
    pub async fn webhook_advance(&self, id: &str, seq: i64, delivered: bool) -> Result<()> {
        let (d, f) = if delivered { (1i64, 0i64) } else { (0, 1) };
        sqlx::query(
            "UPDATE webhooks SET cursor = $1, delivered = delivered + $2, failed = failed + $3
             WHERE id = $4 AND cursor < $1",
        )
        .bind(seq)
        .bind(d)
        .bind(f)
        .bind(id)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// Skip entries up to `seq` that are not events for `id` (no count).
    pub async fn webhook_skip(&self, id: &str, seq: i64) -> Result<()> {
        sqlx::query("UPDATE webhooks SET cursor = $1 WHERE id = $2 AND cursor < $1")
            .bind(seq)
            .bind(id)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    pub async fn webhook_dead_add(&self, d: &DeadLetter) -> Result<()> {
        sqlx::query(
            "INSERT INTO webhook_dead (webhook, seq, event_type, payload, attempts, last_error, at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (webhook, seq) DO UPDATE SET attempts = EXCLUDED.attempts,
                 last_error = EXCLUDED.last_error, at_ms = EXCLUDED.at_ms",
        )
        .bind(&d.webhook)
        .bind(d.seq)
        .bind(&d.event_type)
        .bind(d.payload.to_string())
        .bind(d.attempts)
        .bind(&d.last_error)
        .bind(d.at_ms)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(())
    }

    pub async fn webhook_dead_list(&self, id: &str) -> Result<Vec<DeadLetter>> {
        let rows = sqlx::query("SELECT * FROM webhook_dead WHERE webhook = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(self.pool())
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let payload: String = r.try_get("payload").map_err(db_err)?;
                Ok(DeadLetter {
                    webhook: r.try_get("webhook").map_err(db_err)?,
                    seq: r.try_get("seq").map_err(db_err)?,
                    event_type: r.try_get("event_type").map_err(db_err)?,
                    payload: serde_json::from_str(&payload)
                        .unwrap_or(serde_json::Value::String(payload)),
                    attempts: r.try_get("attempts").map_err(db_err)?,
                    last_error: r.try_get("last_error").map_err(db_err)?,
                    at_ms: r.try_get("at_ms").map_err(db_err)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewAuditEntry;

    #[tokio::test]
    async fn endpoints_cursor_claims_and_dead_letters() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            on(&db.meta).await;
        }
    }

    async fn on(m: &Meta) {
        let t = TenantId::parse("t-a").unwrap();
        m.create_tenant(&t, "a").await.unwrap();
        let audit = |action: &str| NewAuditEntry {
            tenant: t.clone(),
            actor: "x".into(),
            action: action.into(),
            target: "sbx-1".into(),
            detail: serde_json::json!({}),
        };
        m.audit(audit("create")).await.unwrap();
        let all = vec!["*".to_string()];
        let w = m
            .webhook_create("wh-1", &t, "http://127.0.0.1:9/h", &all, b"sealed")
            .await
            .unwrap();
        assert_eq!(w.secret_sealed, b"sealed");
        // It starts after what already happened.
        assert!(m.audit_after("t-a", w.cursor, 10).await.unwrap().is_empty());
        m.audit(audit("pause")).await.unwrap();
        m.audit(audit("resume")).await.unwrap();
        let next = m.audit_after("t-a", w.cursor, 10).await.unwrap();
        assert_eq!(
            next.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
            ["pause", "resume"]
        );
        assert_eq!(m.audit_after("t-a", w.cursor, 1).await.unwrap().len(), 1);
        assert!(m.audit_after("t-other", 0, 10).await.unwrap().is_empty());
        // The cursor only moves forward.
        m.webhook_advance("wh-1", next[1].seq, true).await.unwrap();
        m.webhook_advance("wh-1", next[0].seq, true).await.unwrap();
        let w2 = m.webhook_get("wh-1").await.unwrap();
        assert_eq!((w2.cursor, w2.delivered), (next[1].seq, 1));
        // One node at a time.
        let far = now_ms() + 60_000;
        assert!(m.webhook_claim("wh-1", "a", far).await.unwrap());
        assert!(m.webhook_claim("wh-1", "a", far).await.unwrap(), "renewal");
        assert!(!m.webhook_claim("wh-1", "b", far).await.unwrap());
        assert!(m.webhook_claim("wh-1", "a", 1).await.unwrap());
        assert!(
            m.webhook_claim("wh-1", "b", far).await.unwrap(),
            "after expiry"
        );
        let d = DeadLetter {
            webhook: "wh-1".into(),
            seq: next[0].seq,
            event_type: "sandbox.paused".into(),
            payload: serde_json::json!({"id": "evt-1"}),
            attempts: 6,
            last_error: "connection refused".into(),
            at_ms: 1,
        };
        m.webhook_dead_add(&d).await.unwrap();
        m.webhook_dead_add(&d).await.unwrap();
        assert_eq!(m.webhook_dead_list("wh-1").await.unwrap(), vec![d]);
        assert_eq!(m.webhook_list(Some(&t)).await.unwrap().len(), 1);
        m.webhook_delete("wh-1").await.unwrap();
        assert!(m.webhook_dead_list("wh-1").await.unwrap().is_empty());
        assert_eq!(
            m.webhook_delete("wh-1").await.unwrap_err().code,
            stasis_core::ErrorCode::NotFound
        );
    }
}
