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
//! - cgroups under `<hierarchy>/<cgroup_parent>/<sandbox-id>/` (see
//!   [`cgroup`]), one leaf per exec/session so a timeout kills a whole tree;
//! - pause = freeze the cgroup (CPU stops, memory stays) + `fs.tar` of the
//!   upper layer; processes cannot be brought into a *new* sandbox (no
//!   checkpointer), only files.

pub mod cgroup;
pub mod disk;
pub mod fsops;
pub mod layer;
pub mod net;
pub mod outputs;
pub mod shim;
mod subid;
pub mod supervisor;
mod supervisor_client;
pub mod userns;

use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::mpsc;

use stasis_backend::{
    Artifact, ArtifactKind, Backend, Capabilities, ExecChunk, PauseLeftovers, Recovered,
    SandboxSpec, Usage,
};
use stasis_core::{
    BackendKind, Error, ErrorCode, ExecRequest, ExecResult, FileEntry, Result, SandboxId,
    SessionInfo, SessionOutput, SessionSpec, Stream,
};

use cgroup::{Cgroups, SandboxCgroup};
use shim::{ExecConfig, ExecStatus, InitConfig};
use stasis_agent_proto::{Reply, Request};
use supervisor_client::SupervisorHandle;

pub use shim::{dispatch_if_shim, shim_main, SHIM_SUBCOMMAND};

/// Name of the writable-layer artifact of pause/snapshot.
pub const FS_TAR: &str = "fs.tar";

/// Top-level directories of the host's `/` a sandbox sees when it has no
/// image of its own. Every other top-level entry (/root, /home, /tmp, /work,
/// /srv, /mnt, ...) is masked by an opaque dir / whiteout in the upper layer.
pub const HOST_ROOT_ALLOW: [&str; 10] = [
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt", "var",
];

/// Host secrets and logs inside the allowed directories, masked too (files
/// become whiteouts, directories empty opaque directories).
pub const HOST_ROOT_MASK: [&str; 12] = [
    "etc/shadow",
    "etc/shadow-",
    "etc/gshadow",
    "etc/gshadow-",
    "etc/ssh",
    "etc/ssl/private",
    "etc/sudoers.d",
    "var/log",
    "var/mail",
    "var/spool",
    "var/backups",
    "var/lib/stasis",
];

#[derive(Debug, Clone)]
pub struct ProcessConfig {
    /// Program run as the shim, followed by `shim_args`, then `<mode> <config>`.
    /// Default: the current executable with `["__process-shim"]` (the
    /// `stasis` binary dispatches that to [`shim_main`]).
    pub shim_program: PathBuf,
    pub shim_args: Vec<String>,
    /// Name of this backend's parent cgroup in each hierarchy.
    pub cgroup_parent: String,
    /// Exec output kept per stream; beyond it `truncated` is set.
    pub capture_limit: usize,
    /// Bytes of output kept per session (oldest dropped first).
    pub session_buffer: usize,
    /// Host paths to hide from sandboxes whose lower layer is the host's `/`
    /// (an empty read-only tmpfs is mounted over each one visible inside).
    /// The parent of each sandbox's `spec.dir` is always hidden; the server
    /// should add its data directory here.
    pub hide_paths: Vec<PathBuf>,
    /// How long a sandbox's init may take to come up.
    pub init_timeout: Duration,
    /// The directory holding every sandbox's `spec.dir` (the server's
    /// `<data-dir>/sandboxes`): orphan cleanup unmounts quota filesystems
    /// left under it by sandboxes the server no longer knows.
    pub state_dir: Option<PathBuf>,
    /// Host uid/gid ranges of the sandboxes' user namespaces (see
    /// [`userns`]); `None` runs sandboxes without one (host root with
    /// reduced capabilities).
    pub userns: Option<userns::UsernsConfig>,
    /// The operator's images directory (the server's `--images`): a
    /// manifest's `image` names `<images_dir>/<name>/rootfs/`, a root
    /// filesystem directory used as the read-only lower layer. Never a path
    /// a tenant gives; `None`: only the default (host root, masked).
    pub images_dir: Option<PathBuf>,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            shim_program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("stasis")),
            shim_args: vec![SHIM_SUBCOMMAND.to_string()],
            cgroup_parent: "stasis".to_string(),
            capture_limit: 16 << 20,
            session_buffer: 4 << 20,
            hide_paths: Vec::new(),
            init_timeout: Duration::from_secs(20),
            state_dir: None,
            userns: Some(userns::UsernsConfig::default()),
            images_dir: None,
        }
    }
}

#[allow(clippy::large_enum_variant)] // one per sandbox
enum Run {
    Stopped,
    Running {
        init_pid: i32,
        /// The sandbox's supervisor: owns PID 1's waiter and the sessions
        /// (see [`supervisor`]); it outlives the daemon.
        sup: SupervisorHandle,
        /// pidfd of PID 1: readable once it has exited (even before reaped).
        init_fd: std::os::fd::OwnedFd,
        frozen: bool,
    },
}

struct Sandbox {
    spec: SandboxSpec,
    cg: SandboxCgroup,
    run: tokio::sync::Mutex<Run>,
    seq: AtomicU64,
}

/// Where the overlay's upper and work dirs live: on the sandbox's quota
/// filesystem when `resources.disk_mb` is set, else directly in its dir.
fn layer_root(spec: &SandboxSpec) -> PathBuf {
    if spec.manifest.resources.disk_mb > 0 {
        disk::mount_point(&spec.dir)
    } else {
        spec.dir.clone()
    }
}

impl Sandbox {
    fn upper(&self) -> PathBuf {
        layer_root(&self.spec).join("upper")
    }
    fn workdir(&self) -> &str {
        &self.spec.manifest.workdir
    }
    fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// PID 1 of a running, not frozen sandbox.
    async fn pid(&self) -> Result<i32> {
        let mut run = self.run.lock().await;
        match &mut *run {
            Run::Running { frozen: true, .. } => Err(Error::state("sandbox is paused")),
            Run::Running {
                sup,
                init_pid,
                init_fd,
                ..
            } => {
                if !sup.alive() {
                    Err(Error::backend(
                        "the sandbox's supervisor has died (its sessions ended); pause and resume the sandbox to restart it from its files, or destroy it",
                    ))
                } else if alive(sup, init_fd) {
                    Ok(*init_pid)
                } else {
                    Err(Error::backend(
                        "the sandbox's init process has died; resume or recreate it",
                    ))
                }
            }
            Run::Stopped => Err(Error::state("sandbox is not running")),
        }
    }

