//! Put and restore round trips, dedup across snapshots, the synthetic bench.

use super::*;

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
