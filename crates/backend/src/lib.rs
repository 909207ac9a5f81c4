//! The one `Backend` trait. The server owns lifecycle state and persistence;
//! a backend only does what it is told to the sandbox it is told about, and
//! must make each operation safe to retry after a daemon crash (see `recover`).
//!
//! Paths given to file operations are paths *inside* the sandbox (absolute, or
//! relative to the manifest's workdir). A backend must resolve them so that no
//! path, `..` component or symlink inside the sandbox reaches anything outside it.

pub mod failpoint;
#[cfg(feature = "fake")]
pub mod fake;
pub mod fsafe;
pub mod netns;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

use stasis_core::manifest::NetworkPolicy;
use stasis_core::{
    BackendKind, ExecRequest, ExecResult, FileEntry, FileEvent, FileOp, FileStat, Manifest,
    PtySize, Result, SandboxId, SessionInfo, SessionOutput, SessionSpec, SnapshotId, Stream,
    WriteMode,
};

/// The host uids (= gids) the microVM backend's QEMU jail runs under:
/// `QEMU_JAIL_UID_BASE + 0..QEMU_JAIL_UID_COUNT`. Here so that the process
/// backend's user namespace ranges can be kept clear of it.
pub const QEMU_JAIL_UID_BASE: u32 = 0x7a00_0000;
pub const QEMU_JAIL_UID_COUNT: u32 = 65_536;

/// Everything a backend needs to build or rebuild a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub id: SandboxId,
    pub manifest: Manifest,
    /// A directory private to this sandbox, created by the server, removed by
    /// the server after `destroy`. The backend keeps all its per-sandbox state
    /// here (overlay dirs, sockets, disk overlays, pid files) so that a daemon
    /// restart can find it again.
    pub dir: PathBuf,
}

/// A chunk of streamed exec output.
#[derive(Debug, Clone)]
pub struct ExecChunk {
    pub stream: Stream,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactKind {
    /// Guest RAM and device state.
    Memory,
    /// A disk image or overlay.
    Disk,
    /// A tar of a writable filesystem layer.
    FsLayer,
    /// Backend-specific metadata (small JSON).
    Meta,
}

/// One file of a pause or snapshot, written by the backend into the directory
/// it was given. The server moves artifacts into the snapshot store and later
/// materializes them (same names) into a directory for `resume`/`restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// File name inside the artifact directory (no slashes).
    pub name: String,
    pub kind: ArtifactKind,
    pub size: u64,
    /// The file is page-addressed (a guest's RAM): the store cuts it into
    /// fixed blocks of this many bytes, so a later pause stores only the
    /// blocks that changed. None: content-defined chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<u32>,
}

/// What a backend can and cannot do: reported by the API and `stasis doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub backend: BackendKind,
    /// False when the backend cannot run on this machine; `reason` says why.
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Pause keeps process memory (processes continue on resume).
    pub pause_keeps_processes: bool,
    /// A pause frees the sandbox's RAM (it lives only in the snapshot).
    pub pause_frees_memory: bool,
    /// Restoring a snapshot into a new sandbox brings processes back, not only files.
    pub restore_keeps_processes: bool,
    /// "kvm" / "tcg" for the microVM backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<String>,
    /// Human-readable facts and limits.
    pub notes: Vec<String>,
}

/// Resource use of one sandbox, as the host sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Cumulative CPU time of everything in the sandbox (for a microVM: its QEMU), ns.
    pub cpu_ns: u64,
    /// Resident memory on the host, bytes (0 when nothing is resident).
    pub rss_bytes: u64,
    /// Processes on the host that belong to the sandbox.
    pub host_processes: u64,
    /// Proportional set size: resident memory with pages shared with other
    /// sandboxes (e.g. forks of one snapshot) divided among them, bytes.
    /// Equal to `rss_bytes` where the backend cannot tell.
    #[serde(default)]
    pub pss_bytes: u64,
}

