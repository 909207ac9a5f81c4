//! Store benchmark: two snapshots with a small change between them.
//!
//! `stasis bench store` calls [`bench_store`] with the artifact dirs of two real
//! snapshots (before/after a small change), or [`bench_synthetic`] to make them.

use crate::{NewSnapshot, Store};
use serde::{Deserialize, Serialize};
use stasis_core::{BackendKind, Error, Result, TenantId};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    pub chunk_min: u32,
    pub chunk_avg: u32,
    pub chunk_max: u32,
    /// Raw bytes of one snapshot (the second).
    pub raw_bytes: u64,
    pub first_new_stored_bytes: u64,
    pub second_new_stored_bytes: u64,
    /// Bytes in the tenant's store after both snapshots.
    pub stored_bytes_total: u64,
    pub chunks_total: u64,
    pub second_unique_chunks: u64,
    pub second_new_chunks: u64,
    /// Fraction of the second snapshot's chunks already stored (target >= 0.8).
    pub dedup_ratio_second: f64,
    /// Same, by plaintext bytes.
    pub dedup_ratio_second_bytes: f64,
    /// raw / stored of the first snapshot (compression alone; dedup within it included).
    pub compression_ratio: f64,
    /// (2 x raw) / stored after both snapshots.
    pub overall_ratio: f64,
    pub write_first_secs: f64,
    pub write_first_mb_s: f64,
    pub write_second_secs: f64,
    pub write_second_mb_s: f64,
    /// Restore of the second snapshot, every chunk verified.
    pub verified_read_secs: f64,
    pub verified_read_mb_s: f64,
    /// Plain copy (with fsync) of the same files, same run.
    pub plain_copy_secs: f64,
    pub plain_copy_mb_s: f64,
}

fn mb_s(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        bytes as f64 / 1e6 / secs
    }
}

/// Snapshot `before/<names>` then `after/<names>` for `tenant`, restore the second
/// (verified) into `scratch`, and copy the files plainly for comparison.
pub async fn bench_store(
    store: &Store,
    tenant: &TenantId,
    before: &Path,
    after: &Path,
    artifacts: &[(String, String)],
    scratch: &Path,
) -> Result<BenchReport> {
    std::fs::create_dir_all(scratch)?;
    let t0 = Instant::now();
    let r1 = store
        .put_snapshot(
            NewSnapshot::new(tenant.clone(), BackendKind::Microvm),
            before,
            artifacts,
            None,
        )
        .await?;
    let w1 = t0.elapsed().as_secs_f64();
    let mut n2 = NewSnapshot::new(tenant.clone(), BackendKind::Microvm);
    n2.parent = Some(r1.id.clone());
    let t0 = Instant::now();
    let r2 = store.put_snapshot(n2, after, artifacts, None).await?;
    let w2 = t0.elapsed().as_secs_f64();

    let dest = scratch.join(format!("restore-{}", r2.id));
    let t0 = Instant::now();
    store.restore_snapshot(tenant, &r2.id, &dest, None).await?;
    let rd = t0.elapsed().as_secs_f64();

    let copy_dir = scratch.join(format!("copy-{}", r2.id));
    std::fs::create_dir_all(&copy_dir)?;
    let t0 = Instant::now();
    for (name, _) in artifacts {
        let mut src = std::fs::File::open(after.join(name))?;
        let mut dst = std::fs::File::create(copy_dir.join(name))?;
        std::io::copy(&mut src, &mut dst)?;
        dst.sync_all()?;
    }
    let cp = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dest);
    let _ = std::fs::remove_dir_all(&copy_dir);

    let stats = store.stats(tenant).await?;
    let cfg = store.config();
    Ok(BenchReport {
        chunk_min: cfg.chunk_min,
        chunk_avg: cfg.chunk_avg,
        chunk_max: cfg.chunk_max,
        raw_bytes: r2.raw_bytes,
        first_new_stored_bytes: r1.new_stored_bytes,
        second_new_stored_bytes: r2.new_stored_bytes,
        stored_bytes_total: stats.stored_bytes,
        chunks_total: stats.chunks,
        second_unique_chunks: r2.unique_chunks,
        second_new_chunks: r2.new_chunks,
        dedup_ratio_second: r2.dedup_ratio(),
        dedup_ratio_second_bytes: if r2.raw_bytes == 0 {
            1.0
        } else {
            1.0 - r2.new_raw_bytes as f64 / r2.raw_bytes as f64
        },
        compression_ratio: r1.raw_bytes as f64 / r1.stored_bytes.max(1) as f64,
        overall_ratio: (r1.raw_bytes + r2.raw_bytes) as f64 / stats.stored_bytes.max(1) as f64,
        write_first_secs: w1,
        write_first_mb_s: mb_s(r1.raw_bytes, w1),
        write_second_secs: w2,
        write_second_mb_s: mb_s(r2.raw_bytes, w2),
        verified_read_secs: rd,
        verified_read_mb_s: mb_s(r2.raw_bytes, rd),
        plain_copy_secs: cp,
        plain_copy_mb_s: mb_s(r2.raw_bytes, cp),
    })
}

