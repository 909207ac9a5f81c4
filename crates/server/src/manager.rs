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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};
use tracing::{info, warn};

use stasis_backend::{failpoint, Backend, Capabilities, ExecChunk, Recovered, SandboxSpec, Usage};
use stasis_core::{
    now_ms, BackendKind, Error, ErrorCode, ExecRequest, ExecResult, FileEntry, Manifest, OnIdle,
    Result, SandboxId, SandboxState, SessionInfo, SessionOutput, SessionSpec, SnapshotId, TenantId,
};
use stasis_meta::{Meta, NewAuditEntry, Patch, PauseKind, SandboxRecord};

use crate::cluster::Cluster;
use crate::inflight::{Inflight, Permit};
use crate::metrics::{Metrics, Op};

mod pause_recovery;
use crate::snapshots::{SnapshotInfo, SnapshotKind, Snapshots};
use pause_recovery::Intent;
pub use pause_recovery::{decide, Action as PauseRecovery, Found as PauseFound};

/// Longest wait of one session output read (`wait_ms`).
pub const MAX_SESSION_WAIT: Duration = Duration::from_secs(60);
/// Longest TTL of a user snapshot (`ttl_secs`): 10 years.
pub const MAX_SNAPSHOT_TTL: Duration = Duration::from_secs(3650 * 24 * 3600);

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
        }
    }
}

struct Slot {
    lock: Arc<RwLock<()>>,
    last_active_ms: AtomicI64,
    inflight: Arc<Inflight>,
}

/// A request's hold on a running sandbox: its in-flight slot and the shared
/// lock that keeps lifecycle changes out while it runs.
pub(crate) struct InUse {
    _guard: OwnedRwLockReadGuard<()>,
    _permit: Permit,
}

/// Timings of one lifecycle operation, reported to clients and benches.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct OpTiming {
    pub backend_ms: u64,
    pub store_ms: u64,
    pub total_ms: u64,
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
    metrics: Metrics,
}

