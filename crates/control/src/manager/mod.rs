//! The sandbox manager: owns lifecycle state, drives backends, moves pause
//! and snapshot artifacts through the snapshot store, and applies the idle
//! and TTL policies. HTTP handlers are thin wrappers around these methods.
//!
//! Concurrency: each sandbox has a slot with an async RwLock. Operations that
//! use a running sandbox (exec, files, sessions) hold it shared; lifecycle
//! changes (create, pause, resume, snapshot, destroy) hold it exclusive. The
//! idle reaper only ever *tries* the exclusive lock, so a sandbox with a
//! request in flight is never paused under it.
//!
//! Crash safety: every lifecycle change is persisted (meta, compare-and-set)
//! before the backend is asked to act; `reconcile` resolves whatever a killed
//! daemon left in a transitional state.
//!
//! The manager's rooms, one concern each. They share this module's plumbing
//! (the struct, slots, specs, state writes, audit) and call each other in one
//! direction only; this module itself only declares and re-exports them:
//! - `stage`: stage directories between a backend and the snapshot store;
//! - `lost`: settling a sandbox whose compute is gone;
//! - `pause_recovery`: settling a pause that did not finish;
//! - `lease`: cluster leases, takeover of a dead node's sandboxes, heartbeat;
//! - `lifecycle`: create, pause, resume, destroy, and waiting for a sandbox to run;
//! - `snapshot_ops`: snapshot, checkpoint, restore, fork;
//! - `catalog`: a tenant's snapshots as objects (list, delete, export,
//!   import) and transfer files;
//! - `templates`: named, versioned snapshots (publish after the secret
//!   scan, list, delete) and sandboxes started from them;
//! - `guest`: work inside a running sandbox (exec, files, sessions, usage);
//! - `network`: reading and changing a sandbox's network policy at runtime;
//! - `recovery`: reconcile after a crash;
//! - `reaper`: the idle, TTL, lifetime and checkpoint policies;
//! - `local_cap`: the node's cap on local pause state (evicting the oldest);
//! - `drain`: a node that stops taking sandboxes and pauses its own to the store.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::RwLock;
use tracing::warn;

use stasis_backend::{Backend, Capabilities, SandboxSpec};
use stasis_core::{now_ms, BackendKind, Error, Result, SandboxId, SandboxState, TenantId};
use stasis_meta::{Meta, NewAuditEntry, Patch, SandboxRecord};

use crate::cluster::Cluster;
use crate::inflight::Inflight;
use crate::metrics::Metrics;
use crate::snapshots::Snapshots;

mod activity;
mod catalog;
mod drain;
mod files;
mod guest;
mod lease;
mod lifecycle;
mod local_cap;
mod lost;
mod network;
mod pause_recovery;
mod reaper;
mod recovery;
mod settings;
mod snapshot_ops;
mod stage;
mod templates;

pub use drain::{DrainReport, DrainStatus};
pub use files::{file_limit_error, Spooled};
pub use guest::MAX_SESSION_WAIT;
pub use local_cap::half_free_bytes;
pub use network::{EgressCounters, NetworkStatus};
pub use pause_recovery::{decide, Action as PauseRecovery, Found as PauseFound};
pub use recovery::ReconcileReport;
pub use settings::{timeout_policy, LifecycleChange};
pub use snapshot_ops::MAX_SNAPSHOT_TTL;

/// Who is asking: the tenant whose objects are visible, and the actor recorded in the audit log.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub tenant: TenantId,
    pub actor: String,
}

impl Ctx {
    pub fn system(tenant: TenantId) -> Self {
        Ctx {
            tenant,
            actor: "system".into(),
        }
    }
}

/// The daemon's default standby window after an idle pause, seconds: long
/// enough to cover a model call or a tool call between two requests, short
/// enough that a sandbox waiting on a person frees its RAM soon.
pub const DEFAULT_STANDBY_SECS: u64 = 60;

#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub data_dir: PathBuf,
    pub default_backend: BackendKind,
    /// Largest file accepted by `write_file` / returned by `read_file`.
    pub max_file_bytes: u64,
    /// Default TTL of user snapshots.
    pub snapshot_ttl: Duration,
    /// How often the reaper looks for idle and expired sandboxes.
    pub reaper_interval: Duration,
    /// How often the snapshot store is garbage-collected.
    pub gc_interval: Duration,
    /// Canonical host directories that manifest mounts may come from.
    pub allow_mounts: Vec<PathBuf>,
    /// Limit on requests in flight (and queued) per sandbox.
    pub inflight: crate::inflight::InflightLimits,
    /// Standby window after an idle pause for sandboxes whose manifest sets
    /// none (`lifecycle.standby_secs`); 0 = off.
    pub standby: Duration,
    /// Disk this node's paused sandboxes may keep beyond their stored
    /// snapshots (local pause files, kept RAM files, disk chains); past it
    /// the least recently paused are evicted (`local_cap`). 0: evicted as
    /// soon as stored. None: half the space free on the data dir's
    /// filesystem when the manager starts.
    pub local_pause_max_bytes: Option<u64>,
}

