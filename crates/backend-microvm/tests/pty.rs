//! Terminal sessions in a real microVM (needs `STASIS_IMAGE_DIR` with an
//! image whose agent knows terminals; without it: not run, passes): a
//! shell on a PTY sees a terminal of its size and resizes, Ctrl-C
//! interrupts its foreground job, and the shell survives a pause/resume
//! (same pid; output produced before the pause and not read yet is read
//! after it). Keystroke round trip printed as a FIGURE.

use std::time::{Duration, Instant};

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_microvm::{AccelChoice, MicrovmBackend, MicrovmConfig};
use stasis_core::{ErrorCode, Manifest, PtySize, SandboxId, SessionSpec};

#[path = "support/watchdog.rs"]
mod watchdog;

#[path = "support/vm_util.rs"]
mod vm_util;
use vm_util::{Reaper, Root};

const T: Duration = Duration::from_secs(60);

async fn read_until(
    b: &MicrovmBackend,
    id: &SandboxId,
    sid: &str,
    mut off: u64,
    needle: &str,
) -> (String, u64) {
    let mut text = String::new();
    let t = Instant::now();
    while !text.contains(needle) {
        assert!(t.elapsed() < T, "no {needle:?} in {text:?}");
        let o = b
            .session_read(id, sid, off, Duration::from_secs(2))
            .await
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
    (text, off)
}

async fn write(b: &MicrovmBackend, id: &SandboxId, sid: &str, data: &[u8]) {
    b.session_write(id, sid, data).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_pty_shell_resize_ctrl_c_and_pause_resume() {
    let Some(img) = vm_util::image_dir("pty") else {
        return;
    };
    let w = watchdog::watch("microvm_pty_shell_resize_ctrl_c_and_pause_resume");
    let reaper = Reaper::new();
    let guard = tempfile::tempdir().unwrap();
    let root = Root(guard.path().to_path_buf());
    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.accel = AccelChoice::Tcg;
    c.agent_timeout = Duration::from_secs(30);
    c.boot_timeout = Duration::from_secs(120);
    let b = MicrovmBackend::new(c);
    let id = SandboxId::generate();
    let dir = root.path().join(id.as_str());
    std::fs::create_dir_all(&dir).unwrap();
    reaper.0.lock().unwrap().push(id.clone());
    let sb = SandboxSpec {
        id: id.clone(),
        manifest: Manifest {
            image: Some(img.display().to_string()),
            ..Default::default()
        },
        dir,
    };
    w.step("create");
    b.create(&sb).await.expect("create");

    w.step("a shell on a terminal");
    let s = b
        .session_start(
            &id,
            SessionSpec {
                argv: vec!["sh".into(), "-i".into()],
                env: [("PS1".to_string(), "PROMPT> ".to_string())].into(),
                cwd: None,
                pty: Some(PtySize { cols: 80, rows: 24 }),
                user: None,
            },
        )
        .await
        .expect("pty session");
    assert_eq!(s.pty, Some(PtySize { cols: 80, rows: 24 }));
    let (_, off) = read_until(&b, &id, &s.id, 0, "PROMPT> ").await;
    write(
        &b,
        &id,
        &s.id,
        b"test -t 0 && echo tty-$TERM; echo size=$(stty size) pid=$$ done$((1+1))\n",
    )
    .await;
    let (text, off) = read_until(&b, &id, &s.id, off, "done2").await;
    assert!(text.contains("tty-xterm-256color"), "{text:?}");
    assert!(text.contains("size=24 80"), "{text:?}");
    let pid: String = text
        .rsplit("pid=")
        .next()
        .unwrap()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let (_, off) = read_until(&b, &id, &s.id, off, "PROMPT> ").await;

    w.step("resize");
    b.session_resize(
        &id,
        &s.id,
        PtySize {
            cols: 120,
            rows: 40,
        },
    )
    .await
    .unwrap();
    write(&b, &id, &s.id, b"echo now=$(stty size)\n").await;
    let (_, off) = read_until(&b, &id, &s.id, off, "now=40 120").await;
    let err = b
        .session_resize(&id, &s.id, PtySize { cols: 0, rows: 0 })
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);

    w.step("ctrl-c");
    write(&b, &id, &s.id, b"echo sleeping; sleep 120\n").await;
    let (_, off) = read_until(&b, &id, &s.id, off, "sleeping\r\n").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    write(&b, &id, &s.id, &[0x03]).await;
    write(&b, &id, &s.id, b"echo back-$((6*7))\n").await;
    let (_, off) = read_until(&b, &id, &s.id, off, "back-42").await;
    assert!(
        t.elapsed() < Duration::from_secs(100),
        "sleep not interrupted"
    );

    w.step("keystroke round trip");
    let mut off = off;
    let mut times = Vec::new();
    for i in 0..50u8 {
        let key = b'a' + (i % 26);
        let t = Instant::now();
        write(&b, &id, &s.id, &[key]).await;
        let (_, o) = read_until(&b, &id, &s.id, off, &(key as char).to_string()).await;
        times.push(t.elapsed());
        off = o;
    }
    times.sort();
    eprintln!(
        "FIGURE microvm keystroke round trip: p50 {:?}, p90 {:?} over {} keys",
        times[times.len() / 2],
        times[times.len() * 9 / 10],
        times.len()
    );
    // Clear the typed line.
    write(&b, &id, &s.id, &[0x15]).await;

    w.step("pause and resume");
    // Output the host has not read yet when the sandbox pauses.
    write(&b, &id, &s.id, b"echo before-pause-$((40+2))\n").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let p = root.path().join("pause");
    std::fs::create_dir(&p).unwrap();
    b.pause(&id, &p, true).await.expect("pause");
    b.resume(&sb, &p).await.expect("resume");
    let (_, off) = read_until(&b, &id, &s.id, off, "before-pause-42").await;
    write(&b, &id, &s.id, b"echo same=$$ x$((2+3))\n").await;
    let (text, _) = read_until(&b, &id, &s.id, off, "x5").await;
    assert!(
        text.contains(&format!("same={pid} x5")),
        "{text:?} (pid {pid})"
    );
    write(&b, &id, &s.id, b"exit 5\n").await;
    let t = Instant::now();
    loop {
        let o = b
            .session_read(&id, &s.id, u64::MAX, Duration::from_secs(2))
            .await
            .unwrap();
        if !o.running {
            assert_eq!(o.exit_code, Some(5));
            break;
        }
        assert!(t.elapsed() < T);
    }
    b.destroy(&id, &sb.dir).await.unwrap();
}
