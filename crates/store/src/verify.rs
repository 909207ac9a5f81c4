//! Verifying what the store holds before anyone needs it, and repairing it.
//!
//! A chunk that rots in the store (truncated, a flipped bit, gone) is found
//! by a restore only on the day the store's copy is needed. The scrub reads
//! every chunk of a snapshot through the same check a restore makes
//! ([`Store::fetch_object`] then `format::decode_chunk`: AEAD tag, exact
//! length, keyed hash of the plaintext), one chunk at a time so the caller
//! can pace it.
//!
//! What it finds is kept as a *damage mark* beside the record,
//! `tenants/<t>/damage/<snapshot-id>`: plain JSON of the damaged chunks'
//! addresses (already public as object names), lengths, artifact names and
//! offsets. A restore that fails on a marked snapshot says so; the mark goes
//! when a later verification finds the snapshot whole, or with the snapshot.
//!
//! Repair re-puts a damaged chunk from bytes the caller still holds (a
//! node's local pause files): the bytes at the chunk's offset in a file of
//! the same artifact are used only when their keyed hash is the chunk's
//! address, so no file can put anything but the original bytes back. A
//! chunk of zeros needs no copy at all.

use crate::crypto::TenantKeys;
use crate::format::{decode_chunk, encode_chunk};
use crate::objects::{chunk_path, os_err, tenant_prefix};
use crate::{ChunkAddr, ChunkRef, SnapshotRecord, Store};
use bytes::Bytes;
use object_store::path::Path as OPath;
use object_store::PutPayload;
use serde::{Deserialize, Serialize};
use stasis_core::{Error, ErrorCode, Result, SnapshotId, TenantId};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

/// One distinct chunk of a snapshot, at its first occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkSite {
    pub addr: ChunkAddr,
    /// Plaintext length.
    pub len: u32,
    pub artifact: String,
    /// Byte offset of the chunk in the artifact.
    pub offset: u64,
}

/// A snapshot's record, its tenant's keys and its distinct chunks: what
/// checking and repairing them one at a time needs.
pub struct SnapshotChunks {
    pub record: SnapshotRecord,
    keys: Arc<TenantKeys>,
    /// Distinct chunks in record order.
    pub sites: Vec<ChunkSite>,
}

/// A damaged chunk and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamagedChunk {
    #[serde(flatten)]
    pub site: ChunkSite,
    pub reason: String,
}

/// The damage mark of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotDamage {
    pub tenant: TenantId,
    pub snapshot: SnapshotId,
    pub found_at_ms: i64,
    pub chunks: Vec<DamagedChunk>,
}

impl SnapshotDamage {
    /// One line for logs and errors.
    pub fn summary(&self) -> String {
        let mut arts: Vec<&str> = self
            .chunks
            .iter()
            .map(|c| c.site.artifact.as_str())
            .collect();
        arts.dedup();
        format!(
            "{} damaged chunk(s) in artifact(s) {}",
            self.chunks.len(),
            arts.join(", ")
        )
    }
}

fn damage_path(t: &TenantId, id: &SnapshotId) -> OPath {
    OPath::from(format!("{}/damage/{}", tenant_prefix(t), id.as_str()))
}

impl Store {
    /// Fetch a chunk object; `Ok(None)` when it is missing.
    pub(crate) async fn fetch_object(
        &self,
        tenant: &TenantId,
        addr: &ChunkAddr,
    ) -> Result<Option<Bytes>> {
        self.get_bytes(&chunk_path(tenant, addr)).await
    }

    /// Verify a fetched chunk object (off the async threads): what restore
    /// and the scrub both call.
    pub(crate) async fn decode_object(
        &self,
        keys: &Arc<TenantKeys>,
        tenant: &TenantId,
        r: &ChunkRef,
        obj: Bytes,
    ) -> Result<Vec<u8>> {
        let keys = keys.clone();
        let tenant = tenant.clone();
        let r = r.clone();
        tokio::task::spawn_blocking(move || decode_chunk(&keys, &tenant, &r, &obj))
            .await
            .map_err(|e| Error::internal(format!("decode task: {e}")))?
    }

    /// The distinct chunks of one of `tenant`'s snapshots.
    pub async fn snapshot_chunks(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
    ) -> Result<SnapshotChunks> {
        let (record, keys) = self.snapshot_with_keys(tenant, id).await?;
        let mut seen = HashSet::new();
        let mut sites = Vec::new();
        for a in &record.artifacts {
            let mut offset = 0u64;
            for c in &a.chunks {
                if seen.insert(c.addr) {
                    sites.push(ChunkSite {
                        addr: c.addr,
                        len: c.len,
                        artifact: a.name.clone(),
                        offset,
                    });
                }
                offset += c.len as u64;
            }
        }
        Ok(SnapshotChunks {
            record,
            keys,
            sites,
        })
    }

