//! Sessions without a terminal: stdout and stderr reported apart, a signal
//! delivered to the program (a ^C it may trap), and a killed session still
//! answering its output and exit status.

mod common;

use common::{connect, Client};
use stasis_agent_proto::{Reply, Request, FEATURE_SESSION_SIGNAL};
use stasis_core::SessionOutput;
use stasis_guest_agent::Agent;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

/// Everything the session printed, once it ended.
fn read_to_end(c: &mut Client<UnixStream>, id: &str) -> (Vec<u8>, Vec<u8>, Vec<u8>, Option<i32>) {
    let (mut all, mut out, mut err, mut offset) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let t = std::time::Instant::now();
    loop {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "session {id} never ended"
        );
        let o: SessionOutput = match c.reply(Request::SessionRead {
            session: id.into(),
            offset,
            wait_ms: 2000,
        }) {
            Reply::SessionOutput { output } => output,
            r => panic!("{r:?}"),
        };
        let (so, se) = o.split();
        all.extend(&o.data);
        out.extend(so);
        err.extend(se);
        offset = o.next_offset;
        if !o.running && o.data.is_empty() {
            return (all, out, err, o.exit_code);
        }
    }
}

fn kill(c: &mut Client<UnixStream>, id: &str, signal: Option<i32>) {
    match c.reply(Request::SessionKill {
        session: id.into(),
        signal,
    }) {
        Reply::Session { .. } => {}
        r => panic!("{r:?}"),
    }
}

#[test]
fn stdout_and_stderr_come_apart_and_together() {
    let agent = Arc::new(Agent::new());
    assert!(agent.features().iter().any(|f| f == FEATURE_SESSION_SIGNAL));
    let mut c = connect(&agent);
    let id = c.session_start(&["sh", "-c", "echo out1; echo err1 >&2; echo out2"]);
    let (all, out, err, code) = read_to_end(&mut c, &id);
    assert_eq!(code, Some(0));
    assert_eq!(String::from_utf8_lossy(&out), "out1\nout2\n");
    assert_eq!(String::from_utf8_lossy(&err), "err1\n");
    assert_eq!(all.len(), out.len() + err.len(), "combined holds both");
}

#[test]
fn an_interrupt_reaches_the_program_and_a_killed_session_stays_readable() {
    // As when the agent runs as a background job of a script: SIGINT
    // ignored, which its children would inherit.
    // SAFETY: setting a disposition; the test runs no handler.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    // Not trapped: ended by SIGINT, reported like a shell does (130).
    let id = c.session_start(&["sh", "-c", "echo ready; exec sleep 1000"]);
    c.session_read_until(&id, 0, "ready", Duration::from_secs(10));
    kill(&mut c, &id, Some(2));
    let (all, _, _, code) = read_to_end(&mut c, &id);
    assert_eq!(code, Some(130), "{}", String::from_utf8_lossy(&all));
    // Trapped: the program handles the ^C itself and chooses its exit.
    let id = c.session_start(&[
        "sh",
        "-c",
        "trap 'echo caught; exit 7' INT; echo ready; while :; do sleep 0.05; done",
    ]);
    c.session_read_until(&id, 0, "ready", Duration::from_secs(10));
    kill(&mut c, &id, Some(2));
    let (all, out, _, code) = read_to_end(&mut c, &id);
    assert_eq!(code, Some(7), "{}", String::from_utf8_lossy(&all));
    assert!(String::from_utf8_lossy(&out).contains("caught"));
    // A plain kill: the output and the status are still there afterwards.
    let id = c.session_start(&["sh", "-c", "echo before; exec sleep 1000"]);
    c.session_read_until(&id, 0, "before", Duration::from_secs(10));
    kill(&mut c, &id, None);
    let (all, _, _, code) = read_to_end(&mut c, &id);
    assert_eq!(String::from_utf8_lossy(&all), "before\n");
    assert_eq!(code, Some(137));
    // A signal the API does not offer is refused.
    match c.reply(Request::SessionKill {
        session: id,
        signal: Some(19),
    }) {
        Reply::Error { code, .. } => assert_eq!(code, "invalid_argument"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn closing_the_input_ends_a_reader_and_later_writes_are_refused() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let id = c.session_start(&["cat"]);
    match c.reply(Request::SessionWrite {
        session: id.clone(),
        data: b"hello".to_vec(),
    }) {
        Reply::Ok => {}
        r => panic!("{r:?}"),
    }
    for _ in 0..2 {
        // Closing twice is no error.
        match c.reply(Request::SessionCloseInput {
            session: id.clone(),
        }) {
            Reply::Ok => {}
            r => panic!("{r:?}"),
        }
    }
    let (_, out, _, code) = read_to_end(&mut c, &id);
    assert_eq!(code, Some(0), "cat read end of file");
    assert_eq!(String::from_utf8_lossy(&out), "hello");
    match c.reply(Request::SessionWrite {
        session: id.clone(),
        data: b"more".to_vec(),
    }) {
        Reply::Error { code, message } => assert_eq!(code, "invalid_state", "{message}"),
        r => panic!("{r:?}"),
    }
    match c.reply(Request::SessionCloseInput {
        session: "s-nope".into(),
    }) {
        Reply::Error { code, message } => assert_eq!(code, "not_found", "{message}"),
        r => panic!("{r:?}"),
    }
}
