//! stasis microVM backend: one QEMU `-M microvm` per sandbox, driven over QMP,
//! with the guest agent reached over virtio-serial (a chardev unix socket).
//!
//! * **Pause with memory** = agent `sync`, QMP `stop`, migrate device state and
//!   RAM to `memory.state` (the daemon opens the file and hands QEMU the
//!   descriptor: `add-fd` + `file:/dev/fdset/<id>`; the jailed QEMU can
//!   neither see the pause directory nor run `exec:`), `quit`; the disk
//!   overlay moves into the pause directory. A paused sandbox has no
//!   process, no CPU and no RAM on the host.
//! * **Resume / restore** = a new QEMU with the same command line plus
//!   `-S -incoming defer`, then `memory.state` through a passed descriptor
//!   (`migrate-incoming`); when the incoming migration has
//!   completed: `cont`, reconnect the agent (the same `boot_id` proves the
//!   guest continued rather than rebooted), `SetTime` (and for a restore into a
//!   new sandbox `SetIdentity`) before the first request is served.
//! * **Disks**: a fresh sandbox gets `disk.qcow2`, an overlay on the image's
//!   `rootfs.qcow2`. A resumed/restored sandbox hard-links the artifact's disk
//!   as `base.qcow2` (read-only) and gets a new empty overlay `disk.qcow2` on
//!   it, so N forks share one base and restore costs O(1). Pause/snapshot
//!   flatten such a chain back into one overlay on the image (`disk.qcow2` in
//!   the artifact directory), so artifacts never refer to a sandbox directory.
//! * **Processes**: QEMU runs in its own session with the sandbox dir as cwd
//!   and `-name stasis-<id>`; its pid is in `qemu.pid`. It survives a daemon
//!   SIGKILL; `recover` reattaches through `qmp.sock`/`agent.sock`.
//! * **Least privilege** (`qemu_jail`, over the `stasis_jail` crate): each QEMU runs under its own unprivileged
//!   uid, in its own mount/pid/ipc/uts/cgroup/network namespaces, in a
//!   minimal read-only root of bind mounts, under QEMU's seccomp sandbox,
//!   with no capabilities and no_new_privs.
//! * **Network** (`net`): every new guest has a virtio-net NIC on QEMU user
//!   networking inside QEMU's own network namespace, which the daemon's
//!   egress service polices (`MicrovmConfig::egress`; without one the NIC
//!   is `restrict=on` and nothing leaves). Exposed ports (`ports`): slirp
//!   forwards added at run time, reached from inside that namespace only.
//!
//! The KVM findings on the development hosts (why `auto` usually lands on
//! TCG there) are in this crate's README.md.
//!
//! Modules, one concern each: `config`, `image` (guest images, kernel
//! command line), `accel` (the accelerator probe), `snapshot` (the artifact
//! format), `disk` (the qcow2 chain), `migration` (memory state out: pause,
//! snapshot), `vm` (starting/stopping QEMU: create, resume, restore, the
//! incoming load, recover's reattach), `guest` (agent requests), `state`
//! (the VM table and records), `ports` (exposed ports); below them `qemu`,
//! `qmp`, `agent`, `qemu_jail`, `trust`, `net`, `boundary`, `outputs`, `util`. This file
//! is the `Backend` impl, delegating to them.

mod accel;
mod agent;
mod applied;
pub mod boundary;
mod config;
mod disk;
#[cfg(test)]
mod disk_trust_tests;
mod files;
mod guest;
mod image;
mod local;
mod migration;
pub mod net;
pub mod outputs;
mod ports;
pub mod qemu;
pub mod qemu_jail;
pub mod qmp;
mod resume;
mod shared_ram;
mod snapshot;
mod standby;
mod state;
pub mod trust;
pub mod util;
mod vm;

/// The jail QEMU runs in (its own crate; re-exported under the name this
/// crate always gave it).
pub use stasis_jail as jail;

use async_trait::async_trait;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

use stasis_agent_proto::{Reply, Request, MAX_FRAME};
use stasis_backend::{
    Artifact, Backend, Capabilities, ExecChunk, PauseLeftovers, Recovered, SandboxSpec, Usage,
};
use stasis_core::{
    BackendKind, Error, ExecRequest, ExecResult, FileEntry, FileEvent, FileOp, FileStat, PtySize,
    Result, SandboxId, SessionInfo, SessionOutput, SessionSpec, SnapshotId, WriteMode,
};

