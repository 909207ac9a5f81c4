//! File requests: write (parents created, also through a symlink to a
//! directory not made yet), create-exclusive, chunked read, directory
//! listing, stat / remove / mkdir / rename. The guest is the sandbox, so
//! paths resolve as any program in it would resolve them.

use crate::AgentError;
use stasis_core::{FileEntry, FileKind, FileOp, FileStat};
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Largest chunk one ReadFile returns (base64 of it fits in a frame).
pub const READ_CHUNK_LIMIT: u64 = 8 * 1024 * 1024;

fn check_path(path: &str) -> Result<&Path, AgentError> {
    if path.is_empty() || !path.starts_with('/') {
        return Err(AgentError::invalid(format!(
            "path must be absolute: {path:?}"
        )));
    }
    if path.contains('\0') {
        return Err(AgentError::invalid("path contains NUL"));
    }
    Ok(Path::new(path))
}

/// `mkdir -p` that also makes the target of a dangling symlink on the way
/// (`alias -> /workspace/later`), as a write through the link expects.
pub fn mkdir_p(dir: &Path) -> Result<(), AgentError> {
    mkdir_p_hops(dir, 0)
}

fn mkdir_p_hops(dir: &Path, hops: u32) -> Result<(), AgentError> {
    if hops > 16 {
        return Err(AgentError::invalid(format!(
            "{}: too many levels of symlinks",
            dir.display()
        )));
    }
    let mut cur = std::path::PathBuf::from("/");
    for comp in dir.components().skip(1) {
        let parent = cur.clone();
        cur.push(comp);
        if cur.is_dir() {
            continue;
        }
        match fs::symlink_metadata(&cur) {
            Ok(md) if md.file_type().is_symlink() => {
                let target = fs::read_link(&cur).map_err(|e| AgentError::io(&cur, e))?;
                mkdir_p_hops(&parent.join(target), hops + 1)?;
            }
            Ok(_) => {
                return Err(AgentError::invalid(format!(
                    "{} exists and is not a directory",
                    cur.display()
                )))
            }
            Err(_) => match fs::create_dir(&cur) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(AgentError::io(&cur, e)),
            },
        }
    }
    Ok(())
}

/// How a write opens its file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Truncate,
    Append,
    Exclusive,
    /// At an offset of a file that exists (made by the transfer's first
    /// chunk): neither truncating nor appending, nor creating (a chunk that
    /// arrives after a failed transfer was cleaned up does not bring its
    /// file back). Chunks of one transfer are written in any order.
    At(u64),
}

pub fn write(path: &str, data: &[u8], append: bool, mode: Option<u32>) -> Result<(), AgentError> {
    let how = if append { How::Append } else { How::Truncate };
    write_with(path, data, mode, how)
}

/// Create `path` that must not exist yet (`already_exists`).
pub fn create(path: &str, data: &[u8], mode: Option<u32>) -> Result<(), AgentError> {
    write_with(path, data, mode, How::Exclusive)
}

/// Write `data` at `offset` of `path`, which must exist.
pub fn write_at(path: &str, data: &[u8], offset: u64, mode: Option<u32>) -> Result<(), AgentError> {
    write_with(path, data, mode, How::At(offset))
}

fn write_with(path: &str, data: &[u8], mode: Option<u32>, how: How) -> Result<(), AgentError> {
    let p = check_path(path)?;
    if let Some(parent) = p.parent() {
        mkdir_p(parent)?;
    }
    let mut o = OpenOptions::new();
    o.write(true).mode(mode.unwrap_or(0o644));
    let exclusive = how == How::Exclusive;
    match how {
        How::Exclusive => o.create_new(true),
        How::Append => o.create(true).append(true),
        How::Truncate => o.create(true).truncate(true),
        How::At(_) => &mut o,
    };
    let mut f = o.open(p).map_err(|e| {
        if exclusive && e.kind() == std::io::ErrorKind::AlreadyExists {
            AgentError::new("already_exists", format!("{path} already exists"))
        } else {
            AgentError::io(p, e)
        }
    })?;
    match how {
        How::At(offset) => std::os::unix::fs::FileExt::write_all_at(&f, data, offset),
        _ => f.write_all(data),
    }
    .map_err(|e| AgentError::io(p, e))?;
    if let Some(m) = mode {
        f.set_permissions(fs::Permissions::from_mode(m & 0o7777))
            .map_err(|e| AgentError::io(p, e))?;
    }
    Ok(())
}