    /// PID 1 of a running sandbox, frozen or not (its root stays readable
    /// while frozen).
    async fn root_pid(&self) -> Result<i32> {
        let mut run = self.run.lock().await;
        match &mut *run {
            Run::Running {
                sup,
                init_pid,
                init_fd,
                ..
            } => {
                if alive(sup, init_fd) {
                    Ok(*init_pid)
                } else {
                    Err(Error::state("sandbox is not running"))
                }
            }
            Run::Stopped => Err(Error::state("sandbox is not running")),
        }
    }

    /// What `/proc/<init>/cgroup` of this sandbox's PID 1 contains: the shim
    /// checks it so a recycled pid can never lead an exec into the wrong
    /// namespaces.
    fn init_cgroup_marker(&self) -> String {
        format!("{}/init", self.cg.rel_path().display())
    }

    /// The supervisor of a running sandbox (frozen or not).
    async fn supervisor_call(&self, req: Request, wait: Duration) -> Result<Reply> {
        let run = self.run.lock().await;
        match &*run {
            Run::Running { sup, .. } => {
                let sup = sup.clone();
                drop(run);
                sup.call(req, wait).await
            }
            Run::Stopped => Err(Error::state("sandbox is not running")),
        }
    }
}

pub struct ProcessBackend {
    cfg: ProcessConfig,
    cg: std::result::Result<Cgroups, String>,
    sandboxes: Mutex<HashMap<SandboxId, Arc<Sandbox>>>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("blocking task: {e}")))?
        .map_err(|e| Error::backend(e.to_string()))
}

fn default_env() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "PATH".into(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    );
    m.insert("HOME".into(), "/root".into());
    m.insert("LANG".into(), "C.UTF-8".into());
    m
}

fn merge_env(
    manifest: &BTreeMap<String, String>,
    req: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>> {
    stasis_core::exec::check_env(req)?;
    let env = stasis_core::exec::merge_env([&default_env(), manifest, req]);
    Ok(env.into_iter().collect())
}

/// Output captured from one stream, shared with its reader task so that what
/// was read survives aborting the task.
#[derive(Default)]
struct Capture {
    data: Vec<u8>,
    truncated: bool,
}

fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(
    mut r: R,
    stream: Stream,
    limit: usize,
    sink: Option<mpsc::Sender<ExecChunk>>,
    cap: Arc<Mutex<Capture>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(tx) = &sink {
                let _ = tx
                    .send(ExecChunk {
                        stream,
                        data: buf[..n].to_vec(),
                    })
                    .await;
                continue;
            }
            let mut c = cap.lock().unwrap();
            let room = limit.saturating_sub(c.data.len());
            if n > room {
                c.truncated = true;
            }
            let take = n.min(room);
            c.data.extend_from_slice(&buf[..take]);
        }
    })
}

fn pidfd_open(pid: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Where one exec or session runs: its cgroup leaf and its shim files.
struct Prepared {
    leaf: String,
    /// The shim's config in an anonymous memory file (see [`config_memfd`]).
    cfg_fd: std::os::fd::OwnedFd,
    status_path: PathBuf,
}

/// The fd number at which the shim finds its exec config.
const SHIM_CONFIG_FD: i32 = 3;

/// An exec's config carries its environment, which may hold tenant secrets:
/// it must never touch a disk. It goes to the shim in an anonymous memory
/// file (memfd, close-on-exec here) that only the shim inherits, as fd 3;
/// the shim reads it and closes it before anything else runs.
fn config_memfd(data: &[u8]) -> Result<std::os::fd::OwnedFd> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a valid NUL-terminated name; the returned fd is owned here.
    let fd = unsafe { libc::memfd_create(c"stasis-exec-config".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::backend(format!(
            "memfd_create: {}",
            std::io::Error::last_os_error()
        )));
    }
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd);
    f.write_all(data)?;
    Ok(f.into())
}

/// Make the cgroup leaf of one exec or session and write the shim's config.
async fn prepare_exec(
    sb: &Sandbox,
    leaf: String,
    init_pid: i32,
    argv: &[String],
    env: Vec<(String, String)>,
    cwd: String,
    merge_stderr: bool,
) -> Result<Prepared> {
    let cg = sb.cg.clone();
    let l2 = leaf.clone();
    let procs = blocking(move || cg.leaf(&l2)).await?;
    let run_dir = sb.spec.dir.join("run");
    let status_path = run_dir.join(format!("{leaf}.status"));
    let cfg = ExecConfig {
        cgroup_procs: procs,
        init_pid,
        argv: argv.to_vec(),
        env,
        cwd,
        status_path: status_path.clone(),
        merge_stderr,
        init_cgroup: sb.init_cgroup_marker(),
    };
    let cfg_fd = config_memfd(&serde_json::to_vec(&cfg)?)?;
    Ok(Prepared {
        leaf,
        cfg_fd,
        status_path,
    })
}

/// The shim could not be started: undo `prepare_exec` and say why.
async fn spawn_failed(sb: &Sandbox, leaf: &str, e: std::io::Error) -> Error {
    sb.cg.remove_leaf(leaf);
    Error::backend(format!("spawn shim: {e}"))
}

/// PID 1 and the supervisor both still run.
fn alive(sup: &SupervisorHandle, init_fd: &std::os::fd::OwnedFd) -> bool {
    sup.alive() && !supervisor_client::exited(init_fd)
}