    /// Read and verify one chunk as a restore would: `Ok(None)` when it is
    /// whole, `Ok(Some(reason))` when it is missing or fails verification,
    /// `Err` when the store could not be read (nothing is known).
    pub async fn check_chunk(
        &self,
        sc: &SnapshotChunks,
        site: &ChunkSite,
    ) -> Result<Option<String>> {
        let tenant = &sc.record.tenant;
        let Some(obj) = self.fetch_object(tenant, &site.addr).await? else {
            return Ok(Some("missing from the store".into()));
        };
        let r = ChunkRef {
            addr: site.addr,
            len: site.len,
            stored: 0,
        };
        match self.decode_object(&sc.keys, tenant, &r, obj).await {
            Ok(_) => Ok(None),
            Err(e) if e.code == ErrorCode::IntegrityError => Ok(Some(e.message)),
            Err(e) => Err(e),
        }
    }

    /// Every chunk of a snapshot checked (a few at a time, unpaced): the
    /// damaged ones, empty when the snapshot is whole.
    pub async fn verify_snapshot(&self, sc: &SnapshotChunks) -> Result<Vec<DamagedChunk>> {
        use futures::StreamExt;
        // By index: a closure over `&ChunkSite` makes a future that is not
        // `Send` for every lifetime, and a spawned scrub needs that.
        let checks = futures::stream::iter(0..sc.sites.len())
            .map(|i| async move { self.check_chunk(sc, &sc.sites[i]).await.map(|r| (i, r)) })
            .buffered(self.inner.cfg.concurrency);
        futures::pin_mut!(checks);
        let mut out = Vec::new();
        while let Some(r) = checks.next().await {
            if let (i, Some(reason)) = r? {
                out.push(DamagedChunk {
                    site: sc.sites[i].clone(),
                    reason,
                });
            }
        }
        Ok(out)
    }

    /// Put a damaged chunk back from `copies` (`(artifact name, file)`
    /// holding the artifact's bytes as the snapshot recorded them), or from
    /// nothing when it is all zeros. True when the chunk was re-put and now
    /// verifies. A file is read at every offset the chunk occurs at in an
    /// artifact of its name; bytes whose keyed hash is not the chunk's
    /// address are never used.
    pub async fn repair_chunk(
        &self,
        sc: &SnapshotChunks,
        site: &ChunkSite,
        copies: &[(String, PathBuf)],
    ) -> Result<bool> {
        let Some(plain) = self.find_intact_bytes(sc, site, copies).await? else {
            return Ok(false);
        };
        let tenant = &sc.record.tenant;
        let obj = encode_chunk(
            &sc.keys,
            tenant,
            &site.addr,
            &plain,
            self.inner.cfg.zstd_level,
        );
        // Overwrite: the damaged object is in the way of a create.
        self.os()
            .put(&chunk_path(tenant, &site.addr), PutPayload::from(obj))
            .await
            .map_err(os_err)?;
        Ok(self.check_chunk(sc, site).await?.is_none())
    }

    async fn find_intact_bytes(
        &self,
        sc: &SnapshotChunks,
        site: &ChunkSite,
        copies: &[(String, PathBuf)],
    ) -> Result<Option<Vec<u8>>> {
        let keys = &sc.keys;
        if keys.zero_address(site.len) == site.addr.0 {
            return Ok(Some(vec![0u8; site.len as usize]));
        }
        for a in &sc.record.artifacts {
            let mut offset = 0u64;
            for c in &a.chunks {
                if c.addr == site.addr {
                    for (_, path) in copies.iter().filter(|(n, _)| *n == a.name) {
                        let (p, len) = (path.clone(), c.len as usize);
                        let read = tokio::task::spawn_blocking(move || read_at(&p, offset, len))
                            .await
                            .map_err(|e| Error::internal(format!("read task: {e}")))?;
                        if let Ok(b) = read {
                            if keys.address(&b) == site.addr.0 {
                                return Ok(Some(b));
                            }
                        }
                    }
                }
                offset += c.len as u64;
            }
        }
        Ok(None)
    }

    /// Record what a verification found damaged in a snapshot.
    pub async fn mark_damage(&self, d: &SnapshotDamage) -> Result<()> {
        let body = serde_json::to_vec(d).map_err(|e| Error::internal(e.to_string()))?;
        self.os()
            .put(&damage_path(&d.tenant, &d.snapshot), PutPayload::from(body))
            .await
            .map_err(os_err)?;
        Ok(())
    }

    /// Forget a snapshot's damage mark (it verified whole, or is gone). Idempotent.
    pub async fn clear_damage(&self, tenant: &TenantId, id: &SnapshotId) -> Result<()> {
        match self.os().delete(&damage_path(tenant, id)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(os_err(e)),
        }
    }

    /// A snapshot's damage mark, if it has one (an unreadable mark reads as none).
    pub async fn damage_of(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
    ) -> Result<Option<SnapshotDamage>> {
        Ok(self
            .get_bytes(&damage_path(tenant, id))
            .await?
            .and_then(|b| serde_json::from_slice(&b).ok()))
    }
}

/// `len` bytes of a regular file at `offset`, not following a symlink and
/// never blocking on anything but a regular file.
fn read_at(path: &std::path::Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, offset)?;
    Ok(b)
}

fn libc_flags() -> i32 {
    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)
        .bits()
}