/// Returns (data, total size).
pub fn read(path: &str, offset: u64, limit: u64) -> Result<(Vec<u8>, u64), AgentError> {
    let p = check_path(path)?;
    let mut f = fs::File::open(p).map_err(|e| AgentError::io(p, e))?;
    let md = f.metadata().map_err(|e| AgentError::io(p, e))?;
    if md.is_dir() {
        return Err(AgentError::invalid(format!("{path} is a directory")));
    }
    let size = md.len();
    let limit = limit.min(READ_CHUNK_LIMIT);
    // Sized once (a file that grows meanwhile still reads to `limit`).
    let mut data = Vec::with_capacity(limit.min(size.saturating_sub(offset)) as usize);
    // Read even when the size says there is nothing: /proc and /sys files report 0.
    if limit > 0 {
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| AgentError::io(p, e))?;
        f.take(limit)
            .read_to_end(&mut data)
            .map_err(|e| AgentError::io(p, e))?;
    }
    Ok((data, size))
}

fn kind_of(ft: fs::FileType) -> FileKind {
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

/// The mount id of the entry at `p` (a final symlink not followed).
fn mnt_id(p: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok(stx.stx_mnt_id)
}

fn mount_refusal(path: &str, what: &str) -> AgentError {
    let e = stasis_core::mounts::refused(path, what);
    AgentError::new(e.code.as_str(), e.message)
}

/// Refuse a remove or rename of the entry at `p` when it is the root, a
/// mount point (on another mount than its parent directory), or a
/// directory that holds a mount below it (this system's mountinfo). A
/// missing entry passes: the operation answers for it.
fn guard_mounts(path: &str, p: &Path) -> Result<(), AgentError> {
    let Some(parent) = p.parent() else {
        return Err(mount_refusal(path, "is the root"));
    };
    let Ok(md) = fs::symlink_metadata(p) else {
        return Ok(());
    };
    let here = mnt_id(p).map_err(|e| AgentError::io(p, e))?;
    let up = mnt_id(parent).map_err(|e| AgentError::io(parent, e))?;
    if here != up {
        return Err(mount_refusal(path, "is a mount point"));
    }
    if !md.is_dir() {
        return Ok(());
    }
    let info = fs::read_to_string("/proc/thread-self/mountinfo")
        .map_err(|e| AgentError::internal(format!("reading the mounts: {e}")))?;
    let points = stasis_core::mounts::mount_points(&info);
    for h in stasis_core::mounts::holders(&points) {
        if let Ok(hm) = fs::metadata(&h) {
            if (hm.dev(), hm.ino()) == (md.dev(), md.ino()) {
                return Err(mount_refusal(
                    path,
                    &format!("holds a mount point (below {h})"),
                ));
            }
        }
    }
    Ok(())
}

/// An error of a remove or rename: moving across mounts (EXDEV) or onto a
/// busy mount (EBUSY) is the `mount_point` refusal.
fn change_err(path: &str, p: &Path, e: std::io::Error) -> AgentError {
    match e.raw_os_error() {
        Some(libc::EXDEV) => mount_refusal(path, "crosses a mount point"),
        Some(libc::EBUSY) => mount_refusal(path, "is in use as a mount point"),
        _ => AgentError::io(p, e),
    }
}

/// Stat (the entry itself, a symlink not followed), remove, mkdir, rename.
pub fn op(op: FileOp) -> Result<Option<FileStat>, AgentError> {
    match op {
        FileOp::Stat { path } => {
            let p = check_path(&path)?;
            let md = fs::symlink_metadata(p).map_err(|e| AgentError::io(p, e))?;
            let kind = kind_of(md.file_type());
            let symlink_target = (kind == FileKind::Symlink)
                .then(|| fs::read_link(p).ok())
                .flatten()
                .map(|t| t.to_string_lossy().into_owned());
            let xattrs = meta_of(p);
            Ok(Some(FileStat {
                path,
                kind,
                size: md.len(),
                mode: md.mode() & 0o7777,
                mtime: md.mtime(),
                symlink_target,
                uid: Some(md.uid()),
                gid: Some(md.gid()),
                xattrs,
            }))
        }
        FileOp::Remove { path, recursive } => {
            let p = check_path(&path)?;
            guard_mounts(&path, p)?;
            let md = fs::symlink_metadata(p).map_err(|e| AgentError::io(p, e))?;
            let r = if !md.is_dir() {
                fs::remove_file(p)
            } else if recursive {
                fs::remove_dir_all(p)
            } else {
                fs::remove_dir(p)
            };
            r.map_err(|e| {
                if e.kind() == std::io::ErrorKind::DirectoryNotEmpty {
                    AgentError::new(
                        "invalid_state",
                        format!("{path} is a directory that is not empty (remove it recursively)"),
                    )
                } else {
                    change_err(&path, p, e)
                }
            })?;
            Ok(None)
        }
        FileOp::Mkdir { path, parents } => {
            let p = check_path(&path)?;
            if parents {
                mkdir_p(p)?;
            } else {
                fs::create_dir(p).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        AgentError::new("already_exists", format!("{path} already exists"))
                    } else {
                        AgentError::io(p, e)
                    }
                })?;
            }
            Ok(None)
        }
        FileOp::Rename { from, to } => {
            let (f, t) = (check_path(&from)?, check_path(&to)?);
            guard_mounts(&from, f)?;
            guard_mounts(&to, t)?;
            fs::rename(f, t).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTDIR) if fs::symlink_metadata(t).is_ok() => AgentError::new(
                    "already_exists",
                    format!(
                        "{to} exists and is not a directory: {from} is one and cannot replace it"
                    ),
                ),
                Some(libc::EISDIR) => AgentError::new(
                    "already_exists",
                    format!(
                        "{to} exists and is a directory: {from} is not one and cannot replace it"
                    ),
                ),
                Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => AgentError::new(
                    "already_exists",
                    format!("{to} is a directory that is not empty"),
                ),
                _ => change_err(&from, f, e),
            })?;
            Ok(None)
        }
        FileOp::Chown { path, uid, gid } => {
            chown(&path, uid, gid)?;
            Ok(None)
        }
        FileOp::SetMeta { path, meta } => {
            set_meta(&path, &meta)?;
            Ok(None)
        }
    }
}

