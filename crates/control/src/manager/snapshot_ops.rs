//! A sandbox's state as a snapshot and snapshots as new sandboxes:
//! snapshot (on request), checkpoint (periodic, for takeover), restore, and
//! fork (a snapshot restored `count` times, all or nothing).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedRwLockWriteGuard;
use tracing::warn;

use stasis_backend::Backend;
use stasis_core::{
    now_ms, Error, ErrorCode, Manifest, Result, SandboxId, SandboxState, SnapshotId,
};
use stasis_meta::SandboxRecord;

use super::stage::{staged, Cleanup, Prep};
use super::{Ctx, Manager};
use crate::metrics::Op;
use crate::snapshots::{SnapshotInfo, SnapshotKind};

/// Longest TTL of a user snapshot (`ttl_secs`): 10 years.
pub const MAX_SNAPSHOT_TTL: Duration = Duration::from_secs(3650 * 24 * 3600);

impl Manager {
    /// Snapshot a sandbox's current state (resuming it first if it is paused).
    pub async fn snapshot(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        ttl: Option<Duration>,
    ) -> Result<SnapshotInfo> {
        self.check_region(ctx, "snapshot", id.as_str()).await?;
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
        let ttl = ttl.unwrap_or(self.cfg.snapshot_ttl);
        let work = async {
            let r = self
                .store_snapshot(&backend, &rec, &stage, ttl, &ctx.actor)
                .await;
            self.touch(id);
            r
        };
        let snap = staged(&stage, Prep::Fresh, Cleanup::Always, work).await?;
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
        self.check_region(ctx, "restore", snapshot.as_str()).await?;
        self.refuse_if_draining("restore")?;
        let r = self.do_restore(ctx, snapshot, manifest).await;
        if let Err(e) = &r {
            if e.code != ErrorCode::NotFound {
                self.audit_refusal(ctx, "restore", snapshot.as_str(), e)
                    .await;
            }
        }
        r
    }

    pub(super) async fn do_restore(
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
        // A manifest given here may name another image than the snapshot's
        // (pinned and authorized when its sandbox was created): it must be
        // one this tenant may use, as at create.
        if manifest.image != info.manifest.image {
            self.pin_image(ctx, &mut manifest, false).await?;
        }
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
            let work = async {
                // A RAM image this node keeps for an earlier restore of the
                // snapshot (a fork's siblings) is linked, not fetched.
                let reuse = |partial: &Path| backend.kept_artifacts(&checked, partial);
                self.snapshots
                    .restore_reusing(&ctx.tenant, snapshot, &stage, &reuse)
                    .await?;
                backend.restore(&checked, &stage).await
            };
            staged(&stage, Prep::AsIs, Cleanup::Always, work).await
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
        self.refuse_if_draining("fork")?;
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

    /// Periodic checkpoint (`lifecycle.checkpoint_secs`): snapshot the
    /// running sandbox into the store without stopping it for longer than
    /// the backend needs, record it (fenced), drop the previous one. Does not
    /// count as activity, so it never keeps a sandbox from idling.
    pub(super) async fn checkpoint(
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
        let work = async {
            let at = now_ms();
            let snap = self
                .store_snapshot(&backend, &rec, &stage, self.cfg.snapshot_ttl, "checkpoint")
                .await?;
            Ok((snap, at))
        };
        let (snap, at) = staged(&stage, Prep::Fresh, Cleanup::Always, work).await?;
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

    /// The backend's snapshot of a running sandbox, written into `stage`,
    /// put in the store as a user snapshot kept `ttl` (`actor`: who the
    /// store records).
    async fn store_snapshot(
        &self,
        backend: &Arc<dyn Backend>,
        rec: &SandboxRecord,
        stage: &std::path::Path,
        ttl: Duration,
        actor: &str,
    ) -> Result<SnapshotInfo> {
        let artifacts = backend.snapshot(&rec.id, stage).await?;
        self.snapshots
            .put(rec, SnapshotKind::User, stage, &artifacts, Some(ttl), actor)
            .await
    }
}
