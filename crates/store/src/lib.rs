//! stasis snapshot store.
//!
//! Artifacts (guest memory images, disk overlays, filesystem tars) are split
//! into content-defined chunks (fastcdc, seeded per tenant) or, for
//! page-addressed files such as a guest's RAM, fixed aligned blocks that a
//! later put carries forward unchanged (`blocks`), addressed by a
//! per-tenant keyed blake3 of the plaintext, zstd-compressed when that helps,
//! sealed with XChaCha20-Poly1305 under the tenant's data key (AAD = tenant,
//! address, compression flag) and written to an `object_store` (local dir or
//! S3). Snapshot records are stored, sealed, in the same object store, so the
//! store plus the master key is all a node needs to restore.
//!
//! ## Object layout
//! ```text
//! keycheck, keychecks/<fp>                   sealed constants: wrong master key -> refused at open
//! tenants/<tenant>/key                       tenant data key wrapped by the master key (older stores)
//! tenants/<tenant>/dk/<gen>.<fp>             data key generation <gen> wrapped by master key <fp> (keyring.rs)
//! tenants/<tenant>/snapshots/<snapshot-id>   sealed, zstd'd JSON SnapshotRecord (AAD: tenant, id)
//! tenants/<tenant>/chunks/<aa>/<addr-hex>    'S' 1 <flag> nonce(24) ciphertext+tag(16)
//! tenants/<tenant>/locks/put-<expires_ms>-<rand>   a put/import is in flight (see gc.rs)
//! tenants/<tenant>/locks/gc-<expires_ms>-<rand>    a GC sweep is in flight (see gc.rs)
//! ```
//! Another tenant's snapshot id is simply not under your prefix: NotFound,
//! indistinguishable from an id that never existed.

#[cfg(feature = "bench")]
pub mod bench;
mod blocks;
pub mod crypto;
mod export;
mod format;
mod gc;
pub mod keyring;
mod objects;
mod put;
mod restore;
#[cfg(feature = "testing")]
pub mod testing;
mod types;
mod upload;
mod verify;

pub use crypto::MasterKey;
pub use gc::GcOptions;
pub use keyring::{Kek, KekSource, RetireReport, RotateReport};
pub use objects::object_store_from_url;
pub use restore::{Reuse, SMALL_ARTIFACT};
pub use types::*;
pub use verify::{ChunkSite, DamagedChunk, SnapshotChunks, SnapshotDamage};

use bytes::Bytes;
use crypto::TenantKeys;
use format::{record_aad_gen, record_header, FORMAT_V1, FORMAT_V2, RECORD_MAGIC};
use futures::TryStreamExt;
use object_store::path::Path as OPath;
use object_store::{ObjectStore, PutMode, PutPayload};
pub(crate) use objects::{chunk_path, chunks_prefix, locks_prefix, os_err, record_path};
use objects::{local_root_of, tenant_prefix};
use stasis_core::{Error, ErrorCode, Result, SnapshotId, TenantId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

/// Tunables. The defaults are what the daemon uses.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub chunk_min: u32,
    pub chunk_avg: u32,
    pub chunk_max: u32,
    pub zstd_level: i32,
    /// Chunks in flight per artifact (upload or download).
    pub concurrency: usize,
    /// A put marker is valid this long; puts renew it at half-life.
    pub put_lease_ms: i64,
    /// How long a put waits for a running GC sweep before giving up with `busy`.
    pub put_wait_max_ms: i64,
    /// Memory cap of the restore cache for chunks that repeat (zero pages...).
    pub restore_cache_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            chunk_min: 16 * 1024,
            chunk_avg: 64 * 1024,
            chunk_max: 256 * 1024,
            zstd_level: 1,
            concurrency: 8,
            put_lease_ms: 10 * 60 * 1000,
            put_wait_max_ms: 5 * 60 * 1000,
            restore_cache_bytes: 128 << 20,
        }
    }
}

