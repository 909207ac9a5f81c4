//! User namespaces of process sandboxes: root inside a sandbox is an
//! unprivileged uid/gid range on the host.
//!
//! Each sandbox gets a *slot* `n` of a configured range ([`UsernsConfig`]):
//! inside ids `0..size` are host ids `base + n*size ..`. The slot is claimed
//! with an exclusive file `<claims dir>/<n>` naming the sandbox and
//! recorded in `<sandbox dir>/userns`, so a resume or a daemon restart keeps
//! the same mapping (a running sandbox keeps it anyway: its supervisor, PID 1
//! and sessions live in the user namespace created at start). `destroy`
//! frees the slot; a claim whose sandbox dir is gone is taken over.
//!
//! A slot is never shared: claims are taken and freed under a lock (a
//! process-wide mutex and `flock` of `<claims dir>/.lock`, so two daemons on
//! one data dir serialise too), a claim file appears whole (written to a temp
//! file, then hard-linked to its name, which fails if the name exists), and
//! an empty or unreadable owner is never taken for stale. The default ranges
//! end below the QEMU jail's uids ([`stasis_backend::QEMU_JAIL_UID_BASE`]) and
//! slots overlapping a range of `/etc/subuid` or `/etc/subgid` are skipped.
//!
//! Ownership on disk never depends on the slot: the shim mounts the lower
//! layer and the writable layer through *idmapped mounts* of the sandbox's
//! user namespace, so the upper layer stores inside ids (a file made by root
//! inside is uid 0 in `upper/`), exactly as before. Snapshots, restore and
//! fork into a sandbox with another slot therefore need no chown pass, and
//! `fs.tar` stays portable between sandboxes and hosts.
//!
//! The mount, network, UTS, IPC, PID and cgroup namespaces stay owned by the
//! host's user namespace (the shim creates them as host root and joins the
//! sandbox's user namespace last), so root inside has its capabilities only
//! over its own user namespace: it cannot mount, configure the network,
//! change the hostname or load modules even without the seccomp filter.
//! Files of the idmapped lower layer and input mounts keep their on-disk
//! owners inside (host root's files are root's inside); only ids beyond the
//! range's size (and files of non-idmapped filesystems) appear as `nobody`.

use crate::mount_api::{
    mount_setattr, MountAttr, MOUNT_ATTR_IDMAP, MOVE_MOUNT_F_EMPTY_PATH, OPEN_TREE_CLONE,
};
use crate::subid;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use stasis_backend::{QEMU_JAIL_UID_BASE, QEMU_JAIL_UID_COUNT};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The host id ranges sandboxes are mapped to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsernsConfig {
    /// First host uid/gid of slot 0.
    pub base: u32,
    /// Ids per sandbox (inside ids `0..size`).
    pub size: u32,
    /// Number of slots (sandboxes mapped at once).
    pub slots: u32,
    /// Where the slot claims live (the server's `<data-dir>/userns`); `None`:
    /// `.userns` next to the sandbox dirs. Sandboxes whose dirs share a
    /// parent (the stale-claim check looks for `<parent>/<id>`) must share it.
    pub claims_dir: Option<PathBuf>,
    /// Subordinate id files (`subuid(5)` format) whose ranges no slot may
    /// overlap; a missing file lists none.
    pub subid_files: Vec<PathBuf>,
}

/// First host id of the default ranges (like rootless containers' ranges).
const DEFAULT_BASE: u32 = 100_000;
/// Ids per sandbox by default.
const DEFAULT_SIZE: u32 = 65_536;

impl Default for UsernsConfig {
    fn default() -> Self {
        // 100000 + n*65536 for every n whose range ends below the QEMU jail's
        // uids (31230 slots), skipping the host users' /etc/subuid and
        // /etc/subgid ranges.
        UsernsConfig {
            base: DEFAULT_BASE,
            size: DEFAULT_SIZE,
            slots: (QEMU_JAIL_UID_BASE - DEFAULT_BASE) / DEFAULT_SIZE,
            claims_dir: None,
            subid_files: vec!["/etc/subuid".into(), "/etc/subgid".into()],
        }
    }
}

/// One sandbox's mapping: inside `0..size` = host `host..host+size`
/// (the same for uids and gids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    pub host: u32,
    pub size: u32,
}

impl UsernsConfig {
    fn map(&self, slot: u32) -> IdMap {
        IdMap {
            host: self.base + slot * self.size,
            size: self.size,
        }
    }

