//! A paused microVM's share of the node's disk: what it keeps for a local
//! resume is what `Backend::local_bytes` reports (the node's cap counts
//! it), and once evicted it keeps at most 16 MB. Needs `STASIS_IMAGE_DIR`
//! (see `vm.rs`); one TCG boot.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use stasis_backend::Backend;
use stasis_core::SnapshotId;

#[path = "support/watchdog.rs"]
mod watchdog;

#[path = "support/vm_util.rs"]
mod vm_util;
use vm_util::{backend, sh_ok, spec, Reaper, Root};

/// Allocated bytes of everything under `dir` (hard links once, nothing followed).
fn allocated(dir: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
    let Ok(md) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let mut n = 0;
    if seen.insert((md.dev(), md.ino())) {
        n += md.blocks() * 512;
    }
    if md.file_type().is_dir() {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            n += allocated(&e.path(), seen);
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_paused_vm_keeps_at_most_16_mb() {
    let Some(img) = vm_util::image_dir("local cap") else {
        return;
    };
    let w = watchdog::watch("an_evicted_paused_vm_keeps_at_most_16_mb");
    let reaper = Reaper::new();
    let tmp = tempfile::tempdir().unwrap();
    let root = Root(tmp.path().to_path_buf());
    let b = backend(&img, Duration::from_secs(30));

    w.step("create");
    let a = spec(root.path(), &img, &reaper);
    b.create(&a).await.expect("create");
    sh_ok(
        &b,
        &a.id,
        "dd if=/dev/urandom of=/workspace/big bs=1M count=8 2>/dev/null && sync",
        120_000,
    )
    .await;

    w.step("pause");
    let out = root.path().join("pause");
    std::fs::create_dir(&out).unwrap();
    b.pause(&a.id, &out, true).await.expect("pause");
    // The server stores the stage, binds the local files, asks what they
    // hold (the stage still linking them), then drops the stage.
    b.pause_stored(&a, &SnapshotId::generate()).await;
    let kept = b.local_bytes(&a);
    std::fs::remove_dir_all(&out).unwrap();
    assert_eq!(b.local_bytes(&a), kept, "the stage's links change nothing");
    let dir_before = allocated(&a.dir, &mut HashSet::new());
    eprintln!("FIGURE paused: local_bytes {kept}, sandbox dir {dir_before} bytes");
    assert!(kept > 8 << 20, "the RAM file and disk count: {kept}");
    assert!(kept <= dir_before, "{kept} > {dir_before}");

    w.step("evict");
    b.evict(&a).await.expect("evict");
    assert_eq!(b.local_bytes(&a), 0);
    let left = allocated(&a.dir, &mut HashSet::new());
    eprintln!("FIGURE evicted: sandbox dir {left} bytes");
    assert!(left <= 16 << 20, "an evicted paused VM keeps {left} bytes");

    b.destroy(&a.id, &a.dir).await.expect("destroy");
}
