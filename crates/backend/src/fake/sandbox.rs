//! The fake backend's data model: a sandbox's files, directories, memory
//! map and sessions, path resolution inside it, and the tiny exec
//! interpreter over them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use stasis_core::{Error, ExecRequest, ExecResult, Result, SessionInfo};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeFile {
    pub data: Vec<u8>,
    pub mode: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeSession {
    pub argv: Vec<String>,
    pub output: Vec<u8>,
    pub running: bool,
    pub exit_code: Option<i32>,
    pub started_at_ms: i64,
    /// The terminal size of a session started with a PTY.
    pub pty: Option<stasis_core::PtySize>,
}

/// One sandbox as the fake holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeSandbox {
    pub workdir: String,
    /// Its compute runs.
    pub running: bool,
    /// Its files are on this host (false once a pause moved them into artifacts).
    pub files_on_host: bool,
    pub files: BTreeMap<String, FakeFile>,
    pub dirs: BTreeSet<String>,
    /// Process memory: lost by a filesystem-only pause or a lost compute.
    pub memory: BTreeMap<String, String>,
    pub sessions: BTreeMap<String, FakeSession>,
    pub execs: u64,
    /// The manifest's output directories (see `collect_outputs`).
    pub outputs: Vec<String>,
}

/// `path` inside a sandbox whose workdir is `workdir`, as a normalized
/// absolute path; `..` never climbs above `/`.
pub fn resolve(workdir: &str, path: &str) -> Result<String> {
    if path.is_empty() || path.contains('\0') {
        return Err(Error::invalid(format!("bad path {path:?}")).with_field("path"));
    }
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{workdir}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in joined.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

fn parents(path: &str) -> impl Iterator<Item = String> + '_ {
    path.match_indices('/').map(move |(i, _)| {
        if i == 0 {
            "/".to_string()
        } else {
            path[..i].to_string()
        }
    })
}

impl FakeSandbox {
    pub(crate) fn new(workdir: &str) -> Self {
        let mut sb = FakeSandbox {
            workdir: workdir.to_string(),
            running: true,
            files_on_host: true,
            ..Default::default()
        };
        sb.mkdirs(workdir);
        sb
    }

    pub(crate) fn mkdirs(&mut self, dir: &str) {
        self.dirs.extend(parents(dir));
        self.dirs.insert(dir.to_string());
    }

    pub(crate) fn write(&mut self, path: &str, data: &[u8], mode: Option<u32>) -> Result<()> {
        let p = resolve(&self.workdir, path)?;
        if self.dirs.contains(&p) {
            return Err(Error::invalid(format!("{p} is a directory")));
        }
        self.dirs.extend(parents(&p));
        let mode = mode.unwrap_or(0o644);
        self.files.insert(
            p,
            FakeFile {
                data: data.to_vec(),
                mode,
            },
        );
        Ok(())
    }

    pub(crate) fn read(&self, path: &str) -> Result<&FakeFile> {
        let p = resolve(&self.workdir, path)?;
        self.files
            .get(&p)
            .ok_or_else(|| Error::not_found(format!("file {p}")))
    }
}

fn result(code: i32, stdout: impl Into<Vec<u8>>, stderr: impl Into<Vec<u8>>) -> ExecResult {
    ExecResult {
        exit_code: Some(code),
        signal: None,
        stdout: stdout.into(),
        stderr: stderr.into(),
        timed_out: false,
        truncated: false,
        duration_ms: 0,
    }
}

/// Run one fake command against `sb` (no waiting: see `sleep` in `exec`).
pub(crate) fn interpret(sb: &mut FakeSandbox, req: &ExecRequest) -> ExecResult {
    let argv: Vec<&str> = req.argv.iter().map(String::as_str).collect();
    sb.execs += 1;
    match argv.as_slice() {
        ["true"] | ["sleep", _] => result(0, "", ""),
        ["false"] => result(1, "", ""),
        // Who the command runs as: the user the manager handed down.
        ["whoami"] => result(
            0,
            format!("{}\n", req.user.as_deref().unwrap_or("root")),
            "",
        ),
        ["echo", rest @ ..] => result(0, format!("{}\n", rest.join(" ")), ""),
        ["cat"] => result(0, req.stdin.clone().unwrap_or_default(), ""),
        ["cat", file] => match sb.read(file) {
            Ok(f) => result(0, f.data.clone(), ""),
            Err(_) => result(1, "", format!("cat: {file}: No such file or directory\n")),
        },
        ["write", file, rest @ ..] => match sb.write(file, rest.join(" ").as_bytes(), None) {
            Ok(()) => result(0, "", ""),
            Err(e) => result(1, "", e.message),
        },
        ["set", key, value] => {
            sb.memory.insert(key.to_string(), value.to_string());
            result(0, "", "")
        }
        ["get", key] => match sb.memory.get(*key) {
            Some(v) => result(0, format!("{v}\n"), ""),
            None => result(1, "", format!("{key}: not set\n")),
        },
        ["env", name] => match req.env.get(*name) {
            Some(v) => result(0, format!("{v}\n"), ""),
            None => result(1, "", ""),
        },
        _ => result(127, "", format!("{}: command not found\n", argv[0])),
    }
}

pub(crate) fn session_info(id: &str, s: &FakeSession) -> SessionInfo {
    SessionInfo {
        id: id.to_string(),
        argv: s.argv.clone(),
        running: s.running,
        exit_code: s.exit_code,
        started_at_ms: s.started_at_ms,
        output_end: s.output.len() as u64,
        pty: s.pty,
    }
}