impl ManagerConfig {
    pub fn new(data_dir: PathBuf) -> Self {
        ManagerConfig {
            data_dir,
            default_backend: BackendKind::Process,
            max_file_bytes: 64 * 1024 * 1024,
            snapshot_ttl: Duration::from_secs(7 * 24 * 3600),
            reaper_interval: Duration::from_millis(250),
            gc_interval: Duration::from_secs(60),
            allow_mounts: Vec::new(),
            inflight: Default::default(),
            standby: Duration::from_secs(DEFAULT_STANDBY_SECS),
            local_pause_max_bytes: None,
        }
    }
}

/// One sandbox's place in the manager: its lock (shared by requests, held
/// exclusively by lifecycle changes), its last activity, its in-flight limit.
struct Slot {
    lock: Arc<RwLock<()>>,
    last_active_ms: AtomicI64,
    inflight: Arc<Inflight>,
}

/// Timings of one lifecycle operation, reported to clients and benches.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct OpTiming {
    pub backend_ms: u64,
    pub store_ms: u64,
    pub total_ms: u64,
    /// The backend's phases (`Backend::op_timings`), in ms; a resume names
    /// the way it went as `path_standby`, `path_local` or `path_store` = 1.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub breakdown: std::collections::BTreeMap<String, u64>,
}

pub struct Manager {
    cfg: ManagerConfig,
    meta: Meta,
    snapshots: Snapshots,
    backends: HashMap<BackendKind, Arc<dyn Backend>>,
    slots: StdMutex<HashMap<SandboxId, Arc<Slot>>>,
    last_gc_ms: AtomicI64,
    /// Set when several daemons share the metadata database.
    cluster: std::sync::OnceLock<Arc<Cluster>>,
    /// The image store (set by the daemon; absent in manager-only tests).
    images: std::sync::OnceLock<Arc<crate::images::Images>>,
    /// The daemon's egress service (runtime network policy changes).
    egress: std::sync::OnceLock<Arc<stasis_net::EgressService>>,
    /// Where this node and its store are (`crate::governance`).
    region: std::sync::OnceLock<crate::region::Region>,
    metrics: Metrics,
    /// Set while the node drains: it starts no sandbox (see `drain`).
    draining: std::sync::atomic::AtomicBool,
    /// This node's paused sandboxes with local state (see `local_cap`).
    local: StdMutex<local_cap::Table>,
    /// The cap on their sum, bytes (resolved at start).
    local_cap: u64,
}

