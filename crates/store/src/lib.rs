//! stasis snapshot store.
//!
//! Artifacts (guest memory images, disk overlays, filesystem tars) are split
//! into content-defined chunks (fastcdc, seeded per tenant), addressed by a
//! per-tenant keyed blake3 of the plaintext, zstd-compressed when that helps,
//! sealed with XChaCha20-Poly1305 under the tenant's data key (AAD = tenant,
//! address, compression flag) and written to an `object_store` (local dir or
//! S3). Snapshot records are stored, sealed, in the same object store, so the
//! store plus the master key is all a node needs to restore.
//!
//! ## Object layout
//! ```text
//! keycheck                                   sealed constant: wrong master key -> refused at open
//! tenants/<tenant>/key                       tenant data key wrapped by the master key
//! tenants/<tenant>/snapshots/<snapshot-id>   sealed, zstd'd JSON SnapshotRecord (AAD: tenant, id)
//! tenants/<tenant>/chunks/<aa>/<addr-hex>    'S' 1 <flag> nonce(24) ciphertext+tag(16)
//! tenants/<tenant>/locks/put-<expires_ms>-<rand>   a put/import is in flight (see gc.rs)
//! tenants/<tenant>/locks/gc-<expires_ms>-<rand>    a GC sweep is in flight (see gc.rs)
//! ```
//! Another tenant's snapshot id is simply not under your prefix: NotFound,
//! indistinguishable from an id that never existed.

pub mod bench;
pub mod crypto;
mod export;
mod gc;
pub mod testing;
mod types;

pub use crypto::MasterKey;
pub use gc::GcOptions;
pub use types::*;

use bytes::Bytes;
use crypto::TenantKeys;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as OPath;
use object_store::{ObjectStore, PutMode, PutPayload};
use stasis_core::{Error, ErrorCode, Result, SnapshotId, TenantId};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;

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
    master: MasterKey,
    label: String,
    /// Root directory when the store is a local dir (for sweeping the staging
    /// files `LocalFileSystem` leaves behind when killed mid-write; invisible to listing).
    local_root: Option<PathBuf>,
    cfg: StoreConfig,
    keys: Mutex<HashMap<String, Arc<TenantKeys>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.inner.label)
    }
}

pub(crate) fn os_err(e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { path, .. } => Error::not_found(path),
        other => Error::internal(format!("object store: {other}")),
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

fn is_loopback_url(u: &str) -> bool {
    let rest = u
        .strip_prefix("http://")
        .unwrap_or_else(|| u.strip_prefix("https://").unwrap_or(u));
    let host = rest.split('/').next().unwrap_or("");
    let host = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
    host == "localhost" || host.starts_with("127.") || host == "[::1]"
}

/// Build the object store for `file:///abs/path`, a bare absolute path, or `s3://bucket/prefix`.
pub fn object_store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(Error::invalid(format!("store url {url:?}: no bucket")));
        }
        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        let endpoint = std::env::var("AWS_ENDPOINT_URL")
            .or_else(|_| std::env::var("AWS_ENDPOINT"))
            .unwrap_or_default();
        if endpoint.starts_with("http://") && is_loopback_url(&endpoint) {
            b = b.with_allow_http(true);
        }
        if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
            b = b.with_region("us-east-1");
        }
        let s3 = b
            .build()
            .map_err(|e| Error::invalid(format!("store url {url:?}: {e}")))?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            Ok(Arc::new(s3))
        } else {
            Ok(Arc::new(object_store::prefix::PrefixStore::new(s3, prefix)))
        }
    } else {
        let p = url.strip_prefix("file://").unwrap_or(url);
        if !p.starts_with('/') {
            return Err(Error::invalid(format!(
                "store url {url:?}: expected file:///absolute/path, /absolute/path or s3://bucket/prefix"
            )));
        }
        std::fs::create_dir_all(p).map_err(|e| Error::internal(format!("store dir {p}: {e}")))?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(p)
            .map_err(|e| Error::invalid(format!("store dir {p}: {e}")))?;
        Ok(Arc::new(fs))
    }
}

