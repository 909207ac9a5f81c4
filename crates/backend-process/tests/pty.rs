//! Sessions on a pseudo-terminal: the command sees a terminal (isatty,
//! TERM, `stty size`), a resize reaches it as SIGWINCH with the new size,
//! Ctrl-C (0x03) interrupts the foreground job of an interactive shell, the
//! exit status is reported, and bad resizes are refused with a code. A
//! session on pipes can have its input closed (its reader sees end of
//! file); one on a terminal cannot.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_process::ProcessBackend;
use stasis_core::{ErrorCode, PtySize, SessionSpec};

fn spec(argv: &[&str], pty: Option<PtySize>) -> SessionSpec {
    SessionSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        pty,
        user: None,
    }
}

const SIZE: PtySize = PtySize { cols: 80, rows: 24 };

/// Read from `off` until the text read contains `needle`.
async fn read_until(
    be: &ProcessBackend,
    sb: &SandboxSpec,
    sid: &str,
    off: u64,
    needle: &str,
) -> (String, u64) {
    let (mut text, mut off) = (String::new(), off);
    let t = Instant::now();
    while !text.contains(needle) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no {needle:?} in {text:?}"
        );
        let o = be.session_read(&sb.id, sid, off, wait()).await.unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
    (text, off)
}

async fn exit_code(be: &ProcessBackend, sb: &SandboxSpec, sid: &str) -> Option<i32> {
    let t = Instant::now();
    loop {
        let o = be
            .session_read(&sb.id, sid, u64::MAX, wait())
            .await
            .unwrap();
        if !o.running {
            return o.exit_code;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "session still running"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pty_session_sees_a_terminal_its_size_and_resizes() {
    let e = env("pty-size");
    let sb = e.create().await;
    let id = &sb.id;
    let script = "test -t 0 && test -t 1 && test -t 2 && echo tty-yes; \
                  echo TERM=$TERM; echo size=$(stty size); \
                  trap 'echo winch=$(stty size)' WINCH; echo ready; \
                  until read line; do :; done; echo got=$line; exit 7";
    let s =
        e.be.session_start(id, spec(&["sh", "-c", script], Some(SIZE)))
            .await
            .unwrap();
    assert_eq!(s.pty, Some(SIZE));
    let (text, off) = read_until(&e.be, &sb, &s.id, 0, "ready").await;
    assert!(text.contains("tty-yes"), "{text:?}");
    assert!(text.contains("TERM=xterm-256color"), "{text:?}");
    assert!(text.contains("size=24 80"), "{text:?}");
    // Output of a terminal: the line discipline turns \n into \r\n.
    assert!(text.contains("tty-yes\r\n"), "{text:?}");
    let big = PtySize {
        cols: 132,
        rows: 43,
    };
    e.be.session_resize(id, &s.id, big).await.unwrap();
    // The trap's signal interrupts `read` (hence the loop); type the line
    // only after the trap ran.
    let (_, off) = read_until(&e.be, &sb, &s.id, off, "winch=43 132").await;
    let listed = e.be.session_list(id).await.unwrap();
    assert_eq!(listed.iter().find(|i| i.id == s.id).unwrap().pty, Some(big));
    e.be.session_write(id, &s.id, b"hello\n").await.unwrap();
    read_until(&e.be, &sb, &s.id, off, "got=hello").await;
    assert_eq!(exit_code(&e.be, &sb, &s.id).await, Some(7));
    e.be.destroy(id, &sb.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_interrupts_the_foreground_job_of_an_interactive_shell() {
    let e = env("pty-intr");
    let sb = e.create().await;
    let id = &sb.id;
    let mut env = BTreeMap::new();
    env.insert("PS1".to_string(), "PROMPT> ".to_string());
    env.insert("TERM".to_string(), "dumb".to_string());
    let mut sp = spec(&["sh", "-i"], Some(SIZE));
    sp.env = env;
    let s = e.be.session_start(id, sp).await.unwrap();
    let (_, off) = read_until(&e.be, &sb, &s.id, 0, "PROMPT> ").await;
    e.be.session_write(id, &s.id, b"echo TERM=$TERM; sleep 60\n")
        .await
        .unwrap();
    // The environment's TERM wins; the echo shows the sleep has started.
    let (_, off) = read_until(&e.be, &sb, &s.id, off, "TERM=dumb").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    e.be.session_write(id, &s.id, &[0x03]).await.unwrap();
    e.be.session_write(id, &s.id, b"echo alive-$((6*7))\n")
        .await
        .unwrap();
    read_until(&e.be, &sb, &s.id, off, "alive-42").await;
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "the sleep was not interrupted"
    );
    e.be.session_write(id, &s.id, b"exit 3\n").await.unwrap();
    assert_eq!(exit_code(&e.be, &sb, &s.id).await, Some(3));
    e.be.destroy(id, &sb.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resizes_are_refused_with_a_code() {
    let e = env("pty-bad");
    let sb = e.create().await;
    let id = &sb.id;
    let piped = e.be.session_start(id, spec(&["cat"], None)).await.unwrap();
    assert_eq!(piped.pty, None);
    let err = e.be.session_resize(id, &piped.id, SIZE).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState, "{err:?}");
    let tty =
        e.be.session_start(id, spec(&["cat"], Some(SIZE)))
            .await
            .unwrap();
    for bad in [
        PtySize { cols: 0, rows: 0 },
        PtySize {
            cols: 80,
            rows: 60000,
        },
    ] {
        let err = e.be.session_resize(id, &tty.id, bad).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{err:?}");
    }
    let err =
        e.be.session_resize(id, "sess-nope", SIZE)
            .await
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err:?}");
    let err =
        e.be.session_start(id, spec(&["cat"], Some(PtySize { cols: 0, rows: 5 })))
            .await
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err:?}");
    e.be.destroy(id, &sb.dir).await.unwrap();
    e.cleanup_parent();
}

/// Keystroke round trip (write one byte, see its echo), p50 over 50
/// keystrokes; printed for the notes, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystroke_round_trip() {
    let e = env("pty-rtt");
    let sb = e.create().await;
    let id = &sb.id;
    let s =
        e.be.session_start(id, spec(&["cat"], Some(SIZE)))
            .await
            .unwrap();
    let mut off = 0;
    let mut times = Vec::new();
    for i in 0..50u8 {
        let key = b'a' + (i % 26);
        let t = Instant::now();
        e.be.session_write(id, &s.id, &[key]).await.unwrap();
        let (_, o) = read_until(&e.be, &sb, &s.id, off, &(key as char).to_string()).await;
        times.push(t.elapsed());
        off = o;
    }
    times.sort();
    eprintln!(
        "process backend keystroke round trip: p50 {:?}, p90 {:?} over {} keys",
        times[times.len() / 2],
        times[times.len() * 9 / 10],
        times.len()
    );
    e.be.destroy(id, &sb.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_input_ends_a_reader_on_pipes_and_is_refused_on_a_terminal() {
    let e = env("close-input");
    let sb = e.create().await;
    let id = &sb.id;
    let s =
        e.be.session_start(id, spec(&["wc", "-c"], None))
            .await
            .unwrap();
    e.be.session_write(id, &s.id, b"12345").await.unwrap();
    e.be.session_close_input(id, &s.id).await.unwrap();
    read_until(&e.be, &sb, &s.id, 0, "5").await;
    assert_eq!(exit_code(&e.be, &sb, &s.id).await, Some(0));
    // Again, after the command ended: nothing to close, no error.
    e.be.session_close_input(id, &s.id).await.unwrap();

    let t =
        e.be.session_start(id, spec(&["cat"], Some(SIZE)))
            .await
            .unwrap();
    let err = e.be.session_close_input(id, &t.id).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState, "{err:?}");
    let err = e.be.session_close_input(id, "s-nope").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err:?}");
    e.be.destroy(id, &sb.dir).await.unwrap();
    e.cleanup_parent();
}