/// The parent directory of `p` (opened as a path, symlinks in it followed
/// as any program would) and its last component; the root is its own
/// parent's `.`.
fn parent_and_name(p: &Path) -> Result<(fs::File, std::ffi::CString), AgentError> {
    use std::os::unix::ffi::OsStrExt;
    let (parent, name) = match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) => (parent, name),
        _ => (p, std::ffi::OsStr::new(".")),
    };
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(parent)
        .map_err(|e| AgentError::io(parent, e))?;
    let name = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| AgentError::invalid("path contains NUL"))?;
    Ok((dir, name))
}

/// The entry's metadata (its `user.e2b.*` attributes); none for a symlink
/// (not followed), a special file, or on any error.
fn meta_of(p: &Path) -> Option<std::collections::BTreeMap<String, String>> {
    use std::os::fd::AsFd;
    let (dir, name) = parent_and_name(p).ok()?;
    let fd = stasis_fsroot::xattr::open_entry(dir.as_fd(), &name).ok()??;
    stasis_fsroot::xattr::read(fd.as_fd())
}

/// Replace the metadata of the entry at `path` itself (see
/// [`FileOp::SetMeta`]): opened through its parent's descriptor with
/// `O_NOFOLLOW`, so a final symlink is refused, never followed.
fn set_meta(
    path: &str,
    meta: &std::collections::BTreeMap<String, String>,
) -> Result<(), AgentError> {
    use std::os::fd::AsFd;
    let p = check_path(path)?;
    stasis_core::exec::check_meta(meta).map_err(|e| AgentError::invalid(e.to_string()))?;
    let (dir, name) = parent_and_name(p)?;
    let fd = stasis_fsroot::xattr::open_entry(dir.as_fd(), &name)
        .map_err(|e| AgentError::io(p, e))?
        .ok_or_else(|| {
            AgentError::invalid(format!(
                "{path} carries no metadata: it is not a file or directory (or is on a kernel file system)"
            ))
        })?;
    stasis_fsroot::xattr::replace(fd.as_fd(), meta).map_err(|e| AgentError::io(p, e))
}

