//! Export/import of one snapshot as a single self-contained encrypted file.
//!
//! ```text
//! "STASISX1"
//! u32 LE header length, header = nonce || XChaCha20-Poly1305(export key, JSON ExportHeader,
//!                                           AAD = "STASISX1 header")
//! table.len() frames, in table order:
//!   u32 LE frame length, flag(1) || nonce || XChaCha20-Poly1305(file key,
//!        blake3(plaintext)(32) || zstd-or-raw(plaintext),
//!        AAD = "stasis-export-chunk-v1" || export id || index u64 LE || flag)
//! EOF (anything after the last frame is refused)
//! ```
//! The export key is derived from the master key (never the tenant key: the
//! importing deployment has other tenant keys), and a random file key per file
//! is carried inside the sealed header: without the master key the file is
//! opaque. Import verifies every frame (tag, index, flag, exact length,
//! blake3), re-addresses chunks under the importing tenant's key and writes
//! the record last, so a tampered file leaves no snapshot behind.

use crate::format::{decompress_exact, maybe_compress};
use crate::upload::Uploader;
use crate::{crypto, gc, ChunkAddr, ChunkRef, Progress, SnapshotRecord, Store};
use serde::{Deserialize, Serialize};
use stasis_core::{Error, Result, SnapshotId, TenantId};
use std::collections::HashMap;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MAGIC: &[u8; 8] = b"STASISX1";
const HEADER_AAD: &[u8] = b"STASISX1 header";
const MAX_HEADER: u32 = 256 << 20;

#[derive(Serialize, Deserialize)]
struct ExportHeader {
    v: u32,
    export_id: String,
    file_key: String,
    /// The source record, artifacts' chunk lists emptied (addresses are source-tenant keyed).
    record: SnapshotRecord,
    /// Per artifact: indices into `table`.
    artifacts: Vec<Vec<u32>>,
    /// Plaintext length of each distinct chunk, in frame order.
    table: Vec<u32>,
}

fn frame_aad(export_id: &[u8], index: u64, flag: u8) -> Vec<u8> {
    let mut a = b"stasis-export-chunk-v1".to_vec();
    a.extend_from_slice(export_id);
    a.extend_from_slice(&index.to_le_bytes());
    a.push(flag);
    a
}

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::integrity(format!("export file: {msg}"))
}

impl Store {
    /// Write snapshot `id` of `tenant` to `out_file` (via a temp file + rename).
    /// Every chunk is verified on the way out.
    pub async fn export_snapshot(
        &self,
        tenant: &TenantId,
        id: &SnapshotId,
        out_file: &Path,
        progress: Option<&dyn Progress>,
    ) -> Result<SnapshotRecord> {
        let (rec, keys) = self.snapshot_with_keys(tenant, id).await?;
        let mut index: HashMap<ChunkAddr, u32> = HashMap::new();
        let mut table: Vec<ChunkRef> = Vec::new();
        let mut arts = Vec::new();
        for a in &rec.artifacts {
            let mut v = Vec::with_capacity(a.chunks.len());
            for c in &a.chunks {
                let i = *index.entry(c.addr).or_insert_with(|| {
                    table.push(c.clone());
                    (table.len() - 1) as u32
                });
                v.push(i);
            }
            arts.push(v);
        }
        let export_id: [u8; 16] = crypto::random_bytes();
        let file_key: [u8; 32] = crypto::random_bytes();
        let mut hrec = rec.clone();
        for a in &mut hrec.artifacts {
            a.chunks.clear();
        }
        let header = ExportHeader {
            v: 1,
            export_id: hex::encode(export_id),
            file_key: hex::encode(file_key),
            record: hrec,
            artifacts: arts,
            table: table.iter().map(|c| c.len).collect(),
        };
        let hjson = serde_json::to_vec(&header).map_err(|e| Error::internal(e.to_string()))?;
        let hsealed = crypto::seal(&self.master().export_key(), HEADER_AAD, &hjson);

        let tmp = out_file.with_file_name(format!(
            ".{}.stasis-export-{}",
            out_file
                .file_name()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default(),
            hex::encode(crypto::random_bytes::<8>())
        ));
        if let Some(p) = progress {
            p.set_total(table.iter().map(|c| c.len as u64).sum());
        }
        let res = async {
            let f = tokio::fs::File::create(&tmp).await?;
            let mut w = tokio::io::BufWriter::with_capacity(1 << 20, f);
            w.write_all(MAGIC).await?;
            w.write_all(&(hsealed.len() as u32).to_le_bytes()).await?;
            w.write_all(&hsealed).await?;
            let level = self.config().zstd_level;
            for (i, c) in table.iter().enumerate() {
                let plain = self.fetch_chunk(&keys, tenant, c).await?;
                let n = plain.len() as u64;
                let frame = tokio::task::spawn_blocking(move || {
                    let (flag, payload) = maybe_compress(&plain, level);
                    let mut pt = Vec::with_capacity(32 + payload.len());
                    pt.extend_from_slice(blake3::hash(&plain).as_bytes());
                    pt.extend_from_slice(&payload);
                    let sealed =
                        crypto::seal(&file_key, &frame_aad(&export_id, i as u64, flag), &pt);
                    let mut f = Vec::with_capacity(5 + sealed.len());
                    f.extend_from_slice(&((1 + sealed.len()) as u32).to_le_bytes());
                    f.push(flag);
                    f.extend_from_slice(&sealed);
                    f
                })
                .await
                .map_err(|e| Error::internal(e.to_string()))?;
                w.write_all(&frame).await?;
                if let Some(p) = progress {
                    p.inc(n);
                }
            }
            w.flush().await?;
            w.into_inner().sync_all().await?;
            tokio::fs::rename(&tmp, out_file).await?;
            Ok::<(), Error>(())
        }
        .await;
        if res.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        if let Some(p) = progress {
            p.finish();
        }
        res.map(|_| rec)
    }

