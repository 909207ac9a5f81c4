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

fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks() * 512
}

#[tokio::test]
async fn block_cut_round_trip_keeps_holes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("t-blocks");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Not a multiple of the block: the last block is short.
    let size = (8 << 20) + 12288;
    write_sparse_ram(&src.join("memory.ram"), size, 1);
    write_meta_json(&src, 1);
    let p = CountProgress::default();
    let rec = store
        .put_snapshot_artifacts(new_meta(&t), &src, &ram_art(BLOCK), Some(&p))
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
    assert_eq!(store.get_snapshot(&t, &rec.id).await.unwrap(), rec);

    let dest = tmp.path().join("out");
    store
        .restore_snapshot(&t, &rec.id, &dest, None)
        .await
        .unwrap();
    same(&src.join("memory.ram"), &dest.join("memory.ram"));
    same(&src.join("meta.json"), &dest.join("meta.json"));
    // Zero blocks came back as holes, not as written zeros.
    assert!(
        allocated(&dest.join("memory.ram")) < 2 << 20,
        "restored file allocates {} bytes",
        allocated(&dest.join("memory.ram"))
    );
}

#[tokio::test]
async fn a_put_with_a_parent_stores_only_changed_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let sdir = tmp.path().join("store");
    let store = open_dir(&sdir, test_key()).await.unwrap();
    let t = tid("t-incr");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let ram = src.join("memory.ram");
    write_sparse_ram(&ram, 8 << 20, 2);
    write_meta_json(&src, 1);
    let first = store
        .put_snapshot_artifacts(new_meta(&t), &src, &ram_art(BLOCK), None)
        .await
        .unwrap();

    // The guest changes one page of data and touches one page of a hole.
    mutate_in_place(&ram, (8 << 20) / 3 + 5000, 100, 9).unwrap();
    mutate_in_place(&ram, 7 << 20, 4096, 10).unwrap();
    write_meta_json(&src, 2);
    let mut m = new_meta(&t);
    m.parent = Some(first.id.clone());
    let second = store
        .put_snapshot_artifacts(m, &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
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
    let n1 = chunk_files(&sdir, &t).len();
    assert_eq!(n1 as u64, first.unique_chunks + 3);

    let dest = tmp.path().join("out2");
    store
        .restore_snapshot(&t, &second.id, &dest, None)
        .await
        .unwrap();
    same(&ram, &dest.join("memory.ram"));
    // The first snapshot is untouched by the second.
    let dest1 = tmp.path().join("out1");
    store
        .restore_snapshot(&t, &first.id, &dest1, None)
        .await
        .unwrap();
    assert_ne!(
        std::fs::read(dest1.join("memory.ram")).unwrap(),
        std::fs::read(&ram).unwrap()
    );
}

