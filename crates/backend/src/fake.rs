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
//! `env NAME`, `sleep SECS`; anything else exits 127. Outputs are collected
//! as a real tar; a paused sandbox's outputs are not served (the server
//! resumes it first).
//!
//! Submodules: `sandbox` (the data model and exec interpreter),
//! `artifacts` (pause and snapshot files), `outputs` (the outputs tar).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::{
    Artifact, Backend, Capabilities, ExecChunk, PauseLeftovers, Recovered, SandboxSpec, Standby,
    Usage,
};
use stasis_core::{
    now_ms, BackendKind, Error, ErrorCode, ExecRequest, ExecResult, FileEntry, FileKind, PtySize,
    Result, SandboxId, SessionInfo, SessionOutput, SessionSpec, SnapshotId, Stream,
};

mod artifacts;
mod outputs;
mod sandbox;
mod standby;

pub use artifacts::{FS_ARTIFACT, MEMORY_ARTIFACT, META_ARTIFACT};
use sandbox::{interpret, session_info};
pub use sandbox::{resolve, FakeFile, FakeSandbox, FakeSession};

/// What an injected fault does at its step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer this error.
    Fail(ErrorCode),
    /// Never answer (a daemon killed at this instant).
    Crash,
}

#[derive(Debug, Default)]
struct State {
    sandboxes: BTreeMap<SandboxId, FakeSandbox>,
    faults: Vec<(String, Fault)>,
    calls: Vec<String>,
    crashes: Vec<String>,
    unavailable: Option<String>,
    next_session: u64,
    /// Ports the sandboxes serve: where `connect_port` connects (a
    /// listener on the host's loopback standing in for the sandbox's).
    ports: BTreeMap<(SandboxId, u16), std::net::SocketAddr>,
    /// Sandboxes held in standby (see `standby`).
    standby: BTreeMap<SandboxId, standby::Held>,
    /// What `memory_survives_release` answers (false: a release stands for
    /// frozen processes ending, as on the process backend).
    release_loses_memory: bool,
    /// What a stored pause leaves on the "host" (`set_local_bytes`).
    local_per_pause: u64,
    /// Paused sandboxes holding local pause state, and its size.
    local: BTreeMap<SandboxId, u64>,
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

    /// Make a standby's release lose the memory (as the process backend's
    /// frozen processes do) instead of keeping it in the store's copy.
    pub fn set_release_loses_memory(&self, lost: bool) {
        self.lock().release_loses_memory = lost;
    }

