//! Signed port URLs: the shared key they are signed with (sealed by the
//! caller, one value for every daemon of the database) and the table of
//! revoked URLs, so a URL revoked on one node is refused on every node.
//! The token format and its signature are the server's; this stores facts.

use sqlx::Row;

use stasis_core::{now_ms, Result, SandboxId};

use crate::{db_err, Meta};

/// `url_id` of a revocation that covers every URL of a port issued up to it.
pub const ALL_URLS: &str = "*";

impl Meta {
    /// The sealed key named `name`: the one already stored, else `sealed`
    /// (which the caller made) is stored and returned. Two nodes racing both
    /// get the first one inserted.
    pub async fn daemon_key_or_insert(&self, name: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        sqlx::query(
            "INSERT INTO daemon_keys (name, sealed, created_at_ms) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(sealed)
        .bind(now_ms())
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        let row = sqlx::query("SELECT sealed FROM daemon_keys WHERE name = $1")
            .bind(name)
            .fetch_one(self.pool())
            .await
            .map_err(db_err)?;
        row.try_get::<Vec<u8>, _>("sealed").map_err(db_err)
    }

    /// Revoke one URL (`url_id`) of a sandbox port, or with [`ALL_URLS`]
    /// every URL of it issued until now. The row is kept until
    /// `keep_until_ms` (when the URLs it covers have expired anyway); rows
    /// past theirs are purged here.
    pub async fn revoke_port_url(
        &self,
        sandbox: &SandboxId,
        port: u16,
        url_id: &str,
        keep_until_ms: i64,
    ) -> Result<()> {
        let now = now_ms();
        sqlx::query("DELETE FROM port_url_revocations WHERE keep_until_ms < $1")
            .bind(now)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        sqlx::query(
            "INSERT INTO port_url_revocations (sandbox, port, url_id, revoked_at_ms, keep_until_ms)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (sandbox, port, url_id) DO UPDATE SET
             revoked_at_ms = excluded.revoked_at_ms, keep_until_ms = excluded.keep_until_ms",
        )
        .bind(sandbox.as_str())
        .bind(port as i64)
        .bind(url_id)
        .bind(now)
        .bind(keep_until_ms)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// Whether the URL `url_id` of a sandbox port, issued at `issued_at_ms`,
    /// has been revoked (by itself or by a revocation of all the port's URLs
    /// made at or after it was issued).
    pub async fn port_url_revoked(
        &self,
        sandbox: &SandboxId,
        port: u16,
        url_id: &str,
        issued_at_ms: i64,
    ) -> Result<bool> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM port_url_revocations
             WHERE sandbox = $1 AND port = $2
             AND (url_id = $3 OR (url_id = $4 AND revoked_at_ms >= $5))",
        )
        .bind(sandbox.as_str())
        .bind(port as i64)
        .bind(url_id)
        .bind(ALL_URLS)
        .bind(issued_at_ms)
        .fetch_one(self.pool())
        .await
        .map_err(db_err)?;
        Ok(row.try_get::<i64, _>("n").map_err(db_err)? > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_key_stays() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            let m = &db.meta;
            assert_eq!(m.daemon_key_or_insert("k", b"one").await.unwrap(), b"one");
            assert_eq!(m.daemon_key_or_insert("k", b"two").await.unwrap(), b"one");
            assert_eq!(m.daemon_key_or_insert("j", b"two").await.unwrap(), b"two");
        }
    }

    #[tokio::test]
    async fn revocations_by_url_and_by_port() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            let m = &db.meta;
            let a = SandboxId::parse("sb-a").unwrap();
            let b = SandboxId::parse("sb-b").unwrap();
            let later = now_ms() + 3_600_000;
            assert!(!m.port_url_revoked(&a, 80, "u1", 5).await.unwrap());
            m.revoke_port_url(&a, 80, "u1", later).await.unwrap();
            assert!(m.port_url_revoked(&a, 80, "u1", 5).await.unwrap());
            // Only that URL, port and sandbox.
            assert!(!m.port_url_revoked(&a, 80, "u2", 5).await.unwrap());
            assert!(!m.port_url_revoked(&a, 81, "u1", 5).await.unwrap());
            assert!(!m.port_url_revoked(&b, 80, "u1", 5).await.unwrap());
            // Revoking again is fine.
            m.revoke_port_url(&a, 80, "u1", later).await.unwrap();
            // All URLs of a port issued up to now; a URL issued after stays.
            let before = now_ms() - 1;
            m.revoke_port_url(&b, 80, ALL_URLS, later).await.unwrap();
            assert!(m.port_url_revoked(&b, 80, "any", before).await.unwrap());
            assert!(!m
                .port_url_revoked(&b, 80, "new", now_ms() + 1000)
                .await
                .unwrap());
            assert!(!m.port_url_revoked(&b, 81, "any", before).await.unwrap());
            // Rows past their keep time are purged by the next revocation.
            m.revoke_port_url(&a, 90, "old", now_ms() - 1)
                .await
                .unwrap();
            m.revoke_port_url(&a, 91, "x", later).await.unwrap();
            assert!(!m.port_url_revoked(&a, 90, "old", 5).await.unwrap());
        }
    }
}
