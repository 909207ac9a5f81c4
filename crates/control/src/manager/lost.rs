//! A sandbox whose compute is gone (found at a restart, or lost during a
//! request, or in a pause that cannot be finished): it becomes a
//! filesystem-only pause when its writable layer survives on the host, else
//! Failed.

use stasis_core::{now_ms, BackendKind, Result, SandboxId, SandboxState};
use stasis_meta::{Patch, PauseKind, SandboxRecord};

use super::{Ctx, Manager};

impl Manager {
    /// A sandbox whose compute is gone (`why`: a daemon restart, a dead VM).
    /// If its writable layer survives on disk (process backend) it becomes a
    /// filesystem-only pause; otherwise it failed (with its last pause
    /// snapshot, if any, named).
    pub(super) async fn settle_lost(
        &self,
        rec: &SandboxRecord,
        from: SandboxState,
        why: &str,
    ) -> Result<SandboxState> {
        let now = now_ms();
        // Running -> Paused goes through Pausing like any pause, so the state
        // machine needs no crash-only shortcut.
        let from = if from == SandboxState::Running && rec.backend == BackendKind::Process {
            self.transition(
                &rec.id,
                SandboxState::Running,
                SandboxState::Pausing,
                Patch::default(),
            )
            .await?;
            SandboxState::Pausing
        } else {
            from
        };
        let to_state = if rec.backend == BackendKind::Process {
            let rec2 = self
                .transition(
                    &rec.id,
                    from,
                    SandboxState::Paused,
                    Patch {
                        reason: Some(Some(format!("{why}: processes were lost, files kept"))),
                        running_ms: Some(rec.running_time_ms(now)),
                        running_since_ms: Some(None),
                        paused_at_ms: Some(Some(now)),
                        expires_at_ms: Some(Some(rec.manifest.lifecycle.paused_expiry_ms(now))),
                        // Resume rebuilds from the writable layer on disk.
                        pause_snapshot: Some(None),
                        pause_kind: Some(Some(PauseKind::Filesystem)),
                        ..Default::default()
                    },
                )
                .await?;
            if let Some(old) = &rec.pause_snapshot {
                let _ = self.snapshots.delete(&rec.tenant, old).await;
            }
            rec2.state
        } else {
            self.transition(
                &rec.id,
                from,
                SandboxState::Failed,
                Patch::reason(format!(
                    "{why}: its VM is gone{}",
                    rec.pause_snapshot
                        .as_ref()
                        .map(|s| format!("; last pause snapshot {s} can be restored"))
                        .unwrap_or_default()
                )),
            )
            .await?
            .state
        };
        Ok(to_state)
    }
}

impl Manager {
    /// A paused sandbox's node ended the frozen processes that held its
    /// memory (`why`: its frozen window ended, it was evicted): the pause is
    /// filesystem-only from now on, which its record, the audit
    /// (`pause_downgraded`, saying what was lost) and the metrics show; its
    /// next resume starts it afresh from its files. Returns the record, or
    /// None when it is not paused any more (a resume got there first).
    pub(super) async fn pause_downgraded(
        &self,
        id: &SandboxId,
        why: &str,
    ) -> Option<SandboxRecord> {
        let reason = format!(
            "{why}: its processes and their memory were ended on the node, its files are kept"
        );
        match self
            .meta
            .set_pause_kind(id, PauseKind::Filesystem, &reason)
            .await
        {
            Ok(rec) => {
                self.metrics.reaped("pause_downgraded");
                let ctx = Ctx::system(rec.tenant.clone());
                let detail = serde_json::json!({
                    "why": why,
                    "pause_kind": PauseKind::Filesystem,
                    "lost": "processes and their memory (sessions, background jobs)",
                    "kept": "files",
                });
                self.audit(&ctx, "pause_downgraded", id.as_str(), detail)
                    .await;
                Some(rec)
            }
            Err(e) => {
                tracing::info!(sandbox = %id, "pause kind not changed: {}", e.message);
                None
            }
        }
    }
}
