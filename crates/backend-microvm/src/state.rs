//! What the backend holds: the table of running VMs ([`Vm`]: handles to a
//! QEMU, its QMP and agent channels, its network namespace and port
//! forwards), the ports to forward again after a pause, the per-sandbox
//! `vm.json` record that
//! `recover` rebuilds a handle from, operation timings, the verified-file
//! cache and the accelerator report (probed once).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use stasis_core::{Error, Manifest, Result, SandboxId, SnapshotId};

use crate::accel::{probe_accelerator, AccelReport};
use crate::agent::AgentConn;
use crate::boundary;
use crate::config::MicrovmConfig;
use crate::image::Image;
use crate::net::Nic;
use crate::qemu::{self, Accel, RamBacking};
use crate::qmp::Qmp;
use crate::snapshot::{one_vcpu, FileKey};

/// Per-sandbox record of how its QEMU was started (for `recover`).
pub(crate) const VM_RECORD: &str = "vm.json";

/// `vm.json` in the sandbox dir: what `recover` needs to rebuild its handle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct VmRecord {
    pub(crate) image: String,
    pub(crate) image_dir: PathBuf,
    pub(crate) image_digest: String,
    pub(crate) memory_mb: u64,
    pub(crate) accelerator: Accel,
    pub(crate) boot_id: String,
    pub(crate) workdir: String,
    /// Shared memfd RAM (QEMUs started before guests owned a RAM file).
    pub(crate) shared_ram: bool,
    /// The guest's own RAM file (`memory-backend-file,share=on`), relative
    /// to the sandbox directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ram_file: Option<PathBuf>,
    #[serde(default)]
    pub(crate) inputs: Vec<boundary::InputDisk>,
    #[serde(default = "one_vcpu")]
    pub(crate) vcpus: u32,
    /// Absent in records of QEMUs started before every guest had a NIC
    /// (then: a NIC exactly when the allowlist was non-empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) nic: Option<Nic>,
    /// Guest ports slirp forwards (see `ports`).
    #[serde(default)]
    pub(crate) ports: Vec<u16>,
}

/// Timings of the last lifecycle operations, for benches and logs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpTimings {
    /// QEMU start -> agent answered (cold boot) or migration loaded + agent answered.
    pub start_ms: u64,
    /// Incoming migration load (resume/restore), part of `start_ms`.
    pub incoming_ms: u64,
    /// QEMU's network namespace prepared, the egress service attached and
    /// port forwards re-added (part of `start_ms`, before the guest runs).
    #[serde(default)]
    pub net_ms: u64,
    /// Resume/restore: checks + disk placement before QEMU starts.
    pub prepare_ms: u64,
    /// The jail planned and its directory prepared (part of `start_ms`).
    #[serde(default)]
    pub jail_ms: u64,
    /// QEMU spawned -> QMP answered: QEMU's exec and init (part of
    /// `start_ms`; what a pre-started QEMU would save).
    #[serde(default)]
    pub qmp_ms: u64,
    /// The guest continued -> its agent answered `hello` (part of `start_ms`).
    #[serde(default)]
    pub hello_ms: u64,
    /// Resume/restore: SetIdentity/SetTime after the agent answered.
    pub finish_ms: u64,
    /// Within `finish_ms` (the requests are sent together): when the
    /// guest's clock was set, its identity (restore) and its configuration
    /// applied, counted from the first request.
    #[serde(default)]
    pub set_time_ms: u64,
    #[serde(default)]
    pub identity_ms: u64,
    #[serde(default)]
    pub configure_ms: u64,
    /// Outgoing migration (pause/snapshot).
    pub migrate_ms: u64,
    pub disk_ms: u64,
    /// Which way the last resume went: "standby", "local" or "store".
    #[serde(default)]
    pub resume_path: String,
}

impl OpTimings {
    /// The phases as a map (the `Backend::op_timings` view); the resume
    /// path as a flag `path_<name>` = 1.
    pub fn as_map(&self) -> std::collections::BTreeMap<String, u64> {
        let mut m: std::collections::BTreeMap<String, u64> = [
            ("qemu_start_ms", self.start_ms),
            ("state_load_ms", self.incoming_ms),
            ("net_ms", self.net_ms),
            ("prepare_ms", self.prepare_ms),
            ("jail_ms", self.jail_ms),
            ("qmp_ms", self.qmp_ms),
            ("agent_hello_ms", self.hello_ms),
            ("agent_finish_ms", self.finish_ms),
            ("set_time_ms", self.set_time_ms),
            ("identity_ms", self.identity_ms),
            ("configure_ms", self.configure_ms),
            ("migrate_ms", self.migrate_ms),
            ("disk_ms", self.disk_ms),
        ]
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if !self.resume_path.is_empty() {
            m.insert(format!("path_{}", self.resume_path), 1);
        }
        m
    }
}

pub(crate) struct Vm {
    pub(crate) id: SandboxId,
    pub(crate) dir: PathBuf,
    pub(crate) image: Image,
    pub(crate) memory_mb: u64,
    pub(crate) accel: Accel,
    pub(crate) workdir: String,
    pub(crate) env: std::collections::BTreeMap<String, String>,
    pub(crate) manifest: Manifest,
    pub(crate) inputs: Vec<boundary::InputDisk>,
    pub(crate) vcpus: u32,
    pub(crate) ram: RamBacking,
    pub(crate) boot_id: String,
    pub(crate) nic: Nic,
    /// QEMU's network namespace (None when QEMU runs unjailed, in the
    /// daemon's).
    pub(crate) netns: Option<std::fs::File>,
    /// Guest ports forwarded by slirp, each at `net::PORT_ADDR:<port>`.
    pub(crate) ports: Mutex<BTreeSet<u16>>,
    pub(crate) proc: tokio::sync::Mutex<qemu::QemuProc>,
    pub(crate) pid: i32,
    pub(crate) qmp: tokio::sync::Mutex<Qmp>,
    pub(crate) agent: tokio::sync::RwLock<Arc<AgentConn>>,
    pub(crate) failed: Mutex<Option<String>>,
}

