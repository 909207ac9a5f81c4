//! Metadata: sandboxes with their persisted lifecycle state, and the
//! hash-chained audit log. SQLite (WAL) is the embedded default; PostgreSQL
//! (`postgres://...`) serves several daemons sharing one database.
//!
//! Both engines go through sqlx's `Any` driver with one set of queries in
//! portable SQL (`$N` placeholders, which SQLite accepts too). What differs
//! per engine is small and lives in [`Engine`]: how a write transaction
//! starts (SQLite's `BEGIN IMMEDIATE` takes the database write lock; on
//! PostgreSQL a plain `BEGIN` plus row locks or a table lock where a chain
//! needs serializing) and the migrations directory (`migrations/` for
//! SQLite, `migrations-postgres/` for PostgreSQL: same numbering, same
//! schema meaning, each in its engine's dialect).
//!
//! Every state change is a compare-and-set on the row's current state
//! (`UPDATE ... WHERE state = ?`), checked against the lifecycle state
//! machine, so two operations racing on one sandbox cannot both win.

use serde::{Deserialize, Serialize};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{Any, AnyPool, Connection, Executor, Row};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use stasis_core::{
    now_ms, BackendKind, Error, Manifest, Result, SandboxId, SandboxState, SnapshotId, TenantId,
};

mod audit;
pub mod console_sessions;
pub mod due;
pub mod governance;
pub mod labels;
pub mod lease;
mod manifest;
pub mod port_urls;
pub mod runs;
pub mod templates;
pub mod tenants;
#[cfg(test)]
pub(crate) mod testdb;
pub mod testing;
pub mod webhooks;
pub use audit::{AuditEntry, AuditVerification, NewAuditEntry};
pub use governance::{KekRow, MasterKeyRow};
pub use labels::{Labels, ListFilter};
pub use templates::{NewTemplate, TemplateRecord};
pub use tenants::{hash_token, Tenant, TokenRecord};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseKind {
    /// Memory and filesystem: processes continue on resume.
    Memory,
    /// Filesystem only: processes start afresh on resume.
    Filesystem,
}

impl PauseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PauseKind::Memory => "memory",
            PauseKind::Filesystem => "filesystem",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        match s {
            "memory" => Ok(PauseKind::Memory),
            "filesystem" => Ok(PauseKind::Filesystem),
            _ => Err(Error::internal(format!("bad pause kind {s:?} in metadata"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: SandboxId,
    pub tenant: TenantId,
    pub backend: BackendKind,
    pub state: SandboxState,
    /// Why it failed, or a note on the last state change (e.g. a resume that fell back).
    pub reason: Option<String>,
    pub manifest: Manifest,
    pub manifest_digest: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// Running time accumulated before `running_since_ms` (paused time excluded).
    pub running_ms: i64,
    pub running_since_ms: Option<i64>,
    pub paused_at_ms: Option<i64>,
    /// When a paused sandbox expires (TTL).
    pub expires_at_ms: Option<i64>,
    pub pause_snapshot: Option<SnapshotId>,
    pub pause_kind: Option<PauseKind>,
    /// Snapshot this sandbox was restored or forked from.
    pub source_snapshot: Option<SnapshotId>,
    /// Last periodic checkpoint of the running sandbox (`lifecycle.checkpoint_secs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_snapshot: Option<SnapshotId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_at_ms: Option<i64>,
    /// Set when another node took the sandbox over after its owner died: the
    /// snapshot it was restored from, when, and the running time after that
    /// snapshot that was lost with the dead node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_from_snapshot: Option<SnapshotId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_lost_ms: Option<i64>,
    /// The node holding the sandbox's lease (it runs there), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl SandboxRecord {
    /// Running time so far, paused time excluded.
    pub fn running_time_ms(&self, now: i64) -> i64 {
        self.running_ms + self.running_since_ms.map(|s| (now - s).max(0)).unwrap_or(0)
    }
}

/// Fields a transition may set. `None` leaves a field as it is; use the
/// `clear_*` flags to set it to NULL.
#[derive(Debug, Clone, Default)]
pub struct Patch {
    pub reason: Option<Option<String>>,
    pub running_ms: Option<i64>,
    pub running_since_ms: Option<Option<i64>>,
    pub paused_at_ms: Option<Option<i64>>,
    pub expires_at_ms: Option<Option<i64>>,
    pub pause_snapshot: Option<Option<SnapshotId>>,
    pub pause_kind: Option<Option<PauseKind>>,
    pub checkpoint_snapshot: Option<Option<SnapshotId>>,
    pub checkpoint_at_ms: Option<Option<i64>>,
    pub recovered_from_snapshot: Option<Option<SnapshotId>>,
    pub recovered_at_ms: Option<Option<i64>>,
    pub progress_lost_ms: Option<Option<i64>>,
}

impl Patch {
    /// A patch that only sets the reason.
    pub fn reason(reason: impl Into<String>) -> Patch {
        Patch {
            reason: Some(Some(reason.into())),
            ..Default::default()
        }
    }
}

/// What a writer believes about a sandbox's lease: "node `node` holds it
/// with fencing token `token`". A write carrying a fence succeeds only while
/// that is still true in the database (checked in the same statement).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub node: String,
    pub token: i64,
}

/// Rows of a sandbox with the node holding its lease.
const SELECT_SANDBOX: &str = "SELECT s.*, l.node AS lease_node FROM sandboxes s
     LEFT JOIN leases l ON l.sandbox = s.id";

/// The database engine behind a [`Meta`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }
}

#[derive(Clone)]
pub struct Meta {
    pool: AnyPool,
    engine: Engine,
}

/// A write transaction on one pooled connection (from [`Meta::begin`]).
///
/// Dropped while still open — the future holding it was cancelled between
/// `begin` and the end of [`Meta::end`], e.g. because the HTTP client of the
/// request went away — the connection is closed instead of going back to
/// the pool, which rolls the transaction back. Returned to the pool inside
/// its transaction, it would run every later query of whoever got it in that
/// uncommitted transaction: a new sandbox inserted there is invisible to the
/// other connections (its create answered 404 for its own id), and on SQLite
/// it would hold the database write lock.
pub(crate) struct Tx {
    conn: PoolConnection<Any>,
    open: bool,
}

impl std::ops::Deref for Tx {
    type Target = sqlx::AnyConnection;
    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl std::ops::DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.open {
            tracing::warn!("metadata transaction abandoned before its end; closing its connection");
            self.conn.close_on_drop();
        }
    }
}

