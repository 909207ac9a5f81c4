//! Cluster leasing, from the manager's side: a node takes a sandbox's lease
//! before it starts or resumes it, serves a running sandbox only under its
//! own lease, takes over (from the newest snapshot, same id) a sandbox whose
//! node died, claims at start what it ran before a restart, and heartbeats.
//! The decisions are the pure functions at the top (unit-tested); the
//! lease rows themselves are `stasis_meta::lease`, the node's view of them
//! `crate::cluster`.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use stasis_core::{now_ms, Error, ErrorCode, Result, SandboxId, SandboxState};
use stasis_meta::lease::Acquire;
use stasis_meta::{Patch, SandboxRecord};

use super::pause_recovery::newest_earlier;
use super::stage::{staged, Cleanup, Prep};
use super::{elapsed_ms, Ctx, Manager};

/// The answer to a request for a sandbox whose lease another live node
/// holds (`node`): it runs there.
fn held_elsewhere(id: &SandboxId, node: Option<String>) -> Error {
    Error::new(
        ErrorCode::Busy,
        format!(
            "sandbox {id} runs on node {}; try again",
            node.unwrap_or_default()
        ),
    )
}

/// Whether a sandbox must be taken over before it is served here: it should
/// be running (or between running and paused) and this node does not hold
/// its lease. Paused, failed or gone sandboxes belong to no node.
pub fn must_take_over(state: SandboxState, held_here: bool) -> bool {
    matches!(
        state,
        SandboxState::Running | SandboxState::Pausing | SandboxState::Resuming
    ) && !held_here
}

/// The last moment a sandbox is known to have run on a dead node: its
/// node's last heartbeat or the sandbox's last audited operation, whichever
/// is later (its record's last update when neither is known, or later).
pub fn last_alive_ms(
    heartbeat_ms: Option<i64>,
    last_op_ms: Option<i64>,
    updated_at_ms: i64,
) -> i64 {
    heartbeat_ms
        .into_iter()
        .chain(last_op_ms)
        .chain(Some(updated_at_ms))
        .max()
        .unwrap_or(updated_at_ms)
}

/// The state writes that bring a sandbox being taken over to `Resuming`:
/// Pausing -> Running -> Resuming; Running -> Resuming; Resuming stays.
pub fn to_resuming(state: SandboxState) -> Vec<(SandboxState, SandboxState)> {
    match state {
        SandboxState::Pausing => vec![
            (SandboxState::Pausing, SandboxState::Running),
            (SandboxState::Running, SandboxState::Resuming),
        ],
        SandboxState::Running => vec![(SandboxState::Running, SandboxState::Resuming)],
        _ => vec![],
    }
}

/// Running time lost by a takeover: from its snapshot to the last moment the
/// sandbox is known to have run (a lower bound: it may have run until its
/// lease expired).
pub fn takeover_lost_ms(last_alive_ms: i64, snap_at_ms: i64) -> i64 {
    (last_alive_ms - snap_at_ms).max(0)
}

/// What a node restarting in a cluster does with one live sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Not this node's: its directory is elsewhere.
    Skip,
    /// Reconciled here without a lease (paused and failed sandboxes run nowhere).
    Keep,
    /// Reconciled here once this node takes its lease (none if another node holds it).
    Lease,
}

/// Whether a live sandbox ran here (`dir_here`: its directory is on this
/// node) and needs its lease before it is touched.
pub fn claim(state: SandboxState, dir_here: bool) -> Claim {
    if !dir_here {
        Claim::Skip
    } else if state == SandboxState::Paused || state == SandboxState::Failed {
        Claim::Keep
    } else {
        Claim::Lease
    }
}

/// Whether a lease just acquired only continues this node's own: the row
/// it replaced (`previous`) was this node's under the very fence it still
/// held (`unconfirmed`), so no other node ran the sandbox in between.
pub fn still_ours(
    unconfirmed: Option<&stasis_meta::Fence>,
    previous: Option<&stasis_meta::lease::Lease>,
    node: &str,
) -> bool {
    match (unconfirmed, previous) {
        (Some(f), Some(p)) => p.node.as_deref() == Some(node) && p.token == f.token,
        _ => false,
    }
}

/// How often a node heartbeats: a third of its lease, at least every 100 ms.
pub fn heartbeat_every(lease_ms: i64) -> Duration {
    Duration::from_millis((lease_ms / 3).max(100) as u64)
}

impl Manager {
    /// In a cluster: take the lease of a sandbox this node starts (create,
    /// restore) or resumes. Fails when another live node holds it.
    pub(super) async fn lease_for_start(&self, id: &SandboxId) -> Result<()> {
        let Some(c) = self.cluster() else {
            return Ok(());
        };
        if c.serves(id) {
            return Ok(());
        }
        match self
            .meta
            .lease_acquire(id, c.node_id(), c.lease_ms())
            .await?
        {
            Acquire::Acquired { fence, .. } => {
                c.hold(id, fence);
                Ok(())
            }
            Acquire::Held(l) => Err(held_elsewhere(id, l.node)),
        }
    }

