//! A tenant's snapshots as objects (list, get, delete, export, import) and
//! the transfer files under the data dir that uploads and downloads pass
//! through.

use std::path::{Path, PathBuf};

use stasis_core::{Error, Result, SandboxState, SnapshotId, TenantId};

use super::{Ctx, Manager};
use crate::snapshots::{SnapshotInfo, SnapshotKind};

/// A unique, path-safe token (reuses the id generator's randomness).
fn uuid_like() -> String {
    SnapshotId::generate()
        .as_str()
        .trim_start_matches("snap-")
        .to_string()
}

impl Manager {
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
        if let Some(t) = self.meta.template_by_snapshot(&ctx.tenant, id).await? {
            // Deleting it would leave the template pointing at nothing.
            return Err(Error::state(format!(
                "snapshot {id} holds template {}:{}; delete the template instead",
                t.name, t.version
            )));
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
        self.check_region(ctx, "export", id.as_str()).await?;
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
    pub async fn import_snapshot(&self, ctx: &Ctx, file: &Path) -> Result<SnapshotInfo> {
        self.check_region(ctx, "import", "snapshots").await?;
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
}

impl Manager {
    /// Files this node keeps that hold the artifacts of `tenant`'s stored
    /// snapshot `snapshot` as stored: the local pause files of a paused
    /// sandbox whose pause it is (see `Backend::local_copies`). For the
    /// store's scrub, which verifies every byte it takes from them; no
    /// sandbox slot is taken.
    pub async fn local_copies(
        &self,
        tenant: &TenantId,
        snapshot: &SnapshotId,
    ) -> Vec<(String, PathBuf)> {
        let live = match self.meta.list_live().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("local copies of {snapshot}: {e}");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for rec in live.iter().filter(|r| {
            &r.tenant == tenant
                && r.state == SandboxState::Paused
                && r.pause_snapshot.as_ref() == Some(snapshot)
        }) {
            if let Ok(b) = self.backend(rec.backend) {
                out.extend(b.local_copies(&self.spec(rec), snapshot));
            }
        }
        out
    }
}
