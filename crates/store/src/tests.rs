//! Unit/integration tests of the store against the local filesystem backend.

use super::*;
use crate::bench::{mutate_in_place, pseudo_random, write_vm_like_image};
use stasis_core::BackendKind;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

fn tid(s: &str) -> TenantId {
    TenantId::parse(s).unwrap()
}

fn test_key() -> MasterKey {
    MasterKey::from_bytes([7u8; 32])
}

fn small_chunks() -> StoreConfig {
    StoreConfig {
        chunk_min: 2048,
        chunk_avg: 8192,
        chunk_max: 32768,
        ..StoreConfig::default()
    }
}

async fn open_dir(dir: &Path, key: MasterKey) -> Result<Store> {
    Store::open_with_config(&format!("file://{}", dir.display()), key, small_chunks()).await
}

/// memory (VM-like), disk (random), fs.tar (compressible text), empty.
fn write_artifacts(dir: &Path, seed: u64) -> Vec<(String, String)> {
    std::fs::create_dir_all(dir).unwrap();
    write_vm_like_image(&dir.join("memory"), 2 << 20, seed).unwrap();
    let mut disk = vec![0u8; 700_000];
    pseudo_random(seed + 1, &mut disk);
    std::fs::write(dir.join("disk"), &disk).unwrap();
    let mut text = String::new();
    for i in 0..30_000 {
        text.push_str(&format!("line {i} of the filesystem layer, seed {seed}\n"));
    }
    std::fs::write(dir.join("fs.tar"), text).unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    vec![
        ("memory".into(), "memory".into()),
        ("disk".into(), "disk-overlay".into()),
        ("fs.tar".into(), "fs-tar".into()),
        ("empty".into(), "fs-tar".into()),
    ]
}

