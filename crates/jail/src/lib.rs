//! Least privilege for the QEMU of a sandbox (the "jail", after Firecracker's
//! jailer). QEMU emulates devices for untrusted guest code; a bug there must
//! not give the guest the host. Every QEMU therefore starts:
//!
//! * as an **unprivileged uid/gid of its own**, from a dedicated range
//!   (`JailConfig`, default `0x7a000000` + 0..65535, above the ranges
//!   distributions and systemd hand out). A uid is free when no process on
//!   the host runs under it; it is picked from a hash of the sandbox id and
//!   held for the life of that QEMU only (a resumed or forked sandbox gets a
//!   new one). No supplementary groups, except `/dev/kvm`'s group under KVM.
//!   All capabilities are gone (uid 0 -> non-zero drops them) and
//!   `no_new_privs` is set.
//! * in **new mount, pid, ipc, uts, cgroup and network namespaces**. The
//!   network namespace is QEMU's alone: the guest's user networking opens
//!   its sockets there, and the daemon's egress service polices it (see
//!   `net`). Pid 1 of the pid namespace is a minimal init (a fork of the
//!   launcher, same uid and root, named `stasis-jail`) that only reaps, so
//!   nothing QEMU might leave behind stays a zombie. It exits with QEMU,
//!   and the namespace with it.
//! * with a **minimal root**: a read-only tmpfs holding only bind mounts of
//!   what this QEMU opens, each at its host path (so no argument or qcow2
//!   backing reference needs rewriting): the QEMU binary and the shared
//!   libraries `ldd` lists for it, the firmware, the kernel, the initrd, the
//!   backing chain of the disk (read-only), the sandbox directory (read-write,
//!   see below), `/dev/{null,zero,random,urandom}` (and `/dev/kvm` under KVM).
//!   No `/etc` (so slirp's DNS forwarder finds no resolv.conf, see `net`),
//!   no `/proc`, no home, no other sandbox. Built by `pivot_root`, the host
//!   root is detached.
//! * under **QEMU's seccomp sandbox**: `-sandbox on,obsolete=deny,
//!   elevateprivileges=deny,spawn=deny,resourcecontrol=deny`, for every
//!   guest.
//!
//! Files: the sandbox directory becomes `root:<jail gid>` mode `01770`:
//! QEMU may create its sockets and console log there, but the sticky bit
//! keeps it from removing or replacing the daemon's files (`vm.json`,
//! `qemu.pid`); `disk.qcow2` is chowned to the jail uid. Everything else it
//! reads (backing files, RAM files, input disks) stays root-owned and
//! world-readable only. Migration streams never touch QEMU's filesystem: the
//! daemon opens `memory.state` and passes the descriptor over QMP (`getfd`,
//! `fd:` URIs), so QEMU needs no `exec:` (which `spawn=deny` forbids) and no
//! view of the snapshot directories. The daemon (root) still reaches the QMP
//! and agent sockets and `/proc/<pid>`.
//!
//! What QEMU writes is never trusted (`trust`): a backing file outside the
//! image's and the sandbox's directories is refused before it is opened,
//! bound or chmodded, and modes change only through `O_NOFOLLOW`
//! descriptors; disks are checked when they leave or enter a sandbox.
//!
//! The jail holds no reference to the daemon: QEMU runs in its own session
//! and namespaces, so a daemon restart re-attaches to it as before.

mod launch;
pub mod trust;

pub use launch::{spawn, Jailed};

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use stasis_core::{Error, Result};

/// The uid range QEMUs run under (uid = gid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JailConfig {
    pub uid_base: u32,
    pub uid_count: u32,
}

impl Default for JailConfig {
    fn default() -> Self {
        JailConfig {
            uid_base: stasis_backend::QEMU_JAIL_UID_BASE,
            uid_count: stasis_backend::QEMU_JAIL_UID_COUNT,
        }
    }
}

/// Where the jail's root tmpfs is mounted while it is built (inside the new
/// mount namespace only; on the host this stays an empty directory).
pub const STAGING: &str = "/run/stasis-qemu-jail";

/// Device nodes every QEMU gets.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// One bind mount into the jail, at the same path as on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub path: PathBuf,
    pub dir: bool,
    pub writable: bool,
    /// Executable code (QEMU and its libraries).
    pub exec: bool,
    pub device: bool,
}

