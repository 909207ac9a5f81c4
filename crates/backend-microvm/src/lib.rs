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
//! * **Least privilege** (`jail`): each QEMU runs under its own unprivileged
//!   uid, in its own mount/pid/ipc/uts/cgroup (and, without a NIC, network)
//!   namespaces, in a minimal read-only root of bind mounts, under QEMU's
//!   seccomp sandbox, with no capabilities and no_new_privs.
//!
//! ## Accelerator (KVM findings on the development hosts, 2026-12-02)
//! The hosts are Firecracker guests themselves, and their `/dev/kvm` is not
//! hardware virtualization: the loaded modules are `kvm` + **`kvm_pvm`**
//! (PVM, "pagetable-based virtual machine": KVM without VMX/SVM, guests run
//! in user mode under shadow paging; `/proc/cpuinfo` has no `svm`/`vmx`).
//! PVM is fast only for guest kernels built for it (PVM guest support is not
//! in Debian's 6.1 kernel). With the unmodified Debian kernel:
//! * `-cpu host` aborts ("failed to set MSR 0x10a"); `-cpu host,-arch-capabilities`
//!   starts. Explicit models (`-cpu EPYC`) warn that the host lacks even
//!   `pni`/`ssse3`/`pclmulqdq`: KVM's supported CPUID is minimal.
//! * The guest crawls in early boot (`jump_label_init`'s sort, BSS clear):
//!   QMP `query-stats` shows ~1.3 million `mmu_pte_write`/s (writes to
//!   write-protected shadowed page tables) and ~1300 emulated instructions/s
//!   against ~160 exits/s: every touch of a page-table page is trapped and
//!   emulated. No console output in 25 s, agent never answers. PVH entry
//!   with the uncompressed vmlinux (which we use anyway), `nokaslr`,
//!   explicit CPU models do not change this; the DESIGN notes add that
//!   `-mem-prealloc` and hugetlbfs RAM did not either.
//! * Conclusion: KVM is unusable here without a PVM-enabled guest kernel;
//!   `probe_accelerator` boots the image under KVM for `probe_timeout` (20 s)
//!   and falls back to TCG, naming `kvm_pvm` in its reason. On a host with
//!   real VMX/SVM the same probe picks KVM.
//! * TCG (`-accel tcg -cpu max`) boots to an answering agent in 6-9 s on the
//!   loaded 2-core host. Two kernel parameters are needed for TCG on a
//!   loaded host (see `kernel_append`): `tsc_early_khz` (else PIT
//!   calibration fails and boot stalls for minutes) and `tsc=reliable`
//!   (else the clocksource watchdog switches to jiffies and the guest clock
//!   runs ~10% slow).
//!
//! A memory state is only loadable by the same accelerator/CPU model, so
//! `meta.json` records the accelerator and resume/restore use the recorded one.

mod agent;
pub mod boundary;
#[cfg(test)]
mod disk_trust_tests;
pub mod jail;
pub mod outputs;
pub mod qemu;
pub mod qmp;
pub mod util;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use stasis_agent_proto::{Reply, Request, MAX_FRAME};
use stasis_backend::{
    failpoint, Artifact, ArtifactKind, Backend, Capabilities, ExecChunk, PauseLeftovers, Recovered,
    SandboxSpec, Usage,
};
use stasis_core::{
    BackendKind, Error, ErrorCode, ExecRequest, ExecResult, FileEntry, Manifest, Result, SandboxId,
    SessionInfo, SessionOutput, SessionSpec,
};

pub use agent::AgentConn;
pub use qemu::{Accel, RamBacking};
use qmp::{MigrationStatus, Qmp};

/// Artifact file names.
pub const MEMORY_STATE: &str = "memory.state";
pub const MEMORY_RAM: &str = "memory.ram";
pub const DISK_ARTIFACT: &str = "disk.qcow2";
pub const META: &str = "meta.json";
/// meta.json format: 2 = guest RAM is the memory backend object "mem".
pub const META_FORMAT: u32 = 2;
/// Per-sandbox record of how its QEMU was started (for `recover`).
const VM_RECORD: &str = "vm.json";

/// File transfers are chunked well below the frame limit (base64 grows 4/3).
const FILE_CHUNK: usize = MAX_FRAME / 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// Probe KVM with a timed boot; TCG when it does not answer in time.
    #[default]
    Auto,
    Kvm,
    Tcg,
}

impl std::str::FromStr for AccelChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            _ => Err(Error::invalid(format!(
                "accelerator {s:?}: expected auto, kvm or tcg"
            ))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct MicrovmConfig {
    /// `qemu-system-x86_64` (looked up in PATH when relative).
    pub qemu: PathBuf,
    /// `qemu-img`.
    pub qemu_img: PathBuf,
    /// Images: `<images_dir>/<name>/{vmlinux,initrd.img,rootfs.qcow2,image.json}`.
    pub images_dir: PathBuf,
    pub accel: AccelChoice,
    /// Cold boot until the agent answers `hello`.
    pub boot_timeout: Duration,
    /// Any agent request beyond its own wait (exec timeout, session read wait).
    pub agent_timeout: Duration,
    /// An outgoing or incoming migration (pause, snapshot, resume, restore).
    pub migration_timeout: Duration,
    /// The KVM probe boot.
    pub probe_timeout: Duration,
    /// Directory holding the sandbox directories; `cleanup_orphans` only
    /// touches QEMUs whose cwd is below it. When `None`, the parents of the
    /// sandbox dirs this backend has seen are used.
    pub base_dir: Option<PathBuf>,
    /// Run guests with shared memfd RAM so a snapshot saves RAM as a plain
    /// sparse file (`memory.ram`, via the `x-ignore-shared` migration
    /// capability) and restores map it copy-on-write (`memory-backend-file,
    /// share=off`): forks share unchanged guest pages in the page cache.
    pub shared_ram: bool,
    /// TCG translation buffer per guest, MiB (None: QEMU's 1 GiB default).
    /// Bounds the per-sandbox code cache, the main private memory of a fork.
    pub tcg_tb_mb: Option<u32>,
    /// Host directories under which read-only mount sources may lie (the
    /// operator's `--allow-mount`); empty: every mount is refused.
    pub mount_roots: Vec<PathBuf>,
    /// `mkfs.ext4` (builds the read-only input disks).
    pub mkfs_ext4: PathBuf,
    /// The relay QEMU spawns per allowlisted connection, followed by the
    /// destination's ip and port.
    pub relay: Vec<String>,
    /// Run every QEMU unprivileged in its own namespaces and minimal root
    /// under its seccomp filter (see `jail`); `None` runs it as the daemon's
    /// user with the host's view (only for a daemon that is not root).
    pub jail: Option<jail::JailConfig>,
}

impl MicrovmConfig {
    pub fn new(images_dir: impl Into<PathBuf>) -> Self {
        MicrovmConfig {
            qemu: "qemu-system-x86_64".into(),
            qemu_img: "qemu-img".into(),
            images_dir: images_dir.into(),
            accel: AccelChoice::Auto,
            boot_timeout: Duration::from_secs(90),
            agent_timeout: Duration::from_secs(30),
            migration_timeout: Duration::from_secs(120),
            probe_timeout: Duration::from_secs(20),
            base_dir: None,
            shared_ram: true,
            tcg_tb_mb: Some(128),
            mount_roots: Vec::new(),
            mkfs_ext4: "mkfs.ext4".into(),
            relay: vec!["/bin/busybox".into(), "nc".into()],
            jail: Some(jail::JailConfig::default()),
        }
    }
}

/// Result of the accelerator probe (also the doctor report's accelerator part).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccelReport {
    pub accelerator: Accel,
    /// Whether a KVM boot was actually attempted.
    pub probed: bool,
    /// Milliseconds until the agent answered under KVM (when it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_boot_ms: Option<u64>,
    pub reason: String,
}

/// A resolved guest image.
#[derive(Debug, Clone)]
pub struct Image {
    pub name: String,
    pub dir: PathBuf,
    /// Identifies the image build: a saved memory state only makes sense on
    /// the same kernel/initrd/rootfs.
    pub digest: String,
    /// image.json's `kernel_cmdline` (the image builder's recommendation).
    pub cmdline: Option<String>,
    /// image.json's `kernel_cmdline_tcg`, with `{host_tsc_khz}` to fill in.
    pub cmdline_tcg: Option<String>,
}

impl Image {
    pub fn resolve(images_dir: &Path, name: Option<&str>) -> Result<Image> {
        let name = name.unwrap_or("default");
        let dir = if name.starts_with('/') {
            PathBuf::from(name)
        } else {
            if name.is_empty()
                || name.len() > 128
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                || name.starts_with('.')
            {
                return Err(Error::new(
                    ErrorCode::InvalidManifest,
                    format!("image: {name:?} is not an image name ([A-Za-z0-9._-])"),
                )
                .with_field("image"));
            }
            images_dir.join(name)
        };
        for f in ["vmlinux", "initrd.img", "rootfs.qcow2"] {
            if !dir.join(f).is_file() {
                return Err(Error::new(
                    ErrorCode::InvalidManifest,
                    format!(
                        "image: {name:?} has no {f} in {} (build it with scripts/build-guest-image.sh)",
                        dir.display()
                    ),
                )
                .with_field("image"));
            }
        }
        let digest = match std::fs::read(dir.join("image.json")) {
            Ok(b) => image_json_digest(&b).unwrap_or_else(|| blake3::hash(&b).to_hex().to_string()),
            Err(_) => {
                // No manifest: sizes of the three files.
                let mut h = blake3::Hasher::new();
                for f in ["vmlinux", "initrd.img", "rootfs.qcow2"] {
                    let len = std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
                    h.update(f.as_bytes());
                    h.update(&len.to_le_bytes());
                }
                h.finalize().to_hex().to_string()
            }
        };
        let json: Option<serde_json::Value> = std::fs::read(dir.join("image.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let field = |k: &str| {
            json.as_ref()
                .and_then(|j| j.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        Ok(Image {
            name: name.to_string(),
            dir,
            digest,
            cmdline: field("kernel_cmdline"),
            cmdline_tcg: field("kernel_cmdline_tcg"),
        })
    }
    pub fn vmlinux(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }
    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs.qcow2")
    }
}

/// The digest of what a saved guest depends on: the kernel and the root
/// filesystem (from image.json's `files.<name>.blake3`, so a rebuild that
/// changes nothing else, e.g. its timestamp, keeps snapshots loadable).
fn image_json_digest(json: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    let mut h = blake3::Hasher::new();
    for f in ["vmlinux", "rootfs.qcow2"] {
        let b = v.get("files")?.get(f)?.get("blake3")?.as_str()?;
        h.update(f.as_bytes());
        h.update(b":");
        h.update(b.as_bytes());
        h.update(b"\n");
    }
    Some(h.finalize().to_hex().to_string())
}

/// Whether a memory image saved under QEMU `saved` loads under `running`:
/// the same upstream version ("10.0.2"; Debian revisions of one upstream
/// version share its migration format).
fn same_qemu(saved: &str, running: &str) -> bool {
    saved == running && saved != "unknown"
}

/// `meta.json` of a pause or snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub format: u32,
    pub image: String,
    pub image_digest: String,
    pub memory_mb: u64,
    pub qemu_version: String,
    pub accelerator: Accel,
    pub boot_id: String,
    /// Whether guest memory was saved (false: filesystem-only pause).
    pub memory: bool,
    /// RAM travels as a separate file (`memory.ram`) instead of in the stream.
    #[serde(default)]
    pub ram_file: bool,
    /// blake3 of memory.state, checked before it is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_state_blake3: Option<String>,
    #[serde(default)]
    pub memory_state_bytes: u64,
    /// blake3 of memory.ram (when `ram_file`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_ram_blake3: Option<String>,
    pub workdir: String,
    pub created_ms: i64,
    /// The guest had a NIC (non-empty allowlist): a memory state only loads
    /// into a VM with the same devices.
    #[serde(default)]
    pub network: bool,
    /// Content digests of the read-only input disks, in drive order.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// vCPUs of the saved guest (a memory state loads only into as many).
    #[serde(default = "one_vcpu")]
    pub vcpus: u32,
}

fn one_vcpu() -> u32 {
    1
}

/// `vm.json` in the sandbox dir: what `recover` needs to rebuild its handle.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct VmRecord {
    image: String,
    image_dir: PathBuf,
    image_digest: String,
    memory_mb: u64,
    accelerator: Accel,
    boot_id: String,
    workdir: String,
    shared_ram: bool,
    #[serde(default)]
    inputs: Vec<boundary::InputDisk>,
    #[serde(default = "one_vcpu")]
    vcpus: u32,
}

