//! Tenants, API tokens (stored only as hashes) and sealed tenant secrets.
//!
//! A token is looked up by the hash of what the caller presented, so the
//! comparison happens on a 256-bit digest inside the database index: timing
//! tells an attacker nothing about the stored tokens.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use stasis_core::{now_ms, Error, ErrorCode, Result, TenantId};

use crate::Meta;

fn db_err(e: sqlx::Error) -> Error {
    Error::internal(format!("tenancy metadata: {e}"))
}

/// The stored form of a token: blake3 of its text, hex.
pub fn hash_token(token: &str) -> String {
    blake3::derive_key("stasis 2026-12 api token v1", token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub created_at_ms: i64,
}

/// A token's record (never its text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: String,
    /// None for admin tokens.
    pub tenant: Option<TenantId>,
    pub name: String,
    pub is_admin: bool,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<i64>,
    /// What the token may do (names the server defines); None: everything
    /// its tenant may (tokens made before scopes existed, and admin tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at_ms: Option<i64>,
    /// Only this sandbox's routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The token this one replaced by rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_from: Option<String>,
}

impl TokenRecord {
    /// Expired at `now` (a token without expiry never is).
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at_ms.is_some_and(|t| t <= now)
    }
}

/// A token to store: everything but its generated timestamps.
#[derive(Debug, Clone, Default)]
pub struct NewTokenRecord<'a> {
    pub id: &'a str,
    pub tenant: Option<&'a TenantId>,
    pub name: &'a str,
    /// The hash of its text ([`hash_token`]).
    pub hash: &'a str,
    pub is_admin: bool,
    pub scopes: Option<&'a [String]>,
    pub expires_at_ms: Option<i64>,
    pub sandbox: Option<&'a str>,
    pub rotated_from: Option<&'a str>,
}

fn decode_token(row: &sqlx::any::AnyRow) -> Result<TokenRecord> {
    let tenant: Option<String> = row.try_get("tenant").map_err(db_err)?;
    let is_admin: i64 = row.try_get("is_admin").map_err(db_err)?;
    Ok(TokenRecord {
        id: row.try_get("id").map_err(db_err)?,
        tenant: tenant.as_deref().map(TenantId::parse).transpose()?,
        name: row.try_get("name").map_err(db_err)?,
        is_admin: is_admin != 0,
        created_at_ms: row.try_get("created_at_ms").map_err(db_err)?,
        revoked_at_ms: row.try_get("revoked_at_ms").map_err(db_err)?,
        scopes: row
            .try_get::<Option<String>, _>("scopes")
            .map_err(db_err)?
            .map(|s| {
                s.split(',')
                    .filter(|x| !x.is_empty())
                    .map(String::from)
                    .collect()
            }),
        expires_at_ms: row.try_get("expires_at_ms").map_err(db_err)?,
        last_used_at_ms: row.try_get("last_used_at_ms").map_err(db_err)?,
        sandbox: row.try_get("sandbox").map_err(db_err)?,
        rotated_from: row.try_get("rotated_from").map_err(db_err)?,
    })
}

fn decode_tenant(row: &sqlx::any::AnyRow) -> Result<Tenant> {
    let id: String = row.try_get("id").map_err(db_err)?;
    Ok(Tenant {
        id: TenantId::parse(&id)?,
        name: row.try_get("name").map_err(db_err)?,
        created_at_ms: row.try_get("created_at_ms").map_err(db_err)?,
    })
}

