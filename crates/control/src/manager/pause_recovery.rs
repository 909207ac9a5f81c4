//! A pause that did not finish (the daemon was killed at any instant of it,
//! or the backend failed after the sandbox's compute had stopped): find out
//! what is true now and settle the sandbox on it.
//!
//! The pause persists, in order: `Running -> Pausing` (meta); the backend's
//! artifacts in `pause-stage/` (for a microVM: memory state, then meta.json
//! with its blake3 while QEMU still holds the state, then QEMU quits, then
//! the disk moves in); `pause.json` naming the snapshot id the upload will
//! use; the snapshot in the store (its record is written last); `Pausing ->
//! Paused` (meta); then the stage and the superseded snapshot go. Whatever
//! step it stopped at, [`decide`] picks the one truthful outcome:
//!
//! 1. the compute still runs (QEMU alive, stopped or not: continued) -> Running;
//! 2. (process backend) its writable layer is on the host -> Paused, files kept;
//! 3. the snapshot named in `pause.json` is in the store -> Paused on it;
//! 4. the stage is complete and verifies (finished by the backend if only
//!    the disk move was left) -> upload it -> Paused on it;
//! 5. an earlier snapshot (the previous pause, or a newer checkpoint) ->
//!    Paused on it, with the progress lost since it recorded;
//! 6. nothing restorable -> Failed, saying so.

use std::path::Path;

use serde::{Deserialize, Serialize};
use stasis_backend::{failpoint, ArtifactKind, Backend, Recovered, SandboxSpec};
use stasis_core::{now_ms, BackendKind, Result, SandboxState, SnapshotId};
use stasis_meta::{Patch, PauseKind, SandboxRecord};
use tracing::{info, warn};

use super::Manager;
use crate::snapshots::SnapshotKind;

/// The pause's staging directory inside the sandbox dir.
pub(super) const STAGE: &str = "pause-stage";
/// In the stage: what the upload is about to do (written before it starts).
const INTENT: &str = "pause.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Intent {
    /// The id the snapshot gets in the store.
    pub snapshot: SnapshotId,
    pub kind: PauseKind,
    /// The pause snapshot this one supersedes (deleted once it is recorded).
    pub previous: Option<SnapshotId>,
}

pub(super) fn write_intent(stage: &Path, intent: &Intent) -> Result<()> {
    let tmp = stage.join(".pause.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(intent)?)?;
    std::fs::rename(&tmp, stage.join(INTENT))?;
    Ok(())
}

pub(super) fn read_intent(stage: &Path) -> Option<Intent> {
    serde_json::from_slice(&std::fs::read(stage.join(INTENT)).ok()?).ok()
}

/// An earlier snapshot the sandbox can be resumed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Earlier {
    pub id: SnapshotId,
    pub at_ms: i64,
    /// A periodic checkpoint rather than the previous pause.
    pub checkpoint: bool,
}

/// What was found of a sandbox whose pause did not finish.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The backend reattached to it and it runs (a stopped QEMU was continued).
    pub compute_running: bool,
    /// Its writable filesystem layer is on this host (process backend).
    pub files_kept: bool,
    /// The snapshot `pause.json` names is in the store.
    pub stored: Option<SnapshotId>,
    /// The stage is complete and verifies.
    pub stage_complete: bool,
    /// The newest earlier snapshot still in the store.
    pub earlier: Option<Earlier>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Running again; the stage is dropped.
    Continue,
    /// Paused, files kept on the host, processes lost.
    KeepFiles,
    /// The upload had completed: record it.
    Record(SnapshotId),
    /// Upload the stage, then record it.
    Upload,
    /// Paused on an earlier snapshot; what ran since it is lost.
    Fallback(Earlier),
    /// Nothing restorable is left.
    Fail,
}

/// The decision, from what was found alone (see the module docs).
pub fn decide(f: &Found) -> Action {
    if f.compute_running {
        Action::Continue
    } else if f.files_kept {
        Action::KeepFiles
    } else if let Some(s) = &f.stored {
        Action::Record(s.clone())
    } else if f.stage_complete {
        Action::Upload
    } else if let Some(e) = &f.earlier {
        Action::Fallback(e.clone())
    } else {
        Action::Fail
    }
}

/// The newer of the previous pause snapshot and the last checkpoint.
pub fn newest_earlier(
    pause: Option<(SnapshotId, i64)>,
    checkpoint: Option<(SnapshotId, i64)>,
) -> Option<Earlier> {
    let p = pause.map(|(id, at_ms)| Earlier {
        id,
        at_ms,
        checkpoint: false,
    });
    let c = checkpoint.map(|(id, at_ms)| Earlier {
        id,
        at_ms,
        checkpoint: true,
    });
    match (p, c) {
        (Some(p), Some(c)) => Some(if c.at_ms > p.at_ms { c } else { p }),
        (p, c) => p.or(c),
    }
}

