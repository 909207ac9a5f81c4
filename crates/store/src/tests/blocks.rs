//! Block-cut (page-addressed) artifacts: round trips with holes, puts with
//! a parent that carry unchanged blocks forward, and every way the parent
//! can be unusable (missing, another key generation, an older record).

use super::*;
use std::io::{Seek, SeekFrom, Write};

const BLOCK: u32 = 16384;

/// A sparse "RAM file": `size` bytes, data written only in a few runs.
fn write_sparse_ram(path: &Path, size: u64, seed: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
    for (k, off) in [0u64, size / 3, size / 2 + 4096 * 3]
        .into_iter()
        .enumerate()
    {
        let mut data = vec![0u8; 200_000];
        pseudo_random(seed + k as u64, &mut data);
        // Some all-zero pages written out (allocated, not holes).
        data[40_960..57_344].fill(0);
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&data).unwrap();
    }
    f.sync_all().unwrap();
}

fn ram_art(block: u32) -> Vec<PutArtifact> {
    vec![
        PutArtifact {
            name: "memory.ram".into(),
            kind: "memory".into(),
            chunking: Chunking::Blocks(block),
        },
        PutArtifact::new("meta.json", "meta"),
    ]
}

fn write_meta_json(dir: &Path, n: u32) {
    std::fs::write(dir.join("meta.json"), format!("{{\"n\": {n}}}")).unwrap();
}

fn same(a: &Path, b: &Path) {
    let x = std::fs::read(a).unwrap();
    let y = std::fs::read(b).unwrap();
    assert!(x == y, "{} differs from {}", a.display(), b.display());
}

/// Write a record as it is, under a put lease (what a put ends with).
async fn write_record(store: &Store, rec: &SnapshotRecord) {
    let keys = store.tenant_keys(&rec.tenant, true).await.unwrap().unwrap();
    let lease = gc::Lease::acquire_put(store, &rec.tenant).await.unwrap();
    store.write_record(&keys, rec, &lease).await.unwrap();
    lease.release(store).await;
}

/// A tenant's store and a source directory holding a sparse RAM file and
/// `meta.json`: what every test here starts from.
struct Fx {
    tmp: tempfile::TempDir,
    store: Store,
    t: TenantId,
    src: std::path::PathBuf,
    ram: std::path::PathBuf,
}

async fn fixture(tenant: &str, size: u64, seed: u64) -> Fx {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let ram = src.join("memory.ram");
    write_sparse_ram(&ram, size, seed);
    write_meta_json(&src, 1);
    Fx {
        tmp,
        store,
        t: tid(tenant),
        src,
        ram,
    }
}

impl Fx {
    fn store_dir(&self) -> std::path::PathBuf {
        self.tmp.path().join("store")
    }

    /// Put the source directory, RAM cut into `block`s, naming `parent`.
    async fn put(&self, parent: Option<&SnapshotId>, block: u32) -> SnapshotRecord {
        let mut m = new_meta(&self.t);
        m.parent = parent.cloned();
        self.store
            .put_snapshot_artifacts(m, &self.src, &ram_art(block), None)
            .await
            .unwrap()
    }

    /// Restore `id` into a new directory named `name`.
    async fn restore(&self, id: &SnapshotId, name: &str) -> std::path::PathBuf {
        let dest = self.tmp.path().join(name);
        self.store
            .restore_snapshot(&self.t, id, &dest, None)
            .await
            .unwrap();
        dest
    }

    /// Restore `id` into `name`, linking what `reuse` keeps.
    async fn restore_reusing(
        &self,
        id: &SnapshotId,
        name: &str,
        reuse: crate::Reuse<'_>,
        p: Option<&CountProgress>,
    ) -> std::path::PathBuf {
        let dest = self.tmp.path().join(name);
        self.store
            .restore_snapshot_reusing(
                &self.t,
                id,
                &dest,
                p.map(|p| p as &dyn Progress),
                Some(reuse),
            )
            .await
            .unwrap();
        dest
    }

    /// Restore `id` and check its RAM file is the source's, byte for byte.
    async fn restores_same(&self, id: &SnapshotId, name: &str) {
        let dest = self.restore(id, name).await;
        same(&self.ram, &dest.join("memory.ram"));
    }
}

fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks() * 512
}