/// Identity of a file version: device, inode, size, mtime, ctime.
type FileKey = (u64, u64, u64, i64, i64);

/// Timings of the last lifecycle operations, for benches and logs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpTimings {
    /// QEMU start -> agent answered (cold boot) or migration loaded + agent answered.
    pub start_ms: u64,
    /// Incoming migration load (resume/restore), part of `start_ms`.
    pub incoming_ms: u64,
    /// Resume/restore: checks + disk placement before QEMU starts.
    pub prepare_ms: u64,
    /// Resume/restore: SetIdentity/SetTime after the agent answered.
    pub finish_ms: u64,
    /// Outgoing migration (pause/snapshot).
    pub migrate_ms: u64,
    pub disk_ms: u64,
}

struct Vm {
    id: SandboxId,
    dir: PathBuf,
    image: Image,
    memory_mb: u64,
    accel: Accel,
    workdir: String,
    env: std::collections::BTreeMap<String, String>,
    manifest: Manifest,
    inputs: Vec<boundary::InputDisk>,
    vcpus: u32,
    ram: RamBacking,
    boot_id: String,
    proc: tokio::sync::Mutex<qemu::QemuProc>,
    pid: i32,
    qmp: tokio::sync::Mutex<Qmp>,
    agent: tokio::sync::RwLock<Arc<AgentConn>>,
    failed: Mutex<Option<String>>,
}

pub struct MicrovmBackend {
    config: MicrovmConfig,
    vms: Mutex<HashMap<SandboxId, Arc<Vm>>>,
    accel: tokio::sync::OnceCell<AccelReport>,
    qemu_version: String,
    seen_parents: Mutex<HashSet<PathBuf>>,
    timings: Mutex<HashMap<SandboxId, OpTimings>>,
    verified: Mutex<HashMap<FileKey, String>>,
}

