//! Host <-> guest agent protocol, carried over a virtio-serial port.
//!
//! Framing: a 4-byte big-endian length, then that many bytes of JSON (one
//! [`Frame`]). Frames larger than [`MAX_FRAME`] are a protocol error. JSON keeps
//! the channel debuggable; byte payloads travel as base64.
//!
//! Binary frames (feature [`FEATURE_BINARY`], advertised in the agent's
//! `Hello` reply): the length word has its top bit ([`BINARY_FLAG`]) set, and
//! the frame is a 4-byte big-endian length of a JSON [`Frame`] whose bulk
//! bytes field is empty, that JSON, then the bulk bytes raw (see
//! [`payload_mut`]: file data). No base64, no JSON scan of the data. The host
//! sends a binary frame only to an agent that advertised the feature (an
//! older agent skips one as garbage); the agent answers a binary request
//! with binary frames, a JSON request with JSON frames.
//!
//! Every request carries an `id` chosen by the host; every response and event
//! echoes it, so several requests can be in flight at once (the agent handles
//! each on its own thread). A request gets zero or more `Event`s and then
//! exactly one final `Reply`.
//!
//! Versions: [`PROTOCOL_VERSION`] changes only when an existing message
//! changes meaning. New requests and new optional fields are additive: an
//! older agent answers an unknown request with a decode error naming the
//! variant (the host reports it as unsupported), and ignores an unknown
//! field, so the host checks the answer for it (a session asked for with a
//! `pty` must come back with `pty` in its info).
//!
//! The host side reconnects after every resume; the agent must tolerate the
//! channel going away (read error / EOF / hangup) and reopen its port.

use serde::{Deserialize, Serialize};
use stasis_core::{
    ExecRequest, ExecResult, FileEntry, FileEvent, FileOp, FileStat, PtySize, SessionInfo,
    SessionOutput, SessionSpec, Stream,
};

pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame either side accepts (file transfers are chunked below this).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// Name of the virtio-serial port the agent listens on.
pub const PORT_NAME: &str = "org.stasis.agent.0";
/// Set in the length word of a binary frame.
pub const BINARY_FLAG: u32 = 0x8000_0000;
/// The agent reads binary frames, answers them with binary frames, and
/// writes at an offset (`WriteFile::offset`), so chunks can be in flight
/// together.
pub const FEATURE_BINARY: &str = "binary_frames";
/// The agent sends `SessionKill::signal` instead of always killing, keeps a
/// killed session readable, and reports stderr ranges in session output.
pub const FEATURE_SESSION_SIGNAL: &str = "session_signal";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Liveness and version check; the first request after every (re)connect.
    Hello,
    /// Set the guest wall clock (CLOCK_REALTIME) to the host's.
    SetTime {
        unix_nanos: u64,
    },
    /// Make a forked/restored guest unique: hostname, machine-id, fresh entropy.
    SetIdentity {
        hostname: String,
        machine_id: String,
        #[serde(with = "stasis_core::b64")]
        entropy: Vec<u8>,
    },
    /// Run a command to completion. With `stream`, output also arrives as
    /// `Event::Output` while it runs (and is then not repeated in the result).
    Exec {
        #[serde(flatten)]
        req: ExecRequest,
        #[serde(default)]
        stream: bool,
    },
    /// Write (create or truncate, or append) a file; parent directories are created.
    /// With `offset` (agents with [`FEATURE_BINARY`]; older ones ignore it):
    /// write there into the existing file, neither truncating nor appending.
    WriteFile {
        path: String,
        #[serde(with = "stasis_core::b64")]
        data: Vec<u8>,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        mode: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        offset: Option<u64>,
    },
    /// Read at most `limit` bytes from `offset`.
    ReadFile {
        path: String,
        offset: u64,
        limit: u64,
    },
    ListDir {
        path: String,
    },
    /// Create a file that must not exist yet (`already_exists` otherwise);
    /// parent directories are created. Later chunks go as appending
    /// `WriteFile`s.
    CreateFile {
        path: String,
        #[serde(with = "stasis_core::b64")]
        data: Vec<u8>,
        #[serde(default)]
        mode: Option<u32>,
    },
    /// Stat (answers `Reply::Stat`), remove, mkdir or rename.
    FileOp {
        file_op: FileOp,
    },
    /// Changes under the directory `path` since the last poll of `watch`,
    /// waiting up to `wait_ms` for some (answers `Reply::Watch`); without
    /// `watch`, starts one and answers its id with no events.
    WatchPoll {
        #[serde(default)]
        watch: Option<String>,
        path: String,
        #[serde(default)]
        wait_ms: u64,
    },
    WatchStop {
        watch: String,
    },
    SessionStart {
        spec: SessionSpec,
    },
    SessionWrite {
        session: String,
        #[serde(with = "stasis_core::b64")]
        data: Vec<u8>,
    },
    /// Output from `offset`; waits up to `wait_ms` for new output if none is there yet.
    SessionRead {
        session: String,
        offset: u64,
        wait_ms: u64,
    },
    SessionList,
    /// Close the session's standard input (its reader sees end of file).
    /// Not for a terminal session (its input is the terminal: send ^D).
    SessionCloseInput {
        session: String,
    },
    /// Change the terminal size of a session started with a PTY (the
    /// session's foreground process group gets SIGWINCH).
    SessionResize {
        session: String,
        size: PtySize,
    },
    /// Kill the session's process tree (no `signal`, or 9), or send
    /// `signal` to the session's process group (agents advertising
    /// [`FEATURE_SESSION_SIGNAL`]; older ones ignore it and kill). The
    /// session stays readable (output, exit status) after it ended.
    SessionKill {
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    /// Flush filesystem buffers (before a snapshot).
    Sync,
    /// Apply the sandbox's boundaries inside the guest (after a cold boot, and
    /// again after every resume/restore; idempotent): network interface and
    /// allowlist relays, read-only mounts, output directories, process cap,
    /// root filesystem grown to its disk.
    Configure {
        config: GuestConfig,
    },
}