fn assert_same_files(a: &Path, b: &Path, arts: &[(String, String)]) {
    for (n, _) in arts {
        let x = std::fs::read(a.join(n)).unwrap();
        let y = std::fs::read(b.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert!(x == y, "artifact {n} differs after restore");
    }
}

fn new_meta(t: &TenantId) -> NewSnapshot {
    let mut m = NewSnapshot::new(t.clone(), BackendKind::Microvm);
    m.manifest_digest = "sha:abc".into();
    m.created_by = "test".into();
    m.meta = serde_json::json!({"qemu": {"mem_mb": 256}});
    m
}

#[derive(Default)]
struct CountProgress {
    total: AtomicU64,
    done: AtomicU64,
    finished: AtomicU64,
}
impl Progress for CountProgress {
    fn set_total(&self, b: u64) {
        self.total.store(b, Ordering::SeqCst);
    }
    fn inc(&self, b: u64) {
        self.done.fetch_add(b, Ordering::SeqCst);
    }
    fn finish(&self) {
        self.finished.fetch_add(1, Ordering::SeqCst);
    }
}

fn chunk_files(store_dir: &Path, t: &TenantId) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let root = store_dir.join("tenants").join(t.as_str()).join("chunks");
    if let Ok(rd) = std::fs::read_dir(&root) {
        for d in rd.flatten() {
            for f in std::fs::read_dir(d.path()).unwrap().flatten() {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

fn chunk_file(store_dir: &Path, t: &TenantId, a: &ChunkAddr) -> std::path::PathBuf {
    let h = a.to_hex();
    store_dir
        .join("tenants")
        .join(t.as_str())
        .join("chunks")
        .join(&h[..2])
        .join(h)
}

fn no_leftovers(parent: &Path) {
    for e in std::fs::read_dir(parent).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        assert!(!n.contains("stasis-restore"), "temp dir left behind: {n}");
    }
}

#[tokio::test]
async fn round_trip_several_artifacts() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("t-alpha");
    let src = tmp.path().join("src");
    let arts = write_artifacts(&src, 1);
    let p = CountProgress::default();
    let meta = new_meta(&t);
    let rec = store
        .put_snapshot(meta.clone(), &src, &arts, Some(&p))
        .await
        .unwrap();
    assert_eq!(
        p.total.load(Ordering::SeqCst),
        p.done.load(Ordering::SeqCst)
    );
    assert_eq!(p.finished.load(Ordering::SeqCst), 1);
    assert_eq!(rec.artifacts.len(), 4);
    assert_eq!(rec.meta, meta.meta);
    assert_eq!(rec.artifact("empty").unwrap().raw_size, 0);
    let raw: u64 = arts
        .iter()
        .map(|(n, _)| std::fs::metadata(src.join(n)).unwrap().len())
        .sum();
    assert_eq!(rec.raw_bytes, raw);
    assert!(
        rec.stored_bytes < rec.raw_bytes,
        "compression + intra-snapshot dedup saved nothing"
    );
    println!(
        "round trip: raw {} stored {} (ratio {:.2}), chunks {}",
        rec.raw_bytes,
        rec.stored_bytes,
        rec.raw_bytes as f64 / rec.stored_bytes as f64,
        rec.unique_chunks
    );
    assert_eq!(store.get_snapshot(&t, &rec.id).await.unwrap(), rec);
    assert_eq!(store.list_snapshots(&t).await.unwrap(), vec![rec.clone()]);

    // Restore from a *fresh* Store handle (no cache): the store alone is enough.
    let store2 = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let dest = tmp.path().join("out").join("restored");
    let p2 = CountProgress::default();
    let r2 = store2
        .restore_snapshot(&t, &rec.id, &dest, Some(&p2))
        .await
        .unwrap();
    assert_eq!(r2, rec);
    assert_same_files(&src, &dest, &arts);
    assert_eq!(p2.done.load(Ordering::SeqCst), rec.raw_bytes);
    // Non-empty destination refused.
    let e = store2
        .restore_snapshot(&t, &rec.id, &dest, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    // Empty existing destination is fine.
    let dest2 = tmp.path().join("out").join("empty-dir");
    std::fs::create_dir_all(&dest2).unwrap();
    store2
        .restore_snapshot(&t, &rec.id, &dest2, None)
        .await
        .unwrap();
    assert_same_files(&src, &dest2, &arts);
    no_leftovers(&tmp.path().join("out"));

    let st = store.stats(&t).await.unwrap();
    assert_eq!(st.snapshots, 1);
    assert_eq!(st.raw_bytes, rec.raw_bytes);
    assert_eq!(st.stored_bytes, rec.stored_bytes);
    assert_eq!(st.chunks, rec.unique_chunks);

    // Same id twice -> refused; bad names refused.
    let e = store
        .put_snapshot(meta, &src, &arts, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    for bad in ["../x", ".hidden", "a/b", ""] {
        let e = store
            .put_snapshot(
                new_meta(&t),
                &src,
                &[(bad.to_string(), "x".to_string())],
                None,
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad:?}");
    }
    // Nothing sensitive in object names: tenant and snapshot ids only, chunk names are keyed hashes.
    let plain_addr = blake3::hash(&std::fs::read(src.join("disk")).unwrap()[..100]);
    let listing = format!("{:?}", chunk_files(&tmp.path().join("store"), &t));
    assert!(!listing.contains(&plain_addr.to_hex().to_string()[..16]));
}

#[tokio::test]
async fn dedup_second_snapshot_with_small_change() {
    let tmp = tempfile::tempdir().unwrap();
    // Production chunk sizes on a 16 MiB VM-like image.
    let store = Store::open(
        &format!("file://{}/store", tmp.path().display()),
        test_key(),
    )
    .await
    .unwrap();
    let t = tid("t-dedup");
    let a = tmp.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    write_vm_like_image(&a.join("memory"), 16 << 20, 3).unwrap();
    let arts = vec![("memory".to_string(), "memory".to_string())];
    let r1 = store
        .put_snapshot(new_meta(&t), &a, &arts, None)
        .await
        .unwrap();
    // Small change in the middle: 64 KiB rewritten + a 100-byte insertion.
    mutate_in_place(&a.join("memory"), 8 << 20, 64 << 10, 99).unwrap();
    let mut data = std::fs::read(a.join("memory")).unwrap();
    data.splice(4 << 20..4 << 20, [0xAB; 100]);
    std::fs::write(a.join("memory"), &data).unwrap();
    let mut m2 = new_meta(&t);
    m2.parent = Some(r1.id.clone());
    let r2 = store.put_snapshot(m2, &a, &arts, None).await.unwrap();
    println!(
        "dedup: first {} chunks, second {} unique / {} new -> dedup ratio {:.3} (bytes {:.3}); stored new {} of raw {}",
        r1.unique_chunks,
        r2.unique_chunks,
        r2.new_chunks,
        r2.dedup_ratio(),
        1.0 - r2.new_raw_bytes as f64 / r2.raw_bytes as f64,
        r2.new_stored_bytes,
        r2.raw_bytes
    );
    assert!(r2.dedup_ratio() >= 0.8, "dedup ratio {}", r2.dedup_ratio());
    assert!(r2.new_chunks <= 8, "{} new chunks", r2.new_chunks);
    let dest = tmp.path().join("r2");
    store
        .restore_snapshot(&t, &r2.id, &dest, None)
        .await
        .unwrap();
    assert_same_files(&a, &dest, &arts);
}

/// Set up a store with one snapshot of tenant A and one of tenant B.
async fn tamper_fixture(tmp: &Path) -> (Store, std::path::PathBuf, SnapshotRecord, SnapshotRecord) {
    let sdir = tmp.join("store");
    let store = open_dir(&sdir, test_key()).await.unwrap();
    let src = tmp.join("src");
    let arts = write_artifacts(&src, 5);
    let ra = store
        .put_snapshot(new_meta(&tid("t-a")), &src, &arts, None)
        .await
        .unwrap();
    let rb = store
        .put_snapshot(new_meta(&tid("t-b")), &src, &arts, None)
        .await
        .unwrap();
    (store, sdir, ra, rb)
}

async fn expect_refused(
    store: &Store,
    rec: &SnapshotRecord,
    tmp: &Path,
    what: &str,
    artifact: Option<&str>,
) {
    let out = tmp.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let dest = out.join(format!("dest-{what}"));
    let e = store
        .restore_snapshot(&rec.tenant, &rec.id, &dest, None)
        .await
        .expect_err(what);
    assert_eq!(e.code, ErrorCode::IntegrityError, "{what}: {e}");
    if let Some(a) = artifact {
        assert!(
            e.message.contains(&format!("artifact {a:?}")),
            "{what}: {e}"
        );
    }
    assert!(!dest.exists(), "{what}: destination created");
    no_leftovers(&out);
    println!("{what}: refused: {e}");
}

#[tokio::test]
async fn tamper_flip_truncate_swap_replay_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, sdir, ra, rb) = tamper_fixture(tmp.path()).await;
    let ta = tid("t-a");
    let disk = ra.artifact("disk").unwrap();
    let c0 = chunk_file(&sdir, &ta, &disk.chunks[0].addr);
    let c1 = chunk_file(&sdir, &ta, &disk.chunks[1].addr);
    let orig0 = std::fs::read(&c0).unwrap();
    let orig1 = std::fs::read(&c1).unwrap();

    // 1. flip one bit in the middle of a chunk object
    let mut x = orig0.clone();
    let mid = x.len() / 2;
    x[mid] ^= 1;
    std::fs::write(&c0, &x).unwrap();
    expect_refused(&store, &ra, tmp.path(), "flip", Some("disk")).await;
    // ... and a flip in the header (compression flag)
    let mut x = orig0.clone();
    x[2] ^= 1;
    std::fs::write(&c0, &x).unwrap();
    expect_refused(&store, &ra, tmp.path(), "flip-flag", Some("disk")).await;
    std::fs::write(&c0, &orig0).unwrap();

    // 2. truncate
    std::fs::write(&c0, &orig0[..orig0.len() - 1]).unwrap();
    expect_refused(&store, &ra, tmp.path(), "truncate", Some("disk")).await;
    std::fs::write(&c0, &orig0[..10]).unwrap();
    expect_refused(&store, &ra, tmp.path(), "truncate-short", Some("disk")).await;
    std::fs::write(&c0, b"").unwrap();
    expect_refused(&store, &ra, tmp.path(), "truncate-empty", Some("disk")).await;
    std::fs::write(&c0, &orig0).unwrap();

    // 3. swap two chunk objects
    std::fs::write(&c0, &orig1).unwrap();
    std::fs::write(&c1, &orig0).unwrap();
    expect_refused(&store, &ra, tmp.path(), "swap", Some("disk")).await;
    std::fs::write(&c0, &orig0).unwrap();
    std::fs::write(&c1, &orig1).unwrap();

    // 4. replay another tenant's chunk of the *same plaintext* at this address
    let tb = tid("t-b");
    let b0 = chunk_file(&sdir, &tb, &rb.artifact("disk").unwrap().chunks[0].addr);
    assert_ne!(
        b0.file_name(),
        c0.file_name(),
        "addresses must differ across tenants"
    );
    std::fs::copy(&b0, &c0).unwrap();
    expect_refused(&store, &ra, tmp.path(), "other-tenant-chunk", Some("disk")).await;
    // and the other tenant's chunk copied to its own address name under our prefix
    std::fs::write(&c0, &orig0).unwrap();

    // 5. missing chunk
    std::fs::remove_file(&c1).unwrap();
    expect_refused(&store, &ra, tmp.path(), "missing", Some("disk")).await;
    std::fs::write(&c1, &orig1).unwrap();

    // Intact again -> restores.
    let dest = tmp.path().join("ok");
    store
        .restore_snapshot(&ta, &ra.id, &dest, None)
        .await
        .unwrap();

    // 6. edit the record: flip a byte -> get/restore refused.
    let recf = sdir.join("tenants/t-a/snapshots").join(ra.id.as_str());
    let orig_rec = std::fs::read(&recf).unwrap();
    let mut x = orig_rec.clone();
    let n = x.len() - 20;
    x[n] ^= 0x40;
    std::fs::write(&recf, &x).unwrap();
    let e = store.get_snapshot(&ta, &ra.id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError);
    expect_refused(&store, &ra, tmp.path(), "record-edit", None).await;
    assert!(
        store.list_snapshots(&ta).await.unwrap().is_empty(),
        "tampered record listed"
    );
    // ... and GC will not sweep a tenant with an unreadable record.
    let rep = store
        .gc_with(
            stasis_core::now_ms(),
            &GcOptions {
                grace_ms: 0,
                ..GcOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(rep.tenants_skipped, vec!["t-a".to_string()]);
    // 7. another snapshot's record (same tenant) under this id -> refused.
    let src2 = tmp.path().join("src2");
    let arts2 = write_artifacts(&src2, 9);
    let r3 = store
        .put_snapshot(new_meta(&ta), &src2, &arts2, None)
        .await
        .unwrap();
    std::fs::copy(
        sdir.join("tenants/t-a/snapshots").join(r3.id.as_str()),
        &recf,
    )
    .unwrap();
    let e = store.get_snapshot(&ta, &ra.id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    // 8. the other tenant's record copied under our tenant -> refused.
    std::fs::copy(
        sdir.join("tenants/t-b/snapshots").join(rb.id.as_str()),
        sdir.join("tenants/t-a/snapshots").join(rb.id.as_str()),
    )
    .unwrap();
    let e = store.get_snapshot(&ta, &rb.id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    std::fs::remove_file(sdir.join("tenants/t-a/snapshots").join(rb.id.as_str())).unwrap();
    std::fs::write(&recf, &orig_rec).unwrap();
    store.get_snapshot(&ta, &ra.id).await.unwrap();
}

#[tokio::test]
async fn wrong_master_key_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_store, sdir, ra, _rb) = tamper_fixture(tmp.path()).await;
    let e = open_dir(&sdir, MasterKey::from_bytes([8u8; 32]))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unauthorized, "{e}");
    assert!(e.message.contains("wrong master key"), "{e}");
    let e = open_dir(&sdir, MasterKey::insecure_dev())
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unauthorized);
    // Even with the keycheck object removed, the tenant key cannot be unwrapped: refused, no garbage.
    std::fs::remove_file(sdir.join("keycheck")).unwrap();
    let wrong = open_dir(&sdir, MasterKey::from_bytes([8u8; 32]))
        .await
        .unwrap();
    let e = wrong.get_snapshot(&ra.tenant, &ra.id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    let e = wrong
        .restore_snapshot(&ra.tenant, &ra.id, &tmp.path().join("d"), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    assert!(!tmp.path().join("d").exists());
    // Puts for that tenant are refused too (no second key is silently created).
    let e = wrong
        .put_snapshot(
            new_meta(&ra.tenant),
            &tmp.path().join("src"),
            &[("disk".into(), "d".into())],
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
}

#[test]
fn master_key_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let k = MasterKey::generate();
    let f = tmp.path().join("key");
    std::fs::write(&f, format!("{}\n", k.to_hex())).unwrap();
    assert_eq!(MasterKey::from_file(&f).unwrap().to_hex(), k.to_hex());
    std::fs::write(&f, [9u8; 32]).unwrap();
    assert_eq!(
        MasterKey::from_file(&f).unwrap().to_hex(),
        hex::encode([9u8; 32])
    );
    std::fs::write(&f, "nothex").unwrap();
    assert!(MasterKey::from_file(&f).is_err());
    assert!(MasterKey::from_env("STASIS_TEST_SURELY_UNSET_VAR").is_err());
    assert!(MasterKey::insecure_dev().is_insecure_dev());
    assert_eq!(
        MasterKey::insecure_dev().to_hex(),
        MasterKey::insecure_dev().to_hex()
    );
    assert!(!format!("{:?}", k).contains(&k.to_hex()));
}

#[tokio::test]
async fn cross_tenant_access_is_not_found() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _sdir, ra, _rb) = tamper_fixture(tmp.path()).await;
    let missing = SnapshotId::generate();
    for other in [tid("t-b"), tid("t-nobody")] {
        let e1 = store.get_snapshot(&other, &ra.id).await.unwrap_err();
        let e2 = store.get_snapshot(&other, &missing).await.unwrap_err();
        assert_eq!(e1.code, ErrorCode::NotFound);
        assert_eq!(
            e1.message.replace(ra.id.as_str(), "X"),
            e2.message.replace(missing.as_str(), "X")
        );
        let dest = tmp.path().join("x");
        let e = store
            .restore_snapshot(&other, &ra.id, &dest, None)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        assert!(!dest.exists());
        let e = store.delete_snapshot(&other, &ra.id).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        let e = store
            .export_snapshot(&other, &ra.id, &tmp.path().join("x.exp"), None)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        assert!(store
            .list_snapshots(&other)
            .await
            .unwrap()
            .iter()
            .all(|r| r.id != ra.id));
    }
    // Still there for its owner.
    store.get_snapshot(&ra.tenant, &ra.id).await.unwrap();
}

#[tokio::test]
async fn gc_frees_only_unreferenced_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let sdir = tmp.path().join("store");
    let store = open_dir(&sdir, test_key()).await.unwrap();
    let t = tid("t-gc");
    let s1 = tmp.path().join("s1");
    let arts = write_artifacts(&s1, 20);
    let s2 = tmp.path().join("s2");
    std::fs::create_dir_all(&s2).unwrap();
    for (n, _) in &arts {
        std::fs::copy(s1.join(n), s2.join(n)).unwrap();
    }
    mutate_in_place(&s2.join("memory"), 1 << 20, 50_000, 1).unwrap();
    let s3 = tmp.path().join("s3");
    let arts3 = write_artifacts(&s3, 30);
    let r1 = store
        .put_snapshot(new_meta(&t), &s1, &arts, None)
        .await
        .unwrap();
    let r2 = store
        .put_snapshot(new_meta(&t), &s2, &arts, None)
        .await
        .unwrap();
    let mut m3 = new_meta(&t);
    m3.expires_at_ms = Some(stasis_core::now_ms() + 60_000);
    let r3 = store.put_snapshot(m3, &s3, &arts3, None).await.unwrap();
    let addrs = |r: &SnapshotRecord| -> HashSet<ChunkAddr> {
        r.artifacts
            .iter()
            .flat_map(|a| a.chunks.iter().map(|c| c.addr))
            .collect()
    };
    let (a1, a2, a3) = (addrs(&r1), addrs(&r2), addrs(&r3));
    let total = chunk_files(&sdir, &t).len() as u64;
    assert_eq!(
        total,
        a1.union(&a2).chain(a3.iter()).collect::<HashSet<_>>().len() as u64
    );

    // Default grace: nothing swept, nothing expired yet.
    let rep = store.gc(stasis_core::now_ms()).await.unwrap();
    assert_eq!((rep.snapshots_expired, rep.chunks_deleted), (0, 0));
    assert_eq!(rep.snapshots_live, 3);
    assert_eq!(rep.chunks_live, total);

    let no_grace = GcOptions {
        grace_ms: 0,
        ..GcOptions::default()
    };
    // Expire r3 (now past its TTL).
    let rep = store
        .gc_with(stasis_core::now_ms() + 120_000, &no_grace)
        .await
        .unwrap();
    println!("gc 1: {rep:?}");
    let only3: HashSet<_> = a3
        .difference(&a1.union(&a2).copied().collect())
        .copied()
        .collect();
    assert_eq!(rep.snapshots_expired, 1);
    assert_eq!(rep.chunks_deleted, only3.len() as u64);
    assert_eq!(rep.chunks_live, a1.union(&a2).count() as u64);
    assert!(rep.bytes_freed > 0);
    assert_eq!(
        store.get_snapshot(&t, &r3.id).await.unwrap_err().code,
        ErrorCode::NotFound
    );

    // Delete r1: only chunks r2 does not share go.
    store.delete_snapshot(&t, &r1.id).await.unwrap();
    let rep = store
        .gc_with(stasis_core::now_ms(), &no_grace)
        .await
        .unwrap();
    let only1 = a1.difference(&a2).count() as u64;
    assert_eq!(rep.chunks_deleted, only1);
    assert!(only1 > 0 && only1 < a1.len() as u64 / 4, "only1={only1}");
    assert_eq!(chunk_files(&sdir, &t).len(), a2.len());
    let dest = tmp.path().join("r2");
    store
        .restore_snapshot(&t, &r2.id, &dest, None)
        .await
        .unwrap();
    assert_same_files(&s2, &dest, &arts);
    // Idempotent.
    let rep = store
        .gc_with(stasis_core::now_ms(), &no_grace)
        .await
        .unwrap();
    assert_eq!(rep.chunks_deleted, 0);
    let st = store.stats(&t).await.unwrap();
    assert_eq!(st.chunks, a2.len() as u64);

    // A put in progress (live put marker) makes GC skip the tenant's sweep.
    store.delete_snapshot(&t, &r2.id).await.unwrap();
    let lease = gc::Lease::acquire_put(&store, &t).await.unwrap();
    let rep = store
        .gc_with(stasis_core::now_ms(), &no_grace)
        .await
        .unwrap();
    assert_eq!(rep.chunks_deleted, 0);
    assert_eq!(rep.tenants_skipped, vec![t.to_string()]);
    lease.release(&store).await;
    let rep = store
        .gc_with(stasis_core::now_ms(), &no_grace)
        .await
        .unwrap();
    assert_eq!(rep.chunks_deleted, a2.len() as u64);
    assert!(chunk_files(&sdir, &t).is_empty());
}

#[tokio::test]
async fn put_waits_for_running_gc_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_dir(&tmp.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("t-wait");
    let src = tmp.path().join("src");
    let arts = write_artifacts(&src, 2);
    store
        .put_snapshot(new_meta(&t), &src, &arts, None)
        .await
        .unwrap();
    // A live GC marker: the put must wait until it is gone.
    let gcl = gc::Lease::write_for_test(&store, &t, "gc", 60_000).await;
    let s2 = store.clone();
    let (t2, src2, arts2) = (t.clone(), src.clone(), arts.clone());
    let h = tokio::spawn(async move { s2.put_snapshot(new_meta(&t2), &src2, &arts2, None).await });
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert!(!h.is_finished(), "put did not wait for the GC marker");
    gcl.release(&store).await;
    h.await.unwrap().unwrap();
}

#[tokio::test]
async fn export_import_round_trip_and_tamper() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _sdir, ra, _rb) = tamper_fixture(tmp.path()).await;
    let exp = tmp.path().join("snap.stasis");
    let p = CountProgress::default();
    store
        .export_snapshot(&ra.tenant, &ra.id, &exp, Some(&p))
        .await
        .unwrap();
    assert_eq!(
        p.total.load(Ordering::SeqCst),
        p.done.load(Ordering::SeqCst)
    );
    let bytes = std::fs::read(&exp).unwrap();
    // Opaque: no plaintext of the artifacts in it.
    let text = std::fs::read(tmp.path().join("src/fs.tar")).unwrap();
    assert!(!bytes.windows(24).any(|w| w == &text[..24]));

    // Another deployment (other dir) with the same master key.
    let other = open_dir(&tmp.path().join("store2"), test_key())
        .await
        .unwrap();
    let p2 = CountProgress::default();
    let imported = other
        .import_snapshot(&ra.tenant, &exp, Some(&p2))
        .await
        .unwrap();
    assert_eq!(imported.id, ra.id);
    assert_eq!(imported.raw_bytes, ra.raw_bytes);
    assert_eq!(imported.meta, ra.meta);
    let dest = tmp.path().join("imported");
    other
        .restore_snapshot(&ra.tenant, &ra.id, &dest, None)
        .await
        .unwrap();
    let arts: Vec<(String, String)> = ra
        .artifacts
        .iter()
        .map(|a| (a.name.clone(), a.kind.clone()))
        .collect();
    assert_same_files(&tmp.path().join("src"), &dest, &arts);
    // Importing again -> already exists.
    let e = other
        .import_snapshot(&ra.tenant, &exp, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);

    // Tampered files refused, nothing imported.
    let fresh = || async {
        open_dir(
            &tmp.path()
                .join(format!("s-{}", hex::encode(crypto::random_bytes::<4>()))),
            test_key(),
        )
        .await
        .unwrap()
    };
    let bad = tmp.path().join("bad.stasis");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("flip-header", {
            let mut b = bytes.clone();
            b[20] ^= 1;
            b
        }),
        ("flip-middle", {
            let mut b = bytes.clone();
            let m = b.len() / 2;
            b[m] ^= 0x80;
            b
        }),
        ("flip-last", {
            let mut b = bytes.clone();
            let m = b.len() - 1;
            b[m] ^= 1;
            b
        }),
        ("truncate", bytes[..bytes.len() - 100].to_vec()),
        ("truncate-frame-boundary", bytes[..bytes.len() / 3].to_vec()),
        ("append", {
            let mut b = bytes.clone();
            b.extend_from_slice(b"x");
            b
        }),
    ];
    for (what, data) in cases {
        std::fs::write(&bad, &data).unwrap();
        let s = fresh().await;
        let e = s.import_snapshot(&ra.tenant, &bad, None).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError, "{what}: {e}");
        assert!(
            s.list_snapshots(&ra.tenant).await.unwrap().is_empty(),
            "{what}"
        );
        println!("import {what}: refused: {e}");
    }
    // Wrong master key -> refused.
    let wrongkey = open_dir(&tmp.path().join("store3"), MasterKey::from_bytes([1; 32]))
        .await
        .unwrap();
    let e = wrongkey
        .import_snapshot(&ra.tenant, &exp, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    // Another tenant cannot import it.
    let s = fresh().await;
    let e = s
        .import_snapshot(&tid("t-b"), &exp, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument, "{e}");
}

