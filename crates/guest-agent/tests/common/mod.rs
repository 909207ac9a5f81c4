//! A minimal blocking client of the agent protocol, for tests.
#![allow(dead_code)]

use stasis_agent_proto::{read_frame, write_frame, Body, Event, Frame, Reply, Request};
use stasis_core::{ExecRequest, ExecResult, SessionSpec};
use std::io::{Read, Write};
use std::time::Duration;

pub struct Client<S: Read + Write> {
    pub stream: S,
    next_id: u64,
}

impl<S: Read + Write> Client<S> {
    pub fn new(stream: S) -> Self {
        Client { stream, next_id: 1 }
    }

    pub fn start_id(mut self, id: u64) -> Self {
        self.next_id = id;
        self
    }

    /// Send a request and collect its events and final reply. Frames with
    /// other ids (stale replies of an earlier connection) are skipped.
    pub fn call(&mut self, req: Request) -> (Vec<Event>, Reply) {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(
            &mut self.stream,
            &Frame {
                id,
                body: Body::Request(req),
            },
        )
        .expect("write frame");
        let mut events = Vec::new();
        loop {
            let f = read_frame(&mut self.stream).expect("read frame");
            if f.id != id {
                continue;
            }
            match f.body {
                Body::Event(e) => events.push(e),
                Body::Reply(r) => return (events, r),
                Body::Request(_) => panic!("agent sent a request"),
            }
        }
    }

    pub fn reply(&mut self, req: Request) -> Reply {
        self.call(req).1
    }

    pub fn exec(&mut self, argv: &[&str], timeout_ms: u64) -> ExecResult {
        match self.reply(Request::Exec {
            req: ExecRequest {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                env: Default::default(),
                cwd: None,
                timeout_ms,
                stdin: None,
                user: None,
            },
            stream: false,
        }) {
            Reply::Exec { result } => result,
            r => panic!("exec {argv:?}: {r:?}"),
        }
    }

    pub fn session_start(&mut self, argv: &[&str]) -> String {
        match self.reply(Request::SessionStart {
            spec: SessionSpec {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                env: Default::default(),
                cwd: None,
                pty: None,
                user: None,
            },
        }) {
            Reply::Session { info } => info.id,
            r => panic!("session start: {r:?}"),
        }
    }

    pub fn session_write(&mut self, id: &str, data: &str) {
        match self.reply(Request::SessionWrite {
            session: id.into(),
            data: data.as_bytes().to_vec(),
        }) {
            Reply::Ok => {}
            r => panic!("session write: {r:?}"),
        }
    }

    /// Read session output from `offset` until `needle` shows up (or timeout).
    /// Returns (all text read, next offset).
    pub fn session_read_until(
        &mut self,
        id: &str,
        mut offset: u64,
        needle: &str,
        timeout: Duration,
    ) -> (String, u64) {
        let deadline = std::time::Instant::now() + timeout;
        let mut text = String::new();
        while std::time::Instant::now() < deadline {
            match self.reply(Request::SessionRead {
                session: id.into(),
                offset,
                wait_ms: 2000,
            }) {
                Reply::SessionOutput { output } => {
                    text.push_str(&String::from_utf8_lossy(&output.data));
                    offset = output.next_offset;
                    if text.contains(needle) {
                        return (text, offset);
                    }
                    if !output.running && output.data.is_empty() {
                        break;
                    }
                }
                r => panic!("session read: {r:?}"),
            }
        }
        panic!("{needle:?} not seen in session {id} output: {text:?}");
    }
}

/// A client of an agent served on one end of a socket pair (no VM).
pub fn connect(
    agent: &std::sync::Arc<stasis_guest_agent::Agent>,
) -> Client<std::os::unix::net::UnixStream> {
    use stasis_guest_agent::port;
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let agent = agent.clone();
    std::thread::spawn(move || {
        let f = std::fs::File::from(std::os::fd::OwnedFd::from(b));
        port::serve(agent, f, port::OnEof::Return).unwrap();
    });
    a.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    Client::new(a)
}