/// What `Request::Configure` applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GuestConfig {
    /// None: the guest has no NIC.
    #[serde(default)]
    pub network: Option<GuestNetwork>,
    #[serde(default)]
    pub mounts: Vec<GuestMount>,
    /// Directories created (mode 0755) if missing.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// `pids.max` of the cgroup every exec and session runs in (0: no cap).
    #[serde(default)]
    pub pids: u64,
    /// Grow the root ext4 filesystem to the size of its block device.
    #[serde(default)]
    pub grow_root: bool,
}

/// The guest's network: its NIC on QEMU user networking (address, default
/// route) and the relays the guest needs. What leaves is decided outside
/// the guest (by the daemon's egress service in QEMU's network namespace);
/// only a destination that is a loopback address (the host's) cannot be
/// dialled as written from inside the guest, so the agent listens on it
/// and relays to `via` (slirp's host alias `10.0.2.2:<port>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestNetwork {
    /// Guest address with prefix, e.g. "10.0.2.15/24".
    pub address: String,
    /// Default gateway (QEMU's virtual host), e.g. "10.0.2.2".
    pub gateway: String,
    pub forwards: Vec<GuestForward>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GuestForward {
    /// Allowlisted destination as written in the manifest ("ip:port").
    pub destination: String,
    /// Where the relay connects ("10.0.2.2:<port>").
    pub via: String,
}