fn local_root_of(url: &str) -> Option<PathBuf> {
    if url.starts_with("s3://") {
        return None;
    }
    let p = url.strip_prefix("file://").unwrap_or(url);
    p.starts_with('/').then(|| PathBuf::from(p))
}

pub(crate) fn tenant_prefix(t: &TenantId) -> String {
    format!("tenants/{}", t.as_str())
}
pub(crate) fn record_path(t: &TenantId, id: &SnapshotId) -> OPath {
    OPath::from(format!("tenants/{}/snapshots/{}", t.as_str(), id.as_str()))
}
pub(crate) fn chunk_path(t: &TenantId, a: &ChunkAddr) -> OPath {
    let h = a.to_hex();
    OPath::from(format!("tenants/{}/chunks/{}/{}", t.as_str(), &h[..2], h))
}
pub(crate) fn chunks_prefix(t: &TenantId) -> OPath {
    OPath::from(format!("tenants/{}/chunks", t.as_str()))
}
pub(crate) fn locks_prefix(t: &TenantId) -> OPath {
    OPath::from(format!("tenants/{}/locks", t.as_str()))
}

const CHUNK_MAGIC: u8 = b'S';
const RECORD_MAGIC: u8 = b'R';
const FORMAT_V1: u8 = 1;
const FLAG_RAW: u8 = 0;
const FLAG_ZSTD: u8 = 1;

fn chunk_aad(tenant: &TenantId, addr: &ChunkAddr, flag: u8) -> Vec<u8> {
    let mut a = b"stasis-chunk-v1\0".to_vec();
    a.extend_from_slice(tenant.as_str().as_bytes());
    a.push(0);
    a.extend_from_slice(&addr.0);
    a.push(flag);
    a
}

fn record_aad(tenant: &TenantId, id: &SnapshotId) -> Vec<u8> {
    let mut a = b"stasis-record-v1\0".to_vec();
    a.extend_from_slice(tenant.as_str().as_bytes());
    a.push(0);
    a.extend_from_slice(id.as_str().as_bytes());
    a
}

/// Compress if it saves at least 1/16, returns (flag, payload).
pub(crate) fn maybe_compress(data: &[u8], level: i32) -> (u8, Vec<u8>) {
    if let Ok(c) = zstd::bulk::compress(data, level) {
        if c.len() < data.len() - data.len() / 16 {
            return (FLAG_ZSTD, c);
        }
    }
    (FLAG_RAW, data.to_vec())
}

/// Decompress a payload of `flag` whose plaintext must be exactly `len` bytes.
pub(crate) fn decompress_exact(
    flag: u8,
    payload: Vec<u8>,
    len: usize,
    what: &str,
) -> Result<Vec<u8>> {
    let plain = match flag {
        FLAG_RAW => payload,
        FLAG_ZSTD => zstd::bulk::decompress(&payload, len)
            .map_err(|e| Error::integrity(format!("{what}: decompression failed: {e}")))?,
        f => return Err(Error::integrity(format!("{what}: unknown flag {f}"))),
    };
    if plain.len() != len {
        return Err(Error::integrity(format!(
            "{what}: {} bytes, record says {len}",
            plain.len()
        )));
    }
    Ok(plain)
}

fn encode_chunk(
    keys: &TenantKeys,
    tenant: &TenantId,
    addr: &ChunkAddr,
    data: &[u8],
    level: i32,
) -> Vec<u8> {
    let (flag, payload) = maybe_compress(data, level);
    let sealed = crypto::seal(&keys.chunk, &chunk_aad(tenant, addr, flag), &payload);
    let mut out = Vec::with_capacity(3 + sealed.len());
    out.extend_from_slice(&[CHUNK_MAGIC, FORMAT_V1, flag]);
    out.extend_from_slice(&sealed);
    out
}