#[tokio::test]
async fn bench_synthetic_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(
        &format!("file://{}/store", tmp.path().display()),
        test_key(),
    )
    .await
    .unwrap();
    let rep = bench::bench_synthetic(
        &store,
        &tid("t-bench"),
        &tmp.path().join("scratch"),
        32 << 20,
    )
    .await
    .unwrap();
    println!("{}", serde_json::to_string_pretty(&rep).unwrap());
    assert!(rep.dedup_ratio_second >= 0.8, "{rep:?}");
    assert!(rep.compression_ratio > 1.5, "{rep:?}");
}

// ---------------------------------------------------------------------------
// GC crash safety: GC runs in a child process (this test binary, re-executed
// with an env flag) that is killed at a chosen step (abort in the failpoint
// hook = no cleanup, same as kill -9) or SIGKILLed at a random time. After
// every kill, every record in the store must restore bit-exactly.

const CHILD_ENV: &str = "STASIS_STORE_GC_CHILD";

fn child_gc_opts(hook: Option<gc::GcHook>) -> GcOptions {
    GcOptions {
        grace_ms: 0,
        lease_ms: 400,
        hook,
    }
}

/// Entry point of the child process; a no-op in a normal test run.
#[test]
fn gc_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let crash_at: u64 = std::env::var("STASIS_STORE_GC_CRASH_AT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let delay_us: u64 = std::env::var("STASIS_STORE_GC_STEP_DELAY_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let now: i64 = std::env::var("STASIS_STORE_GC_NOW")
        .unwrap()
        .parse()
        .unwrap();
    let steps = Arc::new(AtomicU64::new(0));
    let hook: gc::GcHook = Arc::new(move |_step: &str| {
        let n = steps.fetch_add(1, Ordering::SeqCst) + 1;
        if n == crash_at {
            std::process::abort();
        }
        if delay_us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay_us));
        }
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = open_dir(Path::new(&dir), test_key()).await.unwrap();
        store
            .gc_with(now, &child_gc_opts(Some(hook)))
            .await
            .unwrap();
    });
}