pub(crate) fn db_err(e: sqlx::Error) -> Error {
    Error::internal(format!("metadata: {e}"))
}

/// Hide the password of a database URL (for logs and `doctor`).
pub fn redact_url(url: &str) -> String {
    match url.split_once('@') {
        Some((scheme_user, host)) if scheme_user.contains("://") => {
            let (scheme, user) = scheme_user.split_once("://").unwrap_or(("", ""));
            let user = user.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_string(),
    }
}

impl Meta {
    /// Open (creating if needed) the SQLite database at `path` and run migrations.
    pub async fn open(path: &Path) -> Result<Self> {
        Self::connect(&format!("sqlite://{}", path.display())).await
    }

    /// Open the metadata database named by `url` and run its engine's
    /// migrations: `sqlite:///abs/path/meta.db` (created if missing) or
    /// `postgres://user[:pass]@host[:port]/db`.
    pub async fn connect(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let bad_url = |why: &str| {
            Error::invalid(format!(
                "metadata URL {}: {why} (expected sqlite:///path or postgres://...)",
                redact_url(url)
            ))
        };
        let (engine, pool) = if let Some(rest) = url.strip_prefix("sqlite://") {
            let path = rest.split('?').next().unwrap_or(rest);
            if path.is_empty() {
                return Err(bad_url("no database path"));
            }
            // WAL is a property of the database file: set it once with the
            // native driver (which also creates the file), then share the
            // per-connection settings through the pool.
            let opts = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
                .map_err(db_err)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal);
            sqlx::SqliteConnection::connect_with(&opts)
                .await
                .map_err(db_err)?
                .close()
                .await
                .map_err(db_err)?;
            let pool = AnyPoolOptions::new()
                .max_connections(4)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute(
                            "PRAGMA busy_timeout = 10000; PRAGMA synchronous = FULL;
                             PRAGMA foreign_keys = ON;",
                        )
                        .await?;
                        Ok(())
                    })
                })
                .connect(&format!("sqlite://{path}"))
                .await
                .map_err(db_err)?;
            (Engine::Sqlite, pool)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = AnyPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(10))
                .connect(url)
                .await
                .map_err(|e| Error::internal(format!("metadata {}: {e}", redact_url(url))))?;
            (Engine::Postgres, pool)
        } else {
            return Err(bad_url("unknown scheme"));
        };
        let migrator = match engine {
            Engine::Sqlite => sqlx::migrate!("./migrations"),
            Engine::Postgres => sqlx::migrate!("./migrations-postgres"),
        };
        migrator
            .run(&pool)
            .await
            .map_err(|e| Error::internal(format!("metadata migration: {e}")))?;
        Ok(Meta { pool, engine })
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// A connection inside a write transaction: on SQLite `BEGIN IMMEDIATE`
    /// (the database write lock up front, so read-then-write cannot
    /// interleave); on PostgreSQL a plain `BEGIN` (callers compare-and-set
    /// rows or lock what they read). End it with [`Meta::end`]; see [`Tx`]
    /// for what happens when it is dropped before.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        let conn = self.pool.acquire().await.map_err(db_err)?;
        // Open from here on: a cancelled BEGIN may still have started it.
        let mut tx = Tx { conn, open: true };
        let q = match self.engine {
            Engine::Sqlite => "BEGIN IMMEDIATE",
            Engine::Postgres => "BEGIN",
        };
        match sqlx::query(q).execute(&mut *tx).await {
            Ok(_) => Ok(tx),
            Err(e) => {
                // A refused BEGIN (e.g. SQLite busy) started nothing.
                tx.open = false;
                Err(db_err(e))
            }
        }
    }

    /// Commit when `ok`, else roll back.
    pub(crate) async fn end(tx: &mut Tx, ok: bool) -> Result<()> {
        let q = if ok { "COMMIT" } else { "ROLLBACK" };
        sqlx::query(q).execute(&mut **tx).await.map_err(db_err)?;
        tx.open = false;
        Ok(())
    }

    /// Insert a new sandbox in state `Creating`.
    pub async fn insert_sandbox(
        &self,
        id: &SandboxId,
        tenant: &TenantId,
        manifest: &Manifest,
        backend: BackendKind,
        source_snapshot: Option<&SnapshotId>,
    ) -> Result<SandboxRecord> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO sandboxes (id, tenant, backend, state, manifest, manifest_digest,
             created_at_ms, updated_at_ms, source_snapshot) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(backend.as_str())
        .bind(SandboxState::Creating.as_str())
        .bind(serde_json::to_string(manifest)?)
        .bind(manifest.digest())
        .bind(now)
        .bind(now)
        .bind(source_snapshot.map(|s| s.as_str().to_string()))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        self.get(id).await
    }

    /// Remove the record of a sandbox whose create, restore or fork was
    /// refused after it was inserted: still `Creating` (its start failed and
    /// was cleaned up) or `Destroyed` (a fork child rolled back), never
    /// handed to a client. A refused start leaves no sandbox behind. Refuses
    /// (`invalid_state`) when the record is not in `state` or `state` is
    /// another state; the caller then keeps the record (e.g. as Failed).
    pub async fn discard(&self, id: &SandboxId, state: SandboxState) -> Result<()> {
        if !matches!(state, SandboxState::Creating | SandboxState::Destroyed) {
            return Err(Error::state(format!(
                "sandbox {id}: only a record being created or destroyed can be discarded"
            )));
        }
        let done = sqlx::query("DELETE FROM sandboxes WHERE id = $1 AND state = $2")
            .bind(id.as_str())
            .bind(state.as_str())
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!(
                "sandbox {id} is not {state}; not discarded"
            )));
        }
        Ok(())
    }

    pub async fn get(&self, id: &SandboxId) -> Result<SandboxRecord> {
        let row = sqlx::query(&format!("{SELECT_SANDBOX} WHERE id = $1"))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found(format!("sandbox {id}")))?;
        decode(&row)
    }

    /// A tenant's view: another tenant's sandbox is indistinguishable from a missing one.
    pub async fn get_for(&self, tenant: &TenantId, id: &SandboxId) -> Result<SandboxRecord> {
        let rec = self.get(id).await?;
        if &rec.tenant != tenant {
            return Err(Error::not_found(format!("sandbox {id}")));
        }
        Ok(rec)
    }

    /// Sandboxes, optionally of one tenant and/or in one state, oldest first.
    pub async fn list(
        &self,
        tenant: Option<&TenantId>,
        state: Option<SandboxState>,
    ) -> Result<Vec<SandboxRecord>> {
        let rows = sqlx::query(&format!(
            "{SELECT_SANDBOX} WHERE ($1 IS NULL OR tenant = $1) AND ($2 IS NULL OR state = $2)
             ORDER BY created_at_ms, id"
        ))
        .bind(tenant.map(|t| t.as_str().to_string()))
        .bind(state.map(|s| s.as_str()))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
    }

    /// Every sandbox not yet destroyed (for reconcile and the reaper).
    pub async fn list_live(&self) -> Result<Vec<SandboxRecord>> {
        let rows = sqlx::query(&format!(
            "{SELECT_SANDBOX} WHERE state != 'destroyed' ORDER BY created_at_ms"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
    }

    /// How many sandboxes not yet destroyed are in each (state, backend):
    /// counted by the database, not by reading every record.
    pub async fn count_live(&self) -> Result<Vec<(SandboxState, BackendKind, i64)>> {
        let rows = sqlx::query(
            "SELECT state, backend, COUNT(*) AS n FROM sandboxes
             WHERE state != 'destroyed' GROUP BY state, backend",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let s: String = r.try_get("state").map_err(db_err)?;
                let b: String = r.try_get("backend").map_err(db_err)?;
                let n: i64 = r.try_get("n").map_err(db_err)?;
                Ok((SandboxState::parse(&s)?, BackendKind::parse(&b)?, n))
            })
            .collect()
    }

    /// Move `id` from `from` to `to` (legal transitions only), applying `patch`
    /// in the same statement. Fails with `invalid_state` when the row is not
    /// in `from` any more (somebody else moved it).
    pub async fn transition(
        &self,
        id: &SandboxId,
        from: SandboxState,
        to: SandboxState,
        patch: Patch,
    ) -> Result<SandboxRecord> {
        self.transition_fenced(id, from, to, patch, None).await
    }

    /// [`Meta::transition`] for a leased sandbox: the write happens only if
    /// `fence` still holds the lease (same statement), else `invalid_state`
    /// saying the lease was lost. `None` writes unfenced.
    pub async fn transition_fenced(
        &self,
        id: &SandboxId,
        from: SandboxState,
        to: SandboxState,
        patch: Patch,
        fence: Option<&Fence>,
    ) -> Result<SandboxRecord> {
        from.check_transition(to)?;
        let mut rec = self.get(id).await?;
        if rec.state != from {
            return Err(Error::state(format!(
                "sandbox {id} is {}, expected {}",
                rec.state, from
            )));
        }
        if let Some(v) = patch.reason {
            rec.reason = v;
        }
        if let Some(v) = patch.running_ms {
            rec.running_ms = v;
        }
        if let Some(v) = patch.running_since_ms {
            rec.running_since_ms = v;
        }
        if let Some(v) = patch.paused_at_ms {
            rec.paused_at_ms = v;
        }
        if let Some(v) = patch.expires_at_ms {
            rec.expires_at_ms = v;
        }
        if let Some(v) = patch.pause_snapshot {
            rec.pause_snapshot = v;
        }
        if let Some(v) = patch.pause_kind {
            rec.pause_kind = v;
        }
        if let Some(v) = patch.checkpoint_snapshot {
            rec.checkpoint_snapshot = v;
        }
        if let Some(v) = patch.checkpoint_at_ms {
            rec.checkpoint_at_ms = v;
        }
        if let Some(v) = patch.recovered_from_snapshot {
            rec.recovered_from_snapshot = v;
        }
        if let Some(v) = patch.recovered_at_ms {
            rec.recovered_at_ms = v;
        }
        if let Some(v) = patch.progress_lost_ms {
            rec.progress_lost_ms = v;
        }
        let now = now_ms();
        let due = due::due_at(&SandboxRecord {
            state: to,
            updated_at_ms: now,
            ..rec.clone()
        });
        let done = sqlx::query(
            "UPDATE sandboxes SET state = $1, reason = $2, running_ms = $3, running_since_ms = $4,
             paused_at_ms = $5, expires_at_ms = $6, pause_snapshot = $7, pause_kind = $8,
             updated_at_ms = $9, checkpoint_snapshot = $12, checkpoint_at_ms = $13,
             recovered_from_snapshot = $14, recovered_at_ms = $15, progress_lost_ms = $16,
             due_at_ms = $19 WHERE id = $10 AND state = $11
             AND ($17 IS NULL OR EXISTS (SELECT 1 FROM leases l
                  WHERE l.sandbox = $10 AND l.node = $17 AND l.token = $18))",
        )
        .bind(to.as_str())
        .bind(&rec.reason)
        .bind(rec.running_ms)
        .bind(rec.running_since_ms)
        .bind(rec.paused_at_ms)
        .bind(rec.expires_at_ms)
        .bind(rec.pause_snapshot.as_ref().map(|s| s.as_str().to_string()))
        .bind(rec.pause_kind.map(|k| k.as_str()))
        .bind(now)
        .bind(id.as_str())
        .bind(from.as_str())
        .bind(
            rec.checkpoint_snapshot
                .as_ref()
                .map(|s| s.as_str().to_string()),
        )
        .bind(rec.checkpoint_at_ms)
        .bind(
            rec.recovered_from_snapshot
                .as_ref()
                .map(|s| s.as_str().to_string()),
        )
        .bind(rec.recovered_at_ms)
        .bind(rec.progress_lost_ms)
        .bind(fence.map(|f| f.node.clone()))
        .bind(fence.map(|f| f.token))
        .bind(due)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            if let Some(f) = fence {
                if !self.fence_holds(id, f).await? {
                    return Err(Error::state(format!(
                        "sandbox {id}: node {} no longer holds its lease (fencing token {} is stale)",
                        f.node, f.token
                    )));
                }
            }
            return Err(Error::state(format!(
                "sandbox {id} changed state concurrently"
            )));
        }
        rec.state = to;
        rec.updated_at_ms = now;
        Ok(rec)
    }

    /// Append to the audit log (hash-chained).
    pub async fn audit(&self, entry: NewAuditEntry) -> Result<AuditEntry> {
        audit::append(self, entry).await
    }

    pub async fn audit_list(
        &self,
        tenant: Option<&TenantId>,
        target: Option<&str>,
        limit: i64,
    ) -> Result<Vec<AuditEntry>> {
        audit::list(&self.pool, tenant, target, limit).await
    }

    pub async fn audit_verify(&self) -> Result<AuditVerification> {
        audit::verify(&self.pool).await
    }
}

