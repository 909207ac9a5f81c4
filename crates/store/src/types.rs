//! Public record and report types.

use serde::{Deserialize, Serialize};
use stasis_core::{BackendKind, Error, Result, SandboxId, SnapshotId, TenantId};

/// A chunk address: keyed blake3 of the chunk's plaintext (key per tenant). Hex in JSON.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkAddr(pub [u8; 32]);

impl ChunkAddr {
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Result<Self> {
        let v = hex::decode(s).map_err(|_| Error::integrity(format!("bad chunk address {s:?}")))?;
        let a: [u8; 32] = v
            .as_slice()
            .try_into()
            .map_err(|_| Error::integrity(format!("bad chunk address {s:?}")))?;
        Ok(ChunkAddr(a))
    }
}

impl std::fmt::Debug for ChunkAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", &self.to_hex()[..16])
    }
}

impl Serialize for ChunkAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ChunkAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ChunkAddr::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

/// One chunk of an artifact, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    #[serde(rename = "a")]
    pub addr: ChunkAddr,
    /// Plaintext length.
    #[serde(rename = "n")]
    pub len: u32,
    /// Size of the stored object (0 in records written before it was kept):
    /// lets a later put that carries this reference forward account for it
    /// without asking the object store.
    #[serde(rename = "s", default, skip_serializing_if = "is_zero")]
    pub stored: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// How a put cuts an artifact's file into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Chunking {
    /// Content-defined (fastcdc, seeded per tenant): what survives inserts
    /// and shifts (disks, tars, streams).
    #[default]
    ContentDefined,
    /// Fixed, aligned blocks of this many bytes (a power of two, 4 KiB to
    /// 4 MiB): for page-addressed files such as a guest's RAM, where a put
    /// with a parent carries unchanged blocks forward (see `blocks`).
    Blocks(u32),
}

/// One artifact of a put: a file `dir/<name>`, its kind and how to cut it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutArtifact {
    pub name: String,
    pub kind: String,
    pub chunking: Chunking,
}

impl PutArtifact {
    /// Content-defined chunks.
    pub fn new(name: impl Into<String>, kind: impl Into<String>) -> Self {
        PutArtifact {
            name: name.into(),
            kind: kind.into(),
            chunking: Chunking::ContentDefined,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    pub name: String,
    /// Free-form kind chosen by the backend, e.g. "memory", "disk-overlay", "fs-tar".
    pub kind: String,
    pub raw_size: u64,
    /// Bytes in the store of this artifact's distinct chunks (compressed + encrypted).
    pub stored_size: u64,
    /// Bytes this artifact added to the store when it was written (0 = fully deduplicated).
    pub new_stored_size: u64,
    /// Fixed block size when the artifact was cut into aligned blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<u32>,
    pub chunks: Vec<ChunkRef>,
}

/// What the caller knows about a snapshot before it is written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewSnapshot {
    pub id: SnapshotId,
    pub tenant: TenantId,
    pub source_sandbox: Option<SandboxId>,
    pub backend: BackendKind,
    pub manifest_digest: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub parent: Option<SnapshotId>,
    /// None = never expires.
    pub expires_at_ms: Option<i64>,
    /// Backend-specific data needed to restore (e.g. QEMU machine args, paths inside artifacts).
    #[serde(default)]
    pub meta: serde_json::Value,
}

impl NewSnapshot {
    /// Convenience: a fresh id, now, no parent/TTL, empty meta.
    pub fn new(tenant: TenantId, backend: BackendKind) -> Self {
        NewSnapshot {
            id: SnapshotId::generate(),
            tenant,
            source_sandbox: None,
            backend,
            manifest_digest: String::new(),
            created_by: String::new(),
            created_at_ms: stasis_core::now_ms(),
            parent: None,
            expires_at_ms: None,
            meta: serde_json::Value::Null,
        }
    }
}

/// A stored snapshot. Stored encrypted with the tenant's key in the object store itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// Record format version.
    pub v: u32,
    pub id: SnapshotId,
    pub tenant: TenantId,
    pub source_sandbox: Option<SandboxId>,
    pub backend: BackendKind,
    pub manifest_digest: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub parent: Option<SnapshotId>,
    pub expires_at_ms: Option<i64>,
    #[serde(default)]
    pub meta: serde_json::Value,
    pub artifacts: Vec<ArtifactRecord>,
    /// Sum of artifact sizes.
    pub raw_bytes: u64,
    /// Bytes in the store of this snapshot's distinct chunks (shared ones included).
    pub stored_bytes: u64,
    /// Distinct chunks referenced.
    pub unique_chunks: u64,
    /// Chunks this snapshot uploaded (the rest were already in the tenant's store).
    pub new_chunks: u64,
    /// Stored bytes this snapshot uploaded.
    pub new_stored_bytes: u64,
    /// Plaintext bytes of the chunks this snapshot uploaded.
    pub new_raw_bytes: u64,
}

impl SnapshotRecord {
    /// Fraction of distinct chunks that were already stored (1.0 = fully deduplicated).
    pub fn dedup_ratio(&self) -> f64 {
        if self.unique_chunks == 0 {
            return 1.0;
        }
        1.0 - self.new_chunks as f64 / self.unique_chunks as f64
    }

    pub fn is_expired(&self, now_ms: i64) -> bool {
        matches!(self.expires_at_ms, Some(e) if e <= now_ms)
    }

    pub fn artifact(&self, name: &str) -> Option<&ArtifactRecord> {
        self.artifacts.iter().find(|a| a.name == name)
    }
}

/// Progress of a long upload/download, in plaintext bytes. The CLI backs it with indicatif.
pub trait Progress: Send + Sync {
    fn set_total(&self, bytes: u64);
    fn inc(&self, bytes: u64);
    fn finish(&self);
}

/// Per-tenant usage, for /metrics and benches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreStats {
    pub snapshots: u64,
    /// Sum of the raw sizes of all the tenant's snapshots (what it would cost without the store).
    pub raw_bytes: u64,
    /// Bytes of chunk objects in the store (after dedup + compression + encryption overhead).
    pub stored_bytes: u64,
    pub chunks: u64,
}

/// What a GC run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GcReport {
    pub tenants: u64,
    pub snapshots_expired: u64,
    pub snapshots_live: u64,
    /// Distinct chunks referenced by live snapshots (mark phase).
    pub chunks_live: u64,
    /// Sum of all reference counts (chunk references from live snapshots).
    pub chunk_refs: u64,
    /// Histogram of reference counts: refcount -> number of chunks with it.
    pub refcount_histogram: std::collections::BTreeMap<u64, u64>,
    pub chunks_deleted: u64,
    pub bytes_freed: u64,
    /// Unreferenced chunks kept because they are younger than the grace period.
    pub chunks_in_grace: u64,
    /// Tenants whose sweep was skipped (a put was in progress, or a record was unreadable).
    pub tenants_skipped: Vec<String>,
    pub stale_markers_removed: u64,
    /// Local dir only: partial files of writes killed mid-way.
    pub staging_files_removed: u64,
    /// Objects of crypto-erased tenants removed.
    #[serde(default)]
    pub objects_purged: u64,
    pub errors: Vec<String>,
}
