//! stasis process backend: Linux namespaces (mount, pid, net, ipc, uts, cgroup), an
//! empty network namespace, cgroup limits (v2 when the host has it, else v1),
//! seccomp + dropped capabilities, and an overlayfs writable layer over a
//! read-only root filesystem; sandbox processes run in a user namespace of
//! their own, as an unprivileged host uid range (see [`userns`]).
//!
//! Shape:
//! - each sandbox has a PID 1 (built by the shim's `init` mode, see
//!   [`shim`]) whose namespaces every exec and session enters (`exec` mode);
//! - each sandbox has a supervisor ([`supervisor`]) that starts its PID 1,
//!   owns its sessions and their output, and outlives the daemon, which
//!   reattaches to it after a restart (`recover`);
//! - per-sandbox state lives in `spec.dir`: `upper/` and `work/` (overlay),
//!   `root/` (mount point, only mounted inside the sandbox's own mount
//!   namespace: nothing is ever mounted in the host's), `run/` (exec status
//!   files, the supervisor's socket);
//! - cgroups under `<hierarchy>/<cgroup_parent>/.daemon-<id>/<sandbox-id>/`
//!   (see [`cgroup`]; the daemon id names what one daemon owns beside
//!   others on the same parent, see [`ProcessConfig::daemon_id`]), one leaf
//!   per exec/session so a timeout kills a whole tree;
//! - pause = freeze the cgroup (CPU stops, memory stays) + `fs.tar` of the
//!   upper layer; processes cannot be brought into a *new* sandbox (no
//!   checkpointer), only files.
//!
//! Modules (the daemon's side): `sandbox` (the table of sandboxes and each
//! one's run state), `lifecycle` (create, pause, resume, snapshot, restore,
//! destroy, recover, orphan cleanup), `start` (PID 1 and the supervisor up
//! and down), `rootfs` (lower layer, writable layer, host-root masks,
//! `fs.tar`), `exec`, `session`, `files`, `ports` (connections to a port the sandbox serves), `probes` (capabilities and
//! `stasis doctor`), `launch` (the shim's `exec` mode), `config`, `sys`,
//! `shim_proto` (the configs and outcome the daemon, supervisor and shim
//! exchange).
//! Below them: [`cgroup`], [`disk`], [`layer`], [`net`], [`fsops`],
//! [`outputs`], [`userns`], [`supervisor`]; [`shim`] is what runs inside
//! the namespaces. This file is only the [`Backend`] impl.

pub mod cgroup;
mod config;
pub mod disk;
mod exec;
mod fileops;
mod files;
pub mod fsops;
mod hold;
mod launch;
pub mod layer;
mod lifecycle;
mod mount_api;
pub mod net;
pub mod outputs;
mod ports;
mod probes;
mod pty;
mod rootfs;
mod sandbox;
mod session;
pub mod shim;
mod shim_proto;
mod start;
mod subid;
pub mod supervisor;
mod supervisor_client;
mod sys;
pub mod userns;
mod watch;

use async_trait::async_trait;
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;

use stasis_backend::{
    Artifact, Backend, Capabilities, ExecChunk, PauseLeftovers, Recovered, SandboxSpec, Usage,
};
use stasis_core::{
    BackendKind, ExecRequest, ExecResult, FileEntry, FileEvent, FileOp, FileStat, PtySize, Result,
    SandboxId, SessionInfo, SessionOutput, SessionSpec, SnapshotId, WriteMode,
};

pub use config::{ProcessConfig, DEFAULT_FROZEN_SECS};
pub use probes::probe;
pub use rootfs::{FS_TAR, HOST_ROOT_ALLOW, HOST_ROOT_MASK};
pub use sandbox::ProcessBackend;
pub use shim::{dispatch_if_shim, shim_main, SHIM_SUBCOMMAND};

use sys::blocking;

