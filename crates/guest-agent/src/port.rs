//! The virtio-serial port and the frame loop.
//!
//! Semantics of a virtio-serial port in the guest (drivers/char/virtio_console.c):
//! while no host is connected to the chardev, `read` returns 0 (EOF) and
//! `write` blocks; when a host connects, reads deliver its bytes again. So a
//! single open descriptor serves every connection; a read *error* (port gone)
//! closes it and the caller re-opens the port.
//!
//! What an EOF means is ambiguous: the driver handles "host connected" control
//! messages on a workqueue, separately from data, so the first bytes of a new
//! connection can be read *before* the guest learns that the host is back, and
//! the next read then returns 0 although the host is connected. Hence:
//! - nothing is dropped on EOF. Replies are always written (a reply to a request
//!   of an earlier connection reaches the next host, which skips ids it does not
//!   know — hosts must never reuse request ids across connections);
//! - a half-received frame is kept across EOF but marked suspect; if the bytes
//!   that follow show a complete, well-formed frame further on, the stale prefix
//!   is skipped (resynchronisation on the `{"id":` that starts every frame).
//!   Garbage (bad length, not JSON) is skipped the same way at any time.
//!
//! Binary frames (a length word with `BINARY_FLAG`, then the JSON's length,
//! the JSON, raw bytes) are parsed and resynchronised on the same `{"id":`,
//! which stands 8 bytes after their start instead of 4. A request that came
//! as a binary frame is answered with binary frames.

use crate::reaper::lock;
use crate::Agent;
use stasis_agent_proto::{
    decode_binary, decode_body, encode_as, split_len_word, Body, Frame, Reply, MAX_FRAME,
};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// While the host is away the agent sleeps until the port signals SIGIO (the
/// driver sends it when the host side opens, and when data arrives); this is
/// only the longest it sleeps without one.
const DISCONNECTED_WAIT: Duration = Duration::from_millis(250);

/// Block SIGIO in the calling thread and every thread it starts afterwards,
/// so the port's SIGIO stays pending for `sigtimedwait`. Call first thing in
/// main. (Spawned commands get an empty signal mask from std.)
pub fn block_sigio() {
    // SAFETY: plain signal-mask manipulation on a local sigset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGIO);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Ask for SIGIO on `fd` (O_ASYNC, owner = this process).
fn enable_sigio(fd: i32) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        libc::fcntl(fd, libc::F_SETOWN, libc::getpid());
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_ASYNC);
        }
    }
}

/// Sleep until SIGIO is pending (consumed) or `timeout` passes.
fn wait_sigio(timeout: Duration) {
    // SAFETY: local sigset and timespec; sigtimedwait only reads them.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGIO);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
    }
}

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

/// The host side of one open port: the writer lock.
pub struct Conn {
    file: Mutex<File>,
}