/// Verify a chunk object against the record's reference: AEAD tag (binds tenant,
/// address and compression flag), exact length, and keyed hash of the plaintext.
fn decode_chunk(keys: &TenantKeys, tenant: &TenantId, r: &ChunkRef, obj: &[u8]) -> Result<Vec<u8>> {
    let what = format!("chunk {}", r.addr.to_hex());
    if obj.len() < 3 || obj[0] != CHUNK_MAGIC || obj[1] != FORMAT_V1 {
        return Err(Error::integrity(format!("{what}: bad header")));
    }
    let flag = obj[2];
    let payload = crypto::open(
        &keys.chunk,
        &chunk_aad(tenant, &r.addr, flag),
        &obj[3..],
        &what,
    )?;
    let plain = decompress_exact(flag, payload, r.len as usize, &what)?;
    if keys.address(&plain) != r.addr.0 {
        return Err(Error::integrity(format!("{what}: content hash mismatch")));
    }
    Ok(plain)
}

/// Uploads chunks of one put/import, deduplicating against what the tenant already stores.
pub(crate) struct Uploader<'a> {
    store: &'a Store,
    tenant: &'a TenantId,
    keys: Arc<TenantKeys>,
    /// addr -> stored object size (None while this put is uploading it).
    present: Mutex<HashMap<ChunkAddr, Option<u64>>>,
    lease: &'a gc::Lease,
    new_chunks: Mutex<(u64, u64, u64)>, // (chunks, stored bytes, raw bytes)
}

