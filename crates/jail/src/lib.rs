//! Least privilege for one program the daemon starts on behalf of a tenant
//! (the "jail", after Firecracker's jailer). The caller says what the
//! program opens ([`JailSpec`]); the jail knows nothing else of it. The
//! program starts:
//!
//! * as an **unprivileged uid/gid of its own**, from a dedicated range
//!   ([`JailConfig`]). A uid is free when no process on the host runs under
//!   it; it is picked from a hash of a key (the sandbox id) and held for the
//!   life of that program only ([`lease_uid`]). Supplementary groups only
//!   as the spec names them. All capabilities are gone (uid 0 -> non-zero
//!   drops them) and `no_new_privs` is set.
//! * in **new mount, pid, ipc, uts and cgroup namespaces**, and a network
//!   namespace of its own when the spec asks (`new_net`). Pid 1 of the pid
//!   namespace is a minimal init (a fork of the launcher, same uid and
//!   root, named `stasis-jail`) that only reaps, so nothing the program
//!   leaves behind stays a zombie. It exits with the program, and the
//!   namespace with it.
//! * with a **minimal root**: a read-only tmpfs holding only bind mounts of
//!   what the spec lists, each at its host path (so no argument needs
//!   rewriting): the binary and the shared libraries `ldd` lists for it
//!   ([`libraries`]), the files it reads, its working directory (read-write,
//!   whole) and the device nodes it needs. Built by `pivot_root`, the host
//!   root is detached.
//!
//! Files: the working directory becomes `root:<jail gid>` mode `01770`
//! ([`JailSpec::prepare_dir`]): the program may create files there, but
//! the sticky bit keeps it from removing or replacing root's; the files it
//! writes are chowned to its uid. What it only reads stays root-owned.
//! Whatever the program wrote is untrusted: modes and owners change only
//! through `O_NOFOLLOW` descriptors ([`fix_mode`]), and only under the
//! roots the caller names ([`within`]).
//!
//! The jail holds no reference to the daemon: the program runs in its own
//! session and namespaces, so a daemon restart finds it as before.

mod files;
mod launch;

pub use files::{fix_mode, open_regular, within};
pub use launch::{spawn, Jailed};

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use stasis_core::{Error, Result};

/// The uid range jailed programs run under (uid = gid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JailConfig {
    pub uid_base: u32,
    pub uid_count: u32,
}

/// Device nodes every jailed program gets.
pub const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"];

/// One bind mount into the jail, at the same path as on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub path: PathBuf,
    pub dir: bool,
    pub writable: bool,
    /// Executable code (the program and its libraries).
    pub exec: bool,
    pub device: bool,
}

impl Bind {
    /// A regular file, read-only; `exec` for code.
    pub fn file(path: PathBuf, exec: bool) -> Bind {
        Bind {
            path,
            dir: false,
            writable: false,
            exec,
            device: false,
        }
    }

    /// A device node (read-write, device access allowed).
    pub fn device(path: PathBuf) -> Bind {
        Bind {
            path,
            dir: false,
            writable: true,
            exec: false,
            device: true,
        }
    }
}

/// Everything that decides what one jailed program sees and who it is.
#[derive(Debug, Clone)]
pub struct JailSpec {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub binds: Vec<Bind>,
    /// A new network namespace.
    pub new_net: bool,
    /// The program's working directory (bound read-write, whole).
    pub cwd: PathBuf,
    /// Data files the program only reads, wherever they lie.
    pub reads: Vec<PathBuf>,
    /// No transparent huge pages for the process (`PR_SET_THP_DISABLE`,
    /// kept across exec): its memory grows by 4 KiB pages, not 2 MiB.
    pub no_thp: bool,
    /// An empty host directory where the jail's root tmpfs is mounted while
    /// it is built (inside the new mount namespace only).
    pub staging: PathBuf,
}

/// Uids handed out but whose program may not show in /proc yet.
static RESERVED: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

/// A uid reserved for one jailed start; released on drop (by then the
/// program, if it started, runs under it and /proc shows it).
pub struct UidLease(pub u32);