/// Give the entry at `path` itself to `uid`:`gid`: `fchownat` with
/// `AT_SYMLINK_NOFOLLOW` on its parent directory's descriptor, so a final
/// symlink is changed, never what it points to.
fn chown(path: &str, uid: u32, gid: u32) -> Result<(), AgentError> {
    use std::os::unix::ffi::OsStrExt;
    let p = check_path(path)?;
    if uid == u32::MAX || gid == u32::MAX {
        return Err(AgentError::invalid(format!(
            "{path}: uid and gid must be below {}",
            u32::MAX
        )));
    }
    let (parent, name) = match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) => (parent, name),
        // The root itself, `..` or `.` last: changed by its path.
        _ => (p, std::ffi::OsStr::new(".")),
    };
    let c =
        |s: &[u8]| std::ffi::CString::new(s).map_err(|_| AgentError::invalid("path contains NUL"));
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(parent)
        .map_err(|e| AgentError::io(parent, e))?;
    let name = c(name.as_bytes())?;
    use std::os::fd::AsRawFd;
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
        return Err(AgentError::io(p, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The metadata of `name` in the directory `dir` (none without a `dir`).
fn meta_in(
    dir: &Option<fs::File>,
    name: &std::ffi::OsStr,
) -> Option<std::collections::BTreeMap<String, String>> {
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(name.as_bytes()).ok()?;
    let fd = stasis_fsroot::xattr::open_entry(dir.as_ref()?.as_fd(), &name).ok()??;
    stasis_fsroot::xattr::read(fd.as_fd())
}

pub fn list(path: &str) -> Result<Vec<FileEntry>, AgentError> {
    let p = check_path(path)?;
    let rd = fs::read_dir(p).map_err(|e| AgentError::io(p, e))?;
    // The entries' metadata is read through this descriptor of the listed
    // directory (each entry opened with O_NOFOLLOW beneath it).
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(p)
        .ok();
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| AgentError::io(p, e))?;
        let Ok(md) = e.path().symlink_metadata() else {
            continue; // raced with a delete
        };
        let ft = md.file_type();
        out.push(FileEntry {
            name: e.file_name().to_string_lossy().into_owned(),
            kind: if ft.is_symlink() {
                FileKind::Symlink
            } else if ft.is_dir() {
                FileKind::Dir
            } else if ft.is_file() {
                FileKind::File
            } else {
                FileKind::Other
            },
            size: md.len(),
            mode: md.mode() & 0o7777,
            mtime: md.mtime(),
            uid: Some(md.uid()),
            gid: Some(md.gid()),
            xattrs: (ft.is_file() || ft.is_dir())
                .then(|| meta_in(&dir, &e.file_name()))
                .flatten(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: &tempfile::TempDir, rel: &str) -> String {
        t.path().join(rel).to_string_lossy().into_owned()
    }

    #[test]
    fn write_through_a_link_to_a_missing_dir() {
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(p(&t, "real"), t.path().join("alias")).unwrap();
        write(&p(&t, "alias/internal/x"), b"1", false, None).unwrap();
        assert_eq!(fs::read(t.path().join("real/internal/x")).unwrap(), b"1");
        std::os::unix::fs::symlink("rel", t.path().join("r")).unwrap();
        write(&p(&t, "r/y"), b"2", false, None).unwrap();
        assert!(t.path().join("rel/y").exists());
    }

    #[test]
    fn create_is_exclusive_and_ops_work() {
        let t = tempfile::tempdir().unwrap();
        create(&p(&t, "d/f"), b"abc", None).unwrap();
        let e = create(&p(&t, "d/f"), b"x", None).unwrap_err();
        assert_eq!(e.code, "already_exists");
        let st = op(FileOp::Stat { path: p(&t, "d/f") }).unwrap().unwrap();
        assert_eq!((st.kind, st.size), (FileKind::File, 3));
        assert_eq!(
            op(FileOp::Stat {
                path: p(&t, "nope")
            })
            .unwrap_err()
            .code,
            "not_found"
        );
        op(FileOp::Mkdir {
            path: p(&t, "a/b"),
            parents: true,
        })
        .unwrap();
        let e = op(FileOp::Mkdir {
            path: p(&t, "a"),
            parents: false,
        })
        .unwrap_err();
        assert_eq!(e.code, "already_exists");
        op(FileOp::Rename {
            from: p(&t, "d/f"),
            to: p(&t, "a/g"),
        })
        .unwrap();
        assert_eq!(fs::read(t.path().join("a/g")).unwrap(), b"abc");
        let e = op(FileOp::Remove {
            path: p(&t, "a"),
            recursive: false,
        })
        .unwrap_err();
        assert_eq!(e.code, "invalid_state");
        op(FileOp::Remove {
            path: p(&t, "a"),
            recursive: true,
        })
        .unwrap();
        assert!(!t.path().join("a").exists());
        std::os::unix::fs::symlink("/nonexistent", t.path().join("l")).unwrap();
        let st = op(FileOp::Stat { path: p(&t, "l") }).unwrap().unwrap();
        assert_eq!(st.symlink_target.as_deref(), Some("/nonexistent"));
    }

    /// Stat and listing report the owner's ids; a chown changes the entry
    /// itself, a symlink and not what it points to.
    #[test]
    fn owners_are_reported_and_changed() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write(&p(&t, "f"), b"x", false, None).unwrap();
        let md = fs::metadata(t.path().join("f")).unwrap();
        let st = op(FileOp::Stat { path: p(&t, "f") }).unwrap().unwrap();
        assert_eq!((st.uid, st.gid), (Some(md.uid()), Some(md.gid())));
        let l = list(&t.path().to_string_lossy()).unwrap();
        assert_eq!((l[0].uid, l[0].gid), (Some(md.uid()), Some(md.gid())));
        let e = op(FileOp::Chown {
            path: p(&t, "f"),
            uid: u32::MAX,
            gid: 0,
        })
        .unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        if unsafe { libc::geteuid() } != 0 {
            return; // giving files away needs root
        }
        let chown = |rel: &str, id: u32| {
            op(FileOp::Chown {
                path: p(&t, rel),
                uid: id,
                gid: id + 1,
            })
        };
        chown("f", 1000).unwrap();
        let st = op(FileOp::Stat { path: p(&t, "f") }).unwrap().unwrap();
        assert_eq!((st.uid, st.gid), (Some(1000), Some(1001)));
        mkdir_p(&t.path().join("d/e")).unwrap();
        chown("d/e", 1000).unwrap();
        assert_eq!(fs::metadata(t.path().join("d/e")).unwrap().uid(), 1000);
        assert_eq!(fs::metadata(t.path().join("d")).unwrap().uid(), 0);
        // A symlink to a file elsewhere: the link changes, its target not.
        fs::write(outside.path().join("keep"), b"k").unwrap();
        std::os::unix::fs::symlink(outside.path().join("keep"), t.path().join("l")).unwrap();
        chown("l", 2000).unwrap();
        let lmd = fs::symlink_metadata(t.path().join("l")).unwrap();
        assert_eq!((lmd.uid(), lmd.gid()), (2000, 2001));
        let kmd = fs::metadata(outside.path().join("keep")).unwrap();
        assert_eq!((kmd.uid(), kmd.gid()), (0, 0));
        let e = chown("nope", 1000).unwrap_err();
        assert_eq!(e.code, "not_found");
    }

    /// Mount points of this system: refused without being touched (as
    /// root here the kernel would refuse most with EBUSY, and a recursive
    /// remove would first empty what is mounted below).
    #[test]
    fn mount_points_are_refused() {
        let rm = |path: &str, recursive| {
            op(FileOp::Remove {
                path: path.into(),
                recursive,
            })
            .unwrap_err()
            .code
        };
        let mv = |from: &str, to: &str| {
            op(FileOp::Rename {
                from: from.into(),
                to: to.into(),
            })
            .unwrap_err()
            .code
        };
        assert_eq!(rm("/", true), "mount_point");
        assert_eq!(rm("/proc", false), "mount_point");
        assert_eq!(rm("/proc", true), "mount_point");
        let t = tempfile::tempdir().unwrap();
        fs::create_dir(t.path().join("empty")).unwrap();
        fs::write(t.path().join("f"), b"f").unwrap();
        assert_eq!(mv("/proc", &p(&t, "moved")), "mount_point");
        assert_eq!(mv(&p(&t, "empty"), "/proc"), "mount_point");
        assert_eq!(mv(&p(&t, "f"), "/proc/f"), "mount_point");
        assert!(Path::new("/proc/self").exists());
        // A directory onto a file: the destination exists (409), not 404.
        assert_eq!(mv(&p(&t, "empty"), &p(&t, "f")), "already_exists");
    }

    /// A directory holding a mount below it is refused before anything in
    /// it is removed (in a mount namespace of this test's own thread).
    #[test]
    fn a_directory_holding_a_mount_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        std::thread::spawn(move || {
            let c = |s: &Path| std::ffi::CString::new(s.to_str().unwrap()).unwrap();
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare (needs root)");
                let root = c(Path::new("/"));
                let none = std::ptr::null();
                let flags = libc::MS_REC | libc::MS_PRIVATE;
                assert_eq!(libc::mount(none, root.as_ptr(), none, flags, none as _), 0);
                let at = base.join("h/in");
                fs::create_dir_all(&at).unwrap();
                fs::write(base.join("h/sibling"), b"s").unwrap();
                let tmpfs = c(Path::new("tmpfs"));
                let target = c(&at);
                let rc = libc::mount(
                    tmpfs.as_ptr(),
                    target.as_ptr(),
                    tmpfs.as_ptr(),
                    0,
                    none as _,
                );
                assert_eq!(rc, 0);
            }
            fs::write(base.join("h/in/keep"), b"k").unwrap();
            let h = base.join("h").to_string_lossy().into_owned();
            let e = op(FileOp::Remove {
                path: h.clone(),
                recursive: true,
            })
            .unwrap_err();
            assert_eq!(e.code, "mount_point", "{}", e.message);
            let e = op(FileOp::Rename {
                from: h.clone(),
                to: format!("{h}2"),
            })
            .unwrap_err();
            assert_eq!(e.code, "mount_point", "{}", e.message);
            assert!(base.join("h/in/keep").exists());
            assert!(base.join("h/sibling").exists());
        })
        .join()
        .unwrap();
    }

    fn meta(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn stat_meta(path: &str) -> Option<std::collections::BTreeMap<String, String>> {
        op(FileOp::Stat { path: path.into() })
            .unwrap()
            .unwrap()
            .xattrs
    }

    /// Metadata set, replaced and cleared through the op, seen by stat and
    /// by the listing; an attribute a program sets shows up too.
    #[test]
    fn metadata_is_set_replaced_and_cleared() {
        let t = tempfile::tempdir().unwrap();
        let f = p(&t, "f.txt");
        write(&f, b"x", false, None).unwrap();
        assert_eq!(stat_meta(&f), None);
        let set = |m: &[(&str, &str)]| {
            op(FileOp::SetMeta {
                path: f.clone(),
                meta: meta(m),
            })
        };
        if set(&[("author", "mish")]).is_err() {
            eprintln!("no user xattrs here: skipped");
            return;
        }
        assert_eq!(stat_meta(&f), Some(meta(&[("author", "mish")])));
        set(&[("purpose", "upload"), ("tag", "b")]).unwrap();
        assert_eq!(
            stat_meta(&f),
            Some(meta(&[("purpose", "upload"), ("tag", "b")]))
        );
        let listed = list(&p(&t, "")).unwrap();
        let e = listed.iter().find(|e| e.name == "f.txt").unwrap();
        assert_eq!(e.xattrs, Some(meta(&[("purpose", "upload"), ("tag", "b")])));
        set(&[]).unwrap();
        assert_eq!(stat_meta(&f), None);
        // Set by a program, by path: read back without the prefix.
        let c = std::ffi::CString::new(f.as_str()).unwrap();
        let rc = unsafe {
            libc::setxattr(
                c.as_ptr(),
                c"user.e2b.author".as_ptr(),
                b"mish".as_ptr().cast(),
                4,
                0,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(stat_meta(&f), Some(meta(&[("author", "mish")])));
        // Bad keys are refused before anything is touched.
        let e = set(&[("bad key", "v")]).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert_eq!(stat_meta(&f), Some(meta(&[("author", "mish")])));
    }

    /// A final symlink is neither followed to its target (here outside
    /// the tree) when reading nor when setting.
    #[test]
    fn metadata_does_not_follow_a_symlink() {
        let t = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let target = p(&out, "target");
        write(&target, b"x", false, None).unwrap();
        if op(FileOp::SetMeta {
            path: target.clone(),
            meta: meta(&[("k", "outside")]),
        })
        .is_err()
        {
            eprintln!("no user xattrs here: skipped");
            return;
        }
        let link = p(&t, "link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(stat_meta(&link), None);
        let listed = list(&p(&t, "")).unwrap();
        assert_eq!(listed[0].xattrs, None);
        let e = op(FileOp::SetMeta {
            path: link.clone(),
            meta: meta(&[("k", "changed")]),
        })
        .unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        assert_eq!(stat_meta(&target), Some(meta(&[("k", "outside")])));
    }
}
