//! Real microVM tests. They need a built guest image: set `STASIS_IMAGE_DIR`
//! to its directory (the one holding vmlinux, initrd.img, rootfs.qcow2,
//! image.json). Without it they print that they did not run and pass.
//!
//! Everything runs in one sequential test (TCG boots take seconds; two
//! cores): the mid-execution pause/resume claim, clock after resume, fork of
//! two from one snapshot, corrupt/truncated memory state, an unanswering
//! guest. Figures are printed with `--nocapture`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stasis_backend::{ArtifactKind, Backend, SandboxSpec};
use stasis_backend_microvm::{qemu, MicrovmBackend, MicrovmConfig, SnapshotMeta};
use stasis_core::{ErrorCode, ExecRequest, Manifest, SandboxId, SessionSpec};

#[path = "support/watchdog.rs"]
mod watchdog;

#[path = "support/vm_util.rs"]
mod vm_util;
use vm_util::{backend, copy_dir, futures_rss, qemus_of, spec, Reaper, Root};

fn image_dir() -> Option<PathBuf> {
    vm_util::image_dir("backend")
}

async fn sh(b: &MicrovmBackend, id: &SandboxId, cmd: &str) -> String {
    let r = vm_util::sh_ok(b, id, cmd, 20_000).await;
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// Read a session's output until `want` shows up.
async fn session_until(
    b: &MicrovmBackend,
    id: &SandboxId,
    s: &str,
    from: u64,
    want: &str,
) -> (String, u64) {
    let mut off = from;
    let mut acc = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let o = b
            .session_read(id, s, off, Duration::from_millis(500))
            .await
            .unwrap();
        acc.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
        if acc.contains(want) {
            return (acc, off);
        }
    }
    panic!("session {s} never printed {want:?}; got {acc:?}");
}