fn run_child(dir: &Path, now: i64, crash_at: u64, kill_after_ms: Option<u64>) -> bool {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "tests::gc_crash_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, dir)
    .env("STASIS_STORE_GC_CRASH_AT", crash_at.to_string())
    .env("STASIS_STORE_GC_NOW", now.to_string())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    if kill_after_ms.is_some() {
        cmd.env("STASIS_STORE_GC_STEP_DELAY_US", "2000");
    }
    let mut child = cmd.spawn().unwrap();
    if let Some(ms) = kill_after_ms {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        let _ = child.kill(); // SIGKILL
    }
    child.wait().unwrap().success()
}

#[test]
fn gc_crash_safety_kill_at_every_step_and_random_times() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sdir = tmp.path().join("store");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(open_dir(&sdir, test_key())).unwrap();
    let ta = tid("t-crash-a");
    let tb = tid("t-crash-b");
    // Small artifacts with small chunks: many GC steps, fast verification.
    let base = tmp.path().join("base");
    std::fs::create_dir_all(&base).unwrap();
    write_vm_like_image(&base.join("memory"), 512 << 10, 40).unwrap();
    let mut disk = vec![0u8; 192 << 10];
    pseudo_random(41, &mut disk);
    std::fs::write(base.join("disk"), &disk).unwrap();
    let arts: Vec<(String, String)> = vec![
        ("memory".into(), "memory".into()),
        ("disk".into(), "disk-overlay".into()),
    ];
    // live snapshots and the dir holding their expected content
    let mut live: Vec<(TenantId, SnapshotId, std::path::PathBuf)> = Vec::new();
    let mut gen = 0u64;
    let now = stasis_core::now_ms();
    // Make work for a GC round: a live variant, an expired variant, a deleted variant.
    let mut make_work = |live: &mut Vec<(TenantId, SnapshotId, std::path::PathBuf)>| {
        for t in [&ta, &tb] {
            for kind in ["live", "expired", "deleted"] {
                gen += 1;
                let d = tmp.path().join(format!("v{gen}"));
                std::fs::create_dir_all(&d).unwrap();
                for (n, _) in &arts {
                    std::fs::copy(base.join(n), d.join(n)).unwrap();
                }
                mutate_in_place(&d.join("memory"), (gen * 37_000) % (1 << 20), 30_000, gen)
                    .unwrap();
                mutate_in_place(
                    &d.join("disk"),
                    (gen * 11_000) % 600_000,
                    20_000,
                    gen + 1000,
                )
                .unwrap();
                let mut m = new_meta(t);
                if kind == "expired" {
                    m.expires_at_ms = Some(now - 1);
                }
                let r = rt.block_on(store.put_snapshot(m, &d, &arts, None)).unwrap();
                match kind {
                    "live" => live.push((t.clone(), r.id, d)),
                    "deleted" => rt.block_on(store.delete_snapshot(t, &r.id)).unwrap(),
                    _ => {}
                }
            }
        }
    };
    let verify = |live: &Vec<(TenantId, SnapshotId, std::path::PathBuf)>, round: &str| {
        // Every record present (live or expired-not-yet-collected) restores bit-exactly.
        for t in [&ta, &tb] {
            let recs = rt.block_on(store.list_snapshots(t)).unwrap();
            for r in recs {
                let dest = tmp.path().join(format!("check-{}", r.id));
                rt.block_on(store.restore_snapshot(t, &r.id, &dest, None))
                    .unwrap_or_else(|e| panic!("{round}: snapshot {} lost data: {e}", r.id));
                if let Some((_, _, src)) = live.iter().find(|(_, id, _)| id == &r.id) {
                    assert_same_files(src, &dest, &arts);
                }
                std::fs::remove_dir_all(&dest).unwrap();
            }
        }
        for (t, id, _) in live {
            rt.block_on(store.get_snapshot(t, id))
                .unwrap_or_else(|e| panic!("{round}: live snapshot {id} gone: {e}"));
        }
    };

    // Deterministic: crash at step k of a GC with fresh work each round.
    let mut completed = 0;
    let mut k = 1;
    let mut rounds = 0;
    while k <= 400 && rounds < 30 {
        make_work(&mut live);
        let ok = run_child(&sdir, now, k, None);
        verify(&live, &format!("crash at step {k}"));
        if ok {
            completed += 1;
        }
        rounds += 1;
        k = if k < 6 { k + 1 } else { k * 2 };
    }
    // Random SIGKILLs.
    let mut seed = now as u64;
    for i in 0..8 {
        make_work(&mut live);
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let ms = 20 + (seed >> 33) % 200;
        let ok = run_child(&sdir, now, 0, Some(ms));
        verify(&live, &format!("random kill {i} after {ms} ms"));
        if ok {
            completed += 1;
        }
    }
    // Finally a full GC (markers of killed children expire first): nothing unreferenced remains.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let rep = rt
        .block_on(store.gc_with(now, &child_gc_opts(None)))
        .unwrap();
    verify(&live, "final");
    for t in [&ta, &tb] {
        let recs = rt.block_on(store.list_snapshots(t)).unwrap();
        assert_eq!(recs.len(), live.iter().filter(|(lt, _, _)| lt == t).count());
        let referenced: HashSet<ChunkAddr> = recs
            .iter()
            .flat_map(|r| {
                r.artifacts
                    .iter()
                    .flat_map(|a| a.chunks.iter().map(|c| c.addr))
            })
            .collect();
        assert_eq!(
            chunk_files(&sdir, t).len(),
            referenced.len(),
            "unreferenced chunks left in {t}"
        );
    }
    println!(
        "gc crash: {rounds} failpoint rounds + SIGKILLs (8), {completed} children completed; final gc {rep:?}"
    );
    assert!(completed < rounds + 8, "no child was ever killed mid-GC");
}

