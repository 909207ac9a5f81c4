//! Runtime changes to a sandbox's stored record outside a state change: its
//! manifest (a new network policy), and a paused sandbox's pause kind when
//! its node lets go of the memory it held.

use stasis_core::{now_ms, Error, Manifest, Result, SandboxId};

use crate::{db_err, Meta, PauseKind, SandboxRecord};

impl Meta {
    /// Replace the stored manifest of a sandbox that is not destroyed (a
    /// runtime change such as a new network policy); its digest follows.
    pub async fn set_manifest(&self, id: &SandboxId, manifest: &Manifest) -> Result<SandboxRecord> {
        let done = sqlx::query(
            "UPDATE sandboxes SET manifest = $1, manifest_digest = $2, updated_at_ms = $3
             WHERE id = $4 AND state != 'destroyed'",
        )
        .bind(serde_json::to_string(manifest)?)
        .bind(manifest.digest())
        .bind(now_ms())
        .bind(id.as_str())
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!("sandbox {id} is destroyed")));
        }
        self.get(id).await
    }

    /// A paused sandbox's memory is gone (its node ended the frozen
    /// processes that held it): its pause becomes `kind` (filesystem-only)
    /// with `reason`. Only while it is still paused; `invalid_state` else.
    pub async fn set_pause_kind(
        &self,
        id: &SandboxId,
        kind: PauseKind,
        reason: &str,
    ) -> Result<SandboxRecord> {
        let done = sqlx::query(
            "UPDATE sandboxes SET pause_kind = $1, reason = $2, updated_at_ms = $3
             WHERE id = $4 AND state = 'paused'",
        )
        .bind(kind.as_str())
        .bind(reason)
        .bind(now_ms())
        .bind(id.as_str())
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!("sandbox {id} is not paused")));
        }
        self.get(id).await
    }
}