    /// Import an export file into `tenant` (which must be the tenant it was exported from).
    /// Keeps the snapshot id; `invalid_state` if the tenant already has it.
    pub async fn import_snapshot(
        &self,
        tenant: &TenantId,
        file: &Path,
        progress: Option<&dyn Progress>,
    ) -> Result<SnapshotRecord> {
        let f = tokio::fs::File::open(file).await?;
        let mut r = tokio::io::BufReader::with_capacity(1 << 20, f);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)
            .await
            .map_err(|_| bad("too short"))?;
        if &magic != MAGIC {
            return Err(bad("not a stasis export file"));
        }
        let hlen = r.read_u32_le().await.map_err(|_| bad("truncated header"))?;
        if hlen > MAX_HEADER {
            return Err(bad("header too large"));
        }
        let mut hs = vec![0u8; hlen as usize];
        r.read_exact(&mut hs)
            .await
            .map_err(|_| bad("truncated header"))?;
        let hjson = self
            .masters()
            .iter()
            .find_map(|k| crypto::open(&k.export_key(), HEADER_AAD, &hs, "export file header").ok())
            .ok_or_else(|| bad("header cannot be opened with this master key, or was modified"))?;
        let h: ExportHeader = serde_json::from_slice(&hjson).map_err(bad)?;
        if &h.record.tenant != tenant {
            return Err(Error::invalid("this export file belongs to another tenant"));
        }
        let export_id = hex::decode(&h.export_id).map_err(bad)?;
        let file_key: [u8; 32] = hex::decode(&h.file_key)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| bad("bad file key"))?;
        if h.artifacts.len() != h.record.artifacts.len() {
            return Err(bad("artifact count mismatch"));
        }
        for (a, idx) in h.record.artifacts.iter().zip(&h.artifacts) {
            crate::validate_artifact_name(&a.name).map_err(|e| bad(e.message))?;
            let mut sum = 0u64;
            for &i in idx {
                sum += *h
                    .table
                    .get(i as usize)
                    .ok_or_else(|| bad("chunk index out of range"))? as u64;
            }
            if sum != a.raw_size {
                return Err(bad(format!("artifact {} sizes disagree", a.name)));
            }
        }
        if self
            .os()
            .head(&crate::record_path(tenant, &h.record.id))
            .await
            .is_ok()
        {
            return Err(Error::state(format!(
                "snapshot {} already exists",
                h.record.id
            )));
        }
        let keys = self.tenant_keys(tenant, true).await?.expect("created");
        if let Some(p) = progress {
            p.set_total(h.table.iter().map(|&n| n as u64).sum());
        }
        let lease = gc::Lease::acquire_put(self, tenant).await?;
        let res = async {
            let up = Uploader::new(self, tenant, keys.clone(), &lease).await?;
            let max_frame = self.config().chunk_max.max(16 << 20) as usize + 1024;
            let mut refs: Vec<ChunkRef> = Vec::with_capacity(h.table.len());
            for (i, &len) in h.table.iter().enumerate() {
                let what = format!("chunk {i}");
                let flen = r
                    .read_u32_le()
                    .await
                    .map_err(|_| bad(format!("truncated at {what}")))?
                    as usize;
                if flen < 1 || flen > max_frame + 32 {
                    return Err(bad(format!("{what}: bad frame length")));
                }
                let mut fr = vec![0u8; flen];
                r.read_exact(&mut fr)
                    .await
                    .map_err(|_| bad(format!("truncated at {what}")))?;
                let eid = export_id.clone();
                let plain = tokio::task::spawn_blocking(move || {
                    let flag = fr[0];
                    let pt = crypto::open(
                        &file_key,
                        &frame_aad(&eid, i as u64, flag),
                        &fr[1..],
                        &format!("export file {what}"),
                    )?;
                    if pt.len() < 32 {
                        return Err(bad(format!("{what}: short")));
                    }
                    let plain = decompress_exact(
                        flag,
                        pt[32..].to_vec(),
                        len as usize,
                        &format!("export file {what}"),
                    )?;
                    if blake3::hash(&plain).as_bytes() != &pt[..32] {
                        return Err(bad(format!("{what}: content hash mismatch")));
                    }
                    Ok(plain)
                })
                .await
                .map_err(|e| Error::internal(e.to_string()))??;
                let n = plain.len() as u64;
                refs.push(up.add(plain).await?);
                if let Some(p) = progress {
                    p.inc(n);
                }
            }
            let mut extra = [0u8; 1];
            if r.read(&mut extra).await? != 0 {
                return Err(bad("trailing data after the last chunk"));
            }
            let mut rec = h.record.clone();
            for (a, idx) in rec.artifacts.iter_mut().zip(&h.artifacts) {
                a.chunks = idx.iter().map(|&i| refs[i as usize].clone()).collect();
                a.new_stored_size = 0;
            }
            up.finish_record(&mut rec, &[]);
            self.write_record(&keys, &rec, &lease).await?;
            Ok(rec)
        }
        .await;
        lease.release(self).await;
        if let Some(p) = progress {
            p.finish();
        }
        res
    }
}
