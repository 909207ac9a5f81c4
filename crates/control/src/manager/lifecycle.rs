//! A sandbox's life: create, pause, resume, destroy, and waiting for a
//! sandbox to run (resuming it transparently). Each operation holds the
//! sandbox's slot exclusively and persists its first state change before it
//! asks the backend to act (see the crash-safety note of the manager).

use std::sync::Arc;

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard};
use tracing::{info, warn};

use stasis_backend::{failpoint, Backend, SandboxSpec};
use stasis_core::{
    now_ms, Error, ErrorCode, Manifest, OnIdle, Result, SandboxId, SandboxState, SnapshotId,
};
use stasis_meta::{Patch, PauseKind, SandboxRecord};

use super::pause_recovery::{self, Intent};
use super::stage::{staged, Cleanup, Prep};
use super::{elapsed_ms, Ctx, Manager, OpTiming};
use crate::metrics::Op;
use crate::snapshots::SnapshotKind;

impl Manager {
    /// Create a sandbox. A refused create answers the error, leaves no
    /// sandbox record and nothing on disk, and is audited.
    pub async fn create(&self, ctx: &Ctx, manifest: Manifest) -> Result<SandboxRecord> {
        self.check_region(ctx, "create", "sandboxes").await?;
        self.refuse_if_draining("create")?;
        let r = self.do_create(ctx, manifest).await;
        if let Err(e) = &r {
            self.audit_refusal(ctx, "create", "sandboxes", e).await;
        }
        r
    }

    async fn do_create(&self, ctx: &Ctx, mut manifest: Manifest) -> Result<SandboxRecord> {
        manifest.validate()?;
        if let Some(e) = self.egress() {
            e.check(&manifest.network).await?;
        }
        self.pin_image(ctx, &mut manifest, true).await?;
        if manifest.autostart && manifest.command.is_none() {
            return Err(Error::new(
                ErrorCode::InvalidManifest,
                "autostart: the sandbox has no default command to start (its image has no \
                 ENTRYPOINT or CMD and its manifest no command)",
            )
            .with_field("autostart"));
        }
        crate::tenancy::check_manifest_secrets(&self.meta, &ctx.tenant, &manifest).await?;
        crate::mounts::resolve(&manifest, &self.cfg.allow_mounts)?;
        let kind = *manifest.backend.get_or_insert(self.cfg.default_backend);
        if let (stasis_core::BackendKind::Microvm, Some(image), Some(images)) =
            (kind, manifest.image.as_deref(), self.images.get())
        {
            if image.starts_with("sha256:") {
                images.ensure_guest(image).await?;
            }
        }
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
        let guard = slot.lock.clone().write_owned().await;
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
        // The session takes the slot's shared lock.
        drop(guard);
        if rec.manifest.autostart {
            self.autostart(ctx, &rec.id).await?;
        }
        timer.ok();
        Ok(rec)
    }

    /// Authorize and pin a manifest's `image` for this tenant: a name or id
    /// of the tenant's own or a public image becomes that image's id
    /// (with `defaults`, the image's ENV, WORKDIR, USER and ENTRYPOINT +
    /// CMD fill what the manifest leaves unset: `env`, `workdir`, `user`,
    /// `command`); another tenant's image answers as one that does not
    /// exist. Every path on which a caller's manifest enters (create,
    /// restore, create from a template) goes through here: the backends
    /// load a `sha256:` id with no tenant check of their own.
    pub(super) async fn pin_image(
        &self,
        ctx: &Ctx,
        manifest: &mut Manifest,
        defaults: bool,
    ) -> Result<()> {
        let Some(image) = manifest.image.clone() else {
            return Ok(());
        };
        let Some(images) = self.images.get() else {
            if image.starts_with("sha256:") {
                return Err(Error::new(
                    ErrorCode::InvalidManifest,
                    format!("image: {image:?} not found"),
                )
                .with_field("image"));
            }
            return Ok(());
        };
        let Some((id, config)) = images.pin(&ctx.tenant, &image).await? else {
            return Ok(());
        };
        manifest.image = Some(id);
        if defaults {
            // The image's ENV and WORKDIR are defaults the manifest overrides.
            for kv in &config.env {
                if let Some((k, v)) = kv.split_once('=') {
                    manifest
                        .env
                        .entry(k.to_string())
                        .or_insert_with(|| v.to_string());
                }
            }
            if !config.working_dir.is_empty() && manifest.workdir == Manifest::default().workdir {
                manifest.workdir = config.working_dir.clone();
            }
            if manifest.user.is_none() && !config.user.is_empty() {
                manifest.user = Some(config.user.clone());
            }
            let command = config.default_command();
            if manifest.command.is_none() && !command.is_empty() {
                manifest.command = Some(command);
            }
        }
        manifest.validate()
    }

