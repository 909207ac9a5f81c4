//! The sandbox shim: a small, single-threaded program the (multi-threaded)
//! daemon spawns to do what must not happen inside it: unshare/setns, fork
//! into a PID namespace, mount, pivot_root, drop capabilities, install the
//! seccomp filter, exec.
//!
//! The `stasis` binary dispatches `stasis __process-shim <mode> <config>` to
//! [`shim_main`]; this crate's `stasis-process-shim` binary does the same for
//! tests. The mode and config path are always the last two arguments, so any
//! leading arguments ([`crate::ProcessConfig::shim_args`]) are ignored.
//!
//! Modes:
//! - `init CONFIG`: joins the sandbox's `init` cgroup leaf, creates the
//!   sandbox's user namespace (when the config has an id map), unshares mount,
//!   pid, net, ipc and uts namespaces and forks the sandbox's PID 1, which
//!   builds the root filesystem (see [`InitConfig`]), pivots into it, brings
//!   `lo` up, joins the user namespace as its root, drops privileges and then
//!   only reaps orphans. The shim itself
//!   stays outside as the waiter of PID 1 and prints one line on stdout:
//!   `ok <host pid of PID 1>` or `error <message>`.
//! - `supervise CONFIG`: the sandbox's long-lived supervisor (see
//!   [`crate::supervisor`]), which runs `init` and, for every session,
//!   `exec` as its children and outlives the daemon.
//! - `exec CONFIG`: joins a cgroup leaf, enters the namespaces of the
//!   sandbox's PID 1 (its root is the pivoted root), forks, and the child
//!   joins PID 1's user namespace as its root, drops privileges, applies
//!   seccomp and execs the command. The outcome is
//!   written as JSON ([`ExecStatus`]) to `status_path` (opened before
//!   entering the sandbox's mount namespace).

use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

/// Subcommand under which the `stasis` binary must call [`shim_main`].
pub const SHIM_SUBCOMMAND: &str = "__process-shim";

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
    /// `<parent>/<id>/init`: must appear in `/proc/<init_pid>/cgroup`.
    pub init_cgroup: String,
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
    Setup(String),
}

/// Call first thing in `main` (before any thread or async runtime starts):
/// when the process was started as `<exe> __process-shim ...`, runs the shim
/// and never returns; otherwise returns and the program carries on.
pub fn dispatch_if_shim() {
    if std::env::args().nth(1).as_deref() == Some(SHIM_SUBCOMMAND) {
        shim_main()
    }
}

/// Entry point of the shim; never returns.
pub fn shim_main() -> ! {
    let args: Vec<String> = std::env::args().collect();
    let n = args.len();
    if n < 3 {
        eprintln!("usage: {SHIM_SUBCOMMAND} (init|exec|supervise) CONFIG");
        std::process::exit(2);
    }
    // unshare(CLONE_NEWNS) and setns(mnt) refuse multi-threaded callers:
    // the `stasis` binary must dispatch here before starting any runtime.
    let threads = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().to_string()))
        })
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1);
    if threads > 1 {
        eprintln!(
            "stasis shim: called with {threads} threads; dispatch `{SHIM_SUBCOMMAND}` before starting any thread or async runtime"
        );
        println!("error shim started multi-threaded ({threads} threads): dispatch it before the async runtime starts");
        std::process::exit(125);
    }
    let code = match args[n - 2].as_str() {
        "init" => run_init(&args[n - 1]),
        "exec" => run_exec(&args[n - 1]),
        "supervise" => match read_config(&args[n - 1]) {
            Ok(cfg) => crate::supervisor::run_supervise(cfg),
            Err(e) => {
                println!("error {e}");
                1
            }
        },
        other => {
            eprintln!("stasis shim: unknown mode {other:?}");
            2
        }
    };
    std::process::exit(code)
}