/// Everything that decides what one jailed QEMU sees and who it is.
#[derive(Debug, Clone)]
pub struct JailSpec {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub binds: Vec<Bind>,
    /// A new network namespace (always, for QEMU; kept explicit for the
    /// launcher).
    pub new_net: bool,
    /// QEMU's working directory (the sandbox directory).
    pub cwd: PathBuf,
    /// Data files QEMU only reads (kernel, initrd, backing chain, RAM file,
    /// input disks), wherever they lie.
    pub reads: Vec<PathBuf>,
    /// No transparent huge pages for the process (`PR_SET_THP_DISABLE`,
    /// kept across exec): its memory grows by 4 KiB pages, not 2 MiB.
    pub no_thp: bool,
}

/// What QEMU opens, gathered by the caller from the launch.
pub struct Needs<'a> {
    pub qemu: &'a Path,
    pub firmware: &'a str,
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    /// The writable disk (relative to `dir` or absolute).
    pub disk: &'a Path,
    /// Read-only files (input disks, RAM files).
    pub files: Vec<PathBuf>,
    pub kvm: bool,
    pub dir: &'a Path,
    /// The image's directory: with `dir`, the only place a backing file may
    /// lie (the disk's header is QEMU-written, see `trust`).
    pub image_dir: &'a Path,
}

/// Uids handed out but whose QEMU may not show in /proc yet.
static RESERVED: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

/// A uid reserved for one QEMU start; released on drop (by then the QEMU, if
/// it started, runs under it and /proc shows it).
pub struct UidLease(pub u32);

impl Drop for UidLease {
    fn drop(&mut self) {
        if let Some(s) = RESERVED.lock().unwrap().as_mut() {
            s.remove(&self.0);
        }
    }
}

/// Uids of every process on the host.
fn uids_in_use() -> HashSet<u32> {
    let mut used = HashSet::new();
    for pid in crate::util::all_pids() {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            if let Some(l) = s.lines().find(|l| l.starts_with("Uid:")) {
                used.extend(
                    l.split_whitespace()
                        .skip(1)
                        .filter_map(|u| u.parse::<u32>().ok()),
                );
            }
        }
    }
    used
}

/// A free uid of the range for `key` (the sandbox id).
pub fn lease_uid(cfg: &JailConfig, key: &str) -> Result<UidLease> {
    let count = cfg.uid_count.max(1);
    let start = u32::from_le_bytes(
        blake3::hash(key.as_bytes()).as_bytes()[..4]
            .try_into()
            .unwrap(),
    ) % count;
    let used = uids_in_use();
    let mut reserved = RESERVED.lock().unwrap();
    let reserved = reserved.get_or_insert_with(HashSet::new);
    for i in 0..count {
        let uid = cfg.uid_base + (start + i) % count;
        if !used.contains(&uid) && !reserved.contains(&uid) {
            reserved.insert(uid);
            return Ok(UidLease(uid));
        }
    }
    Err(Error::backend(format!(
        "no free QEMU uid in {}..{}: every one runs a QEMU",
        cfg.uid_base,
        cfg.uid_base as u64 + count as u64
    )))
}

/// The shared libraries of an ELF binary, as `ldd` resolves them (absolute
/// paths, the interpreter included). Cached per binary.
pub fn libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    static CACHE: Mutex<Vec<(PathBuf, Vec<PathBuf>)>> = Mutex::new(Vec::new());
    if let Some((_, l)) = CACHE.lock().unwrap().iter().find(|(b, _)| b == bin) {
        return Ok(l.clone());
    }
    let out = std::process::Command::new("ldd")
        .arg(bin)
        .output()
        .map_err(|e| Error::backend(format!("ldd {}: {e}", bin.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let libs = if !out.status.success() && text.contains("not a dynamic executable") {
        Vec::new()
    } else if !out.status.success() {
        // ldd says "not a dynamic executable" on stderr with status 1.
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("not a dynamic executable") {
            Vec::new()
        } else {
            return Err(Error::backend(format!(
                "ldd {}: {}",
                bin.display(),
                err.trim()
            )));
        }
    } else {
        parse_ldd(&text)?
    };
    CACHE
        .lock()
        .unwrap()
        .push((bin.to_path_buf(), libs.clone()));
    Ok(libs)
}

/// The library paths in `ldd` output; a library ldd cannot find is an error
/// (QEMU would not start without it).
pub fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.contains("=> not found") {
            return Err(Error::backend(format!("QEMU library missing: {l}")));
        }
        let path = match l.split_once("=>") {
            Some((_, rest)) => rest.trim(),
            None => l,
        };
        let path = path.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            v.push(PathBuf::from(path));
        }
    }
    Ok(v)
}

