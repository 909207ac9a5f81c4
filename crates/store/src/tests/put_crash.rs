//! Put crash safety: a killed put leaves a whole snapshot or none.

use super::gc_crash::CHILD_ENV;
use super::*;

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
            .args([
                "--exact",
                "tests::put_crash::put_crash_child",
                "--test-threads=1",
            ])
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
