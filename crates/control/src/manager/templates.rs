//! Templates as the manager keeps them: publish a sandbox's current state
//! (memory and disk) as the next version of a name, after the secret scan;
//! list, read and delete versions; start a sandbox from one.
//!
//! A version's snapshot is stored without an expiry (the store's GC only
//! expires records that carry one and only sweeps chunks no record holds),
//! refused to `DELETE /v1/snapshots/{id}` while the version exists (see
//! `catalog`), and deleted with the version. A template snapshot that no
//! version holds (a daemon killed between storing it and recording the
//! version, or a version whose snapshot could not be deleted) is removed by
//! [`Manager::sweep_template_orphans`], which the reaper runs before each GC.

use std::time::Duration;

use tracing::warn;

use stasis_core::{now_ms, Error, ErrorCode, Manifest, Result, SandboxId, SandboxState};
use stasis_meta::{NewTemplate, SandboxRecord, TemplateRecord};

use super::stage::{staged, Cleanup, Prep};
use super::{Ctx, Manager};
use crate::snapshots::SnapshotKind;
use crate::templates::{scan_artifacts, validate_name, TemplateRef};

impl Manager {
    /// Publish the state of sandbox `from` as the next version of `name`.
    /// Refused (`invalid_state`, naming the secret) when any of the tenant's
    /// secret values is found in what would be stored; nothing is stored then.
    pub async fn create_template(
        &self,
        ctx: &Ctx,
        name: &str,
        from: &SandboxId,
    ) -> Result<TemplateRecord> {
        let r = self.do_create_template(ctx, name, from).await;
        if let Err(e) = &r {
            if e.code != ErrorCode::NotFound {
                self.audit_refusal(ctx, "template_create", name, e).await;
            }
        }
        r
    }

    async fn do_create_template(
        &self,
        ctx: &Ctx,
        name: &str,
        from: &SandboxId,
    ) -> Result<TemplateRecord> {
        validate_name(name, "name")?;
        // Make sure it runs, then take the slot exclusively.
        drop(self.running(ctx, from).await?);
        let slot = self.slot(from);
        let _guard = slot.lock.clone().write_owned().await;
        let rec = self.meta.get_for(&ctx.tenant, from).await?;
        if rec.state != SandboxState::Running {
            return Err(Error::state(format!("sandbox {from} is {}", rec.state)));
        }
        let backend = self.backend(rec.backend)?.clone();
        let secrets =
            crate::tenancy::all_secret_values(&self.meta, self.snapshots.store(), &ctx.tenant)
                .await?;
        let stage = self.spec(&rec).dir.join("template-stage");
        let work = async {
            let artifacts = backend.snapshot(&rec.id, &stage).await?;
            self.touch(from);
            let names: Vec<String> = artifacts.iter().map(|a| a.name.clone()).collect();
            let dir = stage.clone();
            let hit = tokio::task::spawn_blocking(move || scan_artifacts(&dir, &names, &secrets))
                .await
                .map_err(|e| Error::internal(format!("secret scan task: {e}")))??;
            if let Some(hit) = hit {
                return Err(Error::state(format!(
                    "template {name} refused: the state of sandbox {from} holds the value of \
                     secret {} (in its {} artifact); secrets are injected per exec and must not \
                     be baked into a template: end the session or remove the file holding it",
                    hit.secret, hit.artifact
                )));
            }
            self.snapshots
                .put(
                    &rec,
                    SnapshotKind::Template,
                    &stage,
                    &artifacts,
                    None,
                    &ctx.actor,
                )
                .await
        };
        let snap = staged(&stage, Prep::Fresh, Cleanup::Always, work).await?;
        let published = self
            .meta
            .insert_template(NewTemplate {
                tenant: &ctx.tenant,
                name,
                snapshot: &snap.id,
                backend: rec.backend,
                manifest_digest: &snap.manifest_digest,
                source_sandbox: Some(from),
                created_by: &ctx.actor,
            })
            .await;
        let t = match published {
            Ok(t) => t,
            Err(e) => {
                if let Err(d) = self.snapshots.delete(&ctx.tenant, &snap.id).await {
                    warn!(snapshot = %snap.id, error = %d, "unpublished template snapshot not deleted");
                }
                return Err(e);
            }
        };
        self.audit(
            ctx,
            "template_create",
            &format!("{}:{}", t.name, t.version),
            serde_json::json!({"snapshot": t.snapshot, "sandbox": from,
                               "manifest_digest": t.manifest_digest, "raw_bytes": snap.raw_bytes}),
        )
        .await;
        Ok(t)
    }