fn counter_values(s: &str) -> Vec<u64> {
    s.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn assert_counts_up(vals: &[u64]) {
    assert!(!vals.is_empty());
    for (i, v) in vals.iter().enumerate() {
        assert_eq!(*v, i as u64 + 1, "counter restarted or skipped: {vals:?}");
    }
}

/// How far the guest's wall clock is outside the host-time window of the exec
/// that read it, in ms (0 when inside). busybox `date` has no %N: then whole
/// seconds, compared with the window widened by the truncation.
async fn guest_skew_ms(b: &MicrovmBackend, id: &SandboxId) -> i64 {
    let now = || stasis_backend_microvm::util::now_unix_nanos() as i128;
    let before = now();
    let out = sh(b, id, "date +%s%N").await;
    let after = now();
    let (guest, slack) = match out.trim().parse::<i128>() {
        Ok(g) => (g, 0),
        Err(_) => {
            let before = now();
            let out = sh(b, id, "date +%s").await;
            let g: i128 = out.trim().parse::<i128>().expect("date +%s") * 1_000_000_000;
            let _ = before;
            (g, 1_000_000_000)
        }
    };
    let skew = if guest + slack < before {
        guest + slack - before
    } else if guest > after {
        guest - after
    } else {
        0
    };
    (skew / 1_000_000) as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_pause_resume_fork_and_bad_input() {
    let Some(img) = image_dir() else { return };
    let w = watchdog::watch("microvm_pause_resume_fork_and_bad_input");
    let reaper = Reaper::new();
    let python = std::env::var("STASIS_TEST_NO_PYTHON").is_err();
    let guard = tempfile::tempdir().unwrap();
    let root_dir = guard.path().to_path_buf();
    let _guard = if std::env::var("STASIS_TEST_KEEP").is_ok() {
        eprintln!("keeping {}", guard.keep().display());
        None
    } else {
        Some(guard)
    };
    let root = Root(root_dir);
    let b = backend(&img, Duration::from_secs(30));

    // ---- cold create
    w.step("cold create");
    let a = spec(root.path(), &img, &reaper);
    let t = Instant::now();
    b.create(&a).await.expect("create");
    let hello = sh(&b, &a.id, "echo hello").await;
    let cold_ms = t.elapsed().as_millis();
    assert_eq!(hello.trim(), "hello");
    eprintln!("FIGURE cold create to first exec: {cold_ms} ms");

    // ---- a counter loop and an interpreter with a variable
    w.step("a counter loop and an interpreter with a variable");
    let counter = b
        .session_start(
            &a.id,
            SessionSpec {
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    "i=0; while :; do i=$((i+1)); echo $i >> /tmp/counter; sleep 0.1; done".into(),
                ],
                env: Default::default(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .expect("counter session");
    let interp = if python {
        b.session_start(
            &a.id,
            SessionSpec {
                argv: vec!["python3".into(), "-u".into(), "-i".into(), "-q".into()],
                env: Default::default(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .expect("python session")
    } else {
        b.session_start(
            &a.id,
            SessionSpec {
                argv: vec!["sh".into()],
                env: Default::default(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .expect("sh session")
    };
    let set = if python {
        "x = 41\nprint('set', x)\n"
    } else {
        "x=41; echo set $x\n"
    };
    b.session_write(&a.id, &interp.id, set.as_bytes())
        .await
        .unwrap();
    let (_, off) = session_until(&b, &a.id, &interp.id, 0, "set 41").await;
    b.write_file(
        &a.id,
        "/workspace/before.txt",
        b"written before pause",
        None,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = counter_values(&sh(&b, &a.id, "cat /tmp/counter").await);
    assert_counts_up(&before);

    // ---- pause with memory: no QEMU left
    w.step("pause with memory: no QEMU left");
    let pid = b.qemu_pid(&a.id).unwrap();
    let p1 = root.path().join("pause1");
    std::fs::create_dir(&p1).unwrap();
    let t = Instant::now();
    let arts = b.pause(&a.id, &p1, true).await.expect("pause");
    let pause_ms = t.elapsed().as_millis();
    assert!(
        !stasis_backend_microvm::util::pid_alive(pid),
        "QEMU still alive after pause"
    );
    assert!(qemus_of(&a.id).is_empty(), "QEMU process left after pause");
    assert_eq!(b.usage(&a.id).await.unwrap().rss_bytes, 0);
    let mem = arts
        .iter()
        .find(|x| x.kind == ArtifactKind::Memory)
        .unwrap();
    eprintln!(
        "FIGURE pause: {pause_ms} ms, memory.state {} bytes, artifacts {:?}",
        mem.size,
        arts.iter().map(|a| (&a.name, a.size)).collect::<Vec<_>>()
    );

    // ---- paused for a few seconds, then resume
    w.step("paused for a few seconds, then resume");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let t = Instant::now();
    b.resume(&a, &p1).await.expect("resume");
    let first = sh(&b, &a.id, "cat /tmp/counter").await;
    let resume_ms = t.elapsed().as_millis();
    eprintln!("FIGURE resume to first exec: {resume_ms} ms");
    let skew = guest_skew_ms(&b, &a.id).await;
    eprintln!("FIGURE guest clock skew after resume: {skew} ms");
    assert!(
        skew.abs() < 1000,
        "guest clock off by {skew} ms after resume"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = counter_values(&sh(&b, &a.id, "cat /tmp/counter").await);
    assert_counts_up(&after);
    assert!(counter_values(&first).len() >= before.len());
    assert!(
        after.len() > before.len() + 3,
        "counter did not continue: before {} after {}",
        before.len(),
        after.len()
    );
    // The sessions are listed with the same ids, the variable is intact.
    let ids: Vec<String> = b
        .session_list(&a.id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert!(
        ids.contains(&counter.id) && ids.contains(&interp.id),
        "{ids:?}"
    );
    let get = if python {
        "print('got', x + 1)\n"
    } else {
        "echo got $((x+1))\n"
    };
    b.session_write(&a.id, &interp.id, get.as_bytes())
        .await
        .unwrap();
    session_until(&b, &a.id, &interp.id, off, "got 42").await;
    assert_eq!(
        b.read_file(&a.id, "/workspace/before.txt", 1024)
            .await
            .unwrap(),
        b"written before pause"
    );

    // ---- snapshot (source keeps running), fork 2
    w.step("snapshot (source keeps running), fork 2");
    let snap = root.path().join("snap");
    std::fs::create_dir(&snap).unwrap();
    b.write_file(&a.id, "/workspace/at-snapshot.txt", b"snap", None)
        .await
        .unwrap();
    let t = Instant::now();
    b.snapshot(&a.id, &snap).await.expect("snapshot");
    eprintln!("FIGURE snapshot: {} ms", t.elapsed().as_millis());
    sh(&b, &a.id, "echo source-after > /workspace/source.txt").await;

    let c1 = spec(root.path(), &img, &reaper);
    let c2 = spec(root.path(), &img, &reaper);
    let t = Instant::now();
    b.restore(&c1, &snap).await.expect("restore 1");
    b.restore(&c2, &snap).await.expect("restore 2");
    eprintln!("FIGURE restore x2: {} ms", t.elapsed().as_millis());
    for (c, tag) in [(&c1, "one"), (&c2, "two")] {
        sh(
            &b,
            &c.id,
            &format!("echo {tag} > /workspace/child-{tag}.txt"),
        )
        .await;
    }
    for (c, mine, other) in [(&c1, "one", "two"), (&c2, "two", "one")] {
        let ls = sh(&b, &c.id, "ls /workspace").await;
        assert!(ls.contains(&format!("child-{mine}.txt")), "{ls}");
        assert!(!ls.contains(&format!("child-{other}.txt")), "{ls}");
        assert!(ls.contains("at-snapshot.txt"), "{ls}");
        assert!(!ls.contains("source.txt"), "{ls}");
        // The counter runs on in each child, from the snapshot's value.
        let v = counter_values(&sh(&b, &c.id, "cat /tmp/counter").await);
        assert_counts_up(&v);
        let host = sh(&b, &c.id, "hostname").await;
        assert_eq!(host.trim(), c.id.as_str());
        let skew = guest_skew_ms(&b, &c.id).await;
        assert!(skew.abs() < 1000, "child clock off by {skew} ms");
    }
    let ls = sh(&b, &a.id, "ls /workspace").await;
    assert!(!ls.contains("child-"), "{ls}");
    // The python variable is in each fork, and they diverge.
    if python {
        b.session_write(&c1.id, &interp.id, b"x = 1000\nprint('c1', x)\n")
            .await
            .unwrap();
        session_until(&b, &c1.id, &interp.id, off, "c1 1000").await;
        b.session_write(&c2.id, &interp.id, b"print('c2', x)\n")
            .await
            .unwrap();
        session_until(&b, &c2.id, &interp.id, off, "c2 41").await;
    }
    let rss: Vec<u64> = [&a, &c1, &c2]
        .iter()
        .map(|s| futures_rss(&b, &s.id))
        .collect();
    eprintln!(
        "FIGURE RSS source/fork1/fork2 (MiB): {:?}",
        rss.iter().map(|r| r >> 20).collect::<Vec<_>>()
    );

    // ---- a second pause/resume cycle of a restored sandbox (disk chain flattened)
    w.step("a second pause/resume cycle of a restored sandbox (disk chain flattened)");
    let p2 = root.path().join("pause-c1");
    std::fs::create_dir(&p2).unwrap();
    b.pause(&c1.id, &p2, true).await.expect("pause child");
    b.resume(&c1, &p2).await.expect("resume child");
    let ls = sh(
        &b,
        &c1.id,
        "cat /workspace/child-one.txt /workspace/at-snapshot.txt",
    )
    .await;
    assert_eq!(ls, "one\nsnap");

    // ---- bad input: corrupt and truncated memory.state
    w.step("bad input: corrupt and truncated memory.state");
    let bad = root.path().join("bad");
    copy_dir(&snap, &bad);
    let state = bad.join("memory.state");
    let mut data = std::fs::read(&state).unwrap();
    let mid = data.len() / 2;
    for x in &mut data[mid..mid + 4096] {
        *x ^= 0x5a;
    }
    std::fs::write(&state, &data).unwrap();
    let d = spec(root.path(), &img, &reaper);
    let e = b.restore(&d, &bad).await.unwrap_err();
    eprintln!("corrupt state: {e}");
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    assert!(e.message.contains("corrupt"), "{e}");
    assert!(qemus_of(&d.id).is_empty());
    // Truncated, with meta.json made to agree: QEMU itself refuses it.
    let good = std::fs::read(snap.join("memory.state")).unwrap();
    let cut = &good[..good.len() / 3];
    std::fs::write(&state, cut).unwrap();
    let mut meta: SnapshotMeta =
        serde_json::from_slice(&std::fs::read(bad.join("meta.json")).unwrap()).unwrap();
    meta.memory_state_blake3 = Some(blake3::hash(cut).to_hex().to_string());
    meta.memory_state_bytes = cut.len() as u64;
    std::fs::write(bad.join("meta.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
    let t = Instant::now();
    let e = b.restore(&d, &bad).await.unwrap_err();
    eprintln!("truncated state ({} ms): {e}", t.elapsed().as_millis());
    assert_eq!(e.code, ErrorCode::BackendError, "{e}");
    assert!(e.message.contains("memory state refused"), "{e}");
    assert!(qemus_of(&d.id).is_empty());
    // A corrupt RAM file: a snapshot's copy of the guest's RAM carries its
    // blake3. (A pause's memory.ram is the guest's own file, without one:
    // the store verifies every chunk of it, tested in the store.)
    let meta_of = |d: &Path| -> SnapshotMeta {
        serde_json::from_slice(&std::fs::read(d.join("meta.json")).unwrap()).unwrap()
    };
    assert!(meta_of(&snap).memory_ram_blake3.is_some());
    assert!(meta_of(&p1).memory_ram_blake3.is_none());
    {
        let bad2 = root.path().join("bad2");
        copy_dir(&snap, &bad2);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(bad2.join("memory.ram"))
            .unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"garbage", 1 << 20).unwrap();
        // Restores map the node's kept, verified RAM image: the copy is unread.
        let k1 = spec(root.path(), &img, &reaper);
        let k2 = spec(root.path(), &img, &reaper);
        b.restore(&k1, &snap).await.unwrap();
        b.restore(&k2, &bad2).await.unwrap();
        let ino = |s: &SandboxSpec| std::fs::metadata(s.dir.join("base.ram")).unwrap().ino();
        assert_eq!(ino(&k1), ino(&k2), "restores of one image share its file");
        b.destroy(&k1.id, &k1.dir).await.unwrap();
        b.destroy(&k2.id, &k2.dir).await.unwrap();
        // An image the node does not keep is verified: refused.
        let mut m = meta_of(&bad2);
        m.memory_ram_blake3 = Some(blake3::hash(b"another image").to_hex().to_string());
        std::fs::write(bad2.join("meta.json"), serde_json::to_vec(&m).unwrap()).unwrap();
        let e = b.restore(&d, &bad2).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
        assert!(e.message.contains("memory.ram"), "{e}");
        assert!(qemus_of(&d.id).is_empty());
    }
    // A memory image saved by another QEMU version: refused before any QEMU
    // starts, with its own code, the artifacts left as they were.
    let other = root.path().join("other-qemu");
    copy_dir(&snap, &other);
    let mut meta: SnapshotMeta =
        serde_json::from_slice(&std::fs::read(other.join("meta.json")).unwrap()).unwrap();
    meta.qemu_version = "7.2.19".into();
    std::fs::write(other.join("meta.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
    let before = std::fs::read(other.join("memory.state")).unwrap();
    let e = b.restore(&d, &other).await.unwrap_err();
    eprintln!("other QEMU version: {e}");
    assert_eq!(e.code, ErrorCode::IncompatibleSnapshot, "{e}");
    assert!(e.message.contains("7.2.19"), "{e}");
    assert!(qemus_of(&d.id).is_empty());
    assert_eq!(std::fs::read(other.join("memory.state")).unwrap(), before);
    // The good snapshot is untouched and still restores.
    let d2 = spec(root.path(), &img, &reaper);
    b.restore(&d2, &snap)
        .await
        .expect("good snapshot restores after bad ones");
    b.destroy(&d2.id, &d2.dir).await.unwrap();

    // ---- a guest that does not answer: sandbox failed, QEMU killed
    w.step("a guest that does not answer: sandbox failed, QEMU killed");
    let short = backend(&img, Duration::from_secs(2));
    let f = spec(root.path(), &img, &reaper);
    short
        .resume(&f, &p2)
        .await
        .expect("resume into a short-timeout backend");
    let fpid = short.qemu_pid(&f.id).unwrap();
    unsafe { libc::kill(fpid, libc::SIGSTOP) };
    let e = short
        .exec(
            &f.id,
            ExecRequest {
                argv: vec!["true".into()],
                env: Default::default(),
                cwd: None,
                timeout_ms: 1000,
                stdin: None,
                user: None,
            },
            None,
        )
        .await
        .unwrap_err();
    eprintln!("unanswering guest: {e}");
    assert!(e.message.contains("did not answer"), "{e}");
    assert!(qemus_of(&f.id).is_empty(), "QEMU not killed");
    let e = short.read_file(&f.id, "/x", 1).await.unwrap_err();
    assert!(e.message.contains("failed"), "{e}");
    short.destroy(&f.id, &f.dir).await.unwrap();

    // ---- recover: a new backend instance (daemon restart) reattaches
    w.step("recover: a new backend instance (daemon restart) reattaches");
    drop(b);
    let b2 = backend(&img, Duration::from_secs(30));
    assert_eq!(
        b2.recover(&a).await.unwrap(),
        stasis_backend::Recovered::Running
    );
    assert_eq!(
        sh(&b2, &a.id, "cat /workspace/source.txt").await,
        "source-after\n"
    );
    assert!(b2.usage(&a.id).await.unwrap().rss_bytes > 0);
    // orphan cleanup kills the QEMUs nobody claims
    b2.cleanup_orphans(std::slice::from_ref(&a.id))
        .await
        .unwrap();
    assert!(!qemus_of(&a.id).is_empty());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        qemus_of(&c1.id).is_empty() && qemus_of(&c2.id).is_empty(),
        "orphans left"
    );

    for s in [&a, &c1, &c2] {
        b2.destroy(&s.id, &s.dir).await.unwrap();
        b2.destroy(&s.id, &s.dir).await.unwrap();
        assert!(qemus_of(&s.id).is_empty());
    }
}

/// The KVM boot probe against the real image (ignored: it waits up to
/// `STASIS_PROBE_SECS`, default 20 s, on hosts where KVM crawls).
#[tokio::test]
#[ignore]
async fn kvm_probe_reports() {
    let Some(img) = image_dir() else { return };
    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.probe_timeout = Duration::from_secs(
        std::env::var("STASIS_PROBE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    );
    let t = Instant::now();
    let r = stasis_backend_microvm::probe_accelerator(&c).await;
    eprintln!("FIGURE probe {} ms: {r:?}", t.elapsed().as_millis());
    let b = MicrovmBackend::new(c);
    eprintln!("doctor: {}", b.doctor().await);
    assert!(qemu_probe_leftovers().is_empty());
}

fn qemu_probe_leftovers() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .filter(|pid| {
            stasis_backend_microvm::util::pid_alive(*pid)
                && qemu::sandbox_of(*pid).as_deref() == Some("kvm-probe")
        })
        .collect()
}

/// Issue 8 (1, 2, 4, 5) on this backend: many pause/resume cycles lose no
/// byte, a filesystem-only pause keeps files, a restore of the last snapshot
/// has everything; streamed exec output; files larger than one frame; QEMU
/// killed before a pause -> clear error, the previous pause still resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_resume_correctness_cycles() {
    let Some(img) = image_dir() else { return };
    let w = watchdog::watch("microvm_resume_correctness_cycles");
    let reaper = Reaper::new();
    let cycles: usize = std::env::var("STASIS_TEST_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let guard = tempfile::tempdir().unwrap();
    let root = Root(guard.path().to_path_buf());
    let b = backend(&img, Duration::from_secs(30));
    let a = spec(root.path(), &img, &reaper);
    b.create(&a).await.expect("create");

    // Streamed exec output arrives through the channel, not in the result.
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let r = b
        .exec(
            &a.id,
            ExecRequest {
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    "for i in 1 2 3; do echo line$i; done; echo err >&2".into(),
                ],
                env: Default::default(),
                cwd: None,
                timeout_ms: 20_000,
                stdin: None,
                user: None,
            },
            Some(tx),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    let mut out = Vec::new();
    while let Ok(c) = rx.try_recv() {
        if c.stream == stasis_core::Stream::Stdout {
            out.extend(c.data);
        }
    }
    assert_eq!(String::from_utf8_lossy(&out), "line1\nline2\nline3\n");

    // A file larger than one agent frame goes through in chunks.
    let big: Vec<u8> = (0..(17u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761u32) >> 24) as u8)
        .collect();
    let t = Instant::now();
    b.write_file(&a.id, "big.bin", &big, None).await.unwrap();
    let back = b
        .read_file(&a.id, "/workspace/big.bin", 32 << 20)
        .await
        .unwrap();
    assert!(back == big, "17 MiB file came back different");
    eprintln!("FIGURE 17 MiB write+read: {} ms", t.elapsed().as_millis());
    let e = b.read_file(&a.id, "big.bin", 1 << 20).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{e}");
    let sess = b
        .session_start(
            &a.id,
            SessionSpec {
                argv: vec!["sh".into(), "-c".into(), "while :; do sleep 1; done".into()],
                env: Default::default(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .unwrap();

    let mut expect_log = String::new();
    let mut last = None;
    let t0 = Instant::now();
    w.step("pause/resume cycles");
    for i in 0..cycles {
        b.write_file(
            &a.id,
            &format!("cycle-{i}.txt"),
            format!("file {i}\n").as_bytes(),
            None,
        )
        .await
        .unwrap();
        sh(&b, &a.id, &format!("echo append {i} >> /workspace/log.txt")).await;
        expect_log.push_str(&format!("append {i}\n"));
        let out = root.path().join(format!("p{i}"));
        std::fs::create_dir(&out).unwrap();
        w.step(&format!("cycle {i}: pause"));
        b.pause(&a.id, &out, true)
            .await
            .unwrap_or_else(|e| panic!("pause {i}: {e}"));
        assert!(qemus_of(&a.id).is_empty());
        w.step(&format!("cycle {i}: resume"));
        b.resume(&a, &out)
            .await
            .unwrap_or_else(|e| panic!("resume {i}: {e}"));
        last = Some(out);
    }
    eprintln!(
        "FIGURE {cycles} pause/resume cycles: {} ms",
        t0.elapsed().as_millis()
    );
    let check = |got: String| {
        let mut want = String::new();
        for i in 0..cycles {
            want.push_str(&format!("file {i}\n"));
        }
        want.push_str(&expect_log);
        assert_eq!(got, want);
    };
    let all = (0..cycles)
        .map(|i| format!("/workspace/cycle-{i}.txt"))
        .collect::<Vec<_>>()
        .join(" ");
    check(sh(&b, &a.id, &format!("cat {all} /workspace/log.txt")).await);
    let ids: Vec<String> = b
        .session_list(&a.id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert!(ids.contains(&sess.id), "session lost after cycles: {ids:?}");
    assert!(guest_skew_ms(&b, &a.id).await.abs() < 1000);

    // A restore of the last pause into a new sandbox has every byte.
    let r = spec(root.path(), &img, &reaper);
    b.restore(&r, last.as_ref().unwrap())
        .await
        .expect("restore last pause");
    check(sh(&b, &r.id, &format!("cat {all} /workspace/log.txt")).await);
    b.destroy(&r.id, &r.dir).await.unwrap();

    w.step("filesystem-only pause and cold resume");
    // Filesystem-only pause: processes end, files stay, resume cold-boots.
    let fsp = root.path().join("fs-only");
    std::fs::create_dir(&fsp).unwrap();
    let arts = b.pause(&a.id, &fsp, false).await.expect("fs-only pause");
    assert!(arts
        .iter()
        .all(|x| x.kind != stasis_backend::ArtifactKind::Memory));
    assert!(qemus_of(&a.id).is_empty());
    b.resume(&a, &fsp).await.expect("resume from fs-only pause");
    check(sh(&b, &a.id, &format!("cat {all} /workspace/log.txt")).await);
    assert!(
        b.session_list(&a.id).await.unwrap().is_empty(),
        "processes survived a fs-only pause"
    );
    assert!(guest_skew_ms(&b, &a.id).await.abs() < 1000);

    w.step("pause of a dead QEMU");
    // QEMU dies right before a pause: clear error, the earlier pause resumes.
    let good = root.path().join("good");
    std::fs::create_dir(&good).unwrap();
    b.pause(&a.id, &good, true).await.unwrap();
    b.resume(&a, &good).await.unwrap();
    let pid = b.qemu_pid(&a.id).unwrap();
    unsafe { libc::kill(pid, libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let bad = root.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    let e = b.pause(&a.id, &bad, true).await.unwrap_err();
    eprintln!("pause of a dead QEMU: {e}");
    assert!(e.message.contains("lost"), "{e}");
    assert!(
        std::fs::read_dir(&bad).unwrap().next().is_none(),
        "partial artifacts left"
    );
    b.destroy(&a.id, &a.dir).await.unwrap();
    b.resume(&a, &good)
        .await
        .expect("earlier pause still resumes");
    check(sh(&b, &a.id, &format!("cat {all} /workspace/log.txt")).await);
    b.destroy(&a.id, &a.dir).await.unwrap();
    assert!(qemus_of(&a.id).is_empty());
}

/// Helper for `microvm_survives_daemon_sigkill`: run in a child process (this
/// test binary again), it plays a daemon that creates a sandbox and hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn helper_daemon_creates_and_hangs() {
    let (Ok(dir), Ok(id)) = (
        std::env::var("STASIS_HELPER_DIR"),
        std::env::var("STASIS_HELPER_ID"),
    ) else {
        return;
    };
    let img = PathBuf::from(std::env::var("STASIS_IMAGE_DIR").unwrap());
    let b = backend(&img, Duration::from_secs(30));
    let spec = SandboxSpec {
        id: SandboxId::parse(&id).unwrap(),
        manifest: Manifest {
            image: Some(img.display().to_string()),
            ..Default::default()
        },
        dir: PathBuf::from(dir),
    };
    b.create(&spec).await.unwrap();
    sh(&b, &spec.id, "echo alive > /workspace/helper.txt").await;
    use std::io::Write;
    println!("HELPER READY");
    std::io::stdout().flush().unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// A daemon killed with SIGKILL leaves its QEMU running (own session, no
/// kill-on-drop); a new daemon's `recover` reattaches to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_survives_daemon_sigkill() {
    let Some(img) = image_dir() else { return };
    let w = watchdog::watch("microvm_survives_daemon_sigkill");
    let reaper = Reaper::new();
    let guard = tempfile::tempdir().unwrap();
    let s = spec(guard.path(), &img, &reaper);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_daemon_creates_and_hangs",
            "--ignored",
            "--nocapture",
        ])
        .env("STASIS_HELPER_DIR", &s.dir)
        .env("STASIS_HELPER_ID", s.id.as_str())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("HELPER READY") {
                let _ = tx.send(());
            }
        }
    });
    w.step("helper daemon creates its sandbox");
    if rx.recv_timeout(Duration::from_secs(180)).is_err() {
        let _ = child.kill();
        panic!("helper daemon did not create its sandbox");
    }
    w.step("helper killed; recover, pause, resume");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(qemus_of(&s.id).len(), 1, "QEMU died with its daemon");
    let b = backend(&img, Duration::from_secs(30));
    assert_eq!(
        b.recover(&s).await.unwrap(),
        stasis_backend::Recovered::Running
    );
    assert_eq!(sh(&b, &s.id, "cat /workspace/helper.txt").await, "alive\n");
    // and it still pauses and resumes under the new daemon
    let p = guard.path().join("p");
    std::fs::create_dir(&p).unwrap();
    b.pause(&s.id, &p, true).await.unwrap();
    b.resume(&s, &p).await.unwrap();
    assert_eq!(sh(&b, &s.id, "cat /workspace/helper.txt").await, "alive\n");
    b.destroy(&s.id, &s.dir).await.unwrap();
    assert!(qemus_of(&s.id).is_empty());
}
