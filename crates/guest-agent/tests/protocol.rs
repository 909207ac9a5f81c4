//! The agent's request handling end to end over a socket pair, on the host
//! (no VM): framing, ids, exec, files, sessions, reconnect with state kept.

mod common;

use common::{connect, Client};
use stasis_agent_proto::{Event, Reply, Request};
use stasis_core::{ExecRequest, FileKind, Stream};
use stasis_guest_agent::Agent;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tmpdir(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("stasis-agent-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d.to_string_lossy().into_owned()
}

#[test]
fn hello_and_exec() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    match c.reply(Request::Hello) {
        Reply::Hello {
            protocol, boot_id, ..
        } => {
            assert_eq!(protocol, stasis_agent_proto::PROTOCOL_VERSION);
            assert!(!boot_id.is_empty());
        }
        r => panic!("{r:?}"),
    }
    let r = c.exec(&["sh", "-c", "echo out; echo err >&2; exit 3"], 10_000);
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.stdout, b"out\n");
    assert_eq!(r.stderr, b"err\n");
    assert!(!r.timed_out);

    // env, cwd, stdin
    let mut env = std::collections::BTreeMap::new();
    env.insert("SECRET".to_string(), "s3cr3t".to_string());
    let r = match c.reply(Request::Exec {
        req: ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "echo $SECRET; pwd; cat".into()],
            env,
            cwd: Some("/tmp".into()),
            timeout_ms: 10_000,
            stdin: Some(b"from stdin".to_vec()),
            user: None,
        },
        stream: false,
    }) {
        Reply::Exec { result } => result,
        r => panic!("{r:?}"),
    };
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "s3cr3t\n/tmp\nfrom stdin"
    );

    // command not found -> 127 like a shell
    let r = c.exec(&["no-such-command-xyz"], 1000);
    assert_eq!(r.exit_code, Some(127));
    assert!(String::from_utf8_lossy(&r.stderr).contains("not found"));
}

#[test]
fn exec_timeout_kills_the_tree() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let dir = tmpdir("timeout");
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = format!("{dir}/bg.pid");
    let t = Instant::now();
    // A background grandchild in its own session would escape a group kill.
    let script = format!("setsid sleep 1000 & echo $! > {pidfile}; sleep 1000");
    let r = c.exec(&["sh", "-c", &script], 1500);
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.exit_code, None);
    assert!(t.elapsed() < Duration::from_secs(10));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z"))
        .unwrap_or(false);
    assert!(!alive, "background process {pid} survived the timeout");
}

#[test]
fn exec_streaming_and_truncation() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let (events, reply) = c.call(Request::Exec {
        req: ExecRequest {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo a; echo b >&2; echo c".into(),
            ],
            env: Default::default(),
            cwd: None,
            timeout_ms: 10_000,
            stdin: None,
            user: None,
        },
        stream: true,
    });
    let mut out = Vec::new();
    let mut err = Vec::new();
    for Event::Output { stream, data } in events {
        match stream {
            Stream::Stdout => out.extend(data),
            Stream::Stderr => err.extend(data),
        }
    }
    assert_eq!(out, b"a\nc\n");
    assert_eq!(err, b"b\n");
    match reply {
        Reply::Exec { result } => {
            assert_eq!(result.exit_code, Some(0));
            assert!(result.stdout.is_empty());
        }
        r => panic!("{r:?}"),
    }
    let r = c.exec(&["sh", "-c", "head -c 5000000 /dev/zero"], 30_000);
    assert!(r.truncated);
    assert_eq!(r.stdout.len(), stasis_guest_agent::exec::CAPTURE_LIMIT);
}