/// `-` reads the config from stdin (init uses that, so the sandbox's
/// /proc/1/cmdline does not show host paths).
fn read_config<T: for<'de> Deserialize<'de>>(path: &str) -> Result<T, String> {
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

fn join_cgroups(files: &[PathBuf]) -> Result<(), String> {
    let pid = std::process::id().to_string();
    for f in files {
        fs::write(f, &pid).map_err(|e| format!("join cgroup {}: {e}", f.display()))?;
    }
    if let Ok(cgs) = crate::cgroup::Cgroups::detect() {
        cgs.escape_service(files);
    }
    Ok(())
}

fn pipe() -> Result<(File, File), String> {
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    Ok((File::from(r), File::from(w)))
}

// ---------------------------------------------------------------- init

fn run_init(path: &str) -> i32 {
    let report = |msg: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{msg}");
        let _ = out.flush();
    };
    let cfg: InitConfig = match read_config(path) {
        Ok(c) => c,
        Err(e) => {
            report(&format!("error {e}"));
            return 1;
        }
    };
    if let Err(e) = join_cgroups(&cfg.cgroup_procs) {
        report(&format!("error {e}"));
        return 1;
    }
    // The user namespace is made first: its helper must not become the
    // new PID namespace's first process.
    let userns = match cfg.idmap.as_ref().map(crate::userns::create).transpose() {
        Ok(u) => u,
        Err(e) => {
            report(&format!("error {e}"));
            return 1;
        }
    };
    // Own session: terminal signals to the daemon's process group (Ctrl-C)
    // do not reach sandboxes; the daemon ends them explicitly.
    let _ = nix::unistd::setsid();
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        // (cgroup namespace: the sandbox sees its own cgroup as "/", not host paths)
        | CloneFlags::CLONE_NEWCGROUP;
    if let Err(e) = unshare(flags) {
        report(&format!("error unshare namespaces: {e}"));
        return 1;
    }
    let (mut r, mut w) = match pipe() {
        Ok(p) => p,
        Err(e) => {
            report(&format!("error {e}"));
            return 1;
        }
    };
    match unsafe { fork() } {
        Err(e) => {
            report(&format!("error fork: {e}"));
            1
        }
        Ok(ForkResult::Child) => {
            drop(r);
            match init_setup(&cfg, userns) {
                Err(e) => {
                    let _ = w.write_all(format!("error {e}").as_bytes());
                    std::process::exit(1);
                }
                Ok(()) => {
                    let _ = w.write_all(b"ok");
                    drop(w);
                    init_loop()
                }
            }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(w);
            drop(userns);
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            if msg == "ok" {
                report(&format!("ok {child}"));
            } else if msg.is_empty() {
                report("error sandbox init died during setup");
            } else {
                report(&msg);
            }
            // Nothing more goes to the daemon: detach from its pipes so a
            // daemon restart does not leave us writing into a dead pipe.
            if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
                for fd in 0..3 {
                    unsafe {
                        libc::dup2(null.as_raw_fd(), fd);
                    }
                }
            }
            loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => break,
                    Err(nix::errno::Errno::EINTR) | Ok(_) => continue,
                    Err(_) => break,
                }
            }
            if msg == "ok" {
                0
            } else {
                1
            }
        }
    }
}

fn overlay_path_ok(p: &Path) -> bool {
    let s = p.to_string_lossy();
    !s.contains([',', ':', '\\', '\n'])
}

fn mkdir_p(p: &Path) -> Result<(), String> {
    fs::create_dir_all(p).map_err(|e| format!("mkdir {}: {e}", p.display()))
}

fn do_mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), String> {
    mount(src, target, fstype, flags, data).map_err(|e| {
        format!(
            "mount {} on {} ({}): {e}",
            src.unwrap_or("-"),
            target.display(),
            fstype.unwrap_or("bind")
        )
    })
}

