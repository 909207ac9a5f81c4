//! Node lifecycle: drain and undrain.
//!
//! A draining node starts no sandbox: create, restore, fork, create from a
//! template and any resume here (explicit, or the transparent one of a
//! request for a paused sandbox) are refused with `unavailable` (503 with
//! `Retry-After`; nothing was done), and the daemon's `/readyz` answers
//! not ready, so a load balancer sends new requests to other nodes. Every
//! sandbox running here is paused to the snapshot store (a memory pause
//! where its policy keeps memory, never held in standby), which gives up
//! its lease: the next request for it, on any node, resumes it there from
//! the store. A sandbox busy with a request is paused once the request
//! ends, as long as the drain's time allows; a pause once begun is never
//! cut short (it would leave the sandbox to the next start's reconcile).
//! Undrain takes sandboxes again.
//!
//! The drain is a state of this daemon, not of the cluster's metadata: a
//! restarted daemon starts undrained (the point of a drain before a stop is
//! that nothing is left running to lose).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;
use tracing::{info, warn};

use stasis_core::{Error, ErrorCode, Result, SandboxState};
use stasis_meta::SandboxRecord;

use super::{Ctx, Manager};

/// What one drain did.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct DrainReport {
    /// Sandboxes paused to the store (their leases released).
    pub paused: Vec<String>,
    /// Sandboxes whose pause failed, with why (the pause settled them as
    /// it settles any failed pause: still running, or paused, or failed).
    pub failed: Vec<DrainFailure>,
    /// Sandboxes still running here when the drain's time ran out (busy
    /// with a request the whole time).
    pub left_running: Vec<String>,
    pub ms: u64,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DrainFailure {
    pub id: String,
    pub error: String,
}

/// Whether the node drains, and how many sandboxes still run here.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DrainStatus {
    pub draining: bool,
    pub running_here: usize,
}

impl Manager {
    /// Whether this node drains (starts no sandbox).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Refuse to start (`op`: create, resume, ...) a sandbox while draining.
    pub(super) fn refuse_if_draining(&self, op: &str) -> Result<()> {
        if self.is_draining() {
            return Err(Error::new(
                ErrorCode::Unavailable,
                format!(
                    "this node is draining and starts no sandbox ({op}); retry on another node"
                ),
            ));
        }
        Ok(())
    }

    /// Take sandboxes again after a drain.
    pub fn undrain(&self) {
        if self.draining.swap(false, Ordering::SeqCst) {
            info!("node undrained: taking sandboxes again");
        }
    }

    /// The running sandboxes this node holds: every running one on a
    /// single node; in a cluster, those whose lease it holds.
    async fn running_here(&self) -> Result<Vec<SandboxRecord>> {
        let running = self.meta.list(None, Some(SandboxState::Running)).await?;
        Ok(match self.cluster() {
            None => running,
            Some(c) => running
                .into_iter()
                .filter(|r| r.owner.as_deref() == Some(c.node_id()))
                .collect(),
        })
    }

    pub async fn drain_status(&self) -> Result<DrainStatus> {
        Ok(DrainStatus {
            draining: self.is_draining(),
            running_here: self.running_here().await?.len(),
        })
    }

    /// Drain: from now on start no sandbox, and pause every sandbox running
    /// here to the store within `within` (see the module's notes). Calling
    /// it again while draining pauses what is still running.
    pub async fn drain(&self, ctx_actor: &str, within: Duration) -> Result<DrainReport> {
        let t0 = Instant::now();
        let deadline = t0 + within;
        if !self.draining.swap(true, Ordering::SeqCst) {
            info!(within_ms = within.as_millis() as u64, "node draining");
        }
        let mut report = DrainReport::default();
        for rec in self.running_here().await? {
            let left = deadline.saturating_duration_since(Instant::now());
            let slot = self.slot(&rec.id);
            let Ok(guard) = tokio::time::timeout(left, slot.lock.clone().write_owned()).await
            else {
                report.left_running.push(rec.id.to_string());
                continue;
            };
            let ctx = Ctx {
                tenant: rec.tenant.clone(),
                actor: ctx_actor.to_string(),
            };
            let r = async {
                let rec = self.meta.get(&rec.id).await?;
                if rec.state != SandboxState::Running {
                    return Ok(false);
                }
                let rec = self.ensure_local_held(&ctx, rec).await?;
                let keep = rec.manifest.lifecycle.on_idle != stasis_core::OnIdle::PauseFilesystem;
                self.do_pause(&ctx, rec, keep, None, "drain", guard).await?;
                Ok::<_, Error>(true)
            }
            .await;
            match r {
                Ok(true) => report.paused.push(rec.id.to_string()),
                Ok(false) => {}
                Err(e) => {
                    warn!(sandbox = %rec.id, error = %e, "drain: pause failed");
                    report.failed.push(DrainFailure {
                        id: rec.id.to_string(),
                        error: e.to_string(),
                    });
                }
            }
        }
        report.ms = t0.elapsed().as_millis() as u64;
        info!(
            paused = report.paused.len(),
            failed = report.failed.len(),
            left_running = report.left_running.len(),
            ms = report.ms,
            "node drained"
        );
        Ok(report)
    }
}