    /// From now on every stored pause leaves `bytes` of local pause state
    /// on the "host" (`Backend::local_bytes`) until the sandbox resumes, is
    /// evicted or destroyed; 0 (the default): nothing.
    pub fn set_local_bytes(&self, bytes: u64) {
        self.lock().local_per_pause = bytes;
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

    /// Let `connect_port(id, port)` reach `addr` (e.g. a test's loopback
    /// listener) while the sandbox runs.
    pub fn serve_port(&self, id: &SandboxId, port: u16, addr: std::net::SocketAddr) {
        self.lock().ports.insert((id.clone(), port), addr);
    }

    /// Every sandbox's compute dies (see the module docs).
    pub fn lose_compute(&self) {
        let keep_files = self.kind == BackendKind::Process;
        let mut st = self.lock();
        st.standby.clear();
        for sb in st.sandboxes.values_mut() {
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

    fn start_from(&self, spec: &SandboxSpec, artifacts: &Path, op: &str) -> Result<()> {
        let read = artifacts::read(&spec.manifest.workdir, artifacts)?;
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
        let mut sb = sb;
        sb.outputs = spec.manifest.outputs.clone();
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
            let mut sb = FakeSandbox::new(&workdir);
            sb.outputs = spec.manifest.outputs.clone();
            st.sandboxes.insert(spec.id.clone(), sb);
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
                    uid: None,
                    gid: None,
                    xattrs: None,
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
                        uid: None,
                        gid: None,
                        xattrs: None,
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
                pty: spec.pty,
                ..Default::default()
            };
            // `cat` echoes what is written to it (on a terminal, Ctrl-D ends
            // it with status 0); anything else runs at once.
            if spec.argv != ["cat"] {
                let req = ExecRequest {
                    argv: spec.argv.clone(),
                    env: spec.env.clone(),
                    cwd: spec.cwd.clone(),
                    timeout_ms: 1000,
                    stdin: None,
                    user: spec.user.clone(),
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
            match data
                .iter()
                .position(|b| *b == 0x04)
                .filter(|_| s.pty.is_some())
            {
                Some(eot) => {
                    s.output.extend_from_slice(&data[..eot]);
                    s.running = false;
                    s.exit_code = Some(0);
                }
                None => s.output.extend_from_slice(data),
            }
            Ok(())
        })
    }

    async fn session_close_input(&self, id: &SandboxId, session: &str) -> Result<()> {
        self.step("session_close_input").await?;
        self.with_running(id, |sb| {
            let s = sb
                .sessions
                .get_mut(session)
                .ok_or_else(|| Error::not_found(format!("session {session}")))?;
            if s.pty.is_some() {
                return Err(Error::state(format!(
                    "session {session} has a terminal: its input cannot be closed (send ^D)"
                )));
            }
            // `cat` reads its input to the end: it ends with status 0.
            if s.running {
                s.running = false;
                s.exit_code = Some(0);
            }
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
                    stderr: Vec::new(),
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

    async fn session_kill(
        &self,
        id: &SandboxId,
        session: &str,
        signal: stasis_core::SessionSignal,
    ) -> Result<()> {
        self.step("session_kill").await?;
        self.with_running(id, |sb| {
            let s = sb
                .sessions
                .get_mut(session)
                .ok_or_else(|| Error::not_found(format!("session {session}")))?;
            // Fake sessions do not trap signals: any ends them as a shell reports.
            if s.running {
                s.exit_code = Some(128 + signal.number());
            }
            s.running = false;
            Ok(())
        })
    }

    async fn session_resize(&self, id: &SandboxId, session: &str, size: PtySize) -> Result<()> {
        self.step("session_resize").await?;
        self.with_running(id, |sb| {
            let s = sb
                .sessions
                .get_mut(session)
                .ok_or_else(|| Error::not_found(format!("session {session}")))?;
            match s.pty.as_mut() {
                Some(p) => *p = size,
                None => return Err(Error::state(format!("session {session} has no terminal"))),
            }
            Ok(())
        })
    }

    async fn pause(&self, id: &SandboxId, out: &Path, keep_memory: bool) -> Result<Vec<Artifact>> {
        self.step("pause").await?;
        let arts = self.with_running(id, |sb| {
            let arts = artifacts::write(sb, out, keep_memory)?;
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
        self.lock().local.remove(&spec.id);
        let continued = standby::resume(&mut self.lock(), spec, artifacts);
        if continued {
            self.step("resume.standby").await?;
        } else {
            self.start_from(spec, artifacts, "resume")?;
        }
        self.step("resume.done").await
    }

    async fn resume_needs_artifacts(&self, spec: &SandboxSpec, snapshot: &SnapshotId) -> bool {
        !standby::holds(&self.lock(), &spec.id, snapshot)
    }

    async fn pause_standby(
        &self,
        id: &SandboxId,
        out: &Path,
        keep_for: Duration,
    ) -> Result<Vec<Artifact>> {
        self.step("pause").await?;
        let arts = self.with_running(id, |sb| artifacts::write(sb, out, true))?;
        standby::enter(&mut self.lock(), id, keep_for);
        self.step("pause.done").await?;
        Ok(arts)
    }

    async fn pause_stored(&self, spec: &SandboxSpec, snapshot: &SnapshotId) {
        let mut st = self.lock();
        if let Some(h) = st.standby.get_mut(&spec.id) {
            h.snapshot = Some(snapshot.clone());
        }
        let n = st.local_per_pause;
        if n > 0 {
            st.local.insert(spec.id.clone(), n);
        }
    }

    fn local_bytes(&self, spec: &SandboxSpec) -> u64 {
        self.lock().local.get(&spec.id).copied().unwrap_or(0)
    }

    async fn evict(&self, spec: &SandboxSpec) -> Result<()> {
        self.step("evict").await?;
        let mut st = self.lock();
        if st.sandboxes.get(&spec.id).is_some_and(|sb| sb.running) {
            return Err(Error::state(format!(
                "sandbox {} runs: only a paused sandbox's local state can be dropped",
                spec.id
            )));
        }
        st.standby.remove(&spec.id);
        st.local.remove(&spec.id);
        Ok(())
    }

    fn standby(&self, id: &SandboxId) -> Option<Standby> {
        self.lock().standby.get(id).map(standby::Held::info)
    }

    fn standby_all(&self) -> Vec<(SandboxId, Standby)> {
        let st = self.lock();
        st.standby
            .iter()
            .map(|(id, h)| (id.clone(), h.info()))
            .collect()
    }

    async fn release_standby(&self, id: &SandboxId) -> Result<bool> {
        self.step("release_standby").await?;
        Ok(self.lock().standby.remove(id).is_some())
    }

    fn memory_survives_release(&self) -> bool {
        !self.lock().release_loses_memory
    }

    async fn housekeeping(&self) -> Vec<SandboxId> {
        standby::expire(&mut self.lock(), now_ms())
    }

    async fn snapshot(&self, id: &SandboxId, out: &Path) -> Result<Vec<Artifact>> {
        self.step("snapshot").await?;
        let arts = self.with_running(id, |sb| artifacts::write(sb, out, true))?;
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
        {
            let mut st = self.lock();
            st.sandboxes.remove(id);
            st.standby.remove(id);
            st.local.remove(id);
        }
        self.step("destroy.done").await
    }

    async fn recover(&self, spec: &SandboxSpec) -> Result<Recovered> {
        self.step("recover").await?;
        // Held in standby (a pause whose upload failed): continued.
        standby::continue_any(&mut self.lock(), &spec.id);
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
        let artifacts = match artifacts::read(&spec.manifest.workdir, out) {
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

    async fn connect_port(&self, id: &SandboxId, port: u16) -> Result<tokio::net::TcpStream> {
        self.step("connect_port").await?;
        self.with_running(id, |_| Ok(()))?;
        let target = self.lock().ports.get(&(id.clone(), port)).copied();
        let unreachable = || {
            Error::new(
                ErrorCode::PortUnreachable,
                format!("nothing is listening on port {port} in the sandbox"),
            )
        };
        let addr = target.ok_or_else(unreachable)?;
        tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|_| unreachable())
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

    async fn collect_outputs(&self, id: &SandboxId, out: &Path) -> Result<u64> {
        self.step("collect_outputs").await?;
        let sb = self.with_running(id, |sb| Ok(sb.clone()))?;
        outputs::write_tar(&sb, out)
    }
}

#[cfg(test)]
mod tests;