/// Bind `target` onto itself read-only.
fn bind_ro(src: &Path, target: &Path) -> Result<(), String> {
    let s = src.to_string_lossy().into_owned();
    do_mount(
        Some(&s),
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    do_mount(
        None,
        target,
        None,
        MsFlags::MS_BIND
            | MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV
            | MsFlags::MS_NOEXEC,
        None,
    )
}

/// Bind one read-only input into the new root: `src` (the canonical host
/// path the daemon checked against its allowed roots) is opened without
/// following any symlink, the target is created and opened *inside* the
/// root (`RESOLVE_IN_ROOT`: a symlink the sandbox left in its writable layer
/// cannot point the mount, or the mkdir, at a host path), and the bind is
/// made fd to fd, read-only, nosuid, nodev from the start. Not recursive:
/// mounts below the source are not carried in. Only the (empty) mount point
/// lands in the writable layer; the content never does.
///
/// With a user namespace the bind is also idmapped through it, so host
/// owners keep their ids inside (host root's files are root's, readable as
/// before, and writes fail with EROFS, not EACCES); on a filesystem that
/// cannot be idmapped the plain bind is kept (host root's files then appear
/// as `nobody`: readable when world-readable).
fn input_mount(
    root: &Path,
    src: &Path,
    target: &str,
    userns: Option<&OwnedFd>,
) -> Result<(), String> {
    let c = CString::new(src.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("mount source {} has NUL", src.display()))?;
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(format!(
            "open mount source {}: {}",
            src.display(),
            std::io::Error::last_os_error()
        ));
    }
    let src_fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let is_dir = File::from(src_fd.try_clone().map_err(|e| format!("dup: {e}"))?)
        .metadata()
        .map_err(|e| format!("stat {}: {e}", src.display()))?
        .is_dir();
    let r = crate::fsops::Root::open_dir(root).map_err(|e| format!("open root: {e}"))?;
    let tfd = if is_dir {
        r.mkdir_p(target)
            .map_err(|e| format!("mount target {target}: {}", e.message))?;
        r.open(target, libc::O_PATH | libc::O_DIRECTORY, 0)
    } else {
        let parent = target.rsplit_once('/').map(|(p, _)| p).unwrap_or("/");
        r.mkdir_p(parent)
            .map_err(|e| format!("mount target {target}: {}", e.message))?;
        r.open(
            target,
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOCTTY,
            0o644,
        )
    }
    .map_err(|e| format!("mount target {target}: {e}"))?;
    // New mount API: clone the source as a detached mount, make it
    // read-only, nosuid, nodev while still detached, then attach it on the
    // target fd (no window in which it is writable, no path re-lookup).
    let e = |what: &str| {
        format!(
            "{what} {}: {}",
            src.display(),
            std::io::Error::last_os_error()
        )
    };
    let empty = c"";
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            src_fd.as_raw_fd(),
            empty.as_ptr(),
            (OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32) as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(e("open_tree"));
    }
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let setattr = |attr: MountAttr| mount_setattr(&tree, &attr);
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    let mut rc = -1;
    if let Some(ns) = userns {
        rc = setattr(MountAttr {
            attr_set: ro | MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: ns.as_raw_fd() as u64,
        });
    }
    if rc != 0 {
        rc = setattr(MountAttr {
            attr_set: ro,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        });
    }
    if rc != 0 {
        return Err(e("mount_setattr read-only"));
    }
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            tfd.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(format!(
            "move_mount {} onto {target}: {}",
            src.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

// The new mount API's flags and `struct mount_attr` (linux/mount.h; the
// libc crate has the syscall numbers but not these).
pub(crate) const OPEN_TREE_CLONE: u32 = 1;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(crate) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
pub(crate) const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

#[repr(C)]
pub(crate) struct MountAttr {
    pub(crate) attr_set: u64,
    pub(crate) attr_clr: u64,
    pub(crate) propagation: u64,
    pub(crate) userns_fd: u64,
}

/// mount_setattr(2) on a detached mount tree (`open_tree` with
/// OPEN_TREE_CLONE); 0 or -1 with errno set.
pub(crate) fn mount_setattr(tree: &OwnedFd, attr: &MountAttr) -> libc::c_long {
    let empty = c"";
    // SAFETY: a valid fd, an empty NUL-terminated path with AT_EMPTY_PATH,
    // and a pointer to a live `mount_attr` of the size passed.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    }
}

/// PID 1 of the sandbox, in its fresh namespaces: build the root and pivot.
///
/// Root filesystem layout:
/// - `/` is one overlay mount: lower = the image (or the host's `/`), upper
///   and work dirs in the sandbox's state dir. With the host's `/` as lower,
///   only the root filesystem itself is seen (overlayfs does not cross into
///   other mounts of the lower), and the daemon has put opaque dirs and
///   whiteouts into the upper layer for every top-level entry outside a
///   system allow-list (/usr, /bin, /lib*, /etc, /opt, /var, ...), so /root,
///   /home, /tmp, /work etc. of the host are not visible. The upper dir being
///   on the same filesystem as the lower is accepted by overlayfs as long as
///   it is not a layer *root* ancestor; lookups that would reach it from
///   inside fail with ELOOP, and the daemon's data dir is hidden anyway.
/// - `/proc`: a new procfs of the sandbox's PID namespace, with /proc/sys,
///   /proc/sysrq-trigger, /proc/irq, /proc/bus read-only and /proc/kcore,
///   /proc/keys, /proc/timer_list covered by /dev/null.
/// - `/dev`: a small tmpfs with null, zero, full, random, urandom, tty bound
///   from the host, a private devpts instance and a /dev/shm tmpfs.
/// - `/tmp` and the workdir are plain directories of the overlay (so they
///   persist in the writable layer like everything else).
///
/// With a user namespace (`userns`), the lower layer and the writable
/// layer's directory are idmapped mounts of it (attached on a scratch tmpfs
/// at the root mount point, which the overlay then covers), everything is
/// created with the sandbox root's host ids (fsuid), and PID 1 joins the
/// user namespace as its root last, after every mount (see [`crate::userns`]).
fn init_setup(cfg: &InitConfig, userns: Option<OwnedFd>) -> Result<(), String> {
    do_mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    for p in [&cfg.lower, &cfg.upper, &cfg.work] {
        if !overlay_path_ok(p) {
            return Err(format!(
                "path {} contains a character overlayfs cannot take (, : \\)",
                p.display()
            ));
        }
    }
    let root = &cfg.root;
    let (lower, upper, work) = match (&userns, &cfg.idmap) {
        (Some(ns), Some(map)) => idmapped_layers(cfg, ns, map.host)?,
        _ => (cfg.lower.clone(), cfg.upper.clone(), cfg.work.clone()),
    };
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=off,metacopy=off,index=off",
        lower.display(),
        upper.display(),
        work.display()
    );
    do_mount(
        Some("overlay"),
        root,
        Some("overlay"),
        MsFlags::empty(),
        Some(&opts),
    )?;
    for (src, target) in &cfg.mounts {
        input_mount(root, src, target, userns.as_ref())?;
    }
    if !cfg.outputs.is_empty() {
        let r = crate::fsops::Root::open_dir(root).map_err(|e| format!("open root: {e}"))?;
        for o in &cfg.outputs {
            r.mkdir_p(o)
                .map_err(|e| format!("output dir {o}: {}", e.message))?;
        }
    }

    // /proc
    let proc_ = root.join("proc");
    mkdir_p(&proc_)?;
    do_mount(
        Some("proc"),
        &proc_,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    )?;
    if let Some(map) = &cfg.idmap {
        // The network namespace stays owned by the host's user namespace,
        // so root inside has no CAP_NET_BIND_SERVICE/CAP_NET_RAW over it:
        // let every sandbox id bind low ports and open ICMP echo sockets.
        let ipv4 = proc_.join("sys/net/ipv4");
        for (k, v) in [
            ("ip_unprivileged_port_start", "0".to_string()),
            (
                "ping_group_range",
                format!("{} {}", map.host, map.host + map.size - 1),
            ),
        ] {
            fs::write(ipv4.join(k), v).map_err(|e| format!("sysctl net.ipv4.{k}: {e}"))?;
        }
    }
    for p in ["sys", "sysrq-trigger", "irq", "bus"] {
        let t = proc_.join(p);
        if t.exists() {
            bind_ro(&t, &t)?;
        }
    }
    for p in ["kcore", "keys", "timer_list"] {
        let t = proc_.join(p);
        if t.exists() {
            do_mount(Some("/dev/null"), &t, None, MsFlags::MS_BIND, None)?;
        }
    }

    // /dev
    let dev = root.join("dev");
    mkdir_p(&dev)?;
    do_mount(
        Some("tmpfs"),
        &dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=755,size=1024k"),
    )?;
    for n in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = Path::new("/dev").join(n);
        if !host.exists() {
            continue;
        }
        let t = dev.join(n);
        File::create(&t).map_err(|e| format!("create {}: {e}", t.display()))?;
        do_mount(
            Some(&host.to_string_lossy()),
            &t,
            None,
            MsFlags::MS_BIND,
            None,
        )?;
    }
    let pts = dev.join("pts");
    mkdir_p(&pts)?;
    do_mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )?;
    let shm = dev.join("shm");
    mkdir_p(&shm)?;
    do_mount(
        Some("tmpfs"),
        &shm,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777,size=65536k"),
    )?;
    for (name, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(target, dev.join(name)).map_err(|e| format!("symlink /dev/{name}: {e}"))?;
    }

    // /tmp and the workdir (created through the overlay: they land in the upper layer).
    let tmp = root.join("tmp");
    if !tmp.exists() {
        mkdir_p(&tmp)?;
        set_mode(&tmp, 0o1777)?;
    }
    let wd = root.join(cfg.workdir.trim_start_matches('/'));
    mkdir_p(&wd)?;

    for h in &cfg.hide {
        let t = root.join(h.strip_prefix("/").unwrap_or(h));
        if t.is_dir() {
            do_mount(
                Some("tmpfs"),
                &t,
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=4k,mode=755"),
            )?;
        }
    }

    // Pivot into the new root; the old root is detached (pivot_root(".", ".")).
    nix::unistd::chdir(root.as_path()).map_err(|e| format!("chdir {}: {e}", root.display()))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| format!("pivot_root: {e}"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("detach old root: {e}"))?;
    nix::unistd::chdir("/").map_err(|e| format!("chdir /: {e}"))?;

    nix::unistd::sethostname(&cfg.hostname).map_err(|e| format!("sethostname: {e}"))?;
    lo_up()?;

    if let Some(ns) = userns {
        use std::os::fd::AsFd;
        crate::userns::enter(ns.as_fd())?;
    }
    // PID 1 keeps no privileges it does not need either.
    drop_privileges()?;
    Ok(())
}