    /// Every live version of every template of the tenant.
    pub async fn list_templates(&self, ctx: &Ctx) -> Result<Vec<TemplateRecord>> {
        self.meta.list_templates(&ctx.tenant).await
    }

    /// The live versions of `name`, oldest first; `not_found` when none.
    pub async fn template_versions(&self, ctx: &Ctx, name: &str) -> Result<Vec<TemplateRecord>> {
        validate_name(name, "name")?;
        let v = self.meta.template_versions(&ctx.tenant, name).await?;
        if v.is_empty() {
            return Err(Error::not_found(format!("template {name}")));
        }
        Ok(v)
    }

    /// Delete one version of a template (or every version) and the
    /// snapshots they held.
    pub async fn delete_template(
        &self,
        ctx: &Ctx,
        name: &str,
        version: Option<i64>,
    ) -> Result<Vec<TemplateRecord>> {
        validate_name(name, "name")?;
        if let Some(v) = version {
            if v < 1 {
                return Err(
                    Error::invalid("version: must be a positive integer").with_field("version")
                );
            }
        }
        let gone = self
            .meta
            .delete_template(&ctx.tenant, name, version)
            .await?;
        for t in &gone {
            match self.snapshots.delete(&ctx.tenant, &t.snapshot).await {
                Ok(()) => {}
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => {
                    warn!(template = %t.name, version = t.version, snapshot = %t.snapshot,
                          error = %e, "deleted template's snapshot not deleted")
                }
            }
            self.audit(
                ctx,
                "template_delete",
                &format!("{}:{}", t.name, t.version),
                serde_json::json!({"snapshot": t.snapshot}),
            )
            .await;
        }
        Ok(gone)
    }

    /// Start a sandbox from a template (`reference`: `name[:version]`, the
    /// latest version by default): its snapshot restored instead of a cold
    /// boot. The manifest is the template's unless `manifest` replaces it,
    /// checked as a restore checks it (same backend, registered secrets,
    /// allowed mounts).
    pub async fn create_from_template(
        &self,
        ctx: &Ctx,
        reference: &str,
        manifest: Option<Manifest>,
    ) -> Result<SandboxRecord> {
        self.check_region(ctx, "create", "sandboxes").await?;
        self.refuse_if_draining("create")?;
        let r = async {
            let r = TemplateRef::parse(reference, "template")?;
            let t = self
                .meta
                .get_template(&ctx.tenant, &r.name, r.version)
                .await?;
            let rec = self.do_restore(ctx, &t.snapshot, manifest).await?;
            Ok((t, rec))
        }
        .await;
        match r {
            Ok((t, rec)) => {
                self.audit(
                    ctx,
                    "create",
                    rec.id.as_str(),
                    serde_json::json!({"backend": rec.backend,
                        "template": format!("{}:{}", t.name, t.version),
                        "snapshot": t.snapshot, "manifest_digest": rec.manifest_digest}),
                )
                .await;
                Ok(rec)
            }
            Err(e) => {
                self.audit_refusal(ctx, "create", "sandboxes", &e).await;
                Err(e)
            }
        }
    }

    /// Delete template snapshots older than `grace` that no live version
    /// holds; returns how many went. `grace` covers a publication between
    /// storing its snapshot and recording its version.
    pub async fn sweep_template_orphans(&self, grace: Duration) -> Result<u64> {
        let cutoff = now_ms() - i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let mut swept = 0;
        for tenant in self.snapshots.store().list_tenants().await? {
            for snap in self.snapshots.list(&tenant).await? {
                if snap.kind != SnapshotKind::Template || snap.created_at_ms > cutoff {
                    continue;
                }
                if self
                    .meta
                    .template_by_snapshot(&tenant, &snap.id)
                    .await?
                    .is_some()
                {
                    continue;
                }
                match self.snapshots.delete(&tenant, &snap.id).await {
                    Ok(()) => swept += 1,
                    Err(e) if e.code == ErrorCode::NotFound => {}
                    Err(e) => {
                        warn!(snapshot = %snap.id, error = %e, "orphan template snapshot not deleted")
                    }
                }
            }
        }
        Ok(swept)
    }
}