#[tokio::test]
async fn an_unusable_parent_falls_back_to_listing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("t-fallback");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let ram = src.join("memory.ram");
    write_sparse_ram(&ram, 4 << 20, 3);
    write_meta_json(&src, 1);
    let first = store
        .put_snapshot_artifacts(new_meta(&t), &src, &ram_art(BLOCK), None)
        .await
        .unwrap();

    // A parent that does not exist (or is another tenant's): still deduplicated, by listing.
    let mut m = new_meta(&t);
    m.parent = Some(SnapshotId::generate());
    let r = store
        .put_snapshot_artifacts(m, &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
    assert_eq!(r.new_chunks, 0, "everything was already stored");
    let out = tmp.path().join("o1");
    store.restore_snapshot(&t, &r.id, &out, None).await.unwrap();
    same(&ram, &out.join("memory.ram"));

    // A parent cut with another block size: compared by nothing, deduplicated by lookups.
    mutate_in_place(&ram, 100_000, 10, 4).unwrap();
    let mut m = new_meta(&t);
    m.parent = Some(first.id.clone());
    let r = store
        .put_snapshot_artifacts(m, &src, &ram_art(BLOCK * 4), None)
        .await
        .unwrap();
    assert_eq!(r.artifact("memory.ram").unwrap().block, Some(BLOCK * 4));
    let out = tmp.path().join("o2");
    store.restore_snapshot(&t, &r.id, &out, None).await.unwrap();
    same(&ram, &out.join("memory.ram"));

    // The parent deleted before the put: no parent at all.
    store.delete_snapshot(&t, &first.id).await.unwrap();
    mutate_in_place(&ram, 200_000, 10, 5).unwrap();
    let mut m = new_meta(&t);
    m.parent = Some(first.id.clone());
    let r = store
        .put_snapshot_artifacts(m, &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
    let out = tmp.path().join("o3");
    store.restore_snapshot(&t, &r.id, &out, None).await.unwrap();
    same(&ram, &out.join("memory.ram"));
}

#[tokio::test]
async fn a_file_that_grew_since_the_parent_is_stored_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("t-grow");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let ram = src.join("memory.ram");
    write_sparse_ram(&ram, 2 << 20, 6);
    write_meta_json(&src, 1);
    let first = store
        .put_snapshot_artifacts(new_meta(&t), &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&ram).unwrap();
    f.set_len((3 << 20) + 100).unwrap();
    drop(f);
    mutate_in_place(&ram, (3 << 20) - 10, 110, 7).unwrap();
    let mut m = new_meta(&t);
    m.parent = Some(first.id.clone());
    let r = store
        .put_snapshot_artifacts(m, &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
    let out = tmp.path().join("o");
    store.restore_snapshot(&t, &r.id, &out, None).await.unwrap();
    same(&ram, &out.join("memory.ram"));
}

#[tokio::test]
async fn bad_block_sizes_are_refused_before_anything_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let sdir = tmp.path().join("store");
    let store = open_dir(&sdir, test_key()).await.unwrap();
    let t = tid("t-badblock");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    write_sparse_ram(&src.join("memory.ram"), 1 << 20, 8);
    write_meta_json(&src, 1);
    for b in [0, 1000, 4095, 12288, 8 << 20] {
        let e = store
            .put_snapshot_artifacts(new_meta(&t), &src, &ram_art(b), None)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{b}: {e}");
        assert!(e.message.contains("memory.ram"), "{e}");
    }
    assert!(chunk_files(&sdir, &t).is_empty());
    assert!(store.list_snapshots(&t).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_parent_from_an_older_build_without_stored_sizes_still_works() {
    // Records written before chunk references kept their stored size have
    // `s` absent: a put on such a parent lists the store instead.
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("t-oldparent");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let ram = src.join("memory.ram");
    write_sparse_ram(&ram, 2 << 20, 11);
    write_meta_json(&src, 1);
    let first = store
        .put_snapshot_artifacts(new_meta(&t), &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
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
    write_record(&store, &old).await;
    mutate_in_place(&ram, 70_000, 10, 12).unwrap();
    let mut m = new_meta(&t);
    m.parent = Some(old.id.clone());
    let r = store
        .put_snapshot_artifacts(m, &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
    assert_eq!(r.new_chunks, 1, "one block: {r:?}");
    assert!(r
        .artifacts
        .iter()
        .flat_map(|a| &a.chunks)
        .all(|c| c.stored > 0));
    let out = tmp.path().join("o");
    store.restore_snapshot(&t, &r.id, &out, None).await.unwrap();
    same(&ram, &out.join("memory.ram"));
}

#[tokio::test]
async fn a_restore_links_what_the_caller_keeps_and_fetches_the_rest() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("t-reuse");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let ram = src.join("memory.ram");
    write_sparse_ram(&ram, 4 << 20, 13);
    write_meta_json(&src, 1);
    let rec = store
        .put_snapshot_artifacts(new_meta(&t), &src, &ram_art(BLOCK), None)
        .await
        .unwrap();
    // The caller keeps the RAM image (a verified copy of its own).
    let kept = tmp.path().join("kept.ram");
    std::fs::copy(&ram, &kept).unwrap();
    let asked = std::sync::Mutex::new(Vec::new());
    let reuse = |partial: &Path| {
        // The metadata is already there when the caller is asked.
        asked
            .lock()
            .unwrap()
            .push(std::fs::read_to_string(partial.join("meta.json")).unwrap());
        vec![("memory.ram".to_string(), kept.clone())]
    };
    let dest = tmp.path().join("linked");
    let p = CountProgress::default();
    store
        .restore_snapshot_reusing(&t, &rec.id, &dest, Some(&p), Some(&reuse))
        .await
        .unwrap();
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
    same(&src.join("meta.json"), &dest.join("meta.json"));
    assert_eq!(p.done.load(Ordering::SeqCst), rec.raw_bytes);

    // A kept file of another size is not this artifact: fetched.
    let short = tmp.path().join("short.ram");
    std::fs::write(&short, b"not the image").unwrap();
    let reuse = |_: &Path| vec![("memory.ram".to_string(), short.clone())];
    let dest = tmp.path().join("fetched");
    store
        .restore_snapshot_reusing(&t, &rec.id, &dest, None, Some(&reuse))
        .await
        .unwrap();
    assert_ne!(ino(&dest.join("memory.ram")), ino(&short));
    same(&ram, &dest.join("memory.ram"));
    // Nothing kept: as a plain restore.
    let none = |_: &Path| Vec::new();
    let dest = tmp.path().join("plain");
    store
        .restore_snapshot_reusing(&t, &rec.id, &dest, None, Some(&none))
        .await
        .unwrap();
    same(&ram, &dest.join("memory.ram"));
}