impl Drop for UidLease {
    fn drop(&mut self) {
        if let Some(s) = RESERVED.lock().unwrap().as_mut() {
            s.remove(&self.0);
        }
    }
}

/// Every pid in /proc.
pub fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// Uids of every process on the host.
fn uids_in_use() -> HashSet<u32> {
    let mut used = HashSet::new();
    for pid in all_pids() {
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
        "no free jail uid in {}..{}: every one runs a jailed program",
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
/// (the program would not start without it).
pub fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.contains("=> not found") {
            return Err(Error::backend(format!(
                "a library of the jailed program is missing: {l}"
            )));
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
/// symlinks: the jail mirrors the path the program opens).
pub fn absolute(base: &Path, path: &Path) -> PathBuf {
    let p = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// Find a binary in PATH (or take it as it is when it has a slash).
pub fn resolve_bin(p: &Path) -> Result<PathBuf> {
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

impl JailSpec {
    /// The jail of a program run as `uid` (= gid) with the supplementary
    /// `groups`, working in `cwd` (bound read-write, whole) and opening
    /// what `binds` lists (each bound alone, at its host path), its root
    /// built at `staging`. Binds under `cwd` come with it; every read-only
    /// data file is one of its `reads`; each bound path must exist. A
    /// network namespace of its own (`new_net`) unless the caller says
    /// otherwise.
    pub fn new(
        staging: &Path,
        uid: u32,
        groups: Vec<u32>,
        cwd: &Path,
        mut binds: Vec<Bind>,
    ) -> Result<JailSpec> {
        let dir = absolute(Path::new("/"), cwd);
        let reads: Vec<PathBuf> = binds
            .iter()
            .filter(|b| !b.exec && !b.device && !b.writable)
            .map(|b| b.path.clone())
            .collect();
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
                    "the jailed program needs {}, which does not exist",
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
            staging: staging.to_path_buf(),
        })
    }

    /// Give the jail uid what it writes in its working directory: the
    /// directory (group, sticky, so root's files there stay root's) and the
    /// `writable` files (relative to it or absolute, inside it). Of its
    /// `reads`, root's files under `data_root` or the working directory get
    /// the read bits the jail uid needs.
    pub fn prepare_dir(&self, writable: &[PathBuf], data_root: &Path) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::os::unix::fs::chown(&self.cwd, Some(0), Some(self.gid))
            .map_err(|e| Error::backend(format!("chown {}: {e}", self.cwd.display())))?;
        std::fs::set_permissions(&self.cwd, std::fs::Permissions::from_mode(0o1770))?;
        // Through descriptors opened O_NOFOLLOW: a name planted in the
        // (program-writable) directory is refused, never followed.
        for w in writable {
            let w = absolute(&self.cwd, w);
            if within(&w, &[&self.cwd]).is_err() {
                return Err(Error::backend(format!(
                    "{} is outside the working directory: the jailed program may not write it",
                    w.display()
                )));
            }
            fix_mode(&w, Some((self.uid, self.gid)), |_| 0o600)?;
        }
        // What it only reads stays root's; a file written under a strict
        // umask (0600) gets the read bits the jail uid needs (the caller
        // hands the program only what is no secret from it). Only root's
        // files under the two roots: anything else (host files) is left as
        // it is.
        for r in &self.reads {
            if within(r, &[data_root, &self.cwd]).is_err() {
                continue;
            }
            let f = open_regular(r)?;
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

/// Give a file the jailed program wrote back to the daemon: root-owned and
/// world-readable like every artifact (other jails may read it; none may
/// write it).
pub fn disown(p: &Path) -> Result<()> {
    fix_mode(p, Some((0, 0)), |_| 0o644)
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
    fn the_jail_uid_gets_what_it_writes_and_can_read_what_it_reads() {
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
            staging: PathBuf::from("/nonexistent"),
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
                staging: PathBuf::from("/nonexistent"),
            };
            let r = spec.prepare_dir(&[PathBuf::from("disk.qcow2")], &img);
            assert_eq!(r.is_err(), read.ends_with("input.ext4"), "{read:?}: {r:?}");
            assert_eq!(std::fs::metadata(&shadow).unwrap().mode() & 0o777, 0o600);
        }
        // Nor is a disk planted as a symlink chowned to the jail uid.
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
            staging: PathBuf::from("/nonexistent"),
        };
        assert!(spec
            .prepare_dir(&[PathBuf::from("disk.qcow2")], &img)
            .is_err());
        let md = std::fs::metadata(&shadow).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o600));
    }

    #[test]
    fn a_spec_binds_the_working_dir_whole_and_lists_what_is_only_read() {
        let d = tempfile::tempdir().unwrap();
        let (cwd, data) = (d.path().join("work"), d.path().join("data"));
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        for f in [cwd.join("in.img"), data.join("kernel")] {
            std::fs::write(f, "x").unwrap();
        }
        let binds = vec![
            Bind::file(data.join("kernel"), false),
            Bind::file("/bin/sh".into(), true),
            Bind::file(cwd.join("in.img"), false),
            Bind::file(data.join("kernel"), false),
            Bind::device("/dev/null".into()),
        ];
        let staging = Path::new("/run/stasis-test-staging");
        let s = JailSpec::new(staging, 0x7c00_0001, vec![5], &cwd.join("."), binds).unwrap();
        assert_eq!(
            (s.uid, s.gid, s.groups.clone()),
            (0x7c00_0001, 0x7c00_0001, vec![5])
        );
        assert!(s.new_net && !s.no_thp);
        assert_eq!(
            (s.cwd.as_path(), s.staging.as_path()),
            (cwd.as_path(), staging)
        );
        let paths: Vec<&Path> = s.binds.iter().map(|b| b.path.as_path()).collect();
        // Sorted, each once; what lies in the working dir comes with it.
        let kernel = data.join("kernel");
        let mut want = vec![Path::new("/bin/sh"), Path::new("/dev/null"), &kernel, &cwd];
        want.sort();
        assert_eq!(paths, want);
        let w = s.binds.iter().find(|b| b.path == cwd).unwrap();
        assert!(w.dir && w.writable && !w.exec && !w.device);
        // Reads: the data files, wherever they lie; not code, not devices.
        for r in [data.join("kernel"), cwd.join("in.img")] {
            assert!(s.reads.contains(&r), "{r:?} not in {:?}", s.reads);
        }
        assert!(s
            .reads
            .iter()
            .all(|r| *r == data.join("kernel") || *r == cwd.join("in.img")));
        // A bound path that does not exist is refused before any start.
        let e = JailSpec::new(
            staging,
            0x7c00_0001,
            vec![],
            &cwd,
            vec![Bind::file(data.join("missing"), false)],
        )
        .unwrap_err();
        assert!(e.message.contains("missing"), "{e}");
    }

    /// A uid some process on the host runs under is never leased, whatever
    /// the key hashes to.
    #[test]
    fn a_uid_in_use_on_the_host_is_skipped() {
        use std::os::unix::process::CommandExt;
        let cfg = JailConfig {
            uid_base: 0x7c00_0100,
            uid_count: 2,
        };
        let mut busy = std::process::Command::new("sleep")
            .arg("60")
            .uid(cfg.uid_base)
            .gid(cfg.uid_base)
            .spawn()
            .unwrap();
        // spawn returns once exec succeeded: the uid is switched by then.
        for key in ["a", "b", "c", "d", "e", "f"] {
            let l = lease_uid(&cfg, key).unwrap();
            assert_eq!(l.0, cfg.uid_base + 1, "{key}");
        }
        let held = lease_uid(&cfg, "g").unwrap();
        assert!(lease_uid(&cfg, "h").is_err(), "one busy, one leased");
        busy.kill().unwrap();
        busy.wait().unwrap();
        assert_eq!(lease_uid(&cfg, "i").unwrap().0, cfg.uid_base);
        drop(held);
    }
}