/// `path` made absolute against `base` and cleaned of `.` (not of `..` or
/// symlinks: the jail mirrors the path QEMU opens).
fn absolute(base: &Path, path: &Path) -> PathBuf {
    let p = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// The files of a qcow2 chain below `disk` (its backing files, in order,
/// as QEMU names them). The headers may have been written by a QEMU the
/// guest owns: each backing file is refused before it is even opened
/// unless its real path lies under one of `roots`, and a layer with an
/// external data file is refused.
pub fn backing_chain(disk: &Path, roots: &[&Path]) -> Result<Vec<PathBuf>> {
    let mut chain = Vec::new();
    let (mut cur, mut real) = (disk.to_path_buf(), disk.to_path_buf());
    while let Some(refs) = trust::qcow2_refs(&real)? {
        if refs.data_file {
            return Err(Error::integrity(format!(
                "{}: names an external data file: refused",
                cur.display()
            )));
        }
        let Some(b) = refs.backing else { break };
        let next = absolute(cur.parent().unwrap_or(Path::new("/")), &b);
        if chain.contains(&next) || chain.len() > 64 {
            return Err(Error::backend(format!(
                "{}: backing chain loops or is too deep",
                disk.display()
            )));
        }
        real = trust::within(&next, roots).map_err(|e| {
            Error::integrity(format!(
                "the backing chain of {} leaves the image and sandbox directories: {}",
                disk.display(),
                e.message
            ))
        })?;
        chain.push(next.clone());
        cur = next;
    }
    Ok(chain)
}

/// Find a binary in PATH (or take it as it is when it has a slash).
fn resolve_bin(p: &Path) -> Result<PathBuf> {
    if p.components().count() > 1 {
        return Ok(absolute(Path::new("/"), p));
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(p))
                .find(|c| c.is_file())
        })
        .ok_or_else(|| Error::backend(format!("{} not found in PATH", p.display())))
}

/// The firmware QEMU looks up by bare name in its data directory.
fn firmware_path(qemu: &Path, name: &str) -> Option<PathBuf> {
    let exe_rel = qemu
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("share/qemu").join(name));
    exe_rel
        .into_iter()
        .chain([Path::new("/usr/share/qemu").join(name)])
        .find(|p| p.is_file())
}

impl JailSpec {
    /// What a QEMU with these needs sees, run as `uid`.
    pub fn plan(uid: u32, n: &Needs) -> Result<JailSpec> {
        let dir = absolute(Path::new("/"), n.dir);
        let mut binds: Vec<Bind> = Vec::new();
        let file = |p: PathBuf, exec: bool| Bind {
            path: p,
            dir: false,
            writable: false,
            exec,
            device: false,
        };
        let qemu = resolve_bin(n.qemu)?;
        for l in libraries(&qemu)? {
            binds.push(file(l, true));
        }
        binds.push(file(qemu.clone(), true));
        if let Some(fw) = firmware_path(&qemu, n.firmware) {
            binds.push(file(fw, false));
        }
        binds.push(file(absolute(&dir, n.kernel), false));
        binds.push(file(absolute(&dir, n.initrd), false));
        // The chain comes from headers a previous QEMU may have written: a
        // backing file whose real path leaves the image or the sandbox
        // directory is refused (never bound, never chmodded).
        for b in backing_chain(&absolute(&dir, n.disk), &[n.image_dir, &dir])? {
            binds.push(file(b, false));
        }
        for f in &n.files {
            binds.push(file(absolute(&dir, f), false));
        }
        let mut groups = Vec::new();
        let mut devices: Vec<&str> = DEVICES.to_vec();
        if n.kvm {
            let md = std::fs::metadata("/dev/kvm")
                .map_err(|e| Error::backend(format!("/dev/kvm: {e}")))?;
            if md.mode() & 0o060 != 0o060 || md.gid() == 0 {
                return Err(Error::backend(format!(
                    "the jailed QEMU runs unprivileged and cannot open /dev/kvm (mode {:o}, gid {}): give it a group, e.g. `chgrp kvm /dev/kvm && chmod 660 /dev/kvm`",
                    md.mode() & 0o777,
                    md.gid()
                )));
            }
            groups.push(md.gid());
            devices.push("/dev/kvm");
        }
        for d in devices {
            binds.push(Bind {
                path: d.into(),
                dir: false,
                writable: true,
                exec: false,
                device: true,
            });
        }
        let reads: Vec<PathBuf> = binds
            .iter()
            .filter(|b| !b.exec && !b.device && !b.writable)
            .map(|b| b.path.clone())
            .collect();
        // Files inside the sandbox directory come with it.
        binds.retain(|b| !b.path.starts_with(&dir));
        binds.push(Bind {
            path: dir.clone(),
            dir: true,
            writable: true,
            exec: false,
            device: false,
        });
        binds.sort_by(|a, b| a.path.cmp(&b.path));
        binds.dedup_by(|a, b| a.path == b.path);
        for b in &binds {
            if !b.path.exists() {
                return Err(Error::backend(format!(
                    "QEMU needs {}, which does not exist",
                    b.path.display()
                )));
            }
        }
        Ok(JailSpec {
            uid,
            gid: uid,
            groups,
            binds,
            new_net: true,
            cwd: dir,
            reads,
            no_thp: false,
        })
    }

