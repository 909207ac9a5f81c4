//! Putting a snapshot: validating its artifacts, chunking their files
//! (content-defined, seeded per tenant), uploading new chunks under a put
//! lease, then writing the record last.

use crate::crypto::TenantKeys;
use crate::objects::record_path;
use crate::upload::Uploader;
use crate::{
    gc, validate_artifact_name, ArtifactRecord, ChunkRef, NewSnapshot, Progress, SnapshotRecord,
    Store,
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
}
