//! Stat, remove, mkdir, rename, chown, metadata (xattrs) and ranged reads
//! on a sandbox's root, with the same resolution rules as
//! [`crate::fsops`]: every path is resolved by
//! `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_XDEV)` up to its parent directory,
//! and the last component is acted on relative to that directory's fd (never
//! followed when it is a symlink), so no operation reaches outside the root.
//! A recursive remove descends with `openat(O_NOFOLLOW)` one component at a
//! time and never crosses into another mount.
//!
//! The daemon acts from the host's mount namespace, where the sandbox's
//! mounts (/proc, /dev, input mounts, hidden paths) are not mount points:
//! an rmdir or rename there would succeed and the kernel would detach the
//! sandbox's mount. So a remove or rename first compares the mount id of
//! the entry with its parent's (`statx(STATX_MNT_ID)` through descriptors),
//! and checks the entry is none of the directories that hold a mount of
//! the sandbox (from its own mountinfo): those answer `mount_point`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use stasis_fsroot::xattr;

use stasis_core::mounts::{holders, refused};
use stasis_core::{Error, ErrorCode, FileKind, FileStat, Result};

use crate::fsops::{map_err, meta_in, read_link_at, Root};

/// Deepest directory tree a recursive remove descends.
const MAX_DEPTH: u32 = 512;

fn split(path: &str) -> Result<(&str, &str)> {
    match path.rsplit_once('/') {
        Some((_, "")) | None => Err(refused(path, "is the sandbox's root")),
        Some(("", name)) => Ok(("/", name)),
        Some((parent, name)) => Ok((parent, name)),
    }
}

fn cstr(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid("path contains NUL").with_field("path"))
}

fn kind_of(mode: u32) -> FileKind {
    match mode & libc::S_IFMT {
        libc::S_IFREG => FileKind::File,
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        _ => FileKind::Other,
    }
}