/// Attach idmapped mounts of the lower layer and of the writable layer's
/// directory on a scratch tmpfs at the root mount point, and switch this
/// thread's fs ids to the sandbox root's host ids (so the overlay, which
/// keeps its mounter's credentials, writes inside ids 0 to disk). Returns
/// the overlay's lower, upper and work dirs.
fn idmapped_layers(
    cfg: &InitConfig,
    ns: &OwnedFd,
    host: u32,
) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let (Some(lr), Some(up), Some(wk)) = (
        cfg.upper.parent(),
        cfg.upper.file_name(),
        cfg.work.file_name(),
    ) else {
        return Err("bad layer paths".into());
    };
    if cfg.work.parent() != Some(lr) {
        return Err("upper and work dirs must share a directory".into());
    }
    let root = &cfg.root;
    do_mount(
        Some("tmpfs"),
        root,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=16k,mode=700"),
    )?;
    let (l, u) = (root.join("lower"), root.join("layer"));
    mkdir_p(&l)?;
    mkdir_p(&u)?;
    crate::userns::mount_idmapped(&cfg.lower, &l, ns)?;
    crate::userns::mount_idmapped(lr, &u, ns)?;
    crate::userns::set_fs_ids(host)?;
    Ok((l, u.join(up), u.join(wk)))
}