/// A unique, path-safe token (reuses the id generator's randomness).
fn uuid_like() -> String {
    SnapshotId::generate()
        .as_str()
        .trim_start_matches("snap-")
        .to_string()
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
        Arc::new(Manager {
            cfg,
            meta,
            snapshots,
            backends,
            slots: StdMutex::new(HashMap::new()),
            last_gc_ms: AtomicI64::new(now_ms()),
            cluster: std::sync::OnceLock::new(),
            metrics: Metrics::new(),
        })
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
    async fn transition(
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

    /// In a cluster: take the lease of a sandbox this node starts (create,
    /// restore) or resumes. Fails when another live node holds it.
    async fn lease_for_start(&self, id: &SandboxId) -> Result<()> {
        let Some(c) = self.cluster() else {
            return Ok(());
        };
        if c.fence(id).is_some() {
            return Ok(());
        }
        match self
            .meta
            .lease_acquire(id, c.node_id(), c.lease_ms())
            .await?
        {
            stasis_meta::lease::Acquire::Acquired { fence, .. } => {
                c.hold(id, fence);
                Ok(())
            }
            stasis_meta::lease::Acquire::Held(l) => Err(Error::new(
                ErrorCode::Busy,
                format!(
                    "sandbox {id} runs on node {}; try again",
                    l.node.unwrap_or_default()
                ),
            )),
        }
    }

    /// In a cluster, before serving a sandbox that should be running: it
    /// must run here. If its lease is held by another live node, refuse
    /// (the request should have been forwarded); if the lease expired (its
    /// node died), take it over from its newest snapshot.
    pub(crate) async fn ensure_local(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
    ) -> Result<SandboxRecord> {
        let Some(c) = self.cluster() else {
            return Ok(rec);
        };
        if !matches!(
            rec.state,
            SandboxState::Running | SandboxState::Pausing | SandboxState::Resuming
        ) || c.fence(&rec.id).is_some()
        {
            return Ok(rec);
        }
        let t0 = std::time::Instant::now();
        let (fence, previous) = match self
            .meta
            .lease_acquire(&rec.id, c.node_id(), c.lease_ms())
            .await?
        {
            stasis_meta::lease::Acquire::Acquired { fence, previous } => (fence, previous),
            stasis_meta::lease::Acquire::Held(l) => {
                return Err(Error::new(
                    ErrorCode::Busy,
                    format!(
                        "sandbox {} runs on node {}; try again",
                        rec.id,
                        l.node.unwrap_or_default()
                    ),
                ))
            }
        };
        c.hold(&rec.id, fence.clone());
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
        let last_alive_ms = heartbeat_ms
            .into_iter()
            .chain(last_op_ms)
            .chain(Some(rec.updated_at_ms))
            .max()
            .unwrap_or(rec.updated_at_ms);
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
        let mut candidates: Vec<(SnapshotId, i64, bool)> = Vec::new();
        if let (Some(s), Some(at)) = (&rec.checkpoint_snapshot, rec.checkpoint_at_ms) {
            candidates.push((s.clone(), at, false));
        }
        if let Some(s) = &rec.pause_snapshot {
            if let Ok(info) = self.snapshots.get(&rec.tenant, s).await {
                candidates.push((s.clone(), info.created_at_ms, true));
            }
        }
        candidates.sort_by_key(|c| c.1);
        let Some((snap, snap_at, is_pause)) = candidates.pop() else {
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
        // Pausing -> Running -> Resuming; Running -> Resuming; Resuming stays.
        let mut state = rec.state;
        if state == SandboxState::Pausing {
            self.transition(&rec.id, state, SandboxState::Running, Patch::default())
                .await?;
            state = SandboxState::Running;
        }
        if state == SandboxState::Running {
            self.transition(&rec.id, state, SandboxState::Resuming, Patch::default())
                .await?;
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
            fresh_stage(&stage).await?;
            self.snapshots.restore(&rec.tenant, &snap, &stage).await?;
            let r = if is_pause {
                backend.resume(&checked, &stage).await
            } else {
                backend.restore(&checked, &stage).await
            };
            let _ = tokio::fs::remove_dir_all(&stage).await;
            r
        }
        .await;
        let now = now_ms();
        let lost = (last_alive_ms - snap_at).max(0);
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

    // ----- create / read -------------------------------------------------

    /// Create a sandbox. A refused create answers the error, leaves no
    /// sandbox record and nothing on disk, and is audited.
    pub async fn create(&self, ctx: &Ctx, manifest: Manifest) -> Result<SandboxRecord> {
        let r = self.do_create(ctx, manifest).await;
        if let Err(e) = &r {
            self.audit_refusal(ctx, "create", "sandboxes", e).await;
        }
        r
    }

    async fn do_create(&self, ctx: &Ctx, mut manifest: Manifest) -> Result<SandboxRecord> {
        manifest.validate()?;
        crate::tenancy::check_manifest_secrets(&self.meta, &ctx.tenant, &manifest).await?;
        crate::mounts::resolve(&manifest, &self.cfg.allow_mounts)?;
        let kind = *manifest.backend.get_or_insert(self.cfg.default_backend);
        let timer = self.metrics.op(Op::Create, kind);
        let backend = self.backend(kind)?.clone();
        let caps = backend.capabilities();
        if !caps.available {
            return Err(Error::unsupported(format!(
                "backend {kind} is unavailable here: {}",
                caps.reason.unwrap_or_default()
            )));
        }
        let id = SandboxId::generate();
        let slot = self.slot(&id);
        let _guard = slot.lock.clone().write_owned().await;
        let rec = self
            .meta
            .insert_sandbox(&id, &ctx.tenant, &manifest, kind, None)
            .await?;
        let checked = self.checked_spec(&rec);
        let spec = self.spec(&rec);
        let result = async {
            self.lease_for_start(&id).await?;
            let checked = checked?;
            tokio::fs::create_dir_all(&checked.dir).await?;
            backend.create(&checked).await
        }
        .await;
        let rec = self.finish_start(ctx, rec, &spec, result, "create").await?;
        self.audit(
            ctx,
            "create",
            id.as_str(),
            serde_json::json!({"backend": kind, "manifest_digest": rec.manifest_digest}),
        )
        .await;
        timer.ok();
        Ok(rec)
    }

    /// Settle a sandbox in `Creating` after its backend start: Running on
    /// success; on failure everything is removed and the record says why.
    async fn finish_start(
        &self,
        _ctx: &Ctx,
        rec: SandboxRecord,
        spec: &SandboxSpec,
        result: Result<()>,
        what: &str,
    ) -> Result<SandboxRecord> {
        let result = match result {
            Ok(()) => {
                self.touch(&rec.id);
                self.transition(
                    &rec.id,
                    SandboxState::Creating,
                    SandboxState::Running,
                    Patch {
                        running_since_ms: Some(Some(now_ms())),
                        ..Default::default()
                    },
                )
                .await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(rec) => Ok(rec),
            // Also when the backend started it but the record could not say
            // so: a sandbox nobody can reach must not keep its resources.
            Err(e) => {
                warn!(sandbox = %rec.id, error = %e, "{what} failed; cleaning up");
                let mut cleaned = match self.backend(rec.backend) {
                    Ok(b) => b.destroy(&rec.id, &spec.dir).await.is_ok(),
                    Err(_) => true,
                };
                match tokio::fs::remove_dir_all(&spec.dir).await {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => cleaned = false,
                    _ => {}
                }
                // Nothing runs and nothing is on disk: the refused start
                // leaves no record. Whatever could not be removed keeps its
                // record, as Failed, for reconcile and orphan cleanup (a
                // daemon killed before this point leaves it Creating, which
                // reconcile settles the same way).
                let discarded = cleaned
                    && match self.meta.discard(&rec.id, SandboxState::Creating).await {
                        Ok(()) => true,
                        Err(d) => {
                            warn!(sandbox = %rec.id, error = %d, "refused {what} not discarded");
                            false
                        }
                    };
                if discarded {
                    if let Some(c) = self.cluster() {
                        c.release(&rec.id).await;
                    }
                    self.slots.lock().expect("slots lock").remove(&rec.id);
                } else {
                    let _ = self
                        .transition(
                            &rec.id,
                            SandboxState::Creating,
                            SandboxState::Failed,
                            Patch::reason(format!("{what} failed: {}", e.message)),
                        )
                        .await;
                }
                Err(e)
            }
        }
    }

    pub async fn get(&self, ctx: &Ctx, id: &SandboxId) -> Result<SandboxRecord> {
        self.meta.get_for(&ctx.tenant, id).await
    }

    pub async fn list(&self, ctx: &Ctx, state: Option<SandboxState>) -> Result<Vec<SandboxRecord>> {
        self.meta.list(Some(&ctx.tenant), state).await
    }

    // ----- using a running sandbox ---------------------------------------

    /// [`Manager::running`] for one request of work (exec, files, sessions):
    /// first a slot of the sandbox's in-flight limit (waiting in its bounded
    /// queue; 429 `overloaded` beyond it). The caller's tenant is checked
    /// first, so another tenant's sandbox answers 404, never 429.
    async fn in_use(&self, ctx: &Ctx, id: &SandboxId) -> Result<(InUse, SandboxRecord)> {
        self.in_use_with(ctx, id, None).await
    }

    /// [`Manager::in_use`] with a slot the caller may already hold (from
    /// [`Manager::reserve`]).
    async fn in_use_with(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        permit: Option<Permit>,
    ) -> Result<(InUse, SandboxRecord)> {
        let permit = match permit {
            Some(p) => p,
            None => self.reserve(ctx, id).await?,
        };
        let (guard, rec) = self.running(ctx, id).await?;
        Ok((
            InUse {
                _guard: guard,
                _permit: permit,
            },
            rec,
        ))
    }

    /// A slot of the sandbox's in-flight limit, held until dropped: for a
    /// caller that must know before it answers (a streamed exec answers 429
    /// `overloaded` as a plain response, not inside its stream). 404 for
    /// another tenant's sandbox.
    pub async fn reserve(&self, ctx: &Ctx, id: &SandboxId) -> Result<Permit> {
        self.meta.get_for(&ctx.tenant, id).await?;
        let limiter = self.slot(id).inflight.clone();
        limiter.acquire(&format!("sandbox {id}")).await
    }

    /// Wait until the sandbox is running (resuming it transparently when it
    /// is paused) and hold it running for the lifetime of the returned guard.
    async fn running(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
    ) -> Result<(OwnedRwLockReadGuard<()>, SandboxRecord)> {
        let slot = self.slot(id);
        for _ in 0..5 {
            let rec = self.meta.get_for(&ctx.tenant, id).await?;
            match rec.state {
                SandboxState::Running => {
                    if self.cluster().is_some_and(|c| c.fence(id).is_none()) {
                        let guard = slot.lock.clone().write_owned().await;
                        let rec = self.meta.get(id).await?;
                        self.ensure_local(ctx, rec).await?;
                        drop(guard);
                        continue;
                    }
                    let guard = slot.lock.clone().read_owned().await;
                    let rec = self.meta.get(id).await?;
                    if rec.state == SandboxState::Running {
                        self.touch(id);
                        return Ok((guard, rec));
                    }
                }
                SandboxState::Paused => {
                    let guard = slot.lock.clone().write_owned().await;
                    let rec = self.meta.get(id).await?;
                    if rec.state == SandboxState::Paused {
                        self.do_resume(ctx, rec, guard).await?;
                    }
                }
                SandboxState::Creating
                | SandboxState::Pausing
                | SandboxState::Resuming
                | SandboxState::Destroying => {
                    // An operation holds the slot exclusively: wait for it.
                    drop(slot.lock.clone().read_owned().await);
                }
                SandboxState::Destroyed | SandboxState::Failed => {
                    return Err(Error::state(format!(
                        "sandbox {id} is {}{}",
                        rec.state,
                        rec.reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    )));
                }
            }
        }
        Err(Error::new(
            ErrorCode::Busy,
            format!("sandbox {id} kept changing state; try again"),
        ))
    }

    pub async fn exec(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        self.exec_reserved(ctx, id, req, output, None).await
    }

    /// [`Manager::exec`] in a slot already reserved (see [`Manager::reserve`]).
    pub async fn exec_reserved(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        mut req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
        permit: Option<Permit>,
    ) -> Result<ExecResult> {
        stasis_core::exec::check_argv(&req.argv)?;
        stasis_core::exec::check_timeout_ms(req.timeout_ms)?;
        stasis_core::exec::check_env(&req.env)?;
        let (_g, rec) = self.in_use_with(ctx, id, permit).await?;
        req.env = self.exec_env(&rec, std::mem::take(&mut req.env)).await?;
        let argv0 = req.argv[0].clone();
        let result = self.backend(rec.backend)?.exec(id, req, output).await;
        let result = self.done(&rec, result).await;
        let exit_code = result.as_ref().ok().and_then(|r| r.exit_code);
        let detail = serde_json::json!({"argv0": argv0, "exit_code": exit_code});
        self.audit(ctx, "exec", id.as_str(), detail).await;
        result
    }

    /// The environment of one exec or session: the manifest's env, then the
    /// tenant secrets the manifest names (opened here, for this call only),
    /// then the request's own env (which wins).
    async fn exec_env(
        &self,
        rec: &SandboxRecord,
        request: std::collections::BTreeMap<String, String>,
    ) -> Result<std::collections::BTreeMap<String, String>> {
        let secrets = crate::tenancy::resolve_secrets(
            &self.meta,
            self.snapshots.store(),
            &rec.tenant,
            &rec.manifest,
        )
        .await?;
        Ok(stasis_core::exec::merge_env([
            &rec.manifest.env,
            &secrets,
            &request,
        ]))
    }

    pub async fn write_file(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        if data.len() as u64 > self.cfg.max_file_bytes {
            return Err(Error::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "file of {} bytes exceeds the limit of {}",
                    data.len(),
                    self.cfg.max_file_bytes
                ),
            ));
        }
        let (_g, rec) = self.in_use(ctx, id).await?;
        let r = self
            .backend(rec.backend)?
            .write_file(id, path, data, mode)
            .await;
        let r = self.done(&rec, r).await;
        r
    }

    pub async fn read_file(&self, ctx: &Ctx, id: &SandboxId, path: &str) -> Result<Vec<u8>> {
        let (_g, rec) = self.in_use(ctx, id).await?;
        let r = self
            .backend(rec.backend)?
            .read_file(id, path, self.cfg.max_file_bytes)
            .await;
        let r = self.done(&rec, r).await;
        if r.is_ok() {
            self.audit(
                ctx,
                "download",
                id.as_str(),
                serde_json::json!({"path": path}),
            )
            .await;
        }
        r
    }

    /// A tar of the sandbox's output directories (manifest `outputs`) in a
    /// transfer file the caller streams and removes. A paused sandbox is read
    /// where it lies when its backend can (a frozen process sandbox); else
    /// it is resumed first, like any other use.
    pub async fn collect_outputs(&self, ctx: &Ctx, id: &SandboxId) -> Result<(PathBuf, u64)> {
        let rec = self.meta.get_for(&ctx.tenant, id).await?;
        let out = self.transfer_path("outputs").await?;
        let backend = self.backend(rec.backend)?.clone();
        let mut size = None;
        if rec.state == SandboxState::Paused {
            // Hold off lifecycle operations while reading the paused sandbox.
            let slot = self.slot(id);
            let _g = slot.lock.clone().read_owned().await;
            if self.meta.get(id).await?.state == SandboxState::Paused {
                match backend.collect_outputs(id, &out).await {
                    Ok(n) => size = Some(n),
                    Err(e)
                        if e.code == ErrorCode::InvalidState || e.code == ErrorCode::NotFound => {}
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&out).await;
                        return Err(e);
                    }
                }
            }
        }
        let n = match size {
            Some(n) => n,
            None => {
                let (_g, rec) = match self.in_use(ctx, id).await {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&out).await;
                        return Err(e);
                    }
                };
                let r = backend.collect_outputs(id, &out).await;
                match self.done(&rec, r).await {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&out).await;
                        return Err(e);
                    }
                }
            }
        };
        self.audit(
            ctx,
            "download",
            id.as_str(),
            serde_json::json!({"object": "outputs", "dirs": rec.manifest.outputs, "bytes": n}),
        )
        .await;
        Ok((out, n))
    }

    pub async fn list_files(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
    ) -> Result<Vec<FileEntry>> {
        let (_g, rec) = self.in_use(ctx, id).await?;
        let r = self.backend(rec.backend)?.list_files(id, path).await;
        let r = self.done(&rec, r).await;
        r
    }

    pub async fn session_start(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        mut spec: SessionSpec,
    ) -> Result<SessionInfo> {
        stasis_core::exec::check_argv(&spec.argv)?;
        stasis_core::exec::check_env(&spec.env)?;
        let (_g, rec) = self.in_use(ctx, id).await?;
        spec.env = self.exec_env(&rec, std::mem::take(&mut spec.env)).await?;
        let r = self.backend(rec.backend)?.session_start(id, spec).await;
        let r = self.done(&rec, r).await;
        if let Ok(info) = &r {
            let argv0 = info.argv.first().cloned().unwrap_or_default();
            let detail = serde_json::json!({"session": info.id, "argv0": argv0});
            self.audit(ctx, "session_start", id.as_str(), detail).await;
        }
        r
    }

    pub async fn session_write(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
        data: &[u8],
    ) -> Result<()> {
        let (_g, rec) = self.in_use(ctx, id).await?;
        let r = self
            .backend(rec.backend)?
            .session_write(id, session, data)
            .await;
        let r = self.done(&rec, r).await;
        r
    }

    pub async fn session_read(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<SessionOutput> {
        if wait > MAX_SESSION_WAIT {
            return Err(Error::invalid(format!(
                "wait_ms: must be at most {} (got {})",
                MAX_SESSION_WAIT.as_millis(),
                wait.as_millis()
            ))
            .with_field("wait_ms"));
        }
        let (_g, rec) = self.in_use(ctx, id).await?;
        let r = self
            .backend(rec.backend)?
            .session_read(id, session, offset, wait)
            .await;
        let r = self.done(&rec, r).await;
        r
    }

    pub async fn session_list(&self, ctx: &Ctx, id: &SandboxId) -> Result<Vec<SessionInfo>> {
        let (_g, rec) = self.in_use(ctx, id).await?;
        let r = self.backend(rec.backend)?.session_list(id).await;
        let r = self.done(&rec, r).await;
        r
    }

    pub async fn session_kill(&self, ctx: &Ctx, id: &SandboxId, session: &str) -> Result<()> {
        let (_g, rec) = self.in_use(ctx, id).await?;
        let r = self.backend(rec.backend)?.session_kill(id, session).await;
        let r = self.done(&rec, r).await;
        r
    }

    /// After a backend call on a running sandbox: note the activity, and if
    /// the call failed in a way that may mean the sandbox is gone (backend
    /// error, agent timeout), find out and settle its state so it is not left
    /// claiming to run.
    async fn done<T>(&self, rec: &SandboxRecord, r: Result<T>) -> Result<T> {
        self.touch(&rec.id);
        if let Err(e) = &r {
            // invalid_state from a backend: it no longer holds a sandbox we
            // believe runs.
            if matches!(
                e.code,
                ErrorCode::BackendError | ErrorCode::Timeout | ErrorCode::InvalidState
            ) {
                if let Ok(b) = self.backend(rec.backend) {
                    if let Ok(Recovered::NotRunning) = b.recover(&self.spec(rec)).await {
                        warn!(sandbox = %rec.id, error = %e, "sandbox lost during a request");
                        if let Err(e2) = self
                            .settle_lost(rec, SandboxState::Running, &e.message)
                            .await
                        {
                            warn!(sandbox = %rec.id, error = %e2, "could not settle a lost sandbox");
                        }
                    }
                }
            }
        }
        r
    }

    pub async fn usage(&self, ctx: &Ctx, id: &SandboxId) -> Result<Usage> {
        let rec = self.meta.get_for(&ctx.tenant, id).await?;
        self.backend(rec.backend)?.usage(id).await
    }

    /// Take a sandbox's slot exclusively (after checking the caller may see
    /// it) and read its record under the lock.
    async fn exclusive(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
    ) -> Result<(OwnedRwLockWriteGuard<()>, SandboxRecord)> {
        self.meta.get_for(&ctx.tenant, id).await?;
        let guard = self.slot(id).lock.clone().write_owned().await;
        let rec = self.meta.get(id).await?;
        let rec = self.ensure_local(ctx, rec).await?;
        Ok((guard, rec))
    }

    /// Persist the first step of a lifecycle operation (`from` -> `to`) and
    /// return what the operation needs: backend, spec, updated record.
    async fn begin(
        &self,
        rec: &SandboxRecord,
        from: SandboxState,
        to: SandboxState,
    ) -> Result<(Arc<dyn Backend>, SandboxSpec, SandboxRecord)> {
        rec.state.check_transition(to)?;
        let backend = self.backend(rec.backend)?.clone();
        let spec = self.spec(rec);
        let rec = self.transition(&rec.id, from, to, Patch::default()).await?;
        Ok((backend, spec, rec))
    }

    // ----- pause / resume ------------------------------------------------

    /// Explicit pause. `keep_memory` None follows the sandbox's policy.
    pub async fn pause(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        keep_memory: Option<bool>,
    ) -> Result<(SandboxRecord, OpTiming)> {
        let (guard, rec) = self.exclusive(ctx, id).await?;
        let keep = keep_memory.unwrap_or(rec.manifest.lifecycle.on_idle != OnIdle::PauseFilesystem);
        self.do_pause(ctx, rec, keep, "explicit", guard).await
    }

    async fn do_pause(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
        keep_memory: bool,
        why: &str,
        _guard: OwnedRwLockWriteGuard<()>,
    ) -> Result<(SandboxRecord, OpTiming)> {
        let t0 = std::time::Instant::now();
        let timer = self.metrics.op(Op::Pause, rec.backend);
        let (backend, spec, rec) = self
            .begin(&rec, SandboxState::Running, SandboxState::Pausing)
            .await?;
        failpoint::hit("pause.pausing");
        let stage = spec.dir.join(pause_recovery::STAGE);
        fresh_stage(&stage).await?;
        let tb = std::time::Instant::now();
        let artifacts = match backend.pause(&rec.id, &stage, keep_memory).await {
            Ok(a) => a,
            Err(e) => return Err(self.pause_failed(&rec, &spec, e).await),
        };
        let backend_ms = elapsed_ms(tb);
        failpoint::hit("pause.staged");
        let kind = if keep_memory {
            PauseKind::Memory
        } else {
            PauseKind::Filesystem
        };
        // The upload's snapshot id is recorded first: a daemon killed during
        // the upload finds out at restart whether it completed.
        let intent = Intent {
            snapshot: SnapshotId::generate(),
            kind,
            previous: rec.pause_snapshot.clone(),
        };
        // The backend has already stopped the sandbox: a failure from here
        // on (a full disk, the store) is settled like a crash, never left
        // in Pausing.
        if let Err(e) = pause_recovery::write_intent(&stage, &intent) {
            return Err(self.pause_failed(&rec, &spec, e).await);
        }
        failpoint::hit("pause.intent-written");
        let ts = std::time::Instant::now();
        let snap = match self
            .snapshots
            .put_as(
                intent.snapshot.clone(),
                &rec,
                SnapshotKind::Pause,
                &stage,
                &artifacts,
                None,
                &ctx.actor,
            )
            .await
        {
            Ok(s) => s,
            // Its state exists only in the stage directory: the settling
            // tries the upload once more, else falls back to an earlier
            // snapshot; only with nothing restorable is it Failed (the stage
            // kept for inspection).
            Err(e) => return Err(self.pause_failed(&rec, &spec, e).await),
        };
        let store_ms = elapsed_ms(ts);
        failpoint::hit("pause.stored");
        let rec = self
            .record_pause(&rec, &snap.id, kind, Some(&intent), None)
            .await?;
        let _ = tokio::fs::remove_dir_all(&stage).await;
        let timing = OpTiming {
            backend_ms,
            store_ms,
            total_ms: elapsed_ms(t0),
        };
        info!(sandbox = %rec.id, why, kind = kind.as_str(), ms = timing.total_ms, bytes = snap.raw_bytes, "paused");
        self.audit(
            ctx,
            "pause",
            rec.id.as_str(),
            serde_json::json!({"why": why, "kind": kind, "snapshot": snap.id, "raw_bytes": snap.raw_bytes, "stored_bytes": snap.stored_bytes}),
        )
        .await;
        timer.ok();
        Ok((rec, timing))
    }

    /// A backend pause failed: settle the sandbox on what is true now (it
    /// still runs, or what the pause saved, or an earlier snapshot).
    async fn pause_failed(&self, rec: &SandboxRecord, spec: &SandboxSpec, e: Error) -> Error {
        let backend = match self.backend(rec.backend) {
            Ok(b) => b.clone(),
            Err(e2) => return e2,
        };
        let why = format!("pause failed ({})", e.message);
        match self.settle_pause(rec, &backend, spec, &why).await {
            Ok((SandboxState::Running, _)) => Error::new(
                e.code,
                format!("pause failed, sandbox kept running: {}", e.message),
            ),
            Ok((_, reason)) => Error::backend(reason),
            Err(e2) => {
                let reason = format!("{why}; {}", e2.message);
                let _ = self
                    .transition(
                        &rec.id,
                        SandboxState::Pausing,
                        SandboxState::Failed,
                        Patch::reason(reason.clone()),
                    )
                    .await;
                Error::backend(reason)
            }
        }
    }

    pub async fn resume(&self, ctx: &Ctx, id: &SandboxId) -> Result<(SandboxRecord, OpTiming)> {
        let (guard, rec) = self.exclusive(ctx, id).await?;
        self.do_resume(ctx, rec, guard).await
    }

    async fn do_resume(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
        _guard: OwnedRwLockWriteGuard<()>,
    ) -> Result<(SandboxRecord, OpTiming)> {
        let t0 = std::time::Instant::now();
        let timer = self.metrics.op(Op::Resume, rec.backend);
        if let Some(c) = self.cluster() {
            rec.state.check_transition(SandboxState::Resuming)?;
            self.lease_for_start(&rec.id).await?;
            // State this node still holds from an older pause is stale when
            // another node ran the sandbox since: drop it, use the store.
            if !c.local_pause_is(&rec.id, rec.pause_snapshot.as_ref()) {
                if let Ok(b) = self.backend(rec.backend) {
                    let _ = b.destroy(&rec.id, &self.sandbox_dir(&rec.id)).await;
                }
            }
            c.note_local_pause(&rec.id, None);
        }
        // Mounts are checked against the allowed roots of now, not of create;
        // an image that is a host path (an old record) is refused. The
        // sandbox stays paused, its files intact.
        let checked = match self.checked_spec(&rec) {
            Ok(s) => s,
            Err(e) => {
                self.audit_refusal(ctx, "resume", rec.id.as_str(), &e).await;
                return Err(e.context("resume refused"));
            }
        };
        let (backend, _, rec) = self
            .begin(&rec, SandboxState::Paused, SandboxState::Resuming)
            .await?;
        let spec = checked;
        let restore_dir = spec.dir.join("resume-stage");
        let _ = tokio::fs::remove_dir_all(&restore_dir).await;
        let ts = std::time::Instant::now();
        let needs = backend.resume_needs_artifacts(&rec.id).await;
        let fetched = match rec.pause_snapshot.as_ref().filter(|_| needs) {
            Some(snap) => self
                .snapshots
                .restore(&rec.tenant, snap, &restore_dir)
                .await
                .map(|_| ()),
            None => tokio::fs::create_dir_all(&restore_dir)
                .await
                .map_err(Error::from),
        };
        let store_ms = elapsed_ms(ts);
        let tb = std::time::Instant::now();
        let result = match fetched {
            Ok(()) => backend.resume(&spec, &restore_dir).await,
            Err(e) => Err(e),
        };
        let backend_ms = elapsed_ms(tb);
        let _ = tokio::fs::remove_dir_all(&restore_dir).await;
        match result {
            Ok(()) => {
                self.touch(&rec.id);
                let rec = self
                    .transition(
                        &rec.id,
                        SandboxState::Resuming,
                        SandboxState::Running,
                        Patch {
                            reason: Some(None),
                            running_since_ms: Some(Some(now_ms())),
                            paused_at_ms: Some(None),
                            expires_at_ms: Some(None),
                            ..Default::default()
                        },
                    )
                    .await?;
                let timing = OpTiming {
                    backend_ms,
                    store_ms,
                    total_ms: elapsed_ms(t0),
                };
                info!(sandbox = %rec.id, ms = timing.total_ms, "resumed");
                self.audit(
                    ctx,
                    "resume",
                    rec.id.as_str(),
                    serde_json::json!({"ms": timing.total_ms}),
                )
                .await;
                timer.ok();
                Ok((rec, timing))
            }
            Err(e) => {
                // A snapshot that fails verification will never resume: say so
                // and stop. Anything else leaves the sandbox paused (its
                // snapshot untouched) so the next request can try again.
                let _ = backend.destroy(&rec.id, &spec.dir).await;
                let to = if e.code == ErrorCode::IntegrityError {
                    SandboxState::Failed
                } else {
                    SandboxState::Paused
                };
                let _ = self
                    .transition(
                        &rec.id,
                        SandboxState::Resuming,
                        to,
                        Patch::reason(format!("resume failed: {}", e.message)),
                    )
                    .await;
                Err(e.context("resume failed"))
            }
        }
    }

    // ----- destroy -------------------------------------------------------

    pub async fn destroy(&self, ctx: &Ctx, id: &SandboxId) -> Result<SandboxRecord> {
        let (guard, rec) = self.exclusive(ctx, id).await?;
        self.do_destroy(ctx, rec, "delete", guard).await
    }

    async fn do_destroy(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
        action: &str,
        _guard: OwnedRwLockWriteGuard<()>,
    ) -> Result<SandboxRecord> {
        let timer = self.metrics.op(Op::Destroy, rec.backend);
        rec.state.check_transition(SandboxState::Destroying)?;
        let rec = self
            .transition(
                &rec.id,
                rec.state,
                SandboxState::Destroying,
                Patch::default(),
            )
            .await?;
        let rec = self.finish_destroy(rec).await?;
        self.audit(ctx, action, rec.id.as_str(), serde_json::json!({}))
            .await;
        timer.ok();
        Ok(rec)
    }

    /// Destroying -> Destroyed: idempotent, so reconcile can finish it too.
    async fn finish_destroy(&self, rec: SandboxRecord) -> Result<SandboxRecord> {
        let spec = self.spec(&rec);
        if let Ok(b) = self.backend(rec.backend) {
            if let Err(e) = b.destroy(&rec.id, &spec.dir).await {
                let _ = self
                    .transition(
                        &rec.id,
                        SandboxState::Destroying,
                        SandboxState::Failed,
                        Patch::reason(format!("destroy failed: {}", e.message)),
                    )
                    .await;
                return Err(e);
            }
        }
        let _ = tokio::fs::remove_dir_all(&spec.dir).await;
        for snap in rec
            .pause_snapshot
            .iter()
            .chain(rec.checkpoint_snapshot.iter())
        {
            if let Err(e) = self.snapshots.delete(&rec.tenant, snap).await {
                if e.code != ErrorCode::NotFound {
                    warn!(sandbox = %rec.id, error = %e, "pause or checkpoint snapshot not deleted");
                }
            }
        }
        let rec = self
            .transition(
                &rec.id,
                SandboxState::Destroying,
                SandboxState::Destroyed,
                Patch {
                    running_ms: Some(rec.running_time_ms(now_ms())),
                    running_since_ms: Some(None),
                    expires_at_ms: Some(None),
                    pause_snapshot: Some(None),
                    ..Default::default()
                },
            )
            .await?;
        self.slots.lock().expect("slots lock").remove(&rec.id);
        Ok(rec)
    }

    // ----- snapshots, restore, fork ----------------------------------------

    /// Snapshot a sandbox's current state (resuming it first if it is paused).
    pub async fn snapshot(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        ttl: Option<Duration>,
    ) -> Result<SnapshotInfo> {
        if let Some(t) = ttl {
            if t < Duration::from_secs(1) || t > MAX_SNAPSHOT_TTL {
                return Err(Error::invalid(format!(
                    "ttl_secs: must be between 1 and {} (10 years)",
                    MAX_SNAPSHOT_TTL.as_secs()
                ))
                .with_field("ttl_secs"));
            }
        }
        // Make sure it runs, then take the slot exclusively.
        drop(self.running(ctx, id).await?);
        let slot = self.slot(id);
        let _guard = slot.lock.clone().write_owned().await;
        let rec = self.meta.get_for(&ctx.tenant, id).await?;
        if rec.state != SandboxState::Running {
            return Err(Error::state(format!("sandbox {id} is {}", rec.state)));
        }
        let timer = self.metrics.op(Op::Snapshot, rec.backend);
        let backend = self.backend(rec.backend)?.clone();
        let spec = self.spec(&rec);
        let stage = spec.dir.join("snapshot-stage");
        fresh_stage(&stage).await?;
        let result = async {
            let artifacts = backend.snapshot(id, &stage).await?;
            let ttl = ttl.unwrap_or(self.cfg.snapshot_ttl);
            self.snapshots
                .put(
                    &rec,
                    SnapshotKind::User,
                    &stage,
                    &artifacts,
                    Some(ttl),
                    &ctx.actor,
                )
                .await
        }
        .await;
        let _ = tokio::fs::remove_dir_all(&stage).await;
        self.touch(id);
        let snap = result?;
        self.audit(
            ctx,
            "snapshot",
            id.as_str(),
            serde_json::json!({"snapshot": snap.id, "raw_bytes": snap.raw_bytes}),
        )
        .await;
        timer.ok();
        Ok(snap)
    }

    /// Start a new sandbox from a snapshot. The manifest in force is the one
    /// given here, else the one the snapshot was taken under.
    /// A refused restore answers the error, leaves no sandbox record and
    /// nothing on disk, and is audited.
    pub async fn restore(
        &self,
        ctx: &Ctx,
        snapshot: &SnapshotId,
        manifest: Option<Manifest>,
    ) -> Result<SandboxRecord> {
        let r = self.do_restore(ctx, snapshot, manifest).await;
        if let Err(e) = &r {
            if e.code != ErrorCode::NotFound {
                self.audit_refusal(ctx, "restore", snapshot.as_str(), e)
                    .await;
            }
        }
        r
    }

    async fn do_restore(
        &self,
        ctx: &Ctx,
        snapshot: &SnapshotId,
        manifest: Option<Manifest>,
    ) -> Result<SandboxRecord> {
        if let Some(m) = &manifest {
            m.validate()?;
        }
        let info = self.snapshots.get(&ctx.tenant, snapshot).await?;
        let mut manifest = match manifest {
            Some(m) => m,
            None => info.manifest.clone(),
        };
        manifest.validate()?;
        crate::tenancy::check_manifest_secrets(&self.meta, &ctx.tenant, &manifest).await?;
        crate::mounts::resolve(&manifest, &self.cfg.allow_mounts)?;
        match manifest.backend {
            Some(b) if b != info.backend => {
                return Err(Error::invalid(format!(
                    "snapshot {snapshot} was taken on the {} backend, manifest asks for {b}",
                    info.backend
                ))
                .with_field("backend"))
            }
            _ => manifest.backend = Some(info.backend),
        }
        let timer = self.metrics.op(Op::Restore, info.backend);
        let backend = self.backend(info.backend)?.clone();
        let id = SandboxId::generate();
        let slot = self.slot(&id);
        let _guard = slot.lock.clone().write_owned().await;
        let rec = self
            .meta
            .insert_sandbox(&id, &ctx.tenant, &manifest, info.backend, Some(snapshot))
            .await?;
        let checked = self.checked_spec(&rec);
        let spec = self.spec(&rec);
        let result = async {
            self.lease_for_start(&id).await?;
            let checked = checked?;
            tokio::fs::create_dir_all(&spec.dir).await?;
            let stage = spec.dir.join("restore-stage");
            self.snapshots
                .restore(&ctx.tenant, snapshot, &stage)
                .await?;
            let r = backend.restore(&checked, &stage).await;
            let _ = tokio::fs::remove_dir_all(&stage).await;
            r
        }
        .await;
        let rec = self
            .finish_start(ctx, rec, &spec, result, "restore")
            .await?;
        self.audit(
            ctx,
            "restore",
            id.as_str(),
            serde_json::json!({"snapshot": snapshot}),
        )
        .await;
        timer.ok();
        Ok(rec)
    }

    /// Fork: take a fresh snapshot of the sandbox's *current* state, then
    /// restore it `count` times.
    pub async fn fork(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        count: u32,
    ) -> Result<(SnapshotInfo, Vec<SandboxRecord>)> {
        if count == 0 || count > 64 {
            return Err(Error::invalid("count must be between 1 and 64").with_field("count"));
        }
        let snap = self.snapshot(ctx, id, None).await?;
        let mut children = Vec::with_capacity(count as usize);
        for _ in 0..count {
            match self.restore(ctx, &snap.id, None).await {
                Ok(c) => children.push(c),
                Err(e) => {
                    // All or nothing: the children made so far were never
                    // handed to the client; they and the fork's snapshot go.
                    for c in &children {
                        self.discard_child(ctx, &c.id).await;
                    }
                    if let Err(d) = self.snapshots.delete(&ctx.tenant, &snap.id).await {
                        warn!(snapshot = %snap.id, error = %d, "refused fork's snapshot not deleted");
                    }
                    return Err(e.context("fork refused"));
                }
            }
        }
        let ids: Vec<String> = children.iter().map(|c| c.id.to_string()).collect();
        let detail = serde_json::json!({"snapshot": snap.id, "children": ids});
        self.audit(ctx, "fork", id.as_str(), detail).await;
        Ok((snap, children))
    }

    /// Destroy a fork child that was never handed to a client and remove
    /// its record (kept, Destroyed or Failed, when that fails).
    async fn discard_child(&self, ctx: &Ctx, id: &SandboxId) {
        let slot = self.slot(id);
        let guard = slot.lock.clone().write_owned().await;
        let r = match self.meta.get(id).await {
            Ok(rec) => self.do_destroy(ctx, rec, "fork_rollback", guard).await,
            Err(e) => Err(e),
        };
        match r {
            Ok(_) => {
                if let Err(e) = self.meta.discard(id, SandboxState::Destroyed).await {
                    warn!(sandbox = %id, error = %e, "rolled-back fork child not discarded");
                }
            }
            Err(e) => warn!(sandbox = %id, error = %e, "fork child not rolled back"),
        }
    }

    pub async fn list_snapshots(&self, ctx: &Ctx) -> Result<Vec<SnapshotInfo>> {
        self.snapshots.list(&ctx.tenant).await
    }

    pub async fn get_snapshot(&self, ctx: &Ctx, id: &SnapshotId) -> Result<SnapshotInfo> {
        self.snapshots.get(&ctx.tenant, id).await
    }

    pub async fn delete_snapshot(&self, ctx: &Ctx, id: &SnapshotId) -> Result<()> {
        let info = self.snapshots.get(&ctx.tenant, id).await?;
        if info.kind == SnapshotKind::Pause {
            // A paused sandbox's own state: deleting it would lose the sandbox.
            let owner = self
                .meta
                .list(Some(&ctx.tenant), None)
                .await?
                .into_iter()
                .find(|r| r.pause_snapshot.as_ref() == Some(id) && !r.state.is_terminal());
            if let Some(owner) = owner {
                return Err(Error::state(format!(
                    "snapshot {id} holds the state of sandbox {}; destroy the sandbox instead",
                    owner.id
                )));
            }
        }
        self.snapshots.delete(&ctx.tenant, id).await?;
        self.audit(
            ctx,
            "delete",
            id.as_str(),
            serde_json::json!({"object": "snapshot"}),
        )
        .await;
        Ok(())
    }

    /// Write snapshot `id` as one self-contained encrypted file under the
    /// data dir and return its path; the caller streams it and removes it.
    pub async fn export_snapshot(&self, ctx: &Ctx, id: &SnapshotId) -> Result<PathBuf> {
        let dir = self.cfg.data_dir.join("transfers");
        tokio::fs::create_dir_all(&dir).await?;
        let out = dir.join(format!("export-{}-{}", id, uuid_like()));
        self.snapshots
            .store()
            .export_snapshot(&ctx.tenant, id, &out, None)
            .await?;
        self.audit(
            ctx,
            "download",
            id.as_str(),
            serde_json::json!({"object": "snapshot", "as": "export"}),
        )
        .await;
        Ok(out)
    }

    /// Import an export file (already on local disk) into the caller's tenant.
    pub async fn import_snapshot(&self, ctx: &Ctx, file: &std::path::Path) -> Result<SnapshotInfo> {
        let rec = self
            .snapshots
            .store()
            .import_snapshot(&ctx.tenant, file, None)
            .await?;
        let info = self.snapshots.get(&ctx.tenant, &rec.id).await?;
        self.audit(
            ctx,
            "import",
            rec.id.as_str(),
            serde_json::json!({"raw_bytes": info.raw_bytes}),
        )
        .await;
        Ok(info)
    }

    /// A fresh path for an upload being received.
    pub async fn transfer_path(&self, what: &str) -> Result<PathBuf> {
        let dir = self.cfg.data_dir.join("transfers");
        tokio::fs::create_dir_all(&dir).await?;
        Ok(dir.join(format!("{what}-{}", uuid_like())))
    }

    // ----- reconcile and the reaper ------------------------------------------

    /// Resolve what a killed daemon left behind. Called once at start, before serving.
    pub async fn reconcile(&self) -> Result<ReconcileReport> {
        let mut report = ReconcileReport::default();
        let mut live = self.meta.list_live().await?;
        if let Some(c) = self.cluster() {
            // Only what ran here: its directory is on this node and no other
            // node holds it. Take the lease (from this node's previous
            // incarnation) before touching it.
            let mut mine = Vec::new();
            for rec in live {
                if !self.sandbox_dir(&rec.id).exists() {
                    continue;
                }
                if rec.state == SandboxState::Paused || rec.state == SandboxState::Failed {
                    mine.push(rec);
                    continue;
                }
                if let stasis_meta::lease::Acquire::Acquired { fence, .. } = self
                    .meta
                    .lease_acquire(&rec.id, c.node_id(), c.lease_ms())
                    .await?
                {
                    c.hold(&rec.id, fence);
                    mine.push(rec);
                }
            }
            live = mine;
        }
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
                Ok(match rec.state {
                    SandboxState::Creating => {
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
                    SandboxState::Running => match backend.recover(&spec).await? {
                        Recovered::Running => {
                            self.touch(&rec.id);
                            SandboxState::Running
                        }
                        Recovered::NotRunning => {
                            self.settle_lost(rec, SandboxState::Running, "daemon restarted")
                                .await?
                        }
                    },
                    SandboxState::Pausing => {
                        self.settle_pause(rec, &backend, &spec, "daemon stopped during a pause")
                            .await?
                            .0
                    }
                    SandboxState::Resuming => match backend.recover(&spec).await? {
                        Recovered::Running => {
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
                        Recovered::NotRunning => {
                            self.transition(
                                &rec.id,
                                SandboxState::Resuming,
                                SandboxState::Paused,
                                Patch::reason("daemon stopped during a resume; still paused"),
                            )
                            .await?
                            .state
                        }
                    },
                    SandboxState::Paused => {
                        // Nothing should run: a process-backend sandbox paused
                        // with memory is still frozen under its supervisor
                        // (recover reports it not running; the next resume
                        // thaws it). A running one contradicts the record.
                        let r = backend.recover(&spec).await?;
                        if r == Recovered::Running {
                            let _ = backend.destroy(&rec.id, &spec.dir).await;
                        }
                        self.tidy_paused(rec, &spec).await;
                        SandboxState::Paused
                    }
                    SandboxState::Destroying => self.finish_destroy(rec.clone()).await?.state,
                    SandboxState::Failed => {
                        let _ = backend.destroy(&rec.id, &spec.dir).await;
                        SandboxState::Failed
                    }
                    SandboxState::Destroyed => SandboxState::Destroyed,
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

    /// A sandbox whose compute is gone (`why`: a daemon restart, a dead VM).
    /// If its writable layer survives on disk (process backend) it becomes a
    /// filesystem-only pause; otherwise it failed (with its last pause
    /// snapshot, if any, named).
    async fn settle_lost(
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

    /// One pass of the idle/TTL/lifetime policies. Returns what it did.
    pub async fn reap_once(&self) -> Result<Vec<(SandboxId, &'static str)>> {
        let now = now_ms();
        let mut done = Vec::new();
        for rec in self.meta.list_live().await? {
            let ctx = Ctx::system(rec.tenant.clone());
            let slot = self.slot(&rec.id);
            match rec.state {
                SandboxState::Running => {
                    // In a cluster, only the node that runs it applies its policies.
                    if self.cluster().is_some_and(|c| c.fence(&rec.id).is_none()) {
                        continue;
                    }
                    let policy = &rec.manifest.lifecycle;
                    if policy.checkpoint_secs > 0 {
                        let last = rec
                            .checkpoint_at_ms
                            .or(rec.running_since_ms)
                            .unwrap_or(rec.created_at_ms);
                        if policy.checkpoint_due(now.saturating_sub(last)) {
                            if let Ok(guard) = slot.lock.clone().try_write_owned() {
                                match self.checkpoint(&ctx, &rec.id, guard).await {
                                    Ok(_) => done.push((rec.id.clone(), "checkpointed")),
                                    Err(e) => {
                                        warn!(sandbox = %rec.id, error = %e, "checkpoint failed")
                                    }
                                }
                            }
                        }
                    }
                    let over_lifetime = policy.lifetime_over(rec.running_time_ms(now));
                    let idle_ms = now.saturating_sub(slot.last_active_ms.load(Ordering::Relaxed));
                    let idle = policy.idle_over(idle_ms);
                    if !over_lifetime && !idle {
                        continue;
                    }
                    // Never under a request in flight.
                    let Ok(guard) = slot.lock.clone().try_write_owned() else {
                        continue;
                    };
                    let rec = self.meta.get(&rec.id).await?;
                    if rec.state != SandboxState::Running {
                        continue;
                    }
                    let r = if over_lifetime {
                        self.do_destroy(&ctx, rec.clone(), "expire", guard)
                            .await
                            .map(|_| "lifetime_expired")
                    } else {
                        match policy.on_idle {
                            OnIdle::Pause => self
                                .do_pause(&ctx, rec.clone(), true, "idle", guard)
                                .await
                                .map(|_| "idle_paused"),
                            OnIdle::PauseFilesystem => self
                                .do_pause(&ctx, rec.clone(), false, "idle", guard)
                                .await
                                .map(|_| "idle_paused_filesystem"),
                            OnIdle::Destroy => self
                                .do_destroy(&ctx, rec.clone(), "expire", guard)
                                .await
                                .map(|_| "idle_destroyed"),
                            OnIdle::Nothing => continue,
                        }
                    };
                    match r {
                        Ok(what) => {
                            self.metrics.reaped(what);
                            done.push((rec.id.clone(), what))
                        }
                        Err(e) => warn!(sandbox = %rec.id, error = %e, "idle policy failed"),
                    }
                }
                SandboxState::Paused if rec.expires_at_ms.is_some_and(|t| t <= now) => {
                    let Ok(guard) = slot.lock.clone().try_write_owned() else {
                        continue;
                    };
                    let rec = self.meta.get(&rec.id).await?;
                    if rec.state != SandboxState::Paused {
                        continue;
                    }
                    match self.do_destroy(&ctx, rec.clone(), "expire", guard).await {
                        Ok(_) => {
                            self.metrics.reaped("ttl_expired");
                            done.push((rec.id.clone(), "ttl_expired"))
                        }
                        Err(e) => warn!(sandbox = %rec.id, error = %e, "TTL destroy failed"),
                    }
                }
                _ => {}
            }
        }
        if now - self.last_gc_ms.load(Ordering::Relaxed) >= self.cfg.gc_interval.as_millis() as i64
        {
            self.last_gc_ms.store(now, Ordering::Relaxed);
            if let Err(e) = self.snapshots.gc().await {
                warn!(error = %e, "snapshot store GC failed");
            }
        }
        Ok(done)
    }

    /// Periodic checkpoint (`lifecycle.checkpoint_secs`): snapshot the
    /// running sandbox into the store without stopping it for longer than
    /// the backend needs, record it (fenced), drop the previous one. Does not
    /// count as activity, so it never keeps a sandbox from idling.
    async fn checkpoint(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        _guard: OwnedRwLockWriteGuard<()>,
    ) -> Result<SnapshotInfo> {
        let rec = self.meta.get(id).await?;
        if rec.state != SandboxState::Running {
            return Err(Error::state(format!("sandbox {id} is {}", rec.state)));
        }
        let backend = self.backend(rec.backend)?.clone();
        let spec = self.spec(&rec);
        let stage = spec.dir.join("checkpoint-stage");
        fresh_stage(&stage).await?;
        let at = now_ms();
        let result = async {
            let artifacts = backend.snapshot(id, &stage).await?;
            self.snapshots
                .put(
                    &rec,
                    SnapshotKind::User,
                    &stage,
                    &artifacts,
                    Some(self.cfg.snapshot_ttl),
                    "checkpoint",
                )
                .await
        }
        .await;
        let _ = tokio::fs::remove_dir_all(&stage).await;
        let snap = result?;
        let fence = self.cluster().and_then(|c| c.fence(id));
        match self
            .meta
            .set_checkpoint(id, &snap.id, at, fence.as_ref())
            .await
        {
            Ok(Some(old)) => {
                if let Err(e) = self.snapshots.delete(&rec.tenant, &old).await {
                    warn!(sandbox = %id, snapshot = %old, error = %e, "old checkpoint not deleted");
                }
            }
            Ok(None) => {}
            Err(e) => {
                let _ = self.snapshots.delete(&rec.tenant, &snap.id).await;
                return Err(e);
            }
        }
        self.audit(
            ctx,
            "checkpoint",
            id.as_str(),
            serde_json::json!({"snapshot": snap.id, "raw_bytes": snap.raw_bytes}),
        )
        .await;
        Ok(snap)
    }

    /// In a cluster: heartbeat (renewing this node's leases) every third
    /// of the lease; a sandbox whose lease another node took is stopped here
    /// at once, without any state write (its fence is stale anyway).
    pub fn spawn_heartbeat(self: &Arc<Self>) -> Option<tokio::task::JoinHandle<()>> {
        let c = self.cluster()?.clone();
        let me = self.clone();
        Some(tokio::spawn(async move {
            let every = Duration::from_millis((c.lease_ms() / 3).max(100) as u64);
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

    /// Run the reaper until the returned handle is aborted.
    pub fn spawn_reaper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.cfg.reaper_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = me.reap_once().await {
                    warn!(error = %e, "reaper pass failed");
                }
            }
        })
    }
}

#[derive(Debug, Default, Serialize)]
pub struct ReconcileReport {
    pub changed: Vec<(SandboxId, SandboxState, SandboxState)>,
    pub errors: Vec<(SandboxId, String)>,
    pub skipped: usize,
}

/// A stage directory in the sandbox directory, which a jailed QEMU may write
/// too: cleared without following what it finds, made by `mkdir`, checked
/// to be the daemon's own directory (see `stasis_backend::fsafe`).
async fn fresh_stage(stage: &std::path::Path) -> Result<()> {
    let s = stage.to_path_buf();
    tokio::task::spawn_blocking(move || stasis_backend::fsafe::fresh_dir(&s))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}