/// Deterministic pseudo-random bytes (xorshift), fast enough for big fixtures.
pub fn pseudo_random(seed: u64, buf: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

/// Write a file shaped like a VM memory image: 4 KiB pages, about half zero
/// pages, a quarter text-like (compressible), a quarter random.
pub fn write_vm_like_image(path: &Path, size: u64, seed: u64) -> Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut page = [0u8; 4096];
    let text =
        b"def handler(event, context):\n    return {'status': 200, 'body': json.dumps(event)}\n";
    let pages = size / 4096;
    let mut rng = seed;
    for i in 0..pages {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Runs of similar pages, like real memory.
        match (rng >> 59) % 8 {
            0..=3 => page.fill(0),
            4 | 5 => {
                for (j, b) in page.iter_mut().enumerate() {
                    *b = text[(j + i as usize) % text.len()];
                }
                page[..8].copy_from_slice(&i.to_le_bytes());
            }
            _ => pseudo_random(seed ^ i, &mut page),
        }
        f.write_all(&page)?;
    }
    f.flush()?;
    Ok(())
}

/// Overwrite `len` bytes at `offset` with new random data (the "small change").
pub fn mutate_in_place(path: &Path, offset: u64, len: usize, seed: u64) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len];
    pseudo_random(seed, &mut buf);
    f.write_all(&buf)?;
    Ok(())
}

/// Make a `size`-byte VM-like image and a copy with 1% of it changed in a few
/// places plus 4 KiB inserted in the middle, then run [`bench_store`].
pub async fn bench_synthetic(
    store: &Store,
    tenant: &TenantId,
    scratch: &Path,
    size: u64,
) -> Result<BenchReport> {
    let before = scratch.join("before");
    let after = scratch.join("after");
    std::fs::create_dir_all(&before)?;
    std::fs::create_dir_all(&after)?;
    write_vm_like_image(&before.join("memory"), size, 7)?;
    std::fs::copy(before.join("memory"), after.join("memory"))?;
    let step = size / 5;
    for k in 1..5u64 {
        mutate_in_place(
            &after.join("memory"),
            k * step,
            (size / 400) as usize,
            100 + k,
        )?;
    }
    // A disk-overlay-like file with an insertion in the middle (shifts everything after it).
    let mut disk = vec![0u8; (size / 4) as usize];
    pseudo_random(11, &mut disk[..(size / 8) as usize]);
    std::fs::write(before.join("disk"), &disk)?;
    let mid = disk.len() / 2;
    let mut ins = vec![0u8; 4096];
    pseudo_random(12, &mut ins);
    disk.splice(mid..mid, ins);
    std::fs::write(after.join("disk"), &disk)?;
    let arts = vec![
        ("memory".to_string(), "memory".to_string()),
        ("disk".to_string(), "disk-overlay".to_string()),
    ];
    let r = bench_store(store, tenant, &before, &after, &arts, scratch).await;
    let _ = std::fs::remove_dir_all(&before);
    let _ = std::fs::remove_dir_all(&after);
    r.map_err(|e: Error| e.context("bench"))
}