fn set_mode(p: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", p.display()))
}

/// Bring the loopback interface of the (otherwise empty) network namespace up.
fn lo_up() -> Result<(), String> {
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        let _guard = OwnedFd::from_raw_fd(fd);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(format!(
                "SIOCGIFFLAGS lo: {}",
                std::io::Error::last_os_error()
            ));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(format!(
                "SIOCSIFFLAGS lo: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// PID 1's job after setup: reap orphans, forever, sleeping in sigwait.
fn init_loop() -> ! {
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            unsafe {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
    }
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
    loop {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        let _ = set.wait();
    }
}

// ---------------------------------------------------------------- privileges

/// Capabilities kept inside the sandbox (Docker's default set). Everything
/// else (CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_NET_ADMIN,
/// CAP_MKNOD, CAP_DAC_READ_SEARCH, CAP_SYS_RAWIO, CAP_BPF, ...) is dropped
/// from the bounding set, so not even a later exec of a setuid binary gets it.
const KEEP_CAPS: [u32; 13] = [
    0,  // CHOWN
    1,  // DAC_OVERRIDE
    3,  // FOWNER
    4,  // FSETID
    5,  // KILL
    6,  // SETGID
    7,  // SETUID
    8,  // SETPCAP
    10, // NET_BIND_SERVICE
    13, // NET_RAW
    18, // SYS_CHROOT
    29, // AUDIT_WRITE
    31, // SETFCAP
];

fn drop_caps() -> Result<(), String> {
    for cap in 0..64u32 {
        if KEEP_CAPS.contains(&cap) {
            continue;
        }
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break; // past the last capability this kernel knows
            }
            return Err(format!("drop capability {cap}: {err}"));
        }
    }
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    let mut keep: u64 = 0;
    for c in KEEP_CAPS {
        keep |= 1 << c;
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let hdr = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [
        Data {
            effective: keep as u32,
            permitted: keep as u32,
            inheritable: 0,
        },
        Data {
            effective: (keep >> 32) as u32,
            permitted: (keep >> 32) as u32,
            inheritable: 0,
        },
    ];
    let rc = unsafe { libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) };
    if rc != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The syscalls refused (EPERM) inside a sandbox.
pub(crate) fn denied_syscalls() -> Vec<(&'static str, i64)> {
    let mut v: Vec<(&'static str, i64)> = vec![
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("reboot", libc::SYS_reboot),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("setns", libc::SYS_setns),
        ("fsopen", libc::SYS_fsopen),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsmount", libc::SYS_fsmount),
        ("fspick", libc::SYS_fspick),
        ("move_mount", libc::SYS_move_mount),
        ("open_tree", libc::SYS_open_tree),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("acct", libc::SYS_acct),
        ("quotactl", libc::SYS_quotactl),
        ("syslog", libc::SYS_syslog),
        ("settimeofday", libc::SYS_settimeofday),
        ("clock_settime", libc::SYS_clock_settime),
        ("clock_adjtime", libc::SYS_clock_adjtime),
        ("adjtimex", libc::SYS_adjtimex),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("vhangup", libc::SYS_vhangup),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        ("iopl", libc::SYS_iopl),
        ("ioperm", libc::SYS_ioperm),
        ("uselib", libc::SYS_uselib),
        ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ]);
    v
}

/// Build the seccomp programs: (1) EPERM for the denied syscalls, for
/// clone/unshare asking for new namespaces, for AF_VSOCK sockets and for the
/// TIOCSTI/TIOCLINUX ioctls; (2) ENOSYS for clone3, whose flags
/// live in memory a filter cannot inspect (libc then falls back to clone).
pub(crate) fn seccomp_programs() -> Result<Vec<seccompiler::BpfProgram>, String> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;
    let arch =
        TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp arch: {e}"))?;
    let ns_rules = |flags: &[u64]| -> Result<Vec<SeccompRule>, String> {
        flags
            .iter()
            .map(|&f| {
                SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f)
                    .and_then(|c| SeccompRule::new(vec![c]))
                    .map_err(|e| e.to_string())
            })
            .collect()
    };
    let clone_ns = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ]
    .map(|f| f as u64);
    let mut unshare_ns = clone_ns.to_vec();
    unshare_ns.push(0x80); // CLONE_NEWTIME (unshare only; it is CSIGNAL space for clone)

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in denied_syscalls() {
        rules.insert(nr, vec![]);
    }
    rules.insert(libc::SYS_clone, ns_rules(&clone_ns)?);
    rules.insert(libc::SYS_unshare, ns_rules(&unshare_ns)?);
    let eq = |arg: u8, v: u64| -> Result<SeccompRule, String> {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    };
    // vsock is not network-namespaced: it would reach the hypervisor/host.
    rules.insert(libc::SYS_socket, vec![eq(0, libc::AF_VSOCK as u64)?]);
    // Terminal input injection and console ioctls.
    rules.insert(
        libc::SYS_ioctl,
        vec![eq(1, 0x5412)?, eq(1, 0x541C)?], // TIOCSTI, TIOCLINUX
    );
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let nosys = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    let a: seccompiler::BpfProgram = deny
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let b: seccompiler::BpfProgram = nosys
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(vec![a, b])
}