#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    os: Arc<dyn ObjectStore>,
    masters: RwLock<keyring::MasterRing>,
    kek: RwLock<Option<Arc<dyn KekSource>>>,
    label: String,
    /// Root directory when the store is a local dir (for sweeping the staging
    /// files `LocalFileSystem` leaves behind when killed mid-write; invisible to listing).
    local_root: Option<PathBuf>,
    cfg: StoreConfig,
    keys: Mutex<HashMap<String, Arc<keyring::TenantRing>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.inner.label)
    }
}

/// Artifact names become file names on restore: a flat, safe alphabet.
pub fn validate_artifact_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "invalid artifact name {name:?}: 1-128 characters of [A-Za-z0-9._-], not starting with '.'"
        ))
        .with_field("artifacts"))
    }
}

impl Store {
    /// Open by URL: `file:///abs/path` (or `/abs/path`) or `s3://bucket/prefix`
    /// (endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION; plain http allowed for loopback endpoints).
    /// A wrong master key is refused here with `unauthorized`.
    pub async fn open(url: &str, master_key: MasterKey) -> Result<Store> {
        let os = object_store_from_url(url)?;
        Self::with_object_store(os, url, master_key, StoreConfig::default()).await
    }

    pub async fn open_with_config(
        url: &str,
        master_key: MasterKey,
        cfg: StoreConfig,
    ) -> Result<Store> {
        let os = object_store_from_url(url)?;
        Self::with_object_store(os, url, master_key, cfg).await
    }

    /// Use any `object_store` implementation.
    pub async fn with_object_store(
        os: Arc<dyn ObjectStore>,
        label: &str,
        master_key: MasterKey,
        cfg: StoreConfig,
    ) -> Result<Store> {
        Self::with_keyring(os, label, vec![master_key], cfg).await
    }

    /// Open by URL with several master keys (key generations); see [`keyring`].
    pub async fn open_keyring(url: &str, keys: Vec<MasterKey>, cfg: StoreConfig) -> Result<Store> {
        let os = object_store_from_url(url)?;
        Self::with_keyring(os, url, keys, cfg).await
    }

    /// Any `object_store` implementation, several master keys. At least one
    /// of them must be one the store knows (or the store is new).
    pub async fn with_keyring(
        os: Arc<dyn ObjectStore>,
        label: &str,
        keys: Vec<MasterKey>,
        cfg: StoreConfig,
    ) -> Result<Store> {
        if keys.is_empty() {
            return Err(Error::invalid("no master key given"));
        }
        if !(cfg.chunk_min >= 64
            && cfg.chunk_min < cfg.chunk_avg
            && cfg.chunk_avg < cfg.chunk_max
            && cfg.chunk_max <= 16 << 20)
        {
            return Err(Error::invalid(
                "chunk sizes: need 64 <= min < avg < max <= 16 MiB",
            ));
        }
        let store = Store {
            inner: Arc::new(Inner {
                os,
                masters: RwLock::new(keyring::MasterRing { keys, current: 0 }),
                kek: RwLock::new(None),
                label: label.to_string(),
                local_root: local_root_of(label),
                cfg,
                keys: Mutex::new(HashMap::new()),
            }),
        };
        store.check_master_keys().await?;
        Ok(store)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.cfg
    }

    pub(crate) fn os(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.os
    }

    pub(crate) fn local_root(&self) -> Option<&Path> {
        self.inner.local_root.as_deref()
    }

    /// Seal a tenant secret with a key derived from the master key.
    pub fn seal_secret(&self, tenant: &TenantId, name: &str, value: &[u8]) -> Vec<u8> {
        self.master().seal_secret(tenant.as_str(), name, value)
    }

    /// Open a value sealed by [`Store::seal_secret`] under any held master key.
    pub fn open_secret(&self, tenant: &TenantId, name: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        let mut err = None;
        for k in self.masters() {
            match k.open_secret(tenant.as_str(), name, sealed) {
                Ok(v) => return Ok(v),
                Err(e) => err = Some(e),
            }
        }
        Err(err.unwrap_or_else(|| Error::internal("no master key")))
    }

    /// Whether `sealed` is sealed under the current master key (else
    /// [`Store::seal_secret`] it again before retiring the older key).
    pub fn secret_is_current(&self, tenant: &TenantId, name: &str, sealed: &[u8]) -> bool {
        self.master()
            .open_secret(tenant.as_str(), name, sealed)
            .is_ok()
    }