/// A paused sandbox's compute kept stopped on this host (standby).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standby {
    /// Host RAM it holds (resident set of its stopped compute), bytes.
    pub ram_bytes: u64,
    /// When it entered standby (ms since the epoch).
    pub since_ms: i64,
    /// When it is released at the latest (ms since the epoch).
    pub until_ms: i64,
}

/// What `recover` found for a sandbox after a daemon restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovered {
    /// The sandbox runs and the backend has reattached to it.
    Running,
    /// The sandbox does not run (any leftover processes were killed). Its
    /// per-sandbox directory is intact; whether it can be resumed depends on
    /// the artifacts the server holds.
    NotRunning,
}

/// What a pause that a daemon crash interrupted left on this host, found
/// after `recover` said the sandbox's compute is gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseLeftovers {
    /// The pause's artifact directory is complete and verified (finished
    /// by the backend where a step after the compute stopped was missing):
    /// its artifacts, ready for the snapshot store.
    pub artifacts: Option<Vec<Artifact>>,
    /// The sandbox's writable filesystem layer is still on this host, so it
    /// can resume with its files (not its processes) without any snapshot.
    pub files_kept: bool,
}

/// The daemon's egress service (a resolver and a proxy that enforce a
/// sandbox's network policy from outside it), handed to a backend when it is
/// built. A backend calls `attach` once the sandbox's network namespace
/// exists and before anything in it runs (a process sandbox's own namespace;
/// a microVM's QEMU namespace, where its user networking opens sockets), and
/// `detach` when that namespace goes (pause, destroy, a failed start).
pub trait Egress: Send + Sync + 'static {
    /// Make `netns` (an open namespace file, see `netns::open`) reach the
    /// outside only through the daemon: loopback up, a default route, a
    /// firewall inside the namespace that sends every TCP connection to the
    /// proxy and every DNS query to the resolver and drops the rest, and
    /// serve `id` under `policy`. Attaching again replaces the previous
    /// attachment (a resumed sandbox gets a new namespace).
    fn attach(&self, id: &SandboxId, netns: &std::fs::File, policy: &NetworkPolicy) -> Result<()>;

    /// Stop serving `id`. Idempotent.
    fn detach(&self, id: &SandboxId);
}

fn bad_network(field: String, msg: &str) -> stasis_core::Error {
    stasis_core::Error::new(
        stasis_core::ErrorCode::InvalidManifest,
        format!("{field}: {msg}"),
    )
    .with_field(&field)
}

/// Refuse a network policy no backend can serve, before anything is built
/// or stored: allow entries on a daemon without an egress service (nothing
/// would leave), and what [`check_network_families`] refuses. At create,
/// restore, resume and a runtime change.
pub fn check_network(m: &stasis_core::Manifest, has_egress: bool) -> Result<()> {
    if !m.network.allow.is_empty() && !has_egress {
        return Err(bad_network(
            "network.allow".into(),
            "this daemon runs no egress service; sandboxes have loopback only",
        ));
    }
    check_network_families(m)
}

/// IPv6 destinations are refused on both backends: the egress proxy dials
/// IPv4, and a microVM's user networking runs IPv4 only; listed, they would
/// silently reach nothing.
pub fn check_network_families(m: &stasis_core::Manifest) -> Result<()> {
    use stasis_core::manifest::network::Entry;
    for (i, a) in m.network.allow.iter().enumerate() {
        if let Ok(Entry::Net { net, .. }) = Entry::parse(a) {
            if net.addr.is_ipv6() {
                return Err(bad_network(
                    format!("network.allow[{i}]"),
                    "sandboxes reach IPv4 destinations only (the egress proxy dials IPv4)",
                ));
            }
        }
    }
    Ok(())
}

