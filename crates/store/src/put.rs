//! Putting a snapshot: validating its artifacts, chunking their files
//! (content-defined, seeded per tenant, or fixed aligned blocks for
//! page-addressed files: see `blocks`), uploading new chunks under a put
//! lease, then writing the record last.
//!
//! A put that names a parent snapshot of the same tenant and key
//! generation deduplicates against the parent's chunks (no listing of the
//! tenant's store) and carries unchanged blocks of block-cut artifacts
//! forward without storing them again.

use crate::blocks::{self, Block, Scan};
use crate::crypto::TenantKeys;
use crate::objects::record_path;
use crate::upload::Uploader;
use crate::{
    gc, validate_artifact_name, ArtifactRecord, ChunkRef, Chunking, NewSnapshot, Progress,
    PutArtifact, SnapshotRecord, Store,
};
use futures::StreamExt;
use stasis_core::{Error, Result};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

impl Store {
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
        let arts: Vec<PutArtifact> = artifacts
            .iter()
            .map(|(n, k)| PutArtifact::new(n, k))
            .collect();
        self.put_snapshot_artifacts(meta, dir, &arts, progress)
            .await
    }

    /// [`Store::put_snapshot`] with each artifact's chunking chosen.
    pub async fn put_snapshot_artifacts(
        &self,
        meta: NewSnapshot,
        dir: &Path,
        artifacts: &[PutArtifact],
        progress: Option<&dyn Progress>,
    ) -> Result<SnapshotRecord> {
        let mut names = HashSet::new();
        let mut total = 0u64;
        for PutArtifact { name, chunking, .. } in artifacts {
            validate_artifact_name(name)?;
            if let Chunking::Blocks(b) = chunking {
                blocks::validate_block(*b).map_err(|e| e.context(format!("artifact {name:?}")))?;
            }
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
        artifacts: &[PutArtifact],
        progress: Option<&dyn Progress>,
        keys: &Arc<TenantKeys>,
        lease: &gc::Lease,
    ) -> Result<SnapshotRecord> {
        let tenant = meta.tenant.clone();
        let parent = self.parent_record(&meta, keys).await;
        let up = match parent
            .as_ref()
            .and_then(|p| Uploader::from_parent(self, &tenant, keys.clone(), lease, p))
        {
            Some(up) => up,
            None => Uploader::new(self, &tenant, keys.clone(), lease).await?,
        };
        let mut arts = Vec::new();
        let mut new_per = Vec::new();
        for PutArtifact {
            name,
            kind,
            chunking,
        } in artifacts
        {
            let before = up.new_stored_so_far();
            let path = dir.join(name);
            let (chunks, block) = match *chunking {
                Chunking::ContentDefined => (
                    self.chunk_file(&up, &path, keys.cdc_seed, progress).await,
                    None,
                ),
                Chunking::Blocks(b) => {
                    // The parent's blocks of the same artifact, cut the same way.
                    let prev = parent
                        .as_ref()
                        .and_then(|p| p.artifact(name))
                        .filter(|a| a.block == Some(b))
                        .map(|a| Arc::new(a.chunks.clone()));
                    (
                        self.block_file(&up, &path, b, keys, prev, progress).await,
                        Some(b),
                    )
                }
            };
            let chunks = chunks.map_err(|e| e.context(format!("artifact {name:?}")))?;
            new_per.push(up.new_stored_so_far() - before);
            arts.push(ArtifactRecord {
                name: name.clone(),
                kind: kind.clone(),
                raw_size: 0,
                stored_size: 0,
                new_stored_size: 0,
                block,
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

    /// The put's parent, when it is readable and sealed under the same
    /// data key generation (its chunk addresses are comparable with ours).
    /// Any failure just means no parent: the put then deduplicates by
    /// listing, as a first put does.
    async fn parent_record(
        &self,
        meta: &NewSnapshot,
        keys: &Arc<TenantKeys>,
    ) -> Option<SnapshotRecord> {
        let id = meta.parent.as_ref()?;
        match self.snapshot_with_keys(&meta.tenant, id).await {
            Ok((rec, k)) if k.gen == keys.gen => Some(rec),
            _ => None,
        }
    }

    /// Cut a page-addressed file into `block`-sized chunks, carrying the
    /// parent's unchanged blocks forward (see `blocks`).
    async fn block_file(
        &self,
        up: &Uploader<'_>,
        path: &Path,
        block: u32,
        keys: &Arc<TenantKeys>,
        parent: Option<Arc<Vec<ChunkRef>>>,
        progress: Option<&dyn Progress>,
    ) -> Result<Vec<ChunkRef>> {
        let len = std::fs::metadata(path)?.len();
        let scan = Arc::new(Scan::new(keys.clone(), block, len, parent));
        let n = scan.blocks();
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(8);
        let (tx, mut rx) = tokio::sync::mpsc::channel(self.inner.cfg.concurrency * 2);
        let p = path.to_path_buf();
        let scanner = tokio::task::spawn_blocking(move || blocks::scan(&p, scan, workers, tx));
        let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let mut results = stream
            .map(|r: Result<(usize, Block)>| async move {
                match r? {
                    (i, Block::Same(c)) => Ok((i, c)),
                    (i, Block::New(addr, data)) => Ok((i, up.add_hashed(addr, data).await?)),
                }
            })
            .buffer_unordered(self.inner.cfg.concurrency);
        let mut refs: Vec<Option<ChunkRef>> = vec![None; n];
        let mut err = None;
        while let Some(r) = results.next().await {
            match r {
                Ok((i, c)) => {
                    if let Some(p) = progress {
                        p.inc(c.len as u64);
                    }
                    refs[i] = Some(c);
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        drop(results);
        let scanned = scanner
            .await
            .map_err(|e| Error::internal(format!("block scan task: {e}")))?;
        if let Some(e) = err {
            return Err(e);
        }
        scanned?;
        refs.into_iter()
            .enumerate()
            .map(|(i, c)| c.ok_or_else(|| Error::internal(format!("block {i} was never scanned"))))
            .collect()
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
}