/// Running time lost by going back to a snapshot taken at `snap_at_ms`: the
/// sandbox ran from the later of that and its last start (`running_since`)
/// until it was stopped for the pause (`stopped_at_ms`).
pub fn progress_lost_ms(stopped_at_ms: i64, running_since_ms: Option<i64>, snap_at_ms: i64) -> i64 {
    let from = running_since_ms.map_or(snap_at_ms, |r| r.max(snap_at_ms));
    (stopped_at_ms - from).max(0)
}

/// The patch of any `Pausing -> Paused`.
pub(super) fn paused_patch(
    rec: &SandboxRecord,
    snap: Option<SnapshotId>,
    kind: PauseKind,
    reason: Option<String>,
) -> Patch {
    let now = now_ms();
    Patch {
        reason: Some(reason),
        running_ms: Some(rec.running_time_ms(now)),
        running_since_ms: Some(None),
        paused_at_ms: Some(Some(now)),
        expires_at_ms: Some(Some(rec.manifest.lifecycle.paused_expiry_ms(now))),
        pause_snapshot: Some(snap),
        pause_kind: Some(Some(kind)),
        ..Default::default()
    }
}

impl Manager {
    /// Settle a sandbox left in `Pausing` (`why`: what interrupted the
    /// pause). Asks the backend whether it still runs, looks at the stage and
    /// the store, and acts on [`decide`]. Returns the new state and why.
    pub(super) async fn settle_pause(
        &self,
        rec: &SandboxRecord,
        backend: &std::sync::Arc<dyn Backend>,
        spec: &SandboxSpec,
        why: &str,
    ) -> Result<(SandboxState, String)> {
        let stage = spec.dir.join(STAGE);
        let compute_running = backend.recover(spec).await? == Recovered::Running;
        let mut found = Found {
            compute_running,
            ..Default::default()
        };
        let intent = read_intent(&stage);
        let mut artifacts = None;
        if !compute_running {
            let left = backend.pause_leftovers(spec, &stage).await?;
            found.files_kept = left.files_kept;
            found.stage_complete = left.artifacts.is_some();
            artifacts = left.artifacts;
            if let Some(i) = &intent {
                if self.snapshots.get(&rec.tenant, &i.snapshot).await.is_ok() {
                    found.stored = Some(i.snapshot.clone());
                }
            }
            found.earlier = self.earlier_snapshot(rec).await;
        }
        let action = decide(&found);
        info!(sandbox = %rec.id, ?found, ?action, "settling an interrupted pause");
        let drop_stage = || async {
            let _ = tokio::fs::remove_dir_all(&stage).await;
        };
        match action {
            Action::Continue => {
                self.touch(&rec.id);
                let reason = format!("{why}; pause abandoned, the sandbox kept running");
                self.transition(
                    &rec.id,
                    SandboxState::Pausing,
                    SandboxState::Running,
                    Patch::reason(reason.clone()),
                )
                .await?;
                drop_stage().await;
                Ok((SandboxState::Running, reason))
            }
            Action::KeepFiles => {
                let state = self.settle_lost(rec, SandboxState::Pausing, why).await?;
                if let Some(s) = &found.stored {
                    let _ = self.snapshots.delete(&rec.tenant, s).await;
                }
                drop_stage().await;
                Ok((state, format!("{why}: processes were lost, files kept")))
            }
            Action::Record(snap) => {
                let kind = intent.as_ref().map_or(PauseKind::Memory, |i| i.kind);
                let reason = format!("{why}; the pause had completed (snapshot {snap})");
                self.record_pause(rec, &snap, kind, intent.as_ref(), Some(&reason))
                    .await?;
                drop_stage().await;
                Ok((SandboxState::Paused, reason))
            }
            Action::Upload => {
                let arts = artifacts.unwrap_or_default();
                let kind = if arts.iter().any(|a| a.kind == ArtifactKind::Memory) {
                    PauseKind::Memory
                } else {
                    PauseKind::Filesystem
                };
                let id = intent
                    .as_ref()
                    .map_or_else(SnapshotId::generate, |i| i.snapshot.clone());
                let snap = self
                    .snapshots
                    .put_as(id, rec, SnapshotKind::Pause, &stage, &arts, None, "system")
                    .await
                    .map_err(|e| {
                        e.context(format!(
                            "{why}: the pause's state is complete in {} but could not be stored",
                            stage.display()
                        ))
                    })?;
                let reason = format!("{why}; the pause was finished (snapshot {})", snap.id);
                self.record_pause(rec, &snap.id, kind, intent.as_ref(), Some(&reason))
                    .await?;
                drop_stage().await;
                Ok((SandboxState::Paused, reason))
            }
            Action::Fallback(e) => {
                let lost = progress_lost_ms(rec.updated_at_ms, rec.running_since_ms, e.at_ms);
                let reason = format!(
                    "{why}: its state was not saved completely; paused on the earlier {} {}, \
                     {lost} ms of progress lost",
                    if e.checkpoint {
                        "checkpoint"
                    } else {
                        "pause snapshot"
                    },
                    e.id
                );
                let kind = if e.checkpoint {
                    if rec.backend == BackendKind::Microvm {
                        PauseKind::Memory
                    } else {
                        PauseKind::Filesystem
                    }
                } else {
                    rec.pause_kind.unwrap_or(PauseKind::Memory)
                };
                let mut patch = paused_patch(rec, Some(e.id.clone()), kind, Some(reason.clone()));
                patch.recovered_from_snapshot = Some(Some(e.id.clone()));
                patch.recovered_at_ms = Some(Some(now_ms()));
                patch.progress_lost_ms = Some(Some(lost));
                if e.checkpoint {
                    // The checkpoint becomes the pause snapshot (one owner).
                    patch.checkpoint_snapshot = Some(None);
                    patch.checkpoint_at_ms = Some(None);
                }
                self.transition(&rec.id, SandboxState::Pausing, SandboxState::Paused, patch)
                    .await?;
                if e.checkpoint {
                    if let Some(old) = rec.pause_snapshot.as_ref().filter(|o| **o != e.id) {
                        let _ = self.snapshots.delete(&rec.tenant, old).await;
                    }
                }
                if let Some(s) = &found.stored {
                    let _ = self.snapshots.delete(&rec.tenant, s).await;
                }
                let _ = backend.destroy(&rec.id, &spec.dir).await;
                drop_stage().await;
                Ok((SandboxState::Paused, reason))
            }
            Action::Fail => {
                let reason = format!(
                    "{why}: the sandbox stopped before its state was saved completely and no \
                     earlier snapshot exists to resume from{}",
                    if stage.exists() {
                        format!(" (what was saved is kept in {})", stage.display())
                    } else {
                        String::new()
                    }
                );
                self.transition(
                    &rec.id,
                    SandboxState::Pausing,
                    SandboxState::Failed,
                    Patch::reason(reason.clone()),
                )
                .await?;
                Ok((SandboxState::Failed, reason))
            }
        }
    }

