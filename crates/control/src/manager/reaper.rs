//! The idle, TTL, lifetime and checkpoint policies (a sandbox's manifest
//! `lifecycle`), applied by a periodic pass. What to do with one sandbox is
//! the pure [`decide`] (and [`checkpoint_due`]), from the time, its record
//! and its last activity (unit-tested); the pass acts on it only under the
//! sandbox's exclusive lock, which it never waits for (a sandbox with a
//! request in flight is left for the next pass). A pass reads only the
//! sandboxes whose deadline has come (`stasis_meta::due`, the deadline
//! index every state write keeps), so it costs what is due, not every
//! sandbox on record.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use stasis_core::{now_ms, OnIdle, Result, SandboxId, SandboxState};
use stasis_meta::SandboxRecord;

use super::{Ctx, Manager};

/// A template snapshot no version holds is swept once this old: longer than
/// any publication takes between storing the snapshot and recording it.
const TEMPLATE_ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Most sandboxes one pass reads from the deadline index, earliest first
/// (the rest are read by the next pass).
const DUE_BATCH: u32 = 1000;

/// What the reaper does to one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reap {
    /// Running past `max_lifetime_secs` of running time: destroyed.
    LifetimeExpired,
    /// Running past `max_lifetime_secs`, `on_lifetime: pause` (`keep_memory`)
    /// or `pause_filesystem`: paused.
    LifetimePause { keep_memory: bool },
    /// Idle past `idle_timeout_secs`, `on_idle: pause` (`keep_memory`) or
    /// `pause_filesystem`: paused.
    IdlePause { keep_memory: bool },
    /// Idle past `idle_timeout_secs`, `on_idle: destroy`: destroyed.
    IdleDestroy,
    /// Paused past `paused_ttl_secs`: destroyed.
    TtlExpired,
}

impl Reap {
    /// Its name, as the pass reports it and metrics count it.
    pub fn what(self) -> &'static str {
        match self {
            Reap::LifetimeExpired => "lifetime_expired",
            Reap::LifetimePause { keep_memory: true } => "lifetime_paused",
            Reap::LifetimePause { keep_memory: false } => "lifetime_paused_filesystem",
            Reap::IdlePause { keep_memory: true } => "idle_paused",
            Reap::IdlePause { keep_memory: false } => "idle_paused_filesystem",
            Reap::IdleDestroy => "idle_destroyed",
            Reap::TtlExpired => "ttl_expired",
        }
    }

    /// Whether it answers to the idle window (a request in flight defers it).
    pub fn is_idle(self) -> bool {
        matches!(self, Reap::IdlePause { .. } | Reap::IdleDestroy)
    }
}

/// Whether a periodic checkpoint of a running sandbox is due at `now`
/// (counted from its last checkpoint, else from when it last started
/// running, else from its creation).
pub fn checkpoint_due(now: i64, rec: &SandboxRecord) -> bool {
    let policy = &rec.manifest.lifecycle;
    if rec.state != SandboxState::Running || policy.checkpoint_secs == 0 {
        return false;
    }
    let last = rec
        .checkpoint_at_ms
        .or(rec.running_since_ms)
        .unwrap_or(rec.created_at_ms);
    policy.checkpoint_due(now.saturating_sub(last))
}

/// What the policies ask of a sandbox at `now`, its last activity at
/// `last_active_ms` (none: leave it). Over its lifetime wins over idle.
pub fn decide(now: i64, rec: &SandboxRecord, last_active_ms: i64) -> Option<Reap> {
    let policy = &rec.manifest.lifecycle;
    match rec.state {
        SandboxState::Running => {
            if policy.lifetime_over(rec.running_time_ms(now)) {
                return Some(match policy.on_lifetime.pause() {
                    Some(keep_memory) => Reap::LifetimePause { keep_memory },
                    None => Reap::LifetimeExpired,
                });
            }
            if !policy.idle_over(now.saturating_sub(last_active_ms)) {
                return None;
            }
            match policy.on_idle {
                OnIdle::Pause => Some(Reap::IdlePause { keep_memory: true }),
                OnIdle::PauseFilesystem => Some(Reap::IdlePause { keep_memory: false }),
                OnIdle::Destroy => Some(Reap::IdleDestroy),
                OnIdle::Nothing => None,
            }
        }
        SandboxState::Paused if rec.expires_at_ms.is_some_and(|t| t <= now) => {
            Some(Reap::TtlExpired)
        }
        _ => None,
    }
}