impl Conn {
    /// Write one frame (whole, under the writer lock), binary or JSON.
    pub fn send(&self, frame: Frame, binary: bool) {
        let id = frame.id;
        let bytes = match encode_as(frame, binary) {
            Ok(b) => b,
            Err(e) => {
                // Typically a reply too large for one frame: say so instead.
                let err = Frame {
                    id,
                    body: Body::Reply(Reply::Error {
                        code: "payload_too_large".into(),
                        message: e.to_string(),
                    }),
                };
                match encode_as(err, binary) {
                    Ok(b) => b,
                    Err(_) => return,
                }
            }
        };
        let mut f = lock(&self.file);
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

/// Every frame the host sends starts with this (serde writes `id` first).
const FRAME_START: &[u8] = b"{\"id\":";

#[derive(Debug, PartialEq, Eq)]
pub enum Parse {
    /// A frame whose body is `buf[4..4 + len]`.
    Frame(usize),
    /// A binary frame whose body is `buf[4..4 + len]`.
    Binary(usize),
    /// Garbage or a stale prefix: drop this many bytes.
    Skip(usize),
    /// Wait for more bytes.
    NeedMore,
}

/// The length word at `at`: (length, binary).
fn header_len(buf: &[u8], at: usize) -> Option<(usize, bool)> {
    let b = buf.get(at..at + 4)?;
    Some(split_len_word(b.try_into().ok()?))
}

/// A binary frame's header at `at` is plausible as far as it is there: the
/// flag, a length in range, its JSON part's length inside it, a `{` after.
fn binary_plausible(buf: &[u8], at: usize) -> bool {
    let Some((len, true)) = header_len(buf, at) else {
        return false;
    };
    if !(4 + FRAME_START.len()..=MAX_FRAME).contains(&len) {
        return false;
    }
    let json_ok = match header_len(buf, at + 4) {
        Some((jl, false)) => (FRAME_START.len()..=len - 4).contains(&jl),
        Some((_, true)) => false,
        None => true,
    };
    json_ok && buf.get(at + 8).is_none_or(|&b| b == b'{')
}

/// The body of a complete frame is well formed: JSON with an `id` (a binary
/// frame's JSON part).
fn well_formed(body: &[u8], binary: bool) -> bool {
    let json = if binary {
        match header_len(body, 0) {
            Some((jl, false)) if jl <= body.len() - 4 => &body[4..4 + jl],
            _ => return false,
        }
    } else {
        body
    };
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()
        .is_some_and(|v| v.get("id").is_some())
}

/// A complete, well-formed frame at `at` (length prefix + JSON object, or
/// a binary frame)?
fn complete_frame_at(buf: &[u8], at: usize) -> Option<usize> {
    let (len, binary) = header_len(buf, at)?;
    if len > MAX_FRAME || buf.len() < at + 4 + len || (binary && len < 4) {
        return None;
    }
    well_formed(&buf[at + 4..at + 4 + len], binary).then_some(len)
}

/// Start of the next plausible frame after `from` (a `{"id":` with room for a
/// length prefix before it, or a binary frame's header), else how much can be
/// dropped safely. The JSON inside a binary frame that starts before `from`
/// is no frame of its own.
fn next_candidate(buf: &[u8], from: usize) -> usize {
    let mut search = from + 4;
    loop {
        let Some(i) = buf.get(search..).and_then(|rest| {
            rest.windows(FRAME_START.len())
                .position(|w| w == FRAME_START)
        }) else {
            return buf.len().saturating_sub(FRAME_START.len() + 7).max(from);
        };
        let p = search + i;
        if p >= 8 && binary_plausible(buf, p - 8) {
            if p - 8 >= from {
                return p - 8;
            }
            search = p + 1;
            continue;
        }
        return p - 4;
    }
}

/// Decide what the front of `buf` is. `suspect`: an EOF came while a frame was
/// incomplete, so its prefix may be stale.
pub fn parse(buf: &[u8], suspect: bool) -> Parse {
    let Some((len, binary)) = header_len(buf, 0) else {
        return Parse::NeedMore;
    };
    let body = &buf[4..];
    let plausible = if binary {
        binary_plausible(buf, 0)
    } else {
        (2..=MAX_FRAME).contains(&len)
            && body
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                .is_none_or(|&b| b == b'{')
    };
    if !plausible {
        return Parse::Skip(next_candidate(buf, 1).max(1));
    }
    if body.len() >= len {
        // Complete: well-formed JSON is a frame (unknown ops get an error
        // reply); anything else is garbage.
        return match (well_formed(&body[..len], binary), binary) {
            (true, true) => Parse::Binary(len),
            (true, false) => Parse::Frame(len),
            (false, _) => Parse::Skip(next_candidate(buf, 1).max(1)),
        };
    }
    if suspect {
        // Incomplete, after an EOF: if a complete frame follows, this prefix
        // belongs to a connection that is gone.
        let mut at = next_candidate(buf, 1);
        while at + 4 + FRAME_START.len() <= buf.len() {
            if complete_frame_at(buf, at).is_some() {
                return Parse::Skip(at);
            }
            at = next_candidate(buf, at + 1);
        }
    }
    Parse::NeedMore
}

/// Serve frames from `file` until it fails (returns the error) or, with
/// `OnEof::Return`, until EOF.
pub fn serve(agent: Arc<Agent>, file: File, on_eof: OnEof) -> io::Result<()> {
    let mut reader = file.try_clone()?;
    if on_eof == OnEof::WaitForHost {
        enable_sigio(std::os::fd::AsRawFd::as_raw_fd(&reader));
    }
    let conn = Arc::new(Conn {
        file: Mutex::new(file),
    });
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut connected = false;
    let mut suspect = false;
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            if connected {
                connected = false;
                eprintln!("stasis-agent: host disconnected");
            }
            suspect |= !buf.is_empty();
            match on_eof {
                OnEof::Return => return Ok(()),
                OnEof::WaitForHost => {
                    wait_sigio(DISCONNECTED_WAIT);
                    continue;
                }
            }
        }
        if !connected {
            connected = true;
            eprintln!("stasis-agent: host connected");
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        loop {
            match parse(&buf[start..], suspect) {
                Parse::Binary(len) if agent.legacy => {
                    eprintln!("stasis-agent: skipped {len} bytes of stale or malformed input");
                    start += 4 + len;
                }
                p @ (Parse::Frame(len) | Parse::Binary(len)) => {
                    let binary = p == Parse::Binary(len);
                    let body = &mut buf[start + 4..start + 4 + len];
                    dispatch(&agent, &conn, body, binary);
                    // The JSON may hold secrets (exec env): do not leave it in
                    // memory (a binary frame's raw part is file data).
                    let json = match binary {
                        true => 4 + header_len(body, 0).map_or(0, |(jl, _)| jl),
                        false => len,
                    };
                    body[..json.min(len)].fill(0);
                    start += 4 + len;
                    suspect = false;
                }
                Parse::Skip(k) => {
                    eprintln!("stasis-agent: skipped {k} bytes of stale or malformed input");
                    start += k;
                }
                Parse::NeedMore => break,
            }
        }
        buf.drain(..start);
    }
}

/// The `id` of an undecodable frame, if its JSON has one.
fn frame_id(body: &[u8], binary: bool) -> Option<u64> {
    let json = match (binary, header_len(body, 0)) {
        (false, _) => body,
        (true, Some((jl, false))) => body.get(4..4 + jl)?,
        (true, _) => return None,
    };
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("id").and_then(|i| i.as_u64()))
}

