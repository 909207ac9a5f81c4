//! The store against a real S3-compatible server on loopback: moto's server mode
//! (`pip install 'moto[server]'`, binary `moto_server`). Skipped with a printed
//! line when `moto_server` is absent, unless STASIS_REQUIRE_S3 is set (then it fails).

use object_store::path::Path as OPath;
use object_store::ObjectStore;
use stasis_core::{BackendKind, ErrorCode, TenantId};
use stasis_store::testing::MotoServer;
use stasis_store::{GcOptions, MasterKey, NewSnapshot, Store};
use std::path::Path;

fn write_file(p: &Path, len: usize, seed: u64) {
    let mut v = vec![0u8; len];
    stasis_store::bench::pseudo_random(seed, &mut v[..len / 2]); // half random, half zero
    std::fs::write(p, v).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_round_trip_tamper_gc() {
    let Some(moto) = MotoServer::start("stasis-test", "s3 test") else {
        return;
    };
    let endpoint = moto.endpoint();
    // The only test in this binary: setting the env here is not racy.
    moto.set_aws_env();

    let url = "s3://stasis-test/deploy-1";
    let key = MasterKey::from_bytes([3u8; 32]);
    let store = Store::open(url, key.clone()).await.unwrap();
    let t = TenantId::parse("t-s3").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    write_file(&src.join("memory"), 3 << 20, 1);
    write_file(&src.join("disk"), 1 << 20, 2);
    let arts = vec![
        ("memory".to_string(), "memory".to_string()),
        ("disk".to_string(), "disk-overlay".to_string()),
    ];
    let r1 = store
        .put_snapshot(
            NewSnapshot::new(t.clone(), BackendKind::Microvm),
            &src,
            &arts,
            None,
        )
        .await
        .unwrap();
    // Second snapshot with a small change, then the round trip from a fresh handle.
    write_file(&src.join("disk"), 1 << 20, 3);
    let r2 = store
        .put_snapshot(
            NewSnapshot::new(t.clone(), BackendKind::Microvm),
            &src,
            &arts,
            None,
        )
        .await
        .unwrap();
    println!("s3: second snapshot dedup ratio {:.3}", r2.dedup_ratio());
    assert!(r2.new_chunks > 0 && r2.dedup_ratio() > 0.5);
    let fresh = Store::open(url, key.clone()).await.unwrap();
    let dest = tmp.path().join("r2");
    fresh
        .restore_snapshot(&t, &r2.id, &dest, None)
        .await
        .unwrap();
    for (n, _) in &arts {
        assert_eq!(
            std::fs::read(src.join(n)).unwrap(),
            std::fs::read(dest.join(n)).unwrap()
        );
    }
    // Wrong master key refused; another tenant sees nothing.
    let e = Store::open(url, MasterKey::from_bytes([4u8; 32]))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unauthorized);
    let other = TenantId::parse("t-other").unwrap();
    assert_eq!(
        fresh.get_snapshot(&other, &r1.id).await.unwrap_err().code,
        ErrorCode::NotFound
    );

    // Tamper with a chunk object through the raw S3 API.
    let raw = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_bucket_name("stasis-test")
        .with_access_key_id("testing")
        .with_secret_access_key("testing")
        .with_region("us-east-1")
        .build()
        .unwrap();
    let h = r2.artifacts[0].chunks[0].addr.to_hex();
    let p = OPath::from(format!("deploy-1/tenants/t-s3/chunks/{}/{}", &h[..2], h));
    let orig = raw.get(&p).await.unwrap().bytes().await.unwrap();
    let mut bad = orig.to_vec();
    let m = bad.len() / 2;
    bad[m] ^= 1;
    raw.put(&p, bad.into()).await.unwrap();
    let dest2 = tmp.path().join("tampered");
    let e = fresh
        .restore_snapshot(&t, &r2.id, &dest2, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    assert!(e.message.contains("artifact \"memory\""), "{e}");
    assert!(!dest2.exists());
    raw.put(&p, orig.clone().into()).await.unwrap();
    // Truncated chunk.
    raw.put(&p, orig.slice(..orig.len() - 3).into())
        .await
        .unwrap();
    let e = fresh
        .restore_snapshot(&t, &r2.id, &dest2, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    raw.put(&p, orig.into()).await.unwrap();

    // Conditional create (If-None-Match: *), used for keys and records, is honoured by this server.
    let probe = OPath::from("deploy-1/probe");
    raw.put_opts(&probe, "a".into(), object_store::PutMode::Create.into())
        .await
        .unwrap();
    let second = raw
        .put_opts(&probe, "b".into(), object_store::PutMode::Create.into())
        .await;
    println!(
        "s3: conditional create honoured: {}",
        matches!(second, Err(object_store::Error::AlreadyExists { .. }))
    );

    // GC: delete r1; only r1's own chunks go; r2 still restores.
    let before = fresh.stats(&t).await.unwrap();
    fresh.delete_snapshot(&t, &r1.id).await.unwrap();
    let rep = fresh
        .gc_with(
            stasis_core::now_ms(),
            &GcOptions {
                grace_ms: 0,
                ..GcOptions::default()
            },
        )
        .await
        .unwrap();
    println!("s3 gc: {rep:?}");
    let addrs = |r: &stasis_store::SnapshotRecord| -> std::collections::HashSet<String> {
        r.artifacts
            .iter()
            .flat_map(|a| a.chunks.iter().map(|c| c.addr.to_hex()))
            .collect()
    };
    let only_r1 = addrs(&r1).difference(&addrs(&r2)).count() as u64;
    assert!(only_r1 > 0);
    assert_eq!(rep.chunks_deleted, only_r1);
    let after = fresh.stats(&t).await.unwrap();
    assert_eq!(after.chunks, before.chunks - rep.chunks_deleted);
    assert_eq!(after.chunks, r2.unique_chunks);
    let dest3 = tmp.path().join("after-gc");
    fresh
        .restore_snapshot(&t, &r2.id, &dest3, None)
        .await
        .unwrap();
    for (n, _) in &arts {
        assert_eq!(
            std::fs::read(src.join(n)).unwrap(),
            std::fs::read(dest3.join(n)).unwrap()
        );
    }
    // Export from S3, import into a local store with the same master key.
    let exp = tmp.path().join("x.stasis");
    fresh.export_snapshot(&t, &r2.id, &exp, None).await.unwrap();
    let local = Store::open(&format!("file://{}/local", tmp.path().display()), key)
        .await
        .unwrap();
    local.import_snapshot(&t, &exp, None).await.unwrap();
    let dest4 = tmp.path().join("imported");
    local
        .restore_snapshot(&t, &r2.id, &dest4, None)
        .await
        .unwrap();
    for (n, _) in &arts {
        assert_eq!(
            std::fs::read(src.join(n)).unwrap(),
            std::fs::read(dest4.join(n)).unwrap()
        );
    }
}