/// A guest-RAM-like file put twice (the second after a few scattered pages
/// changed, naming the first as parent), cut into fixed blocks and, for
/// comparison in the same run, into content-defined chunks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RamBenchReport {
    pub raw_bytes: u64,
    pub block: u32,
    pub pages_changed: u64,
    pub blocks_first_ms: f64,
    pub blocks_second_ms: f64,
    pub blocks_second_new_bytes: u64,
    pub cdc_first_ms: f64,
    pub cdc_second_ms: f64,
    pub cdc_second_new_bytes: u64,
    /// Second put, blocks vs content-defined: time and new bytes.
    pub second_ms_ratio: f64,
    pub second_new_bytes_ratio: f64,
    /// Verified restore of the second (block-cut) snapshot: fetch, decrypt,
    /// decompress, write (zero blocks left as holes) and fsync.
    pub blocks_restore_ms: f64,
    pub blocks_restore_allocated_bytes: u64,
}

/// See [`RamBenchReport`]: one tenant per cutting so neither dedups against the other.
pub async fn bench_ram(
    store: &Store,
    scratch: &Path,
    size: u64,
    block: u32,
) -> Result<RamBenchReport> {
    use crate::{Chunking, PutArtifact};
    let dir = scratch.join("ram");
    std::fs::create_dir_all(&dir)?;
    let ram = dir.join("memory.ram");
    let pages_changed = 16u64;
    let mut out = Vec::new();
    let mut restore = (0.0, 0);
    for (t, chunking) in [
        ("t-ram-blocks", Chunking::Blocks(block)),
        ("t-ram-cdc", Chunking::ContentDefined),
    ] {
        write_vm_like_image(&ram, size, 21)?;
        let tenant = TenantId::parse(t)?;
        let arts = vec![PutArtifact {
            name: "memory.ram".into(),
            kind: "memory".into(),
            chunking,
        }];
        let t0 = Instant::now();
        let first = store
            .put_snapshot_artifacts(
                NewSnapshot::new(tenant.clone(), BackendKind::Microvm),
                &dir,
                &arts,
                None,
            )
            .await?;
        let first_ms = t0.elapsed().as_secs_f64() * 1000.0;
        for k in 0..pages_changed {
            mutate_in_place(&ram, (size / pages_changed) * k + 4096 * 3, 4096, 300 + k)?;
        }
        let mut m = NewSnapshot::new(tenant, BackendKind::Microvm);
        m.parent = Some(first.id);
        let t0 = Instant::now();
        let second = store.put_snapshot_artifacts(m, &dir, &arts, None).await?;
        let second_ms = t0.elapsed().as_secs_f64() * 1000.0;
        if matches!(chunking, Chunking::Blocks(_)) {
            use std::os::unix::fs::MetadataExt;
            let dest = scratch.join("ram-restored");
            let t0 = Instant::now();
            store
                .restore_snapshot(&second.tenant, &second.id, &dest, None)
                .await?;
            restore = (
                t0.elapsed().as_secs_f64() * 1000.0,
                std::fs::metadata(dest.join("memory.ram"))?.blocks() * 512,
            );
            let _ = std::fs::remove_dir_all(&dest);
        }
        out.push((first_ms, second_ms, second.new_raw_bytes));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (b, c) = (out[0], out[1]);
    Ok(RamBenchReport {
        raw_bytes: size,
        block,
        pages_changed,
        blocks_first_ms: b.0,
        blocks_second_ms: b.1,
        blocks_second_new_bytes: b.2,
        cdc_first_ms: c.0,
        cdc_second_ms: c.1,
        cdc_second_new_bytes: c.2,
        second_ms_ratio: b.1 / c.1.max(1e-9),
        second_new_bytes_ratio: b.2 as f64 / (c.2 as f64).max(1.0),
        blocks_restore_ms: restore.0,
        blocks_restore_allocated_bytes: restore.1,
    })
}
