//! An in-memory [`Backend`] for tests of the server (feature `fake`): no
//! root, no namespaces, no VM. It owns sandboxes made of a file map and a
//! "memory" map, a tiny exec interpreter over them, sessions, and pause /
//! snapshot artifacts written as real files into the directory the server
//! gives (so the snapshot store really stores them and resume or restore
//! really reads them back).
//!
//! Fault injection: [`FakeBackend::fail_at`] makes a named step answer an
//! error once; [`FakeBackend::crash_at`] makes it never answer (the caller
//! drops the pending call and the manager with it, as a killed daemon would).
//! Steps are `"<op>"` (on entry, nothing done yet) and `"<op>.done"` (its
//! effect is made, before it answers). The backend is a cheap handle on
//! shared state: a clone given to a second manager sees what the first left.
//! [`FakeBackend::lose_compute`] models the compute dying (a host reboot, a
//! killed VM): memory and sessions go; files stay on the host only for
//! the process kind, whose writable layer lives on the host's disk.
//!
//! Exec understands: `true`, `false`, `echo ARGS..`, `cat [FILE]` (no file:
//! stdin), `write FILE TEXT..`, `set KEY VALUE` / `get KEY` (memory state),
//! `env NAME`, `sleep SECS`; anything else exits 127.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::{
    Artifact, ArtifactKind, Backend, Capabilities, ExecChunk, PauseLeftovers, Recovered,
    SandboxSpec, Usage,
};
use stasis_core::{
    now_ms, BackendKind, Error, ErrorCode, ExecRequest, ExecResult, FileEntry, FileKind, Result,
    SandboxId, SessionInfo, SessionOutput, SessionSpec, Stream,
};

/// The writable layer, as an artifact.
pub const FS_ARTIFACT: &str = "fs.json";
/// The memory map, as an artifact (pauses that keep memory, snapshots).
pub const MEMORY_ARTIFACT: &str = "memory.json";
/// Checksums of the two above: written last, so its presence means complete.
pub const META_ARTIFACT: &str = "fake.json";

/// What an injected fault does at its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer this error.
    Fail(ErrorCode),
    /// Never answer (a daemon killed at this instant).
    Crash,
}

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
}

#[derive(Debug, Default)]
struct State {
    sandboxes: BTreeMap<SandboxId, FakeSandbox>,
    faults: Vec<(String, Fault)>,
    calls: Vec<String>,
    crashes: Vec<String>,
    unavailable: Option<String>,
    next_session: u64,
}

/// The in-memory backend; clones share one state.
#[derive(Clone)]
pub struct FakeBackend {
    kind: BackendKind,
    state: Arc<Mutex<State>>,
}

impl Default for FakeBackend {
    fn default() -> Self {
        FakeBackend::new(BackendKind::Process)
    }
}

#[derive(Serialize, Deserialize)]
struct FsLayer {
    files: BTreeMap<String, FakeFile>,
    dirs: BTreeSet<String>,
}

/// What a pause that keeps memory saves: the memory map and the sessions.
#[derive(Serialize, Deserialize)]
struct MemoryImage {
    memory: BTreeMap<String, String>,
    sessions: BTreeMap<String, FakeSession>,
}

#[derive(Serialize, Deserialize)]
struct ArtifactsMeta {
    fs: u64,
    memory: Option<u64>,
}