/// Drop capabilities and install the seccomp filter (sets no_new_privs).
fn drop_privileges() -> Result<(), String> {
    drop_caps()?;
    for prog in seccomp_programs()? {
        seccompiler::apply_filter(&prog).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------- exec

fn run_exec(path: &str) -> i32 {
    let cfg: Result<ExecConfig, String> = read_config(path);
    // The config (with the command's environment, possibly secrets) came in
    // an inherited memory file: close it so the command does not inherit it.
    if let Some(fd) = path
        .strip_prefix("/proc/self/fd/")
        .and_then(|n| n.parse::<i32>().ok())
    {
        // SAFETY: closing an fd this process inherited for this purpose only.
        unsafe { libc::close(fd) };
    }
    let cfg: ExecConfig = match cfg {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stasis shim: {e}");
            return 125;
        }
    };
    let mut status_file = match File::create(&cfg.status_path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("stasis shim: create {}: {e}", cfg.status_path.display());
            return 125;
        }
    };
    let mut report = |st: &ExecStatus| {
        let _ = status_file.write_all(&serde_json::to_vec(st).unwrap_or_default());
        let _ = status_file.flush();
    };
    match exec_inner(&cfg) {
        Ok(st) => {
            report(&st);
            match st {
                ExecStatus::Exited(c) => c,
                ExecStatus::Signaled(s) => 128 + s,
                _ => 125,
            }
        }
        Err(e) => {
            report(&ExecStatus::Setup(e));
            125
        }
    }
}

