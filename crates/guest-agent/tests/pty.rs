//! Sessions on a pseudo-terminal through the agent protocol, on the host
//! (no VM): a terminal with the asked size, resize as SIGWINCH, Ctrl-C in an
//! interactive shell, the exit code, and refused resizes.

mod common;

use common::{connect, Client};
use stasis_agent_proto::{Reply, Request};
use stasis_core::{PtySize, SessionInfo, SessionSpec};
use stasis_guest_agent::Agent;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(15);

fn start(c: &mut Client<UnixStream>, argv: &[&str], pty: Option<PtySize>) -> SessionInfo {
    match c.reply(Request::SessionStart {
        spec: SessionSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: [("PS1".to_string(), "PROMPT> ".to_string())].into(),
            cwd: Some("/".into()),
            pty,
            user: None,
        },
    }) {
        Reply::Session { info } => info,
        r => panic!("session start: {r:?}"),
    }
}

fn resize(c: &mut Client<UnixStream>, id: &str, cols: u16, rows: u16) -> Reply {
    c.reply(Request::SessionResize {
        session: id.into(),
        size: PtySize { cols, rows },
    })
}

fn exit_code(c: &mut Client<UnixStream>, id: &str) -> Option<i32> {
    let t = Instant::now();
    loop {
        match c.reply(Request::SessionRead {
            session: id.into(),
            offset: u64::MAX,
            wait_ms: 500,
        }) {
            Reply::SessionOutput { output } if !output.running => return output.exit_code,
            Reply::SessionOutput { .. } => assert!(t.elapsed() < T, "still running"),
            r => panic!("{r:?}"),
        }
    }
}

fn error_code(r: Reply) -> String {
    match r {
        Reply::Error { code, .. } => code,
        r => panic!("expected an error, got {r:?}"),
    }
}

#[test]
fn pty_session_terminal_size_resize_and_exit_code() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let script = "test -t 0 && test -t 1 && test -t 2 && echo tty-yes; \
                  echo TERM=$TERM; echo size=$(stty size); \
                  trap 'echo winch=$(stty size)' WINCH; echo ready; \
                  until read line; do :; done; echo got=$line; exit 7";
    let s = start(
        &mut c,
        &["sh", "-c", script],
        Some(PtySize { cols: 80, rows: 24 }),
    );
    assert_eq!(s.pty, Some(PtySize { cols: 80, rows: 24 }));
    let (text, off) = c.session_read_until(&s.id, 0, "ready", T);
    assert!(text.contains("tty-yes\r\n"), "{text:?}");
    assert!(text.contains("TERM=xterm-256color"), "{text:?}");
    assert!(text.contains("size=24 80"), "{text:?}");
    assert_eq!(resize(&mut c, &s.id, 132, 43), Reply::Ok);
    let (_, off) = c.session_read_until(&s.id, off, "winch=43 132", T);
    match c.reply(Request::SessionList) {
        Reply::Sessions { sessions } => {
            let i = sessions.iter().find(|i| i.id == s.id).unwrap();
            assert_eq!(
                i.pty,
                Some(PtySize {
                    cols: 132,
                    rows: 43
                })
            );
        }
        r => panic!("{r:?}"),
    }
    c.session_write(&s.id, "hello\n");
    c.session_read_until(&s.id, off, "got=hello", T);
    assert_eq!(exit_code(&mut c, &s.id), Some(7));
}

#[test]
fn ctrl_c_interrupts_a_sleep_in_an_interactive_shell() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let s = start(&mut c, &["sh", "-i"], Some(PtySize { cols: 80, rows: 24 }));
    let (_, off) = c.session_read_until(&s.id, 0, "PROMPT> ", T);
    c.session_write(&s.id, "echo started; sleep 60\n");
    let (_, off) = c.session_read_until(&s.id, off, "started\r\n", T);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    c.session_write(&s.id, "\x03");
    c.session_write(&s.id, "echo alive-$((6*7))\n");
    c.session_read_until(&s.id, off, "alive-42", T);
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "sleep not interrupted"
    );
    c.session_write(&s.id, "exit 3\n");
    assert_eq!(exit_code(&mut c, &s.id), Some(3));
}

#[test]
fn resizes_refused_with_codes() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let piped = start(&mut c, &["cat"], None);
    assert_eq!(piped.pty, None);
    assert_eq!(
        error_code(resize(&mut c, &piped.id, 80, 24)),
        "invalid_state"
    );
    let tty = start(&mut c, &["cat"], Some(PtySize { cols: 80, rows: 24 }));
    assert_eq!(
        error_code(resize(&mut c, &tty.id, 0, 0)),
        "invalid_argument"
    );
    assert_eq!(
        error_code(resize(&mut c, &tty.id, 80, 5000)),
        "invalid_argument"
    );
    assert_eq!(error_code(resize(&mut c, "s9-nope", 80, 24)), "not_found");
    let r = c.reply(Request::SessionStart {
        spec: SessionSpec {
            argv: vec!["cat".into()],
            env: Default::default(),
            cwd: None,
            pty: Some(PtySize { cols: 0, rows: 1 }),
            user: None,
        },
    });
    assert_eq!(error_code(r), "invalid_argument");
    for id in [piped.id, tty.id] {
        c.reply(Request::SessionKill {
            session: id,
            signal: None,
        });
    }
}