#[async_trait]
impl Backend for ProcessBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Process
    }

    fn capabilities(&self) -> Capabilities {
        probes::capabilities(&self.cfg, &self.cg)
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<()> {
        lifecycle::build(self, spec, None).await
    }

    async fn exec(
        &self,
        id: &SandboxId,
        req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        let sb = self.get(id)?;
        exec::exec(&self.cfg, &sb, req, output).await
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        let sb = self.get(id)?;
        files::write_file(&sb, path, data, mode).await
    }

    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        let sb = self.get(id)?;
        files::read_file(&sb, path, limit).await
    }

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>> {
        let sb = self.get(id)?;
        files::list_files(&sb, path).await
    }

    async fn write_file_with(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        let sb = self.get(id)?;
        files::write_file_with(&sb, path, data, mode, how).await
    }

    async fn write_file_from(
        &self,
        id: &SandboxId,
        path: &str,
        src: &std::path::Path,
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        let sb = self.get(id)?;
        files::write_file_from(&sb, path, src, mode, how).await
    }

    async fn file_op(&self, id: &SandboxId, op: FileOp) -> Result<Option<FileStat>> {
        let sb = self.get(id)?;
        files::file_op(&sb, op).await
    }

    async fn read_range(
        &self,
        id: &SandboxId,
        path: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<u8>, u64)> {
        let sb = self.get(id)?;
        files::read_range(&sb, path, offset, len).await
    }

    async fn watch(&self, id: &SandboxId, path: &str) -> Result<mpsc::Receiver<FileEvent>> {
        let sb = self.get(id)?;
        files::watch(&sb, path).await
    }

    async fn session_start(&self, id: &SandboxId, spec: SessionSpec) -> Result<SessionInfo> {
        let sb = self.get(id)?;
        session::start(&sb, spec).await
    }

    async fn session_write(&self, id: &SandboxId, session: &str, data: &[u8]) -> Result<()> {
        let sb = self.get(id)?;
        session::write(&sb, session, data).await
    }

    /// Served by the supervisor from its buffer, also while the sandbox is
    /// frozen.
    async fn session_read(
        &self,
        id: &SandboxId,
        session: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<SessionOutput> {
        let sb = self.get(id)?;
        session::read(&sb, session, offset, wait).await
    }

    async fn session_list(&self, id: &SandboxId) -> Result<Vec<SessionInfo>> {
        let sb = self.get(id)?;
        session::list(&sb).await
    }

    async fn session_kill(
        &self,
        id: &SandboxId,
        session: &str,
        signal: stasis_core::SessionSignal,
    ) -> Result<()> {
        let sb = self.get(id)?;
        session::kill(&sb, session, signal).await
    }

    async fn connect_port(&self, id: &SandboxId, port: u16) -> Result<tokio::net::TcpStream> {
        let sb = self.get(id)?;
        ports::connect(&sb, port).await
    }

    async fn session_resize(&self, id: &SandboxId, session: &str, size: PtySize) -> Result<()> {
        let sb = self.get(id)?;
        session::resize(&sb, session, size).await
    }

    async fn session_close_input(&self, id: &SandboxId, session: &str) -> Result<()> {
        let sb = self.get(id)?;
        session::close_input(&sb, session).await
    }

    async fn pause(&self, id: &SandboxId, out: &Path, keep_memory: bool) -> Result<Vec<Artifact>> {
        lifecycle::pause(self, id, out, keep_memory, None).await
    }

    /// A memory pause whose frozen processes stay for `keep_for` (the
    /// sandbox's standby window) when that is longer than the backend's
    /// `frozen_window`.
    async fn pause_standby(
        &self,
        id: &SandboxId,
        out: &Path,
        keep_for: Duration,
    ) -> Result<Vec<Artifact>> {
        lifecycle::pause(self, id, out, true, Some(keep_for)).await
    }

    fn standby(&self, id: &SandboxId) -> Option<stasis_backend::Standby> {
        hold::standby(self, id)
    }

    fn standby_all(&self) -> Vec<(SandboxId, stasis_backend::Standby)> {
        self.holds
            .all()
            .into_iter()
            .filter_map(|(id, _)| hold::standby(self, &id).map(|s| (id, s)))
            .collect()
    }

    /// Ends the frozen processes: the memory is gone with them.
    async fn release_standby(&self, id: &SandboxId) -> Result<bool> {
        hold::release(self, id).await
    }

    /// The store holds a paused sandbox's files only: its frozen processes
    /// are its memory, and they end with the release.
    fn memory_survives_release(&self) -> bool {
        false
    }

    async fn evict(&self, spec: &SandboxSpec) -> Result<()> {
        hold::release(self, &spec.id).await.map(|_| ())
    }

    async fn housekeeping(&self) -> Vec<SandboxId> {
        hold::housekeeping(self).await
    }

    async fn resume(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        lifecycle::resume(self, spec, artifacts).await
    }

    async fn resume_needs_artifacts(&self, spec: &SandboxSpec, _snapshot: &SnapshotId) -> bool {
        lifecycle::resume_needs_artifacts(self, &spec.id).await
    }

    /// No disk to report: a paused sandbox here keeps its writable layer
    /// (`upper/`, the live tree a resume continues, frozen or not), which
    /// is its working state rather than a copy of the stored pause, and
    /// `evict` leaves it (it only ends the frozen processes, RAM that
    /// `--frozen-secs` bounds); counting it would only make the node's cap
    /// on local disk evict in vain.
    fn local_bytes(&self, _spec: &SandboxSpec) -> u64 {
        0
    }

    async fn snapshot(&self, id: &SandboxId, out: &Path) -> Result<Vec<Artifact>> {
        lifecycle::snapshot(self, id, out).await
    }

    async fn restore(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        lifecycle::restore(self, spec, artifacts).await
    }

    async fn destroy(&self, id: &SandboxId, dir: &Path) -> Result<()> {
        lifecycle::destroy(self, id, dir).await
    }

    async fn recover(&self, spec: &SandboxSpec) -> Result<Recovered> {
        lifecycle::recover(self, spec).await
    }

    /// The processes are gone after a daemon restart; the writable layer
    /// (an upper dir, or the quota filesystem's image holding it) is what a
    /// resume rebuilds from, whatever step the pause had reached.
    async fn pause_leftovers(&self, spec: &SandboxSpec, _out: &Path) -> Result<PauseLeftovers> {
        Ok(lifecycle::pause_leftovers(spec))
    }

    async fn cleanup_orphans(&self, known: &[SandboxId]) -> Result<()> {
        lifecycle::cleanup_orphans(self, known).await
    }

    async fn collect_outputs(&self, id: &SandboxId, out: &Path) -> Result<u64> {
        let sb = self.get(id)?;
        files::collect_outputs(&sb, out).await
    }

    async fn usage(&self, id: &SandboxId) -> Result<Usage> {
        let sb = self.get(id)?;
        let cg = sb.cg.clone();
        let (cpu_ns, rss_bytes, host_processes) = blocking(move || Ok(cg.usage())).await?;
        Ok(Usage {
            cpu_ns,
            rss_bytes,
            host_processes,
            // The cgroup's memory charge is already counted once per page.
            pss_bytes: rss_bytes,
        })
    }
}
