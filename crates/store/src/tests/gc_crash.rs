//! GC crash safety: every record restores after a GC killed at any step.

use super::*;

// ---------------------------------------------------------------------------
// GC crash safety: GC runs in a child process (this test binary, re-executed
// with an env flag) that is killed at a chosen step (abort in the failpoint
// hook = no cleanup, same as kill -9) or SIGKILLed at a random time. After
// every kill, every record in the store must restore bit-exactly.

pub(super) const CHILD_ENV: &str = "STASIS_STORE_GC_CHILD";

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
        "tests::gc_crash::gc_crash_child",
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
