//! The virtio-serial port and the frame loop.
//!
//! Semantics of a virtio-serial port in the guest (drivers/char/virtio_console.c):
//! while no host is connected to the chardev, `read` returns 0 (EOF) and
//! `write` blocks; when a host connects, reads deliver its bytes again. So a
//! single open descriptor serves every connection: on EOF the agent drops any
//! half-received frame, marks the connection generation as ended (replies to
//! requests of an ended connection are discarded, not sent to the next host),
//! and polls until bytes arrive again. A read *error* (port gone) closes the
//! descriptor and the caller re-opens the port.

use crate::reaper::lock;
use crate::Agent;
use stasis_agent_proto::{decode_body, encode, Body, Frame, Reply, MAX_FRAME};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// While the host is away, how often to look for it again.
const DISCONNECTED_POLL: Duration = Duration::from_millis(20);

/// Find the character device of the virtio-serial port called `name`
/// (`/sys/class/virtio-ports/vportNpM/name`), creating the /dev node from its
/// major:minor if devtmpfs has not (there is no udev in the guest).
pub fn find_port(name: &str) -> Option<PathBuf> {
    let rd = std::fs::read_dir("/sys/class/virtio-ports").ok()?;
    for e in rd.flatten() {
        let Ok(n) = std::fs::read_to_string(e.path().join("name")) else {
            continue;
        };
        if n.trim() != name {
            continue;
        }
        let dev = Path::new("/dev").join(e.file_name());
        if !dev.exists() {
            let mm = std::fs::read_to_string(e.path().join("dev")).ok()?;
            let (maj, min) = mm.trim().split_once(':')?;
            let (maj, min): (u32, u32) = (maj.parse().ok()?, min.parse().ok()?);
            let c = std::ffi::CString::new(dev.as_os_str().as_encoded_bytes()).ok()?;
            // SAFETY: valid C string; mknod of a char device.
            unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(maj, min)) };
        }
        return Some(dev);
    }
    None
}

/// The host side of one open port: the writer lock and the connection generation.
pub struct Conn {
    file: Mutex<File>,
    gen: AtomicU64,
}

impl Conn {
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::SeqCst)
    }

    /// Send a frame belonging to connection `gen`; dropped if that connection
    /// has ended (the host that asked is gone and the next one does not know the id).
    pub fn send(&self, gen: u64, frame: &Frame) {
        let bytes = match encode(frame) {
            Ok(b) => b,
            Err(e) => {
                // Typically a reply too large for one frame: say so instead.
                let err = Frame {
                    id: frame.id,
                    body: Body::Reply(Reply::Error {
                        code: "payload_too_large".into(),
                        message: e.to_string(),
                    }),
                };
                match encode(&err) {
                    Ok(b) => b,
                    Err(_) => return,
                }
            }
        };
        let mut f = lock(&self.file);
        if self.generation() != gen {
            return;
        }
        if let Err(e) = f.write_all(&bytes).and_then(|_| f.flush()) {
            eprintln!("stasis-agent: write to host failed: {e}");
        }
    }
}

/// What `serve` does when the other side goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnEof {
    /// virtio-serial: the host disconnected; wait for the next one.
    WaitForHost,
    /// A socket or pipe (tests): EOF is final, return.
    Return,
}

/// Serve frames from `file` until it fails (returns the error) or, with
/// `OnEof::Return`, until EOF.
pub fn serve(agent: Arc<Agent>, file: File, on_eof: OnEof) -> io::Result<()> {
    let mut reader = file.try_clone()?;
    let conn = Arc::new(Conn {
        file: Mutex::new(file),
        gen: AtomicU64::new(0),
    });
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut connected = false;
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                conn.gen.fetch_add(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        if n == 0 {
            if connected || !buf.is_empty() {
                if !buf.is_empty() {
                    eprintln!(
                        "stasis-agent: host disconnected mid-frame; dropped {} bytes",
                        buf.len()
                    );
                }
                buf.clear();
                connected = false;
                conn.gen.fetch_add(1, Ordering::SeqCst);
            }
            match on_eof {
                OnEof::Return => return Ok(()),
                OnEof::WaitForHost => {
                    std::thread::sleep(DISCONNECTED_POLL);
                    continue;
                }
            }
        }
        connected = true;
        buf.extend_from_slice(&chunk[..n]);
        // Take every complete frame out of the buffer.
        let mut start = 0;
        while buf.len() - start >= 4 {
            let len = u32::from_be_bytes(buf[start..start + 4].try_into().unwrap()) as usize;
            if len > MAX_FRAME {
                eprintln!(
                    "stasis-agent: frame of {len} bytes exceeds the limit; resetting the stream"
                );
                start = buf.len();
                break;
            }
            if buf.len() - start < 4 + len {
                break;
            }
            let body = &mut buf[start + 4..start + 4 + len];
            dispatch(&agent, &conn, body);
            // The body may hold secrets (exec env): do not leave it in memory.
            body.fill(0);
            start += 4 + len;
        }
        buf.drain(..start);
    }
}

fn dispatch(agent: &Arc<Agent>, conn: &Arc<Conn>, body: &[u8]) {
    let gen = conn.generation();
    let frame = match decode_body(body) {
        Ok(f) => f,
        Err(e) => {
            // Unknown op or bad field: answer with an error if we can find the id.
            if let Some(id) = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
            {
                let reply = Reply::Error {
                    code: "invalid_argument".into(),
                    message: format!("undecodable request: {e}"),
                };
                conn.send(
                    gen,
                    &Frame {
                        id,
                        body: Body::Reply(reply),
                    },
                );
            } else {
                eprintln!("stasis-agent: dropping undecodable frame: {e}");
            }
            return;
        }
    };
    let Body::Request(req) = frame.body else {
        return; // events/replies from the host mean nothing to the agent
    };
    let id = frame.id;
    let (a, c) = (agent.clone(), conn.clone());
    let spawned = std::thread::Builder::new()
        .name(format!("req-{id}"))
        .spawn(move || {
            let mut emit = |ev| {
                c.send(
                    gen,
                    &Frame {
                        id,
                        body: Body::Event(ev),
                    },
                )
            };
            let reply = a.handle(req, &mut emit);
            c.send(
                gen,
                &Frame {
                    id,
                    body: Body::Reply(reply),
                },
            );
        });
    if let Err(e) = spawned {
        conn.send(
            gen,
            &Frame {
                id,
                body: Body::Reply(Reply::Error {
                    code: "busy".into(),
                    message: format!("agent cannot start a thread: {e}"),
                }),
            },
        );
    }
}