enum StartKind<'a> {
    Cold,
    Incoming {
        artifacts: &'a Path,
        meta: &'a SnapshotMeta,
    },
}

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
        }
    }

    /// Resolve the accelerator now (the daemon calls this at start).
    pub async fn init(&self) -> AccelReport {
        self.accel_report().await.clone()
    }

    async fn accel_report(&self) -> &AccelReport {
        self.accel
            .get_or_init(|| probe_accelerator(&self.config))
            .await
    }

    pub async fn accelerator(&self) -> Accel {
        self.accel_report().await.accelerator
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
        use tokio::io::AsyncWriteExt;
        let vm = self.vm(id)?;
        let outputs = vm.manifest.outputs.clone();
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "outputs".into());
        let raw = out.with_file_name(format!(".{name}.guest"));
        if outputs.is_empty() {
            return outputs::filter_archive(std::io::empty(), out, &outputs).map(|r| r.0);
        }
        // The guest cannot have more to send than its disk holds.
        let limit =
            boundary::qcow2_virtual_size(&vm.dir.join(qemu::DISK)).unwrap_or(1 << 30) + (64 << 20);
        let (tx, mut rx) = mpsc::channel::<ExecChunk>(64);
        let mut file = tokio::fs::File::create(&raw).await?;
        let writer = tokio::spawn(async move {
            let (mut n, mut err, mut over) = (0u64, Vec::new(), false);
            while let Some(c) = rx.recv().await {
                match c.stream {
                    stasis_core::Stream::Stdout => {
                        n += c.data.len() as u64;
                        if n > limit {
                            over = true;
                        } else {
                            file.write_all(&c.data).await?;
                        }
                    }
                    stasis_core::Stream::Stderr => {
                        if err.len() < 4096 {
                            err.extend_from_slice(&c.data);
                        }
                    }
                }
            }
            file.flush().await?;
            Ok::<_, std::io::Error>((err, over))
        });
        let req = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), outputs::guest_command(&outputs)],
            env: Default::default(),
            cwd: Some("/".into()),
            timeout_ms: 600_000,
            stdin: None,
        };
        let r = self.exec(id, req, Some(tx)).await;
        let w = writer.await.map_err(|e| Error::internal(e.to_string()));
        let result = async {
            let (err, over) = w??;
            let r = r?;
            if over {
                return Err(outputs::too_large(limit));
            }
            if r.exit_code != Some(0) {
                return Err(Error::backend(format!(
                    "collecting outputs in the guest failed ({:?}): {}",
                    r.exit_code,
                    String::from_utf8_lossy(&err).trim()
                )));
            }
            let (raw2, out2) = (raw.clone(), out.to_path_buf());
            let (size, kept, dropped) = tokio::task::spawn_blocking(move || {
                outputs::filter_archive(std::fs::File::open(&raw2)?, &out2, &outputs)
            })
            .await
            .map_err(|e| Error::internal(e.to_string()))??;
            if dropped > 0 {
                tracing::warn!(sandbox = %id, kept, dropped, "output archive: entries outside the output dirs or of other types dropped");
            }
            Ok(size)
        }
        .await;
        let _ = std::fs::remove_file(&raw);
        result
    }

    /// `stasis doctor`'s view of this backend.
    pub async fn doctor(&self) -> serde_json::Value {
        let r = self.accel_report().await;
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

    fn vm(&self, id: &SandboxId) -> Result<Arc<Vm>> {
        let vm = self
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

    fn remember_parent(&self, dir: &Path) {
        if let Some(p) = dir.parent() {
            self.seen_parents.lock().unwrap().insert(p.to_path_buf());
        }
    }

    /// Start a QEMU in `spec.dir` (disk already in place) and bring it to a
    /// running guest with an answering agent. On error QEMU is killed.
    async fn start_vm(
        &self,
        spec: &SandboxSpec,
        image: Image,
        accel: Accel,
        memory_mb: u64,
        kind: StartKind<'_>,
        inputs: Vec<boundary::InputDisk>,
    ) -> Result<Arc<Vm>> {
        let t0 = Instant::now();
        let dir = spec.dir.clone();
        let vcpus = match &kind {
            StartKind::Cold => vcpus_for(&spec.manifest),
            StartKind::Incoming { meta, .. } => meta.vcpus.max(1),
        };
        let (incoming, ram, expect_boot) = match &kind {
            StartKind::Cold => {
                let ram = if self.config.shared_ram {
                    RamBacking::SharedMemfd
                } else {
                    RamBacking::Anonymous
                };
                (None, ram, None)
            }
            StartKind::Incoming { artifacts, meta } => {
                // QEMU reads the state through a descriptor we pass it.
                let state = std::fs::File::open(artifacts.join(MEMORY_STATE))?;
                let ram = if meta.ram_file {
                    // Keep our own link so the server may delete the artifacts.
                    let local = dir.join(MEMORY_RAM);
                    util::link_or_copy(&artifacts.join(MEMORY_RAM), &local)?;
                    RamBacking::PrivateFile(local)
                } else {
                    RamBacking::Anonymous
                };
                (Some(state), ram, Some(meta.boot_id.clone()))
            }
        };
        let launch = qemu::Launch {
            qemu: self.config.qemu.clone(),
            name: spec.id.to_string(),
            accel,
            memory_mb,
            vcpus,
            kernel: image.vmlinux(),
            initrd: image.initrd(),
            append: kernel_append(accel, &image),
            // Deferred: the capabilities are set and the state's descriptor
            // is passed over QMP first.
            incoming: incoming.as_ref().map(|_| "defer".into()),
            ram: ram.clone(),
            tcg_tb_mb: self.config.tcg_tb_mb,
            forwards: boundary::forwards(&spec.manifest),
            relay: self.config.relay.clone(),
            inputs: inputs
                .iter()
                .map(|d| (d.image.clone(), d.serial.clone()))
                .collect(),
            seccomp: self.config.jail.is_some(),
        };
        let _ = std::fs::remove_file(dir.join(qemu::CONSOLE_LOG));
        let jail = match &self.config.jail {
            Some(cfg) => Some(jail::prepare(cfg, &launch, &dir, &image.dir)?),
            None => None,
        };
        let mut proc = qemu::QemuProc::spawn(&launch, &dir, jail.as_ref().map(|j| &j.1))?;
        drop(jail);
        let pid = proc.pid;
        let fail = |why: String, proc: &mut qemu::QemuProc| {
            let why = format!("{why}{}", diagnostics(&dir, proc.alive()));
            Error::backend(why)
        };
        // QMP.
        let qmp = match connect_qmp(&dir, &mut proc).await {
            Ok(q) => q,
            Err(e) => {
                let err = fail(e.message, &mut proc);
                proc.kill().await;
                return Err(err);
            }
        };
        let mut qmp = qmp;
        let mut incoming_ms = 0;
        if let Some(state) = &incoming {
            let r = async {
                if let RamBacking::PrivateFile(_) = &ram {
                    qmp.execute(
                        "migrate-set-capabilities",
                        Some(serde_json::json!({"capabilities": [
                            {"capability": "x-ignore-shared", "state": true}
                        ]})),
                    )
                    .await?;
                }
                qmp.migrate_fd("migrate-incoming", state).await
            }
            .await;
            if let Err(e) = r {
                let err = fail(
                    format!("deferred incoming migration: {}", e.message),
                    &mut proc,
                );
                proc.kill().await;
                return Err(err);
            }
        }
        if incoming.is_some() {
            let t = Instant::now();
            let r = wait_incoming(&mut qmp, &mut proc, self.config.migration_timeout).await;
            if let Err(e) = r {
                let err = fail(format!("memory state refused: {}", e.message), &mut proc);
                proc.kill().await;
                return Err(Error::new(e.code, err.message));
            }
            incoming_ms = t.elapsed().as_millis() as u64;
            if let Err(e) = qmp.execute("cont", None).await {
                let err = fail(
                    format!("cont after incoming migration: {}", e.message),
                    &mut proc,
                );
                proc.kill().await;
                return Err(err);
            }
        }
        // Agent.
        let hello_timeout = match kind {
            StartKind::Cold => self.config.boot_timeout,
            StartKind::Incoming { .. } => self.config.agent_timeout,
        };
        let agent_path = dir.join(qemu::AGENT_SOCK);
        let (agent, boot_id) = match connect_agent(&agent_path, &mut proc, hello_timeout).await {
            Ok(x) => x,
            Err(e) => {
                let err = fail(e.message, &mut proc);
                proc.kill().await;
                return Err(Error::new(e.code, err.message));
            }
        };
        if let Some(want) = expect_boot {
            if want != boot_id {
                proc.kill().await;
                return Err(Error::backend(format!(
                    "guest rebooted instead of continuing: boot_id {boot_id} != saved {want}"
                )));
            }
        }
        let vm = Arc::new(Vm {
            id: spec.id.clone(),
            dir: dir.clone(),
            image,
            memory_mb,
            accel,
            workdir: spec.manifest.workdir.clone(),
            env: spec.manifest.env.clone(),
            manifest: spec.manifest.clone(),
            inputs,
            vcpus,
            ram,
            boot_id,
            proc: tokio::sync::Mutex::new(proc),
            pid,
            qmp: tokio::sync::Mutex::new(qmp),
            agent: tokio::sync::RwLock::new(agent),
            failed: Mutex::new(None),
        });
        self.timings.lock().unwrap().insert(
            spec.id.clone(),
            OpTimings {
                start_ms: t0.elapsed().as_millis() as u64,
                incoming_ms,
                ..Default::default()
            },
        );
        Ok(vm)
    }

    /// A pause/snapshot failed before QEMU was told to quit: remove partial
    /// artifacts and say whether the sandbox still runs. A dead QEMU marks
    /// the sandbox failed (earlier snapshots, elsewhere, are untouched).
    async fn op_failed(&self, vm: &Vm, out: &Path, e: Error, op: &str) -> Error {
        for f in [MEMORY_STATE, MEMORY_RAM, DISK_ARTIFACT, META] {
            let _ = std::fs::remove_file(out.join(f));
        }
        let alive = vm.proc.lock().await.alive();
        if alive && vm.failed.lock().unwrap().is_none() {
            let msg = if e.message.contains("still runs") || e.message.contains("not answering") {
                e.message
            } else {
                format!("{}; the sandbox still runs", e.message)
            };
            return Error::new(e.code, format!("{op}: {msg}"));
        }
        let why = format!("QEMU exited during {op}");
        if vm.failed.lock().unwrap().is_none() {
            *vm.failed.lock().unwrap() = Some(why.clone());
        }
        cleanup_dir_files(&vm.dir);
        Error::backend(format!(
            "{op}: {}; {why}: the sandbox is lost (earlier snapshots are untouched)",
            e.message
        ))
    }

    fn note_finish(&self, id: &SandboxId, since: Instant) {
        if let Some(t) = self.timings.lock().unwrap().get_mut(id) {
            t.finish_ms = since.elapsed().as_millis() as u64;
        }
    }

    fn write_record(&self, vm: &Vm) -> Result<()> {
        let rec = VmRecord {
            image: vm.image.name.clone(),
            image_dir: vm.image.dir.clone(),
            image_digest: vm.image.digest.clone(),
            memory_mb: vm.memory_mb,
            accelerator: vm.accel,
            boot_id: vm.boot_id.clone(),
            workdir: vm.workdir.clone(),
            shared_ram: vm.ram == RamBacking::SharedMemfd,
            inputs: vm.inputs.clone(),
            vcpus: vm.vcpus,
        };
        // QEMU (perhaps the guest's) runs and may write the directory: a
        // name it planted is replaced, never written through.
        stasis_backend::fsafe::write_replace(
            &vm.dir.join(VM_RECORD),
            &serde_json::to_vec_pretty(&rec)?,
            0o644,
        )
    }

    fn insert(&self, vm: Arc<Vm>) -> Result<()> {
        self.write_record(&vm)?;
        self.vms.lock().unwrap().insert(vm.id.clone(), vm);
        Ok(())
    }

    /// An agent request on a sandbox. A request not answered in time is
    /// only that: slowness (a loaded guest) is not death. Whether the guest
    /// is alive is decided by a liveness probe on the same multiplexed
    /// channel: if the agent answers it, the request fails with `timeout`
    /// and the sandbox keeps running; if not, the sandbox fails (QEMU is
    /// killed and every later call reports why).
    async fn call(
        &self,
        vm: &Vm,
        req: Request,
        events: Option<mpsc::Sender<ExecChunk>>,
        extra: Duration,
    ) -> Result<Reply> {
        let agent = self.agent_of(vm).await?;
        let r = agent
            .request(req, events, self.config.agent_timeout + extra)
            .await;
        if let Err(e) = &r {
            if e.code == ErrorCode::Timeout && e.message.starts_with("guest agent did not answer") {
                // Through `agent_of`: a channel that closed meanwhile is
                // reconnected (a rebooted guest fails there).
                let alive = match self.agent_of(vm).await {
                    Ok(a) => a.probe(&vm.boot_id, self.config.agent_timeout).await,
                    Err(e) => Err(format!("agent reconnect failed: {}", e.message)),
                };
                return match alive {
                    Ok(()) => Err(Error::timeout(format!(
                        "{}; the guest answers its liveness probe, the sandbox keeps running",
                        e.message
                    ))),
                    Err(why) => {
                        let why = format!("{}; {why}", e.message);
                        self.fail_vm(vm, &why).await;
                        Err(Error::backend(format!(
                            "sandbox {} failed: {why}; QEMU was killed",
                            vm.id
                        )))
                    }
                };
            }
        }
        r
    }

    /// The agent connection, reconnected (with a new `hello`) when it dropped.
    async fn agent_of(&self, vm: &Vm) -> Result<Arc<AgentConn>> {
        {
            let a = vm.agent.read().await;
            if !a.is_closed() {
                return Ok(a.clone());
            }
        }
        let mut a = vm.agent.write().await;
        if !a.is_closed() {
            return Ok(a.clone());
        }
        let path = vm.dir.join(qemu::AGENT_SOCK);
        let fresh = AgentConn::connect(&path, Duration::from_secs(5)).await?;
        let boot = fresh.hello(self.config.agent_timeout).await?;
        if boot != vm.boot_id {
            let msg = format!("guest rebooted (boot_id {boot}, expected {})", vm.boot_id);
            drop(a);
            self.fail_vm(vm, &msg).await;
            return Err(Error::backend(msg));
        }
        *a = fresh.clone();
        Ok(fresh)
    }

    async fn fail_vm(&self, vm: &Vm, why: &str) {
        tracing::error!(sandbox = %vm.id, "{why}; killing QEMU");
        *vm.failed.lock().unwrap() = Some(why.to_string());
        vm.proc.lock().await.kill().await;
    }

    async fn set_time(&self, vm: &Vm) -> Result<()> {
        let r = self
            .call(
                vm,
                Request::SetTime {
                    unix_nanos: util::now_unix_nanos(),
                },
                None,
                Duration::ZERO,
            )
            .await?;
        expect_ok(r)
    }

    fn resolve_path(&self, vm: &Vm, path: &str) -> Result<String> {
        if path.is_empty() || path.contains('\0') {
            return Err(Error::invalid("path must be non-empty without NUL"));
        }
        if path.starts_with('/') {
            Ok(path.to_string())
        } else {
            Ok(format!("{}/{}", vm.workdir.trim_end_matches('/'), path))
        }
    }

    /// Flush the guest, stop it and migrate its state into `out/memory.state`.
    /// Leaves the VM stopped on success; on error the VM is running again
    /// (`Ok(false)` inside the error message tells whether it still runs).
    async fn save_memory(&self, vm: &Vm, out: &Path) -> Result<(u64, bool)> {
        let t = Instant::now();
        let state = out.join(MEMORY_STATE);
        let mut qmp = vm.qmp.lock().await;
        qmp.execute("stop", None).await?;
        failpoint::hit("save.stopped");
        let ram_file = vm.ram == RamBacking::SharedMemfd;
        let r: Result<()> = async {
            // Always set it: a VM re-attached after a daemon restart may run
            // on a RAM file while recorded as anonymous, and QEMU keeps the
            // capability from its incoming migration. The stream skips RAM
            // exactly when it is saved as a file; a fork's private mapping
            // (share=off) is streamed normally.
            qmp.execute(
                "migrate-set-capabilities",
                Some(serde_json::json!({"capabilities": [
                    {"capability": "x-ignore-shared", "state": ram_file}
                ]})),
            )
            .await?;
            qmp.execute(
                "migrate-set-parameters",
                Some(serde_json::json!({"max-bandwidth": 64u64 << 30, "downtime-limit": 100000})),
            )
            .await?;
            // The daemon opens the file; QEMU writes through the descriptor.
            let file = std::fs::File::create(&state)?;
            qmp.migrate_fd("migrate", &file).await?;
            drop(file);
            let deadline = Instant::now() + self.config.migration_timeout;
            loop {
                match qmp.query_migrate().await? {
                    MigrationStatus::Completed => break,
                    MigrationStatus::Failed(e) => {
                        return Err(Error::backend(format!("migration failed: {e}")))
                    }
                    MigrationStatus::Cancelled => {
                        return Err(Error::backend("migration was cancelled"))
                    }
                    MigrationStatus::None | MigrationStatus::Active(_) => {}
                }
                if Instant::now() >= deadline {
                    let _ = qmp.execute("migrate_cancel", None).await;
                    return Err(Error::timeout(format!(
                        "migration did not complete within {} s",
                        self.config.migration_timeout.as_secs()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            failpoint::hit("save.migrated");
            if ram_file {
                // The VM is stopped: its RAM is consistent. Copy the memfd out
                // (only its allocated pages: the copy is sparse).
                let src = memfd_path(vm.pid)?;
                let dst = out.join(MEMORY_RAM);
                tokio::task::spawn_blocking(move || copy_data_extents(&src, &dst))
                    .await
                    .map_err(|e| Error::internal(e.to_string()))??;
                failpoint::hit("save.ram-copied");
            }
            Ok(())
        }
        .await;
        if let Err(e) = r {
            let _ = std::fs::remove_file(&state);
            let _ = std::fs::remove_file(out.join(MEMORY_RAM));
            let running = qmp.execute("cont", None).await.is_ok();
            return Err(Error::new(
                e.code,
                format!(
                    "{}; {}",
                    e.message,
                    if running {
                        "the sandbox still runs"
                    } else {
                        "the sandbox's QEMU is not answering"
                    }
                ),
            ));
        }
        let size = std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0);
        let ms = t.elapsed().as_millis() as u64;
        self.timings
            .lock()
            .unwrap()
            .entry(vm.id.clone())
            .or_default()
            .migrate_ms = ms;
        Ok((size, ram_file))
    }

    /// Write `out/meta.json` (atomically: a crash leaves the old file or
    /// none), with the blake3 and size of the memory files already in `out`.
    /// Needs no disk: a pause writes it while QEMU still holds the state.
    fn write_meta(&self, vm: &Vm, out: &Path, memory: bool, ram_file: bool) -> Result<()> {
        let mut meta = SnapshotMeta {
            format: META_FORMAT,
            image: vm.image.name.clone(),
            image_digest: vm.image.digest.clone(),
            memory_mb: vm.memory_mb,
            qemu_version: self.qemu_version.clone(),
            accelerator: vm.accel,
            boot_id: vm.boot_id.clone(),
            memory,
            ram_file,
            memory_state_blake3: None,
            memory_state_bytes: 0,
            memory_ram_blake3: None,
            workdir: vm.workdir.clone(),
            created_ms: stasis_core::now_ms(),
            network: !vm.manifest.network.allow.is_empty(),
            inputs: vm.inputs.iter().map(|d| d.digest.clone()).collect(),
            vcpus: vm.vcpus,
        };
        if memory {
            let (hash, size) = hash_file(&out.join(MEMORY_STATE))?;
            meta.memory_state_blake3 = Some(hash);
            meta.memory_state_bytes = size;
            if ram_file {
                meta.memory_ram_blake3 = Some(hash_file(&out.join(MEMORY_RAM))?.0);
            }
        }
        let tmp = out.join(".meta.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&meta)?)?;
        std::fs::rename(&tmp, out.join(META))?;
        Ok(())
    }

    /// The artifacts of a complete artifact directory, as its meta.json
    /// lists them (memory files, then the disk, then meta.json).
    fn artifacts_of(&self, out: &Path) -> Result<Vec<Artifact>> {
        let meta = self
            .read_meta(out)?
            .ok_or_else(|| Error::backend(format!("no {META} in {}", out.display())))?;
        let size = |name: &str| -> Result<u64> {
            std::fs::metadata(out.join(name))
                .map(|m| m.len())
                .map_err(|e| Error::backend(format!("{name} in {}: {e}", out.display())))
        };
        let mut arts = Vec::new();
        if meta.memory {
            arts.push(Artifact {
                name: MEMORY_STATE.into(),
                kind: ArtifactKind::Memory,
                size: size(MEMORY_STATE)?,
            });
            if meta.ram_file {
                arts.push(Artifact {
                    name: MEMORY_RAM.into(),
                    kind: ArtifactKind::Memory,
                    size: size(MEMORY_RAM)?,
                });
            }
        }
        arts.push(Artifact {
            name: DISK_ARTIFACT.into(),
            kind: ArtifactKind::Disk,
            size: size(DISK_ARTIFACT)?,
        });
        arts.push(Artifact {
            name: META.into(),
            kind: ArtifactKind::Meta,
            size: size(META)?,
        });
        Ok(arts)
    }

    /// A disk a jailed QEMU wrote (or an artifact made of one) is used only
    /// when its header names no external data file and exactly the backing
    /// file the daemon gave it: both the daemon's own reading of the header
    /// and `qemu-img info`'s must agree (`jail::trust`).
    async fn check_disk(&self, disk: &Path, backing: &Path) -> Result<()> {
        jail::trust::check_disk(disk, backing)?;
        jail::trust::check_disk_qemu_img(&self.config.qemu_img, disk, backing).await
    }

    /// Put the disk of an artifact directory under `dir`: `base.qcow2` (a hard
    /// link when possible) plus a fresh overlay `disk.qcow2` on it. The
    /// artifact must be an overlay on exactly `rootfs`.
    async fn import_disk(&self, artifacts: &Path, dir: &Path, rootfs: &Path) -> Result<()> {
        let src = artifacts.join(DISK_ARTIFACT);
        if !src.is_file() {
            return Err(Error::not_found(format!("{}", src.display())));
        }
        self.check_disk(&src, rootfs).await?;
        util::link_or_copy(&src, &dir.join(qemu::BASE_DISK))?;
        let _ = std::fs::remove_file(dir.join(qemu::DISK));
        qemu_img(
            &self.config.qemu_img,
            dir,
            &[
                "create",
                "-q",
                "-f",
                "qcow2",
                "-b",
                qemu::BASE_DISK,
                "-F",
                "qcow2",
                qemu::DISK,
            ],
        )
        .await
    }

    /// Write the sandbox's disk as one overlay on the image (`rootfs`) into
    /// `out`. With `consume`, the sandbox's own files may be moved (the VM is
    /// gone). The disk was written by the jailed QEMU: every layer is checked
    /// (`check_disk`) before root hands it to `qemu-img` or keeps it as an
    /// artifact; a disk that fails is left where it was.
    async fn export_disk(
        &self,
        dir: &Path,
        out: &Path,
        consume: bool,
        rootfs: &Path,
    ) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let dst = out.join(DISK_ARTIFACT);
        let base = dir.join(qemu::BASE_DISK);
        let disk = dir.join(qemu::DISK);
        // base.qcow2 is the daemon's (root's, made by `import_disk`); a
        // name the QEMU created is no base.
        let has_base = match std::fs::symlink_metadata(&base) {
            Ok(md) if md.file_type().is_file() && md.uid() == 0 => true,
            Ok(_) => {
                return Err(Error::integrity(format!(
                    "{} is not the daemon's file: refusing to export the disk",
                    base.display()
                )))
            }
            Err(_) => false,
        };
        if !has_base {
            self.check_disk(&disk, rootfs).await?;
            if consume {
                // The overlay belonged to the jailed QEMU's uid; an artifact
                // is the daemon's (later forks only read it).
                util::move_file(&disk, &dst)?;
            } else {
                let (d, o) = (disk.clone(), dst.clone());
                tokio::task::spawn_blocking(move || std::fs::copy(d, o))
                    .await
                    .map_err(|e| Error::internal(e.to_string()))??;
            }
            jail::disown(&dst)?;
            // What is kept is checked again (a QEMU that still runs may
            // have rewritten the header between the check and the copy).
            if let Err(e) = self.check_disk(&dst, rootfs).await {
                if consume {
                    let _ = util::move_file(&dst, &disk);
                } else {
                    let _ = std::fs::remove_file(&dst);
                }
                return Err(e);
            }
            return Ok(());
        }
        // Flatten overlay -> base -> image into a single overlay on the image:
        // copy base (it may be a hard link to someone else's artifact), then
        // commit the top layer into the copy.
        let tmp_base = out.join(".base.qcow2");
        let tmp_top = out.join(".top.qcow2");
        let (b, tb) = (base.clone(), tmp_base.clone());
        tokio::task::spawn_blocking(move || std::fs::copy(b, tb))
            .await
            .map_err(|e| Error::internal(e.to_string()))??;
        if consume {
            util::move_file(&disk, &tmp_top)?;
            failpoint::hit("pause.disk-top-moved");
        } else {
            std::fs::copy(&disk, &tmp_top)?;
        }
        let r = async {
            // Both layers as root will read them: the base on the image, the
            // top on the base (`import_disk` made it so), neither with an
            // external data file. The rebase then forces the top onto the
            // copy of the base.
            self.check_disk(&tmp_base, rootfs).await?;
            // The top names `base.qcow2` (`import_disk`), or `.base.qcow2`
            // when a flatten interrupted after its rebase is redone
            // (`finish_pause`): both are the daemon's names, and the rebase
            // below forces it onto the checked copy either way.
            let redone = jail::trust::qcow2_refs(&tmp_top)?
                .and_then(|r| r.backing)
                .is_some_and(|b| b == Path::new(".base.qcow2"));
            let top_backing = if redone {
                ".base.qcow2"
            } else {
                qemu::BASE_DISK
            };
            self.check_disk(&tmp_top, Path::new(top_backing)).await?;
            qemu_img(
                &self.config.qemu_img,
                out,
                &[
                    "rebase",
                    "-u",
                    "-b",
                    ".base.qcow2",
                    "-F",
                    "qcow2",
                    ".top.qcow2",
                ],
            )
            .await?;
            // -d: the top keeps its data, so a flatten interrupted at any
            // point can be redone from the files left (see `pause_leftovers`).
            qemu_img(
                &self.config.qemu_img,
                out,
                &["commit", "-q", "-d", ".top.qcow2"],
            )
            .await?;
            failpoint::hit("pause.disk-committed");
            std::fs::rename(&tmp_base, &dst)?;
            Ok(())
        }
        .await;
        if r.is_err() && consume {
            // The sandbox's only copy of its top layer: put it back.
            let _ = util::move_file(&tmp_top, &disk);
        }
        let _ = std::fs::remove_file(&tmp_top);
        let _ = std::fs::remove_file(&tmp_base);
        r
    }

    /// Check a memory artifact against meta.json's blake3 (and size). Files
    /// already verified (same inode, size, mtime, ctime) are not hashed
    /// again: N forks from one materialized snapshot hash it once.
    async fn verify(&self, path: &Path, want: &str, size: Option<u64>) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let md = std::fs::metadata(path).map_err(|e| Error::integrity(format!("{name}: {e}")))?;
        let key = (
            md.dev(),
            md.ino(),
            md.size(),
            md.mtime_nsec() ^ md.mtime() << 30,
            md.ctime_nsec() ^ md.ctime() << 30,
        );
        if self
            .verified
            .lock()
            .unwrap()
            .get(&key)
            .is_some_and(|h| h == want)
        {
            return Ok(());
        }
        let p = path.to_path_buf();
        let (got, n) = tokio::task::spawn_blocking(move || hash_file(&p))
            .await
            .map_err(|e| Error::internal(e.to_string()))??;
        if got != want || size.is_some_and(|s| s != n) {
            return Err(Error::integrity(format!(
                "{name} is corrupt or truncated ({n} bytes, blake3 {}; meta.json says {} bytes, blake3 {}): refusing to restore",
                &got[..12],
                size.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
                &want[..12.min(want.len())]
            )));
        }
        let mut v = self.verified.lock().unwrap();
        if v.len() > 1024 {
            v.clear();
        }
        v.insert(key, got);
        Ok(())
    }

    fn read_meta(&self, artifacts: &Path) -> Result<Option<SnapshotMeta>> {
        match std::fs::read(artifacts.join(META)) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::integrity(format!("meta.json undecodable: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Shared by resume and restore: validate artifacts, place the disk,
    /// start QEMU (incoming or cold).
    async fn start_from_artifacts(
        &self,
        spec: &SandboxSpec,
        artifacts: &Path,
    ) -> Result<(Arc<Vm>, bool)> {
        self.remember_parent(&spec.dir);
        let t0 = Instant::now();
        let meta = self.read_meta(artifacts)?;
        let image = Image::resolve(&self.config.images_dir, spec.manifest.image.as_deref())?;
        let has_state = artifacts.join(MEMORY_STATE).is_file();
        if has_state && meta.is_none() {
            return Err(Error::integrity(
                "memory.state without meta.json: refusing to load an unverifiable memory state",
            ));
        }
        let with_memory = has_state && meta.as_ref().is_some_and(|m| m.memory);
        if let Some(m) = &meta {
            if m.format != META_FORMAT {
                return Err(Error::unsupported(format!(
                    "snapshot format {} is not loadable by this backend (format {META_FORMAT})",
                    m.format
                )));
            }
            // A memory image loads only into the QEMU version that saved it:
            // microvm is not a versioned machine type, so nothing promises
            // that another version reads the device state (a disk-only
            // snapshot has none and is portable). Refused before anything
            // starts; the snapshot is left as it is.
            if with_memory && !same_qemu(&m.qemu_version, &self.qemu_version) {
                return Err(Error::incompatible_snapshot(format!(
                    "snapshot memory was saved by QEMU {} and this node runs QEMU {}: a memory image loads only into the QEMU version that saved it",
                    m.qemu_version, self.qemu_version
                )));
            }
            if m.image_digest != image.digest {
                return Err(Error::backend(format!(
                    "snapshot was taken on image {:?} (digest {}), but {:?} is now {}: refusing",
                    m.image,
                    &m.image_digest[..12.min(m.image_digest.len())],
                    image.name,
                    &image.digest[..12]
                )));
            }
            if with_memory {
                let want = m.memory_state_blake3.clone().unwrap_or_default();
                self.verify(
                    &artifacts.join(MEMORY_STATE),
                    &want,
                    Some(m.memory_state_bytes),
                )
                .await?;
                if m.ram_file {
                    let want = m.memory_ram_blake3.clone().unwrap_or_default();
                    self.verify(&artifacts.join(MEMORY_RAM), &want, None)
                        .await?;
                }
            }
        }
        std::fs::create_dir_all(&spec.dir)?;
        let inputs = self.prepare_inputs(spec).await?;
        if let (Some(m), true) = (&meta, with_memory) {
            check_devices(m, &spec.manifest)?;
        }
        self.import_disk(artifacts, &spec.dir, &image.rootfs())
            .await?;
        let prepare_ms = t0.elapsed().as_millis() as u64;
        let accel = match &meta {
            Some(m) if with_memory => m.accelerator,
            _ => self.accelerator().await,
        };
        let memory_mb = match &meta {
            Some(m) if with_memory => m.memory_mb,
            _ => spec.manifest.resources.memory_mb,
        };
        let r = if with_memory {
            let meta = meta.as_ref().unwrap();
            self.start_vm(
                spec,
                image,
                accel,
                memory_mb,
                StartKind::Incoming { artifacts, meta },
                inputs,
            )
            .await
        } else {
            self.start_vm(spec, image, accel, memory_mb, StartKind::Cold, inputs)
                .await
        };
        match r {
            Ok(vm) => {
                if let Some(t) = self.timings.lock().unwrap().get_mut(&spec.id) {
                    t.prepare_ms = prepare_ms;
                }
                Ok((vm, with_memory))
            }
            Err(e) => {
                cleanup_dir_files(&spec.dir);
                Err(e)
            }
        }
    }

    /// Validate the mount sources and build (or reuse) their input disks;
    /// check that egress can be relayed when the manifest allows any.
    async fn prepare_inputs(&self, spec: &SandboxSpec) -> Result<Vec<boundary::InputDisk>> {
        if !spec.manifest.network.allow.is_empty() {
            let relay = self.config.relay.first().map(PathBuf::from);
            if relay.as_deref().is_none_or(|r| which(r).is_none()) {
                return Err(Error::unsupported(format!(
                    "network.allow needs the egress relay {:?} on the host (apt: busybox-static)",
                    self.config.relay.join(" ")
                )));
            }
        }
        if spec.manifest.mounts.is_empty() {
            return Ok(Vec::new());
        }
        let (m, dir) = (spec.manifest.clone(), spec.dir.clone());
        let (roots, mkfs) = (
            self.config.mount_roots.clone(),
            self.config.mkfs_ext4.clone(),
        );
        tokio::task::spawn_blocking(move || boundary::prepare_inputs(&m, &dir, &roots, &mkfs))
            .await
            .map_err(|e| Error::internal(e.to_string()))?
    }

    /// Apply the manifest's boundaries in the guest. After a memory restore,
    /// `saved` holds the input digests the guest had mounted: disks whose
    /// content changed since are remounted.
    async fn configure(&self, vm: &Vm, grow_root: bool, saved: Option<&[String]>) -> Result<()> {
        let refresh: Vec<String> = match saved {
            Some(old) => vm
                .inputs
                .iter()
                .enumerate()
                .filter(|(i, d)| old.get(*i) != Some(&d.digest))
                .map(|(_, d)| d.serial.clone())
                .collect(),
            None => Vec::new(),
        };
        let config = boundary::guest_config(&vm.manifest, &vm.inputs, &refresh, grow_root);
        let r = self
            .call(
                vm,
                Request::Configure { config },
                None,
                Duration::from_secs(60),
            )
            .await
            .map_err(|e| {
                if e.message.contains("unknown variant `configure`") {
                    // An agent from before boundaries existed cannot apply them.
                    Error::unsupported(format!(
                        "the guest image {:?} has an agent too old to apply the manifest's boundaries; rebuild it (scripts/build-guest-image.sh)",
                        vm.image.name
                    ))
                } else {
                    e
                }
            })?;
        expect_ok(r).map_err(|e| e.context("applying the manifest in the guest"))
    }

    async fn after_cold_boot(&self, vm: &Vm) -> Result<()> {
        self.set_time(vm).await?;
        self.configure(vm, true, None).await?;
        let r = self
            .call(
                vm,
                Request::Exec {
                    req: ExecRequest {
                        argv: vec!["mkdir".into(), "-p".into(), vm.workdir.clone()],
                        env: Default::default(),
                        cwd: Some("/".into()),
                        timeout_ms: 10_000,
                        stdin: None,
                    },
                    stream: false,
                },
                None,
                Duration::from_secs(10),
            )
            .await?;
        match r {
            Reply::Exec { result } if result.exit_code == Some(0) => Ok(()),
            other => Err(Error::backend(format!(
                "cannot create workdir {}: {other:?}",
                vm.workdir
            ))),
        }
    }

    /// Remove a VM from the table and stop its QEMU (quit, then kill).
    /// Finish a pause whose QEMU is gone (a daemon killed mid-pause) from
    /// what it left: `out/meta.json` is written only once the memory state is
    /// complete, and the files must match its blake3; the disk overlay is
    /// then in `out` (done), in the sandbox dir (not moved yet) or in
    /// `out/.top.qcow2` (flatten interrupted: put back and redone; the flatten
    /// never empties it). `None` when nothing in `out` is provably complete.
    async fn finish_pause(&self, spec: &SandboxSpec, out: &Path) -> Result<Option<Vec<Artifact>>> {
        if self.vms.lock().unwrap().contains_key(&spec.id) || !out.is_dir() {
            return Ok(None);
        }
        let meta = match self.read_meta(out) {
            Ok(Some(m)) if m.format == META_FORMAT => m,
            Ok(_) => return Ok(None),
            Err(e) => {
                tracing::warn!(sandbox = %spec.id, "interrupted pause: {e}");
                return Ok(None);
            }
        };
        if meta.memory {
            let want = meta.memory_state_blake3.clone().unwrap_or_default();
            let mut r = self
                .verify(
                    &out.join(MEMORY_STATE),
                    &want,
                    Some(meta.memory_state_bytes),
                )
                .await;
            if r.is_ok() && meta.ram_file {
                let want = meta.memory_ram_blake3.clone().unwrap_or_default();
                r = self.verify(&out.join(MEMORY_RAM), &want, None).await;
            }
            if let Err(e) = r {
                tracing::warn!(sandbox = %spec.id, "interrupted pause left no usable memory state: {e}");
                return Ok(None);
            }
        }
        if !out.join(DISK_ARTIFACT).is_file() {
            let disk = spec.dir.join(qemu::DISK);
            let top = out.join(".top.qcow2");
            if !disk.is_file() && top.is_file() {
                std::fs::rename(&top, &disk)?;
            }
            if !disk.is_file() {
                tracing::warn!(sandbox = %spec.id, "interrupted pause: its disk is nowhere");
                return Ok(None);
            }
            let image = Image::resolve(&self.config.images_dir, spec.manifest.image.as_deref())?;
            self.export_disk(&spec.dir, out, true, &image.rootfs())
                .await?;
        }
        for f in [qemu::BASE_DISK, MEMORY_RAM] {
            let _ = std::fs::remove_file(spec.dir.join(f));
        }
        cleanup_dir_files(&spec.dir);
        for f in [".top.qcow2", ".base.qcow2", ".meta.json.tmp"] {
            let _ = std::fs::remove_file(out.join(f));
        }
        self.artifacts_of(out).map(Some)
    }

    async fn quit_vm(&self, vm: &Vm) {
        {
            let mut q = vm.qmp.lock().await;
            let _ = tokio::time::timeout(Duration::from_secs(2), q.execute("quit", None)).await;
        }
        let mut p = vm.proc.lock().await;
        if !p.wait_exit(Duration::from_secs(10)).await {
            p.kill().await;
        }
    }
}

/// The kernel command line. Under TCG the guest's TSC runs at the host's
/// rate, but on a loaded host the kernel's PIT calibration fails ("Unable to
/// calibrate against PIT", "Marking TSC unstable") and boot then stalls for
/// minutes in timer setup; telling it the frequency (`tsc_early_khz`) makes
/// boot independent of host load. Later the clocksource watchdog (checking
/// the TSC against jiffies, whose ticks lag when the vCPU thread is starved)
/// marks the TSC unstable and falls back to `refined-jiffies`, and the guest
/// clock then runs ~10% slow; `tsc=reliable` keeps the TSC.
pub fn kernel_append(accel: Accel, image: &Image) -> String {
    let mut a = image
        .cmdline
        .clone()
        .unwrap_or_else(|| qemu::DEFAULT_APPEND.to_string());
    if accel == Accel::Tcg {
        if let Some(khz) = host_tsc_khz() {
            let extra = image
                .cmdline_tcg
                .clone()
                .unwrap_or_else(|| "tsc_early_khz={host_tsc_khz}".into())
                .replace("{host_tsc_khz}", &khz.to_string());
            a.push(' ');
            a.push_str(&extra);
        }
        if !a.split_whitespace().any(|w| w == "tsc=reliable") {
            a.push_str(" tsc=reliable");
        }
    }
    a
}

/// The host's TSC frequency in kHz, from /proc/cpuinfo (when the TSC is
/// constant; otherwise `None`).
pub fn host_tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags = info.lines().find(|l| l.starts_with("flags"))?;
    if !flags.split_whitespace().any(|f| f == "constant_tsc") {
        return None;
    }
    let mhz: f64 = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()?;
    Some((mhz * 1000.0).round() as u64)
}

/// vCPUs for a manifest: `resources.cpus` rounded up, at most the host's
/// CPUs. (No finer CPU quota is applied to QEMU: a fraction of a core
/// becomes a whole vCPU.)
pub fn vcpus_for(m: &Manifest) -> u32 {
    let host = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    (m.resources.cpus.ceil() as u32).clamp(1, host.max(1))
}

/// A memory state loads only into a VM with the devices it was saved with.
fn check_devices(meta: &SnapshotMeta, m: &Manifest) -> Result<()> {
    let net = !m.network.allow.is_empty();
    if meta.network != net {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "network.allow: the snapshot's guest was saved {} a network interface; a memory restore needs an allowlist that is {} as well",
                if meta.network { "with" } else { "without" },
                if meta.network { "non-empty" } else { "empty" }
            ),
        )
        .with_field("network.allow"));
    }
    if meta.inputs.len() != m.mounts.len() {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "mounts: the snapshot's guest was saved with {} read-only mount(s); a memory restore needs the same number (got {})",
                meta.inputs.len(),
                m.mounts.len()
            ),
        )
        .with_field("mounts"));
    }
    Ok(())
}