fn dispatch(agent: &Arc<Agent>, conn: &Arc<Conn>, body: &[u8], binary: bool) {
    let decoded = match binary {
        true => decode_binary(body),
        false => decode_body(body),
    };
    let frame = match decoded {
        Ok(f) => f,
        Err(e) => {
            // Unknown op or bad field: answer with an error if we can find the id.
            if let Some(id) = frame_id(body, binary) {
                let reply = Reply::Error {
                    code: "invalid_argument".into(),
                    message: format!("undecodable request: {e}"),
                };
                // Not on the reader thread: a write may block until the host reads.
                let c = conn.clone();
                let frame = Frame {
                    id,
                    body: Body::Reply(reply),
                };
                if std::thread::Builder::new()
                    .spawn(move || c.send(frame, binary))
                    .is_err()
                {
                    eprintln!("stasis-agent: cannot answer undecodable request {id}");
                }
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
                    Frame {
                        id,
                        body: Body::Event(ev),
                    },
                    binary,
                )
            };
            let reply = a.handle(req, &mut emit);
            c.send(
                Frame {
                    id,
                    body: Body::Reply(reply),
                },
                binary,
            );
        });
    if let Err(e) = spawned {
        // No thread to spare: the reader answers itself (may block on the host).
        conn.send(
            Frame {
                id,
                body: Body::Reply(Reply::Error {
                    code: "busy".into(),
                    message: format!("agent cannot start a thread: {e}"),
                }),
            },
            binary,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_agent_proto::{encode, encode_binary, Request};

    fn frame(id: u64) -> Vec<u8> {
        encode(&Frame {
            id,
            body: Body::Request(Request::Hello),
        })
        .unwrap()
    }

    #[test]
    fn whole_and_partial_frames() {
        let f = frame(1);
        assert_eq!(parse(&f, false), Parse::Frame(f.len() - 4));
        assert_eq!(parse(&f[..3], false), Parse::NeedMore);
        assert_eq!(parse(&f[..f.len() - 1], false), Parse::NeedMore);
        assert_eq!(parse(&f[..f.len() - 1], true), Parse::NeedMore);
    }

    #[test]
    fn stale_prefix_skipped_after_eof() {
        // A frame cut by a disconnect, then a whole frame of the next host.
        let old = encode(&Frame {
            id: 7,
            body: Body::Request(Request::WriteFile {
                path: "/x".into(),
                data: vec![7; 1000],
                append: false,
                mode: None,
                offset: None,
            }),
        })
        .unwrap();
        let new = frame(8);
        let mut buf = old[..old.len() / 2].to_vec();
        buf.extend_from_slice(&new);
        // Without an EOF in between the prefix is trusted (more may come)...
        assert_eq!(parse(&buf, false), Parse::NeedMore);
        // ...after one, the complete frame further on wins.
        assert_eq!(parse(&buf, true), Parse::Skip(old.len() / 2));
        assert_eq!(
            parse(&buf[old.len() / 2..], false),
            Parse::Frame(new.len() - 4)
        );
    }

    #[test]
    fn garbage_skipped() {
        let new = frame(9);
        let mut buf = b"\xff\xff\xff\xffjunk".to_vec();
        buf.extend_from_slice(&new);
        let Parse::Skip(k) = parse(&buf, false) else {
            panic!()
        };
        assert_eq!(parse(&buf[k..], false), Parse::Frame(new.len() - 4));
        // A plausible length whose bytes are not JSON.
        let mut buf = 10u32.to_be_bytes().to_vec();
        buf.extend_from_slice(b"{notjson!!");
        buf.extend_from_slice(&new);
        let Parse::Skip(k) = parse(&buf, false) else {
            panic!()
        };
        assert_eq!(parse(&buf[k..], false), Parse::Frame(new.len() - 4));
    }

    fn binary(id: u64, n: usize) -> Vec<u8> {
        encode_binary(Frame {
            id,
            body: Body::Request(Request::WriteFile {
                path: "/x".into(),
                // Raw bytes that look like the start of a frame.
                data: b"\x80\0\0\x10{\"id\":".repeat(n),
                append: false,
                mode: None,
                offset: Some(0),
            }),
        })
        .unwrap()
    }

    #[test]
    fn binary_frames_parse_whole_and_partial() {
        let f = binary(1, 100);
        assert_eq!(parse(&f, false), Parse::Binary(f.len() - 4));
        for cut in [3, 4, 7, 9, f.len() - 1] {
            assert_eq!(parse(&f[..cut], false), Parse::NeedMore, "{cut}");
        }
        // After it, a JSON frame.
        let mut buf = f.clone();
        buf.extend_from_slice(&frame(2));
        assert_eq!(parse(&buf, false), Parse::Binary(f.len() - 4));
        assert_eq!(
            parse(&buf[f.len()..], false),
            Parse::Frame(buf.len() - f.len() - 4)
        );
    }

    #[test]
    fn stale_binary_prefix_skipped_and_binary_found_after_garbage() {
        let old = binary(7, 200);
        let new = binary(8, 3);
        let mut buf = old[..old.len() / 2].to_vec();
        buf.extend_from_slice(&new);
        assert_eq!(parse(&buf, false), Parse::NeedMore);
        assert_eq!(parse(&buf, true), Parse::Skip(old.len() / 2));
        // Garbage, then a binary frame: skipped up to its very start.
        let mut buf = b"\xff\xff\xff\xffjunk and more junk".to_vec();
        let at = buf.len();
        buf.extend_from_slice(&new);
        let mut start = 0;
        loop {
            match parse(&buf[start..], false) {
                Parse::Skip(k) => start += k,
                Parse::Binary(len) => {
                    assert_eq!((start, len), (at, new.len() - 4));
                    break;
                }
                p => panic!("{p:?} at {start}"),
            }
        }
        // A binary header whose JSON is not JSON is garbage.
        let mut bad = new.clone();
        bad[8] = b'{';
        bad[9] = b'!';
        assert!(matches!(parse(&bad, false), Parse::Skip(_)));
    }
}
