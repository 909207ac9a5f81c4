//! File transfer into and out of a real microVM: a 50 MiB put and get,
//! byte-identical, a range, an exclusive create; figures printed with
//! `--nocapture` (MB/s each way). Needs a built guest image in
//! `STASIS_IMAGE_DIR` (else it prints that it did not run and passes). Run
//! against an image whose agent predates binary frames, the same test goes
//! through the host's fallback (JSON frames, one chunk at a time).
//! `STASIS_TEST_FILE_MB` changes the size.

use std::time::{Duration, Instant};

use stasis_backend::Backend;
use stasis_backend_microvm::MicrovmBackend;
use stasis_core::{ErrorCode, SandboxId, WriteMode};

#[path = "support/watchdog.rs"]
mod watchdog;

#[path = "support/vm_util.rs"]
mod vm_util;
use vm_util::{spec, Reaper, Root};

/// Run a shell command in the guest; its stdout and stderr.
async fn sh(b: &MicrovmBackend, id: &SandboxId, cmd: &str) -> String {
    let r = vm_util::sh_ok(b, id, cmd, 60_000).await;
    format!(
        "{}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    )
}

/// Incompressible bytes.
fn data(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_file_transfer() {
    let Some(img) = vm_util::image_dir("file") else {
        return;
    };
    let w = watchdog::watch("microvm_file_transfer");
    let reaper = Reaper::new();
    let guard = tempfile::tempdir().unwrap();
    let root = Root(guard.path().to_path_buf());
    let b = vm_util::backend(&img, Duration::from_secs(60));
    let a = spec(root.path(), &img, &reaper);
    w.step("create");
    b.create(&a).await.expect("create");

    let mb: usize = std::env::var("STASIS_TEST_FILE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let d = data(mb << 20);
    let mb_f = d.len() as f64 / 1e6;
    w.step("put");
    let t = Instant::now();
    b.write_file(&a.id, "/workspace/big.bin", &d, None)
        .await
        .expect("put");
    let put = t.elapsed().as_secs_f64();
    w.step("get");
    let t = Instant::now();
    let back = b
        .read_file(&a.id, "/workspace/big.bin", 64 << 20)
        .await
        .expect("get");
    let get = t.elapsed().as_secs_f64();
    assert_eq!(back.len(), d.len());
    assert!(back == d, "the file read back differs from the file put");
    eprintln!(
        "FIGURE file {mb} MiB: put {:.0} ms ({:.1} MB/s), get {:.0} ms ({:.1} MB/s)",
        put * 1000.0,
        mb_f / put,
        get * 1000.0,
        mb_f / get
    );

    // Where the time goes: the channel and the agent without the guest's
    // filesystem (put to /dev/null, get from tmpfs), and the guest's own
    // file I/O (dd).
    w.step("breakdown");
    let t = Instant::now();
    b.write_file(&a.id, "/dev/null", &d, None)
        .await
        .expect("put null");
    let null = t.elapsed().as_secs_f64();
    sh(&b, &a.id, "mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm 2>/dev/null; cp /workspace/big.bin /dev/shm/big.bin").await;
    let t = Instant::now();
    let back = b
        .read_file(&a.id, "/dev/shm/big.bin", 64 << 20)
        .await
        .expect("get tmpfs");
    let shm = t.elapsed().as_secs_f64();
    assert!(back == d);
    eprintln!(
        "FIGURE file {mb} MiB without the guest filesystem: put to /dev/null {:.1} MB/s, get from tmpfs {:.1} MB/s",
        mb_f / null,
        mb_f / shm
    );
    let dd = sh(
        &b,
        &a.id,
        "t() { s=$(date +%s%N); \"$@\" >/dev/null 2>&1; e=$(date +%s%N); echo \"$((e - s))\"; }; \
         w=$(t dd if=/dev/shm/big.bin of=/workspace/dd.bin bs=1M); \
         r=$(t dd if=/workspace/dd.bin of=/dev/null bs=1M); \
         m=$(t dd if=/dev/zero of=/dev/null bs=1M count=500); \
         rm -f /workspace/dd.bin /dev/shm/big.bin; echo $w $r $m",
    )
    .await;
    let ns: Vec<f64> = dd
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if let [w_ns, r_ns, m_ns] = ns[..] {
        eprintln!(
            "FIGURE guest dd: write to the guest filesystem {:.1} MB/s, read it back {:.1} MB/s, /dev/zero to /dev/null {:.1} MB/s",
            mb_f / (w_ns / 1e9),
            mb_f / (r_ns / 1e9),
            500.0 * 1.048576 / (m_ns / 1e9)
        );
    } else {
        eprintln!("FIGURE guest dd: {dd}");
    }

    w.step("range, exclusive create, limit");
    let (r, size) = b
        .read_range(&a.id, "big.bin", 1_234_567, 3 << 20)
        .await
        .unwrap();
    assert_eq!(size, d.len() as u64);
    assert!(r[..] == d[1_234_567..1_234_567 + (3 << 20)]);
    let e = b
        .write_file_with(&a.id, "big.bin", b"x", None, WriteMode::CreateExclusive)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AlreadyExists, "{e}");
    b.write_file_with(
        &a.id,
        "fresh.bin",
        &d[..5 << 20],
        Some(0o600),
        WriteMode::CreateExclusive,
    )
    .await
    .unwrap();
    let back = b.read_file(&a.id, "fresh.bin", 5 << 20).await.unwrap();
    assert!(back[..] == d[..5 << 20]);
    let e = b.read_file(&a.id, "big.bin", 1 << 20).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{e}");

    w.step("destroy");
    b.destroy(&a.id, &a.dir).await.unwrap();
}