    /// In a cluster, whether `rec` must be taken over before this node serves
    /// it (see [`must_take_over`]).
    fn takeover_needed(&self, rec: &SandboxRecord) -> bool {
        self.cluster()
            .is_some_and(|c| must_take_over(rec.state, c.serves(&rec.id)))
    }

    /// [`Manager::ensure_local_held`] for a caller that does not hold the
    /// sandbox's slot (a run checking its sandbox before it records a tool
    /// call): a takeover happens with the slot held exclusively, as every
    /// lifecycle operation does, so that a request this node serves
    /// meanwhile (an exec, one forwarded here by another node once this
    /// node holds the lease) waits for the restored sandbox instead of
    /// reaching a backend that does not have it yet.
    pub(crate) async fn ensure_local(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
    ) -> Result<SandboxRecord> {
        if !self.takeover_needed(&rec) {
            return Ok(rec);
        }
        let _guard = self.slot(&rec.id).lock.clone().write_owned().await;
        // Another request may have taken it over while this one waited.
        let rec = self.meta.get(&rec.id).await?;
        self.ensure_local_held(ctx, rec).await
    }

    /// In a cluster, before serving a sandbox that should be running: it
    /// must run here. If its lease is held by another live node, refuse
    /// (the request should have been forwarded); if the lease expired (its
    /// node died), take it over from its newest snapshot. The caller holds
    /// the sandbox's slot exclusively.
    pub(super) async fn ensure_local_held(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
    ) -> Result<SandboxRecord> {
        let Some(c) = self.cluster() else {
            return Ok(rec);
        };
        if !self.takeover_needed(&rec) {
            return Ok(rec);
        }
        self.check_region(ctx, "takeover", rec.id.as_str()).await?;
        let t0 = std::time::Instant::now();
        // A lease this node held but could not confirm lately (see
        // `Cluster::serves`): if it is still this node's, the sandbox never
        // stopped running here and serving simply resumes.
        let unconfirmed = c.fence(&rec.id);
        let (fence, previous) = match self
            .meta
            .lease_acquire(&rec.id, c.node_id(), c.lease_ms())
            .await?
        {
            Acquire::Acquired { fence, previous } => (fence, previous),
            Acquire::Held(l) => return Err(held_elsewhere(&rec.id, l.node)),
        };
        c.hold(&rec.id, fence.clone());
        if still_ours(unconfirmed.as_ref(), previous.as_ref(), c.node_id()) {
            info!(sandbox = %rec.id, "lease confirmed again; serving resumes");
            return self.meta.get(&rec.id).await;
        }
        let rec = self.meta.get(&rec.id).await?;
        let from_node = previous.as_ref().and_then(|p| p.node.clone());
        // The last moment the sandbox is known to have run on the dead node:
        // its node's last heartbeat or the sandbox's last audited operation,
        // whichever is later. Progress lost is counted from the snapshot to
        // there (a lower bound: it may have run until its lease expired).
        let heartbeat_ms = match &from_node {
            Some(n) => self.meta.node_get(n).await.map(|n| n.heartbeat_at_ms).ok(),
            None => None,
        };
        let last_op_ms = self
            .meta
            .audit_list(None, Some(rec.id.as_str()), 1)
            .await
            .ok()
            .and_then(|v| v.last().map(|e| e.ts_ms));
        let last_alive_ms = last_alive_ms(heartbeat_ms, last_op_ms, rec.updated_at_ms);
        warn!(sandbox = %rec.id, from = ?from_node, "taking over a sandbox whose node stopped");
        self.takeover(ctx, rec, from_node, last_alive_ms, t0).await
    }

