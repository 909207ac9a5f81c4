//! Metadata: sandboxes with their persisted lifecycle state, and the
//! hash-chained audit log. SQLite (WAL) is the embedded default.
//!
//! Every state change is a compare-and-set on the row's current state
//! (`UPDATE ... WHERE state = ?`), checked against the lifecycle state
//! machine, so two operations racing on one sandbox cannot both win.

use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use stasis_core::{
    now_ms, BackendKind, Error, Manifest, Result, SandboxId, SandboxState, SnapshotId, TenantId,
};

mod audit;
pub mod runs;
pub mod tenants;
pub use audit::{AuditEntry, AuditVerification, NewAuditEntry};
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
}

#[derive(Clone)]
pub struct Meta {
    pool: SqlitePool,
}

fn db_err(e: sqlx::Error) -> Error {
    Error::internal(format!("metadata: {e}"))
}

impl Meta {
    /// Open (creating if needed) the SQLite database at `path` and run migrations.
    pub async fn open(path: &Path) -> Result<Self> {
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .map_err(db_err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await
            .map_err(db_err)?;
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| Error::internal(format!("metadata migration: {e}")))?;
        Ok(Meta { pool })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
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
             created_at_ms, updated_at_ms, source_snapshot) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

    pub async fn get(&self, id: &SandboxId) -> Result<SandboxRecord> {
        let row = sqlx::query("SELECT * FROM sandboxes WHERE id = ?")
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
        let rows = sqlx::query(
            "SELECT * FROM sandboxes WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR state = ?2)
             ORDER BY created_at_ms, id",
        )
        .bind(tenant.map(|t| t.as_str().to_string()))
        .bind(state.map(|s| s.as_str()))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
    }

    /// Every sandbox not yet destroyed (for reconcile and the reaper).
    pub async fn list_live(&self) -> Result<Vec<SandboxRecord>> {
        let rows = sqlx::query(
            "SELECT * FROM sandboxes WHERE state != 'destroyed' ORDER BY created_at_ms",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
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
        let now = now_ms();
        let done = sqlx::query(
            "UPDATE sandboxes SET state = ?, reason = ?, running_ms = ?, running_since_ms = ?,
             paused_at_ms = ?, expires_at_ms = ?, pause_snapshot = ?, pause_kind = ?, updated_at_ms = ?
             WHERE id = ? AND state = ?",
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
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
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
        audit::append(&self.pool, entry).await
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

fn opt_id<T>(
    row: &sqlx::sqlite::SqliteRow,
    col: &str,
    parse: fn(&str) -> Result<T>,
) -> Result<Option<T>> {
    let v: Option<String> = row.try_get(col).map_err(db_err)?;
    v.as_deref().map(parse).transpose()
}

fn decode(row: &sqlx::sqlite::SqliteRow) -> Result<SandboxRecord> {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn meta() -> (tempfile::TempDir, Meta) {
        let dir = tempfile::tempdir().unwrap();
        let m = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        (dir, m)
    }

    #[tokio::test]
    async fn transitions_are_compare_and_set() {
        let (_d, m) = meta().await;
        let id = SandboxId::generate();
        let t = TenantId::parse("t-a").unwrap();
        let rec = m
            .insert_sandbox(&id, &t, &Manifest::default(), BackendKind::Process, None)
            .await
            .unwrap();
        assert_eq!(rec.state, SandboxState::Creating);
        m.transition(
            &id,
            SandboxState::Creating,
            SandboxState::Running,
            Patch::default(),
        )
        .await
        .unwrap();
        // A second racer that still believes the sandbox is Creating loses.
        let e = m
            .transition(
                &id,
                SandboxState::Creating,
                SandboxState::Running,
                Patch::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, stasis_core::ErrorCode::InvalidState);
        // Illegal transitions are refused before touching the row.
        let e = m
            .transition(
                &id,
                SandboxState::Running,
                SandboxState::Paused,
                Patch::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, stasis_core::ErrorCode::InvalidState);
        let snap = SnapshotId::generate();
        let rec = m
            .transition(
                &id,
                SandboxState::Running,
                SandboxState::Pausing,
                Patch {
                    pause_snapshot: Some(Some(snap.clone())),
                    pause_kind: Some(Some(PauseKind::Memory)),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(rec, m.get(&id).await.unwrap());
        assert_eq!(rec.pause_snapshot, Some(snap));
    }

    #[tokio::test]
    async fn other_tenants_see_not_found() {
        let (_d, m) = meta().await;
        let id = SandboxId::generate();
        let a = TenantId::parse("t-a").unwrap();
        let b = TenantId::parse("t-b").unwrap();
        m.insert_sandbox(&id, &a, &Manifest::default(), BackendKind::Process, None)
            .await
            .unwrap();
        assert!(m.get_for(&a, &id).await.is_ok());
        let e = m.get_for(&b, &id).await.unwrap_err();
        assert_eq!(e.code, stasis_core::ErrorCode::NotFound);
        assert_eq!(m.list(Some(&b), None).await.unwrap().len(), 0);
        assert_eq!(
            m.list(Some(&a), Some(SandboxState::Creating))
                .await
                .unwrap()
                .len(),
            1
        );
    }
}