pub use accel::{kvm_is_pvm, probe_accelerator, AccelReport};
pub use agent::AgentConn;
pub use config::{AccelChoice, MicrovmConfig};
pub use image::{host_tsc_khz, kernel_append, Image};
pub use ports::{listening, Listening};
pub use qemu::{Accel, RamBacking};
pub use snapshot::{
    check_format, decode as decode_meta, encode as encode_meta, SnapshotMeta, DISK_ARTIFACT,
    LOADABLE_FORMATS, MEMORY_RAM, MEMORY_STATE, META, META_FORMAT,
};
pub use state::{MicrovmBackend, OpTimings};
pub use vm::vcpus_for;

use guest::expect_ok;
use qemu::cleanup_dir_files;
use state::Vm;
use util::which;

/// File transfers are chunked well below the frame limit (base64 grows 4/3).
pub(crate) const FILE_CHUNK: usize = MAX_FRAME / 4;

impl MicrovmBackend {
    /// A backend; the accelerator is resolved on first use (or `init`).
    pub fn new(config: MicrovmConfig) -> Self {
        let qemu_version = qemu::qemu_version(&config.qemu).unwrap_or_else(|| "unknown".into());
        MicrovmBackend {
            config,
            vms: Mutex::default(),
            accel: tokio::sync::OnceCell::new(),
            qemu_version,
            seen_parents: Mutex::default(),
            timings: Mutex::default(),
            verified: Mutex::default(),
            ports: Mutex::default(),
            standby: Mutex::default(),
            ops: Mutex::default(),
            accepted: Mutex::default(),
        }
    }

    /// Resolve the accelerator now (the daemon calls this at start).
    pub async fn init(&self) -> AccelReport {
        state::accel_report(self).await.clone()
    }

    pub async fn accelerator(&self) -> Accel {
        state::accel_report(self).await.accelerator
    }

    pub fn config(&self) -> &MicrovmConfig {
        &self.config
    }

    /// Timings of the last start/pause/snapshot of a sandbox.
    pub fn timings(&self, id: &SandboxId) -> OpTimings {
        self.timings
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_default()
    }

    /// Host pid of a sandbox's QEMU (for tests and benches).
    pub fn qemu_pid(&self, id: &SandboxId) -> Option<i32> {
        self.vms.lock().unwrap().get(id).map(|v| v.pid)
    }

    /// The guest ports QEMU forwards now (from QEMU itself, `info usernet`).
    pub async fn port_forwards(&self, id: &SandboxId) -> Result<Vec<u16>> {
        ports::forwards(self, id).await
    }

    /// Proportional set size of a sandbox's QEMU: shared pages (forks mapping
    /// one RAM file) are divided among their users.
    pub fn pss(&self, id: &SandboxId) -> u64 {
        self.qemu_pid(id).map(util::pss_bytes).unwrap_or(0)
    }

    /// Write a tar of the manifest's output directories to `out` (entries
    /// named by their sandbox path without the leading `/`; only regular
    /// files, directories and symlinks, see `outputs`). Returns its size.
    /// A sandbox that does not run answers `invalid_state`.
    pub async fn collect_outputs_tar(&self, id: &SandboxId, out: &Path) -> Result<u64> {
        outputs::collect_tar(self, id, out).await
    }

    /// `stasis doctor`'s view of this backend.
    pub async fn doctor(&self) -> serde_json::Value {
        let r = state::accel_report(self).await;
        let img = Image::resolve(&self.config.images_dir, None);
        serde_json::json!({
            "backend": "microvm",
            "qemu": self.config.qemu,
            "qemu_version": self.qemu_version,
            "qemu_img": which(&self.config.qemu_img).is_some(),
            "kvm_device": Path::new("/dev/kvm").exists(),
            "kvm_module": if kvm_is_pvm() { "kvm_pvm" } else if Path::new("/sys/module/kvm_amd").exists() { "kvm_amd" } else if Path::new("/sys/module/kvm_intel").exists() { "kvm_intel" } else { "none" },
            "accelerator": r,
            "images_dir": self.config.images_dir,
            "default_image": match img {
                Ok(i) => serde_json::json!({"ok": true, "dir": i.dir, "digest": i.digest}),
                Err(e) => serde_json::json!({"ok": false, "error": e.message}),
            },
            "shared_ram": self.config.shared_ram,
        })
    }
}

