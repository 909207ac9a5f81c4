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
    /// Run as this user, `USER[:GROUP]` (see [`crate::user`]); default: the
    /// manifest's `user`, else root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
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
    /// The owner's uid and gid as seen inside the sandbox (absent from
    /// older guest agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// The entry's `user.e2b.*` extended attributes, the prefix stripped
    /// (see [`XATTR_PREFIX`]); absent when it has none, for a symlink, or
    /// from older guest agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xattrs: Option<BTreeMap<String, String>>,
}

/// The extended-attribute namespace file metadata lives in: a key `k` is
/// the attribute `user.e2b.k` (E2B's envd stores it there too, so programs
/// in the sandbox can read and set it).
pub const XATTR_PREFIX: &str = "user.e2b.";
/// At most this many metadata attributes are read or set per entry.
pub const XATTR_MAX_COUNT: usize = 64;
/// At most this many bytes of names and values (prefix included) per entry.
pub const XATTR_MAX_BYTES: usize = 64 * 1024;

/// Whether a metadata map can be stored: keys are HTTP token characters
/// (what E2B's SDK sends as `X-Metadata-<key>` header names), values
/// printable ASCII, within [`XATTR_MAX_COUNT`] and [`XATTR_MAX_BYTES`].
pub fn check_meta(meta: &BTreeMap<String, String>) -> crate::Result<()> {
    if meta.len() > XATTR_MAX_COUNT {
        return Err(crate::Error::invalid(format!(
            "at most {XATTR_MAX_COUNT} metadata entries per file"
        )));
    }
    let mut bytes = 0;
    for (k, v) in meta {
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if k.is_empty() || !k.chars().all(token) {
            return Err(crate::Error::invalid(format!(
                "metadata key {k:?}: use only letters, digits and !#$%&'*+-.^_`|~"
            )));
        }
        if !v.chars().all(|c| (' '..='~').contains(&c)) {
            return Err(crate::Error::invalid(format!(
                "metadata value for {k:?}: printable ASCII only"
            )));
        }
        bytes += XATTR_PREFIX.len() + k.len() + v.len();
    }
    if bytes > XATTR_MAX_BYTES {
        return Err(crate::Error::invalid(format!(
            "metadata is at most {XATTR_MAX_BYTES} bytes per file"
        )));
    }
    Ok(())
}

/// What `stat` tells of one path: the entry itself (a symlink is not
/// followed; `symlink_target` is its text as written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// The normalized absolute path inside the sandbox.
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    /// Seconds since the epoch.
    pub mtime: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// The owner's uid and gid as seen inside the sandbox (ids in the
    /// sandbox's user namespace, not the host's); absent from older guest
    /// agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// As [`FileEntry::xattrs`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xattrs: Option<BTreeMap<String, String>>,
}

/// A file operation besides reading and writing content. Paths are absolute
/// inside the sandbox (the server normalizes relative ones against the
/// workdir before a backend sees them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FileOp {
    /// Answers the entry's [`FileStat`]; `not_found` when it is missing.
    Stat { path: String },
    /// A file, a symlink (not its target) or an empty directory; with
    /// `recursive`, a directory and everything under it.
    Remove {
        path: String,
        #[serde(default)]
        recursive: bool,
    },
    /// With `parents`, missing parents are made and an existing directory is
    /// fine; without, the parent must exist and the path must not.
    Mkdir {
        path: String,
        #[serde(default)]
        parents: bool,
    },
    /// POSIX rename: an existing file at `to` is replaced.
    Rename { from: String, to: String },
    /// Give the entry itself (a final symlink is not followed) to `uid`
    /// and `gid`, ids as seen inside the sandbox; an id the sandbox cannot
    /// map is `invalid_argument`.
    Chown { path: String, uid: u32, gid: u32 },
    /// Replace the entry's metadata (its `user.e2b.*` extended attributes,
    /// keys without the prefix): attributes not in `meta` are removed, so an
    /// empty map clears them. A symlink is not followed; too many or too
    /// large entries (see [`XATTR_MAX_COUNT`]) are `invalid_argument`.
    SetMeta {
        path: String,
        #[serde(default)]
        meta: BTreeMap<String, String>,
    },
}