fn opt_id<T>(row: &AnyRow, col: &str, parse: fn(&str) -> Result<T>) -> Result<Option<T>> {
    let v: Option<String> = row.try_get(col).map_err(db_err)?;
    v.as_deref().map(parse).transpose()
}

fn decode(row: &AnyRow) -> Result<SandboxRecord> {
    let get_s = |c: &str| -> Result<String> { row.try_get::<String, _>(c).map_err(db_err) };
    let manifest: Manifest = serde_json::from_str(&get_s("manifest")?)
        .map_err(|e| Error::internal(format!("stored manifest undecodable: {e}")))?;
    Ok(SandboxRecord {
        id: SandboxId::parse(&get_s("id")?)?,
        tenant: TenantId::parse(&get_s("tenant")?)?,
        backend: BackendKind::parse(&get_s("backend")?)?,
        state: SandboxState::parse(&get_s("state")?)?,
        reason: row.try_get("reason").map_err(db_err)?,
        manifest,
        manifest_digest: get_s("manifest_digest")?,
        created_at_ms: row.try_get("created_at_ms").map_err(db_err)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(db_err)?,
        running_ms: row.try_get("running_ms").map_err(db_err)?,
        running_since_ms: row.try_get("running_since_ms").map_err(db_err)?,
        paused_at_ms: row.try_get("paused_at_ms").map_err(db_err)?,
        expires_at_ms: row.try_get("expires_at_ms").map_err(db_err)?,
        pause_snapshot: opt_id(row, "pause_snapshot", SnapshotId::parse)?,
        pause_kind: opt_id(row, "pause_kind", PauseKind::parse)?,
        source_snapshot: opt_id(row, "source_snapshot", SnapshotId::parse)?,
        checkpoint_snapshot: opt_id(row, "checkpoint_snapshot", SnapshotId::parse)?,
        checkpoint_at_ms: row.try_get("checkpoint_at_ms").map_err(db_err)?,
        recovered_from_snapshot: opt_id(row, "recovered_from_snapshot", SnapshotId::parse)?,
        recovered_at_ms: row.try_get("recovered_at_ms").map_err(db_err)?,
        progress_lost_ms: row.try_get("progress_lost_ms").map_err(db_err)?,
        owner: row.try_get("lease_node").map_err(db_err)?,
    })
}

#[cfg(test)]
mod tests;