fn elapsed_ms(start: std::time::Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

impl Manager {
    pub fn new(
        cfg: ManagerConfig,
        meta: Meta,
        snapshots: Snapshots,
        backends: Vec<Arc<dyn Backend>>,
    ) -> Arc<Self> {
        let backends = backends.into_iter().map(|b| (b.kind(), b)).collect();
        let local_cap = cfg.local_pause_max_bytes.unwrap_or_else(|| {
            half_free_bytes(&cfg.data_dir).unwrap_or_else(|| {
                warn!(dir = %cfg.data_dir.display(), "free disk unknown: no cap on local pause state");
                u64::MAX
            })
        });
        let metrics = Metrics::new();
        metrics.set_local_pause(0, local_cap);
        Arc::new(Manager {
            cfg,
            meta,
            snapshots,
            backends,
            slots: StdMutex::new(HashMap::new()),
            last_gc_ms: AtomicI64::new(now_ms()),
            cluster: std::sync::OnceLock::new(),
            images: std::sync::OnceLock::new(),
            egress: std::sync::OnceLock::new(),
            region: std::sync::OnceLock::new(),
            metrics,
            draining: std::sync::atomic::AtomicBool::new(false),
            local: StdMutex::new(Default::default()),
            local_cap,
        })
    }

    /// Use an image store: manifests' `image` names are pinned to its ids.
    pub fn set_region(&self, r: crate::region::Region) {
        let _ = self.region.set(r);
    }

    /// This node's and its store's region (none set: any tenant not pinned).
    pub fn region(&self) -> crate::region::Region {
        self.region.get().cloned().unwrap_or_default()
    }

    pub fn set_images(&self, i: Arc<crate::images::Images>) {
        let _ = self.images.set(i);
    }

    pub fn images(&self) -> Result<&Arc<crate::images::Images>> {
        self.images
            .get()
            .ok_or_else(|| Error::unsupported("this daemon has no image store"))
    }

    /// Audit an image operation (`image.import`, `image.delete`, ...).
    pub async fn audit_image(
        &self,
        ctx: &Ctx,
        action: &str,
        target: &str,
        detail: serde_json::Value,
    ) {
        self.audit(ctx, action, target, detail).await;
    }

    /// Join a cluster (before reconcile and serving).
    pub fn set_cluster(&self, c: Arc<Cluster>) {
        let _ = self.cluster.set(c);
    }

    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.get()
    }

    /// A state write; in a cluster fenced by this node's lease of the
    /// sandbox, and the lease is given up when the sandbox stops running here.
    /// Every way into `Failed` passes here, so it is audited here (`fail`,
    /// which webhooks deliver as `sandbox.failed`), with the reason.
    async fn transition(
        &self,
        id: &SandboxId,
        from: SandboxState,
        to: SandboxState,
        patch: Patch,
    ) -> Result<SandboxRecord> {
        let rec = self.transition_state(id, from, to, patch).await?;
        if to == SandboxState::Failed && from != SandboxState::Failed {
            let detail = serde_json::json!({"from": from, "reason": rec.reason});
            let ctx = Ctx::system(rec.tenant.clone());
            self.audit(&ctx, "fail", rec.id.as_str(), detail).await;
        }
        Ok(rec)
    }

    async fn transition_state(
        &self,
        id: &SandboxId,
        from: SandboxState,
        to: SandboxState,
        patch: Patch,
    ) -> Result<SandboxRecord> {
        let rec = self.transition_fenced(id, from, to, patch).await?;
        if from == SandboxState::Paused && to != SandboxState::Paused {
            // Resumed or going: its local state no longer counts as paused.
            self.forget_local(id);
        } else if from == SandboxState::Resuming && to == SandboxState::Paused {
            // A resume that did not happen: what is left here counts again.
            self.seed_local(&rec);
        }
        Ok(rec)
    }

    async fn transition_fenced(
        &self,
        id: &SandboxId,
        from: SandboxState,
        to: SandboxState,
        patch: Patch,
    ) -> Result<SandboxRecord> {
        let Some(c) = self.cluster() else {
            return self.meta.transition(id, from, to, patch).await;
        };
        let fence = c.fence(id);
        let mut rec = self
            .meta
            .transition_fenced(id, from, to, patch, fence.as_ref())
            .await?;
        if matches!(
            to,
            SandboxState::Paused | SandboxState::Failed | SandboxState::Destroyed
        ) {
            c.release(id).await;
            rec.owner = None;
        }
        Ok(rec)
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub fn snapshots(&self) -> &Snapshots {
        &self.snapshots
    }

    pub fn config(&self) -> &ManagerConfig {
        &self.cfg
    }

    /// This daemon's metrics (served at `/metrics`).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn capabilities(&self) -> Vec<Capabilities> {
        let mut caps: Vec<_> = self.backends.values().map(|b| b.capabilities()).collect();
        caps.sort_by_key(|c| c.backend.as_str());
        caps
    }

    fn backend(&self, kind: BackendKind) -> Result<&Arc<dyn Backend>> {
        self.backends.get(&kind).ok_or_else(|| {
            Error::unsupported(format!("backend {kind} is not enabled on this daemon"))
        })
    }

    fn sandbox_dir(&self, id: &SandboxId) -> PathBuf {
        self.cfg.data_dir.join("sandboxes").join(id.as_str())
    }

    fn spec(&self, rec: &SandboxRecord) -> SandboxSpec {
        SandboxSpec {
            id: rec.id.clone(),
            manifest: rec.manifest.clone(),
            dir: self.sandbox_dir(&rec.id),
        }
    }

    /// The spec with its image re-checked to be a name (records written
    /// before host paths were refused may carry one) and every mount source
    /// checked against the operator's current allowed roots and replaced by
    /// its canonical path: used to build or rebuild a sandbox (create,
    /// resume, restore, takeover).
    fn checked_spec(&self, rec: &SandboxRecord) -> Result<SandboxSpec> {
        if let Some(image) = &rec.manifest.image {
            stasis_core::manifest::validate_image_name(image)?;
        }
        let mut spec = self.spec(rec);
        spec.manifest = crate::mounts::resolve(&rec.manifest, &self.cfg.allow_mounts)?;
        Ok(spec)
    }

    /// Record in the audit log that `op` was refused (`target`: the sandbox,
    /// snapshot or collection it was asked of), with the error given.
    async fn audit_refusal(&self, ctx: &Ctx, op: &str, target: &str, e: &Error) {
        let detail = serde_json::json!({
            "op": op,
            "code": e.code,
            "field": e.field,
            "message": e.message,
        });
        self.audit(ctx, "refused", target, detail).await;
    }

    fn slot(&self, id: &SandboxId) -> Arc<Slot> {
        let mut slots = self.slots.lock().expect("slots lock");
        slots
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    lock: Arc::new(RwLock::new(())),
                    last_active_ms: AtomicI64::new(now_ms()),
                    inflight: Arc::new(Inflight::new(self.cfg.inflight)),
                })
            })
            .clone()
    }

    fn touch(&self, id: &SandboxId) {
        self.slot(id)
            .last_active_ms
            .store(now_ms(), Ordering::Relaxed);
    }

    async fn audit(&self, ctx: &Ctx, action: &str, target: &str, detail: serde_json::Value) {
        let entry = NewAuditEntry {
            tenant: ctx.tenant.clone(),
            actor: ctx.actor.clone(),
            action: action.to_string(),
            target: target.to_string(),
            detail,
        };
        if let Err(e) = self.meta.audit(entry).await {
            warn!(error = %e, action, target, "audit append failed");
        }
    }
}