fn expect_ok(r: Reply) -> Result<()> {
    match r {
        Reply::Ok => Ok(()),
        other => Err(Error::backend(format!("unexpected agent reply {other:?}"))),
    }
}

fn cleanup_dir_files(dir: &Path) {
    for f in [qemu::AGENT_SOCK, qemu::QMP_SOCK, qemu::PID_FILE] {
        let _ = std::fs::remove_file(dir.join(f));
    }
}

fn diagnostics(dir: &Path, alive: bool) -> String {
    let q = util::log_tail(&dir.join(qemu::QEMU_LOG), 600);
    let c = util::log_tail(&dir.join(qemu::CONSOLE_LOG), 600);
    let mut s = String::new();
    if !alive {
        s.push_str(" (QEMU exited)");
    }
    if !q.is_empty() {
        s.push_str(&format!("; qemu.log: {q}"));
    }
    if !c.is_empty() {
        s.push_str(&format!("; console tail: {c}"));
    }
    s
}

fn which(p: &Path) -> Option<PathBuf> {
    if p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(p))
            .find(|c| c.is_file())
    })
}

fn hash_file(path: &Path) -> Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut h = blake3::Hasher::new();
    let n = std::io::copy(&mut f, &mut h)?;
    Ok((h.finalize().to_hex().to_string(), n))
}

