//! Web console sessions: the hash of a session id, the API token it stands
//! for, the actor name its decisions are recorded under, and its expiry.
//! The session id itself (the cookie's value) is never stored; the server
//! hashes it before every lookup.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use stasis_core::{now_ms, Result};

use crate::{db_err, Meta};

/// One stored session (never the id itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleSession {
    pub id_hash: String,
    pub token_id: String,
    pub actor: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

fn decode(row: &sqlx::any::AnyRow) -> Result<ConsoleSession> {
    Ok(ConsoleSession {
        id_hash: row.try_get("id_hash").map_err(db_err)?,
        token_id: row.try_get("token_id").map_err(db_err)?,
        actor: row.try_get("actor").map_err(db_err)?,
        created_at_ms: row.try_get("created_at_ms").map_err(db_err)?,
        expires_at_ms: row.try_get("expires_at_ms").map_err(db_err)?,
    })
}

impl Meta {
    /// Store a new session; expired sessions are purged on the way.
    pub async fn console_session_insert(&self, s: &ConsoleSession) -> Result<()> {
        sqlx::query("DELETE FROM console_sessions WHERE expires_at_ms <= $1")
            .bind(now_ms())
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        sqlx::query(
            "INSERT INTO console_sessions (id_hash, token_id, actor, created_at_ms, expires_at_ms)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&s.id_hash)
        .bind(&s.token_id)
        .bind(&s.actor)
        .bind(s.created_at_ms)
        .bind(s.expires_at_ms)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// The unexpired session whose id hashes to `id_hash`.
    pub async fn console_session(&self, id_hash: &str) -> Result<Option<ConsoleSession>> {
        let row =
            sqlx::query("SELECT * FROM console_sessions WHERE id_hash = $1 AND expires_at_ms > $2")
                .bind(id_hash)
                .bind(now_ms())
                .fetch_optional(self.pool())
                .await
                .map_err(db_err)?;
        row.as_ref().map(decode).transpose()
    }

    /// End a session (sign-out); ending an unknown one is fine.
    pub async fn console_session_delete(&self, id_hash: &str) -> Result<()> {
        sqlx::query("DELETE FROM console_sessions WHERE id_hash = $1")
            .bind(id_hash)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sessions_expire_and_end() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            let m = &db.meta;
            let now = now_ms();
            let live = ConsoleSession {
                id_hash: "h1".into(),
                token_id: "tok-1".into(),
                actor: "alice".into(),
                created_at_ms: now,
                expires_at_ms: now + 60_000,
            };
            m.console_session_insert(&live).await.unwrap();
            assert_eq!(m.console_session("h1").await.unwrap(), Some(live));
            assert_eq!(m.console_session("h2").await.unwrap(), None);
            let old = ConsoleSession {
                id_hash: "h0".into(),
                token_id: "tok-1".into(),
                actor: "bob".into(),
                created_at_ms: now - 10,
                expires_at_ms: now - 1,
            };
            m.console_session_insert(&old).await.unwrap();
            assert_eq!(m.console_session("h0").await.unwrap(), None);
            m.console_session_delete("h1").await.unwrap();
            m.console_session_delete("h1").await.unwrap();
            assert_eq!(m.console_session("h1").await.unwrap(), None);
        }
    }
}