fn exec_inner(cfg: &ExecConfig) -> Result<ExecStatus, String> {
    join_cgroups(&cfg.cgroup_procs)?;
    // Pin the init process with a pidfd, then make sure it is the sandbox's
    // PID 1 (its cgroup), so a recycled pid cannot take us elsewhere.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, cfg.init_pid, 0) };
    if pidfd < 0 {
        return Err(format!(
            "sandbox init {} is gone: {}",
            cfg.init_pid,
            std::io::Error::last_os_error()
        ));
    }
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let cg = fs::read_to_string(format!("/proc/{}/cgroup", cfg.init_pid)).unwrap_or_default();
    let marker = format!("/{}", cfg.init_cgroup.trim_start_matches('/'));
    if !cg.lines().any(|l| l.ends_with(&marker)) {
        return Err(format!(
            "pid {} is not this sandbox's init (cgroup {marker} not found)",
            cfg.init_pid
        ));
    }
    let all = CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWCGROUP;
    // setns(pidfd, flags) enters all namespaces at once (Linux 5.8+).
    setns(&pidfd, all).map_err(|e| format!("setns into sandbox: {e}"))?;
    // setns(mnt) moved our root and cwd to the sandbox's (pivoted) root.
    let argv: Vec<CString> = cfg
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| "argv contains NUL".to_string()))
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = cfg
        .env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(|_| "env contains NUL".to_string()))
        .collect::<Result<_, _>>()?;
    let path_var = cfg
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let cwd = cfg.cwd.clone();
    let merge = cfg.merge_stderr;
    let (mut r, mut w) = pipe()?;
    let forked =
        match unsafe { fork() } {
            Ok(f) => f,
            // The sandbox is at its pids cap: report it as the command's failure
            // (like a shell would), not as a broken sandbox.
            Err(nix::errno::Errno::EAGAIN) => return Ok(ExecStatus::Exec(
                126,
                "cannot start the command: the sandbox reached its process limit (resources.pids)"
                    .to_string(),
            )),
            Err(e) => return Err(format!("fork: {e}")),
        };
    match forked {
        ForkResult::Child => {
            drop(r);
            let mut fail = |tag: &str, code: i32, msg: String| -> ! {
                let _ = w.write_all(format!("{tag}\n{code}\n{msg}").as_bytes());
                unsafe { libc::_exit(code) }
            };
            let _ = nix::unistd::setsid();
            // Rust ignores SIGPIPE at startup; commands expect the default.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            }
            let _ = nix::sys::signal::sigprocmask(
                SigmaskHow::SIG_SETMASK,
                Some(&SigSet::empty()),
                None,
            );
            if merge {
                unsafe {
                    libc::dup2(1, 2);
                }
            }
            // Last namespace: the sandbox's user namespace, as its root
            // (a no-op for a sandbox started without one).
            {
                use std::os::fd::AsFd;
                if let Err(e) = crate::userns::enter(pidfd.as_fd()) {
                    fail("setup", 125, e);
                }
            }
            drop(pidfd);
            if let Err(e) = nix::unistd::chdir(cwd.as_str()) {
                fail(
                    "cwd",
                    126,
                    format!("cannot enter working directory {cwd}: {e}"),
                );
            }
            if let Err(e) = drop_privileges() {
                fail("setup", 125, e);
            }
            let prog = &cfg.argv[0];
            let candidates: Vec<String> = if prog.contains('/') {
                vec![prog.clone()]
            } else {
                path_var
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(|d| format!("{}/{prog}", d.trim_end_matches('/')))
                    .collect()
            };
            let mut err = nix::errno::Errno::ENOENT;
            for c in candidates {
                let Ok(cpath) = CString::new(c) else { continue };
                let Err(e) = nix::unistd::execve(&cpath, &argv, &envp);
                // Keep the most telling error (EACCES beats ENOENT).
                if e != nix::errno::Errno::ENOENT && err != nix::errno::Errno::EACCES {
                    err = e;
                }
            }
            let code = if err == nix::errno::Errno::ENOENT {
                127
            } else {
                126
            };
            let msg = if err == nix::errno::Errno::ENOENT {
                format!("{prog}: command not found")
            } else {
                format!("{prog}: {err}")
            };
            fail("exec", code, msg)
        }
        ForkResult::Parent { child } => {
            drop(w);
            drop(pidfd);
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            let status = loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, c)) => break ExecStatus::Exited(c),
                    Ok(WaitStatus::Signaled(_, s, _)) => break ExecStatus::Signaled(s as i32),
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(format!("waitpid: {e}")),
                }
            };
            if !msg.is_empty() {
                let mut parts = msg.splitn(3, '\n');
                let tag = parts.next().unwrap_or("");
                let code: i32 = parts.next().and_then(|c| c.parse().ok()).unwrap_or(125);
                let text = parts.next().unwrap_or("").to_string();
                return Ok(match tag {
                    "cwd" => ExecStatus::Cwd(text),
                    "exec" => ExecStatus::Exec(code, text),
                    _ => ExecStatus::Setup(text),
                });
            }
            Ok(status)
        }
    }
}
