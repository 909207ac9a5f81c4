//! Tampering, wrong keys, cross-tenant access and tenant secrets: refused.

use super::*;

/// Set up a store with one snapshot of tenant A and one of tenant B.
pub(super) async fn tamper_fixture(
    tmp: &Path,
) -> (Store, std::path::PathBuf, SnapshotRecord, SnapshotRecord) {
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
