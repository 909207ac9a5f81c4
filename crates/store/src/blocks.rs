//! Page-addressed artifacts (a guest's RAM file) are cut into fixed,
//! aligned blocks instead of content-defined chunks, so that block `i` of
//! one pause and block `i` of the next cover the same guest pages. A put
//! whose parent snapshot holds the same artifact cut the same way compares
//! each block's address with the parent's block at the same index and
//! carries the parent's reference forward when they match: unchanged
//! memory is read and hashed, but never compressed, sealed, looked up or
//! uploaded again. Holes of a sparse file (pages the guest never touched)
//! are not read at all, and all-zero blocks are not hashed.
//!
//! Why hashing rather than a dirty-page log: the kernels this runs on have
//! no soft-dirty bits (`/proc/PID/pagemap` bit 55 stays clear after
//! `clear_refs` 4: CONFIG_MEM_SOFT_DIRTY is off), QEMU gives a client no
//! RAM dirty bitmap, and userfaultfd write-protection would have to be
//! armed inside QEMU's own address space. Hashing what is allocated is
//! exact, trusts nothing but the bytes, and runs at memory bandwidth on
//! every core the node has (the workers below split the file).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use stasis_core::{Error, Result};
use tokio::sync::mpsc;

use crate::crypto::TenantKeys;
use crate::{ChunkAddr, ChunkRef};

/// Smallest block: one page.
pub const MIN_BLOCK: u32 = 4096;
/// Largest block: a chunk must stay a modest allocation.
pub const MAX_BLOCK: u32 = 4 << 20;

/// A block size must be a power of two between a page and 4 MiB.
pub(crate) fn validate_block(block: u32) -> Result<()> {
    if !block.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&block) {
        return Err(Error::invalid(format!(
            "block size {block} must be a power of two from {MIN_BLOCK} to {MAX_BLOCK}"
        )));
    }
    Ok(())
}

/// One block of the file, as a worker found it.
pub(crate) enum Block {
    /// The same as the parent's block at this index: its reference, as is.
    Same(ChunkRef),
    /// Different (or no parent): its address and bytes, to be stored.
    New(ChunkAddr, Vec<u8>),
}

/// The byte ranges of `f` that hold data (`SEEK_DATA`/`SEEK_HOLE`); the
/// whole file where the filesystem cannot tell.
pub(crate) fn data_extents(f: &File, len: u64) -> Result<Vec<(u64, u64)>> {
    use nix::errno::Errno;
    use nix::unistd::{lseek, Whence};
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos: u64 = 0;
    while pos < len {
        let start = match lseek(fd, pos as i64, Whence::SeekData) {
            Ok(d) => d as u64,
            Err(Errno::ENXIO) => break,
            Err(Errno::EINVAL) if pos == 0 => return Ok(vec![(0, len)]),
            Err(e) => return Err(Error::internal(format!("SEEK_DATA: {e}"))),
        };
        if start >= len {
            break;
        }
        let end = match lseek(fd, start as i64, Whence::SeekHole) {
            Ok(h) => (h as u64).min(len),
            Err(_) => len,
        };
        if end <= start {
            // A file growing or shrinking under us: read the rest.
            out.push((start, len));
            break;
        }
        out.push((start, end));
        pos = end;
    }
    Ok(out)
}

/// Whether `[off, off + len)` overlaps any extent (sorted, disjoint).
fn has_data(extents: &[(u64, u64)], off: u64, len: u64) -> bool {
    let end = off + len;
    // The first extent ending after `off`.
    let i = extents.partition_point(|&(_, e)| e <= off);
    extents.get(i).is_some_and(|&(s, _)| s < end)
}

fn is_zero(b: &[u8]) -> bool {
    let words = b.chunks_exact(16);
    let rest = words.remainder();
    words
        .map(|w| u128::from_ne_bytes(w.try_into().expect("16 bytes")))
        .all(|x| x == 0)
        && rest.iter().all(|&x| x == 0)
}

/// What the workers share.
pub(crate) struct Scan {
    keys: Arc<TenantKeys>,
    block: u32,
    len: u64,
    /// The parent's blocks of this artifact, by index.
    parent: Option<Arc<Vec<ChunkRef>>>,
    /// Addresses of an all-zero block and of an all-zero last block (the
    /// only two lengths a block has).
    zero: ChunkAddr,
    zero_last: ChunkAddr,
}

impl Scan {
    pub(crate) fn new(
        keys: Arc<TenantKeys>,
        block: u32,
        len: u64,
        parent: Option<Arc<Vec<ChunkRef>>>,
    ) -> Scan {
        let last = (len % block as u64) as u32;
        let zero = ChunkAddr(keys.zero_address(block));
        let zero_last = if last == 0 {
            zero
        } else {
            ChunkAddr(keys.zero_address(last))
        };
        Scan {
            keys,
            block,
            len,
            parent,
            zero,
            zero_last,
        }
    }