#[async_trait]
impl Backend for MicrovmBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Microvm
    }

    fn capabilities(&self) -> Capabilities {
        let qemu_ok = which(&self.config.qemu).is_some();
        let img_ok = which(&self.config.qemu_img).is_some();
        let image = Image::resolve(&self.config.images_dir, None);
        let reason = if !qemu_ok {
            Some(format!("{} not found", self.config.qemu.display()))
        } else if !img_ok {
            Some(format!("{} not found", self.config.qemu_img.display()))
        } else {
            image.as_ref().err().map(|e| e.message.clone())
        };
        let accelerator = match self.accel.get() {
            Some(r) => Some(r.accelerator.as_str().to_string()),
            None => match self.config.accel {
                AccelChoice::Tcg => Some("tcg".into()),
                AccelChoice::Kvm => Some("kvm".into()),
                AccelChoice::Auto => None,
            },
        };
        let mut notes = vec![
            format!("QEMU {} -M microvm, agent over virtio-serial", self.qemu_version),
            "pause saves guest RAM + device state (migration to file) and the disk overlay; no QEMU process remains".into(),
            "guest wall clock is set to the host's on every resume/restore".into(),
            "fork children share the snapshot's disk as a qcow2 backing file".into(),
            if self.config.egress.is_some() {
                "egress: a virtio-net NIC on QEMU user networking in QEMU's own network namespace, policed by the daemon's egress service (the guest's nameserver is 10.0.2.2, the namespace's 127.0.0.1:53)".into()
            } else {
                "egress: a virtio-net NIC on QEMU user networking with restrict=on: nothing leaves (no egress service)".into()
            },
            "ports: slirp forwards added at run time inside QEMU's private network namespace; only the daemon reaches them; a server must listen on 0.0.0.0 (or 10.0.2.15) in the guest, one bound to the guest's loopback only is port_unreachable".into(),
            "snapshots from before every guest had a NIC restore without network and without ports".into(),
            "read-only mounts: ext4 images of the sources attached as read-only virtio-blk drives (built at create, rebuilt when the source changes)".into(),
            "disk_mb: the writable disk's virtual size beyond the image (ENOSPC in the guest); pids: a cgroup in the guest; cpus: rounded up to whole vCPUs, no fractional quota".into(),
        ];
        if let Some(r) = self.accel.get() {
            notes.push(format!(
                "accelerator {}: {}",
                r.accelerator.as_str(),
                r.reason
            ));
        } else if self.config.accel == AccelChoice::Auto {
            notes.push("accelerator not probed yet (KVM boot probe runs on first use)".into());
        }
        if self.config.shared_ram {
            notes.push(
                "guest RAM is file-backed; forks map the snapshot's RAM copy-on-write".into(),
            );
        }
        Capabilities {
            backend: BackendKind::Microvm,
            available: reason.is_none(),
            reason,
            pause_keeps_processes: true,
            pause_frees_memory: true,
            restore_keeps_processes: true,
            accelerator,
            notes,
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<()> {
        vm::create(self, spec).await
    }

    async fn exec(
        &self,
        id: &SandboxId,
        mut req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        let vm = state::vm(self, id)?;
        stasis_core::exec::check_argv(&req.argv)?;
        if req.cwd.is_none() {
            req.cwd = Some(vm.workdir.clone());
        }
        req.env = stasis_core::exec::merge_env([&vm.env, &req.env]);
        let extra = Duration::from_millis(req.timeout_ms);
        let stream = output.is_some();
        match guest::call(self, &vm, Request::Exec { req, stream }, output, extra).await? {
            Reply::Exec { result } => Ok(result),
            other => Err(Error::backend(format!(
                "unexpected reply to exec: {other:?}"
            ))),
        }
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        files::write(self, id, path, data, mode, WriteMode::Overwrite).await
    }

    async fn write_file_with(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        files::write(self, id, path, data, mode, how).await
    }

    async fn write_file_from(
        &self,
        id: &SandboxId,
        path: &str,
        src: &std::path::Path,
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        let src = files::FileSource::open(src)?;
        files::write(self, id, path, &src, mode, how).await
    }

    async fn file_op(&self, id: &SandboxId, op: FileOp) -> Result<Option<FileStat>> {
        files::op(self, id, op).await
    }

    async fn watch(&self, id: &SandboxId, path: &str) -> Result<mpsc::Receiver<FileEvent>> {
        files::watch(self, id, path).await
    }

    async fn read_range(
        &self,
        id: &SandboxId,
        path: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<u8>, u64)> {
        files::read_range(self, id, path, offset, len).await
    }

    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        files::read_file(self, id, path, limit).await
    }

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>> {
        let vm = state::vm(self, id)?;
        let path = guest::resolve_path(&vm, path)?;
        match guest::call(self, &vm, Request::ListDir { path }, None, Duration::ZERO).await? {
            Reply::Dir { entries } => Ok(entries),
            other => Err(Error::backend(format!("unexpected reply: {other:?}"))),
        }
    }

    async fn session_start(&self, id: &SandboxId, mut spec: SessionSpec) -> Result<SessionInfo> {
        let vm = state::vm(self, id)?;
        stasis_core::exec::check_argv(&spec.argv)?;
        if spec.cwd.is_none() {
            spec.cwd = Some(vm.workdir.clone());
        }
        spec.env = stasis_core::exec::merge_env([&vm.env, &spec.env]);
        guest::session_start(self, &vm, spec).await
    }

    async fn session_resize(&self, id: &SandboxId, session: &str, size: PtySize) -> Result<()> {
        let vm = state::vm(self, id)?;
        guest::session_resize(self, &vm, session, size).await
    }

    async fn session_close_input(&self, id: &SandboxId, session: &str) -> Result<()> {
        let vm = state::vm(self, id)?;
        guest::session_close_input(self, &vm, session).await
    }

    async fn session_write(&self, id: &SandboxId, session: &str, data: &[u8]) -> Result<()> {
        let vm = state::vm(self, id)?;
        for c in data.chunks(FILE_CHUNK) {
            let r = guest::call(
                self,
                &vm,
                Request::SessionWrite {
                    session: session.to_string(),
                    data: c.to_vec(),
                },
                None,
                Duration::ZERO,
            )
            .await?;
            expect_ok(r)?;
        }
        Ok(())
    }

    async fn session_read(
        &self,
        id: &SandboxId,
        session: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<SessionOutput> {
        let vm = state::vm(self, id)?;
        match guest::call(
            self,
            &vm,
            Request::SessionRead {
                session: session.to_string(),
                offset,
                wait_ms: wait.as_millis() as u64,
            },
            None,
            wait,
        )
        .await?
        {
            Reply::SessionOutput { output } => Ok(output),
            other => Err(Error::backend(format!("unexpected reply: {other:?}"))),
        }
    }

    async fn session_list(&self, id: &SandboxId) -> Result<Vec<SessionInfo>> {
        let vm = state::vm(self, id)?;
        match guest::call(self, &vm, Request::SessionList, None, Duration::ZERO).await? {
            Reply::Sessions { sessions } => Ok(sessions),
            other => Err(Error::backend(format!("unexpected reply: {other:?}"))),
        }
    }

    async fn session_kill(
        &self,
        id: &SandboxId,
        session: &str,
        signal: stasis_core::SessionSignal,
    ) -> Result<()> {
        let vm = state::vm(self, id)?;
        guest::session_kill(self, &vm, session, signal).await
    }

    async fn connect_port(&self, id: &SandboxId, port: u16) -> Result<tokio::net::TcpStream> {
        ports::connect_port(self, id, port).await
    }

    async fn pause(&self, id: &SandboxId, out: &Path, keep_memory: bool) -> Result<Vec<Artifact>> {
        migration::pause(self, id, out, keep_memory, migration::After::Quit).await
    }

    async fn pause_standby(
        &self,
        id: &SandboxId,
        out: &Path,
        keep_for: Duration,
    ) -> Result<Vec<Artifact>> {
        let after = migration::After::Standby(keep_for);
        migration::pause(self, id, out, true, after).await
    }

    async fn pause_stored(&self, spec: &SandboxSpec, snapshot: &SnapshotId) {
        let lock = state::op_lock(self, &spec.id);
        let _op = lock.lock().await;
        standby::note_stored(self, &spec.id, snapshot);
        match local::bind(&spec.dir, snapshot) {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(sandbox = %spec.id, "local pause files incomplete: not kept for a local resume")
            }
            Err(e) => tracing::warn!(sandbox = %spec.id, "binding the local pause files: {e}"),
        }
    }

    fn standby(&self, id: &SandboxId) -> Option<stasis_backend::Standby> {
        standby::info(self, id)
    }

    fn standby_all(&self) -> Vec<(SandboxId, stasis_backend::Standby)> {
        standby::all(self)
    }

    async fn release_standby(&self, id: &SandboxId) -> Result<bool> {
        standby::release(self, id).await
    }

    async fn evict(&self, spec: &SandboxSpec) -> Result<()> {
        standby::evict(self, spec).await
    }

    fn local_bytes(&self, spec: &SandboxSpec) -> u64 {
        standby::local_bytes(self, spec)
    }

    async fn housekeeping(&self) -> Vec<SandboxId> {
        standby::housekeeping(self).await
    }

    fn op_timings(&self, id: &SandboxId) -> std::collections::BTreeMap<String, u64> {
        self.timings(id).as_map()
    }

    async fn resume(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        resume::resume(self, spec, artifacts).await
    }

    async fn resume_needs_artifacts(&self, spec: &SandboxSpec, snapshot: &SnapshotId) -> bool {
        resume::needs_artifacts(self, spec, snapshot).await
    }

    async fn snapshot(&self, id: &SandboxId, out: &Path) -> Result<Vec<Artifact>> {
        migration::snapshot(self, id, out).await
    }

    async fn restore(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        resume::restore(self, spec, artifacts).await
    }

    fn kept_artifacts(&self, spec: &SandboxSpec, partial: &Path) -> Vec<(String, PathBuf)> {
        if !self.config.shared_ram {
            return Vec::new();
        }
        shared_ram::kept_for(&spec.dir, partial)
    }

    fn local_copies(&self, spec: &SandboxSpec, snapshot: &SnapshotId) -> Vec<(String, PathBuf)> {
        local::copies(&spec.dir, snapshot)
    }

    async fn destroy(&self, id: &SandboxId, dir: &Path) -> Result<()> {
        let lock = state::op_lock(self, id);
        let _op = lock.lock().await;
        local::unbind(dir);
        let _ = std::fs::remove_file(dir.join(standby::MARKER));
        let held = standby::take(self, id).map(|h| h.vm);
        let vm = self.vms.lock().unwrap().remove(id);
        for vm in [vm, held].into_iter().flatten() {
            vm.proc.lock().await.kill().await;
        }
        if let Some(mut p) = qemu::QemuProc::adopt(dir, id.as_str()) {
            p.kill().await;
        }
        vm::detach(self, id);
        cleanup_dir_files(dir);
        self.timings.lock().unwrap().remove(id);
        self.ports.lock().unwrap().remove(id);
        self.accepted.lock().unwrap().remove(id);
        drop(_op);
        self.ops.lock().unwrap().remove(id);
        Ok(())
    }

    async fn recover(&self, spec: &SandboxSpec) -> Result<Recovered> {
        state::remember_parent(self, &spec.dir);
        // Held in standby by this daemon (a pause whose upload failed is
        // settled): continued, it runs as before the pause.
        let held = {
            let lock = state::op_lock(self, &spec.id);
            let _op = lock.lock().await;
            standby::take(self, &spec.id)
        };
        if let Some(h) = held {
            return match standby::continue_held(self, spec, h).await {
                Ok(()) => Ok(Recovered::Running),
                Err(e) => {
                    tracing::warn!(sandbox = %spec.id, "recover: {e}");
                    Ok(Recovered::NotRunning)
                }
            };
        }
        // Held in standby by a daemon that is gone: whether it is still the
        // sandbox's current state is not known here; it goes, its local
        // files stay for a resume that finds them bound.
        if spec.dir.join(standby::MARKER).exists() {
            if let Some(mut p) = qemu::QemuProc::adopt(&spec.dir, spec.id.as_str()) {
                p.kill().await;
            }
            let _ = std::fs::remove_file(spec.dir.join(standby::MARKER));
            vm::detach(self, &spec.id);
            cleanup_dir_files(&spec.dir);
            standby::disown_own_files(&spec.dir, &RamBacking::SharedFile(qemu::RAM_FILE.into()));
            return Ok(Recovered::NotRunning);
        }
        let known = self.vms.lock().unwrap().get(&spec.id).cloned();
        if let Some(vm) = known {
            let alive = vm.proc.lock().await.alive();
            if alive && vm.failed.lock().unwrap().is_none() {
                return Ok(Recovered::Running);
            }
            if !alive {
                // QEMU died under us (killed, crashed): forget the VM; the
                // pid file below finds no process and cleans up.
                self.vms.lock().unwrap().remove(&spec.id);
            }
        }
        let Some(proc) = qemu::QemuProc::adopt(&spec.dir, spec.id.as_str()) else {
            vm::detach(self, &spec.id);
            cleanup_dir_files(&spec.dir);
            return Ok(Recovered::NotRunning);
        };
        let r: Result<Arc<Vm>> = vm::reattach(self, spec, proc).await;
        match r {
            Ok(vm) => {
                let forwarded = vm.ports.lock().unwrap().clone();
                self.ports
                    .lock()
                    .unwrap()
                    .insert(spec.id.clone(), forwarded);
                self.vms.lock().unwrap().insert(spec.id.clone(), vm);
                Ok(Recovered::Running)
            }
            Err(e) => {
                tracing::warn!(sandbox = %spec.id, "recover: {e}; killing QEMU");
                if let Some(mut p) = qemu::QemuProc::adopt(&spec.dir, spec.id.as_str()) {
                    p.kill().await;
                }
                vm::detach(self, &spec.id);
                cleanup_dir_files(&spec.dir);
                Ok(Recovered::NotRunning)
            }
        }
    }

    async fn pause_leftovers(&self, spec: &SandboxSpec, out: &Path) -> Result<PauseLeftovers> {
        migration::finish_pause(self, spec, out)
            .await
            .map(|artifacts| PauseLeftovers {
                artifacts,
                files_kept: false,
            })
    }

    async fn cleanup_orphans(&self, known: &[SandboxId]) -> Result<()> {
        let known: HashSet<&str> = known.iter().map(|k| k.as_str()).collect();
        let roots: Vec<PathBuf> = match &self.config.base_dir {
            Some(b) => vec![b.clone()],
            None => self.seen_parents.lock().unwrap().iter().cloned().collect(),
        };
        for pid in util::all_pids() {
            let Some(sid) = qemu::sandbox_of(pid) else {
                continue;
            };
            if known.contains(sid.as_str()) || !util::pid_alive(pid) {
                continue;
            }
            let Some(cwd) = util::cwd(pid) else { continue };
            if !roots.iter().any(|r| cwd.starts_with(r)) {
                continue;
            }
            tracing::warn!(pid, sandbox = %sid, "killing orphan QEMU");
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        Ok(())
    }

    async fn usage(&self, id: &SandboxId) -> Result<Usage> {
        // A sandbox in standby holds its RAM (and no CPU) until released.
        let held = self.standby.lock().unwrap().get(id).map(|h| h.vm.pid);
        let pid = self.vms.lock().unwrap().get(id).map(|v| v.pid).or(held);
        Ok(match pid {
            Some(pid) if util::pid_alive(pid) => Usage {
                cpu_ns: util::cpu_ns(pid),
                rss_bytes: util::rss_bytes(pid),
                host_processes: 1,
                pss_bytes: util::pss_bytes(pid),
            },
            _ => Usage::default(),
        })
    }
    async fn collect_outputs(&self, id: &SandboxId, out: &Path) -> Result<u64> {
        self.collect_outputs_tar(id, out).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_sandbox_calls_are_refused_and_destroy_is_idempotent() {
        let mut c = MicrovmConfig::new("/nonexistent");
        c.accel = AccelChoice::Tcg;
        let b = MicrovmBackend::new(c);
        let id = SandboxId::generate();
        let e = b.read_file(&id, "/x", 10).await.unwrap_err();
        assert_eq!(e.code, stasis_core::ErrorCode::InvalidState);
        let dir = tempfile::tempdir().unwrap();
        b.destroy(&id, dir.path()).await.unwrap();
        b.destroy(&id, dir.path()).await.unwrap();
        assert_eq!(b.usage(&id).await.unwrap(), Usage::default());
        let caps = b.capabilities();
        assert!(!caps.available);
        assert_eq!(caps.accelerator.as_deref(), Some("tcg"));
    }
}