impl Manager {
    /// One pass of the idle/TTL/lifetime policies. Returns what it did.
    pub async fn reap_once(&self) -> Result<Vec<(SandboxId, &'static str)>> {
        let now = now_ms();
        let mut done = Vec::new();
        let node = self.cluster().map(|c| c.node_id().to_string());
        let due = self.meta.due(now, node.as_deref(), DUE_BATCH).await?;
        self.metrics.reaper_examined(due.len());
        for rec in due {
            let ctx = Ctx::system(rec.tenant.clone());
            let slot = self.slot(&rec.id);
            // In a cluster, only the node that runs it applies its policies.
            if rec.state == SandboxState::Running
                && self.cluster().is_some_and(|c| !c.serves(&rec.id))
            {
                continue;
            }
            if checkpoint_due(now, &rec) {
                if let Ok(guard) = slot.lock.clone().try_write_owned() {
                    match self.checkpoint(&ctx, &rec.id, guard).await {
                        Ok(_) => done.push((rec.id.clone(), "checkpointed")),
                        Err(e) => {
                            warn!(sandbox = %rec.id, error = %e, "checkpoint failed")
                        }
                    }
                }
            }
            let last_active_ms = slot.last_active_ms.load(Ordering::Relaxed);
            let Some(reap) = decide(now, &rec, last_active_ms) else {
                // Nothing due after all (activity moved the idle window):
                // look again when its deadlines say. A checkpoint just
                // taken rewrote the row, which then keeps its old value
                // and comes back once more.
                let next = stasis_meta::due::due_after_activity(&rec, Some(last_active_ms));
                if let Err(e) = self.meta.set_due(&rec, next).await {
                    warn!(sandbox = %rec.id, error = %e, "deadline not moved");
                }
                continue;
            };
            // A request in flight (or waiting for a slot) is activity, however
            // long it runs: an exec longer than the idle window is not idle.
            if reap.is_idle() && (slot.inflight.in_flight() > 0 || slot.inflight.queued() > 0) {
                continue;
            }
            // Never under a request in flight. Wait as long as one read of
            // an attached terminal may hold the sandbox (such reads are not
            // activity, and the lock queues the next one behind this).
            let wait = super::guest::MAX_ATTACHED_WAIT + Duration::from_millis(500);
            let Ok(guard) = tokio::time::timeout(wait, slot.lock.clone().write_owned()).await
            else {
                continue;
            };
            // Decide again under the lock: the requests that held the
            // sandbox while this pass waited have touched it on their way
            // out, and the record may have moved on.
            let rec = self.meta.get(&rec.id).await?;
            let last_active_ms = slot.last_active_ms.load(Ordering::Relaxed);
            if decide(now_ms(), &rec, last_active_ms) != Some(reap) {
                continue;
            }
            let r = match reap {
                Reap::IdlePause { keep_memory } => {
                    let standby = self.standby_window(&rec);
                    self.do_pause(&ctx, rec.clone(), keep_memory, standby, "idle", guard)
                        .await
                        .map(|_| ())
                }
                Reap::LifetimePause { keep_memory } => {
                    let standby = self.standby_window(&rec);
                    self.do_pause(&ctx, rec.clone(), keep_memory, standby, "lifetime", guard)
                        .await
                        .map(|_| ())
                }
                Reap::LifetimeExpired | Reap::IdleDestroy | Reap::TtlExpired => self
                    .do_destroy(&ctx, rec.clone(), "expire", guard)
                    .await
                    .map(|_| ()),
            };
            match r {
                Ok(()) => {
                    self.metrics.reaped(reap.what());
                    done.push((rec.id.clone(), reap.what()))
                }
                Err(e) if reap == Reap::TtlExpired => {
                    warn!(sandbox = %rec.id, error = %e, "TTL destroy failed")
                }
                Err(e) => warn!(sandbox = %rec.id, error = %e, "idle policy failed"),
            }
        }
        // The backends' own upkeep: standbys past their window released.
        // Where the released compute was the memory (frozen processes), the
        // pause is now filesystem-only, and recorded so.
        for b in self.backends.values() {
            let lost = !b.memory_survives_release();
            for id in b.housekeeping().await {
                self.metrics.reaped("standby_released");
                if lost {
                    self.pause_downgraded(&id, "its frozen window ended").await;
                    done.push((id, "pause_downgraded"));
                } else {
                    done.push((id, "standby_released"));
                }
            }
        }
        // The node's cap on local pause state: the oldest evicted past it.
        for id in self.enforce_local_cap().await {
            done.push((id, "local_evicted"));
        }
        if now - self.last_gc_ms.load(Ordering::Relaxed) >= self.cfg.gc_interval.as_millis() as i64
        {
            self.last_gc_ms.store(now, Ordering::Relaxed);
            if let Err(e) = self.sweep_template_orphans(TEMPLATE_ORPHAN_GRACE).await {
                warn!(error = %e, "template orphan sweep failed");
            }
            if let Err(e) = self.snapshots.gc().await {
                warn!(error = %e, "snapshot store GC failed");
            }
        }
        Ok(done)
    }

    /// Run the reaper until the returned handle is aborted.
    pub fn spawn_reaper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.cfg.reaper_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let t0 = std::time::Instant::now();
                if let Err(e) = me.reap_once().await {
                    warn!(error = %e, "reaper pass failed");
                }
                me.metrics.reaper_pass(t0.elapsed());
            }
        })
    }
}

#[cfg(test)]
mod tests;
