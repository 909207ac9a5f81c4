//! Host <-> guest agent protocol, carried over a virtio-serial port.
//!
//! Framing: a 4-byte big-endian length, then that many bytes of JSON (one
//! [`Frame`]). Frames larger than [`MAX_FRAME`] are a protocol error. JSON keeps
//! the channel debuggable; byte payloads travel as base64.
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
    ExecRequest, ExecResult, FileEntry, FileOp, FileStat, PtySize, SessionInfo, SessionOutput,
    SessionSpec, Stream,
};

pub const PROTOCOL_VERSION: u32 = 1;
/// Largest frame either side accepts (file transfers are chunked below this).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// Name of the virtio-serial port the agent listens on.
pub const PORT_NAME: &str = "org.stasis.agent.0";

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
    WriteFile {
        path: String,
        #[serde(with = "stasis_core::b64")]
        data: Vec<u8>,
        #[serde(default)]
        append: bool,
        #[serde(default)]
        mode: Option<u32>,
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
    /// Change the terminal size of a session started with a PTY (the
    /// session's foreground process group gets SIGWINCH).
    SessionResize {
        session: String,
        size: PtySize,
    },
    SessionKill {
        session: String,
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
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "agent channel: {e}"),
            FrameError::TooLarge(n) => write!(f, "agent frame of {n} bytes exceeds {MAX_FRAME}"),
            FrameError::Decode(e) => write!(f, "agent frame undecodable: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Serialize a frame with its length prefix.
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

pub fn decode_body(body: &[u8]) -> Result<Frame, FrameError> {
    serde_json::from_slice(body).map_err(FrameError::Decode)
}

/// Blocking read of one frame (guest side).
pub fn read_frame<R: std::io::Read>(r: &mut R) -> Result<Frame, FrameError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    decode_body(&body)
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

    pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Frame, FrameError> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).await?;
        let len = u32::from_be_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await?;
        decode_body(&body)
    }

    pub async fn write_frame<W: AsyncWrite + Unpin>(
        w: &mut W,
        frame: &Frame,
    ) -> Result<(), FrameError> {
        w.write_all(&encode(frame)?).await?;
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
}
