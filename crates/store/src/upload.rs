//! The deduplicating chunk uploader of one put or import: which chunks the
//! tenant already stores, uploading the new ones, and the size accounting
//! of the resulting record.

use crate::crypto::TenantKeys;
use crate::format::encode_chunk;
use crate::objects::{chunk_path, os_err};
use crate::{gc, ChunkAddr, ChunkRef, SnapshotRecord, Store};
use object_store::PutPayload;
use stasis_core::{Error, Result, TenantId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Uploads chunks of one put/import, deduplicating against what the tenant already stores.
pub(crate) struct Uploader<'a> {
    store: &'a Store,
    tenant: &'a TenantId,
    keys: Arc<TenantKeys>,
    /// addr -> stored object size (None while this put is uploading it).
    present: Mutex<HashMap<ChunkAddr, Option<u64>>>,
    /// `present` holds only the parent's chunks: ask the object store
    /// about any other before uploading it.
    head_on_miss: bool,
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
        Ok(Self::with(store, tenant, keys, lease, present, false))
    }

    fn with(
        store: &'a Store,
        tenant: &'a TenantId,
        keys: Arc<TenantKeys>,
        lease: &'a gc::Lease,
        present: HashMap<ChunkAddr, Option<u64>>,
        head_on_miss: bool,
    ) -> Uploader<'a> {
        Uploader {
            store,
            tenant,
            keys,
            present: Mutex::new(present),
            head_on_miss,
            lease,
            new_chunks: Mutex::new((0, 0, 0)),
        }
    }

    /// Deduplicate against the parent snapshot's chunks, known present
    /// without listing the tenant's store (its record exists, and the put
    /// lease keeps GC away until ours is written); any other chunk is
    /// looked up before it is uploaded. `None` when the parent's record
    /// does not carry its chunks' stored sizes (written by an older build).
    pub(crate) fn from_parent(
        store: &'a Store,
        tenant: &'a TenantId,
        keys: Arc<TenantKeys>,
        lease: &'a gc::Lease,
        parent: &SnapshotRecord,
    ) -> Option<Uploader<'a>> {
        let mut present = HashMap::new();
        for c in parent.artifacts.iter().flat_map(|a| &a.chunks) {
            if c.stored == 0 {
                return None;
            }
            present.insert(c.addr, Some(c.stored as u64));
        }
        Some(Self::with(store, tenant, keys, lease, present, true))
    }

    pub(crate) async fn add(&self, data: Vec<u8>) -> Result<ChunkRef> {
        let addr = ChunkAddr(self.keys.address(&data));
        self.add_hashed(addr, data).await
    }

    /// Store a chunk whose address the caller computed (`keys.address`).
    pub(crate) async fn add_hashed(&self, addr: ChunkAddr, data: Vec<u8>) -> Result<ChunkRef> {
        let len = u32::try_from(data.len()).map_err(|_| Error::internal("chunk too large"))?;
        let keys = self.keys.clone();
        let tenant = self.tenant.clone();
        let level = self.store.inner.cfg.zstd_level;
        let chunk = |stored: u64| ChunkRef {
            addr,
            len,
            stored: stored as u32,
        };
        {
            let mut p = self.present.lock().unwrap();
            if let Some(s) = p.get(&addr) {
                return Ok(chunk(s.unwrap_or(0)));
            }
            p.insert(addr, None);
        }
        if self.head_on_miss {
            match self
                .store
                .inner
                .os
                .head(&chunk_path(self.tenant, &addr))
                .await
            {
                Ok(m) => {
                    self.present.lock().unwrap().insert(addr, Some(m.size));
                    return Ok(chunk(m.size));
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    self.present.lock().unwrap().remove(&addr);
                    return Err(os_err(e));
                }
            }
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
        Ok(chunk(size))
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
            for c in a.chunks.iter_mut() {
                // A reference handed out while its chunk was still uploading
                // learns its size now.
                c.stored = self.stored_size(&c.addr) as u32;
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