    /// Settle a sandbox in `Creating` after its backend start: Running on
    /// success; on failure everything is removed and the record says why.
    pub(super) async fn finish_start(
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

    /// Make sure the caller's sandbox runs, resuming it when it is paused
    /// (E2B's connect): its record, and whether it was not running before.
    pub async fn ensure_running(&self, ctx: &Ctx, id: &SandboxId) -> Result<(SandboxRecord, bool)> {
        let before = self.meta.get_for(&ctx.tenant, id).await?.state;
        let (_held, rec) = self.running(ctx, id).await?;
        Ok((rec, before != SandboxState::Running))
    }

    /// Wait until the sandbox is running (resuming it transparently when it
    /// is paused) and hold it running for the lifetime of the returned guard.
    pub(super) async fn running(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
    ) -> Result<(OwnedRwLockReadGuard<()>, SandboxRecord)> {
        let slot = self.slot(id);
        for _ in 0..5 {
            let rec = self.meta.get_for(&ctx.tenant, id).await?;
            match rec.state {
                SandboxState::Running => {
                    if self.cluster().is_some_and(|c| !c.serves(id)) {
                        let guard = slot.lock.clone().write_owned().await;
                        let rec = self.meta.get(id).await?;
                        self.ensure_local_held(ctx, rec).await?;
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

    /// Take a sandbox's slot exclusively (after checking the caller may see
    /// it) and read its record under the lock.
    pub(super) async fn exclusive(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
    ) -> Result<(OwnedRwLockWriteGuard<()>, SandboxRecord)> {
        self.meta.get_for(&ctx.tenant, id).await?;
        let guard = self.slot(id).lock.clone().write_owned().await;
        let rec = self.meta.get(id).await?;
        let rec = self.ensure_local_held(ctx, rec).await?;
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

    /// Explicit pause. `keep_memory` None follows the sandbox's policy; an
    /// explicit pause frees the compute unless `standby` asks to keep it for
    /// the sandbox's standby window (see [`Manager::standby_window`]).
    pub async fn pause(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        keep_memory: Option<bool>,
    ) -> Result<(SandboxRecord, OpTiming)> {
        self.pause_with(ctx, id, keep_memory, false).await
    }

    /// [`Manager::pause`], keeping the compute in standby when `standby`.
    pub async fn pause_with(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        keep_memory: Option<bool>,
        standby: bool,
    ) -> Result<(SandboxRecord, OpTiming)> {
        self.check_region(ctx, "pause", id.as_str()).await?;
        let (guard, rec) = self.exclusive(ctx, id).await?;
        let keep = keep_memory.unwrap_or(rec.manifest.lifecycle.on_idle != OnIdle::PauseFilesystem);
        let standby = self.standby_window(&rec).filter(|_| standby && keep);
        self.do_pause(ctx, rec, keep, standby, "explicit", guard)
            .await
    }

    /// How long a memory pause of `rec` keeps its stopped compute: its
    /// manifest's `lifecycle.standby_secs`, else the daemon's default; None
    /// when that is 0.
    pub(super) fn standby_window(&self, rec: &SandboxRecord) -> Option<std::time::Duration> {
        let d = match rec.manifest.lifecycle.standby_secs {
            Some(s) => std::time::Duration::from_secs(s),
            None => self.cfg.standby,
        };
        (!d.is_zero()).then_some(d)
    }

    pub(super) async fn do_pause(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
        keep_memory: bool,
        standby: Option<std::time::Duration>,
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
        let kind = if keep_memory {
            PauseKind::Memory
        } else {
            PauseKind::Filesystem
        };
        // The stage outlives a failed pause: settling it may still upload it.
        let work = async {
            let tb = std::time::Instant::now();
            let paused = match standby.filter(|_| keep_memory) {
                Some(d) => backend.pause_standby(&rec.id, &stage, d).await,
                None => backend.pause(&rec.id, &stage, keep_memory).await,
            };
            let artifacts = match paused {
                Ok(a) => a,
                Err(e) => return Err(self.pause_failed(&rec, &spec, e).await),
            };
            let backend_ms = elapsed_ms(tb);
            failpoint::hit("pause.staged");
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
            Ok((rec, snap, backend_ms, store_ms))
        };
        let (rec, snap, backend_ms, store_ms) =
            staged(&stage, Prep::Fresh, Cleanup::OnSuccess, work).await?;
        let timing = OpTiming {
            backend_ms,
            store_ms,
            total_ms: elapsed_ms(t0),
            breakdown: backend.op_timings(&rec.id),
        };
        info!(sandbox = %rec.id, why, kind = kind.as_str(), ms = timing.total_ms, bytes = snap.raw_bytes, standby = standby.is_some(), "paused");
        self.audit(
            ctx,
            "pause",
            rec.id.as_str(),
            serde_json::json!({"why": why, "kind": kind, "snapshot": snap.id, "raw_bytes": snap.raw_bytes, "stored_bytes": snap.stored_bytes, "new_stored_bytes": snap.new_stored_bytes, "standby": standby.map(|d| d.as_secs())}),
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
        self.check_region(ctx, "resume", id.as_str()).await?;
        let (guard, rec) = self.exclusive(ctx, id).await?;
        self.do_resume(ctx, rec, guard).await
    }

    async fn do_resume(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
        _guard: OwnedRwLockWriteGuard<()>,
    ) -> Result<(SandboxRecord, OpTiming)> {
        self.refuse_if_draining("resume")?;
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
        let (mut store_ms, mut backend_ms, mut fetched) = (0, 0, true);
        let work = async {
            let ts = std::time::Instant::now();
            let needs = match rec.pause_snapshot.as_ref() {
                Some(snap) => backend.resume_needs_artifacts(&spec, snap).await,
                None => true,
            };
            fetched = needs;
            let got = match rec.pause_snapshot.as_ref().filter(|_| needs) {
                Some(snap) => self
                    .snapshots
                    .restore(&rec.tenant, snap, &restore_dir)
                    .await
                    .map(|_| ()),
                None => tokio::fs::create_dir_all(&restore_dir)
                    .await
                    .map_err(Error::from),
            };
            store_ms = elapsed_ms(ts);
            got?;
            let tb = std::time::Instant::now();
            let r = backend.resume(&spec, &restore_dir).await;
            backend_ms = elapsed_ms(tb);
            r
        };
        let result = staged(&restore_dir, Prep::Clear, Cleanup::Always, work).await;
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
                let rec = self.renew_lifetime(ctx, rec).await;
                let timing = OpTiming {
                    backend_ms,
                    store_ms,
                    total_ms: elapsed_ms(t0),
                    breakdown: backend.op_timings(&rec.id),
                };
                let path = resume_path(&timing, fetched);
                self.metrics.resumed_by(path);
                info!(sandbox = %rec.id, ms = timing.total_ms, path, "resumed");
                self.audit(
                    ctx,
                    "resume",
                    rec.id.as_str(),
                    serde_json::json!({"ms": timing.total_ms, "path": path}),
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

    /// Drop what this node holds of a paused sandbox beyond its stored
    /// snapshot (standby, local pause files): frees the node's RAM and disk;
    /// its next resume comes from the store. Audited.
    pub async fn evict(&self, ctx: &Ctx, id: &SandboxId) -> Result<SandboxRecord> {
        let (guard, rec) = self.exclusive(ctx, id).await?;
        self.do_evict(ctx, rec, serde_json::json!({}), guard).await
    }

    /// [`Manager::evict`] under the sandbox's exclusive lock (`_guard`),
    /// audited with `detail`.
    pub(super) async fn do_evict(
        &self,
        ctx: &Ctx,
        rec: SandboxRecord,
        detail: serde_json::Value,
        _guard: OwnedRwLockWriteGuard<()>,
    ) -> Result<SandboxRecord> {
        let id = &rec.id;
        if rec.state != SandboxState::Paused {
            return Err(Error::state(format!(
                "sandbox {id} is {}: only a paused sandbox's node state can be dropped",
                rec.state
            )));
        }
        let backend = self.backend(rec.backend)?.clone();
        backend.evict(&self.spec(&rec)).await?;
        self.forget_local(&rec.id);
        if let Some(c) = self.cluster() {
            c.note_local_pause(&rec.id, None);
        }
        self.audit(ctx, "evict", rec.id.as_str(), detail).await;
        if !backend.memory_survives_release() && rec.pause_kind == Some(PauseKind::Memory) {
            return Ok(self
                .pause_downgraded(&rec.id, "it was evicted")
                .await
                .unwrap_or(rec));
        }
        Ok(rec)
    }

    /// What the sandbox holds in standby on this node (a paused sandbox
    /// whose stopped compute is kept; see `lifecycle.standby_secs`).
    pub fn standby_of(&self, rec: &SandboxRecord) -> Option<stasis_backend::Standby> {
        if rec.state != SandboxState::Paused {
            return None;
        }
        self.backend(rec.backend).ok()?.standby(&rec.id)
    }

    /// Every sandbox this node holds in standby.
    pub fn standby_all(&self) -> Vec<(SandboxId, stasis_backend::Standby)> {
        self.backends
            .values()
            .flat_map(|b| b.standby_all())
            .collect()
    }

    /// Destroy a sandbox. Idempotent: an already destroyed sandbox is
    /// answered with its record, unchanged (an unknown id stays not found).
    pub async fn destroy(&self, ctx: &Ctx, id: &SandboxId) -> Result<SandboxRecord> {
        let rec = self.meta.get_for(&ctx.tenant, id).await?;
        if rec.state == SandboxState::Destroyed {
            return Ok(rec);
        }
        let (guard, rec) = self.exclusive(ctx, id).await?;
        if rec.state == SandboxState::Destroyed {
            return Ok(rec);
        }
        self.do_destroy(ctx, rec, "delete", guard).await
    }

    pub(super) async fn do_destroy(
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
    pub(super) async fn finish_destroy(&self, rec: SandboxRecord) -> Result<SandboxRecord> {
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
                    // Both were deleted from the store above: the record
                    // must not name them.
                    pause_snapshot: Some(None),
                    checkpoint_snapshot: Some(None),
                    checkpoint_at_ms: Some(None),
                    ..Default::default()
                },
            )
            .await?;
        self.slots.lock().expect("slots lock").remove(&rec.id);
        Ok(rec)
    }
}

/// The way a resume went, for the metrics: the backend's own word
/// (`path_<name>` in its breakdown), else whether the store was read.
fn resume_path(t: &OpTiming, fetched: bool) -> &'static str {
    crate::metrics::RESUME_PATHS
        .into_iter()
        .find(|p| t.breakdown.contains_key(&format!("path_{p}")))
        .unwrap_or(if fetched { "store" } else { "local" })
}