/// How a write treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Create or truncate.
    #[default]
    Overwrite,
    /// Create only: an existing entry answers `already_exists`.
    CreateExclusive,
}

/// A change under a watched directory. `path` is relative to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEvent {
    pub kind: FileEventKind,
    pub path: String,
    /// For `renamed`: the new path (relative), when the watcher saw both ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileEventKind {
    Created,
    Modified,
    Removed,
    Renamed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSpec {
    /// Empty: the sandbox's default command (`manifest.command`).
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Run the session on a pseudo-terminal of this size (its controlling
    /// terminal; stdin and output go through the terminal). None: pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    /// Run as this user (as [`ExecRequest::user`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// The size of a session's terminal, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

/// A signal a client may send to a session (`DELETE .../sessions/{s}?signal=INT`):
/// `INT` is a ^C for a command without a terminal, `KILL` (the default)
/// ends the session's whole process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum SessionSignal {
    Hup,
    Int,
    Quit,
    #[default]
    Kill,
    Usr1,
    Usr2,
    Term,
}

impl SessionSignal {
    /// Its number on Linux (the same on every architecture stasis runs on).
    pub fn number(self) -> i32 {
        match self {
            SessionSignal::Hup => 1,
            SessionSignal::Int => 2,
            SessionSignal::Quit => 3,
            SessionSignal::Kill => 9,
            SessionSignal::Usr1 => 10,
            SessionSignal::Usr2 => 12,
            SessionSignal::Term => 15,
        }
    }

    /// From a number received over the agent protocol.
    pub fn from_number(n: i32) -> crate::Result<Self> {
        use SessionSignal::*;
        [Hup, Int, Quit, Kill, Usr1, Usr2, Term]
            .into_iter()
            .find(|s| s.number() == n)
            .ok_or_else(|| crate::Error::invalid(format!("signal {n} cannot be sent to a session")))
    }

    /// From its name, with or without `SIG`, any case (`INT`, `sigterm`).
    pub fn parse(name: &str) -> crate::Result<Self> {
        let up = name.to_ascii_uppercase();
        let bare = up.strip_prefix("SIG").unwrap_or(&up);
        serde_json::from_value(serde_json::Value::String(bare.to_string())).map_err(|_| {
            crate::Error::invalid(format!(
                "unknown signal {name:?}: use one of HUP, INT, QUIT, KILL, USR1, USR2, TERM"
            ))
            .with_field("signal")
        })
    }
}

/// The largest terminal side accepted (columns or rows).
pub const MAX_PTY_SIDE: u16 = 1000;

/// The one check of a terminal size: both sides between 1 and [`MAX_PTY_SIDE`].
pub fn check_pty_size(size: PtySize) -> crate::Result<()> {
    let ok = |n: u16| (1..=MAX_PTY_SIDE).contains(&n);
    if !ok(size.cols) || !ok(size.rows) {
        return Err(crate::Error::invalid(format!(
            "terminal size {}x{} out of range: cols and rows must be between 1 and {MAX_PTY_SIDE}",
            size.cols, size.rows
        ))
        .with_field("pty"));
    }
    Ok(())
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
    /// The terminal size of a session started with a PTY (after any resize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
}

/// A window of a session's combined stdout+stderr, addressed by byte offsets
/// that only grow: a client reads from `next_offset` next time. `stderr`
/// names the parts of the window that came from stderr
/// ([`SessionOutput::split`]).
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
    /// Absolute `[start, end)` offsets of the window's stderr bytes, in
    /// order (empty for a terminal, and from an agent that predates them:
    /// everything is then stdout).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stderr: Vec<[u64; 2]>,
}

/// The longest timeout an exec or tool call may ask for: one day.
pub const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