    /// Restore a sandbox whose node died from its newest snapshot, same id.
    async fn takeover(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
        from_node: Option<String>,
        last_alive_ms: i64,
        t0: std::time::Instant,
    ) -> Result<SandboxRecord> {
        // Newest of the last checkpoint and the last pause.
        let checkpoint = match (&rec.checkpoint_snapshot, rec.checkpoint_at_ms) {
            (Some(s), Some(at)) => Some((s.clone(), at)),
            _ => None,
        };
        let mut pause = None;
        if let Some(s) = &rec.pause_snapshot {
            if let Ok(info) = self.snapshots.get(&rec.tenant, s).await {
                pause = Some((s.clone(), info.created_at_ms));
            }
        }
        let Some(newest) = newest_earlier(pause, checkpoint) else {
            let reason = format!(
                "node {} stopped and no snapshot of this sandbox exists to recover from \
                 (set lifecycle.checkpoint_secs for periodic checkpoints)",
                from_node.clone().unwrap_or_default()
            );
            let _ = self
                .transition(
                    &rec.id,
                    rec.state,
                    SandboxState::Failed,
                    Patch::reason(reason.clone()),
                )
                .await;
            return Err(Error::state(reason));
        };
        let (snap, snap_at, is_pause) = (newest.id, newest.at_ms, !newest.checkpoint);
        for (from, to) in to_resuming(rec.state) {
            self.transition(&rec.id, from, to, Patch::default()).await?;
        }
        let backend = self.backend(rec.backend)?.clone();
        let spec = self.spec(&rec);
        let _ = backend.destroy(&rec.id, &spec.dir).await;
        let _ = tokio::fs::remove_dir_all(&spec.dir).await;
        let result = async {
            tokio::fs::create_dir_all(&spec.dir).await?;
            // Mounts are checked against the allowed roots of this node, now.
            let checked = match self.checked_spec(&rec) {
                Ok(s) => s,
                Err(e) => {
                    self.audit_refusal(ctx, "takeover", rec.id.as_str(), &e)
                        .await;
                    return Err(e);
                }
            };
            let stage = spec.dir.join("takeover-stage");
            let work = async {
                self.snapshots.restore(&rec.tenant, &snap, &stage).await?;
                if is_pause {
                    backend.resume(&checked, &stage).await
                } else {
                    backend.restore(&checked, &stage).await
                }
            };
            staged(&stage, Prep::Fresh, Cleanup::Always, work).await
        }
        .await;
        let now = now_ms();
        let lost = takeover_lost_ms(last_alive_ms, snap_at);
        match result {
            Ok(()) => {
                self.touch(&rec.id);
                let reason = format!(
                    "taken over from node {} (its lease expired); restored from snapshot {snap}, \
                     {lost} ms of progress lost",
                    from_node.clone().unwrap_or_default()
                );
                let rec = self
                    .transition(
                        &rec.id,
                        SandboxState::Resuming,
                        SandboxState::Running,
                        Patch {
                            reason: Some(Some(reason)),
                            running_since_ms: Some(Some(now)),
                            paused_at_ms: Some(None),
                            expires_at_ms: Some(None),
                            recovered_from_snapshot: Some(Some(snap.clone())),
                            recovered_at_ms: Some(Some(now)),
                            progress_lost_ms: Some(Some(lost)),
                            ..Default::default()
                        },
                    )
                    .await?;
                let took_ms = elapsed_ms(t0);
                info!(sandbox = %rec.id, snapshot = %snap, lost_ms = lost, took_ms, "taken over");
                self.audit(
                    ctx,
                    "takeover",
                    rec.id.as_str(),
                    serde_json::json!({
                        "from_node": from_node,
                        "to_node": self.cluster().map(|c| c.node_id().to_string()),
                        "snapshot": snap,
                        "snapshot_kind": if is_pause { "pause" } else { "checkpoint" },
                        "progress_lost_ms": lost,
                        "took_ms": took_ms,
                    }),
                )
                .await;
                self.metrics.lease_taken_over();
                Ok(rec)
            }
            Err(e) => {
                let _ = backend.destroy(&rec.id, &spec.dir).await;
                let _ = self
                    .transition(
                        &rec.id,
                        SandboxState::Resuming,
                        SandboxState::Failed,
                        Patch::reason(format!(
                            "takeover from snapshot {snap} failed: {}",
                            e.message
                        )),
                    )
                    .await;
                Err(e.context("takeover failed"))
            }
        }
    }

    /// In a cluster: heartbeat (renewing this node's leases) every third
    /// of the lease; a sandbox whose lease another node took is stopped here
    /// at once, without any state write (its fence is stale anyway).
    pub fn spawn_heartbeat(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let c = self.cluster()?.clone();
        let me = self.clone();
        Some(tokio::spawn(async move {
            let every = heartbeat_every(c.lease_ms());
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match c.heartbeat().await {
                    Ok(lost) => {
                        for id in lost {
                            warn!(sandbox = %id, "lease taken by another node; stopping it here");
                            if let Ok(rec) = me.meta.get(&id).await {
                                if let Ok(b) = me.backend(rec.backend) {
                                    let _ = b.destroy(&id, &me.sandbox_dir(&id)).await;
                                }
                            }
                        }
                    }
                    Err(e) => warn!(error = %e, "heartbeat failed"),
                }
            }
        }))
    }

    /// At start: the live sandboxes this node reconciles. In a cluster, only
    /// what ran here: its directory is on this node and no other node holds
    /// it. Take the lease (from this node's previous incarnation) before
    /// touching it.
    pub(super) async fn claim_at_start(
        &self,
        live: Vec<SandboxRecord>,
    ) -> Result<Vec<SandboxRecord>> {
        let Some(c) = self.cluster() else {
            return Ok(live);
        };
        let mut mine = Vec::new();
        for rec in live {
            match claim(rec.state, self.sandbox_dir(&rec.id).exists()) {
                Claim::Skip => {}
                Claim::Keep => mine.push(rec),
                Claim::Lease => {
                    if let Acquire::Acquired { fence, .. } = self
                        .meta
                        .lease_acquire(&rec.id, c.node_id(), c.lease_ms())
                        .await?
                    {
                        c.hold(&rec.id, fence);
                        mine.push(rec);
                    }
                }
            }
        }
        Ok(mine)
    }
}

#[cfg(test)]
mod tests;