impl<'a> Uploader<'a> {
    pub(crate) async fn new(
        store: &'a Store,
        tenant: &'a TenantId,
        keys: Arc<TenantKeys>,
        lease: &'a gc::Lease,
    ) -> Result<Uploader<'a>> {
        // Listing is safe to dedup against: the put lease guarantees no GC sweep
        // of this tenant runs until our record is written (see gc.rs).
        let present: HashMap<ChunkAddr, Option<u64>> = store
            .list_chunks(tenant)
            .await?
            .into_iter()
            .map(|(a, size, _)| (a, Some(size)))
            .collect();
        Ok(Uploader {
            store,
            tenant,
            keys,
            present: Mutex::new(present),
            lease,
            new_chunks: Mutex::new((0, 0, 0)),
        })
    }

    pub(crate) async fn add(&self, data: Vec<u8>) -> Result<ChunkRef> {
        let len = u32::try_from(data.len()).map_err(|_| Error::internal("chunk too large"))?;
        let keys = self.keys.clone();
        let tenant = self.tenant.clone();
        let level = self.store.inner.cfg.zstd_level;
        let addr = ChunkAddr(keys.address(&data));
        {
            let mut p = self.present.lock().unwrap();
            if p.contains_key(&addr) {
                return Ok(ChunkRef { addr, len });
            }
            p.insert(addr, None);
        }
        self.lease.keep_alive(self.store).await?;
        let obj =
            tokio::task::spawn_blocking(move || encode_chunk(&keys, &tenant, &addr, &data, level))
                .await
                .map_err(|e| Error::internal(format!("encode task: {e}")))?;
        let size = obj.len() as u64;
        self.store
            .inner
            .os
            .put(&chunk_path(self.tenant, &addr), PutPayload::from(obj))
            .await
            .map_err(os_err)?;
        self.present.lock().unwrap().insert(addr, Some(size));
        let mut n = self.new_chunks.lock().unwrap();
        n.0 += 1;
        n.1 += size;
        n.2 += len as u64;
        Ok(ChunkRef { addr, len })
    }

    fn stored_size(&self, a: &ChunkAddr) -> u64 {
        self.present
            .lock()
            .unwrap()
            .get(a)
            .copied()
            .flatten()
            .unwrap_or(0)
    }

    /// Fill the size fields of a record whose artifacts' chunk lists are complete.
    pub(crate) fn finish_record(&self, rec: &mut SnapshotRecord, new_per_artifact: &[u64]) {
        let mut all = HashSet::new();
        rec.raw_bytes = 0;
        rec.stored_bytes = 0;
        for (i, a) in rec.artifacts.iter_mut().enumerate() {
            let mut mine = HashSet::new();
            a.raw_size = a.chunks.iter().map(|c| c.len as u64).sum();
            a.stored_size = 0;
            for c in &a.chunks {
                if mine.insert(c.addr) {
                    a.stored_size += self.stored_size(&c.addr);
                }
                if all.insert(c.addr) {
                    rec.stored_bytes += self.stored_size(&c.addr);
                }
            }
            a.new_stored_size = new_per_artifact.get(i).copied().unwrap_or(0);
            rec.raw_bytes += a.raw_size;
        }
        rec.unique_chunks = all.len() as u64;
        let n = *self.new_chunks.lock().unwrap();
        rec.new_chunks = n.0;
        rec.new_stored_bytes = n.1;
        rec.new_raw_bytes = n.2;
    }

    pub(crate) fn new_stored_so_far(&self) -> u64 {
        self.new_chunks.lock().unwrap().1
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
                master: master_key,
                label: label.to_string(),
                local_root: local_root_of(label),
                cfg,
                keys: Mutex::new(HashMap::new()),
            }),
        };
        store.check_master_key().await?;
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

    /// Open a value sealed by [`Store::seal_secret`].
    pub fn open_secret(&self, tenant: &TenantId, name: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        self.master().open_secret(tenant.as_str(), name, sealed)
    }

    pub(crate) fn master(&self) -> &MasterKey {
        &self.inner.master
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

    async fn check_master_key(&self) -> Result<()> {
        let path = OPath::from("keycheck");
        let wrap = self.inner.master.wrap_key();
        for _ in 0..3 {
            if let Some(b) = self.get_bytes(&path).await? {
                let plain =
                    crypto::open(&wrap, crypto::KEYCHECK_AAD, &b, "keycheck").map_err(|_| {
                        crypto::wrong_master_key(&format!("store {}", self.inner.label))
                    })?;
                if plain != crypto::KEYCHECK_PLAIN {
                    return Err(crypto::wrong_master_key("keycheck"));
                }
                return Ok(());
            }
            let sealed = crypto::seal(&wrap, crypto::KEYCHECK_AAD, crypto::KEYCHECK_PLAIN);
            if self.put_create(&path, sealed).await? {
                return Ok(());
            }
        }
        Err(Error::internal("keycheck: could not create or read"))
    }

    /// The tenant's keys; `create` makes a data key on first use (puts only).
    pub(crate) async fn tenant_keys(
        &self,
        tenant: &TenantId,
        create: bool,
    ) -> Result<Option<Arc<TenantKeys>>> {
        if let Some(k) = self.inner.keys.lock().unwrap().get(tenant.as_str()) {
            return Ok(Some(k.clone()));
        }
        let path = OPath::from(format!("{}/key", tenant_prefix(tenant)));
        let wrap = self.inner.master.wrap_key();
        let aad = crypto::tenant_key_aad(tenant.as_str());
        for _ in 0..3 {
            if let Some(b) = self.get_bytes(&path).await? {
                let plain = crypto::open(&wrap, &aad, &b, &format!("data key of tenant {tenant}"))
                    .map_err(|e| {
                        e.context("the tenant's wrapped data key is corrupt or was replaced")
                    })?;
                let dk: [u8; 32] = plain
                    .as_slice()
                    .try_into()
                    .map_err(|_| Error::integrity("tenant data key has the wrong length"))?;
                let keys = Arc::new(TenantKeys::derive(&dk));
                self.inner
                    .keys
                    .lock()
                    .unwrap()
                    .insert(tenant.as_str().to_string(), keys.clone());
                return Ok(Some(keys));
            }
            if !create {
                return Ok(None);
            }
            let dk: [u8; 32] = crypto::random_bytes();
            let sealed = crypto::seal(&wrap, &aad, &dk);
            // Create-only: two nodes racing to create the key agree on one.
            self.put_create(&path, sealed).await?;
        }
        Err(Error::internal("tenant key: could not create or read"))
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
        let sealed = crypto::seal(&keys.record, &record_aad(&rec.tenant, &rec.id), &z);
        let mut out = vec![RECORD_MAGIC, FORMAT_V1];
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
        if b.len() < 2 || b[0] != RECORD_MAGIC || b[1] != FORMAT_V1 {
            return Err(Error::integrity(format!("{what}: bad header")));
        }
        let z = crypto::open(&keys.record, &record_aad(tenant, id), &b[2..], &what)?;
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

    /// Write the snapshot's artifacts (files `dir/<name>`) and then its record.
    /// Only chunks the tenant does not already store are uploaded. The record
    /// is written last: a snapshot exists only once all its chunks do.
    pub async fn put_snapshot(
        &self,
        meta: NewSnapshot,
        dir: &Path,
        artifacts: &[(String, String)],
        progress: Option<&dyn Progress>,
    ) -> Result<SnapshotRecord> {
        let mut names = HashSet::new();
        let mut total = 0u64;
        for (name, _) in artifacts {
            validate_artifact_name(name)?;
            if !names.insert(name.as_str()) {
                return Err(Error::invalid(format!("artifact {name:?} listed twice")));
            }
            let m = std::fs::metadata(dir.join(name)).map_err(|e| {
                Error::invalid(format!("artifact {name:?} in {}: {e}", dir.display()))
            })?;
            if !m.is_file() {
                return Err(Error::invalid(format!(
                    "artifact {name:?} is not a regular file"
                )));
            }
            total += m.len();
        }
        let tenant = meta.tenant.clone();
        if self
            .inner
            .os
            .head(&record_path(&tenant, &meta.id))
            .await
            .is_ok()
        {
            return Err(Error::state(format!("snapshot {} already exists", meta.id)));
        }
        let keys = self.tenant_keys(&tenant, true).await?.expect("created");
        if let Some(p) = progress {
            p.set_total(total);
        }
        let lease = gc::Lease::acquire_put(self, &tenant).await?;
        let res = self
            .put_inner(meta, dir, artifacts, progress, &keys, &lease)
            .await;
        lease.release(self).await;
        if let Some(p) = progress {
            p.finish();
        }
        res
    }

    async fn put_inner(
        &self,
        meta: NewSnapshot,
        dir: &Path,
        artifacts: &[(String, String)],
        progress: Option<&dyn Progress>,
        keys: &Arc<TenantKeys>,
        lease: &gc::Lease,
    ) -> Result<SnapshotRecord> {
        let tenant = meta.tenant.clone();
        let up = Uploader::new(self, &tenant, keys.clone(), lease).await?;
        let mut arts = Vec::new();
        let mut new_per = Vec::new();
        for (name, kind) in artifacts {
            let before = up.new_stored_so_far();
            let chunks = self
                .chunk_file(&up, &dir.join(name), keys.cdc_seed, progress)
                .await
                .map_err(|e| e.context(format!("artifact {name:?}")))?;
            new_per.push(up.new_stored_so_far() - before);
            arts.push(ArtifactRecord {
                name: name.clone(),
                kind: kind.clone(),
                raw_size: 0,
                stored_size: 0,
                new_stored_size: 0,
                chunks,
            });
        }
        let mut rec = SnapshotRecord {
            v: 1,
            id: meta.id,
            tenant: meta.tenant,
            source_sandbox: meta.source_sandbox,
            backend: meta.backend,
            manifest_digest: meta.manifest_digest,
            created_by: meta.created_by,
            created_at_ms: meta.created_at_ms,
            parent: meta.parent,
            expires_at_ms: meta.expires_at_ms,
            meta: meta.meta,
            artifacts: arts,
            raw_bytes: 0,
            stored_bytes: 0,
            unique_chunks: 0,
            new_chunks: 0,
            new_stored_bytes: 0,
            new_raw_bytes: 0,
        };
        up.finish_record(&mut rec, &new_per);
        self.write_record(keys, &rec, lease).await?;
        Ok(rec)
    }

    pub(crate) async fn write_record(
        &self,
        keys: &TenantKeys,
        rec: &SnapshotRecord,
        lease: &gc::Lease,
    ) -> Result<()> {
        lease.keep_alive(self).await?;
        let body = self.seal_record(keys, rec)?;
        if !self
            .put_create(&record_path(&rec.tenant, &rec.id), body)
            .await?
        {
            return Err(Error::state(format!("snapshot {} already exists", rec.id)));
        }
        Ok(())
    }

    async fn chunk_file(
        &self,
        up: &Uploader<'_>,
        path: &Path,
        seed: u64,
        progress: Option<&dyn Progress>,
    ) -> Result<Vec<ChunkRef>> {
        let cfg = &self.inner.cfg;
        let (min, avg, max) = (cfg.chunk_min, cfg.chunk_avg, cfg.chunk_max);
        let file = std::fs::File::open(path)?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>>>(cfg.concurrency * 2);
        let reader = tokio::task::spawn_blocking(move || {
            let cdc = fastcdc::v2020::StreamCDC::with_level_and_seed(
                file,
                min,
                avg,
                max,
                fastcdc::v2020::Normalization::Level1,
                seed,
            );
            for c in cdc {
                let r = c
                    .map(|c| c.data)
                    .map_err(|e| Error::internal(format!("reading: {e}")));
                let stop = r.is_err();
                if tx.blocking_send(r).is_err() || stop {
                    break;
                }
            }
        });
        let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let mut results = stream
            .map(|r| async move { up.add(r?).await })
            .buffered(cfg.concurrency);
        let mut refs = Vec::new();
        let mut err = None;
        while let Some(r) = results.next().await {
            match r {
                Ok(c) => {
                    if let Some(p) = progress {
                        p.inc(c.len as u64);
                    }
                    refs.push(c);
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        drop(results);
        let _ = reader.await;
        match err {
            Some(e) => Err(e),
            None => Ok(refs),
        }
    }

    /// The record of one of `tenant`'s snapshots. Another tenant's id -> `not_found`,
    /// exactly as for an id that never existed.
    pub async fn get_snapshot(&self, tenant: &TenantId, id: &SnapshotId) -> Result<SnapshotRecord> {
        let not_found = || Error::not_found(format!("snapshot {id}"));
        let Some(b) = self.get_bytes(&record_path(tenant, id)).await? else {
            return Err(not_found());
        };
        let keys = self
            .tenant_keys(tenant, false)
            .await?
            .ok_or_else(not_found)?;
        self.open_record(&keys, tenant, id, &b)
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
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(os_err(e)),
        }
    }

    /// Fetch a chunk and verify it (AEAD + length + keyed hash). Missing -> integrity error.
    pub(crate) async fn fetch_chunk(
        &self,
        keys: &Arc<TenantKeys>,
        tenant: &TenantId,
        r: &ChunkRef,
    ) -> Result<Bytes> {
        let obj = self
            .get_bytes(&chunk_path(tenant, &r.addr))
            .await?
            .ok_or_else(|| {
                Error::integrity(format!(
                    "chunk {} is missing from the store",
                    r.addr.to_hex()
                ))
            })?;
        let keys = keys.clone();
        let tenant = tenant.clone();
        let r = r.clone();
        let plain = tokio::task::spawn_blocking(move || decode_chunk(&keys, &tenant, &r, &obj))
            .await
            .map_err(|e| Error::internal(format!("decode task: {e}")))??;
        Ok(Bytes::from(plain))
    }

    /// Restore every artifact of the snapshot into `dest_dir` (which must not exist,
    /// or be empty). Every chunk is fetched and verified into a hidden temp dir next
    /// to `dest_dir`, which is renamed into place only when all of it verified; on
    /// any failure nothing is left behind and the error names the artifact.
    pub async fn restore_snapshot(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
        dest_dir: &Path,
        progress: Option<&dyn Progress>,
    ) -> Result<SnapshotRecord> {
        let rec = self.get_snapshot(tenant, id).await?;
        let keys = self
            .tenant_keys(tenant, false)
            .await?
            .ok_or_else(|| Error::not_found(format!("snapshot {id}")))?;
        if let Ok(mut rd) = std::fs::read_dir(dest_dir) {
            if rd.next().is_some() {
                return Err(Error::invalid(format!(
                    "restore destination {} exists and is not empty",
                    dest_dir.display()
                )));
            }
        } else if dest_dir.exists() {
            return Err(Error::invalid(format!(
                "restore destination {} is not a directory",
                dest_dir.display()
            )));
        }
        let parent = match dest_dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent)?;
        let base = dest_dir
            .file_name()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        let tmp = parent.join(format!(
            ".{base}.stasis-restore-{}",
            hex::encode(crypto::random_bytes::<8>())
        ));
        std::fs::create_dir(&tmp)?;
        if let Some(p) = progress {
            p.set_total(rec.raw_bytes);
        }
        let mut res = self.restore_into(&rec, &keys, tenant, &tmp, progress).await;
        if matches!(&res, Err(e) if e.code == ErrorCode::IntegrityError && e.message.contains("is missing"))
        {
            // Deleted (or expired and collected) while we were reading it: say so.
            if let Ok(None) = self.get_bytes(&record_path(tenant, id)).await {
                res = Err(Error::not_found(format!(
                    "snapshot {id} (deleted during restore)"
                )));
            }
        }
        let res = match res {
            Ok(()) => {
                // An empty existing dest is replaced atomically by rename(2).
                std::fs::rename(&tmp, dest_dir)
                    .map_err(Error::from)
                    .map(|_| {
                        if let Ok(d) = std::fs::File::open(&parent) {
                            let _ = d.sync_all();
                        }
                    })
            }
            Err(e) => Err(e),
        };
        if res.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        if let Some(p) = progress {
            p.finish();
        }
        res.map(|_| rec)
    }

    async fn restore_into(
        &self,
        rec: &SnapshotRecord,
        keys: &Arc<TenantKeys>,
        tenant: &TenantId,
        tmp: &Path,
        progress: Option<&dyn Progress>,
    ) -> Result<()> {
        // Chunks that occur more than once (zero pages...) are verified once and cached.
        let mut mult: HashMap<ChunkAddr, u32> = HashMap::new();
        for a in &rec.artifacts {
            for c in &a.chunks {
                *mult.entry(c.addr).or_default() += 1;
            }
        }
        let cache: Mutex<(HashMap<ChunkAddr, Bytes>, usize)> = Mutex::new((HashMap::new(), 0));
        let cap = self.inner.cfg.restore_cache_bytes;
        for a in &rec.artifacts {
            let ctx = |e: Error| e.context(format!("artifact {:?}", a.name));
            let f = tokio::fs::File::create(tmp.join(&a.name))
                .await
                .map_err(|e| ctx(e.into()))?;
            let mut w = tokio::io::BufWriter::with_capacity(1 << 20, f);
            let (mult, cache) = (&mult, &cache);
            // Owned chunk refs: a stream of closures over `&ChunkRef` is not
            // provably Send to callers that spawn this future.
            let mut s = futures::stream::iter(a.chunks.iter().cloned())
                .map(|c| async move {
                    let c = &c;
                    if let Some(b) = cache.lock().unwrap().0.get(&c.addr) {
                        return Ok(b.clone());
                    }
                    let b = self.fetch_chunk(keys, tenant, c).await?;
                    if mult.get(&c.addr).copied().unwrap_or(0) > 1 {
                        let mut g = cache.lock().unwrap();
                        if g.1 + b.len() <= cap && !g.0.contains_key(&c.addr) {
                            g.1 += b.len();
                            g.0.insert(c.addr, b.clone());
                        }
                    }
                    Ok::<Bytes, Error>(b)
                })
                .buffered(self.inner.cfg.concurrency);
            while let Some(r) = s.next().await {
                let b = r.map_err(ctx)?;
                w.write_all(&b).await.map_err(|e| ctx(e.into()))?;
                if let Some(p) = progress {
                    p.inc(b.len() as u64);
                }
            }
            w.flush().await.map_err(|e| ctx(e.into()))?;
            let f = w.into_inner();
            f.sync_all().await.map_err(|e| ctx(e.into()))?;
            let len = f.metadata().await.map_err(|e| ctx(e.into()))?.len();
            if len != a.raw_size {
                return Err(ctx(Error::integrity(format!(
                    "restored {len} bytes, record says {}",
                    a.raw_size
                ))));
            }
        }
        if let Ok(d) = std::fs::File::open(tmp) {
            let _ = d.sync_all();
        }
        Ok(())
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
