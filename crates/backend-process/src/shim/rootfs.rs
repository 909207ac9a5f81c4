//! PID 1's root filesystem, built in its fresh mount namespace: the
//! overlay (over idmapped layers with a user namespace), input mounts,
//! output dirs, /proc, /dev, /tmp, the workdir, hidden host paths, then
//! pivot_root into it, hostname and loopback, and PID 1's jail.

use std::fs::{self, File};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::input_mount::input_mount;
use super::jail::drop_privileges;
use crate::shim_proto::InitConfig;

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
pub(super) fn init_setup(cfg: &InitConfig, userns: Option<OwnedFd>) -> Result<(), String> {
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