// ---------------------------------------------------------------------------
// Put crash safety: a put killed at a random instant leaves either a complete,
// restorable snapshot or no snapshot at all; its orphaned chunks are swept once
// its put marker's lease has run out.

const PUT_CHILD_ENV: &str = "STASIS_STORE_PUT_CHILD";

fn put_child_cfg() -> StoreConfig {
    StoreConfig {
        put_lease_ms: 800,
        ..small_chunks()
    }
}

#[test]
fn put_crash_child() {
    let Ok(dir) = std::env::var(PUT_CHILD_ENV) else {
        return;
    };
    let src = std::env::var("STASIS_STORE_PUT_SRC").unwrap();
    let id = SnapshotId::parse(&std::env::var("STASIS_STORE_PUT_ID").unwrap()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open_with_config(&format!("file://{dir}"), test_key(), put_child_cfg())
            .await
            .unwrap();
        let mut m = new_meta(&tid("t-putcrash"));
        m.id = id;
        let arts = vec![
            ("memory".to_string(), "memory".to_string()),
            ("disk".to_string(), "disk".to_string()),
        ];
        store
            .put_snapshot(m, Path::new(&src), &arts, None)
            .await
            .unwrap();
    });
}

#[test]
fn put_crash_leaves_whole_snapshot_or_none() {
    if std::env::var(PUT_CHILD_ENV).is_ok() || std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sdir = tmp.path().join("store");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt
        .block_on(Store::open_with_config(
            &format!("file://{}", sdir.display()),
            test_key(),
            put_child_cfg(),
        ))
        .unwrap();
    let t = tid("t-putcrash");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let arts = vec![
        ("memory".to_string(), "memory".to_string()),
        ("disk".to_string(), "disk".to_string()),
    ];
    let (mut whole, mut none) = (0, 0);
    let mut seed = stasis_core::now_ms() as u64;
    for i in 0..8u64 {
        write_vm_like_image(&src.join("memory"), 6 << 20, 1000 + i).unwrap();
        let mut disk = vec![0u8; 2 << 20];
        pseudo_random(2000 + i, &mut disk);
        std::fs::write(src.join("disk"), &disk).unwrap();
        let id = SnapshotId::generate();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::put_crash_child", "--test-threads=1"])
            .env(PUT_CHILD_ENV, &sdir)
            .env("STASIS_STORE_PUT_SRC", &src)
            .env("STASIS_STORE_PUT_ID", id.as_str())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        std::thread::sleep(std::time::Duration::from_millis(10 + (seed >> 33) % 300));
        let _ = child.kill();
        let _ = child.wait();
        match rt.block_on(store.get_snapshot(&t, &id)) {
            Ok(_) => {
                let dest = tmp.path().join(format!("r-{i}"));
                rt.block_on(store.restore_snapshot(&t, &id, &dest, None))
                    .unwrap_or_else(|e| {
                        panic!("round {i}: record exists but does not restore: {e}")
                    });
                assert_same_files(&src, &dest, &arts);
                whole += 1;
            }
            Err(e) => {
                assert_eq!(e.code, ErrorCode::NotFound, "round {i}: {e}");
                none += 1;
            }
        }
    }
    // Orphans of killed puts are swept once their markers have expired.
    std::thread::sleep(std::time::Duration::from_millis(900));
    let rep = rt
        .block_on(store.gc_with(
            stasis_core::now_ms(),
            &GcOptions {
                grace_ms: 0,
                ..GcOptions::default()
            },
        ))
        .unwrap();
    assert!(rep.tenants_skipped.is_empty(), "{rep:?}");
    let recs = rt.block_on(store.list_snapshots(&t)).unwrap();
    let referenced: HashSet<ChunkAddr> = recs
        .iter()
        .flat_map(|r| {
            r.artifacts
                .iter()
                .flat_map(|a| a.chunks.iter().map(|c| c.addr))
        })
        .collect();
    let left = chunk_files(&sdir, &t);
    assert_eq!(
        left.len(),
        referenced.len(),
        "{} staging files left",
        left.iter()
            .filter(|p| p.to_string_lossy().contains('#'))
            .count()
    );
    println!(
        "put crash: {whole} complete, {none} absent after SIGKILL; gc swept {} orphan chunks, {} stale markers, {} staging files",
        rep.chunks_deleted, rep.stale_markers_removed, rep.staging_files_removed
    );
    assert!(none > 0, "no put was ever killed mid-way");
}

#[test]
fn secrets_open_only_for_their_tenant_name_and_key() {
    let k = test_key();
    let sealed = k.seal_secret("t-a", "API_KEY", b"value-123");
    assert!(!sealed.windows(9).any(|w| w == b"value-123"));
    assert_eq!(
        k.open_secret("t-a", "API_KEY", &sealed).unwrap(),
        b"value-123"
    );
    for (t, n) in [("t-b", "API_KEY"), ("t-a", "OTHER")] {
        let e = k.open_secret(t, n, &sealed).unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError);
    }
    let other = MasterKey::generate();
    assert!(other.open_secret("t-a", "API_KEY", &sealed).is_err());
    // Fresh nonce every time.
    assert_ne!(sealed, k.seal_secret("t-a", "API_KEY", b"value-123"));
}