/// The mode and mount id of `name` in `dir` (not following a final
/// symlink), or of `dir` itself when `name` is empty.
fn statx_at(dir: i32, name: &CStr) -> io::Result<(u32, u64)> {
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let mut flags = libc::AT_SYMLINK_NOFOLLOW;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    let want = libc::STATX_TYPE | libc::STATX_MNT_ID;
    if unsafe { libc::statx(dir, name.as_ptr(), flags, want, &mut stx) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        // Kernels before 5.8: no way to tell a mount point; refuse.
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok((u32::from(stx.stx_mode), stx.stx_mnt_id))
}

/// Whether `name` in `dir` is on another mount than `dir` (a mount point,
/// as the sandbox sees it).
fn is_mount_point(dir: i32, name: &CStr) -> io::Result<bool> {
    Ok(statx_at(dir, name)?.1 != statx_at(dir, c"")?.1)
}

/// Errors of a remove, rename or mkdir: a lookup or move across mounts
/// (EXDEV) or onto a busy mount (EBUSY) is the `mount_point` refusal.
fn op_err(e: io::Error, path: &str) -> Error {
    match e.raw_os_error() {
        Some(libc::EXDEV) => refused(path, "crosses a mount point"),
        Some(libc::EBUSY) => refused(path, "is in use as a mount point"),
        _ => map_err(e, path),
    }
}

/// The directories of a sandbox that hold one of its mounts below them,
/// from the mount points its mountinfo lists (see [`holders`]).
#[derive(Debug, Default, Clone)]
pub struct MountHolders(BTreeSet<String>);

impl MountHolders {
    /// From the text of the sandbox's `/proc/<pid>/mountinfo`.
    pub fn from_mountinfo(text: &str) -> MountHolders {
        MountHolders(holders(&stasis_core::mounts::mount_points(text)))
    }
}

fn fstatat(dir: i32, name: &CString) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

impl Root {
    /// The parent directory of `path` (resolved inside the root) and the
    /// last component's name.
    fn parent_of(&self, path: &str) -> Result<(OwnedFd, CString, String)> {
        let (parent, name) = split(path)?;
        let fd = self
            .openat2(parent, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| map_err(e, parent))?;
        Ok((fd, cstr(name)?, name.to_string()))
    }

    /// Like [`Root::parent_of`] for an operation that changes the tree:
    /// a parent across a mount answers `mount_point`.
    fn parent_for_change(&self, path: &str) -> Result<(OwnedFd, CString)> {
        let (parent, name) = split(path)?;
        let fd = self
            .openat2(parent, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| op_err(e, parent))?;
        Ok((fd, cstr(name)?))
    }

    /// Refuse `name` in `dir` (at `path`) when it is a mount point of the
    /// sandbox or a directory that holds one. A missing entry passes (the
    /// operation itself then answers for it).
    fn guard(&self, dir: &OwnedFd, name: &CStr, path: &str, held: &MountHolders) -> Result<()> {
        match is_mount_point(dir.as_raw_fd(), name) {
            Ok(true) => return Err(refused(path, "is a mount point")),
            Ok(false) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(op_err(e, path)),
        }
        let st = fstatat(dir.as_raw_fd(), &name.to_owned()).map_err(|e| op_err(e, path))?;
        if kind_of(st.st_mode) != FileKind::Dir {
            return Ok(());
        }
        for h in &held.0 {
            // A holder on another mount is out of reach (and so is `path`
            // if it is that holder): only same-mount holders can match.
            let Ok(fd) = self.openat2(h, libc::O_PATH | libc::O_DIRECTORY, 0) else {
                continue;
            };
            let mut hs: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(fd.as_raw_fd(), &mut hs) } == 0
                && (hs.st_dev, hs.st_ino) == (st.st_dev, st.st_ino)
            {
                return Err(refused(path, &format!("holds a mount point (below {h})")));
            }
        }
        Ok(())
    }

    /// The entry at `path` itself (a final symlink is not followed). Its
    /// `uid`/`gid` are the ids the daemon sees (host ids of a sandbox in a
    /// user namespace: see [`crate::userns::Owners`] for the inside ones).
    pub fn stat(&self, path: &str) -> Result<FileStat> {
        let mut xattrs = None;
        let st = if path == "/" {
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(self.0.as_raw_fd(), &mut st) } != 0 {
                return Err(map_err(io::Error::last_os_error(), path));
            }
            st
        } else {
            let (dir, name, _) = self.parent_of(path)?;
            let st = fstatat(dir.as_raw_fd(), &name).map_err(|e| map_err(e, path))?;
            if matches!(kind_of(st.st_mode), FileKind::File | FileKind::Dir) {
                xattrs = meta_in(dir.as_fd(), &name);
            }
            st
        };
        let kind = kind_of(st.st_mode);
        let symlink_target = if kind == FileKind::Symlink {
            let (dir, _, name) = self.parent_of(path)?;
            read_link_at(&dir, &name)
        } else {
            None
        };
        Ok(FileStat {
            path: path.to_string(),
            kind,
            size: st.st_size as u64,
            mode: st.st_mode & 0o7777,
            mtime: st.st_mtime,
            symlink_target,
            uid: Some(st.st_uid),
            gid: Some(st.st_gid),
            xattrs,
        })
    }

    /// Replace the metadata (`user.e2b.*` attributes) of the entry at
    /// `path` itself: opened relative to its parent's descriptor with
    /// `O_NOFOLLOW` (a symlink, device or FIFO is `invalid_argument`), then
    /// changed through that descriptor. The root and mount points (which
    /// may be host directories) answer `mount_point`.
    pub fn set_meta(&self, path: &str, meta: &BTreeMap<String, String>) -> Result<()> {
        stasis_core::exec::check_meta(meta)?;
        let (dir, name) = self.parent_for_change(path)?;
        match is_mount_point(dir.as_raw_fd(), &name) {
            Ok(false) => {}
            Ok(true) => return Err(refused(path, "is a mount point")),
            Err(e) => return Err(op_err(e, path)),
        }
        let fd = xattr::open_entry(dir.as_fd(), &name)
            .map_err(|e| op_err(e, path))?
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{path} carries no metadata: it is not a file or directory (or is on a kernel file system)"
                ))
            })?;
        xattr::replace(fd.as_fd(), meta).map_err(|e| op_err(e, path))
    }

    /// Give the entry at `path` itself to `uid`:`gid` (ids the daemon
    /// sees: host ids of a sandbox in a user namespace): `fchownat` with
    /// `AT_SYMLINK_NOFOLLOW` on its parent directory's descriptor, so a
    /// final symlink is changed and never followed. The root and mount
    /// points (the sandbox's /proc, /dev, input mounts, which may be host
    /// directories) answer `mount_point`.
    pub fn chown(&self, path: &str, uid: u32, gid: u32) -> Result<()> {
        if uid == u32::MAX || gid == u32::MAX {
            return Err(Error::invalid(format!(
                "{path}: uid and gid must be below {}",
                u32::MAX
            )));
        }
        let (dir, name) = self.parent_for_change(path)?;
        match is_mount_point(dir.as_raw_fd(), &name) {
            Ok(false) => {}
            Ok(true) => return Err(refused(path, "is a mount point")),
            Err(e) => return Err(op_err(e, path)),
        }
        let rc = unsafe {
            libc::fchownat(
                dir.as_raw_fd(),
                name.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(op_err(io::Error::last_os_error(), path));
        }
        Ok(())
    }

    /// Remove a file, a symlink, an empty directory, or (with `recursive`)
    /// a directory tree. A mount point, or a directory holding one (see
    /// [`MountHolders`]), answers `mount_point` and nothing is removed; a
    /// recursive remove that meets a mount below a symlinked path stops
    /// there (what it removed before stays removed, the mount is intact).
    pub fn remove(&self, path: &str, recursive: bool, held: &MountHolders) -> Result<()> {
        let (dir, name) = self.parent_for_change(path)?;
        self.guard(&dir, &name, path, held)?;
        let st = fstatat(dir.as_raw_fd(), &name).map_err(|e| map_err(e, path))?;
        if kind_of(st.st_mode) != FileKind::Dir {
            return unlink(&dir, &name, 0).map_err(|e| op_err(e, path));
        }
        if recursive {
            remove_tree(dir.as_raw_fd(), &name, 0).map_err(|e| op_err(e, path))?;
        }
        unlink(&dir, &name, libc::AT_REMOVEDIR).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => Error::new(
                ErrorCode::InvalidState,
                format!("{path} is a directory that is not empty (remove it recursively)"),
            ),
            _ => op_err(e, path),
        })
    }

    /// `mkdir`, or with `parents` `mkdir -p` (an existing directory is fine).
    pub fn mkdir(&self, path: &str, parents: bool) -> Result<()> {
        if parents {
            return self.mkdir_p(path);
        }
        let (dir, name) = self.parent_for_change(path)?;
        let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!("{path} already exists"),
                ));
            }
            return Err(op_err(e, path));
        }
        Ok(())
    }

    /// POSIX rename of the entry at `from` (not what a symlink points to).
    /// Neither `from` nor an existing `to` may be a mount point or hold one,
    /// and both must be on one mount (`mount_point` otherwise).
    pub fn rename(&self, from: &str, to: &str, held: &MountHolders) -> Result<()> {
        let (fdir, fname) = self.parent_for_change(from)?;
        let (tdir, tname) = self.parent_for_change(to)?;
        self.guard(&fdir, &fname, from, held)?;
        self.guard(&tdir, &tname, to, held)?;
        let rc = unsafe {
            libc::renameat(
                fdir.as_raw_fd(),
                fname.as_ptr(),
                tdir.as_raw_fd(),
                tname.as_ptr(),
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => Error::new(
                    ErrorCode::AlreadyExists,
                    format!("{to} is a directory that is not empty"),
                ),
                Some(libc::ENOTDIR) => Error::new(
                    ErrorCode::AlreadyExists,
                    format!(
                        "{to} exists and is not a directory: {from} is one and cannot replace it"
                    ),
                ),
                Some(libc::EISDIR) => Error::new(
                    ErrorCode::AlreadyExists,
                    format!(
                        "{to} exists and is a directory: {from} is not one and cannot replace it"
                    ),
                ),
                Some(libc::EINVAL) => {
                    Error::invalid(format!("cannot move {from} into itself")).with_field("to")
                }
                Some(libc::EXDEV) => refused(from, &format!("and {to} are on different mounts")),
                _ => op_err(e, from),
            });
        }
        Ok(())
    }

    /// Write what `src` reads to `path`, a piece at a time (an upload is
    /// never held in memory whole). The file is made (or, with `exclusive`,
    /// made only if nothing is there) and emptied by
    /// [`Root::write_file_with`], with its checks; then opened again and
    /// filled. A file this write created exclusively and could not fill is
    /// removed. Returns the bytes written.
    pub fn write_from(
        &self,
        path: &str,
        src: &mut impl io::Read,
        mode: Option<u32>,
        exclusive: bool,
    ) -> Result<u64> {
        // Writable while it is filled; the mode asked for is set last.
        self.write_file_with(path, &[], None, exclusive)?;
        let mut fill = || -> Result<u64> {
            let fd = self
                .openat2(path, libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)
                .map_err(|e| map_err(e, path))?;
            let mut f = std::fs::File::from(fd);
            let md = f.metadata().map_err(|e| map_err(e, path))?;
            if !md.file_type().is_file() {
                return Err(
                    Error::invalid(format!("{path} is not a regular file")).with_field("path")
                );
            }
            f.set_len(0).map_err(|e| map_err(e, path))?;
            let n = io::copy(src, &mut f).map_err(|e| map_err(e, path))?;
            if let Some(m) = mode {
                use std::os::unix::fs::PermissionsExt;
                f.set_permissions(std::fs::Permissions::from_mode(m & 0o7777))
                    .map_err(|e| map_err(e, path))?;
            }
            Ok(n)
        };
        let r = fill();
        if r.is_err() && exclusive {
            if let Ok((dir, name)) = self.parent_for_change(path) {
                let _ = unlink(&dir, &name, 0);
            }
        }
        r
    }

    /// At most `len` bytes of the regular file `path` from `offset`, and
    /// its size.
    pub fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<(Vec<u8>, u64)> {
        let fd = self
            .openat2(path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)
            .map_err(|e| map_err(e, path))?;
        let f = std::fs::File::from(fd);
        let md = f.metadata().map_err(|e| map_err(e, path))?;
        if md.is_dir() {
            return Err(Error::invalid(format!("{path} is a directory")).with_field("path"));
        }
        if !md.file_type().is_file() {
            return Err(Error::invalid(format!("{path} is not a regular file")).with_field("path"));
        }
        let size = md.len();
        let want = len.min(size.saturating_sub(offset)) as usize;
        let mut buf = vec![0u8; want];
        let mut got = 0;
        use std::os::unix::fs::FileExt;
        while got < want {
            let n = f
                .read_at(&mut buf[got..], offset + got as u64)
                .map_err(|e| map_err(e, path))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok((buf, size))
    }
}

