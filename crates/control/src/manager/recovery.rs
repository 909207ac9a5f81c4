//! Reconcile after a crash: at start, before serving, every sandbox a
//! killed daemon left behind is settled on what is true now. The decision
//! per sandbox is the pure [`decide`], from its recorded state and what its
//! backend found (unit-tested over every state and finding); the manager
//! then acts on it. An interrupted pause has its own settling
//! (`pause_recovery`), a sandbox whose compute is gone too (`lost`).

use serde::Serialize;
use tracing::warn;

use stasis_backend::Recovered;
use stasis_core::{now_ms, Result, SandboxId, SandboxState};
use stasis_meta::Patch;

use super::{Ctx, Manager};

/// What reconcile does with one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Ask the backend whether the sandbox's compute runs, then decide again.
    Probe,
    /// Creating: the daemon stopped mid-create; remove what was started, Failed.
    FailCreate,
    /// It runs: it stays Running, noted active.
    KeepRunning,
    /// Recorded Running but its compute is gone: settled like a lost sandbox.
    SettleLost,
    /// Pausing: settle the interrupted pause (it asks the backend itself).
    SettlePause,
    /// Resuming and it runs: the resume had finished; Running.
    FinishResume,
    /// Resuming and nothing runs: its snapshot is intact, Paused again.
    BackToPaused,
    /// Paused: stop compute that contradicts the record (`stop`), drop a
    /// stage a recorded pause left; Paused.
    TidyPaused { stop: bool },
    /// Destroying: finish it (idempotent).
    FinishDestroy,
    /// Failed: release whatever the backend still holds; Failed.
    ReleaseFailed,
    /// Destroyed: nothing to do.
    Nothing,
}

/// The decision for a sandbox in `state`, from what its backend found
/// (`None`: not asked yet). Only Running, Resuming and Paused depend on the
/// backend: for them, without a finding, the answer is [`Action::Probe`].
pub fn decide(state: SandboxState, found: Option<Recovered>) -> Action {
    use SandboxState as S;
    match (state, found) {
        (S::Creating, _) => Action::FailCreate,
        (S::Pausing, _) => Action::SettlePause,
        (S::Destroying, _) => Action::FinishDestroy,
        (S::Failed, _) => Action::ReleaseFailed,
        (S::Destroyed, _) => Action::Nothing,
        (S::Running | S::Resuming | S::Paused, None) => Action::Probe,
        (S::Running, Some(Recovered::Running)) => Action::KeepRunning,
        (S::Running, Some(Recovered::NotRunning)) => Action::SettleLost,
        (S::Resuming, Some(Recovered::Running)) => Action::FinishResume,
        (S::Resuming, Some(Recovered::NotRunning)) => Action::BackToPaused,
        (S::Paused, Some(r)) => Action::TidyPaused {
            stop: r == Recovered::Running,
        },
    }
}

#[derive(Debug, Default, Serialize)]
pub struct ReconcileReport {
    pub changed: Vec<(SandboxId, SandboxState, SandboxState)>,
    pub errors: Vec<(SandboxId, String)>,
    pub skipped: usize,
}

impl Manager {
    /// Resolve what a killed daemon left behind. Called once at start, before serving.
    pub async fn reconcile(&self) -> Result<ReconcileReport> {
        let mut report = ReconcileReport::default();
        let live = self.claim_at_start(self.meta.list_live().await?).await?;
        for rec in &live {
            let ctx = Ctx::system(rec.tenant.clone());
            let spec = self.spec(rec);
            let backend = match self.backend(rec.backend) {
                Ok(b) => b.clone(),
                Err(_) => {
                    report.skipped += 1;
                    continue;
                }
            };
            let before = rec.state;
            let outcome: Result<SandboxState> = async {
                let mut action = decide(rec.state, None);
                if action == Action::Probe {
                    action = decide(rec.state, Some(backend.recover(&spec).await?));
                }
                Ok(match action {
                    Action::FailCreate => {
                        let _ = backend.destroy(&rec.id, &spec.dir).await;
                        let _ = tokio::fs::remove_dir_all(&spec.dir).await;
                        self.transition(
                            &rec.id,
                            SandboxState::Creating,
                            SandboxState::Failed,
                            Patch::reason("daemon stopped while the sandbox was being created"),
                        )
                        .await?
                        .state
                    }
                    Action::KeepRunning => {
                        self.touch(&rec.id);
                        SandboxState::Running
                    }
                    Action::SettleLost => {
                        self.settle_lost(rec, SandboxState::Running, "daemon restarted")
                            .await?
                    }
                    Action::SettlePause => {
                        self.settle_pause(rec, &backend, &spec, "daemon stopped during a pause")
                            .await?
                            .0
                    }
                    Action::FinishResume => {
                        self.touch(&rec.id);
                        self.transition(
                            &rec.id,
                            SandboxState::Resuming,
                            SandboxState::Running,
                            Patch {
                                running_since_ms: Some(Some(now_ms())),
                                paused_at_ms: Some(None),
                                expires_at_ms: Some(None),
                                ..Default::default()
                            },
                        )
                        .await?
                        .state
                    }
                    // Its snapshot is intact: paused again, the next request resumes it.
                    Action::BackToPaused => {
                        self.transition(
                            &rec.id,
                            SandboxState::Resuming,
                            SandboxState::Paused,
                            Patch::reason("daemon stopped during a resume; still paused"),
                        )
                        .await?
                        .state
                    }
                    Action::TidyPaused { stop } => {
                        // Nothing should run: a process-backend sandbox paused
                        // with memory is still frozen under its supervisor
                        // (recover reports it not running; the next resume
                        // thaws it). A running one contradicts the record.
                        if stop {
                            let _ = backend.destroy(&rec.id, &spec.dir).await;
                        }
                        self.tidy_paused(rec, &spec).await;
                        self.seed_local(rec);
                        SandboxState::Paused
                    }
                    Action::FinishDestroy => self.finish_destroy(rec.clone()).await?.state,
                    Action::ReleaseFailed => {
                        let _ = backend.destroy(&rec.id, &spec.dir).await;
                        SandboxState::Failed
                    }
                    Action::Nothing => SandboxState::Destroyed,
                    // decide never answers Probe to a finding.
                    Action::Probe => rec.state,
                })
            }
            .await;
            match outcome {
                Ok(after) => {
                    if after != before {
                        report.changed.push((rec.id.clone(), before, after));
                        self.audit(
                            &ctx,
                            "reconcile",
                            rec.id.as_str(),
                            serde_json::json!({"from": before, "to": after}),
                        )
                        .await;
                    }
                }
                Err(e) => {
                    warn!(sandbox = %rec.id, error = %e, "reconcile failed");
                    report.errors.push((rec.id.clone(), e.message));
                }
            }
        }
        let known: Vec<SandboxId> = self
            .meta
            .list_live()
            .await?
            .into_iter()
            .filter(|r| r.state != SandboxState::Failed)
            .map(|r| r.id)
            .collect();
        for b in self.backends.values() {
            if let Err(e) = b.cleanup_orphans(&known).await {
                warn!(backend = %b.kind(), error = %e, "orphan cleanup failed");
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests;
