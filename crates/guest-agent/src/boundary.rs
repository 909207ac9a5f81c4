//! The sandbox's boundaries as the guest applies them (`Request::Configure`).
//!
//! None of this is what keeps the guest in: the host enforces the hard limits
//! outside the guest (the daemon's egress service polices QEMU's network
//! namespace, where user networking opens the guest's connections; input
//! disks are read-only drives; the writable disk has a fixed virtual size;
//! RAM is the VM's). The guest side makes the allowed things usable (an
//! interface and its route, relays for allow entries on the host's
//! loopback, mounts) and caps what a runaway command can do to its own
//! sandbox (a pids cgroup).

use crate::AgentError;
use stasis_agent_proto::{GuestConfig, GuestForward, GuestMount, GuestNetwork};
use std::collections::HashMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The cgroup (v2) every exec and session is started in.
const SANDBOX_CGROUP: &str = "/sys/fs/cgroup/stasis";
/// Set once the cgroup exists: children join it before exec.
static CGROUP_READY: AtomicBool = AtomicBool::new(false);
/// Where file mounts' disks are mounted before the file is bound to its target.
const RO_DIR: &str = "/run/stasis/ro";

pub fn apply(c: &GuestConfig) -> Result<(), AgentError> {
    if c.grow_root {
        grow_root()?;
    }
    if c.pids > 0 {
        pids_cap(c.pids)?;
    }
    for o in &c.outputs {
        std::fs::create_dir_all(o).map_err(|e| AgentError::io(Path::new(o), e))?;
    }
    for m in &c.mounts {
        mount_ro(m)?;
    }
    match &c.network {
        Some(n) => network(n)?,
        None => set_relays(&[])?,
    }
    Ok(())
}

/// Called in a forked child before exec (async-signal-safe: open, write, close).
pub fn join_sandbox_cgroup_in_child() {
    if !CGROUP_READY.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: a constant NUL-terminated path; open/write/close only.
    unsafe {
        let fd = libc::open(
            c"/sys/fs/cgroup/stasis/cgroup.procs".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, b"0".as_ptr() as *const _, 1);
            libc::close(fd);
        }
    }
}

fn busybox() -> &'static str {
    if Path::new("/run/stasis/busybox").exists() {
        "/run/stasis/busybox"
    } else {
        "/bin/busybox"
    }
}

fn run(argv: &[&str]) -> Result<String, AgentError> {
    // Through the agent's reaper (it reaps every child; a plain wait would
    // find none).
    let fail = |e: String| AgentError::internal(format!("{}: {e}", argv.join(" ")));
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let (mut child, slot) = crate::reaper::spawn(&mut cmd).map_err(|e| fail(e.to_string()))?;
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    match slot.wait(Some(Duration::from_secs(120))) {
        Some(crate::reaper::Exit::Code(0)) => Ok(out),
        Some(x) => Err(fail(format!("{x:?}: {}", err.trim()))),
        None => {
            crate::reaper::kill_tree(child.id() as i32);
            Err(fail("did not finish within 120 s".into()))
        }
    }
}

/// `ip ...`, where "already there" counts as done.
fn ip(args: &[&str]) -> Result<(), AgentError> {
    let mut argv = vec![busybox(), "ip"];
    argv.extend_from_slice(args);
    match run(&argv) {
        Ok(_) => Ok(()),
        Err(e) if e.message.contains("File exists") => Ok(()),
        Err(e) => Err(e),
    }
}

fn grow_root() -> Result<(), AgentError> {
    let dev = root_device().ok_or_else(|| AgentError::internal("root device not found"))?;
    for tool in ["/sbin/resize2fs", "/usr/sbin/resize2fs"] {
        if Path::new(tool).exists() {
            run(&[tool, &dev])?;
            return Ok(());
        }
    }
    Err(AgentError::internal("resize2fs is not in the guest image"))
}

/// The block device mounted at /.
fn root_device() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (src, dst) = (f.next()?, f.next()?);
        (dst == "/" && src.starts_with("/dev/")).then(|| src.to_string())
    })
}