#[test]
fn files() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let dir = tmpdir("files");
    let path = format!("{dir}/a/b/c.txt");
    let ok = |r: Reply| assert_eq!(r, Reply::Ok);
    ok(c.reply(Request::WriteFile {
        path: path.clone(),
        data: b"hello ".to_vec(),
        append: false,
        mode: Some(0o600),
        offset: None,
    }));
    ok(c.reply(Request::WriteFile {
        path: path.clone(),
        data: b"world".to_vec(),
        append: true,
        mode: None,
        offset: None,
    }));
    match c.reply(Request::ReadFile {
        path: path.clone(),
        offset: 6,
        limit: 3,
    }) {
        Reply::File { data, size } => {
            assert_eq!(data, b"wor");
            assert_eq!(size, 11);
        }
        r => panic!("{r:?}"),
    }
    match c.reply(Request::ListDir {
        path: format!("{dir}/a/b"),
    }) {
        Reply::Dir { entries } => {
            assert_eq!(entries.len(), 1);
            assert_eq!(entries[0].name, "c.txt");
            assert_eq!(entries[0].kind, FileKind::File);
            assert_eq!(entries[0].mode, 0o600);
            assert_eq!(entries[0].size, 11);
        }
        r => panic!("{r:?}"),
    }
    match c.reply(Request::ReadFile {
        path: "/proc/self/status".into(),
        offset: 0,
        limit: 1 << 20,
    }) {
        Reply::File { data, .. } => assert!(String::from_utf8_lossy(&data).contains("Pid:")),
        r => panic!("{r:?}"),
    }
    match c.reply(Request::ReadFile {
        path: format!("{dir}/missing"),
        offset: 0,
        limit: 10,
    }) {
        Reply::Error { code, .. } => assert_eq!(code, "not_found"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn sessions_survive_reconnect() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let id = c.session_start(&["sh"]);
    c.session_write(&id, "x=41; echo ready\n");
    let (_, off) = c.session_read_until(&id, 0, "ready", Duration::from_secs(10));
    c.session_write(&id, "(sleep 0.5; echo late) &\n");
    // The host goes away (pause) and a new one connects (resume).
    drop(c);
    std::thread::sleep(Duration::from_millis(800));
    let mut c = connect(&agent).start_id(1000);
    match c.reply(Request::SessionList) {
        Reply::Sessions { sessions } => {
            let s = sessions
                .iter()
                .find(|s| s.id == id)
                .expect("session listed");
            assert!(s.running);
        }
        r => panic!("{r:?}"),
    }
    // Output produced while nobody was connected was buffered.
    let (_, off) = c.session_read_until(&id, off, "late", Duration::from_secs(10));
    c.session_write(&id, "echo $((x+1))\n");
    c.session_read_until(&id, off, "42", Duration::from_secs(10));
    match c.reply(Request::SessionKill {
        session: id.clone(),
        signal: None,
    }) {
        Reply::Session { info } => assert!(!info.running),
        r => panic!("{r:?}"),
    }
    // A killed session stays listed, ended, with its exit status.
    match c.reply(Request::SessionList) {
        Reply::Sessions { sessions } => {
            let s = sessions.iter().find(|s| s.id == id).expect("still listed");
            assert!(!s.running);
            assert_eq!(s.exit_code, Some(128 + 9));
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn concurrent_requests_and_bad_frames() {
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    // A slow request does not block a fast one: send both, fast reply first.
    use stasis_agent_proto::{read_frame, write_frame, Body, Frame};
    let slow = Frame {
        id: 7,
        body: Body::Request(Request::Exec {
            req: ExecRequest {
                argv: vec!["sleep".into(), "1".into()],
                env: Default::default(),
                cwd: None,
                timeout_ms: 10_000,
                stdin: None,
                user: None,
            },
            stream: false,
        }),
    };
    write_frame(&mut c.stream, &slow).unwrap();
    write_frame(
        &mut c.stream,
        &Frame {
            id: 8,
            body: Body::Request(Request::Hello),
        },
    )
    .unwrap();
    assert_eq!(read_frame(&mut c.stream).unwrap().id, 8);
    assert_eq!(read_frame(&mut c.stream).unwrap().id, 7);
    // An unknown op gets an error reply with its id.
    use std::io::Write;
    let body = br#"{"id":9,"body":{"request":{"op":"frobnicate"}}}"#;
    c.stream
        .write_all(&(body.len() as u32).to_be_bytes())
        .unwrap();
    c.stream.write_all(body).unwrap();
    let f = read_frame(&mut c.stream).unwrap();
    assert_eq!(f.id, 9);
    assert!(matches!(f.body, Body::Reply(Reply::Error { .. })));
}

/// The host's liveness probe (a `hello`) is answered while any number of
/// slow execs are in flight on the same channel: slowness never looks like
/// a dead guest.
#[test]
fn liveness_ping_is_answered_while_many_execs_run() {
    use stasis_agent_proto::{read_frame, write_frame, Body, Frame};
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let slow = 48u64;
    for id in 1..=slow {
        let f = Frame {
            id,
            body: Body::Request(Request::Exec {
                req: ExecRequest {
                    argv: vec!["sleep".into(), "2".into()],
                    env: Default::default(),
                    cwd: None,
                    timeout_ms: 60_000,
                    stdin: None,
                    user: None,
                },
                stream: false,
            }),
        };
        write_frame(&mut c.stream, &f).unwrap();
    }
    write_frame(
        &mut c.stream,
        &Frame {
            id: 1000,
            body: Body::Request(Request::Hello),
        },
    )
    .unwrap();
    // The ping's reply comes before any exec's, and every exec still ends well.
    let first = read_frame(&mut c.stream).unwrap();
    assert_eq!(first.id, 1000, "an exec answered before the ping");
    assert!(matches!(first.body, Body::Reply(Reply::Hello { .. })));
    let mut done = std::collections::BTreeSet::new();
    while done.len() < slow as usize {
        let f = read_frame(&mut c.stream).unwrap();
        match f.body {
            Body::Reply(Reply::Exec { result }) => {
                assert_eq!(result.exit_code, Some(0), "{result:?}");
                assert!(done.insert(f.id));
            }
            other => panic!("unexpected frame {}: {other:?}", f.id),
        }
    }
}

/// An exec or session naming a user runs as it (resolved in the guest's
/// own /etc/passwd, here the host's): its ids, HOME and USER; an unknown
/// user is the caller's error and nothing runs.
#[test]
fn exec_and_sessions_run_as_the_named_user() {
    use stasis_core::SessionSpec;
    let agent = Arc::new(Agent::new());
    let mut c = connect(&agent);
    let exec_as = |c: &mut Client<UnixStream>, user: &str, cmd: &str| {
        c.reply(Request::Exec {
            req: ExecRequest {
                argv: vec!["sh".into(), "-c".into(), cmd.into()],
                env: Default::default(),
                cwd: Some("/".into()),
                timeout_ms: 10_000,
                stdin: None,
                user: Some(user.into()),
            },
            stream: false,
        })
    };
    match exec_as(&mut c, "nobody", "id -u; id -g; echo $HOME $USER") {
        Reply::Exec { result } => {
            assert_eq!(result.exit_code, Some(0), "{result:?}");
            assert_eq!(
                String::from_utf8_lossy(&result.stdout),
                "65534\n65534\n/nonexistent nobody\n"
            );
        }
        r => panic!("{r:?}"),
    }
    match exec_as(&mut c, "4242:4243", "id -u; id -G") {
        Reply::Exec { result } => {
            assert_eq!(String::from_utf8_lossy(&result.stdout), "4242\n4243\n")
        }
        r => panic!("{r:?}"),
    }
    let marker = tmpdir("user-ran");
    match exec_as(&mut c, "nosuchuser", &format!("touch {marker}")) {
        Reply::Error { code, message } => {
            assert_eq!(code, "invalid_argument", "{message}");
            assert!(message.contains("unable to find user"), "{message}");
        }
        r => panic!("{r:?}"),
    }
    assert!(!std::path::Path::new(&marker).exists());
    let info = match c.reply(Request::SessionStart {
        spec: SessionSpec {
            argv: vec!["sh".into(), "-c".into(), "id -u".into()],
            env: Default::default(),
            cwd: Some("/".into()),
            pty: None,
            user: Some("nobody".into()),
        },
    }) {
        Reply::Session { info } => info,
        r => panic!("{r:?}"),
    };
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < Duration::from_secs(20));
        match c.reply(Request::SessionRead {
            session: info.id.clone(),
            offset: 0,
            wait_ms: 1000,
        }) {
            Reply::SessionOutput { output } if !output.running => {
                assert_eq!(String::from_utf8_lossy(&output.data), "65534\n");
                break;
            }
            Reply::SessionOutput { .. } => {}
            r => panic!("{r:?}"),
        }
    }
}