/// FNV-1a: enough to tell a changed artifact from its original.
fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
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
    fn new(workdir: &str) -> Self {
        let mut sb = FakeSandbox {
            workdir: workdir.to_string(),
            running: true,
            files_on_host: true,
            ..Default::default()
        };
        sb.mkdirs(workdir);
        sb
    }

    fn mkdirs(&mut self, dir: &str) {
        self.dirs.extend(parents(dir));
        self.dirs.insert(dir.to_string());
    }

    fn write(&mut self, path: &str, data: &[u8], mode: Option<u32>) -> Result<()> {
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

    fn read(&self, path: &str) -> Result<&FakeFile> {
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
fn interpret(sb: &mut FakeSandbox, req: &ExecRequest) -> ExecResult {
    let argv: Vec<&str> = req.argv.iter().map(String::as_str).collect();
    sb.execs += 1;
    match argv.as_slice() {
        ["true"] | ["sleep", _] => result(0, "", ""),
        ["false"] => result(1, "", ""),
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

impl FakeBackend {
    pub fn new(kind: BackendKind) -> Self {
        FakeBackend {
            kind,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next time `step` is reached, answer `code` instead.
    pub fn fail_at(&self, step: &str, code: ErrorCode) {
        self.lock()
            .faults
            .push((step.to_string(), Fault::Fail(code)));
    }

    /// The next time `step` is reached, never answer.
    pub fn crash_at(&self, step: &str) {
        self.lock().faults.push((step.to_string(), Fault::Crash));
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Steps at which a crash fault fired, in order.
    pub fn crashes(&self) -> Vec<String> {
        self.lock().crashes.clone()
    }

    /// Every step reached (entries and `.done`s), in order.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Report the backend unavailable (`Capabilities::available` false).
    pub fn set_unavailable(&self, reason: Option<&str>) {
        self.lock().unavailable = reason.map(str::to_string);
    }

    /// What the fake holds of a sandbox.
    pub fn sandbox(&self, id: &SandboxId) -> Option<FakeSandbox> {
        self.lock().sandboxes.get(id).cloned()
    }

    /// Ids of every sandbox the fake holds.
    pub fn held(&self) -> Vec<SandboxId> {
        self.lock().sandboxes.keys().cloned().collect()
    }

    /// Every sandbox's compute dies (see the module docs).
    pub fn lose_compute(&self) {
        let keep_files = self.kind == BackendKind::Process;
        for sb in self.lock().sandboxes.values_mut() {
            sb.running = false;
            sb.memory.clear();
            sb.sessions.clear();
            if !keep_files {
                sb.files.clear();
                sb.dirs.clear();
                sb.files_on_host = false;
            }
        }
    }

    /// Reach `step`: note it and apply its fault, if one is set.
    async fn step(&self, step: &str) -> Result<()> {
        let fault = {
            let mut st = self.lock();
            st.calls.push(step.to_string());
            let i = st.faults.iter().position(|(s, _)| s == step);
            let f = i.map(|i| st.faults.remove(i).1);
            if f == Some(Fault::Crash) {
                st.crashes.push(step.to_string());
            }
            f
        };
        match fault {
            None => Ok(()),
            Some(Fault::Fail(code)) => Err(Error::new(code, format!("injected fault at {step}"))),
            Some(Fault::Crash) => std::future::pending().await,
        }
    }

    /// Run `f` on a running sandbox.
    fn with_running<T>(
        &self,
        id: &SandboxId,
        f: impl FnOnce(&mut FakeSandbox) -> Result<T>,
    ) -> Result<T> {
        let mut st = self.lock();
        match st.sandboxes.get_mut(id) {
            Some(sb) if sb.running => f(sb),
            Some(_) => Err(Error::state(format!("sandbox {id} is not running"))),
            None => Err(Error::not_found(format!("sandbox {id}"))),
        }
    }

    /// Write the sandbox's state as artifacts into `out`.
    fn write_artifacts(sb: &FakeSandbox, out: &Path, memory: bool) -> Result<Vec<Artifact>> {
        let fs = serde_json::to_vec(&FsLayer {
            files: sb.files.clone(),
            dirs: sb.dirs.clone(),
        })?;
        std::fs::write(out.join(FS_ARTIFACT), &fs)?;
        let mut arts = vec![Artifact {
            name: FS_ARTIFACT.into(),
            kind: ArtifactKind::FsLayer,
            size: fs.len() as u64,
        }];
        let mut meta = ArtifactsMeta {
            fs: checksum(&fs),
            memory: None,
        };
        if memory {
            let mem = serde_json::to_vec(&MemoryImage {
                memory: sb.memory.clone(),
                sessions: sb.sessions.clone(),
            })?;
            std::fs::write(out.join(MEMORY_ARTIFACT), &mem)?;
            meta.memory = Some(checksum(&mem));
            arts.push(Artifact {
                name: MEMORY_ARTIFACT.into(),
                kind: ArtifactKind::Memory,
                size: mem.len() as u64,
            });
        }
        let m = serde_json::to_vec(&meta)?;
        std::fs::write(out.join(META_ARTIFACT), &m)?;
        arts.push(Artifact {
            name: META_ARTIFACT.into(),
            kind: ArtifactKind::Meta,
            size: m.len() as u64,
        });
        Ok(arts)
    }

    /// A sandbox from the artifacts in `dir`: None when `dir` has none;
    /// `integrity_error` when they do not verify.
    fn read_artifacts(workdir: &str, dir: &Path) -> Result<Option<(FakeSandbox, Vec<Artifact>)>> {
        let Ok(m) = std::fs::read(dir.join(META_ARTIFACT)) else {
            return Ok(None);
        };
        let bad = |what: &str| Error::integrity(format!("fake artifacts: {what}"));
        let meta: ArtifactsMeta = serde_json::from_slice(&m).map_err(|_| bad("meta"))?;
        let fs = std::fs::read(dir.join(FS_ARTIFACT)).map_err(|_| bad("no fs layer"))?;
        if checksum(&fs) != meta.fs {
            return Err(bad("fs layer checksum"));
        }
        let layer: FsLayer = serde_json::from_slice(&fs).map_err(|_| bad("fs layer"))?;
        let mut sb = FakeSandbox::new(workdir);
        sb.files = layer.files;
        sb.dirs.extend(layer.dirs);
        let mut arts = vec![
            Artifact {
                name: FS_ARTIFACT.into(),
                kind: ArtifactKind::FsLayer,
                size: fs.len() as u64,
            },
            Artifact {
                name: META_ARTIFACT.into(),
                kind: ArtifactKind::Meta,
                size: m.len() as u64,
            },
        ];
        if let Some(sum) = meta.memory {
            let mem = std::fs::read(dir.join(MEMORY_ARTIFACT)).map_err(|_| bad("no memory"))?;
            if checksum(&mem) != sum {
                return Err(bad("memory checksum"));
            }
            let image: MemoryImage = serde_json::from_slice(&mem).map_err(|_| bad("memory"))?;
            sb.memory = image.memory;
            sb.sessions = image.sessions;
            arts.push(Artifact {
                name: MEMORY_ARTIFACT.into(),
                kind: ArtifactKind::Memory,
                size: mem.len() as u64,
            });
        }
        Ok(Some((sb, arts)))
    }

    fn start_from(&self, spec: &SandboxSpec, artifacts: &Path, op: &str) -> Result<()> {
        let read = Self::read_artifacts(&spec.manifest.workdir, artifacts)?;
        let mut st = self.lock();
        let sb = match read {
            Some((sb, _)) => sb,
            // A filesystem pause whose files stayed on the host.
            None => match st.sandboxes.get(&spec.id) {
                Some(old) if op == "resume" && old.files_on_host => FakeSandbox {
                    running: true,
                    memory: BTreeMap::new(),
                    sessions: BTreeMap::new(),
                    ..old.clone()
                },
                _ => {
                    return Err(Error::backend(format!(
                        "{op}: no artifacts in {}",
                        artifacts.display()
                    )))
                }
            },
        };
        st.sandboxes.insert(spec.id.clone(), sb);
        Ok(())
    }
}

#[async_trait]
impl Backend for FakeBackend {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn capabilities(&self) -> Capabilities {
        let reason = self.lock().unavailable.clone();
        let vm = self.kind == BackendKind::Microvm;
        Capabilities {
            backend: self.kind,
            available: reason.is_none(),
            reason,
            pause_keeps_processes: true,
            pause_frees_memory: vm,
            restore_keeps_processes: vm,
            accelerator: None,
            notes: vec!["in-memory fake backend for tests".into()],
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<()> {
        self.step("create").await?;
        let workdir = resolve("/", &spec.manifest.workdir)?;
        {
            let mut st = self.lock();
            if st.sandboxes.contains_key(&spec.id) {
                return Err(Error::state(format!("sandbox {} exists", spec.id)));
            }
            st.sandboxes
                .insert(spec.id.clone(), FakeSandbox::new(&workdir));
        }
        self.step("create.done").await
    }

    async fn exec(
        &self,
        id: &SandboxId,
        req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        self.step("exec").await?;
        let t0 = Instant::now();
        let mut r = self.with_running(id, |sb| Ok(interpret(sb, &req)))?;
        if let [cmd, secs] = req.argv.as_slice() {
            if cmd == "sleep" {
                let want = Duration::from_secs_f64(secs.parse().unwrap_or(0.0));
                let limit = Duration::from_millis(req.timeout_ms);
                tokio::time::sleep(want.min(limit)).await;
                if want > limit {
                    r.exit_code = None;
                    r.timed_out = true;
                }
            }
        }
        r.duration_ms = t0.elapsed().as_millis() as u64;
        if let Some(tx) = output {
            for (stream, data) in [
                (Stream::Stdout, std::mem::take(&mut r.stdout)),
                (Stream::Stderr, std::mem::take(&mut r.stderr)),
            ] {
                if !data.is_empty() {
                    let _ = tx.send(ExecChunk { stream, data }).await;
                }
            }
        }
        self.step("exec.done").await?;
        Ok(r)
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        self.step("write_file").await?;
        self.with_running(id, |sb| sb.write(path, data, mode))
    }

    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        self.step("read_file").await?;
        self.with_running(id, |sb| {
            let f = sb.read(path)?;
            if f.data.len() as u64 > limit {
                return Err(Error::new(
                    ErrorCode::PayloadTooLarge,
                    format!("file of {} bytes exceeds {limit}", f.data.len()),
                ));
            }
            Ok(f.data.clone())
        })
    }

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>> {
        self.step("list_files").await?;
        self.with_running(id, |sb| {
            let dir = resolve(&sb.workdir, path)?;
            if !sb.dirs.contains(&dir) {
                return Err(Error::not_found(format!("directory {dir}")));
            }
            let prefix = if dir == "/" {
                dir.clone()
            } else {
                format!("{dir}/")
            };
            let child = |p: &String| {
                p.strip_prefix(&prefix)
                    .filter(|rest| !rest.is_empty() && !rest.contains('/'))
                    .map(str::to_string)
            };
            let mut out: Vec<FileEntry> = sb
                .dirs
                .iter()
                .filter_map(child)
                .map(|name| FileEntry {
                    name,
                    kind: FileKind::Dir,
                    size: 0,
                    mode: 0o755,
                    mtime: 0,
                })
                .collect();
            for (p, f) in &sb.files {
                if let Some(name) = child(p) {
                    out.push(FileEntry {
                        name,
                        kind: FileKind::File,
                        size: f.data.len() as u64,
                        mode: f.mode,
                        mtime: 0,
                    });
                }
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(out)
        })
    }

    async fn session_start(&self, id: &SandboxId, spec: SessionSpec) -> Result<SessionInfo> {
        self.step("session_start").await?;
        let n = {
            let mut st = self.lock();
            st.next_session += 1;
            st.next_session
        };
        self.with_running(id, |sb| {
            let mut s = FakeSession {
                argv: spec.argv.clone(),
                running: true,
                started_at_ms: now_ms(),
                ..Default::default()
            };
            // `cat` echoes what is written to it; anything else runs at once.
            if spec.argv != ["cat"] {
                let req = ExecRequest {
                    argv: spec.argv.clone(),
                    env: spec.env.clone(),
                    cwd: spec.cwd.clone(),
                    timeout_ms: 1000,
                    stdin: None,
                };
                let r = interpret(sb, &req);
                s.output = [r.stdout, r.stderr].concat();
                s.running = false;
                s.exit_code = r.exit_code;
            }
            let info = session_info(&format!("s-{n}"), &s);
            sb.sessions.insert(info.id.clone(), s);
            Ok(info)
        })
    }

    async fn session_write(&self, id: &SandboxId, session: &str, data: &[u8]) -> Result<()> {
        self.step("session_write").await?;
        self.with_running(id, |sb| {
            let s = sb
                .sessions
                .get_mut(session)
                .ok_or_else(|| Error::not_found(format!("session {session}")))?;
            if !s.running {
                return Err(Error::state(format!("session {session} has ended")));
            }
            s.output.extend_from_slice(data);
            Ok(())
        })
    }

    async fn session_read(
        &self,
        id: &SandboxId,
        session: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<SessionOutput> {
        self.step("session_read").await?;
        let deadline = Instant::now() + wait;
        loop {
            let out = self.with_running(id, |sb| {
                let s = sb
                    .sessions
                    .get(session)
                    .ok_or_else(|| Error::not_found(format!("session {session}")))?;
                let start = (offset as usize).min(s.output.len());
                Ok(SessionOutput {
                    offset: start as u64,
                    data: s.output[start..].to_vec(),
                    next_offset: s.output.len() as u64,
                    running: s.running,
                    exit_code: s.exit_code,
                })
            })?;
            if !out.data.is_empty() || !out.running || Instant::now() >= deadline {
                return Ok(out);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn session_list(&self, id: &SandboxId) -> Result<Vec<SessionInfo>> {
        self.step("session_list").await?;
        self.with_running(id, |sb| {
            Ok(sb
                .sessions
                .iter()
                .map(|(k, s)| session_info(k, s))
                .collect())
        })
    }

    async fn session_kill(&self, id: &SandboxId, session: &str) -> Result<()> {
        self.step("session_kill").await?;
        self.with_running(id, |sb| {
            let s = sb
                .sessions
                .get_mut(session)
                .ok_or_else(|| Error::not_found(format!("session {session}")))?;
            s.running = false;
            Ok(())
        })
    }

    async fn pause(&self, id: &SandboxId, out: &Path, keep_memory: bool) -> Result<Vec<Artifact>> {
        self.step("pause").await?;
        let arts = self.with_running(id, |sb| {
            let arts = Self::write_artifacts(sb, out, keep_memory)?;
            // Its state now lives only in the artifacts.
            *sb = FakeSandbox {
                workdir: sb.workdir.clone(),
                ..Default::default()
            };
            Ok(arts)
        })?;
        self.step("pause.done").await?;
        Ok(arts)
    }

    async fn resume(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        self.step("resume").await?;
        self.start_from(spec, artifacts, "resume")?;
        self.step("resume.done").await
    }

    async fn snapshot(&self, id: &SandboxId, out: &Path) -> Result<Vec<Artifact>> {
        self.step("snapshot").await?;
        let arts = self.with_running(id, |sb| Self::write_artifacts(sb, out, true))?;
        self.step("snapshot.done").await?;
        Ok(arts)
    }

    async fn restore(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        self.step("restore").await?;
        if self.lock().sandboxes.contains_key(&spec.id) {
            return Err(Error::state(format!("sandbox {} exists", spec.id)));
        }
        self.start_from(spec, artifacts, "restore")?;
        self.step("restore.done").await
    }

    async fn destroy(&self, id: &SandboxId, _dir: &Path) -> Result<()> {
        self.step("destroy").await?;
        self.lock().sandboxes.remove(id);
        self.step("destroy.done").await
    }

    async fn recover(&self, spec: &SandboxSpec) -> Result<Recovered> {
        self.step("recover").await?;
        Ok(match self.lock().sandboxes.get(&spec.id) {
            Some(sb) if sb.running => Recovered::Running,
            _ => Recovered::NotRunning,
        })
    }

    async fn pause_leftovers(&self, spec: &SandboxSpec, out: &Path) -> Result<PauseLeftovers> {
        self.step("pause_leftovers").await?;
        let files_kept = self.kind == BackendKind::Process
            && self
                .lock()
                .sandboxes
                .get(&spec.id)
                .is_some_and(|sb| sb.files_on_host);
        let artifacts = match Self::read_artifacts(&spec.manifest.workdir, out) {
            Ok(Some((_, arts))) => Some(arts),
            _ => None,
        };
        Ok(PauseLeftovers {
            artifacts,
            files_kept,
        })
    }

    async fn cleanup_orphans(&self, known: &[SandboxId]) -> Result<()> {
        self.step("cleanup_orphans").await?;
        self.lock().sandboxes.retain(|id, _| known.contains(id));
        Ok(())
    }

    async fn usage(&self, id: &SandboxId) -> Result<Usage> {
        self.step("usage").await?;
        let st = self.lock();
        let sb = st
            .sandboxes
            .get(id)
            .ok_or_else(|| Error::not_found(format!("sandbox {id}")))?;
        let rss = if sb.running {
            4096 + sb
                .memory
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>() as u64
        } else {
            0
        };
        Ok(Usage {
            cpu_ns: sb.execs * 1_000_000,
            rss_bytes: rss,
            host_processes: u64::from(sb.running),
            pss_bytes: rss,
        })
    }
}

fn session_info(id: &str, s: &FakeSession) -> SessionInfo {
    SessionInfo {
        id: id.to_string(),
        argv: s.argv.clone(),
        running: s.running,
        exit_code: s.exit_code,
        started_at_ms: s.started_at_ms,
        output_end: s.output.len() as u64,
    }
}

#[cfg(test)]
mod tests;
