//! The manager's view of the snapshot store: stasis-store records plus what
//! the manager keeps in each record's `meta` (the snapshot's kind and the
//! manifest it was taken under, so a restore needs nothing but the store).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use stasis_backend::Artifact;
use stasis_core::{now_ms, BackendKind, Error, Manifest, Result, SandboxId, SnapshotId, TenantId};
use stasis_meta::SandboxRecord;
use stasis_store::{
    Chunking, GcOptions, GcReport, NewSnapshot, Progress, PutArtifact, SnapshotRecord, Store,
    StoreStats,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotKind {
    /// Written by a pause; owned by its sandbox and deleted with it.
    Pause,
    /// Taken on request (snapshot, fork); lives until deleted or expired.
    User,
    /// Held by a template version: never expires, deleted with the version.
    Template,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ManagerMeta {
    kind: SnapshotKind,
    manifest: Manifest,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactInfo {
    pub name: String,
    pub kind: String,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
}

/// A snapshot as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub id: SnapshotId,
    pub kind: SnapshotKind,
    pub backend: BackendKind,
    pub source_sandbox: Option<SandboxId>,
    pub manifest: Manifest,
    pub manifest_digest: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub expires_at_ms: Option<i64>,
    pub parent: Option<SnapshotId>,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// Bytes this snapshot added to the store (the rest was deduplicated).
    pub new_stored_bytes: u64,
    /// Fraction of its chunks that were already stored.
    pub dedup_ratio: f64,
    pub artifacts: Vec<ArtifactInfo>,
}

impl SnapshotInfo {
    fn from_record(r: SnapshotRecord) -> Result<Self> {
        let m: ManagerMeta = serde_json::from_value(r.meta.clone()).map_err(|e| {
            Error::internal(format!("snapshot {} has no manager metadata: {e}", r.id))
        })?;
        Ok(SnapshotInfo {
            dedup_ratio: r.dedup_ratio(),
            id: r.id,
            kind: m.kind,
            backend: r.backend,
            source_sandbox: r.source_sandbox,
            manifest: m.manifest,
            manifest_digest: r.manifest_digest,
            created_by: r.created_by,
            created_at_ms: r.created_at_ms,
            expires_at_ms: r.expires_at_ms,
            parent: r.parent,
            raw_bytes: r.raw_bytes,
            stored_bytes: r.stored_bytes,
            new_stored_bytes: r.new_stored_bytes,
            artifacts: r
                .artifacts
                .into_iter()
                .map(|a| ArtifactInfo {
                    name: a.name,
                    kind: a.kind,
                    raw_bytes: a.raw_size,
                    stored_bytes: a.stored_size,
                })
                .collect(),
        })
    }
}

#[derive(Clone)]
pub struct Snapshots {
    store: Arc<Store>,
    gc: GcOptions,
}

impl Snapshots {
    pub fn new(store: Store) -> Self {
        Snapshots {
            store: Arc::new(store),
            gc: GcOptions::default(),
        }
    }

    /// Unreferenced chunks younger than `grace` survive a GC (default 15 min).
    pub fn with_gc_grace(mut self, grace: Duration) -> Self {
        self.gc.grace_ms = grace.as_millis() as i64;
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Store the artifacts in `dir` as a snapshot of `rec`.
    pub async fn put(
        &self,
        rec: &SandboxRecord,
        kind: SnapshotKind,
        dir: &Path,
        artifacts: &[Artifact],
        ttl: Option<Duration>,
        actor: &str,
    ) -> Result<SnapshotInfo> {
        self.put_as(
            SnapshotId::generate(),
            rec,
            kind,
            dir,
            artifacts,
            ttl,
            actor,
        )
        .await
    }

    /// `put` under an id chosen (and recorded) beforehand, so that whoever
    /// finds the upload interrupted can tell whether it completed: the
    /// store writes a snapshot's record only once all its chunks are stored.
    #[allow(clippy::too_many_arguments)]
    pub async fn put_as(
        &self,
        id: SnapshotId,
        rec: &SandboxRecord,
        kind: SnapshotKind,
        dir: &Path,
        artifacts: &[Artifact],
        ttl: Option<Duration>,
        actor: &str,
    ) -> Result<SnapshotInfo> {
        let now = now_ms();
        let meta = NewSnapshot {
            id,
            tenant: rec.tenant.clone(),
            source_sandbox: Some(rec.id.clone()),
            backend: rec.backend,
            manifest_digest: rec.manifest_digest.clone(),
            created_by: actor.to_string(),
            created_at_ms: now,
            parent: rec
                .pause_snapshot
                .clone()
                .or_else(|| rec.source_snapshot.clone()),
            // Checked: a TTL too far to represent never expires, rather
            // than wrapping into the past.
            expires_at_ms: ttl.map(|t| {
                i64::try_from(t.as_millis())
                    .ok()
                    .and_then(|ms| now.checked_add(ms))
                    .unwrap_or(i64::MAX)
            }),
            meta: serde_json::to_value(ManagerMeta {
                kind,
                manifest: rec.manifest.clone(),
            })?,
        };
        let list = artifact_list(artifacts);
        let r = self
            .store
            .put_snapshot_artifacts(meta, dir, &list, None)
            .await?;
        SnapshotInfo::from_record(r)
    }

    pub async fn restore(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
        dest: &Path,
    ) -> Result<SnapshotInfo> {
        self.restore_with_progress(tenant, id, dest, None).await
    }

    /// `restore`, linking in what `reuse` says this node keeps (see
    /// `Store::restore_snapshot_reusing`).
    pub async fn restore_reusing(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
        dest: &Path,
        reuse: stasis_store::Reuse<'_>,
    ) -> Result<SnapshotInfo> {
        let r = self
            .store
            .restore_snapshot_reusing(tenant, id, dest, None, Some(reuse))
            .await?;
        SnapshotInfo::from_record(r)
    }

    pub async fn restore_with_progress(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
        dest: &Path,
        progress: Option<&dyn Progress>,
    ) -> Result<SnapshotInfo> {
        let r = self
            .store
            .restore_snapshot(tenant, id, dest, progress)
            .await?;
        SnapshotInfo::from_record(r)
    }

    pub async fn get(&self, tenant: &TenantId, id: &SnapshotId) -> Result<SnapshotInfo> {
        SnapshotInfo::from_record(self.store.get_snapshot(tenant, id).await?)
    }

    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<SnapshotInfo>> {
        let mut out: Vec<SnapshotInfo> = self
            .store
            .list_snapshots(tenant)
            .await?
            .into_iter()
            .filter_map(|r| SnapshotInfo::from_record(r).ok())
            .collect();
        out.sort_by_key(|s| s.created_at_ms);
        Ok(out)
    }

    pub async fn delete(&self, tenant: &TenantId, id: &SnapshotId) -> Result<()> {
        self.store.delete_snapshot(tenant, id).await
    }

    pub async fn gc(&self) -> Result<GcReport> {
        self.store.gc_with(now_ms(), &self.gc).await
    }

    pub async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        self.store.stats(tenant).await
    }
}

/// Names of the artifacts in a directory as the store wants them.
fn artifact_list(artifacts: &[Artifact]) -> Vec<PutArtifact> {
    artifacts
        .iter()
        .map(|a| {
            let kind = serde_json::to_value(a.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "meta".into());
            PutArtifact {
                name: a.name.clone(),
                kind,
                chunking: a.block.map_or(Chunking::ContentDefined, Chunking::Blocks),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_are_named_for_the_store() {
        let arts = vec![
            Artifact {
                name: "memory.bin".into(),
                kind: stasis_backend::ArtifactKind::Memory,
                size: 3,
                block: None,
            },
            Artifact {
                name: "memory.ram".into(),
                kind: stasis_backend::ArtifactKind::Memory,
                size: 1 << 20,
                block: Some(65536),
            },
        ];
        let list = artifact_list(&arts);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].name, "memory.bin");
        assert_eq!(
            list[0].kind,
            serde_json::to_value(stasis_backend::ArtifactKind::Memory).unwrap()
        );
        assert_eq!(list[0].chunking, Chunking::ContentDefined);
        assert_eq!(list[1].chunking, Chunking::Blocks(65536));
    }
}