    /// The newest snapshot of the sandbox that is still in the store.
    async fn earlier_snapshot(&self, rec: &SandboxRecord) -> Option<Earlier> {
        let mut pause = None;
        if let Some(s) = &rec.pause_snapshot {
            if let Ok(info) = self.snapshots.get(&rec.tenant, s).await {
                pause = Some((s.clone(), info.created_at_ms));
            }
        }
        let mut checkpoint = None;
        if let Some(s) = &rec.checkpoint_snapshot {
            if let Ok(info) = self.snapshots.get(&rec.tenant, s).await {
                checkpoint = Some((s.clone(), info.created_at_ms));
            }
        }
        newest_earlier(pause, checkpoint)
    }

    /// `Pausing -> Paused` on a stored pause snapshot, then drop the one it
    /// supersedes.
    pub(super) async fn record_pause(
        &self,
        rec: &SandboxRecord,
        snap: &SnapshotId,
        kind: PauseKind,
        intent: Option<&Intent>,
        reason: Option<&str>,
    ) -> Result<SandboxRecord> {
        let out = self
            .transition(
                &rec.id,
                SandboxState::Pausing,
                SandboxState::Paused,
                paused_patch(rec, Some(snap.clone()), kind, reason.map(str::to_string)),
            )
            .await?;
        failpoint::hit("pause.recorded");
        if let Some(c) = self.cluster() {
            c.note_local_pause(&rec.id, Some(snap));
        }
        // What the backend kept of this pause on the host is that snapshot.
        if let Ok(b) = self.backend(rec.backend) {
            b.pause_stored(&self.spec(rec), snap).await;
        }
        // ... and counts toward the node's cap on local pause state.
        self.note_local(&out, snap);
        let old = intent
            .and_then(|i| i.previous.clone())
            .or_else(|| rec.pause_snapshot.clone());
        if let Some(old) = old.filter(|o| o != snap) {
            if let Err(e) = self.snapshots.delete(&rec.tenant, &old).await {
                if e.code != stasis_core::ErrorCode::NotFound {
                    warn!(sandbox = %rec.id, snapshot = %old, error = %e, "old pause snapshot not deleted");
                }
            }
        }
        Ok(out)
    }

    /// A sandbox found `Paused` at start: a stage left by a pause killed
    /// after it was recorded is dropped, with the snapshot it superseded.
    pub(super) async fn tidy_paused(&self, rec: &SandboxRecord, spec: &SandboxSpec) {
        let stage = spec.dir.join(STAGE);
        if !stage.exists() {
            return;
        }
        if let Some(i) = read_intent(&stage) {
            if rec.pause_snapshot.as_ref() == Some(&i.snapshot) {
                if let Some(old) = i.previous.filter(|o| *o != i.snapshot) {
                    let _ = self.snapshots.delete(&rec.tenant, &old).await;
                }
            }
        }
        let _ = tokio::fs::remove_dir_all(&stage).await;
    }
}

#[cfg(test)]
mod tests;