fn pids_cap(max: u64) -> Result<(), AgentError> {
    let root = Path::new("/sys/fs/cgroup");
    if !root.join("cgroup.controllers").exists() {
        let _ = std::fs::create_dir_all(root);
        let (src, fstype) = (c"cgroup2", c"cgroup2");
        // SAFETY: valid C strings.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                c"/sys/fs/cgroup".as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(AgentError::internal(format!(
                "mount cgroup2: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    let w = |p: &Path, v: &str| std::fs::write(p, v).map_err(|e| AgentError::io(p, e));
    w(&root.join("cgroup.subtree_control"), "+pids")?;
    let cg = Path::new(SANDBOX_CGROUP);
    if !cg.is_dir() {
        std::fs::create_dir(cg).map_err(|e| AgentError::io(cg, e))?;
    }
    w(&cg.join("pids.max"), &max.to_string())?;
    CGROUP_READY.store(true, Ordering::Relaxed);
    Ok(())
}

/// `/dev/<name>` of the virtio disk whose serial is `serial`.
fn disk_by_serial(serial: &str, wait: Duration) -> Option<PathBuf> {
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(rd) = std::fs::read_dir("/sys/block") {
            for e in rd.flatten() {
                let s = std::fs::read_to_string(e.path().join("serial")).unwrap_or_default();
                if s.trim() == serial {
                    let dev = Path::new("/dev").join(e.file_name());
                    if dev.exists() {
                        return Some(dev);
                    }
                }
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `major:minor` of what is mounted at `target`, if anything.
fn mounted_dev(target: &str) -> Option<String> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mi.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 4 && f[4] == target).then(|| f[2].to_string())
    })
}

fn dev_numbers(dev: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(dev).ok()?.rdev();
    Some(format!("{}:{}", libc::major(rdev), libc::minor(rdev)))
}

fn cstr(p: &Path) -> Result<CString, AgentError> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| AgentError::invalid(format!("{} has a NUL byte", p.display())))
}