/// The guest RAM memfd of a QEMU, as a path that can be opened.
fn memfd_path(pid: i32) -> Result<PathBuf> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?;
    for e in fds.flatten() {
        if let Ok(target) = std::fs::read_link(e.path()) {
            if target
                .to_string_lossy()
                .starts_with("/memfd:memory-backend-memfd")
            {
                return Ok(e.path());
            }
        }
    }
    Err(Error::backend(format!("QEMU {pid} has no guest RAM memfd")))
}

/// Copy only the allocated extents of `src` (SEEK_DATA/SEEK_HOLE) into a new
/// sparse `dst` of the same length.
fn copy_data_extents(src: &Path, dst: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let i = std::fs::File::open(src)?;
    let len = i.metadata()?.len();
    let o = std::fs::File::create(dst)?;
    o.set_len(len)?;
    let fd = i.as_raw_fd();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos: i64 = 0;
    while (pos as u64) < len {
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: no more data
        }
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let end = if hole < 0 { len as i64 } else { hole };
        let mut at = data;
        while at < end {
            let n = ((end - at) as usize).min(buf.len());
            i.read_exact_at(&mut buf[..n], at as u64)?;
            o.write_all_at(&buf[..n], at as u64)?;
            at += n as i64;
        }
        pos = end;
    }
    Ok(())
}