    /// Give the jail uid what it writes in the sandbox directory: the
    /// directory (group, sticky, so the daemon's files stay the daemon's) and
    /// the writable files (the disk, and the RAM file of a guest that owns
    /// its RAM).
    pub fn prepare_dir(&self, writable: &[PathBuf], image_dir: &Path) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::os::unix::fs::chown(&self.cwd, Some(0), Some(self.gid))
            .map_err(|e| Error::backend(format!("chown {}: {e}", self.cwd.display())))?;
        std::fs::set_permissions(&self.cwd, std::fs::Permissions::from_mode(0o1770))?;
        // Through descriptors opened O_NOFOLLOW: a name planted in the
        // (QEMU-writable) directory is refused, never followed.
        for w in writable {
            let w = absolute(&self.cwd, w);
            if trust::within(&w, &[&self.cwd]).is_err() {
                return Err(Error::backend(format!(
                    "{} is outside the sandbox directory: QEMU may not write it",
                    w.display()
                )));
            }
            trust::fix_mode(&w, Some((self.uid, self.gid)), |_| 0o600)?;
        }
        // What it only reads stays root's; a file written under a strict
        // umask (0600) gets the read bits the QEMU uid needs. (Its contents
        // are no secret from the guest whose disk or memory it is.) Only
        // root's files of the image or the sandbox directory: anything else
        // (the host's firmware) is left as it is.
        for r in &self.reads {
            if trust::within(r, &[image_dir, &self.cwd]).is_err() {
                continue;
            }
            let f = trust::open_regular(r)?;
            let md = f.metadata()?;
            if md.mode() & 0o004 == 0 && md.uid() == 0 {
                f.set_permissions(std::fs::Permissions::from_mode(
                    (md.mode() & 0o7777) | 0o044,
                ))?;
            }
        }
        Ok(())
    }
}