    fn zero_addr(&self, len: u32) -> ChunkAddr {
        if len == self.block {
            self.zero
        } else {
            self.zero_last
        }
    }

    pub(crate) fn blocks(&self) -> usize {
        self.len.div_ceil(self.block as u64) as usize
    }

    fn block_len(&self, i: usize) -> u32 {
        let off = i as u64 * self.block as u64;
        (self.len - off).min(self.block as u64) as u32
    }

    fn judge(&self, i: usize, addr: ChunkAddr, len: u32, data: impl FnOnce() -> Vec<u8>) -> Block {
        if let Some(p) = self.parent.as_ref().and_then(|p| p.get(i)) {
            if p.addr == addr && p.len == len {
                return Block::Same(p.clone());
            }
        }
        Block::New(addr, data())
    }
}

/// Scan `path` with `workers` threads, each over a contiguous range of
/// blocks, sending every block's verdict (by index) to `tx`. Stops early
/// when the receiver is gone. Runs on the calling (blocking) threads.
pub(crate) fn scan(
    path: &Path,
    scan: Arc<Scan>,
    workers: usize,
    tx: mpsc::Sender<Result<(usize, Block)>>,
) -> Result<()> {
    let f = Arc::new(File::open(path)?);
    let extents = Arc::new(data_extents(&f, scan.len)?);
    let n = scan.blocks();
    let workers = workers.clamp(1, n.max(1));
    let mut handles = Vec::new();
    for w in 0..workers {
        let (lo, hi) = (n * w / workers, n * (w + 1) / workers);
        let (f, extents, scan, tx) = (f.clone(), extents.clone(), scan.clone(), tx.clone());
        handles.push(std::thread::spawn(move || {
            // One buffer per worker, handed on only with a block to store.
            let mut buf = Vec::new();
            for i in lo..hi {
                let len = scan.block_len(i);
                let off = i as u64 * scan.block as u64;
                let r = (|| {
                    if !has_data(&extents, off, len as u64) {
                        let a = scan.zero_addr(len);
                        return Ok(scan.judge(i, a, len, || vec![0u8; len as usize]));
                    }
                    buf.resize(len as usize, 0);
                    f.read_exact_at(&mut buf, off)
                        .map_err(|e| Error::internal(format!("reading at {off}: {e}")))?;
                    let a = if is_zero(&buf) {
                        scan.zero_addr(len)
                    } else {
                        ChunkAddr(scan.keys.address(&buf))
                    };
                    Ok(scan.judge(i, a, len, || std::mem::take(&mut buf)))
                })();
                let stop = r.is_err();
                if tx.blocking_send(r.map(|b| (i, b))).is_err() || stop {
                    return;
                }
            }
        }));
    }
    drop(tx);
    for h in handles {
        h.join()
            .map_err(|_| Error::internal("a block scan worker panicked"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    #[test]
    fn block_sizes() {
        for ok in [4096, 65536, 4 << 20] {
            validate_block(ok).unwrap();
        }
        for bad in [0, 1, 4095, 6000, 8 << 20] {
            assert!(validate_block(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn extents_of_a_sparse_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sparse");
        let mut f = File::create(&p).unwrap();
        f.set_len(16 << 20).unwrap();
        f.seek(SeekFrom::Start(4 << 20)).unwrap();
        f.write_all(&[1u8; 8192]).unwrap();
        f.sync_all().unwrap();
        let f = File::open(&p).unwrap();
        let ex = data_extents(&f, 16 << 20).unwrap();
        // Filesystems round extents to their blocks; the data is covered,
        // and (on a filesystem that knows holes) little else is.
        assert!(has_data(&ex, 4 << 20, 8192), "{ex:?}");
        let covered: u64 = ex.iter().map(|(s, e)| e - s).sum();
        assert!(covered >= 8192, "{ex:?}");
        for w in ex.windows(2) {
            assert!(w[0].1 <= w[1].0, "{ex:?}");
        }
    }

    #[test]
    fn overlap() {
        let ex = [(4096, 8192), (20000, 30000)];
        assert!(!has_data(&ex, 0, 4096));
        assert!(has_data(&ex, 0, 4097));
        assert!(has_data(&ex, 8191, 10));
        assert!(!has_data(&ex, 8192, 4096));
        assert!(has_data(&ex, 16384, 4096));
        assert!(!has_data(&ex, 30000, 4096));
        assert!(!has_data(&[], 0, 4096));
    }

    #[test]
    fn zero_test() {
        let mut v = vec![0u8; 65537];
        assert!(is_zero(&v));
        assert!(is_zero(&v[3..]));
        v[65536] = 1;
        assert!(!is_zero(&v));
        assert!(!is_zero(&v[1..]));
        v[65536] = 0;
        v[7] = 9;
        assert!(!is_zero(&v));
    }
}