    /// Check the range fits the 32-bit id space (and spares id 2^32-1) and
    /// stays clear of the microVM backend's QEMU jail uids.
    pub fn validate(&self) -> Result<(), String> {
        let end = self.base as u64 + self.size as u64 * self.slots as u64;
        if self.base == 0 || self.size == 0 || self.slots == 0 || end >= u32::MAX as u64 {
            return Err(format!(
                "user namespace range base {} + {} slots of {} ids does not fit 1..2^32-1",
                self.base, self.slots, self.size
            ));
        }
        let jail =
            QEMU_JAIL_UID_BASE as u64..QEMU_JAIL_UID_BASE as u64 + QEMU_JAIL_UID_COUNT as u64;
        if (self.base as u64) < jail.end && jail.start < end {
            return Err(format!(
                "user namespace range {}..{end} (base {} + {} slots of {} ids) overlaps the \
                 QEMU jail uids {}..{}",
                self.base, self.base, self.slots, self.size, jail.start, jail.end
            ));
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct Record {
    slot: u32,
    map: IdMap,
}

fn claims_dir(cfg: &UsernsConfig, sandbox_dir: &Path) -> Option<PathBuf> {
    match &cfg.claims_dir {
        Some(d) => Some(d.clone()),
        None => sandbox_dir.parent().map(|p| p.join(".userns")),
    }
}

fn id_of(sandbox_dir: &Path) -> String {
    sandbox_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Serialises claims between the threads of this process.
static CLAIMS: Mutex<()> = Mutex::new(());

/// Exclusive hold on a claims dir: the in-process mutex, then `flock` of
/// `<claims>/.lock` against other processes (a restarting daemon and a
/// lingering one on the same data dir).
struct ClaimsLock {
    _file: Flock<File>,
    _guard: MutexGuard<'static, ()>,
}

fn lock(claims: &Path) -> io::Result<ClaimsLock> {
    let guard = CLAIMS.lock().unwrap_or_else(|e| e.into_inner());
    let mut file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(claims.join(".lock"))?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusive) {
            Ok(l) => {
                return Ok(ClaimsLock {
                    _file: l,
                    _guard: guard,
                })
            }
            Err((f, nix::errno::Errno::EINTR)) => file = f,
            Err((_, e)) => return Err(io::Error::other(format!("lock {}: {e}", claims.display()))),
        }
    }
}

/// The sandbox named in a claim file; `None`: no claim.
fn owner(claim: &Path) -> io::Result<Option<String>> {
    match fs::read(claim) {
        Ok(d) => Ok(Some(String::from_utf8_lossy(&d).into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A claim is stale when it names a sandbox whose dir (`<parent>/<owner>`)
/// is gone. An empty or odd owner is never stale: claims are written whole
/// (see [`try_claim`]), so such a file is not ours to judge and keeps its slot.
fn stale(owner: &str, parent: &Path) -> bool {
    if owner.is_empty() || owner.contains('/') || owner == "." || owner == ".." {
        return false;
    }
    matches!(fs::symlink_metadata(parent.join(owner)), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

/// Claim `slot` for `id` if no claim exists. The claim appears whole: the
/// owner is written to a temp file which is then hard-linked to the slot's
/// name (`link` fails if the name exists), so no one ever reads a partial
/// claim. Call with the claims lock held (the temp file name is fixed).
fn try_claim(claims: &Path, slot: u32, id: &str) -> io::Result<bool> {
    let tmp = claims.join(".claim.tmp");
    fs::write(&tmp, id.as_bytes())?;
    let r = fs::hard_link(&tmp, claims.join(slot.to_string()));
    let _ = fs::remove_file(&tmp);
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// The mapping of the sandbox whose state dir is `dir`: the recorded one
/// (still claimed by it), else a newly claimed free slot. Slots whose range
/// overlaps a subordinate id range of the host are never handed out.
pub fn allocate(cfg: &UsernsConfig, dir: &Path) -> io::Result<IdMap> {
    cfg.validate().map_err(io::Error::other)?;
    let claims =
        claims_dir(cfg, dir).ok_or_else(|| io::Error::other("sandbox dir has no parent"))?;
    let parent = dir
        .parent()
        .ok_or_else(|| io::Error::other("sandbox dir has no parent"))?;
    fs::create_dir_all(&claims)?;
    let reserved = subid::read(&cfg.subid_files)?;
    let usable = |slot: u32| {
        slot < cfg.slots && {
            let m = cfg.map(slot);
            !subid::overlaps(&reserved, m.host as u64, m.size as u64)
        }
    };
    let id = id_of(dir);
    let _lock = lock(&claims)?;
    let rec_path = dir.join("userns");
    if let Ok(data) = fs::read(&rec_path) {
        if let Ok(rec) = serde_json::from_slice::<Record>(&data) {
            let claim = claims.join(rec.slot.to_string());
            let own = owner(&claim)?;
            if usable(rec.slot) && rec.map == cfg.map(rec.slot) {
                if own.as_deref() == Some(id.as_str()) {
                    return Ok(rec.map);
                }
                if own.is_none() && try_claim(&claims, rec.slot, &id)? {
                    return Ok(rec.map);
                }
            } else if own.as_deref() == Some(id.as_str()) {
                // Our old slot is no longer allowed: give it back.
                fs::remove_file(&claim)?;
            }
        }
    }
    for slot in (0..cfg.slots).filter(|&s| usable(s)) {
        let claim = claims.join(slot.to_string());
        let ours = match owner(&claim)? {
            None => try_claim(&claims, slot, &id)?,
            Some(o) if o == id => true,
            Some(o) if stale(&o, parent) => {
                fs::remove_file(&claim)?;
                try_claim(&claims, slot, &id)?
            }
            Some(_) => false,
        };
        if !ours {
            continue;
        }
        let map = cfg.map(slot);
        let tmp = dir.join("userns.tmp");
        fs::write(&tmp, serde_json::to_vec(&Record { slot, map })?)?;
        fs::rename(&tmp, &rec_path)?;
        return Ok(map);
    }
    Err(io::Error::other(format!(
        "all {} user namespace id ranges are in use",
        cfg.slots
    )))
}

/// Free the slot of a destroyed sandbox (only a claim naming it).
pub fn release(cfg: &UsernsConfig, dir: &Path) {
    let Some(claims) = claims_dir(cfg, dir) else {
        return;
    };
    let Ok(data) = fs::read(dir.join("userns")) else {
        return;
    };
    let Ok(rec) = serde_json::from_slice::<Record>(&data) else {
        return;
    };
    let Ok(_lock) = lock(&claims) else {
        return;
    };
    let claim = claims.join(rec.slot.to_string());
    if owner(&claim).ok().flatten().as_deref() == Some(id_of(dir).as_str()) {
        let _ = fs::remove_file(claim);
    }
}

/// The mapping of inside uid 0 of a live process: `Some(host uid)` when it
/// is in a user namespace other than the host's.
pub fn root_of_pid(pid: i32) -> Option<u32> {
    let map = fs::read_to_string(format!("/proc/{pid}/uid_map")).ok()?;
    for l in map.lines() {
        let f: Vec<u32> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() == 3 && f[0] == 0 {
            return (f[1] != 0).then_some(f[1]);
        }
    }
    None
}

/// The id the kernel shows for an id a user namespace does not map
/// (`/proc/sys/kernel/overflowuid`'s default, `nobody`).
pub const OVERFLOW_ID: u32 = 65_534;

/// One of a user namespace's id maps as its `/proc/<pid>/uid_map` or
/// `gid_map` lists it to the daemon: ranges of inside ids and the host ids
/// they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdRanges(Vec<(u32, u32, u32)>);

impl IdRanges {
    /// From the text of a map file (`inside host count` lines).
    pub fn parse(text: &str) -> IdRanges {
        IdRanges(
            text.lines()
                .filter_map(|l| {
                    let f: Vec<u32> = l
                        .split_whitespace()
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    (f.len() == 3).then(|| (f[0], f[1], f[2]))
                })
                .collect(),
        )
    }

    /// The host's own map: every id is itself.
    pub fn identity() -> IdRanges {
        IdRanges(vec![(0, 0, u32::MAX)])
    }

    /// The inside id of host id `host`; [`OVERFLOW_ID`] when it is not
    /// mapped (as the sandbox itself sees such an owner).
    pub fn inside(&self, host: u32) -> u32 {
        self.0
            .iter()
            .find(|&&(_, h, n)| host >= h && (host - h) < n)
            .map_or(OVERFLOW_ID, |&(i, h, _)| i + (host - h))
    }

    /// The host id of inside id `inside`, if the namespace maps it.
    pub fn host(&self, inside: u32) -> Option<u32> {
        self.0
            .iter()
            .find(|&&(i, _, n)| inside >= i && (inside - i) < n)
            .map(|&(i, h, _)| h + (inside - i))
    }
}

/// The uid and gid maps of a sandbox's user namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owners {
    pub uids: IdRanges,
    pub gids: IdRanges,
}

impl Owners {
    /// Ids unchanged (a sandbox without a user namespace).
    pub fn identity() -> Owners {
        Owners {
            uids: IdRanges::identity(),
            gids: IdRanges::identity(),
        }
    }

    /// A sandbox's slot mapping (`inside 0..size` = `host..host+size`).
    pub fn of_map(map: &IdMap) -> Owners {
        let r = IdRanges(vec![(0, map.host, map.size)]);
        Owners {
            uids: r.clone(),
            gids: r,
        }
    }

    /// The maps of the user namespace of the live process `pid`, as the
    /// kernel has them (a sandbox's PID 1 keeps its namespace, and with it
    /// the slot's mapping, for as long as it runs).
    pub fn of_pid(pid: i32) -> stasis_core::Result<Owners> {
        let read = |which: &str| {
            fs::read_to_string(format!("/proc/{pid}/{which}"))
                .map(|t| IdRanges::parse(&t))
                .map_err(|e| {
                    stasis_core::Error::backend(format!("reading the sandbox's {which}: {e}"))
                })
        };
        Ok(Owners {
            uids: read("uid_map")?,
            gids: read("gid_map")?,
        })
    }

    /// Host `(uid, gid)` as seen inside the sandbox.
    pub fn inside(&self, uid: u32, gid: u32) -> (u32, u32) {
        (self.uids.inside(uid), self.gids.inside(gid))
    }

    /// Inside `(uid, gid)` as host ids; `invalid_argument` for an id the
    /// sandbox's namespace does not map.
    pub fn host(&self, uid: u32, gid: u32) -> stasis_core::Result<(u32, u32)> {
        let unmapped = |what: &str, id: u32| {
            stasis_core::Error::invalid(format!(
                "{what} {id} is not an id of this sandbox's user namespace"
            ))
            .with_field(what)
        };
        let u = self.uids.host(uid).ok_or_else(|| unmapped("uid", uid))?;
        let g = self.gids.host(gid).ok_or_else(|| unmapped("gid", gid))?;
        Ok((u, g))
    }
}

// ------------------------------------------------------------ shim side

fn err(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

/// Create a user namespace with `map` (uids and gids) and return its fd. A
/// helper child unshares it and waits while we, host root, write its maps.
/// Call before unsharing the PID namespace (the helper is a plain child).
pub(crate) fn create(map: &IdMap) -> Result<OwnedFd, String> {
    let (mut ready_r, ready_w) = pipe()?;
    let (done_r, done_w) = pipe()?;
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        nix::unistd::ForkResult::Child => {
            drop(ready_r);
            drop(done_w);
            let mut w = ready_w;
            let ok = unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0;
            let _ = w.write_all(if ok { b"k" } else { b"e" });
            drop(w);
            let mut b = [0u8; 1];
            let mut r = done_r;
            let _ = r.read(&mut b);
            unsafe { libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(ready_w);
            drop(done_r);
            let mut b = [0u8; 1];
            let n = ready_r.read(&mut b).unwrap_or(0);
            let res = if n == 1 && b[0] == b'k' {
                let line = format!("0 {} {}\n", map.host, map.size);
                let p = format!("/proc/{child}");
                fs::write(format!("{p}/uid_map"), &line)
                    .map_err(|e| format!("write uid_map: {e}"))
                    .and_then(|_| {
                        fs::write(format!("{p}/gid_map"), &line)
                            .map_err(|e| format!("write gid_map: {e}"))
                    })
                    .and_then(|_| {
                        File::open(format!("{p}/ns/user"))
                            .map(OwnedFd::from)
                            .map_err(|e| format!("open user namespace: {e}"))
                    })
            } else {
                Err("unshare user namespace failed (user namespaces disabled?)".to_string())
            };
            drop(done_w);
            let _ = nix::sys::wait::waitpid(child, None);
            res
        }
    }
}

fn pipe() -> Result<(File, File), String> {
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    Ok((File::from(r), File::from(w)))
}

/// Attach, on `target`, a clone of the mount at `src` (not its submounts)
/// idmapped through `userns`: on-disk id `i` is seen as host id `host + i`,
/// i.e. as id `i` inside the sandbox.
pub(crate) fn mount_idmapped(src: &Path, target: &Path, userns: &OwnedFd) -> Result<(), String> {
    let c = CString::new(src.as_os_str().as_encoded_bytes()).map_err(|_| "path has NUL")?;
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            (OPEN_TREE_CLONE | libc::O_CLOEXEC as u32) as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(err(&format!("open_tree {}", src.display())));
    }
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    let rc = mount_setattr(&tree, &attr);
    if rc != 0 {
        return Err(err(&format!(
            "idmapped mount of {} (the kernel or filesystem must support idmapped mounts)",
            src.display()
        )));
    }
    let t = CString::new(target.as_os_str().as_encoded_bytes()).map_err(|_| "path has NUL")?;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(err(&format!("move_mount onto {}", target.display())));
    }
    Ok(())
}

/// Raise the effective capabilities back to the permitted ones (a change
/// of fsuid away from 0 clears the file-related ones).
fn raise_caps() -> Result<(), String> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) != 0 {
            return Err(err("capget"));
        }
        for d in &mut data {
            d.effective = d.permitted;
        }
        if libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) != 0 {
            return Err(err("capset"));
        }
    }
    Ok(())
}

/// Make the calling *thread* create files as `host` (uid and gid; through
/// the sandbox's idmapped writable layer they are owned by root inside),
/// keeping its capabilities. `setfsuid`/`setfsgid` are per thread.
pub(crate) fn set_fs_ids(host: u32) -> Result<(), String> {
    unsafe {
        libc::setfsgid(host);
        libc::setfsuid(host);
        if libc::setfsuid(u32::MAX) as u32 != host || libc::setfsgid(u32::MAX) as u32 != host {
            return Err(format!("setfsuid/setfsgid {host} failed"));
        }
    }
    raise_caps()
}

/// Undo [`set_fs_ids`] on the calling thread.
pub(crate) fn reset_fs_ids() {
    unsafe {
        libc::setfsuid(0);
        libc::setfsgid(0);
    }
}

/// Run `f` on this thread with files created as the sandbox's root (when
/// the sandbox whose PID 1 is `pid` has a user namespace). For the daemon's
/// file API, which writes through the sandbox's overlay as host root.
pub fn as_sandbox_root<T>(
    pid: i32,
    f: impl FnOnce() -> stasis_core::Result<T>,
) -> stasis_core::Result<T> {
    match root_of_pid(pid) {
        None => f(),
        Some(host) => {
            // Reset even if `f` panics (the thread goes back to the pool).
            struct Reset;
            impl Drop for Reset {
                fn drop(&mut self) {
                    reset_fs_ids()
                }
            }
            let _reset = Reset;
            set_fs_ids(host).map_err(stasis_core::Error::internal)?;
            f()
        }
    }
}

/// Join the user namespace `ns` (a namespace fd or a pidfd) and become
/// root (uid/gid 0, no supplementary groups) in it. `Ok(false)`: `ns` is
/// the caller's own user namespace (a sandbox started without one).
pub(crate) fn enter(ns: BorrowedFd<'_>) -> Result<bool, String> {
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUSER) } != 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            return Ok(false);
        }
        return Err(err("join the sandbox's user namespace"));
    }
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(err("setgroups"));
        }
        if libc::setresgid(0, 0, 0) != 0 {
            return Err(err("setresgid 0"));
        }
        if libc::setresuid(0, 0, 0) != 0 {
            return Err(err("setresuid 0"));
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_between_host_and_inside() {
        let o = Owners::of_map(&IdMap {
            host: 200_000,
            size: 65_536,
        });
        assert_eq!(o.inside(200_000, 201_000), (0, 1000));
        assert_eq!(o.inside(265_535, 200_001), (65_535, 1));
        // Outside the slot (host root's files on a plain mount, another
        // slot's ids): nobody, as the sandbox sees them.
        assert_eq!(o.inside(0, 265_536), (OVERFLOW_ID, OVERFLOW_ID));
        assert_eq!(o.inside(199_999, 1000), (OVERFLOW_ID, OVERFLOW_ID));
        assert_eq!(o.host(1000, 1000).unwrap(), (201_000, 201_000));
        let e = o.host(65_536, 0).unwrap_err();
        assert_eq!(e.code, stasis_core::ErrorCode::InvalidArgument);
        assert!(e.message.contains("uid 65536"), "{}", e.message);
        assert!(o.host(0, u32::MAX).is_err());
        // A map file as the kernel lists it, several ranges, and none.
        let r = IdRanges::parse("         0     300000      10\n        10     500000     100\n");
        assert_eq!((r.inside(300_009), r.inside(500_001)), (9, 11));
        assert_eq!(
            (r.host(9), r.host(11), r.host(110)),
            (Some(300_009), Some(500_001), None)
        );
        let host = IdRanges::parse("         0          0 4294967295\n");
        assert_eq!(host, IdRanges::identity());
        assert_eq!((host.inside(1000), host.host(70_000)), (1000, Some(70_000)));
        assert_eq!(IdRanges::parse("").inside(0), OVERFLOW_ID);
        // This process's own maps (the host's, or the test's namespace).
        let me = Owners::of_pid(std::process::id() as i32).unwrap();
        assert!(me.uids.host(0).is_some());
    }

    #[test]
    fn slots_are_distinct_persisted_and_freed() {
        let t = tempfile::tempdir().unwrap();
        let cfg = UsernsConfig {
            base: 200_000,
            size: 65_536,
            slots: 3,
            claims_dir: Some(t.path().join("claims")),
            subid_files: vec![],
        };
        let dirs: Vec<PathBuf> = (0..3).map(|i| t.path().join(format!("sb{i}"))).collect();
        for d in &dirs {
            fs::create_dir_all(d).unwrap();
        }
        let maps: Vec<IdMap> = dirs.iter().map(|d| allocate(&cfg, d).unwrap()).collect();
        let mut hosts: Vec<u32> = maps.iter().map(|m| m.host).collect();
        hosts.sort();
        assert_eq!(hosts, vec![200_000, 265_536, 331_072]);
        // Same sandbox again (resume, daemon restart): same mapping.
        for (d, m) in dirs.iter().zip(&maps) {
            assert_eq!(allocate(&cfg, d).unwrap(), *m);
        }
        // Full.
        let extra = t.path().join("sb3");
        fs::create_dir_all(&extra).unwrap();
        let e = allocate(&cfg, &extra).unwrap_err();
        assert!(e.to_string().contains("in use"), "{e}");
        // A destroyed sandbox frees its slot; one whose dir vanished too.
        release(&cfg, &dirs[1]);
        assert_eq!(allocate(&cfg, &extra).unwrap(), maps[1]);
        fs::remove_dir_all(&dirs[2]).unwrap();
        let extra2 = t.path().join("sb4");
        fs::create_dir_all(&extra2).unwrap();
        assert_eq!(allocate(&cfg, &extra2).unwrap(), maps[2]);
        // The first sandbox still has its own.
        assert_eq!(allocate(&cfg, &dirs[0]).unwrap(), maps[0]);
        // Nothing but sandbox dirs next to the sandbox dirs.
        let mut names: Vec<String> = fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["claims", "sb0", "sb1", "sb3", "sb4"]);
    }

    #[test]
    fn the_default_ranges_stay_clear_of_the_qemu_jail() {
        let d = UsernsConfig::default();
        assert!(d.validate().is_ok());
        let end = d.base as u64 + d.size as u64 * d.slots as u64;
        assert!(end <= QEMU_JAIL_UID_BASE as u64);
        // One slot more would reach the jail's uids.
        let e = UsernsConfig {
            slots: d.slots + 1,
            ..d.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("QEMU jail"), "{e}");
        // Ranges that start inside it, or span it, are refused too; ones
        // above it are fine.
        for (base, slots, ok) in [
            (QEMU_JAIL_UID_BASE, 1, false),
            (QEMU_JAIL_UID_BASE + 65_535, 1, false),
            (QEMU_JAIL_UID_BASE - 1, 1, false),
            (QEMU_JAIL_UID_BASE - 65_536, 1, true),
            (QEMU_JAIL_UID_BASE + 65_536, 100, true),
            (100_000, 40_000, false),
        ] {
            let c = UsernsConfig {
                base,
                slots,
                ..d.clone()
            };
            assert_eq!(c.validate().is_ok(), ok, "{c:?}");
        }
    }

    #[test]
    fn ranges_must_fit_the_id_space() {
        let ok = UsernsConfig::default();
        assert!(ok.validate().is_ok());
        for bad in [
            UsernsConfig {
                base: 0,
                ..ok.clone()
            },
            UsernsConfig {
                size: 0,
                ..ok.clone()
            },
            UsernsConfig {
                slots: 0,
                ..ok.clone()
            },
            UsernsConfig {
                slots: 70_000,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