/// The shim in `exec` mode, its config passed as fd 3 (never a file).
pub(crate) fn shim_exec_command(
    program: &Path,
    args: &[String],
    cfg: &std::os::fd::OwnedFd,
) -> Command {
    use std::os::fd::AsRawFd;
    let mut c = Command::new(program);
    c.args(args)
        .arg("exec")
        .arg(format!("/proc/self/fd/{SHIM_CONFIG_FD}"))
        .env_clear()
        .kill_on_drop(false);
    let raw = cfg.as_raw_fd();
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
    unsafe {
        c.pre_exec(move || {
            if raw == SHIM_CONFIG_FD {
                if libc::fcntl(raw, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, SHIM_CONFIG_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// After the command's main process exited, collect the rest of its output.
/// When nothing is left in its cgroup leaf, nobody can hold the pipes' write
/// ends any more, so EOF is certain and we wait for it (however loaded the
/// machine is); when background processes remain and keep the pipes open,
/// we give them a short grace and stop reading.
async fn drain(cg: &SandboxCgroup, leaf: &str, tasks: Vec<tokio::task::JoinHandle<()>>) {
    let (c, l) = (cg.clone(), leaf.to_string());
    let leftovers = tokio::task::spawn_blocking(move || !c.procs(&l).is_empty())
        .await
        .unwrap_or(true);
    let grace = if leftovers {
        Duration::from_millis(150)
    } else {
        Duration::from_secs(10)
    };
    let deadline = tokio::time::Instant::now() + grace;
    for t in tasks {
        let abort = t.abort_handle();
        if tokio::time::timeout_at(deadline, t).await.is_err() {
            abort.abort();
        }
    }
}

impl ProcessBackend {
    pub fn new(cfg: ProcessConfig) -> Self {
        ProcessBackend {
            cg: Cgroups::detect(),
            cfg,
            sandboxes: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &ProcessConfig {
        &self.cfg
    }

    fn cgroups(&self) -> Result<&Cgroups> {
        self.cg
            .as_ref()
            .map_err(|e| Error::unsupported(format!("process backend: {e}")))
    }

    fn get(&self, id: &SandboxId) -> Result<Arc<Sandbox>> {
        self.sandboxes
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("sandbox {id}")))
    }

    fn sandbox_for(&self, spec: &SandboxSpec) -> Result<Arc<Sandbox>> {
        if !spec.dir.is_absolute() {
            return Err(Error::invalid(format!(
                "sandbox dir {} must be an absolute path",
                spec.dir.display()
            )));
        }
        let cg = self
            .cgroups()?
            .sandbox(&self.cfg.cgroup_parent, spec.id.as_str());
        let mut map = self.sandboxes.lock().unwrap();
        Ok(map
            .entry(spec.id.clone())
            .or_insert_with(|| {
                Arc::new(Sandbox {
                    spec: spec.clone(),
                    cg,
                    run: tokio::sync::Mutex::new(Run::Stopped),
                    // Exec leaves `x<N>` must not meet leaves left by an
                    // earlier daemon (its background processes survive a
                    // restart): start past any earlier counter.
                    seq: AtomicU64::new(stasis_core::now_ms() as u64 * 1000),
                })
            })
            .clone())
    }

    /// The read-only lower layer: the host's `/` without an image, else the
    /// registered image's `rootfs` directory, by name only. Its canonical
    /// path must lie strictly inside the canonical images directory, so
    /// neither `..` nor a symlink (in the name, the image's directory or its
    /// `rootfs`) can make a host directory the sandbox's root.
    fn lower(&self, spec: &SandboxSpec) -> Result<PathBuf> {
        let Some(name) = &spec.manifest.image else {
            return Ok(PathBuf::from("/"));
        };
        stasis_core::manifest::validate_image_name(name)?;
        let refuse = |why: String| {
            Error::new(ErrorCode::InvalidManifest, format!("image: {name:?} {why}"))
                .with_field("image")
        };
        let Some(images) = &self.cfg.images_dir else {
            return Err(refuse(
                "cannot be used: this daemon has no images directory".into(),
            ));
        };
        let root = images.canonicalize().map_err(|e| {
            refuse(format!(
                "is not available: images directory {}: {e}",
                images.display()
            ))
        })?;
        if root.parent().is_none() {
            return Err(refuse(
                "cannot be used: the images directory must not be the host's /".into(),
            ));
        }
        let wanted = root.join(name).join("rootfs");
        let canon = wanted.canonicalize().map_err(|_| {
            refuse(format!(
                "is not a registered image (no directory {})",
                wanted.display()
            ))
        })?;
        if canon == root || !canon.starts_with(&root) {
            return Err(refuse(format!(
                "leads out of the images directory ({} resolves to {}; symlinks must stay inside it)",
                wanted.display(),
                canon.display()
            )));
        }
        if !canon.is_dir() {
            return Err(refuse(format!(
                "is not a registered image ({} is not a directory)",
                wanted.display()
            )));
        }
        Ok(canon)
    }

    /// The shim in `exec` mode, its config passed as fd 3 (never a file).
    fn shim_exec(&self, cfg: &std::os::fd::OwnedFd) -> Command {
        shim_exec_command(&self.cfg.shim_program, &self.cfg.shim_args, cfg)
    }

    /// Create the per-sandbox directories; a missing upper layer is made
    /// fresh (with the host-root masks) or from `layer_tar`.
    async fn prepare_dirs(&self, spec: &SandboxSpec, layer_tar: Option<PathBuf>) -> Result<()> {
        let lower = self.lower(spec)?;
        let dir = spec.dir.clone();
        let disk_mb = spec.manifest.resources.disk_mb;
        let lr = layer_root(spec);
        blocking(move || {
            for d in ["root", "run"] {
                std::fs::create_dir_all(dir.join(d))?;
            }
            if disk_mb > 0 {
                disk::ensure(&dir, disk_mb)?;
            }
            std::fs::create_dir_all(lr.join("work"))?;
            let upper = lr.join("upper");
            if let Some(tar) = layer_tar {
                let tmp = lr.join("upper.restore");
                let _ = std::fs::remove_dir_all(&tmp);
                // On a quota filesystem the old layer goes first, or a nearly
                // full one could not be extracted next to itself (the tar
                // is the newer, complete copy).
                if disk_mb > 0 && upper.exists() {
                    std::fs::remove_dir_all(&upper)?;
                }
                std::fs::create_dir_all(&tmp)?;
                layer::extract_tar(&tar, &tmp)?;
                if upper.exists() {
                    std::fs::remove_dir_all(&upper)?;
                }
                std::fs::rename(&tmp, &upper)?;
                // A stale overlay work dir must not meet a new upper dir.
                let _ = std::fs::remove_dir_all(lr.join("work"));
                std::fs::create_dir_all(lr.join("work"))?;
            } else if !upper.exists() {
                let tmp = lr.join("upper.new");
                let _ = std::fs::remove_dir_all(&tmp);
                std::fs::create_dir_all(&tmp)?;
                if lower == Path::new("/") {
                    mask_host_root(&tmp)?;
                }
                std::fs::rename(&tmp, &upper)?;
            }
            Ok(())
        })
        .await
    }

    /// Start the sandbox's PID 1 (namespaces, root filesystem) under fresh cgroups.
    async fn start_init(&self, sb: &Arc<Sandbox>) -> Result<()> {
        let mut run = sb.run.lock().await;
        if let Run::Running { .. } = &*run {
            return Err(Error::state("sandbox is already running"));
        }
        let spec = &sb.spec;
        let cg = sb.cg.clone();
        let res = spec.manifest.resources.clone();
        let procs = blocking(move || {
            // Leftovers of an earlier life (crash) go first.
            cg.destroy()?;
            cg.create(&res)?;
            cg.leaf("init")
        })
        .await?;
        // A supervisor left from an earlier life goes too.
        self.kill_supervisor(sb, None).await;
        let mut hide = self.cfg.hide_paths.clone();
        if let Some(p) = spec.dir.parent() {
            hide.push(p.to_path_buf());
        }
        // Covering `/` would hide the whole root.
        hide.retain(|p| p.is_absolute() && p.parent().is_some());
        let idmap = match self.cfg.userns.clone() {
            Some(u) => {
                let dir = spec.dir.clone();
                Some(blocking(move || userns::allocate(&u, &dir)).await?)
            }
            None => None,
        };
        let cfg = InitConfig {
            idmap,
            cgroup_procs: procs,
            lower: self.lower(spec)?,
            upper: layer_root(spec).join("upper"),
            work: layer_root(spec).join("work"),
            root: spec.dir.join("root"),
            workdir: spec.manifest.workdir.clone(),
            hostname: spec.id.as_str().to_string(),
            hide,
            outputs: spec.manifest.outputs.clone(),
            mounts: spec
                .manifest
                .mounts
                .iter()
                .map(|m| (PathBuf::from(&m.source), m.target.clone()))
                .collect(),
        };
        let sup_cfg = supervisor::SupervisorConfig {
            init: cfg,
            sandbox_id: spec.id.as_str().to_string(),
            cgroup_parent: self.cfg.cgroup_parent.clone(),
            run_dir: spec.dir.join("run"),
            shim_program: self.cfg.shim_program.clone(),
            shim_args: self.cfg.shim_args.clone(),
            session_buffer: self.cfg.session_buffer,
            init_timeout_ms: self.cfg.init_timeout.as_millis() as u64,
        };
        let started = supervisor_client::spawn(
            &self.cfg.shim_program,
            &self.cfg.shim_args,
            &sup_cfg,
            self.cfg.init_timeout,
        )
        .await;
        let fail = |msg: String| async move {
            let cg = sb.cg.clone();
            let _ = blocking(move || cg.destroy()).await;
            self.kill_supervisor(sb, None).await;
            Err(Error::backend(format!("create sandbox: {msg}")))
        };
        let (sup, init_pid) = match started {
            Ok(x) => x,
            Err(msg) => return fail(msg).await,
        };
        let init_fd = match pidfd_open(init_pid) {
            Ok(fd) => fd,
            Err(e) => return fail(format!("init {init_pid} vanished: {e}")).await,
        };
        let allow = net::allowlist(&spec.manifest)?;
        if !allow.is_empty() {
            let (parent, id) = (self.cfg.cgroup_parent.clone(), spec.id.to_string());
            let r = blocking(move || {
                net::setup(&parent, &id, init_pid, &allow).map_err(std::io::Error::other)
            })
            .await;
            if let Err(e) = r {
                return fail(e.message).await;
            }
        }
        let _ = tokio::fs::write(spec.dir.join("run").join("init.pid"), init_pid.to_string()).await;
        *run = Run::Running {
            init_pid,
            sup,
            init_fd,
            frozen: false,
        };
        Ok(())
    }

    /// Connect to a sandbox's supervisor and check that the init it names
    /// is this sandbox's PID 1 (its cgroup, PID 1 of its own namespace).
    async fn reattach(
        &self,
        sb: &Sandbox,
    ) -> Result<(SupervisorHandle, i32, std::os::fd::OwnedFd)> {
        let (sup, init_pid) = supervisor_client::attach(&sb.spec.dir.join("run")).await?;
        let init_fd = pidfd_open(init_pid)
            .map_err(|e| Error::backend(format!("sandbox init {init_pid} is gone: {e}")))?;
        let cg = std::fs::read_to_string(format!("/proc/{init_pid}/cgroup")).unwrap_or_default();
        let marker = format!("/{}", sb.init_cgroup_marker());
        let status =
            std::fs::read_to_string(format!("/proc/{init_pid}/status")).unwrap_or_default();
        let nspid_1 = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|v| v.split_whitespace().last())
            == Some("1");
        if !cg.lines().any(|l| l.ends_with(&marker))
            || !nspid_1
            || supervisor_client::exited(&init_fd)
        {
            sup.kill().await;
            return Err(Error::backend(format!(
                "pid {init_pid} is not this sandbox's init"
            )));
        }
        Ok((sup, init_pid, init_fd))
    }

    /// SIGKILL a sandbox's supervisor (the handle's, or whatever sits in its
    /// cgroup after a restart) and remove its cgroup and socket.
    async fn kill_supervisor(&self, sb: &Sandbox, sup: Option<&SupervisorHandle>) {
        if let Some(s) = sup {
            s.kill().await;
        }
        if let Ok(cgs) = self.cgroups() {
            let cg = cgs.supervisor(&self.cfg.cgroup_parent, sb.spec.id.as_str());
            if let Err(e) = blocking(move || cg.destroy()).await {
                tracing::warn!(sandbox = %sb.spec.id, "remove supervisor cgroup: {}", e.message);
            }
        }
        let _ = tokio::fs::remove_file(sb.spec.dir.join("run").join(supervisor::SOCKET_NAME)).await;
    }

    /// Kill every process of the sandbox and remove its cgroups.
    ///
    /// The supervisor (and whatever is still in its cgroup: a shim it forked
    /// for a session that has not joined the sandbox yet) goes first, so
    /// nothing can join the sandbox's cgroups while they are removed.
    async fn stop(&self, sb: &Arc<Sandbox>, run: &mut Run) -> Result<()> {
        let sup = match run {
            Run::Running { sup, .. } => Some(sup.clone()),
            Run::Stopped => None,
        };
        self.kill_supervisor(sb, sup.as_ref()).await;
        let cg = sb.cg.clone();
        blocking(move || cg.destroy()).await?;
        if !sb.spec.manifest.network.allow.is_empty() {
            let (parent, id) = (self.cfg.cgroup_parent.clone(), sb.spec.id.to_string());
            blocking(move || {
                net::teardown(&parent, &id);
                Ok(())
            })
            .await?;
        }
        *run = Run::Stopped;
        Ok(())
    }

    async fn tar_upper(&self, sb: &Arc<Sandbox>, out: &Path) -> Result<Vec<Artifact>> {
        let upper = sb.upper();
        let dest = out.join(FS_TAR);
        let size = blocking(move || layer::write_tar(&upper, &dest)).await?;
        Ok(vec![Artifact {
            name: FS_TAR.to_string(),
            kind: ArtifactKind::FsLayer,
            size,
        }])
    }

    async fn build(&self, spec: &SandboxSpec, artifacts: Option<&Path>) -> Result<()> {
        spec.manifest
            .validate()
            .map_err(|e| e.context("manifest"))?;
        let disk_mb = spec.manifest.resources.disk_mb;
        if disk_mb > 0 && disk_mb < disk::MIN_DISK_MB {
            return Err(Error::new(
                ErrorCode::InvalidManifest,
                format!(
                    "resources.disk_mb: the process backend needs at least {} MiB (or 0 for no quota)",
                    disk::MIN_DISK_MB
                ),
            )
            .with_field("resources.disk_mb"));
        }
        net::allowlist(&spec.manifest)?;
        let existing = self.sandboxes.lock().unwrap().contains_key(&spec.id);
        if existing {
            return Err(Error::state(format!("sandbox {} already exists", spec.id)));
        }
        let tar = artifacts.map(|a| a.join(FS_TAR)).filter(|p| p.is_file());
        let result = async {
            self.prepare_dirs(spec, tar).await?;
            let sb = self.sandbox_for(spec)?;
            self.start_init(&sb).await
        }
        .await;
        if result.is_err() {
            self.sandboxes.lock().unwrap().remove(&spec.id);
        }
        result
    }

    async fn exec_inner(
        &self,
        sb: &Arc<Sandbox>,
        req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        stasis_core::exec::check_argv(&req.argv)?;
        let env = merge_env(&sb.spec.manifest.env, &req.env)?;
        let cwd = match &req.cwd {
            Some(c) => fsops::normalize(sb.workdir(), c).map_err(|e| e.with_field("cwd"))?,
            None => sb.workdir().to_string(),
        };
        let init_pid = sb.pid().await?;
        let Prepared {
            leaf,
            cfg_fd,
            status_path,
        } = prepare_exec(
            sb,
            format!("x{}", sb.next()),
            init_pid,
            &req.argv,
            env,
            cwd,
            false,
        )
        .await?;
        let start = Instant::now();
        let spawned = self
            .shim_exec(&cfg_fd)
            .stdin(if req.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => return Err(spawn_failed(sb, &leaf, e).await),
        };
        drop(cfg_fd);
        if let (Some(data), Some(mut stdin)) = (req.stdin.clone(), child.stdin.take()) {
            tokio::spawn(async move {
                let _ = stdin.write_all(&data).await;
                let _ = stdin.shutdown().await;
            });
        }
        let limit = self.cfg.capture_limit;
        let out_cap = Arc::new(Mutex::new(Capture::default()));
        let err_cap = Arc::new(Mutex::new(Capture::default()));
        let t_out = spawn_reader(
            child.stdout.take().unwrap(),
            Stream::Stdout,
            limit,
            output.clone(),
            out_cap.clone(),
        );
        let t_err = spawn_reader(
            child.stderr.take().unwrap(),
            Stream::Stderr,
            limit,
            output.clone(),
            err_cap.clone(),
        );
        let deadline =
            tokio::time::Instant::from_std(start) + Duration::from_millis(req.timeout_ms.max(1));
        let mut timed_out = false;
        let wait = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(w) => w.ok(),
            Err(_) => {
                timed_out = true;
                let cg = sb.cg.clone();
                let l2 = leaf.clone();
                blocking(move || cg.kill(&l2)).await?;
                child.wait().await.ok()
            }
        };
        drain(&sb.cg, &leaf, vec![t_out, t_err]).await;
        let duration_ms = start.elapsed().as_millis() as u64;
        let status = tokio::fs::read(&status_path).await.ok();
        let _ = tokio::fs::remove_file(&status_path).await;
        sb.cg.remove_leaf(&leaf);
        let take = |c: &Arc<Mutex<Capture>>| std::mem::take(&mut *c.lock().unwrap());
        let out = take(&out_cap);
        let mut err = take(&err_cap);
        let mut res = ExecResult {
            exit_code: None,
            signal: None,
            stdout: out.data,
            stderr: Vec::new(),
            timed_out,
            truncated: out.truncated || err.truncated,
            duration_ms,
        };
        let status: Option<ExecStatus> = status.and_then(|s| serde_json::from_slice(&s).ok());
        match status {
            _ if timed_out => {}
            Some(ExecStatus::Exited(c)) => res.exit_code = Some(c),
            Some(ExecStatus::Signaled(s)) => res.signal = Some(s),
            Some(ExecStatus::Cwd(msg)) => {
                return Err(Error::invalid(msg).with_field("cwd"));
            }
            Some(ExecStatus::Exec(code, msg)) => {
                res.exit_code = Some(code);
                err.data
                    .extend_from_slice(format!("stasis: {msg}\n").as_bytes());
                if let Some(tx) = &output {
                    let _ = tx
                        .send(ExecChunk {
                            stream: Stream::Stderr,
                            data: format!("stasis: {msg}\n").into_bytes(),
                        })
                        .await;
                }
            }
            Some(ExecStatus::Setup(msg)) => {
                return Err(Error::backend(format!("exec setup: {msg}")));
            }
            None => {
                // The supervisor itself died (e.g. OOM-killed with the command).
                use std::os::unix::process::ExitStatusExt;
                res.signal = Some(wait.and_then(|w| w.signal()).unwrap_or(libc::SIGKILL));
            }
        }
        res.stderr = err.data;
        Ok(res)
    }
}

fn unexpected(r: Reply) -> Error {
    Error::backend(format!(
        "unexpected answer from the sandbox's supervisor: {r:?}"
    ))
}

/// Mask every top-level entry of the host's `/` outside [`HOST_ROOT_ALLOW`]
/// in a fresh upper dir: directories become opaque empty directories (so
/// /tmp, /root, /home, /proc, /dev mount points exist but show nothing of
/// the host), other entries become whiteouts.
fn mask_host_root(upper: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for e in std::fs::read_dir("/")? {
        let e = e?;
        let name = e.file_name();
        let n = name.to_string_lossy();
        if HOST_ROOT_ALLOW.contains(&n.as_ref()) {
            continue;
        }
        let p = upper.join(&name);
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let md = std::fs::symlink_metadata(e.path())?;
        if md.is_dir() {
            std::fs::create_dir(&p)?;
            let mode = match n.as_ref() {
                "tmp" => 0o1777,
                "root" => 0o700,
                _ => 0o755,
            };
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
            let k = c"trusted.overlay.opaque";
            if unsafe { libc::lsetxattr(c.as_ptr(), k.as_ptr(), b"y".as_ptr() as *const _, 1, 0) }
                != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        } else if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    for m in HOST_ROOT_MASK {
        let host = Path::new("/").join(m);
        let Ok(md) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        // Parents in the upper layer must carry the lower's owner and mode:
        // a merged directory takes its attributes from the upper one.
        let mut rel = PathBuf::new();
        let comps: Vec<_> = Path::new(m).components().collect();
        for comp in &comps[..comps.len() - 1] {
            rel.push(comp);
            let (u, h) = (upper.join(&rel), Path::new("/").join(&rel));
            if !u.exists() {
                let hm = std::fs::metadata(&h)?;
                std::fs::create_dir(&u)?;
                std::fs::set_permissions(&u, hm.permissions())?;
                std::os::unix::fs::lchown(&u, Some(hm.uid()), Some(hm.gid()))?;
            }
        }
        let p = upper.join(m);
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        if md.is_dir() {
            std::fs::create_dir(&p)?;
            std::fs::set_permissions(&p, md.permissions())?;
            let k = c"trusted.overlay.opaque";
            if unsafe { libc::lsetxattr(c.as_ptr(), k.as_ptr(), b"y".as_ptr() as *const _, 1, 0) }
                != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        } else if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[async_trait]
impl Backend for ProcessBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Process
    }

    fn capabilities(&self) -> Capabilities {
        let mut reasons = Vec::new();
        if unsafe { libc::geteuid() } != 0 {
            reasons.push(
                "the process backend needs root (namespaces, cgroups, overlayfs)".to_string(),
            );
        }
        if let Err(e) = &self.cg {
            reasons.push(e.clone());
        }
        for ns in ["mnt", "pid", "net", "ipc", "uts"] {
            if !Path::new("/proc/self/ns").join(ns).exists() {
                reasons.push(format!("kernel lacks {ns} namespaces"));
            }
        }
        if !self.cfg.shim_program.exists() {
            reasons.push(format!(
                "shim program {} not found",
                self.cfg.shim_program.display()
            ));
        }
        let mut notes = vec![
            "pause freezes the sandbox's cgroup: CPU stops, memory stays resident; resume thaws and processes continue".to_string(),
            "processes cannot be restored into a new sandbox (restore, fork): this backend has no checkpointer (CRIU fails on this host), so only the filesystem comes back".to_string(),
            "each sandbox has a supervisor process that owns its init and sessions: processes, sessions and their buffered output survive a daemon restart (or upgrade) and are reattached".to_string(),
            "network: an empty network namespace (loopback only) unless network.allow lists ip:port destinations; then a veth with nftables rules admits new TCP connections to exactly those (127.0.0.1:P = the host's loopback port P), nothing else (no UDP/DNS, no ICMP, no IPv6)".to_string(),
            "resources.disk_mb caps the writable layer: it lives on a per-sandbox sparse ext4 image, loop-mounted (ENOSPC inside the sandbox when full)".to_string(),
            "without an image, the lower layer is the host's root filesystem with only /usr, /bin, /sbin, /lib*, /etc, /opt, /var visible (host secrets and logs masked)".to_string(),
            "image names a root filesystem the operator registered as <images>/<name>/rootfs/ (never a host path)".to_string(),
            "seccomp denies mount, pivot_root, reboot, kexec, module loading, bpf, perf_event_open, keyrings, swap, open_by_handle_at, setns and namespace-creating clone/unshare (EPERM); dangerous capabilities are dropped".to_string(),
        ];
        match &self.cg {
            Ok(c) => notes.push(format!(
                "cgroup {} in use (controllers: {})",
                c.version.as_str(),
                c.controllers().join(",")
            )),
            Err(e) => notes.push(format!("cgroups unusable: {e}")),
        }
        Capabilities {
            backend: BackendKind::Process,
            available: reasons.is_empty(),
            reason: if reasons.is_empty() {
                None
            } else {
                Some(reasons.join("; "))
            },
            pause_keeps_processes: true,
            pause_frees_memory: false,
            restore_keeps_processes: false,
            accelerator: None,
            notes,
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<()> {
        self.build(spec, None).await
    }

    async fn exec(
        &self,
        id: &SandboxId,
        req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        let sb = self.get(id)?;
        self.exec_inner(&sb, req, output).await
    }

    async fn write_file(
        &self,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        let sb = self.get(id)?;
        let p = fsops::normalize(sb.workdir(), path)?;
        let pid = sb.pid().await?;
        let data = data.to_vec();
        // Files are created as the sandbox's root (its host uid), so the
        // sandbox owns and can change what the file API writes.
        tokio::task::spawn_blocking(move || {
            userns::as_sandbox_root(pid, || {
                fsops::Root::of_pid(pid)?.write_file(&p, &data, mode)
            })
        })
        .await
        .map_err(|e| Error::internal(e.to_string()))?
    }

    async fn read_file(&self, id: &SandboxId, path: &str, limit: u64) -> Result<Vec<u8>> {
        let sb = self.get(id)?;
        let p = fsops::normalize(sb.workdir(), path)?;
        let pid = sb.pid().await?;
        tokio::task::spawn_blocking(move || fsops::Root::of_pid(pid)?.read_file(&p, limit))
            .await
            .map_err(|e| Error::internal(e.to_string()))?
    }

    async fn list_files(&self, id: &SandboxId, path: &str) -> Result<Vec<FileEntry>> {
        let sb = self.get(id)?;
        let p = fsops::normalize(sb.workdir(), path)?;
        let pid = sb.pid().await?;
        tokio::task::spawn_blocking(move || fsops::Root::of_pid(pid)?.list(&p))
            .await
            .map_err(|e| Error::internal(e.to_string()))?
    }

    async fn session_start(&self, id: &SandboxId, spec: SessionSpec) -> Result<SessionInfo> {
        let sb = self.get(id)?;
        stasis_core::exec::check_argv(&spec.argv)?;
        let env = merge_env(&sb.spec.manifest.env, &spec.env)?;
        let cwd = match &spec.cwd {
            Some(c) => fsops::normalize(sb.workdir(), c).map_err(|e| e.with_field("cwd"))?,
            None => sb.workdir().to_string(),
        };
        let init_pid = sb.pid().await?;
        {
            let c = cwd.clone();
            let ok = tokio::task::spawn_blocking(move || {
                fsops::Root::of_pid(init_pid)
                    .and_then(|r| r.list(&c))
                    .is_ok()
            })
            .await
            .unwrap_or(false);
            if !ok {
                return Err(
                    Error::invalid(format!("working directory {cwd} does not exist"))
                        .with_field("cwd"),
                );
            }
        }
        let spec = SessionSpec {
            argv: spec.argv,
            env: env.into_iter().collect(),
            cwd: Some(cwd),
        };
        match sb
            .supervisor_call(Request::SessionStart { spec }, Duration::ZERO)
            .await?
        {
            Reply::Session { info } => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    async fn session_write(&self, id: &SandboxId, session: &str, data: &[u8]) -> Result<()> {
        let sb = self.get(id)?;
        sb.pid().await?;
        let req = Request::SessionWrite {
            session: session.to_string(),
            data: data.to_vec(),
        };
        match sb.supervisor_call(req, Duration::ZERO).await? {
            Reply::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
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
        let req = Request::SessionRead {
            session: session.to_string(),
            offset,
            wait_ms: wait.as_millis() as u64,
        };
        match sb.supervisor_call(req, wait).await? {
            Reply::SessionOutput { output } => Ok(output),
            other => Err(unexpected(other)),
        }
    }

    async fn session_list(&self, id: &SandboxId) -> Result<Vec<SessionInfo>> {
        let sb = self.get(id)?;
        match sb
            .supervisor_call(Request::SessionList, Duration::ZERO)
            .await
        {
            Ok(Reply::Sessions { sessions }) => Ok(sessions),
            Ok(other) => Err(unexpected(other)),
            // Processes gone (filesystem pause): no sessions.
            Err(e) if e.code == ErrorCode::InvalidState => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    async fn session_kill(&self, id: &SandboxId, session: &str) -> Result<()> {
        let sb = self.get(id)?;
        sb.pid().await?;
        let req = Request::SessionKill {
            session: session.to_string(),
        };
        match sb.supervisor_call(req, Duration::ZERO).await? {
            Reply::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn pause(&self, id: &SandboxId, out: &Path, keep_memory: bool) -> Result<Vec<Artifact>> {
        let sb = self.get(id)?;
        let mut run = sb.run.lock().await;
        match &*run {
            Run::Stopped => return Err(Error::state("sandbox is not running")),
            Run::Running { frozen: true, .. } if keep_memory => {
                return Err(Error::state("sandbox is already paused"))
            }
            _ => {}
        }
        tokio::fs::create_dir_all(out).await?;
        if keep_memory {
            let cg = sb.cg.clone();
            blocking(move || cg.freeze()).await?;
            match self.tar_upper(&sb, out).await {
                Ok(a) => {
                    if let Run::Running { frozen, .. } = &mut *run {
                        *frozen = true;
                    }
                    Ok(a)
                }
                Err(e) => {
                    let cg = sb.cg.clone();
                    let _ = blocking(move || cg.thaw()).await;
                    Err(e)
                }
            }
        } else {
            // Processes end; the writable layer is written after they are gone.
            self.stop(&sb, &mut run).await?;
            self.tar_upper(&sb, out).await
        }
    }

    async fn resume(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        let sb = self.sandbox_for(spec)?;
        {
            let mut run = sb.run.lock().await;
            if let Run::Running {
                sup,
                frozen,
                init_fd,
                ..
            } = &mut *run
            {
                if alive(sup, init_fd) {
                    if *frozen {
                        let cg = sb.cg.clone();
                        blocking(move || cg.thaw()).await?;
                        *frozen = false;
                    }
                    return Ok(());
                }
            }
            // Not alive: rebuild. Leftovers go first.
            self.stop(&sb, &mut run).await?;
        }
        let tar = Some(artifacts.join(FS_TAR)).filter(|p| p.is_file());
        if tar.is_none() && !sb.upper().is_dir() {
            return Err(Error::backend(format!(
                "cannot resume sandbox {}: no {FS_TAR} in {} and no writable layer in {}",
                spec.id,
                artifacts.display(),
                spec.dir.display()
            )));
        }
        self.prepare_dirs(spec, tar).await?;
        self.start_init(&sb).await
    }

    async fn resume_needs_artifacts(&self, id: &SandboxId) -> bool {
        let Ok(sb) = self.get(id) else { return true };
        let mut run = sb.run.lock().await;
        match &mut *run {
            Run::Running {
                sup,
                init_fd,
                frozen: true,
                ..
            } => !alive(sup, init_fd),
            _ => true,
        }
    }

    async fn snapshot(&self, id: &SandboxId, out: &Path) -> Result<Vec<Artifact>> {
        let sb = self.get(id)?;
        let run = sb.run.lock().await;
        let was_frozen = match &*run {
            Run::Stopped => false,
            Run::Running { frozen, .. } => *frozen,
        };
        let running = matches!(&*run, Run::Running { .. });
        tokio::fs::create_dir_all(out).await?;
        if running && !was_frozen {
            let cg = sb.cg.clone();
            blocking(move || cg.freeze()).await?;
        }
        let r = self.tar_upper(&sb, out).await;
        if running && !was_frozen {
            let cg = sb.cg.clone();
            blocking(move || cg.thaw()).await?;
        }
        r
    }

    async fn restore(&self, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
        if !artifacts.join(FS_TAR).is_file() {
            return Err(Error::invalid(format!(
                "no {FS_TAR} in artifacts {}",
                artifacts.display()
            )));
        }
        self.build(spec, Some(artifacts)).await
    }

    async fn destroy(&self, id: &SandboxId, dir: &Path) -> Result<()> {
        let sb = self.sandboxes.lock().unwrap().remove(id);
        let dir = match &sb {
            Some(sb) => sb.spec.dir.clone(),
            None => dir.to_path_buf(),
        };
        match sb {
            Some(sb) => {
                let mut run = sb.run.lock().await;
                self.stop(&sb, &mut run).await?;
            }
            None => {
                if let Ok(cgs) = self.cgroups() {
                    let cg = cgs.sandbox(&self.cfg.cgroup_parent, id.as_str());
                    blocking(move || cg.destroy()).await?;
                }
                let (parent, id) = (self.cfg.cgroup_parent.clone(), id.to_string());
                blocking(move || {
                    net::teardown(&parent, &id);
                    Ok(())
                })
                .await?;
            }
        }
        if dir.is_absolute() {
            let ucfg = self.cfg.userns.clone();
            blocking(move || {
                if let Some(u) = &ucfg {
                    userns::release(u, &dir);
                }
                disk::unmount(&dir)
            })
            .await?;
        }
        Ok(())
    }

    async fn recover(&self, spec: &SandboxSpec) -> Result<Recovered> {
        let sb = self.sandbox_for(spec)?;
        let mut run = sb.run.lock().await;
        if let Run::Running { sup, init_fd, .. } = &mut *run {
            if alive(sup, init_fd) {
                return Ok(Recovered::Running);
            }
        }
        // After a daemon restart: reattach to the sandbox's supervisor,
        // which kept its processes, sessions and their output.
        match self.reattach(&sb).await {
            Ok((sup, init_pid, init_fd)) => {
                let frozen = {
                    let cg = sb.cg.clone();
                    blocking(move || Ok(cg.frozen())).await?
                };
                *run = Run::Running {
                    init_pid,
                    sup,
                    init_fd,
                    frozen,
                };
                // A frozen sandbox (paused with memory) stays paused: the
                // server keeps it so and the next resume thaws it.
                Ok(if frozen {
                    Recovered::NotRunning
                } else {
                    Recovered::Running
                })
            }
            Err(e) => {
                tracing::info!(sandbox = %spec.id, "not reattached: {}", e.message);
                // No supervisor (or no init): whatever is left goes.
                self.stop(&sb, &mut run).await?;
                Ok(Recovered::NotRunning)
            }
        }
    }

    /// The processes are gone after a daemon restart; the writable layer
    /// (an upper dir, or the quota filesystem's image holding it) is what a
    /// resume rebuilds from, whatever step the pause had reached.
    async fn pause_leftovers(&self, spec: &SandboxSpec, _out: &Path) -> Result<PauseLeftovers> {
        let files_kept = if spec.manifest.resources.disk_mb > 0 {
            disk::image(&spec.dir).is_file()
        } else {
            spec.dir.join("upper").is_dir()
        };
        Ok(PauseLeftovers {
            artifacts: None,
            files_kept,
        })
    }

    async fn cleanup_orphans(&self, known: &[SandboxId]) -> Result<()> {
        let cgs = match self.cgroups() {
            Ok(c) => c.clone(),
            Err(_) => return Ok(()),
        };
        let known: Vec<&str> = known.iter().map(|k| k.as_str()).collect();
        let stale: Vec<SandboxId> = self
            .sandboxes
            .lock()
            .unwrap()
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        for id in stale {
            self.destroy(&id, Path::new("")).await?;
        }
        for name in cgs.list_sandboxes(&self.cfg.cgroup_parent) {
            if !known.contains(&name.as_str()) {
                let cg = cgs.sandbox(&self.cfg.cgroup_parent, &name);
                blocking(move || cg.destroy()).await?;
            }
        }
        let sups = format!("{}/{}", self.cfg.cgroup_parent, cgroup::SUPERVISORS);
        for name in cgs.list_sandboxes(&sups) {
            if !known.contains(&name.as_str()) {
                let cg = cgs.supervisor(&self.cfg.cgroup_parent, &name);
                blocking(move || cg.destroy()).await?;
            }
        }
        {
            let parent = self.cfg.cgroup_parent.clone();
            let keep: Vec<String> = known.iter().map(|k| k.to_string()).collect();
            blocking(move || {
                let keep: Vec<&str> = keep.iter().map(|s| s.as_str()).collect();
                net::cleanup_orphans(&parent, &keep);
                Ok(())
            })
            .await?;
        }
        if let Some(base) = self.cfg.state_dir.clone() {
            let keep: Vec<String> = known.iter().map(|k| k.to_string()).collect();
            blocking(move || {
                let keep: Vec<&str> = keep.iter().map(|s| s.as_str()).collect();
                disk::unmount_stale(&base, &keep)
            })
            .await?;
        }
        Ok(())
    }

    /// Read from the sandbox's root even while it is paused (frozen): no
    /// resume needed. A sandbox whose processes are gone (filesystem-only
    /// pause, daemon restart) answers `invalid_state`; the server resumes it.
    async fn collect_outputs(&self, id: &SandboxId, out: &Path) -> Result<u64> {
        let sb = self.get(id)?;
        let pid = sb.root_pid().await?;
        let outs = sb.spec.manifest.outputs.clone();
        let out = out.to_path_buf();
        tokio::task::spawn_blocking(move || {
            outputs::collect(&fsops::Root::of_pid(pid)?, &outs, &out)
        })
        .await
        .map_err(|e| Error::internal(e.to_string()))?
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

/// What this machine offers the process backend, for `stasis doctor`.
pub fn probe() -> serde_json::Value {
    use serde_json::json;
    let cg = match Cgroups::detect() {
        Ok(c) => json!({
            "usable": true,
            "version": c.version.as_str(),
            "controllers": c.controllers(),
            "hierarchies": c.hierarchies(),
        }),
        Err(e) => json!({"usable": false, "error": e}),
    };
    let mut ns = serde_json::Map::new();
    for n in ["mnt", "pid", "net", "ipc", "uts", "user", "cgroup"] {
        ns.insert(n.into(), json!(Path::new("/proc/self/ns").join(n).exists()));
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlay = filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"));
    let seccomp_kernel = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    let seccomp_filter = shim::seccomp_programs().map(|p| p.len());
    let root = unsafe { libc::geteuid() } == 0;
    let live = if root {
        live_probe()
    } else {
        Err("not root".into())
    };
    json!({
        "backend": "process",
        "root": root,
        "cgroup": cg,
        "namespaces": ns,
        "overlayfs": overlay,
        // A real try: new mount/pid/net/ipc/uts namespaces and an overlay
        // mount over the host's / (util-linux `unshare`, when installed).
        "live_check": match &live {
            Ok(()) => json!({"ok": true}),
            Err(e) => json!({"ok": false, "error": e}),
        },
        "seccomp": {
            "kernel": seccomp_kernel,
            "filter_builds": seccomp_filter.is_ok(),
            "error": seccomp_filter.err(),
            "denied_syscalls": shim::denied_syscalls().iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        },
        "available": root && cg["usable"] == json!(true) && overlay && seccomp_kernel && live.is_ok(),
    })
}

fn live_probe() -> std::result::Result<(), String> {
    let dir = std::env::temp_dir().join(format!("stasis-probe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["upper", "work", "merged"] {
        std::fs::create_dir_all(dir.join(d)).map_err(|e| format!("mkdir: {e}"))?;
    }
    let script = format!(
        "mount --make-rprivate / && mount -t overlay overlay -o lowerdir=/,upperdir={0}/upper,workdir={0}/work {0}/merged && test -x {0}/merged/bin/sh",
        dir.display()
    );
    let out = std::process::Command::new("unshare")
        .args([
            "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "sh", "-c", &script,
        ])
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Err(e) => Err(format!("run unshare: {e}")),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "unshare + overlay failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
}