#[tokio::test]
async fn block_cut_round_trip_keeps_holes() {
    // Not a multiple of the block: the last block is short.
    let size = (8 << 20) + 12288;
    let f = fixture("t-blocks", size, 1).await;
    let p = CountProgress::default();
    let rec = f
        .store
        .put_snapshot_artifacts(new_meta(&f.t), &f.src, &ram_art(BLOCK), Some(&p))
        .await
        .unwrap();
    let ram = rec.artifact("memory.ram").unwrap();
    assert_eq!(ram.block, Some(BLOCK));
    assert_eq!(ram.raw_size, size);
    assert_eq!(ram.chunks.len() as u64, size.div_ceil(BLOCK as u64));
    assert!(ram.chunks[..ram.chunks.len() - 1]
        .iter()
        .all(|c| c.len == BLOCK));
    assert_eq!(ram.chunks.last().unwrap().len, 12288);
    assert!(ram.chunks.iter().all(|c| c.stored > 0), "stored sizes kept");
    // Zero blocks (holes and written zeros) are one chunk; the data is a few dozen.
    assert!(rec.unique_chunks < 60, "{}", rec.unique_chunks);
    assert_eq!(
        p.done.load(Ordering::SeqCst),
        p.total.load(Ordering::SeqCst)
    );
    assert_eq!(f.store.get_snapshot(&f.t, &rec.id).await.unwrap(), rec);

    let dest = f.restore(&rec.id, "out").await;
    same(&f.ram, &dest.join("memory.ram"));
    same(&f.src.join("meta.json"), &dest.join("meta.json"));
    // Zero blocks came back as holes, not as written zeros.
    assert!(
        allocated(&dest.join("memory.ram")) < 2 << 20,
        "restored file allocates {} bytes",
        allocated(&dest.join("memory.ram"))
    );
}

#[tokio::test]
async fn a_put_with_a_parent_stores_only_changed_blocks() {
    let f = fixture("t-incr", 8 << 20, 2).await;
    let first = f.put(None, BLOCK).await;

    // The guest changes one page of data and touches one page of a hole.
    mutate_in_place(&f.ram, (8 << 20) / 3 + 5000, 100, 9).unwrap();
    mutate_in_place(&f.ram, 7 << 20, 4096, 10).unwrap();
    write_meta_json(&f.src, 2);
    let second = f.put(Some(&first.id), BLOCK).await;
    let (a, b) = (
        first.artifact("memory.ram").unwrap(),
        second.artifact("memory.ram").unwrap(),
    );
    let changed: Vec<usize> = (0..a.chunks.len())
        .filter(|&i| a.chunks[i].addr != b.chunks[i].addr)
        .collect();
    let i1 = ((8 << 20) / 3 + 5000) / BLOCK as usize;
    let i2 = (7 << 20) / BLOCK as usize;
    assert_eq!(changed, vec![i1, i2]);
    // Two blocks of RAM and the meta file are all that is new.
    assert_eq!(second.new_chunks, 3, "{second:?}");
    assert!(second.new_raw_bytes <= 2 * BLOCK as u64 + 100);
    assert!(second.stored_bytes > 0);
    assert_eq!(
        b.stored_size,
        {
            let mut seen = HashSet::new();
            b.chunks
                .iter()
                .filter(|c| seen.insert(c.addr))
                .map(|c| c.stored as u64)
                .sum::<u64>()
        },
        "accounting from carried sizes"
    );
    // The objects on disk are exactly the first put's plus three.
    assert_eq!(
        chunk_files(&f.store_dir(), &f.t).len() as u64,
        first.unique_chunks + 3
    );

    f.restores_same(&second.id, "out2").await;
    // The first snapshot is untouched by the second.
    let dest1 = f.restore(&first.id, "out1").await;
    assert_ne!(
        std::fs::read(dest1.join("memory.ram")).unwrap(),
        std::fs::read(&f.ram).unwrap()
    );
}

#[tokio::test]
async fn an_unusable_parent_falls_back_to_listing() {
    let f = fixture("t-fallback", 4 << 20, 3).await;
    let first = f.put(None, BLOCK).await;

    // A parent that does not exist (or is another tenant's): still deduplicated, by listing.
    let r = f.put(Some(&SnapshotId::generate()), BLOCK).await;
    assert_eq!(r.new_chunks, 0, "everything was already stored");
    f.restores_same(&r.id, "o1").await;

    // A parent cut with another block size: compared by nothing, deduplicated by lookups.
    mutate_in_place(&f.ram, 100_000, 10, 4).unwrap();
    let r = f.put(Some(&first.id), BLOCK * 4).await;
    assert_eq!(r.artifact("memory.ram").unwrap().block, Some(BLOCK * 4));
    f.restores_same(&r.id, "o2").await;

    // The parent deleted before the put: no parent at all.
    f.store.delete_snapshot(&f.t, &first.id).await.unwrap();
    mutate_in_place(&f.ram, 200_000, 10, 5).unwrap();
    let r = f.put(Some(&first.id), BLOCK).await;
    f.restores_same(&r.id, "o3").await;
}