impl Meta {
    /// Create a tenant; `invalid_state` when the id is taken.
    pub async fn create_tenant(&self, id: &TenantId, name: &str) -> Result<Tenant> {
        let now = now_ms();
        let done = sqlx::query(
            "INSERT INTO tenants (id, name, created_at_ms) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id.as_str())
        .bind(name)
        .bind(now)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!("tenant {id} already exists")));
        }
        self.get_tenant(id).await
    }

    /// Create the tenant unless it exists (bootstrap).
    pub async fn ensure_tenant(&self, id: &TenantId, name: &str) -> Result<Tenant> {
        match self.create_tenant(id, name).await {
            Ok(t) => Ok(t),
            Err(e) if e.code == ErrorCode::InvalidState => self.get_tenant(id).await,
            Err(e) => Err(e),
        }
    }

    pub async fn get_tenant(&self, id: &TenantId) -> Result<Tenant> {
        let row = sqlx::query("SELECT id, name, created_at_ms FROM tenants WHERE id = $1")
            .bind(id.as_str())
            .fetch_optional(self.pool())
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found(format!("tenant {id}")))?;
        decode_tenant(&row)
    }

    pub async fn list_tenants(&self) -> Result<Vec<Tenant>> {
        let rows =
            sqlx::query("SELECT id, name, created_at_ms FROM tenants ORDER BY created_at_ms, id")
                .fetch_all(self.pool())
                .await
                .map_err(db_err)?;
        rows.iter().map(decode_tenant).collect()
    }

    /// Store a new token under the hash of its text.
    pub async fn insert_token(&self, t: &NewTokenRecord<'_>) -> Result<TokenRecord> {
        if t.is_admin == t.tenant.is_some() {
            return Err(Error::internal(
                "a token is either an admin token or belongs to a tenant",
            ));
        }
        if t.scopes
            .is_some_and(|s| s.iter().any(|x| x.is_empty() || x.contains(',')))
        {
            return Err(Error::internal(
                "a scope name is non-empty and has no comma",
            ));
        }
        sqlx::query(
            "INSERT INTO api_tokens (id, tenant, name, hash, is_admin, created_at_ms,
                                     scopes, expires_at_ms, sandbox, rotated_from)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(t.id)
        .bind(t.tenant.map(|t| t.as_str().to_string()))
        .bind(t.name)
        .bind(t.hash)
        .bind(if t.is_admin { 1i64 } else { 0i64 })
        .bind(now_ms())
        .bind(t.scopes.map(|s| s.join(",")))
        .bind(t.expires_at_ms)
        .bind(t.sandbox)
        .bind(t.rotated_from)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        self.get_token(t.id).await
    }

    /// Record that a token was used at `at` (callers throttle this).
    pub async fn touch_token(&self, id: &str, at: i64) -> Result<()> {
        sqlx::query("UPDATE api_tokens SET last_used_at_ms = $1 WHERE id = $2")
            .bind(at)
            .bind(id)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        Ok(())
    }

    /// Make a live token expire at `at` at the latest (an earlier expiry
    /// stays): the old token of a rotation, valid through the overlap.
    pub async fn expire_token_by(&self, id: &str, at: i64) -> Result<TokenRecord> {
        let done = sqlx::query(
            "UPDATE api_tokens SET expires_at_ms = $1
             WHERE id = $2 AND revoked_at_ms IS NULL
               AND (expires_at_ms IS NULL OR expires_at_ms > $1)",
        )
        .bind(at)
        .bind(id)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        let rec = self.get_token(id).await?;
        if done.rows_affected() == 0 && rec.revoked_at_ms.is_some() {
            return Err(Error::state(format!("token {id} is revoked")));
        }
        Ok(rec)
    }

    pub async fn get_token(&self, id: &str) -> Result<TokenRecord> {
        let row = sqlx::query("SELECT * FROM api_tokens WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found(format!("token {id}")))?;
        decode_token(&row)
    }

    /// The live (not revoked) token whose text hashes to `token_hash`.
    pub async fn token_by_hash(&self, token_hash: &str) -> Result<Option<TokenRecord>> {
        let row = sqlx::query("SELECT * FROM api_tokens WHERE hash = $1 AND revoked_at_ms IS NULL")
            .bind(token_hash)
            .fetch_optional(self.pool())
            .await
            .map_err(db_err)?;
        row.as_ref().map(decode_token).transpose()
    }

    /// Tokens of one tenant (or the admin tokens, with `None`).
    pub async fn list_tokens(&self, tenant: Option<&TenantId>) -> Result<Vec<TokenRecord>> {
        let rows = match tenant {
            Some(t) => {
                sqlx::query("SELECT * FROM api_tokens WHERE tenant = $1 ORDER BY created_at_ms, id")
                    .bind(t.as_str())
                    .fetch_all(self.pool())
                    .await
            }
            None => {
                sqlx::query(
                    "SELECT * FROM api_tokens WHERE is_admin = 1 ORDER BY created_at_ms, id",
                )
                .fetch_all(self.pool())
                .await
            }
        }
        .map_err(db_err)?;
        rows.iter().map(decode_token).collect()
    }

    /// Revoke a token; revoking twice is refused (`invalid_state`).
    pub async fn revoke_token(&self, id: &str) -> Result<TokenRecord> {
        self.get_token(id).await?;
        let done = sqlx::query(
            "UPDATE api_tokens SET revoked_at_ms = $1 WHERE id = $2 AND revoked_at_ms IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!("token {id} is already revoked")));
        }
        self.get_token(id).await
    }

    /// Insert or replace a tenant's secret (already sealed by the caller).
    /// Returns true when it replaced an existing one.
    pub async fn put_secret(&self, tenant: &TenantId, name: &str, sealed: &[u8]) -> Result<bool> {
        let now = now_ms();
        let existed = self.secret_names(tenant).await?.iter().any(|n| n == name);
        sqlx::query(
            "INSERT INTO secrets (tenant, name, sealed, created_at_ms, updated_at_ms)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant, name) DO UPDATE SET sealed = excluded.sealed,
             updated_at_ms = excluded.updated_at_ms",
        )
        .bind(tenant.as_str())
        .bind(name)
        .bind(sealed)
        .bind(now)
        .bind(now)
        .execute(self.pool())
        .await
        .map_err(db_err)?;
        Ok(existed)
    }

    pub async fn delete_secret(&self, tenant: &TenantId, name: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM secrets WHERE tenant = $1 AND name = $2")
            .bind(tenant.as_str())
            .bind(name)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::not_found(format!("secret {name}")));
        }
        Ok(())
    }

    /// Names of a tenant's secrets, sorted.
    pub async fn secret_names(&self, tenant: &TenantId) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT name FROM secrets WHERE tenant = $1 ORDER BY name")
            .bind(tenant.as_str())
            .fetch_all(self.pool())
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("name").map_err(db_err))
            .collect()
    }

    /// The sealed value of one secret.
    pub async fn secret_sealed(&self, tenant: &TenantId, name: &str) -> Result<Vec<u8>> {
        let row = sqlx::query("SELECT sealed FROM secrets WHERE tenant = $1 AND name = $2")
            .bind(tenant.as_str())
            .bind(name)
            .fetch_optional(self.pool())
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found(format!("secret {name}")))?;
        row.try_get("sealed").map_err(db_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tokens_are_found_by_hash_until_revoked() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            tokens_on(&db.meta).await;
        }
    }

    async fn tokens_on(m: &Meta) {
        let t = TenantId::parse("t-a").unwrap();
        m.create_tenant(&t, "a").await.unwrap();
        assert_eq!(
            m.create_tenant(&t, "again").await.unwrap_err().code,
            ErrorCode::InvalidState
        );
        m.ensure_tenant(&t, "again").await.unwrap();
        let h = hash_token("stk_secret");
        assert_ne!(h, "stk_secret");
        let rec = m
            .insert_token(&NewTokenRecord {
                id: "tok-1",
                tenant: Some(&t),
                name: "ci",
                hash: &h,
                is_admin: false,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(rec.tenant.as_ref(), Some(&t));
        assert!(!rec.is_admin);
        assert_eq!(m.token_by_hash(&h).await.unwrap(), Some(rec));
        assert_eq!(
            m.token_by_hash(&hash_token("stk_other")).await.unwrap(),
            None
        );
        m.revoke_token("tok-1").await.unwrap();
        assert_eq!(m.token_by_hash(&h).await.unwrap(), None);
        assert_eq!(
            m.revoke_token("tok-1").await.unwrap_err().code,
            ErrorCode::InvalidState
        );
        assert_eq!(
            m.revoke_token("tok-nope").await.unwrap_err().code,
            ErrorCode::NotFound
        );
        // Admin tokens have no tenant; tenant tokens are never admin.
        assert!(m
            .insert_token(&NewTokenRecord {
                id: "tok-2",
                tenant: Some(&t),
                name: "x",
                hash: "h2",
                is_admin: true,
                ..Default::default()
            })
            .await
            .is_err());
        let a = m
            .insert_token(&NewTokenRecord {
                id: "tok-3",
                tenant: None,
                name: "admin",
                hash: "h3",
                is_admin: true,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(a.is_admin && a.tenant.is_none());
        assert_eq!(m.list_tokens(None).await.unwrap().len(), 1);
        assert_eq!(m.list_tokens(Some(&t)).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn scopes_expiry_and_use_round_trip() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            scoped_on(&db.meta).await;
        }
    }

    async fn scoped_on(m: &Meta) {
        let t = TenantId::parse("t-a").unwrap();
        m.create_tenant(&t, "a").await.unwrap();
        let scopes = vec!["read".to_string(), "approve".to_string()];
        let rec = m
            .insert_token(&NewTokenRecord {
                id: "tok-s",
                tenant: Some(&t),
                name: "approver",
                hash: "hs",
                scopes: Some(&scopes),
                expires_at_ms: Some(5_000),
                sandbox: Some("sbx-1"),
                rotated_from: Some("tok-old"),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(rec.scopes.as_deref(), Some(&scopes[..]));
        assert_eq!(rec.sandbox.as_deref(), Some("sbx-1"));
        assert_eq!(rec.rotated_from.as_deref(), Some("tok-old"));
        assert!(!rec.expired(4_999) && rec.expired(5_000));
        assert_eq!(rec.last_used_at_ms, None);
        m.touch_token("tok-s", 1234).await.unwrap();
        assert_eq!(
            m.get_token("tok-s").await.unwrap().last_used_at_ms,
            Some(1234)
        );
        // Expiry only ever moves earlier.
        assert_eq!(
            m.expire_token_by("tok-s", 9_000)
                .await
                .unwrap()
                .expires_at_ms,
            Some(5_000)
        );
        assert_eq!(
            m.expire_token_by("tok-s", 3_000)
                .await
                .unwrap()
                .expires_at_ms,
            Some(3_000)
        );
        // A comma would corrupt the stored list.
        let bad = vec!["a,b".to_string()];
        assert!(m
            .insert_token(&NewTokenRecord {
                id: "tok-b",
                tenant: Some(&t),
                name: "x",
                hash: "hb",
                scopes: Some(&bad),
                ..Default::default()
            })
            .await
            .is_err());
        m.revoke_token("tok-s").await.unwrap();
        assert_eq!(
            m.expire_token_by("tok-s", 1).await.unwrap_err().code,
            ErrorCode::InvalidState
        );
        // A token made before scopes existed reads back with all of them.
        let legacy = m
            .insert_token(&NewTokenRecord {
                id: "tok-l",
                tenant: Some(&t),
                name: "legacy",
                hash: "hl",
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(legacy.scopes, None);
        assert_eq!(legacy.expires_at_ms, None);
    }

    #[tokio::test]
    async fn secrets_are_per_tenant() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            secrets_on(&db.meta).await;
        }
    }

    async fn secrets_on(m: &Meta) {
        let a = TenantId::parse("t-a").unwrap();
        let b = TenantId::parse("t-b").unwrap();
        m.create_tenant(&a, "a").await.unwrap();
        m.create_tenant(&b, "b").await.unwrap();
        assert!(!m.put_secret(&a, "K", b"sealed1").await.unwrap());
        assert!(m.put_secret(&a, "K", b"sealed2").await.unwrap());
        assert_eq!(m.secret_sealed(&a, "K").await.unwrap(), b"sealed2");
        assert_eq!(
            m.secret_sealed(&b, "K").await.unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(m.secret_names(&a).await.unwrap(), vec!["K".to_string()]);
        assert!(m.secret_names(&b).await.unwrap().is_empty());
        m.delete_secret(&a, "K").await.unwrap();
        assert_eq!(
            m.delete_secret(&a, "K").await.unwrap_err().code,
            ErrorCode::NotFound
        );
    }
}