/// The microVM backend (its `Backend` impl is in the crate root).
pub struct MicrovmBackend {
    pub(crate) config: MicrovmConfig,
    pub(crate) vms: Mutex<HashMap<SandboxId, Arc<Vm>>>,
    pub(crate) accel: tokio::sync::OnceCell<AccelReport>,
    pub(crate) qemu_version: String,
    pub(crate) seen_parents: Mutex<HashSet<PathBuf>>,
    pub(crate) timings: Mutex<HashMap<SandboxId, OpTimings>>,
    pub(crate) verified: Mutex<HashMap<FileKey, String>>,
    /// Forwarded guest ports of paused sandboxes, added again to the QEMU
    /// that resumes them.
    pub(crate) ports: Mutex<HashMap<SandboxId, BTreeSet<u16>>>,
    /// Paused sandboxes whose stopped QEMU is kept (see `standby`).
    pub(crate) standby: Mutex<HashMap<SandboxId, Held>>,
    /// One operation at a time on a sandbox's standby and local state: the
    /// server serializes its own calls per sandbox, but housekeeping runs
    /// beside them.
    pub(crate) ops: Mutex<HashMap<SandboxId, Arc<tokio::sync::Mutex<()>>>>,
    /// The snapshot whose local state `resume_needs_artifacts` accepted for
    /// the resume that follows it.
    pub(crate) accepted: Mutex<HashMap<SandboxId, SnapshotId>>,
}

/// A sandbox held in standby (see `standby`).
pub(crate) struct Held {
    pub(crate) vm: Arc<Vm>,
    pub(crate) since_ms: i64,
    pub(crate) until_ms: i64,
    pub(crate) ram_bytes: u64,
    /// The stored snapshot of the pause that put it here (`pause_stored`):
    /// only a resume of that snapshot may continue it.
    pub(crate) snapshot: Option<SnapshotId>,
}

impl Held {
    pub(crate) fn info(&self) -> stasis_backend::Standby {
        stasis_backend::Standby {
            ram_bytes: self.ram_bytes,
            since_ms: self.since_ms,
            until_ms: self.until_ms,
        }
    }
}

/// The lock of one sandbox's standby and local state.
pub(crate) fn op_lock(b: &MicrovmBackend, id: &SandboxId) -> Arc<tokio::sync::Mutex<()>> {
    b.ops.lock().unwrap().entry(id.clone()).or_default().clone()
}

/// The accelerator report, probing on first use.
pub(crate) async fn accel_report(b: &MicrovmBackend) -> &AccelReport {
    b.accel.get_or_init(|| probe_accelerator(&b.config)).await
}

/// The accelerator new guests boot under.
pub(crate) async fn accelerator(b: &MicrovmBackend) -> Accel {
    accel_report(b).await.accelerator
}

pub(crate) fn vm(b: &MicrovmBackend, id: &SandboxId) -> Result<Arc<Vm>> {
    let vm = b
        .vms
        .lock()
        .unwrap()
        .get(id)
        .cloned()
        .ok_or_else(|| Error::state(format!("microVM sandbox {id} is not running")))?;
    if let Some(why) = vm.failed.lock().unwrap().clone() {
        return Err(Error::backend(format!("sandbox {id} failed: {why}")));
    }
    Ok(vm)
}

pub(crate) fn remember_parent(b: &MicrovmBackend, dir: &Path) {
    if let Some(p) = dir.parent() {
        b.seen_parents.lock().unwrap().insert(p.to_path_buf());
    }
}

/// A pause or snapshot begins: the phases it records are its own only
/// (those of the start or resume before it, or of an earlier pause, go).
/// Starts and resumes record a fresh set themselves.
pub(crate) fn begin_op_timings(b: &MicrovmBackend, id: &SandboxId) {
    b.timings
        .lock()
        .unwrap()
        .insert(id.clone(), OpTimings::default());
}

pub(crate) fn note_finish(b: &MicrovmBackend, id: &SandboxId, since: Instant) {
    if let Some(t) = b.timings.lock().unwrap().get_mut(id) {
        t.finish_ms = since.elapsed().as_millis() as u64;
    }
}

pub(crate) fn write_record(vm: &Vm) -> Result<()> {
    let rec = VmRecord {
        image: vm.image.name.clone(),
        image_dir: vm.image.dir.clone(),
        image_digest: vm.image.digest.clone(),
        memory_mb: vm.memory_mb,
        accelerator: vm.accel,
        boot_id: vm.boot_id.clone(),
        workdir: vm.workdir.clone(),
        shared_ram: vm.ram == RamBacking::SharedMemfd,
        ram_file: match &vm.ram {
            RamBacking::SharedFile(p) => Some(p.clone()),
            _ => None,
        },
        inputs: vm.inputs.clone(),
        vcpus: vm.vcpus,
        nic: Some(vm.nic),
        ports: vm.ports.lock().unwrap().iter().copied().collect(),
    };
    // QEMU (perhaps the guest's) runs and may write the directory: a
    // name it planted is replaced, never written through.
    stasis_backend::fsafe::write_replace(
        &vm.dir.join(VM_RECORD),
        &serde_json::to_vec_pretty(&rec)?,
        0o644,
    )
}

pub(crate) fn insert(b: &MicrovmBackend, vm: Arc<Vm>) -> Result<()> {
    write_record(&vm)?;
    b.vms.lock().unwrap().insert(vm.id.clone(), vm);
    Ok(())
}