    /// `PutMode::Create`; Ok(false) if the object already exists. Falls back to
    /// head-then-put on stores without conditional writes.
    pub(crate) async fn put_create(&self, path: &OPath, body: Vec<u8>) -> Result<bool> {
        match self
            .inner
            .os
            .put_opts(path, PutPayload::from(body.clone()), PutMode::Create.into())
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(object_store::Error::NotImplemented) => {
                match self.inner.os.head(path).await {
                    Ok(_) => return Ok(false),
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(os_err(e)),
                }
                self.inner
                    .os
                    .put(path, PutPayload::from(body))
                    .await
                    .map_err(os_err)?;
                Ok(true)
            }
            Err(e) => Err(os_err(e)),
        }
    }

    pub(crate) async fn get_bytes(&self, path: &OPath) -> Result<Option<Bytes>> {
        match self.inner.os.get(path).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(os_err)?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(os_err(e)),
        }
    }

    /// (addr, stored size, last modified ms) of every chunk object of the tenant.
    pub(crate) async fn list_chunks(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<(ChunkAddr, u64, i64)>> {
        let metas: Vec<_> = self
            .inner
            .os
            .list(Some(&chunks_prefix(tenant)))
            .try_collect()
            .await
            .map_err(os_err)?;
        let mut out = Vec::with_capacity(metas.len());
        for m in metas {
            let Some(name) = m.location.filename() else {
                continue;
            };
            if let Ok(a) = ChunkAddr::from_hex(name) {
                out.push((a, m.size, m.last_modified.timestamp_millis()));
            }
        }
        Ok(out)
    }

    pub(crate) async fn list_record_ids(&self, tenant: &TenantId) -> Result<Vec<SnapshotId>> {
        let prefix = OPath::from(format!("{}/snapshots", tenant_prefix(tenant)));
        let metas: Vec<_> = self
            .inner
            .os
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(os_err)?;
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                m.location
                    .filename()
                    .and_then(|f| SnapshotId::parse(f).ok())
            })
            .collect())
    }

    pub(crate) fn seal_record(&self, keys: &TenantKeys, rec: &SnapshotRecord) -> Result<Vec<u8>> {
        let json = serde_json::to_vec(rec).map_err(|e| Error::internal(e.to_string()))?;
        let z = zstd::bulk::compress(&json, 3).map_err(|e| Error::internal(e.to_string()))?;
        let sealed = crypto::seal(
            &keys.record,
            &record_aad_gen(&rec.tenant, &rec.id, keys.gen),
            &z,
        );
        let mut out = if keys.gen == 0 {
            vec![RECORD_MAGIC, FORMAT_V1]
        } else {
            let mut h = vec![RECORD_MAGIC, FORMAT_V2];
            h.extend_from_slice(&keys.gen.to_le_bytes());
            h
        };
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    fn open_record(
        &self,
        keys: &TenantKeys,
        tenant: &TenantId,
        id: &SnapshotId,
        b: &[u8],
    ) -> Result<SnapshotRecord> {
        let what = format!("snapshot record {id}");
        let Some((gen, start)) = record_header(b) else {
            return Err(Error::integrity(format!("{what}: bad header")));
        };
        if gen != keys.gen {
            return Err(Error::integrity(format!(
                "{what}: wrong data key generation"
            )));
        }
        let z = crypto::open(
            &keys.record,
            &record_aad_gen(tenant, id, gen),
            &b[start..],
            &what,
        )?;
        let json = zstd::stream::decode_all(&z[..])
            .map_err(|e| Error::integrity(format!("{what}: {e}")))?;
        let rec: SnapshotRecord =
            serde_json::from_slice(&json).map_err(|e| Error::integrity(format!("{what}: {e}")))?;
        if &rec.tenant != tenant || &rec.id != id {
            return Err(Error::integrity(format!("{what}: names another snapshot")));
        }
        for a in &rec.artifacts {
            validate_artifact_name(&a.name).map_err(|e| Error::integrity(e.message))?;
            if a.chunks.iter().any(|c| c.len == 0 || c.len > 16 << 20) {
                return Err(Error::integrity(format!(
                    "{what}: artifact {} has an impossible chunk size",
                    a.name
                )));
            }
            let sum: u64 = a.chunks.iter().map(|c| c.len as u64).sum();
            if sum != a.raw_size {
                return Err(Error::integrity(format!(
                    "{what}: artifact {} sizes disagree",
                    a.name
                )));
            }
        }
        Ok(rec)
    }

    /// The record of one of `tenant`'s snapshots. Another tenant's id -> `not_found`,
    /// exactly as for an id that never existed.
    pub async fn get_snapshot(&self, tenant: &TenantId, id: &SnapshotId) -> Result<SnapshotRecord> {
        Ok(self.snapshot_with_keys(tenant, id).await?.0)
    }

    /// A snapshot's record and its tenant's keys (what reading its chunks
    /// needs), `not_found` as for [`Store::get_snapshot`].
    pub(crate) async fn snapshot_with_keys(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
    ) -> Result<(SnapshotRecord, Arc<TenantKeys>)> {
        let not_found = || Error::not_found(format!("snapshot {id}"));
        let Some(b) = self.get_bytes(&record_path(tenant, id)).await? else {
            return Err(not_found());
        };
        let gen = record_header(&b).map(|h| h.0).unwrap_or(0);
        let keys = self
            .tenant_keys_gen(tenant, gen)
            .await?
            .ok_or_else(not_found)?;
        let rec = self.open_record(&keys, tenant, id, &b)?;
        Ok((rec, keys))
    }

    /// All of `tenant`'s snapshots, oldest first. A record that fails verification
    /// is left out and logged (`get_snapshot` on it gives the integrity error, and
    /// GC will not sweep the tenant while it exists); an unusable tenant key is an error.
    pub async fn list_snapshots(&self, tenant: &TenantId) -> Result<Vec<SnapshotRecord>> {
        let ids = self.list_record_ids(tenant).await?;
        if ids.is_empty() || self.tenant_keys(tenant, false).await?.is_none() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match self.get_snapshot(tenant, &id).await {
                Ok(r) => out.push(r),
                Err(e) if e.code == ErrorCode::NotFound => {} // deleted meanwhile
                Err(e) if e.code == ErrorCode::IntegrityError => {
                    tracing::error!(tenant = %tenant, snapshot = %id, "snapshot record failed verification: {e}");
                }
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        Ok(out)
    }

    /// Delete the record; its chunks are freed by the next GC once no other snapshot uses them.
    pub async fn delete_snapshot(&self, tenant: &TenantId, id: &SnapshotId) -> Result<()> {
        // Only the tenant's own prefix is reachable: another tenant's id is not found.
        let path = record_path(tenant, id);
        match self.inner.os.head(&path).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::not_found(format!("snapshot {id}")))
            }
            Err(e) => return Err(os_err(e)),
        }
        match self.inner.os.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(os_err(e)),
        }
        self.clear_damage(tenant, id).await
    }

    /// Usage of one tenant: raw bytes of its snapshots vs bytes of its chunk objects.
    pub async fn stats(&self, tenant: &TenantId) -> Result<StoreStats> {
        let recs = self.list_snapshots(tenant).await?;
        let chunks = self.list_chunks(tenant).await?;
        Ok(StoreStats {
            snapshots: recs.len() as u64,
            raw_bytes: recs.iter().map(|r| r.raw_bytes).sum(),
            stored_bytes: chunks.iter().map(|c| c.1).sum(),
            chunks: chunks.len() as u64,
        })
    }

    /// Tenants that have anything in the store.
    pub async fn list_tenants(&self) -> Result<Vec<TenantId>> {
        let r = self
            .inner
            .os
            .list_with_delimiter(Some(&OPath::from("tenants")))
            .await
            .map_err(os_err)?;
        Ok(r.common_prefixes
            .iter()
            .filter_map(|p| p.filename().and_then(|f| TenantId::parse(f).ok()))
            .collect())
    }
}

#[cfg(test)]
mod tests;