fn unlink(dir: &OwnedFd, name: &CString, flags: i32) -> io::Result<()> {
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Empty the directory `name` in `parent` (not removing it), descending
/// without following symlinks; an entry on another mount than its
/// directory (a mount point) stops it with EXDEV before it is touched.
fn remove_tree(parent: i32, name: &CString, depth: u32) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let fd = unsafe {
        libc::openat(
            parent,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let here = statx_at(fd.as_raw_fd(), c"")?.1;
    let names: Vec<CString> = {
        let dup = unsafe { libc::dup(fd.as_raw_fd()) };
        if dup < 0 {
            return Err(io::Error::last_os_error());
        }
        // `dir` owns (and closes) the duplicate.
        let mut dir = nix::dir::Dir::from_fd(dup).map_err(io::Error::from)?;
        dir.iter()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_owned())
            .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
            .collect()
    };
    for n in names {
        let (mode, mnt) = match statx_at(fd.as_raw_fd(), &n) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        if mnt != here {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        if kind_of(mode) == FileKind::Dir {
            remove_tree(fd.as_raw_fd(), &n, depth + 1)?;
            unlink(&fd, &n, libc::AT_REMOVEDIR)?;
        } else {
            unlink(&fd, &n, 0)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn none() -> MountHolders {
        MountHolders::default()
    }

    fn root() -> (tempfile::TempDir, Root) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("workspace")).unwrap();
        let r = Root::open_dir(t.path()).unwrap();
        (t, r)
    }

    #[test]
    fn stat_mkdir_rename_remove() {
        let (t, r) = root();
        r.write_file("/workspace/a.txt", b"hello", None).unwrap();
        let s = r.stat("/workspace/a.txt").unwrap();
        assert_eq!((s.kind, s.size, s.mode), (FileKind::File, 5, 0o644));
        assert_eq!(
            r.stat("/workspace/nope").unwrap_err().code,
            ErrorCode::NotFound
        );

        r.mkdir("/workspace/d", false).unwrap();
        assert_eq!(
            r.mkdir("/workspace/d", false).unwrap_err().code,
            ErrorCode::AlreadyExists
        );
        r.mkdir("/workspace/d", true).unwrap();
        r.mkdir("/workspace/p/q/r", true).unwrap();
        assert_eq!(r.stat("/workspace/p/q/r").unwrap().kind, FileKind::Dir);

        r.rename("/workspace/a.txt", "/workspace/d/b.txt", &none())
            .unwrap();
        assert_eq!(
            std::fs::read(t.path().join("workspace/d/b.txt")).unwrap(),
            b"hello"
        );
        assert_eq!(
            r.remove("/workspace/d", false, &none()).unwrap_err().code,
            ErrorCode::InvalidState
        );
        r.remove("/workspace/d", true, &none()).unwrap();
        assert!(!t.path().join("workspace/d").exists());
        r.remove("/workspace/p", true, &none()).unwrap();
        assert_eq!(
            r.remove("/", true, &none()).unwrap_err().code,
            ErrorCode::MountPoint
        );
    }

    #[test]
    fn symlinks_are_entries_not_targets() {
        let (t, r) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"k").unwrap();
        // An absolute link resolves inside the root, never to the host path.
        symlink(outside.path(), t.path().join("workspace/out")).unwrap();
        let s = r.stat("/workspace/out").unwrap();
        assert_eq!(s.kind, FileKind::Symlink);
        assert_eq!(s.symlink_target.as_deref(), outside.path().to_str());
        assert_eq!(
            r.stat("/workspace/out/keep").unwrap_err().code,
            ErrorCode::NotFound
        );
        // Removing the link (even recursively) leaves its target alone.
        r.remove("/workspace/out", true, &none()).unwrap();
        assert!(outside.path().join("keep").exists());
        // `..` cannot climb out of the root either.
        symlink("../../../..", t.path().join("workspace/up")).unwrap();
        r.write_file("/workspace/up/escaped", b"x", None).unwrap();
        assert!(t.path().join("escaped").exists());
    }

    /// Stat and listing report owners (the ids the daemon sees); a chown
    /// acts on the entry itself beneath the root: a final symlink is
    /// changed, not its target, and a symlink on the way resolves inside
    /// the root, never to the host path it names.
    #[test]
    fn owners_are_reported_and_changed_beneath_the_root() {
        use std::os::unix::fs::MetadataExt;
        let (t, r) = root();
        let md = |p: &std::path::Path| {
            let m = std::fs::symlink_metadata(p).unwrap();
            (m.uid(), m.gid())
        };
        r.write_file("/workspace/a.txt", b"a", None).unwrap();
        let s = r.stat("/workspace/a.txt").unwrap();
        let own = md(&t.path().join("workspace/a.txt"));
        assert_eq!((s.uid, s.gid), (Some(own.0), Some(own.1)));
        let l = r.list("/workspace").unwrap();
        assert_eq!((l[0].uid, l[0].gid), (Some(own.0), Some(own.1)));
        assert_eq!(
            r.chown("/workspace/a.txt", u32::MAX, 0).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            r.chown("/workspace/nope", 1, 1).unwrap_err().code,
            ErrorCode::NotFound
        );
        if unsafe { libc::geteuid() } != 0 {
            return; // giving files away needs CAP_CHOWN
        }
        r.chown("/workspace/a.txt", 1000, 1001).unwrap();
        let s = r.stat("/workspace/a.txt").unwrap();
        assert_eq!((s.uid, s.gid), (Some(1000), Some(1001)));
        r.mkdir("/workspace/d/e", true).unwrap();
        r.chown("/workspace/d/e", 1000, 1000).unwrap();
        assert_eq!(md(&t.path().join("workspace/d/e")), (1000, 1000));
        assert_eq!(md(&t.path().join("workspace/d")), own);

        // A link to a host directory: its path is not followed out of the
        // root, and the link itself is what a chown of it changes.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"k").unwrap();
        let host = md(&outside.path().join("keep"));
        let host_dir = md(outside.path());
        symlink(outside.path(), t.path().join("workspace/out")).unwrap();
        assert_eq!(
            r.chown("/workspace/out/keep", 2000, 2000).unwrap_err().code,
            ErrorCode::NotFound
        );
        r.chown("/workspace/out", 2000, 2000).unwrap();
        assert_eq!(md(&t.path().join("workspace/out")), (2000, 2000));
        assert_eq!(md(outside.path()), host_dir);
        assert_eq!(md(&outside.path().join("keep")), host);
        // A file link: the same.
        symlink(outside.path().join("keep"), t.path().join("workspace/fl")).unwrap();
        r.chown("/workspace/fl", 2001, 2001).unwrap();
        assert_eq!(md(&outside.path().join("keep")), host);
        // `..` through a link stays in the root.
        symlink("../../../..", t.path().join("workspace/up")).unwrap();
        std::fs::write(t.path().join("top"), b"t").unwrap();
        r.chown("/workspace/up/top", 3000, 3000).unwrap();
        assert_eq!(md(&t.path().join("top")), (3000, 3000));
    }

    #[test]
    fn write_through_a_link_to_a_missing_dir_makes_it() {
        let (t, r) = root();
        symlink("/workspace/real", t.path().join("workspace/alias")).unwrap();
        r.write_file("/workspace/alias/internal/x", b"1", None)
            .unwrap();
        assert_eq!(
            std::fs::read(t.path().join("workspace/real/internal/x")).unwrap(),
            b"1"
        );
        symlink("later", t.path().join("workspace/rel")).unwrap();
        r.write_file("/workspace/rel/y", b"2", None).unwrap();
        assert!(t.path().join("workspace/later/y").exists());
        // A loop is refused, not followed forever.
        symlink("/workspace/loop", t.path().join("workspace/loop")).unwrap();
        assert!(r.write_file("/workspace/loop/z", b"3", None).is_err());
    }

    #[test]
    fn exclusive_writes_and_ranges() {
        let (_t, r) = root();
        r.write_file_with("/workspace/f", b"0123456789", None, true)
            .unwrap();
        let e = r
            .write_file_with("/workspace/f", b"x", None, true)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::AlreadyExists);
        assert_eq!(
            r.read_range("/workspace/f", 2, 3).unwrap(),
            (b"234".to_vec(), 10)
        );
        assert_eq!(r.read_range("/workspace/f", 8, 100).unwrap().0, b"89");
        assert!(r.read_range("/workspace/f", 50, 1).unwrap().0.is_empty());
    }

    #[test]
    fn writes_from_a_reader() {
        let (t, r) = root();
        // Larger than one copy buffer, read from a file as an upload is.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let src = t.path().join("spool");
        std::fs::write(&src, &big).unwrap();
        let mut f = std::fs::File::open(&src).unwrap();
        let n = r
            .write_from("/workspace/up/big", &mut f, Some(0o600), false)
            .unwrap();
        assert_eq!(n, big.len() as u64);
        assert_eq!(
            std::fs::read(t.path().join("workspace/up/big")).unwrap(),
            big
        );
        let s = r.stat("/workspace/up/big").unwrap();
        assert_eq!(s.mode, 0o600);
        // Overwrite replaces; exclusive refuses an existing entry.
        r.write_from("/workspace/up/big", &mut &b"short"[..], None, false)
            .unwrap();
        assert_eq!(
            std::fs::read(t.path().join("workspace/up/big")).unwrap(),
            b"short"
        );
        let e = r
            .write_from("/workspace/up/big", &mut &b"x"[..], None, true)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::AlreadyExists);
        // A failed exclusive write leaves nothing behind.
        struct Broken;
        impl io::Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("the upload broke"))
            }
        }
        assert!(r
            .write_from("/workspace/up/new", &mut Broken, None, true)
            .is_err());
        assert!(!t.path().join("workspace/up/new").exists());
    }
}

#[cfg(test)]
#[path = "fileops_mounts_tests.rs"]
mod mounts_tests;