async fn qemu_img(bin: &Path, cwd: &Path, args: &[&str]) -> Result<()> {
    let out = tokio::process::Command::new(bin)
        .args(args)
        .current_dir(cwd)
        .output()
        .await
        .map_err(|e| Error::backend(format!("cannot run {}: {e}", bin.display())))?;
    if !out.status.success() {
        return Err(Error::backend(format!(
            "qemu-img {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Connect QMP while watching the process (it may exit on a bad command line).
async fn connect_qmp(dir: &Path, proc: &mut qemu::QemuProc) -> Result<Qmp> {
    let path = dir.join(qemu::QMP_SOCK);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if !proc.alive() {
            return Err(Error::backend("QEMU exited during start"));
        }
        if util::connect_unix(&path).await.is_ok() {
            // QEMU accepts one QMP client at a time; the probe connection is
            // closed, now connect for real.
            break;
        }
        if Instant::now() >= deadline {
            return Err(Error::timeout("QEMU's QMP socket did not appear"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Qmp::connect(&path, Duration::from_secs(5), Duration::from_secs(30)).await
}

/// Wait for an incoming migration (the VM was started with `-S -incoming`).
async fn wait_incoming(qmp: &mut Qmp, proc: &mut qemu::QemuProc, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if !proc.alive() {
            return Err(Error::backend("QEMU exited while loading the memory state"));
        }
        let st = match qmp.query_migrate().await {
            Ok(s) => s,
            Err(e) => {
                if !proc.alive() {
                    return Err(Error::backend("QEMU exited while loading the memory state"));
                }
                return Err(e);
            }
        };
        match st {
            MigrationStatus::Completed => {
                // Completed incoming: the run state leaves "inmigrate".
                let rs = qmp.run_state().await?;
                if rs != "inmigrate" {
                    return Ok(());
                }
            }
            MigrationStatus::Failed(e) => return Err(Error::backend(e)),
            MigrationStatus::Cancelled => return Err(Error::backend("migration cancelled")),
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(Error::timeout(format!(
                "incoming migration did not complete within {} s",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Connect to the agent and wait for `hello`, failing early if QEMU exits.
async fn connect_agent(
    path: &Path,
    proc: &mut qemu::QemuProc,
    timeout: Duration,
) -> Result<(Arc<AgentConn>, String)> {
    let agent = AgentConn::connect(path, Duration::from_secs(10)).await?;
    let a2 = agent.clone();
    let hello = a2.hello(timeout);
    tokio::pin!(hello);
    loop {
        tokio::select! {
            r = &mut hello => {
                let boot = r.map_err(|e| {
                    if e.code == ErrorCode::Timeout {
                        Error::timeout(format!("guest agent did not answer within {} s", timeout.as_secs()))
                    } else { e }
                })?;
                return Ok((agent, boot));
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                if !proc.alive() {
                    return Err(Error::backend("QEMU exited before the guest agent answered"));
                }
            }
        }
    }
}

/// The host's KVM is PVM (software virtualization with shadow paging).
pub fn kvm_is_pvm() -> bool {
    Path::new("/sys/module/kvm_pvm").exists()
}

/// Boot the default image under KVM and see whether the agent answers within
/// `config.probe_timeout`. Honors `config.accel` (kvm/tcg skip the probe).
pub async fn probe_accelerator(config: &MicrovmConfig) -> AccelReport {
    match config.accel {
        AccelChoice::Tcg => {
            return AccelReport {
                accelerator: Accel::Tcg,
                probed: false,
                kvm_boot_ms: None,
                reason: "configured: tcg".into(),
            }
        }
        AccelChoice::Kvm => {
            return AccelReport {
                accelerator: Accel::Kvm,
                probed: false,
                kvm_boot_ms: None,
                reason: "configured: kvm".into(),
            }
        }
        AccelChoice::Auto => {}
    }
    let tcg = |reason: String| AccelReport {
        accelerator: Accel::Tcg,
        probed: true,
        kvm_boot_ms: None,
        reason,
    };
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return tcg("/dev/kvm cannot be opened".into());
    }
    let image = match Image::resolve(&config.images_dir, None) {
        Ok(i) => i,
        Err(e) => return tcg(format!("no image to probe KVM with: {}", e.message)),
    };
    let tmp = std::env::temp_dir().join(format!(
        "stasis-kvm-probe-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        return tcg(format!("probe dir: {e}"));
    }
    let t0 = Instant::now();
    let r: Result<()> = async {
        let disk_backing = image.rootfs().display().to_string();
        qemu_img(
            &config.qemu_img,
            &tmp,
            &[
                "create",
                "-q",
                "-f",
                "qcow2",
                "-b",
                &disk_backing,
                "-F",
                "qcow2",
                qemu::DISK,
            ],
        )
        .await?;
        let launch = qemu::Launch {
            qemu: config.qemu.clone(),
            name: "kvm-probe".into(),
            accel: Accel::Kvm,
            memory_mb: 256,
            vcpus: 1,
            kernel: image.vmlinux(),
            initrd: image.initrd(),
            append: kernel_append(Accel::Kvm, &image),
            incoming: None,
            ram: RamBacking::Anonymous,
            tcg_tb_mb: None,
            forwards: Vec::new(),
            relay: Vec::new(),
            inputs: Vec::new(),
            seccomp: config.jail.is_some(),
        };
        let jail = match &config.jail {
            Some(cfg) => Some(jail::prepare(cfg, &launch, &tmp, &image.dir)?),
            None => None,
        };
        let mut proc = qemu::QemuProc::spawn(&launch, &tmp, jail.as_ref().map(|j| &j.1))?;
        drop(jail);
        let r = connect_agent(&tmp.join(qemu::AGENT_SOCK), &mut proc, config.probe_timeout).await;
        let alive = proc.alive();
        proc.kill().await;
        r.map(|_| ())
            .map_err(|e| Error::backend(format!("{}{}", e.message, diagnostics(&tmp, alive))))
    }
    .await;
    let _ = std::fs::remove_dir_all(&tmp);
    match r {
        Ok(()) => AccelReport {
            accelerator: Accel::Kvm,
            probed: true,
            kvm_boot_ms: Some(t0.elapsed().as_millis() as u64),
            reason: "guest agent answered under KVM".into(),
        },
        Err(e) => tcg(format!(
            "KVM boot probe failed after {} ms: {}{}",
            t0.elapsed().as_millis(),
            e.message,
            if kvm_is_pvm() {
                " (host /dev/kvm is kvm_pvm: shadow paging without VMX/SVM; unmodified guest kernels crawl)"
            } else {
                ""
            }
        )),
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
            "egress: no NIC without an allowlist; with one, QEMU user networking with restrict=on forwards only the allowlisted ip:port (one guestfwd each)".into(),
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
        self.remember_parent(&spec.dir);
        if self.vms.lock().unwrap().contains_key(&spec.id) {
            return Err(Error::state(format!("sandbox {} already runs", spec.id)));
        }
        let image = Image::resolve(&self.config.images_dir, spec.manifest.image.as_deref())?;
        std::fs::create_dir_all(&spec.dir)?;
        let inputs = self.prepare_inputs(spec).await?;
        let backing = image.rootfs().display().to_string();
        // The disk quota: the root filesystem may grow to the image's plus
        // disk_mb (the agent grows it), never beyond.
        let size = boundary::disk_bytes(
            boundary::qcow2_virtual_size(&image.rootfs())?,
            &spec.manifest,
        )
        .to_string();
        let _ = std::fs::remove_file(spec.dir.join(qemu::DISK));
        let _ = std::fs::remove_file(spec.dir.join(qemu::BASE_DISK));
        qemu_img(
            &self.config.qemu_img,
            &spec.dir,
            &[
                "create",
                "-q",
                "-f",
                "qcow2",
                "-b",
                &backing,
                "-F",
                "qcow2",
                qemu::DISK,
                &size,
            ],
        )
        .await?;
        let accel = self.accelerator().await;
        let vm = match self
            .start_vm(
                spec,
                image,
                accel,
                spec.manifest.resources.memory_mb,
                StartKind::Cold,
                inputs,
            )
            .await
        {
            Ok(vm) => vm,
            Err(e) => {
                cleanup_dir_files(&spec.dir);
                let _ = std::fs::remove_file(spec.dir.join(qemu::DISK));
                return Err(e.context("create"));
            }
        };
        if let Err(e) = self.after_cold_boot(&vm).await {
            vm.proc.lock().await.kill().await;
            cleanup_dir_files(&spec.dir);
            return Err(e.context("create"));
        }
        self.insert(vm)
    }

    async fn exec(
        &self,
        id: &SandboxId,
        mut req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        let vm = self.vm(id)?;
        stasis_core::exec::check_argv(&req.argv)?;
        if req.cwd.is_none() {
            req.cwd = Some(vm.workdir.clone());
        }
        req.env = stasis_core::exec::merge_env([&vm.env, &req.env]);
        let extra = Duration::from_millis(req.timeout_ms);
        let stream = output.is_some();
        match self
            .call(&vm, Request::Exec { req, stream }, output, extra)
            .await?
        {
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
        let vm = self.vm(id)?;
        let path = self.resolve_path(&vm, path)?;
        let mut first = true;
        let mut chunks: Vec<&[u8]> = data.chunks(FILE_CHUNK).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        for c in chunks {
            let r = self
                .call(
                    &vm,
                    Request::WriteFile {
                        path: path.clone(),
                        data: c.to_vec(),
                        append: !first,
                        mode,
                    },
                    None,
                    Duration::ZERO,
                )
                .await?;
            expect_ok(r)?;
            first = false;
        }
        Ok(())
    }

    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        let vm = self.vm(id)?;
        let path = self.resolve_path(&vm, path)?;
        let mut out = Vec::new();
        loop {
            let want = (FILE_CHUNK as u64).min(limit.saturating_add(1) - out.len() as u64);
            let r = self
                .call(
                    &vm,
                    Request::ReadFile {
                        path: path.clone(),
                        offset: out.len() as u64,
                        limit: want.max(1),
                    },
                    None,
                    Duration::ZERO,
                )
                .await?;
            let Reply::File { data, size } = r else {
                return Err(Error::backend(format!(
                    "unexpected reply to read_file: {r:?}"
                )));
            };
            if size > limit {
                return Err(Error::new(
                    ErrorCode::PayloadTooLarge,
                    format!("{path} is {size} bytes, over the limit of {limit}"),
                ));
            }
            let got = data.len();
            out.extend_from_slice(&data);
            if got == 0 || out.len() as u64 >= size {
                return Ok(out);
            }
        }
    }

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>> {
        let vm = self.vm(id)?;
        let path = self.resolve_path(&vm, path)?;
        match self
            .call(&vm, Request::ListDir { path }, None, Duration::ZERO)
            .await?
        {
            Reply::Dir { entries } => Ok(entries),
            other => Err(Error::backend(format!("unexpected reply: {other:?}"))),
        }
    }

    async fn session_start(&self, id: &SandboxId, mut spec: SessionSpec) -> Result<SessionInfo> {
        let vm = self.vm(id)?;
        stasis_core::exec::check_argv(&spec.argv)?;
        if spec.cwd.is_none() {
            spec.cwd = Some(vm.workdir.clone());
        }
        spec.env = stasis_core::exec::merge_env([&vm.env, &spec.env]);
        match self
            .call(&vm, Request::SessionStart { spec }, None, Duration::ZERO)
            .await?
        {
            Reply::Session { info } => Ok(info),
            other => Err(Error::backend(format!("unexpected reply: {other:?}"))),
        }
    }

    async fn session_write(&self, id: &SandboxId, session: &str, data: &[u8]) -> Result<()> {
        let vm = self.vm(id)?;
        for c in data.chunks(FILE_CHUNK) {
            let r = self
                .call(
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
        let vm = self.vm(id)?;
        match self
            .call(
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
        let vm = self.vm(id)?;
        match self
            .call(&vm, Request::SessionList, None, Duration::ZERO)
            .await?
        {
            Reply::Sessions { sessions } => Ok(sessions),
            other => Err(Error::backend(format!("unexpected reply: {other:?}"))),
        }
    }

    async fn session_kill(&self, id: &SandboxId, session: &str) -> Result<()> {
        let vm = self.vm(id)?;
        let r = self
            .call(
                &vm,
                Request::SessionKill {
                    session: session.to_string(),
                },
                None,
                Duration::ZERO,
            )
            .await?;
        expect_ok(r)
    }

    async fn pause(&self, id: &SandboxId, out: &Path, keep_memory: bool) -> Result<Vec<Artifact>> {
        let vm = self.vm(id)?;
        std::fs::create_dir_all(out)?;
        let t = Instant::now();
        let saved: Result<()> = async {
            let r = self.call(&vm, Request::Sync, None, Duration::ZERO).await;
            expect_ok(r?).map_err(|e| e.context("sync"))?;
            let ram_file = if keep_memory {
                self.save_memory(&vm, out).await?.1
            } else {
                false
            };
            // meta.json, with the blake3 of the memory files, is written
            // while QEMU still holds the state: once QEMU is gone, a
            // meta.json that verifies is the proof that the memory state is
            // complete (see `pause_leftovers`).
            if let Err(e) = self.write_meta(&vm, out, keep_memory, ram_file) {
                if keep_memory {
                    let _ = vm.qmp.lock().await.execute("cont", None).await;
                }
                return Err(e);
            }
            failpoint::hit("pause.meta-written");
            Ok(())
        }
        .await;
        if let Err(e) = saved {
            return Err(self.op_failed(&vm, out, e, "pause").await);
        }
        // From here the VM goes away; the artifacts are complete once the disk
        // has been moved out.
        self.vms.lock().unwrap().remove(id);
        self.quit_vm(&vm).await;
        failpoint::hit("pause.quit");
        let td = Instant::now();
        let r = async {
            self.export_disk(&vm.dir, out, true, &vm.image.rootfs())
                .await?;
            failpoint::hit("pause.disk-exported");
            self.artifacts_of(out)
        }
        .await;
        cleanup_dir_files(&vm.dir);
        let _ = std::fs::remove_file(vm.dir.join(qemu::BASE_DISK));
        let _ = std::fs::remove_file(vm.dir.join(MEMORY_RAM));
        match r {
            Ok(arts) => {
                let mut tm = self.timings.lock().unwrap();
                let e = tm.entry(id.clone()).or_default();
                e.disk_ms = td.elapsed().as_millis() as u64;
                tracing::info!(sandbox = %id, ms = t.elapsed().as_millis() as u64, "paused");
                Ok(arts)
            }
            Err(e) => Err(e.context(
                "pause: QEMU has exited but the artifacts could not be written; the sandbox is not running",
            )),
        }
    }

    async fn resume(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        if self.vms.lock().unwrap().contains_key(&spec.id) {
            return Err(Error::state(format!("sandbox {} already runs", spec.id)));
        }
        let (vm, with_memory) = self
            .start_from_artifacts(spec, artifacts)
            .await
            .map_err(|e| e.context("resume"))?;
        let tf = Instant::now();
        let r = if with_memory {
            let saved = self.read_meta(artifacts)?.map(|m| m.inputs);
            match self.set_time(&vm).await {
                Ok(()) => self.configure(&vm, false, saved.as_deref()).await,
                Err(e) => Err(e),
            }
        } else {
            self.after_cold_boot(&vm).await
        };
        self.note_finish(&spec.id, tf);
        if let Err(e) = r {
            vm.proc.lock().await.kill().await;
            cleanup_dir_files(&spec.dir);
            return Err(e.context("resume"));
        }
        self.insert(vm)
    }

    async fn snapshot(&self, id: &SandboxId, out: &Path) -> Result<Vec<Artifact>> {
        let vm = self.vm(id)?;
        std::fs::create_dir_all(out)?;
        let saved: Result<bool> = async {
            let r = self.call(&vm, Request::Sync, None, Duration::ZERO).await;
            expect_ok(r?).map_err(|e| e.context("sync"))?;
            Ok(self.save_memory(&vm, out).await?.1)
        }
        .await;
        let ram_file = match saved {
            Ok(rf) => rf,
            Err(e) => return Err(self.op_failed(&vm, out, e, "snapshot").await),
        };
        // The VM is stopped and its block devices flushed/inactivated by the
        // completed migration: copy the disk now, then continue.
        let td = Instant::now();
        let disk = self
            .export_disk(&vm.dir, out, false, &vm.image.rootfs())
            .await;
        let cont = vm.qmp.lock().await.execute("cont", None).await;
        if let Err(e) = cont {
            self.fail_vm(&vm, &format!("cont after snapshot: {}", e.message))
                .await;
            return Err(Error::backend(format!(
                "snapshot: the VM could not be continued ({}); it was killed",
                e.message
            )));
        }
        if let Err(e) = disk {
            let _ = std::fs::remove_file(out.join(MEMORY_STATE));
            let _ = std::fs::remove_file(out.join(MEMORY_RAM));
            return Err(e.context("snapshot: disk copy failed; the sandbox still runs"));
        }
        self.timings
            .lock()
            .unwrap()
            .entry(id.clone())
            .or_default()
            .disk_ms = td.elapsed().as_millis() as u64;
        // Guest time jumped by the stop: put it right.
        let _ = self.set_time(&vm).await;
        self.write_meta(&vm, out, true, ram_file)?;
        self.artifacts_of(out)
    }

    async fn restore(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        if self.vms.lock().unwrap().contains_key(&spec.id) {
            return Err(Error::state(format!("sandbox {} already runs", spec.id)));
        }
        let (vm, with_memory) = self
            .start_from_artifacts(spec, artifacts)
            .await
            .map_err(|e| e.context("restore"))?;
        let tf = Instant::now();
        let r = async {
            // A restored guest must not share identity with its siblings: new
            // hostname (the sandbox id), machine-id and kernel entropy.
            use rand::RngCore;
            let mut entropy = vec![0u8; 64];
            rand::thread_rng().fill_bytes(&mut entropy);
            let mut mid = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut mid);
            let machine_id: String = mid.iter().map(|b| format!("{b:02x}")).collect();
            let hostname: String = spec.id.as_str().chars().take(63).collect();
            if !with_memory {
                self.after_cold_boot(&vm).await?;
            }
            let r = self
                .call(
                    &vm,
                    Request::SetIdentity {
                        hostname,
                        machine_id,
                        entropy,
                    },
                    None,
                    Duration::ZERO,
                )
                .await?;
            expect_ok(r)?;
            if with_memory {
                self.set_time(&vm).await?;
                let saved = self.read_meta(artifacts)?.map(|m| m.inputs);
                self.configure(&vm, false, saved.as_deref()).await?;
            }
            Ok::<(), Error>(())
        }
        .await;
        self.note_finish(&spec.id, tf);
        if let Err(e) = r {
            vm.proc.lock().await.kill().await;
            cleanup_dir_files(&spec.dir);
            return Err(e.context("restore"));
        }
        self.insert(vm)
    }

    async fn destroy(&self, id: &SandboxId, dir: &Path) -> Result<()> {
        let vm = self.vms.lock().unwrap().remove(id);
        if let Some(vm) = vm {
            vm.proc.lock().await.kill().await;
        }
        if let Some(mut p) = qemu::QemuProc::adopt(dir, id.as_str()) {
            p.kill().await;
        }
        cleanup_dir_files(dir);
        self.timings.lock().unwrap().remove(id);
        Ok(())
    }

    async fn recover(&self, spec: &SandboxSpec) -> Result<Recovered> {
        self.remember_parent(&spec.dir);
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
        let Some(mut proc) = qemu::QemuProc::adopt(&spec.dir, spec.id.as_str()) else {
            cleanup_dir_files(&spec.dir);
            return Ok(Recovered::NotRunning);
        };
        let r: Result<Arc<Vm>> = async {
            let rec: VmRecord = serde_json::from_slice(&std::fs::read(spec.dir.join(VM_RECORD))?)?;
            let mut qmp = Qmp::connect(
                &spec.dir.join(qemu::QMP_SOCK),
                Duration::from_secs(5),
                Duration::from_secs(10),
            )
            .await?;
            let st = qmp.run_state().await?;
            match st.as_str() {
                "running" => {}
                // A daemon killed mid-pause/snapshot left it stopped.
                "paused" | "postmigrate" => {
                    let _ = qmp.execute("migrate_cancel", None).await;
                    qmp.execute("cont", None).await?;
                }
                other => return Err(Error::backend(format!("QEMU is in state {other}"))),
            }
            let (agent, boot) = connect_agent(
                &spec.dir.join(qemu::AGENT_SOCK),
                &mut proc,
                self.config.agent_timeout,
            )
            .await?;
            if boot != rec.boot_id {
                return Err(Error::backend("guest rebooted while the daemon was away"));
            }
            let pid = proc.pid;
            Ok(Arc::new(Vm {
                id: spec.id.clone(),
                dir: spec.dir.clone(),
                image: Image {
                    name: rec.image,
                    dir: rec.image_dir,
                    digest: rec.image_digest,
                    cmdline: None,
                    cmdline_tcg: None,
                },
                memory_mb: rec.memory_mb,
                accel: rec.accelerator,
                workdir: rec.workdir,
                env: spec.manifest.env.clone(),
                manifest: spec.manifest.clone(),
                inputs: rec.inputs,
                vcpus: rec.vcpus,
                ram: if rec.shared_ram {
                    RamBacking::SharedMemfd
                } else {
                    RamBacking::Anonymous
                },
                boot_id: boot,
                proc: tokio::sync::Mutex::new(proc),
                pid,
                qmp: tokio::sync::Mutex::new(qmp),
                agent: tokio::sync::RwLock::new(agent),
                failed: Mutex::new(None),
            }))
        }
        .await;
        match r {
            Ok(vm) => {
                self.vms.lock().unwrap().insert(spec.id.clone(), vm);
                Ok(Recovered::Running)
            }
            Err(e) => {
                tracing::warn!(sandbox = %spec.id, "recover: {e}; killing QEMU");
                if let Some(mut p) = qemu::QemuProc::adopt(&spec.dir, spec.id.as_str()) {
                    p.kill().await;
                }
                cleanup_dir_files(&spec.dir);
                Ok(Recovered::NotRunning)
            }
        }
    }

    async fn pause_leftovers(&self, spec: &SandboxSpec, out: &Path) -> Result<PauseLeftovers> {
        self.finish_pause(spec, out)
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
        let pid = self.vms.lock().unwrap().get(id).map(|v| v.pid);
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

    #[test]
    fn memory_images_load_only_under_the_qemu_that_saved_them() {
        assert!(same_qemu("10.0.2", "10.0.2"));
        assert!(!same_qemu("7.2.19", "10.0.2"));
        assert!(!same_qemu("10.0.2", "10.0.3"));
        assert!(!same_qemu("unknown", "unknown"));
    }

    #[test]
    fn image_names_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["../x", "a/b", "", ".hidden"] {
            let e = Image::resolve(dir.path(), Some(bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidManifest, "{bad}");
        }
        let e = Image::resolve(dir.path(), None).unwrap_err();
        assert!(e.message.contains("vmlinux"), "{e}");
        let img = dir.path().join("default");
        std::fs::create_dir(&img).unwrap();
        for f in ["vmlinux", "initrd.img", "rootfs.qcow2"] {
            std::fs::write(img.join(f), f).unwrap();
        }
        let a = Image::resolve(dir.path(), None).unwrap();
        std::fs::write(img.join("image.json"), "{}").unwrap();
        let b = Image::resolve(dir.path(), Some("default")).unwrap();
        assert_ne!(a.digest, b.digest);
        assert_eq!(b.dir, img);
        let j = |built: &str, root: &str| {
            format!(
                r#"{{"built_at":"{built}","files":{{"vmlinux":{{"blake3":"k"}},"rootfs.qcow2":{{"blake3":"{root}"}},"initrd.img":{{"blake3":"i"}}}}}}"#
            )
        };
        let d1 = image_json_digest(j("t1", "r1").as_bytes()).unwrap();
        assert_eq!(d1, image_json_digest(j("t2", "r1").as_bytes()).unwrap());
        assert_ne!(d1, image_json_digest(j("t1", "r2").as_bytes()).unwrap());
    }

    #[test]
    fn kernel_command_line_follows_image_json() {
        let mut img = Image {
            name: "x".into(),
            dir: "/x".into(),
            digest: "d".into(),
            cmdline: None,
            cmdline_tcg: None,
        };
        assert_eq!(kernel_append(Accel::Kvm, &img), qemu::DEFAULT_APPEND);
        let tcg = kernel_append(Accel::Tcg, &img);
        assert!(
            tcg.starts_with(qemu::DEFAULT_APPEND) && tcg.contains("tsc=reliable"),
            "{tcg}"
        );
        img.cmdline = Some("console=ttyS0 quiet tsc=reliable cryptomgr.notests".into());
        img.cmdline_tcg = Some("tsc_early_khz={host_tsc_khz}".into());
        let tcg = kernel_append(Accel::Tcg, &img);
        assert_eq!(tcg.matches("tsc=reliable").count(), 1, "{tcg}");
        assert!(tcg.contains("cryptomgr.notests"), "{tcg}");
        if let Some(khz) = host_tsc_khz() {
            assert!(tcg.ends_with(&format!("tsc_early_khz={khz}")), "{tcg}");
        }
    }

    #[test]
    fn accel_choice_parses() {
        assert_eq!("tcg".parse::<AccelChoice>().unwrap(), AccelChoice::Tcg);
        assert!("xen".parse::<AccelChoice>().is_err());
    }

    #[test]
    fn extent_copy_keeps_content_and_holes() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a");
        let f = std::fs::File::create(&src).unwrap();
        let len = 8u64 << 20;
        f.set_len(len).unwrap();
        f.write_all_at(&[7u8; 5000], 4096).unwrap();
        f.write_all_at(&[9u8; 10], 6 << 20).unwrap();
        drop(f);
        let dst = dir.path().join("b");
        copy_data_extents(&src, &dst).unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(&dst).unwrap().blocks();
        assert!(
            blocks * 512 < len / 2,
            "copy is not sparse: {blocks} blocks"
        );
    }

    #[tokio::test]
    async fn tcg_config_skips_the_probe() {
        let mut c = MicrovmConfig::new("/nonexistent");
        c.accel = AccelChoice::Tcg;
        let r = probe_accelerator(&c).await;
        assert_eq!(r.accelerator, Accel::Tcg);
        assert!(!r.probed);
    }

    #[tokio::test]
    async fn auto_without_image_falls_back_to_tcg() {
        let c = MicrovmConfig::new("/nonexistent");
        let r = probe_accelerator(&c).await;
        assert_eq!(r.accelerator, Accel::Tcg);
    }

    #[tokio::test]
    async fn unknown_sandbox_calls_are_refused_and_destroy_is_idempotent() {
        let mut c = MicrovmConfig::new("/nonexistent");
        c.accel = AccelChoice::Tcg;
        let b = MicrovmBackend::new(c);
        let id = SandboxId::generate();
        let e = b.read_file(&id, "/x", 10).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidState);
        let dir = tempfile::tempdir().unwrap();
        b.destroy(&id, dir.path()).await.unwrap();
        b.destroy(&id, dir.path()).await.unwrap();
        assert_eq!(b.usage(&id).await.unwrap(), Usage::default());
        let caps = b.capabilities();
        assert!(!caps.available);
        assert_eq!(caps.accelerator.as_deref(), Some("tcg"));
    }
}