fn sys_mount(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
) -> Result<(), AgentError> {
    let s = src.map(cstr).transpose()?;
    let d = cstr(dst)?;
    let t = fstype.map(|t| CString::new(t).unwrap());
    // SAFETY: valid C strings or null.
    let rc = unsafe {
        libc::mount(
            s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            d.as_ptr(),
            t.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(AgentError::internal(format!(
            "mount {} on {}: {}",
            src.map(|s| s.display().to_string()).unwrap_or_default(),
            dst.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

fn detach(target: &Path) {
    if let Ok(t) = cstr(target) {
        // SAFETY: valid C string.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Drop the kernel's cached blocks of a disk whose content was replaced.
fn flush_buffers(dev: &Path) {
    const BLKFLSBUF: libc::c_ulong = 0x1261; // _IO(0x12, 97)
    if let Ok(f) = std::fs::File::open(dev) {
        // SAFETY: argument-less ioctl on an open block device.
        unsafe { libc::ioctl(f.as_raw_fd(), BLKFLSBUF as _, 0) };
    }
}

fn mount_ro(m: &GuestMount) -> Result<(), AgentError> {
    let dev = disk_by_serial(&m.serial, Duration::from_secs(10)).ok_or_else(|| {
        AgentError::internal(format!("no disk with serial {} in the guest", m.serial))
    })?;
    let want = dev_numbers(&dev);
    let ro = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    let target = Path::new(&m.target);
    // A directory source is mounted at the target itself; a file source's disk
    // goes to RO_DIR and its one file is bound onto the target.
    let disk_at = match &m.file {
        None => target.to_path_buf(),
        Some(_) => Path::new(RO_DIR).join(&m.serial),
    };
    let disk_at_s = disk_at.to_string_lossy().into_owned();
    let current = mounted_dev(&disk_at_s);
    if current.is_some() && current == want && !m.refresh {
        return Ok(()); // resumed: still mounted
    }
    if m.file.is_some() {
        detach(target);
    }
    if current.is_some() {
        detach(&disk_at);
    }
    if m.refresh {
        flush_buffers(&dev);
    }
    std::fs::create_dir_all(&disk_at).map_err(|e| AgentError::io(&disk_at, e))?;
    sys_mount(Some(&dev), &disk_at, Some("ext4"), ro)?;
    if let Some(name) = &m.file {
        let src = disk_at.join(name);
        if let Some(p) = target.parent() {
            std::fs::create_dir_all(p).map_err(|e| AgentError::io(p, e))?;
        }
        if !target.exists() {
            std::fs::File::create(target).map_err(|e| AgentError::io(target, e))?;
        }
        sys_mount(Some(&src), target, None, libc::MS_BIND)?;
        sys_mount(None, target, None, libc::MS_REMOUNT | libc::MS_BIND | ro)?;
    }
    Ok(())
}

fn network(n: &GuestNetwork) -> Result<(), AgentError> {
    let iface = nic(Duration::from_secs(10))
        .ok_or_else(|| AgentError::internal("the guest has no network interface"))?;
    ip(&["link", "set", &iface, "up"])?;
    ip(&["addr", "add", &n.address, "dev", &iface])?;
    ip(&[
        "route", "replace", "default", "via", &n.gateway, "dev", &iface,
    ])?;
    for f in &n.forwards {
        let dest: SocketAddr = f
            .destination
            .parse()
            .map_err(|_| AgentError::invalid(format!("bad destination {:?}", f.destination)))?;
        let a = dest.ip();
        if !a.is_loopback() {
            // The destination's own address, local to the guest: connections
            // to it reach the relay below and keep the address as written.
            let cidr = if a.is_ipv4() {
                format!("{a}/32")
            } else {
                format!("{a}/128")
            };
            ip(&["addr", "add", &cidr, "dev", "lo"])?;
        }
    }
    set_relays(&n.forwards)
}

/// The first non-loopback interface (virtio_net may still be probing).
fn nic(wait: Duration) -> Option<String> {
    let deadline = Instant::now() + wait;
    loop {
        if let Ok(rd) = std::fs::read_dir("/sys/class/net") {
            let mut names: Vec<String> = rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "lo")
                .collect();
            names.sort();
            if let Some(n) = names.into_iter().next() {
                return Some(n);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Relay {
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
}

fn relays() -> &'static Mutex<HashMap<GuestForward, Relay>> {
    static R: OnceLock<Mutex<HashMap<GuestForward, Relay>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Make the running relays exactly `forwards` (listeners kept across pause
/// and resume live in guest memory; a restore with another allowlist
/// replaces them).
fn set_relays(forwards: &[GuestForward]) -> Result<(), AgentError> {
    let mut map = relays().lock().unwrap();
    map.retain(|k, r| {
        let keep = forwards.contains(k);
        if !keep {
            r.stop.store(true, Ordering::SeqCst);
            // SAFETY: shutdown(2) on a listening socket we own wakes accept().
            unsafe { libc::shutdown(r.listener.as_raw_fd(), libc::SHUT_RDWR) };
        }
        keep
    });
    for f in forwards {
        if map.contains_key(f) {
            continue;
        }
        let dest: SocketAddr = f
            .destination
            .parse()
            .map_err(|_| AgentError::invalid(format!("bad destination {:?}", f.destination)))?;
        let via: SocketAddr = f
            .via
            .parse()
            .map_err(|_| AgentError::invalid(format!("bad relay address {:?}", f.via)))?;
        let listener = bind_retry(dest)?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (listener.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("relay {dest}"))
            .spawn(move || accept_loop(&l, via, &s))
            .map_err(|e| AgentError::internal(format!("relay thread: {e}")))?;
        map.insert(f.clone(), Relay { listener, stop });
    }
    Ok(())
}

/// An address just added to `lo` may take a moment to become bindable.
fn bind_retry(dest: SocketAddr) -> Result<TcpListener, AgentError> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match TcpListener::bind(dest) {
            Ok(l) => return Ok(l),
            Err(e)
                if Instant::now() < deadline && e.raw_os_error() == Some(libc::EADDRNOTAVAIL) =>
            {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                return Err(AgentError::internal(format!(
                    "relay for {dest}: cannot listen: {e}"
                )))
            }
        }
    }
}

fn accept_loop(l: &TcpListener, via: SocketAddr, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((c, _)) => {
                let _ = std::thread::Builder::new()
                    .name("relay conn".into())
                    .spawn(move || relay(c, via));
            }
            Err(_) if stop.load(Ordering::SeqCst) => return,
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Copy both ways until both sides are done; half-closes are passed on.
fn relay(client: TcpStream, via: SocketAddr) {
    let Ok(upstream) = TcpStream::connect_timeout(&via, Duration::from_secs(10)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let t = std::thread::spawn(move || pipe(c2, u2));
    pipe(upstream, client);
    let _ = t.join();
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