/// The one check of a command line, wherever one enters (API, manager, run
/// state, backends): it must name a command, and no argument may hold NUL
/// (it could not be passed to execve).
pub fn check_argv(argv: &[String]) -> crate::Result<()> {
    if argv.first().is_none_or(|a| a.is_empty()) {
        return Err(crate::Error::invalid("argv must name a command").with_field("argv"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(crate::Error::invalid("argv contains NUL").with_field("argv"));
    }
    Ok(())
}

/// The one check of an exec's timeout: between 1 ms and [`MAX_TIMEOUT_MS`].
pub fn check_timeout_ms(ms: u64) -> crate::Result<()> {
    if ms == 0 || ms > MAX_TIMEOUT_MS {
        return Err(crate::Error::invalid(format!(
            "timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"
        ))
        .with_field("timeout_ms"));
    }
    Ok(())
}

/// The one check of an environment given with a request: names as the
/// manifest allows them, values without NUL.
pub fn check_env(env: &BTreeMap<String, String>) -> crate::Result<()> {
    for (k, v) in env {
        if !crate::manifest::validate_env_name(k) {
            return Err(
                crate::Error::invalid(format!("invalid environment variable name {k:?}"))
                    .with_field("env"),
            );
        }
        if v.contains('\0') {
            return Err(
                crate::Error::invalid(format!("environment variable {k:?} contains NUL"))
                    .with_field("env"),
            );
        }
    }
    Ok(())
}

/// The one rule for layering environments: each later layer wins over the
/// earlier ones (e.g. the manifest's env, then secrets, then the request's).
pub fn merge_env<'a>(
    layers: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for layer in layers {
        env.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn argv_must_name_a_command_without_nul() {
        assert!(check_argv(&argv(&["true"])).is_ok());
        assert!(check_argv(&argv(&["sh", ""])).is_ok());
        for bad in [
            argv(&[]),
            argv(&[""]),
            argv(&["", "x"]),
            argv(&["a\0b"]),
            argv(&["sh", "-c\0"]),
        ] {
            let e = check_argv(&bad).unwrap_err();
            assert_eq!(e.code, crate::ErrorCode::InvalidArgument, "{bad:?}");
            assert_eq!(e.field.as_deref(), Some("argv"), "{bad:?}");
        }
    }

    #[test]
    fn timeouts_are_bounded() {
        assert!(check_timeout_ms(1).is_ok());
        assert!(check_timeout_ms(MAX_TIMEOUT_MS).is_ok());
        for bad in [0, MAX_TIMEOUT_MS + 1, u64::MAX] {
            assert_eq!(
                check_timeout_ms(bad).unwrap_err().field.as_deref(),
                Some("timeout_ms")
            );
        }
    }

    #[test]
    fn env_names_and_values_are_checked() {
        let ok: BTreeMap<_, _> = [("A_1".to_string(), "x y".to_string())].into();
        assert!(check_env(&ok).is_ok());
        for (k, v) in [("1A", "x"), ("A=B", "x"), ("", "x"), ("A", "x\0")] {
            let env: BTreeMap<_, _> = [(k.to_string(), v.to_string())].into();
            assert_eq!(
                check_env(&env).unwrap_err().field.as_deref(),
                Some("env"),
                "{k:?}"
            );
        }
    }

    #[test]
    fn pty_sizes_are_bounded() {
        let sz = |cols, rows| PtySize { cols, rows };
        assert!(check_pty_size(sz(80, 24)).is_ok());
        assert!(check_pty_size(sz(1, 1)).is_ok());
        assert!(check_pty_size(sz(MAX_PTY_SIDE, MAX_PTY_SIDE)).is_ok());
        for bad in [
            sz(0, 0),
            sz(0, 24),
            sz(80, 0),
            sz(MAX_PTY_SIDE + 1, 24),
            sz(80, u16::MAX),
        ] {
            let e = check_pty_size(bad).unwrap_err();
            assert_eq!(e.code, crate::ErrorCode::InvalidArgument);
            assert_eq!(e.field.as_deref(), Some("pty"));
        }
    }

    #[test]
    fn session_spec_pty_defaults_to_none() {
        let s: SessionSpec = serde_json::from_str(r#"{"argv":["sh"]}"#).unwrap();
        assert_eq!(s.pty, None);
        let s: SessionSpec =
            serde_json::from_str(r#"{"argv":["sh"],"pty":{"cols":100,"rows":30}}"#).unwrap();
        assert_eq!(
            s.pty,
            Some(PtySize {
                cols: 100,
                rows: 30
            })
        );
    }

    #[test]
    fn later_layers_win() {
        let a: BTreeMap<_, _> = [("K".into(), "a".into()), ("A".into(), "1".into())].into();
        let b: BTreeMap<_, _> = [("K".into(), "b".into())].into();
        let m = merge_env([&a, &b]);
        assert_eq!(m["K"], "b");
        assert_eq!(m["A"], "1");
        assert_eq!(merge_env([&b, &a])["K"], "a");
    }

    /// Metadata is optional on the wire, and a set-meta op parses.
    #[test]
    fn xattrs_are_optional_on_the_wire() {
        let st: FileStat =
            serde_json::from_str(r#"{"path":"/a","kind":"file","size":1,"mode":420,"mtime":0}"#)
                .unwrap();
        assert_eq!(st.xattrs, None);
        assert!(serde_json::to_value(&st).unwrap().get("xattrs").is_none());
        let e: FileEntry = serde_json::from_str(
            r#"{"name":"a","kind":"file","size":0,"mode":420,"mtime":0,"xattrs":{"k":"v"}}"#,
        )
        .unwrap();
        assert_eq!(e.xattrs.unwrap()["k"], "v");
        let op: FileOp =
            serde_json::from_str(r#"{"op":"set_meta","path":"/a","meta":{"a":"1"}}"#).unwrap();
        assert_eq!(
            op,
            FileOp::SetMeta {
                path: "/a".into(),
                meta: [("a".to_string(), "1".to_string())].into()
            }
        );
        let op: FileOp = serde_json::from_str(r#"{"op":"set_meta","path":"/a"}"#).unwrap();
        assert!(matches!(op, FileOp::SetMeta { meta, .. } if meta.is_empty()));
    }

    #[test]
    fn metadata_is_checked() {
        let m = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(check_meta(&m("author", "mish")).is_ok());
        assert!(check_meta(&m("a.b-c_~", "")).is_ok());
        for bad in [
            m("", "v"),
            m("bad key", "v"),
            m("k\n", "v"),
            m("k", "v\n"),
            m("k", "é"),
        ] {
            assert!(check_meta(&bad).is_err(), "{bad:?}");
        }
        let many: BTreeMap<_, _> = (0..=XATTR_MAX_COUNT)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(check_meta(&many).is_err());
        assert!(check_meta(&m("k", &"x".repeat(XATTR_MAX_BYTES))).is_err());
    }

    /// Owners are optional both ways: an older guest agent or client
    /// without them still parses, and no ids means no fields.
    #[test]
    fn owners_are_optional_on_the_wire() {
        let st: FileStat =
            serde_json::from_str(r#"{"path":"/a","kind":"file","size":1,"mode":420,"mtime":0}"#)
                .unwrap();
        assert_eq!((st.uid, st.gid), (None, None));
        let v = serde_json::to_value(&st).unwrap();
        assert!(v.get("uid").is_none() && v.get("gid").is_none());
        let e: FileEntry = serde_json::from_str(
            r#"{"name":"a","kind":"dir","size":0,"mode":493,"mtime":0,"uid":1000,"gid":1000}"#,
        )
        .unwrap();
        assert_eq!((e.uid, e.gid), (Some(1000), Some(1000)));
        let op: FileOp =
            serde_json::from_str(r#"{"op":"chown","path":"/a","uid":1000,"gid":1000}"#).unwrap();
        assert_eq!(
            op,
            FileOp::Chown {
                path: "/a".into(),
                uid: 1000,
                gid: 1000
            }
        );
    }
}