/// Give a file the jailed QEMU wrote back to the daemon: root-owned and
/// world-readable like every artifact (forks' QEMUs read it as a backing
/// file; none may write it).
pub fn disown(p: &Path) -> Result<()> {
    trust::fix_mode(p, Some((0, 0)), |_| 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_library_paths() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(out).unwrap(),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        let e = parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err();
        assert!(e.message.contains("libfoo"), "{e}");
    }

    fn qcow2_with_backing(path: &Path, backing: &str) {
        trust::tests::qcow2(path, backing, None, None);
    }

    #[test]
    fn backing_chains_resolve_relative_and_absolute_names() {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("img");
        std::fs::create_dir(&img).unwrap();
        let root = img.join("rootfs.qcow2");
        qcow2_with_backing(&root, "");
        qcow2_with_backing(&d.path().join("base.qcow2"), root.to_str().unwrap());
        qcow2_with_backing(&d.path().join("disk.qcow2"), "base.qcow2");
        let roots = [d.path()];
        assert_eq!(
            backing_chain(&d.path().join("disk.qcow2"), &roots).unwrap(),
            vec![d.path().join("base.qcow2"), root.clone()]
        );
        assert!(backing_chain(&root, &roots).unwrap().is_empty());
        // A chain that loops is refused, not followed forever.
        qcow2_with_backing(&d.path().join("a.qcow2"), "b.qcow2");
        qcow2_with_backing(&d.path().join("b.qcow2"), "a.qcow2");
        assert!(backing_chain(&d.path().join("a.qcow2"), &roots).is_err());
        // A layer with an external data file is refused.
        trust::tests::qcow2(&d.path().join("df.qcow2"), "", None, Some("/etc/shadow"));
        qcow2_with_backing(&d.path().join("disk.qcow2"), "df.qcow2");
        let e = backing_chain(&d.path().join("disk.qcow2"), &roots).unwrap_err();
        assert!(e.message.contains("data file"), "{e}");
    }

    #[test]
    fn uids_come_from_the_range_and_are_not_handed_out_twice() {
        let cfg = JailConfig {
            uid_base: 0x7b00_0000,
            uid_count: 2,
        };
        let a = lease_uid(&cfg, "sb-a").unwrap();
        let b = lease_uid(&cfg, "sb-a").unwrap();
        assert_ne!(a.0, b.0);
        for u in [a.0, b.0] {
            assert!((0x7b00_0000..0x7b00_0002).contains(&u));
        }
        assert!(lease_uid(&cfg, "sb-c").is_err(), "range exhausted");
        let freed = a.0;
        drop(a);
        assert_eq!(lease_uid(&cfg, "sb-d").unwrap().0, freed);
    }

    #[test]
    fn the_plan_binds_only_what_qemu_opens() {
        let d = tempfile::tempdir().unwrap();
        let sb = d.path().join("sb");
        let img = d.path().join("img");
        std::fs::create_dir_all(&sb).unwrap();
        std::fs::create_dir_all(&img).unwrap();
        for f in ["vmlinux", "initrd.img"] {
            std::fs::write(img.join(f), f).unwrap();
        }
        qcow2_with_backing(&img.join("rootfs.qcow2"), "");
        qcow2_with_backing(
            &sb.join("disk.qcow2"),
            img.join("rootfs.qcow2").to_str().unwrap(),
        );
        let kernel = img.join("vmlinux");
        let initrd = img.join("initrd.img");
        let n = Needs {
            qemu: Path::new("/bin/sh"),
            firmware: "no-such-firmware.rom",
            kernel: &kernel,
            initrd: &initrd,
            disk: Path::new("disk.qcow2"),
            files: vec![sb.join("memory.ram")],
            kvm: false,
            dir: &sb,
            image_dir: &img,
        };
        let s = JailSpec::plan(0x7b00_0010, &n).unwrap();
        let paths: Vec<&Path> = s.binds.iter().map(|b| b.path.as_path()).collect();
        for want in [kernel.as_path(), &initrd, &img.join("rootfs.qcow2"), &sb] {
            assert!(paths.contains(&want), "{want:?} not in {paths:?}");
        }
        // Nothing else of the image directory, nothing under the sandbox
        // dir twice, no /etc, no whole directory but the sandbox's.
        assert!(!paths.contains(&img.as_path()));
        assert!(!paths.iter().any(|p| p.starts_with("/etc")));
        assert!(s.binds.iter().filter(|b| b.dir).all(|b| b.path == sb));
        assert!(s
            .binds
            .iter()
            .filter(|b| b.writable)
            .all(|b| b.path == sb || b.device));
        assert!(paths.iter().filter(|p| p.starts_with(&sb)).count() == 1);
        assert!(s.new_net);
        assert_ne!(s.uid, 0);
        assert!(s.reads.contains(&sb.join("memory.ram")), "{:?}", s.reads);
    }

    #[test]
    fn the_qemu_uid_gets_its_disk_and_can_read_what_it_reads() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let sb = d.path().join("sb");
        std::fs::create_dir_all(&sb).unwrap();
        std::fs::write(sb.join("disk.qcow2"), "x").unwrap();
        let ram = sb.join("memory.ram");
        std::fs::write(&ram, "r").unwrap();
        std::fs::set_permissions(&ram, std::fs::Permissions::from_mode(0o600)).unwrap();
        let spec = JailSpec {
            uid: 0x7b00_0020,
            gid: 0x7b00_0020,
            groups: vec![],
            binds: vec![],
            new_net: true,
            cwd: sb.clone(),
            reads: vec![ram.clone()],
            no_thp: false,
        };
        spec.prepare_dir(&[PathBuf::from("disk.qcow2")], d.path())
            .unwrap();
        let md = |p: &Path| std::fs::metadata(p).unwrap();
        assert_eq!(
            (md(&sb).uid(), md(&sb).gid(), md(&sb).mode() & 0o7777),
            (0, 0x7b00_0020, 0o1770)
        );
        let disk = md(&sb.join("disk.qcow2"));
        assert_eq!((disk.uid(), disk.mode() & 0o777), (0x7b00_0020, 0o600));
        assert_eq!((md(&ram).uid(), md(&ram).mode() & 0o777), (0, 0o644));
    }

    /// A header a compromised QEMU wrote names a host file (standing for
    /// /etc/shadow, mode 0600), directly, relatively, or through a symlink
    /// planted in the sandbox directory: the plan is refused, nothing is
    /// bound, the host file keeps its mode.
    #[test]
    fn a_backing_chain_leaving_the_image_and_sandbox_dirs_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let (sb, img, host) = (
            d.path().join("sb"),
            d.path().join("img"),
            d.path().join("etc"),
        );
        for p in [&sb, &img, &host] {
            std::fs::create_dir_all(p).unwrap();
        }
        for f in ["vmlinux", "initrd.img"] {
            std::fs::write(img.join(f), f).unwrap();
        }
        qcow2_with_backing(&img.join("rootfs.qcow2"), "");
        let shadow = host.join("shadow");
        std::fs::write(&shadow, "root:$6$secret").unwrap();
        std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&shadow, sb.join("planted")).unwrap();
        qcow2_with_backing(&sb.join("base.qcow2"), shadow.to_str().unwrap());
        let (kernel, initrd) = (img.join("vmlinux"), img.join("initrd.img"));
        for backing in [
            shadow.to_str().unwrap().to_string(),
            "../etc/shadow".into(),
            "planted".into(),
            // One level down: the sandbox's base names the host file.
            "base.qcow2".into(),
        ] {
            qcow2_with_backing(&sb.join("disk.qcow2"), &backing);
            let n = Needs {
                qemu: Path::new("/bin/sh"),
                firmware: "no-such-firmware.rom",
                kernel: &kernel,
                initrd: &initrd,
                disk: Path::new("disk.qcow2"),
                files: vec![],
                kvm: false,
                dir: &sb,
                image_dir: &img,
            };
            let e = JailSpec::plan(0x7b00_0030, &n).unwrap_err();
            assert_eq!(
                e.code,
                stasis_core::ErrorCode::IntegrityError,
                "{backing}: {e}"
            );
            assert!(e.message.contains("leaves"), "{e}");
            let md = std::fs::metadata(&shadow).unwrap();
            assert_eq!(md.mode() & 0o777, 0o600, "{backing}");
        }
    }

    /// A read leading out of the two directories (through a symlink or not)
    /// is left alone; a symlink is never followed: the host file keeps 0600.
    #[test]
    fn prepare_dir_never_chmods_through_a_symlink_or_outside() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let (sb, img) = (d.path().join("sb"), d.path().join("img"));
        std::fs::create_dir_all(&sb).unwrap();
        std::fs::create_dir_all(&img).unwrap();
        std::fs::write(sb.join("disk.qcow2"), "x").unwrap();
        let shadow = d.path().join("shadow");
        std::fs::write(&shadow, "s").unwrap();
        std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&shadow, sb.join("memory.ram")).unwrap();
        // A symlink inside the sandbox dir to a file there: refused.
        std::fs::write(sb.join("inner"), "i").unwrap();
        std::os::unix::fs::symlink(sb.join("inner"), sb.join("input.ext4")).unwrap();
        for read in [sb.join("memory.ram"), shadow.clone(), sb.join("input.ext4")] {
            let spec = JailSpec {
                uid: 0x7b00_0040,
                gid: 0x7b00_0040,
                groups: vec![],
                binds: vec![],
                new_net: true,
                cwd: sb.clone(),
                reads: vec![read.clone()],
                no_thp: false,
            };
            let r = spec.prepare_dir(&[PathBuf::from("disk.qcow2")], &img);
            assert_eq!(r.is_err(), read.ends_with("input.ext4"), "{read:?}: {r:?}");
            assert_eq!(std::fs::metadata(&shadow).unwrap().mode() & 0o777, 0o600);
        }
        // Nor is a disk planted as a symlink chowned to the QEMU uid.
        std::fs::remove_file(sb.join("disk.qcow2")).unwrap();
        std::os::unix::fs::symlink(&shadow, sb.join("disk.qcow2")).unwrap();
        let spec = JailSpec {
            uid: 0x7b00_0040,
            gid: 0x7b00_0040,
            groups: vec![],
            binds: vec![],
            new_net: true,
            cwd: sb.clone(),
            reads: vec![],
            no_thp: false,
        };
        assert!(spec
            .prepare_dir(&[PathBuf::from("disk.qcow2")], &img)
            .is_err());
        let md = std::fs::metadata(&shadow).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o600));
    }
}