#[tokio::test]
async fn a_file_that_grew_since_the_parent_is_stored_whole() {
    let f = fixture("t-grow", 2 << 20, 6).await;
    let first = f.put(None, BLOCK).await;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&f.ram)
        .unwrap();
    file.set_len((3 << 20) + 100).unwrap();
    drop(file);
    mutate_in_place(&f.ram, (3 << 20) - 10, 110, 7).unwrap();
    let r = f.put(Some(&first.id), BLOCK).await;
    f.restores_same(&r.id, "o").await;
}

#[tokio::test]
async fn bad_block_sizes_are_refused_before_anything_is_stored() {
    let f = fixture("t-badblock", 1 << 20, 8).await;
    for b in [0, 1000, 4095, 12288, 8 << 20] {
        let e = f
            .store
            .put_snapshot_artifacts(new_meta(&f.t), &f.src, &ram_art(b), None)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{b}: {e}");
        assert!(e.message.contains("memory.ram"), "{e}");
    }
    assert!(chunk_files(&f.store_dir(), &f.t).is_empty());
    assert!(f.store.list_snapshots(&f.t).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_parent_from_an_older_build_without_stored_sizes_still_works() {
    // Records written before chunk references kept their stored size have
    // `s` absent: a put on such a parent lists the store instead.
    let f = fixture("t-oldparent", 2 << 20, 11).await;
    let first = f.put(None, BLOCK).await;
    // The same record as an older build would have written it.
    let mut old = first.clone();
    old.id = SnapshotId::generate();
    for a in old.artifacts.iter_mut() {
        for c in a.chunks.iter_mut() {
            c.stored = 0;
        }
    }
    let json = serde_json::to_value(&old).unwrap();
    assert!(
        !json.to_string().contains("\"s\":"),
        "no stored sizes serialised"
    );
    write_record(&f.store, &old).await;
    mutate_in_place(&f.ram, 70_000, 10, 12).unwrap();
    let r = f.put(Some(&old.id), BLOCK).await;
    assert_eq!(r.new_chunks, 1, "one block: {r:?}");
    assert!(r
        .artifacts
        .iter()
        .flat_map(|a| &a.chunks)
        .all(|c| c.stored > 0));
    f.restores_same(&r.id, "o").await;
}

#[tokio::test]
async fn a_restore_links_what_the_caller_keeps_and_fetches_the_rest() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture("t-reuse", 4 << 20, 13).await;
    let rec = f.put(None, BLOCK).await;
    // The caller keeps the RAM image (a verified copy of its own).
    let kept = f.tmp.path().join("kept.ram");
    std::fs::copy(&f.ram, &kept).unwrap();
    let asked = std::sync::Mutex::new(Vec::new());
    let reuse = |partial: &Path| {
        // The metadata is already there when the caller is asked.
        asked
            .lock()
            .unwrap()
            .push(std::fs::read_to_string(partial.join("meta.json")).unwrap());
        vec![("memory.ram".to_string(), kept.clone())]
    };
    let p = CountProgress::default();
    let dest = f.restore_reusing(&rec.id, "linked", &reuse, Some(&p)).await;
    assert_eq!(
        asked.lock().unwrap().clone(),
        vec!["{\"n\": 1}".to_string()]
    );
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(
        ino(&dest.join("memory.ram")),
        ino(&kept),
        "linked, not fetched"
    );
    same(&f.src.join("meta.json"), &dest.join("meta.json"));
    assert_eq!(p.done.load(Ordering::SeqCst), rec.raw_bytes);

    // A kept file of another size is not this artifact: fetched.
    let short = f.tmp.path().join("short.ram");
    std::fs::write(&short, b"not the image").unwrap();
    let other = |_: &Path| vec![("memory.ram".to_string(), short.clone())];
    let dest = f.restore_reusing(&rec.id, "fetched", &other, None).await;
    assert_ne!(ino(&dest.join("memory.ram")), ino(&short));
    same(&f.ram, &dest.join("memory.ram"));
    // Nothing kept: as a plain restore.
    let none = |_: &Path| Vec::new();
    let dest = f.restore_reusing(&rec.id, "plain", &none, None).await;
    same(&f.ram, &dest.join("memory.ram"));
}
