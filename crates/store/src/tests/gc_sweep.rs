//! GC frees only unreferenced chunks and never races a put.

use super::*;

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
