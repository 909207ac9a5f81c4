//! File transfer through the host's agent connection to the real guest
//! agent code (served on a unix socket, no VM): binary frames with chunks in
//! flight, and the fallback to JSON frames with an agent from before them.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stasis_agent_proto::{Reply, Request};
use stasis_core::{ErrorCode, Result, WriteMode};
use stasis_guest_agent::{port, Agent};

use super::{get, put, Plan};
use crate::agent::AgentConn;

const T: Duration = Duration::from_secs(30);

/// A connection to the guest agent's code serving on a socket in `dir`;
/// `legacy`: as it was before binary frames.
async fn agent(dir: &Path, legacy: bool) -> Arc<AgentConn> {
    let sock = dir.join(if legacy { "old.sock" } else { "new.sock" });
    let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        // Not Agent::new(): its reaper would reap this test process's children.
        let a = Arc::new(Agent {
            legacy,
            ..Agent::default()
        });
        let f = std::fs::File::from(std::os::fd::OwnedFd::from(s));
        let _ = port::serve(a, f, port::OnEof::Return);
    });
    let c = AgentConn::connect(&sock, T).await.unwrap();
    c.hello(T).await.unwrap();
    c
}

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

/// The same transfers, whichever frames the agent reads.
async fn transfers(c: &Arc<AgentConn>, dir: &Path) {
    let plan = Plan::for_agent(c.binary());
    let call = |req| c.request(req, None, T);
    let path = dir.join("sub/dir/f.bin").to_string_lossy().into_owned();
    // Not a multiple of any chunk.
    let d = data(9 * (1 << 20) + 12345);
    put(call, plan, &path, &d, Some(0o640), WriteMode::Overwrite)
        .await
        .unwrap();
    assert!(std::fs::read(&path).unwrap() == d);
    // From a spooled upload, read a chunk at a time: the same bytes.
    let spool = dir.join(if c.binary() { "spool.new" } else { "spool.old" });
    let d2 = data(3 * (1 << 20) + 7);
    std::fs::write(&spool, &d2).unwrap();
    let from = dir.join("sub/from-file.bin").to_string_lossy().into_owned();
    let src = super::FileSource::open(&spool).unwrap();
    put(call, plan, &from, &src, None, WriteMode::CreateExclusive)
        .await
        .unwrap();
    assert!(std::fs::read(&from).unwrap() == d2);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o640);
    let (back, size) = get(call, plan, &path, 0, 64 << 20, true).await.unwrap();
    assert_eq!(size, d.len() as u64);
    assert!(back == d);
    // Ranges: inside, across the end, past it, empty.
    let (r, _) = get(call, plan, &path, 123_457, 5 << 20, false)
        .await
        .unwrap();
    assert!(r[..] == d[123_457..123_457 + (5 << 20)]);
    let (r, _) = get(call, plan, &path, d.len() as u64 - 10, 1 << 30, false)
        .await
        .unwrap();
    assert!(r[..] == d[d.len() - 10..]);
    let (r, s) = get(call, plan, &path, d.len() as u64 + 5, 100, false)
        .await
        .unwrap();
    assert!(r.is_empty() && s == d.len() as u64);
    assert!(get(call, plan, &path, 7, 0, false)
        .await
        .unwrap()
        .0
        .is_empty());
    // Over the limit of a whole read.
    let e = get(call, plan, &path, 0, 1 << 20, true).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{e}");
    // An overwrite with less truncates; an empty file is a file.
    put(call, plan, &path, b"short", None, WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"short");
    put(call, plan, &path, b"", None, WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"");
    // Create-exclusive: once.
    let ex = dir.join("ex.bin").to_string_lossy().into_owned();
    put(call, plan, &ex, &d, None, WriteMode::CreateExclusive)
        .await
        .unwrap();
    assert!(std::fs::read(&ex).unwrap() == d);
    let e = put(call, plan, &ex, b"x", None, WriteMode::CreateExclusive)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AlreadyExists, "{e}");
    // Missing file, directory: the agent's codes.
    let missing = dir.join("nope").to_string_lossy().into_owned();
    let e = get(call, plan, &missing, 0, 10, true).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound, "{e}");
}

#[tokio::test]
async fn binary_frames_with_chunks_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let c = agent(dir.path(), false).await;
    assert!(c.binary());
    assert_eq!(Plan::for_agent(true).in_flight, super::IN_FLIGHT);
    transfers(&c, dir.path()).await;
}

/// An agent from before binary frames (as one resumed from an older
/// snapshot runs): no feature in its hello, so JSON frames, one chunk at a
/// time, appended; the same results.
#[tokio::test]
async fn older_agent_gets_json_frames() {
    let dir = tempfile::tempdir().unwrap();
    let c = agent(dir.path(), true).await;
    assert!(!c.binary());
    transfers(&c, dir.path()).await;
}

/// A write that fails after its first chunk is an error, and a file it
/// created exclusively is not left behind half written.
#[tokio::test]
async fn failed_put_leaves_no_half_file_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let c = agent(dir.path(), false).await;
    let plan = Plan::for_agent(true);
    let n = AtomicUsize::new(0);
    let call = |req: Request| {
        let k = n.fetch_add(1, Ordering::SeqCst);
        let c = c.clone();
        async move {
            if k == 3 {
                return Result::<Reply>::Err(stasis_core::Error::backend("injected failure"));
            }
            c.request(req, None, T).await
        }
    };
    let path = dir.path().join("half.bin").to_string_lossy().into_owned();
    let e = put(
        call,
        plan,
        &path,
        &data(6 << 20),
        None,
        WriteMode::CreateExclusive,
    )
    .await
    .unwrap_err();
    assert!(e.message.contains("injected"), "{e}");
    assert!(!Path::new(&path).exists());
}
