//! Restoring a snapshot: fetching and verifying its chunks (with a bounded
//! cache of repeated chunks) and writing its artifacts into a directory.

use crate::crypto::{self, TenantKeys};
use crate::objects::record_path;
use crate::{ChunkAddr, ChunkRef, Progress, SnapshotRecord, Store};
use bytes::Bytes;
use futures::StreamExt;
use stasis_core::{Error, ErrorCode, Result, SnapshotId, TenantId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

/// Artifacts up to this size are restored before a restore asks what the
/// caller keeps (see [`Store::restore_snapshot_reusing`]).
pub const SMALL_ARTIFACT: u64 = 1 << 20;

/// What a restore asks the caller for: given the directory holding the
/// snapshot's small artifacts, `(artifact name, file)` pairs it keeps.
pub type Reuse<'a> = &'a (dyn Fn(&Path) -> Vec<(String, PathBuf)> + Send + Sync);

impl Store {
    /// Fetch a chunk and verify it (AEAD + length + keyed hash). Missing -> integrity error.
    pub(crate) async fn fetch_chunk(
        &self,
        keys: &Arc<TenantKeys>,
        tenant: &TenantId,
        r: &ChunkRef,
    ) -> Result<Bytes> {
        let obj = self.fetch_object(tenant, &r.addr).await?.ok_or_else(|| {
            Error::integrity(format!(
                "chunk {} is missing from the store",
                r.addr.to_hex()
            ))
        })?;
        let plain = self.decode_object(keys, tenant, r, obj).await?;
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
        self.restore_snapshot_reusing(tenant, id, dest_dir, progress, None)
            .await
    }

    /// [`Store::restore_snapshot`], where the caller may already hold some
    /// artifacts: the small ones (up to [`SMALL_ARTIFACT`] bytes: metadata)
    /// are restored first, then `reuse` is asked, given the directory they
    /// are in, for files of this snapshot's other artifacts that the caller
    /// keeps verified (by a hash the restored metadata names) and that
    /// nothing writes; those of the recorded size are hard-linked in instead
    /// of fetched. Anything else (or a link that fails) is fetched.
    pub async fn restore_snapshot_reusing(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
        dest_dir: &Path,
        progress: Option<&dyn Progress>,
        reuse: Option<Reuse<'_>>,
    ) -> Result<SnapshotRecord> {
        let (rec, keys) = self.snapshot_with_keys(tenant, id).await?;
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
        let mut res = self
            .restore_into(&rec, &keys, tenant, &tmp, progress, reuse)
            .await;
        if matches!(&res, Err(e) if e.code == ErrorCode::IntegrityError && e.message.contains("is missing"))
        {
            // Deleted (or expired and collected) while we were reading it: say so.
            if let Ok(None) = self.get_bytes(&record_path(tenant, id)).await {
                res = Err(Error::not_found(format!(
                    "snapshot {id} (deleted during restore)"
                )));
            }
        }
        if matches!(&res, Err(e) if e.code == ErrorCode::IntegrityError) {
            // A damage the scrub already found: say so, and since when.
            if let Ok(Some(d)) = self.damage_of(tenant, id).await {
                res = res.map_err(|e| {
                    e.context(format!(
                        "snapshot {id} has known damage ({}, found at {} ms)",
                        d.summary(),
                        d.found_at_ms
                    ))
                });
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
        reuse: Option<Reuse<'_>>,
    ) -> Result<()> {
        // Chunks that occur more than once (zero pages...) are verified once and cached.
        let mut mult: HashMap<ChunkAddr, u32> = HashMap::new();
        for a in &rec.artifacts {
            for c in &a.chunks {
                *mult.entry(c.addr).or_default() += 1;
            }
        }
        // Repeated chunks that are all zeros (untouched guest pages, empty
        // disk clusters) are left as holes: not fetched, not written. The
        // record is authenticated, so an address equal to the keyed hash of
        // zeros of that length means exactly those bytes.
        let mut zero_lens: HashMap<u32, ChunkAddr> = HashMap::new();
        for a in &rec.artifacts {
            for c in &a.chunks {
                if mult.get(&c.addr).copied().unwrap_or(0) > 1 && !zero_lens.contains_key(&c.len) {
                    let z = ChunkAddr(keys.zero_address(c.len));
                    zero_lens.insert(c.len, z);
                }
            }
        }
        let is_zero = |c: &ChunkRef| zero_lens.get(&c.len) == Some(&c.addr);
        let cache: Mutex<(HashMap<ChunkAddr, Bytes>, usize)> = Mutex::new((HashMap::new(), 0));
        let cap = self.inner.cfg.restore_cache_bytes;
        // With `reuse`, the small artifacts first, then what the caller keeps.
        let mut order: Vec<&crate::ArtifactRecord> = rec.artifacts.iter().collect();
        if reuse.is_some() {
            order.sort_by_key(|a| a.raw_size > SMALL_ARTIFACT);
        }
        let mut provided: Option<HashMap<String, PathBuf>> = None;
        for a in order {
            let ctx = |e: Error| e.context(format!("artifact {:?}", a.name));
            if let (Some(r), true) = (reuse, a.raw_size > SMALL_ARTIFACT) {
                let kept = provided.get_or_insert_with(|| r(tmp).into_iter().collect());
                if let Some(src) = kept.get(&a.name) {
                    let fits =
                        std::fs::metadata(src).is_ok_and(|m| m.is_file() && m.len() == a.raw_size);
                    if fits && std::fs::hard_link(src, tmp.join(&a.name)).is_ok() {
                        if let Some(p) = progress {
                            p.inc(a.raw_size);
                        }
                        continue;
                    }
                }
            }
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
                    if is_zero(c) {
                        return Ok(None);
                    }
                    if let Some(b) = cache.lock().unwrap().0.get(&c.addr) {
                        return Ok(Some(b.clone()));
                    }
                    let b = self.fetch_chunk(keys, tenant, c).await?;
                    if mult.get(&c.addr).copied().unwrap_or(0) > 1 {
                        let mut g = cache.lock().unwrap();
                        if g.1 + b.len() <= cap && !g.0.contains_key(&c.addr) {
                            g.1 += b.len();
                            g.0.insert(c.addr, b.clone());
                        }
                    }
                    Ok::<_, Error>(Some(b))
                })
                .buffered(self.inner.cfg.concurrency);
            let mut chunks = a.chunks.iter();
            let mut written = 0u64;
            while let Some(r) = s.next().await {
                let len = chunks.next().map(|c| c.len as u64).unwrap_or(0);
                written += len;
                match r.map_err(ctx)? {
                    Some(b) => w.write_all(&b).await.map_err(|e| ctx(e.into()))?,
                    // A hole: the file's length is set below.
                    None => {
                        w.seek(std::io::SeekFrom::Current(len as i64))
                            .await
                            .map_err(|e| ctx(e.into()))?;
                    }
                }
                if let Some(p) = progress {
                    p.inc(len);
                }
            }
            w.flush().await.map_err(|e| ctx(e.into()))?;
            let f = w.into_inner();
            if written != a.raw_size {
                return Err(ctx(Error::integrity(format!(
                    "the chunks hold {written} bytes, record says {}",
                    a.raw_size
                ))));
            }
            // The chunks' lengths were checked above: this only makes the
            // trailing holes part of the file.
            f.set_len(a.raw_size).await.map_err(|e| ctx(e.into()))?;
            f.sync_all().await.map_err(|e| ctx(e.into()))?;
        }
        if let Ok(d) = std::fs::File::open(tmp) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}