#[async_trait]
pub trait Backend: Send + Sync + 'static {
    fn kind(&self) -> BackendKind;

    fn capabilities(&self) -> Capabilities;

    /// Build and start a new sandbox. On error, everything partially made
    /// (processes, cgroups, mounts) is removed before returning.
    async fn create(&self, spec: &SandboxSpec) -> Result<()>;

    /// Run a command to completion (or timeout, which kills its process tree).
    /// When `output` is given, stdout/stderr chunks are sent there as they
    /// arrive and the result's stdout/stderr are left empty.
    async fn exec(
        &self,
        id: &SandboxId,
        req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult>;

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()>;

    /// Whole file; `Err(payload_too_large)` when it is bigger than `limit`.
    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>>;

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>>;

    /// A write that may refuse an existing file ([`WriteMode::CreateExclusive`]
    /// answers `already_exists`). Overwrite is [`Backend::write_file`].
    async fn write_file_with(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        match how {
            WriteMode::Overwrite => self.write_file(id, path, data, mode).await,
            WriteMode::CreateExclusive => Err(stasis_core::Error::unsupported(format!(
                "the {} backend has no create-exclusive writes",
                self.kind()
            ))),
        }
    }

    /// A write whose data is the daemon's own file `src` (an upload spooled
    /// to disk): backends that can copy it a piece at a time do, so a large
    /// upload is never held in memory whole. By default it is read whole
    /// and written with [`Backend::write_file_with`].
    async fn write_file_from(
        &self,
        id: &SandboxId,
        path: &str,
        src: &std::path::Path,
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        let data = tokio::fs::read(src)
            .await
            .map_err(|e| stasis_core::Error::internal(format!("reading the upload: {e}")))?;
        self.write_file_with(id, path, &data, mode, how).await
    }

    /// Stat, remove, mkdir, rename, chown, set_meta (see [`FileOp`]); a
    /// stat answers `Some`.
    async fn file_op(&self, _id: &SandboxId, _op: FileOp) -> Result<Option<FileStat>> {
        Err(stasis_core::Error::unsupported(format!(
            "the {} backend has no file operations",
            self.kind()
        )))
    }

    /// At most `len` bytes from `offset` (fewer at the end of the file,
    /// none past it) and the file's size.
    async fn read_range(
        &self,
        _id: &SandboxId,
        _path: &str,
        _offset: u64,
        _len: u64,
    ) -> Result<(Vec<u8>, u64)> {
        Err(stasis_core::Error::unsupported(format!(
            "the {} backend has no ranged reads",
            self.kind()
        )))
    }

    /// Changes under the directory `path` (recursively) until the receiver
    /// is dropped. Paths in events are relative to `path`.
    async fn watch(&self, _id: &SandboxId, _path: &str) -> Result<mpsc::Receiver<FileEvent>> {
        Err(stasis_core::Error::unsupported(format!(
            "the {} backend cannot watch files",
            self.kind()
        )))
    }

    async fn session_start(&self, id: &SandboxId, spec: SessionSpec) -> Result<SessionInfo>;

    async fn session_write(&self, id: &SandboxId, session: &str, data: &[u8]) -> Result<()>;

    /// Output from `offset`, waiting up to `wait` when there is none yet.
    async fn session_read(
        &self,
        id: &SandboxId,
        session: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<SessionOutput>;

    async fn session_list(&self, id: &SandboxId) -> Result<Vec<SessionInfo>>;

    /// Send `signal` to the session (KILL: its whole process tree). An ended
    /// session stays readable: its output and exit status.
    async fn session_kill(
        &self,
        id: &SandboxId,
        session: &str,
        signal: stasis_core::SessionSignal,
    ) -> Result<()>;

    /// Close a session's standard input, so a command reading it to its end
    /// (`cat`, `sort`, `wc`) finishes. Not for a terminal session.
    async fn session_close_input(&self, _id: &SandboxId, _session: &str) -> Result<()> {
        Err(stasis_core::Error::unsupported(format!(
            "the {} backend cannot close a session's input",
            self.kind()
        )))
    }

    /// Change the terminal size of a session started with a PTY.
    async fn session_resize(&self, _id: &SandboxId, _session: &str, _size: PtySize) -> Result<()> {
        Err(stasis_core::Error::unsupported(format!(
            "the {} backend has no terminal sessions",
            self.kind()
        )))
    }

    /// Open a TCP connection to `port` on the sandbox's own loopback (a
    /// server the sandbox runs), for the daemon's port proxy. The only way
    /// in: nothing else on the host can reach that port. Nothing listening
    /// there: `port_unreachable` (502), the sandbox untouched.
    async fn connect_port(&self, _id: &SandboxId, _port: u16) -> Result<tokio::net::TcpStream> {
        Err(stasis_core::Error::unsupported(format!(
            "the {} backend cannot expose ports",
            self.kind()
        )))
    }

    /// Stop the sandbox's compute and write its state into `out` (an empty
    /// directory). `keep_memory` false asks for a filesystem-only pause.
    /// On error the sandbox is left running (or the error says it is lost).
    async fn pause(&self, id: &SandboxId, out: &Path, keep_memory: bool) -> Result<Vec<Artifact>>;

    /// Continue a paused sandbox from the artifacts of its last pause, which
    /// the server has placed in `artifacts` (the same names `pause` returned).
    async fn resume(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()>;

    /// Whether `resume` will read the pause artifacts of `snapshot` (the
    /// sandbox's last pause, as the server recorded it). False when the
    /// paused sandbox's state is still held on this host and is provably
    /// that snapshot's (a frozen cgroup, a microVM in standby, local files
    /// bound to it by [`Backend::pause_stored`]), so the server skips
    /// fetching them from the snapshot store.
    async fn resume_needs_artifacts(&self, _spec: &SandboxSpec, _snapshot: &SnapshotId) -> bool {
        true
    }

    /// A memory pause that keeps the stopped compute and its RAM on this host
    /// (standby) for up to `keep_for` after the artifacts are written, so a
    /// resume in that window continues the same compute. The artifacts are
    /// complete as for [`Backend::pause`]; the store stays the source of
    /// truth. A backend without standby pauses as `pause(id, out, true)`.
    async fn pause_standby(
        &self,
        id: &SandboxId,
        out: &Path,
        _keep_for: Duration,
    ) -> Result<Vec<Artifact>> {
        self.pause(id, out, true).await
    }

    /// The artifacts of the sandbox's last pause are now the store's
    /// snapshot `snapshot`: a backend that keeps local state binds it to that
    /// id (see [`Backend::resume_needs_artifacts`]). Never fails the pause.
    async fn pause_stored(&self, _spec: &SandboxSpec, _snapshot: &SnapshotId) {}

    /// What the sandbox holds in standby now (None: not in standby).
    fn standby(&self, _id: &SandboxId) -> Option<Standby> {
        None
    }

    /// Every sandbox this backend holds in standby now.
    fn standby_all(&self) -> Vec<(SandboxId, Standby)> {
        Vec::new()
    }

    /// Release a sandbox's standby (its stopped compute goes; its local
    /// state stays for a local resume). True if it was in standby.
    async fn release_standby(&self, _id: &SandboxId) -> Result<bool> {
        Ok(false)
    }

    /// Whether a paused sandbox whose standby this backend released (by
    /// [`Backend::housekeeping`], [`Backend::release_standby`] or
    /// [`Backend::evict`]) still resumes with its memory. A backend whose
    /// store copy holds the memory (a VM's RAM image) says true; one whose
    /// held compute *is* the memory (frozen processes) says false, and the
    /// server then records the pause as filesystem-only.
    fn memory_survives_release(&self) -> bool {
        true
    }

    /// Drop what this host holds of a paused sandbox beyond the store's copy
    /// (its standby, its local pause files), so that its next resume comes
    /// from the store: frees the node's RAM and disk. Idempotent.
    async fn evict(&self, _spec: &SandboxSpec) -> Result<()> {
        Ok(())
    }

    /// Disk space (allocated bytes, `st_blocks * 512`) this host holds of a
    /// paused sandbox that [`Backend::evict`] would free: its local pause
    /// files, kept RAM file, disk chain (0 when none, or when the backend
    /// keeps nothing `evict` can drop). The server calls it once a pause is
    /// stored and caches the answer to keep the node under its cap on local
    /// pause state. Cheap: a few `lstat`s, never reading the files.
    fn local_bytes(&self, _spec: &SandboxSpec) -> u64 {
        0
    }

    /// Periodic work of the backend (the server's reaper calls it on every
    /// pass): standbys past their window released, node caps enforced.
    /// Returns the sandboxes whose standby it released.
    async fn housekeeping(&self) -> Vec<SandboxId> {
        Vec::new()
    }

    /// How the last lifecycle operation on a sandbox spent its time, by
    /// phase, in milliseconds (for benches and logs; empty when unknown).
    fn op_timings(&self, _id: &SandboxId) -> std::collections::BTreeMap<String, u64> {
        Default::default()
    }

    /// Write a snapshot of a running sandbox into `out` without stopping it for
    /// longer than needed.
    async fn snapshot(&self, id: &SandboxId, out: &Path) -> Result<Vec<Artifact>>;

    /// Start a new sandbox (`spec`) from a snapshot's artifacts.
    async fn restore(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()>;

    /// Before a restore of `spec` fetches a snapshot's large artifacts:
    /// `(artifact name, file)` for those this node already keeps, verified
    /// against a hash the snapshot's small artifacts in `partial` name, and
    /// that nothing writes; the store links them into the stage instead of
    /// fetching them. Only for `restore` (a resume may write its artifacts).
    fn kept_artifacts(&self, _spec: &SandboxSpec, _partial: &Path) -> Vec<(String, PathBuf)> {
        Vec::new()
    }

    /// Files this node keeps that hold the artifacts of stored snapshot
    /// `snapshot` as they were stored (`(artifact name, file)`): a paused
    /// sandbox's local pause files bound to it. The store's scrub re-puts a
    /// damaged chunk from them, using bytes only where their keyed hash is
    /// the chunk's address. Empty when nothing is kept.
    fn local_copies(&self, _spec: &SandboxSpec, _snapshot: &SnapshotId) -> Vec<(String, PathBuf)> {
        Vec::new()
    }

    /// Kill everything of the sandbox and release host resources (cgroups,
    /// mounts, processes). Idempotent: destroying a sandbox that is already
    /// gone is Ok. Does not remove `spec.dir` (the server does).
    async fn destroy(&self, id: &SandboxId, dir: &Path) -> Result<()>;

    /// After a daemon restart: reattach to the sandbox if it still runs, or
    /// clean up what is left of it. Never leaves orphan processes.
    async fn recover(&self, spec: &SandboxSpec) -> Result<Recovered>;

    /// After a daemon restart during `pause(.., out, ..)`, once `recover`
    /// found the compute gone: finish the pause from what is on disk if that
    /// can be done without the sandbox (e.g. the memory state was saved and
    /// verifies, only moving the disk was left), and say what is left. Never
    /// returns artifacts that might not restore exactly.
    async fn pause_leftovers(&self, _spec: &SandboxSpec, _out: &Path) -> Result<PauseLeftovers> {
        Ok(PauseLeftovers::default())
    }

    /// Remove host resources (cgroups, processes, mounts) that belong to no
    /// sandbox in `known` (crash leftovers).
    async fn cleanup_orphans(&self, known: &[SandboxId]) -> Result<()>;

    async fn usage(&self, id: &SandboxId) -> Result<Usage>;

    /// Write a tar of the manifest's output directories (entries named by
    /// their sandbox path without the leading `/`) to the file `out`; returns
    /// its size. Only regular files, directories and symlinks (as links, never
    /// followed) are collected. Works on a running sandbox; a backend may also
    /// serve a paused one, else it answers `invalid_state` and the server
    /// resumes the sandbox first.
    async fn collect_outputs(&self, _id: &SandboxId, _out: &Path) -> Result<u64> {
        Err(stasis_core::Error::unsupported(format!(
            "the {} backend cannot collect outputs",
            self.kind()
        )))
    }
}
