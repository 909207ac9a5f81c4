//! Request/result types for exec, files and persistent sessions, shared by the
//! HTTP API, the backends and the guest agent protocol.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// argv[0] is looked up in PATH.
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Defaults to the manifest's workdir.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Milliseconds; on expiry the whole process tree is killed.
    pub timeout_ms: u64,
    /// Bytes fed to stdin (then closed).
    #[serde(
        default,
        with = "crate::b64::opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub stdin: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    /// None when killed by a signal (see `signal`) or timed out.
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(with = "crate::b64")]
    pub stdout: Vec<u8>,
    #[serde(with = "crate::b64")]
    pub stderr: Vec<u8>,
    pub timed_out: bool,
    /// Output beyond the capture limit was dropped.
    #[serde(default)]
    pub truncated: bool,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    /// Seconds since the epoch.
    pub mtime: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSpec {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// Stable across pause/resume.
    pub id: String,
    pub argv: Vec<String>,
    pub running: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Milliseconds since the epoch.
    pub started_at_ms: i64,
    /// Total bytes of output produced so far (the next read offset at the tail).
    pub output_end: u64,
}

/// A window of a session's combined stdout+stderr, addressed by byte offsets
/// that only grow: a client reads from `next_offset` next time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOutput {
    /// Offset of `data[0]`. Greater than the requested offset when older output
    /// was dropped from the session's buffer.
    pub offset: u64,
    #[serde(with = "crate::b64")]
    pub data: Vec<u8>,
    pub next_offset: u64,
    pub running: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}
