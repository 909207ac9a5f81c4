//! Export and import of one snapshot file, and tampering with it.

use super::access::tamper_fixture;
use super::*;

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