/// A read-only input disk: the virtio-blk device with serial `serial`,
/// mounted read-only at `target`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestMount {
    pub serial: String,
    pub target: String,
    /// The source is a single file (named `file` on the disk) rather than a directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The disk's content changed since the guest mounted it (a restore
    /// after the host source changed): remount it.
    #[serde(default)]
    pub refresh: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    Hello {
        protocol: u32,
        agent_version: String,
        /// Random per guest boot: unchanged across pause/resume, new after a cold boot.
        boot_id: String,
        /// What the agent can do beyond [`PROTOCOL_VERSION`] (e.g.
        /// [`FEATURE_BINARY`]); absent from older agents.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        features: Vec<String>,
    },
    Ok,
    Exec {
        result: ExecResult,
    },
    File {
        #[serde(with = "stasis_core::b64")]
        data: Vec<u8>,
        /// Total size of the file.
        size: u64,
    },
    Dir {
        entries: Vec<FileEntry>,
    },
    Stat {
        stat: FileStat,
    },
    Watch {
        watch: String,
        events: Vec<FileEvent>,
    },
    Session {
        info: SessionInfo,
    },
    SessionOutput {
        output: SessionOutput,
    },
    Sessions {
        sessions: Vec<SessionInfo>,
    },
    /// `code` is a stasis_core::ErrorCode name (e.g. "not_found").
    Error {
        code: String,
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    Output {
        stream: Stream,
        #[serde(with = "stasis_core::b64")]
        data: Vec<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Body {
    Request(Request),
    Event(Event),
    Reply(Reply),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub id: u64,
    pub body: Body,
}

#[derive(Debug)]
pub enum FrameError {
    Io(std::io::Error),
    TooLarge(usize),
    Decode(serde_json::Error),
    /// A binary frame whose parts do not add up.
    Malformed(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "agent channel: {e}"),
            FrameError::TooLarge(n) => write!(f, "agent frame of {n} bytes exceeds {MAX_FRAME}"),
            FrameError::Decode(e) => write!(f, "agent frame undecodable: {e}"),
            FrameError::Malformed(m) => write!(f, "agent frame malformed: {m}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// The bulk bytes a binary frame carries raw after its JSON: the data of a
/// file write or of a file read's answer. `None`: the frame has none.
pub fn payload_mut(body: &mut Body) -> Option<&mut Vec<u8>> {
    match body {
        Body::Request(Request::WriteFile { data, .. } | Request::CreateFile { data, .. }) => {
            Some(data)
        }
        Body::Reply(Reply::File { data, .. }) => Some(data),
        _ => None,
    }
}

/// Put the raw bytes of a binary frame back into the field they came from.
fn attach(frame: &mut Frame, payload: Vec<u8>) -> Result<(), FrameError> {
    match payload_mut(&mut frame.body) {
        Some(d) if d.is_empty() => *d = payload,
        Some(_) if payload.is_empty() => {}
        Some(_) => {
            return Err(FrameError::Malformed(
                "bulk bytes both in the JSON and raw".into(),
            ))
        }
        None if payload.is_empty() => {}
        None => {
            return Err(FrameError::Malformed(format!(
                "{} raw bytes on a frame that carries none",
                payload.len()
            )))
        }
    }
    Ok(())
}

/// A length word: the length of what follows, and whether it is a binary frame.
pub fn split_len_word(word: [u8; 4]) -> (usize, bool) {
    let w = u32::from_be_bytes(word);
    ((w & !BINARY_FLAG) as usize, w & BINARY_FLAG != 0)
}

/// Serialize a frame with its length prefix (JSON).
pub fn encode(frame: &Frame) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(frame).map_err(FrameError::Decode)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Serialize a frame as a binary frame: its bulk bytes go raw after the JSON.
pub fn encode_binary(mut frame: Frame) -> Result<Vec<u8>, FrameError> {
    let payload = payload_mut(&mut frame.body)
        .map(std::mem::take)
        .unwrap_or_default();
    let json = serde_json::to_vec(&frame).map_err(FrameError::Decode)?;
    let n = 4 + json.len() + payload.len();
    if n > MAX_FRAME {
        return Err(FrameError::TooLarge(n));
    }
    let mut out = Vec::with_capacity(4 + n);
    out.extend_from_slice(&(n as u32 | BINARY_FLAG).to_be_bytes());
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Either encoding.
pub fn encode_as(frame: Frame, binary: bool) -> Result<Vec<u8>, FrameError> {
    if binary {
        encode_binary(frame)
    } else {
        encode(&frame)
    }
}

pub fn decode_body(body: &[u8]) -> Result<Frame, FrameError> {
    serde_json::from_slice(body).map_err(FrameError::Decode)
}

/// The JSON length of a binary frame's body (what follows the length word),
/// checked against the body's length `n`.
fn json_len(head: [u8; 4], n: usize) -> Result<usize, FrameError> {
    let jl = u32::from_be_bytes(head) as usize;
    if n < 4 || jl > n - 4 {
        return Err(FrameError::Malformed(format!(
            "JSON part of {jl} bytes in a binary frame of {n}"
        )));
    }
    Ok(jl)
}

/// Decode the body of a binary frame (all that follows its length word).
pub fn decode_binary(body: &[u8]) -> Result<Frame, FrameError> {
    let head: [u8; 4] = body
        .get(..4)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| FrameError::Malformed("binary frame shorter than its header".into()))?;
    let jl = json_len(head, body.len())?;
    let mut frame = decode_body(&body[4..4 + jl])?;
    attach(&mut frame, body[4 + jl..].to_vec())?;
    Ok(frame)
}

/// Blocking read of one frame, JSON or binary (guest side).
pub fn read_frame<R: std::io::Read>(r: &mut R) -> Result<Frame, FrameError> {
    let mut word = [0u8; 4];
    r.read_exact(&mut word)?;
    let (len, binary) = split_len_word(word);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    if binary {
        decode_binary(&body)
    } else {
        decode_body(&body)
    }
}

/// Blocking write of one frame (guest side).
pub fn write_frame<W: std::io::Write>(w: &mut W, frame: &Frame) -> Result<(), FrameError> {
    w.write_all(&encode(frame)?)?;
    w.flush()?;
    Ok(())
}

#[cfg(feature = "tokio")]
pub mod asynch {
    //! Async framing for the host side.
    use super::*;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    /// One frame, JSON or binary; a binary frame's raw bytes are read
    /// straight into their own buffer.
    pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Frame, FrameError> {
        let mut word = [0u8; 4];
        r.read_exact(&mut word).await?;
        let (len, binary) = split_len_word(word);
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        if !binary {
            let mut body = vec![0u8; len];
            r.read_exact(&mut body).await?;
            return decode_body(&body);
        }
        let mut head = [0u8; 4];
        if len < 4 {
            return Err(FrameError::Malformed(format!(
                "binary frame of {len} bytes"
            )));
        }
        r.read_exact(&mut head).await?;
        let jl = json_len(head, len)?;
        let mut json = vec![0u8; jl];
        r.read_exact(&mut json).await?;
        let mut payload = vec![0u8; len - 4 - jl];
        r.read_exact(&mut payload).await?;
        let mut frame = decode_body(&json)?;
        attach(&mut frame, payload)?;
        Ok(frame)
    }

    pub async fn write_frame<W: AsyncWrite + Unpin>(
        w: &mut W,
        frame: &Frame,
    ) -> Result<(), FrameError> {
        write_bytes(w, &encode(frame)?).await
    }

    /// Write an encoded frame.
    pub async fn write_bytes<W: AsyncWrite + Unpin>(
        w: &mut W,
        bytes: &[u8],
    ) -> Result<(), FrameError> {
        w.write_all(bytes).await?;
        w.flush().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = vec![
            Frame {
                id: 1,
                body: Body::Request(Request::Hello),
            },
            Frame {
                id: 2,
                body: Body::Request(Request::Exec {
                    req: ExecRequest {
                        argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
                        env: Default::default(),
                        cwd: None,
                        timeout_ms: 1000,
                        stdin: Some(vec![0, 255, 1]),
                        user: None,
                    },
                    stream: true,
                }),
            },
            Frame {
                id: 2,
                body: Body::Event(Event::Output {
                    stream: Stream::Stdout,
                    data: b"hi\n".to_vec(),
                }),
            },
            Frame {
                id: 4,
                body: Body::Request(Request::SessionResize {
                    session: "s1".into(),
                    size: PtySize {
                        cols: 120,
                        rows: 40,
                    },
                }),
            },
            Frame {
                id: 3,
                body: Body::Reply(Reply::Error {
                    code: "not_found".into(),
                    message: "x".into(),
                }),
            },
        ];
        let mut buf = Vec::new();
        for f in &frames {
            write_frame(&mut buf, f).unwrap();
        }
        let mut cur = std::io::Cursor::new(buf);
        for f in &frames {
            assert_eq!(&read_frame(&mut cur).unwrap(), f);
        }
    }

    #[test]
    fn oversized_length_refused() {
        let mut buf = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(b"{}");
        assert!(matches!(
            read_frame(&mut std::io::Cursor::new(buf)),
            Err(FrameError::TooLarge(_))
        ));
    }
    fn write_req(data: Vec<u8>) -> Frame {
        Frame {
            id: 9,
            body: Body::Request(Request::WriteFile {
                path: "/w/f".into(),
                data,
                append: false,
                mode: Some(0o600),
                offset: Some(1 << 20),
            }),
        }
    }

    #[test]
    fn binary_frames_round_trip_raw_bytes() {
        let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        let frames = [
            write_req(data.clone()),
            Frame {
                id: 10,
                body: Body::Reply(Reply::File {
                    data: data.clone(),
                    size: 7,
                }),
            },
            // No bulk field: a binary frame with nothing raw.
            Frame {
                id: 11,
                body: Body::Reply(Reply::Ok),
            },
            write_req(Vec::new()),
        ];
        let mut buf = Vec::new();
        for f in &frames {
            let b = encode_binary(f.clone()).unwrap();
            assert_ne!(b[0] & 0x80, 0);
            buf.extend_from_slice(&b);
        }
        // Raw, not base64: the frame is barely larger than its data.
        assert!(encode_binary(frames[0].clone()).unwrap().len() < data.len() + 200);
        let mut cur = std::io::Cursor::new(buf.clone());
        for f in &frames {
            assert_eq!(&read_frame(&mut cur).unwrap(), f);
        }
        // The async reader agrees.
        #[cfg(feature = "tokio")]
        block_on(async {
            let mut r = &buf[..];
            for f in &frames {
                assert_eq!(&asynch::read_frame(&mut r).await.unwrap(), f);
            }
        });
    }

    #[cfg(feature = "tokio")]
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// The error of reading `bytes` as a frame, sync and (with the feature) async.
    fn both(bytes: Vec<u8>) -> (FrameError, FrameError) {
        let s = read_frame(&mut std::io::Cursor::new(bytes.clone())).unwrap_err();
        #[cfg(feature = "tokio")]
        let a = block_on(async { asynch::read_frame(&mut &bytes[..]).await }).unwrap_err();
        #[cfg(not(feature = "tokio"))]
        let a = read_frame(&mut std::io::Cursor::new(bytes)).unwrap_err();
        (s, a)
    }

    /// Every way a binary frame can be wrong is a clean error, sync and async.
    #[test]
    fn bad_binary_frames_are_clean_errors() {
        let good = encode_binary(write_req(vec![1; 1000])).unwrap();
        // Truncated anywhere: in the header, the JSON, the raw bytes.
        for cut in [2, 6, 20, good.len() - 1] {
            let (s, a) = both(good[..cut].to_vec());
            assert!(matches!(s, FrameError::Io(_)), "{cut}: {s}");
            assert!(matches!(a, FrameError::Io(_)), "{cut}: {a}");
        }
        // Oversized.
        let mut big = ((MAX_FRAME as u32 + 1) | BINARY_FLAG)
            .to_be_bytes()
            .to_vec();
        big.extend_from_slice(&[0; 64]);
        let (s, a) = both(big);
        assert!(matches!(s, FrameError::TooLarge(_)), "{s}");
        assert!(matches!(a, FrameError::TooLarge(_)), "{a}");
        assert!(matches!(
            encode_binary(write_req(vec![0; MAX_FRAME])),
            Err(FrameError::TooLarge(_))
        ));
        // A JSON part longer than the frame.
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&(good.len() as u32).to_be_bytes());
        let (s, a) = both(bad);
        assert!(matches!(s, FrameError::Malformed(_)), "{s}");
        assert!(matches!(a, FrameError::Malformed(_)), "{a}");
        // A frame too short for its header.
        let (s, a) = both(
            (2 | BINARY_FLAG)
                .to_be_bytes()
                .into_iter()
                .chain([0, 0])
                .collect(),
        );
        assert!(matches!(s, FrameError::Malformed(_)), "{s}");
        assert!(matches!(a, FrameError::Malformed(_)), "{a}");
        // Raw bytes on a frame that has no bulk field.
        let json = serde_json::to_vec(&Frame {
            id: 1,
            body: Body::Reply(Reply::Ok),
        })
        .unwrap();
        let n = 4 + json.len() + 3;
        let mut stray = (n as u32 | BINARY_FLAG).to_be_bytes().to_vec();
        stray.extend_from_slice(&(json.len() as u32).to_be_bytes());
        stray.extend_from_slice(&json);
        stray.extend_from_slice(b"xyz");
        let (s, a) = both(stray);
        assert!(s.to_string().contains("carries none"), "{s}");
        assert!(a.to_string().contains("carries none"), "{a}");
    }

    /// An older peer's JSON frames still decode, and an older agent's hello
    /// (no features) reads as having none.
    #[test]
    fn older_frames_still_decode() {
        let old = br#"{"id":3,"body":{"reply":{"kind":"hello","protocol":1,"agent_version":"0.1.0","boot_id":"b"}}}"#;
        let mut buf = (old.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(old);
        let f = read_frame(&mut std::io::Cursor::new(buf)).unwrap();
        assert!(
            matches!(f.body, Body::Reply(Reply::Hello { ref features, .. }) if features.is_empty())
        );
        let old = br#"{"id":4,"body":{"request":{"op":"write_file","path":"/x","data":"aGk=","append":true}}}"#;
        let f = decode_body(old).unwrap();
        assert!(
            matches!(f.body, Body::Request(Request::WriteFile { offset: None, append: true, ref data, .. }) if data == b"hi")
        );
    }
}
