//! What the daemon and the shim exchange: the configs of the `init` and
//! `exec` modes, the outcome an exec reports ([`ExecStatus`]), and reading a
//! config (from a file, an inherited fd, or stdin).

use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Read;
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InitConfig {
    pub cgroup_procs: Vec<PathBuf>,
    /// Overlay layers (host paths).
    pub lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// Mount point of the merged root (host path, mounted only inside the
    /// sandbox's private mount namespace, so nothing leaks onto the host).
    pub root: PathBuf,
    pub workdir: String,
    pub hostname: String,
    /// Host paths covered by an empty read-only tmpfs when the lower layer
    /// shows them (the daemon's data directories).
    pub hide: Vec<PathBuf>,
    /// Read-only input mounts: (canonical host source, absolute target).
    #[serde(default)]
    pub mounts: Vec<(PathBuf, String)>,
    /// Output directories, created (inside the root) when missing.
    #[serde(default)]
    pub outputs: Vec<String>,
    /// The sandbox's host id range (see [`crate::userns`]); `None`: no user
    /// namespace (processes are host root with reduced capabilities).
    #[serde(default)]
    pub idmap: Option<crate::userns::IdMap>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ExecConfig {
    pub cgroup_procs: Vec<PathBuf>,
    pub init_pid: i32,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub status_path: PathBuf,
    /// Send the command's stderr to its stdout (persistent sessions).
    pub merge_stderr: bool,
    /// stdin is a terminal's slave: the command makes it its controlling
    /// terminal (after `setsid`).
    #[serde(default)]
    pub pty: bool,
    /// `<parent>/<id>/init`: must appear in `/proc/<init_pid>/cgroup`.
    pub init_cgroup: String,
    /// Run as this `USER[:GROUP]`, resolved in the sandbox's own
    /// `/etc/passwd` and `/etc/group` (None: the sandbox's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ExecStatus {
    Exited(i32),
    Signaled(i32),
    /// The working directory could not be entered.
    Cwd(String),
    /// The command could not be executed (not found, not executable).
    Exec(i32, String),
    /// The user could not be resolved in the sandbox.
    User(String),
    Setup(String),
}

/// `-` reads the config from stdin (init uses that, so the sandbox's
/// /proc/1/cmdline does not show host paths).
pub(crate) fn read_config<T: for<'de> Deserialize<'de>>(path: &str) -> Result<T, String> {
    let data = if path == "-" {
        let mut v = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut v)
            .map_err(|e| format!("read config from stdin: {e}"))?;
        v
    } else {
        fs::read(path).map_err(|e| format!("read {path}: {e}"))?
    };
    serde_json::from_slice(&data).map_err(|e| format!("parse {path}: {e}"))
}
