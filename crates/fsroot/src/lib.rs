//! Trees whose shape a tenant controls — a sandbox's root as the file API
//! sees it, build contexts, layers being assembled, image roots, archives
//! being unpacked — are touched only through descriptors resolved beneath
//! their root. This crate is the one owner of that primitive.
//!
//! A [`Dir`] is an open directory plus a resolution rule ([`Resolve`]): a
//! path of several components goes through `openat2(2)` with
//! `RESOLVE_NO_MAGICLINKS` and one of `RESOLVE_IN_ROOT` ("the path as seen
//! inside the tree": `..` and absolute symlinks clamped at its root),
//! `RESOLVE_BENEATH` (a symlink or `..` that would leave is an error) or
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (no symlink followed at all, for
//! a tree being assembled). Everything that changes a tree acts on one name
//! in an already-opened directory (`mkdirat`, `symlinkat`, `linkat`,
//! `unlinkat`, `renameat`, `fchownat(AT_SYMLINK_NOFOLLOW)`, `openat` with
//! `O_NOFOLLOW`), so no step of it follows a link the tenant planted.
//!
//! Why not `cap-std`: it offers only the "beneath" rule and refuses absolute
//! symlinks, while the file API and image lookups need the "in root" rule (a
//! sandbox's `/usr/bin -> /bin` must resolve the way the sandbox sees it);
//! and what is needed here is a thin layer over a dozen `*at` syscalls that
//! `libc` already binds, without a new dependency tree.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};

/// How a path of several components is resolved beneath a [`Dir`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// As seen inside the tree: `..` and absolute symlinks are clamped at
    /// its root (`RESOLVE_IN_ROOT`).
    InRoot,
    /// Symlinks followed only while they stay beneath the root; one that
    /// leaves (absolute, or `..` above it) is `EXDEV` (`RESOLVE_BENEATH`).
    Beneath,
    /// No symlink followed anywhere in the path: `ELOOP`
    /// (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`). For a tree being assembled,
    /// where a symlink can only be something an earlier entry planted.
    NoSymlinks,
}

impl Resolve {
    /// The `openat2` `resolve` bits of this rule (magic links always refused).
    pub fn bits(self) -> u64 {
        libc::RESOLVE_NO_MAGICLINKS
            | match self {
                Resolve::InRoot => libc::RESOLVE_IN_ROOT,
                Resolve::Beneath => libc::RESOLVE_BENEATH,
                Resolve::NoSymlinks => libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
            }
    }
}

/// `openat2(dir, path, flags, mode, resolve)`, `O_CLOEXEC` added; a lookup
/// raced by a concurrent rename (`EAGAIN`) is retried a few times.
pub fn openat2(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: open_how is plain old data; zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
        mode as u64
    } else {
        0
    };
    how.resolve = resolve;
    let mut tries = 0;
    loop {
        // SAFETY: valid fd, NUL-terminated path, and an open_how of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel returned a new descriptor we now own.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        let e = io::Error::last_os_error();
        tries += 1;
        if e.raw_os_error() != Some(libc::EAGAIN) || tries > 8 {
            return Err(e);
        }
    }
}

/// A name or path as a C string (`EINVAL` on an interior NUL).
pub fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A single name in a directory: not empty, no `/`, not `.` or `..`.
fn name_c(name: &OsStr) -> io::Result<CString> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    cstr(name)
}

/// `fstat` of a descriptor.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: stat is plain old data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and a stat buffer.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// `fchmod` of a descriptor (permission bits and setid/sticky only).
pub fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), (mode & 0o7777) as libc::mode_t) })
}

/// `fchown` of a descriptor.
pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: valid fd.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })
}

/// Whether this process may set owners (it runs as root).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The file-type bits of a mode.
pub fn kind(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

/// An open directory of a tenant-controlled tree and the rule by which
/// paths below it are resolved.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    resolve: Resolve,
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Dir {
    /// The root of a tree, given by the daemon's own path to it (a store or
    /// temp directory it chose; the tenant shapes only what is below).
    pub fn open(root: &Path, resolve: Resolve) -> io::Result<Dir> {
        let c = cstr(root.as_os_str())?;
        // SAFETY: NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor we own.
        Ok(Dir::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }, resolve))
    }

    /// A directory descriptor (opened `O_RDONLY | O_DIRECTORY`).
    pub fn from_fd(fd: OwnedFd, resolve: Resolve) -> Dir {
        Dir { fd, resolve }
    }

    pub fn resolve(&self) -> Resolve {
        self.resolve
    }

    /// The same directory under another resolution rule.
    pub fn with_resolve(&self, resolve: Resolve) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            resolve,
        })
    }

    /// Open `rel` (relative; "" is this directory) by this rule.
    pub fn open_path(&self, rel: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        openat2(self.fd.as_fd(), rel, flags, mode, self.resolve.bits())
    }

    /// The directory `rel` by this rule, keeping the rule.
    pub fn open_dir(&self, rel: &Path) -> io::Result<Dir> {
        let fd = self.open_path(rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        Ok(Dir::from_fd(fd, self.resolve))
    }

    /// The parent directory of `rel` (by this rule) and its last name, which
    /// is not looked up. `EINVAL` when `rel` has no last name (`""`, `..`).
    pub fn split(&self, rel: &Path) -> io::Result<(Dir, OsString)> {
        let Some(Component::Normal(name)) = rel.components().next_back() else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        Ok((self.open_dir(parent)?, name.to_os_string()))
    }

    /// `mkdir -p rel` (each directory made with `mode`, umask applied),
    /// resolved by this rule from the root at every step; returns the last
    /// directory. `..` in `rel` is refused.
    pub fn create_dir_all(&self, rel: &Path, mode: u32) -> io::Result<Dir> {
        let mut cur = std::path::PathBuf::new();
        let mut dir = self.open_dir(Path::new(""))?;
        for c in rel.components() {
            let name = match c {
                Component::Normal(n) => n,
                Component::CurDir | Component::RootDir => continue,
                _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
            };
            cur.push(name);
            dir = match self.open_dir(&cur) {
                Ok(d) => d,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    match dir.mkdir_at(name, mode) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                        Err(e) => return Err(e),
                    }
                    self.open_dir(&cur)?
                }
                Err(e) => return Err(e),
            };
        }
        Ok(dir)
    }

    /// `lstat` of `rel` (its last component not followed; "" is this dir).
    pub fn lstat(&self, rel: &Path) -> io::Result<libc::stat> {
        match self.split(rel) {
            Ok((d, name)) => d.lstat_at(&name),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => fstat(self.fd.as_fd()),
            Err(e) => Err(e),
        }
    }

    /// `fstat` of this directory.
    pub fn stat_self(&self) -> io::Result<libc::stat> {
        fstat(self.fd.as_fd())
    }

    // One name in this directory; nothing below is ever followed.

    pub fn lstat_at(&self, name: &OsStr) -> io::Result<libc::stat> {
        let c = name_c(name)?;
        // SAFETY: stat is plain old data, filled by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, NUL-terminated name, a stat buffer.
        check(unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })?;
        Ok(st)
    }

    /// Whether `name` exists (a dangling symlink does).
    pub fn exists_at(&self, name: &OsStr) -> io::Result<bool> {
        match self.lstat_at(name) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn read_link_at(&self, name: &OsStr) -> io::Result<OsString> {
        let c = name_c(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid fd, name and a buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(OsString::from_vec(buf))
    }

    pub fn symlink_at(&self, target: &OsStr, name: &OsStr) -> io::Result<()> {
        let (t, c) = (cstr(target)?, name_c(name)?);
        // SAFETY: valid fd and NUL-terminated strings.
        check(unsafe { libc::symlinkat(t.as_ptr(), self.fd.as_raw_fd(), c.as_ptr()) })
    }

    pub fn mkdir_at(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        let c = name_c(name)?;
        // SAFETY: valid fd and name.
        check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) })
    }

    /// A FIFO; device nodes are never made here.
    pub fn mkfifo_at(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        let c = name_c(name)?;
        let mode = libc::S_IFIFO | (mode & 0o777) as libc::mode_t;
        // SAFETY: valid fd and name; S_IFIFO needs no device number.
        check(unsafe { libc::mknodat(self.fd.as_raw_fd(), c.as_ptr(), mode, 0) })
    }

    /// A hard link `to/to_name` of `name` here (a symlink `name` is linked
    /// itself, not followed).
    pub fn link_at(&self, name: &OsStr, to: &Dir, to_name: &OsStr) -> io::Result<()> {
        let (a, b) = (name_c(name)?, name_c(to_name)?);
        // SAFETY: valid fds and names; flags 0 does not follow symlinks.
        check(unsafe {
            libc::linkat(
                self.fd.as_raw_fd(),
                a.as_ptr(),
                to.fd.as_raw_fd(),
                b.as_ptr(),
                0,
            )
        })
    }

    pub fn rename_at(&self, name: &OsStr, to: &Dir, to_name: &OsStr) -> io::Result<()> {
        let (a, b) = (name_c(name)?, name_c(to_name)?);
        // SAFETY: valid fds and names.
        check(unsafe {
            libc::renameat(
                self.fd.as_raw_fd(),
                a.as_ptr(),
                to.fd.as_raw_fd(),
                b.as_ptr(),
            )
        })
    }

    /// Remove the non-directory `name` (a symlink itself, never its target).
    pub fn unlink_at(&self, name: &OsStr) -> io::Result<()> {
        let c = name_c(name)?;
        // SAFETY: valid fd and name.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) })
    }

    /// Remove `name` whatever it is, a directory with everything below it
    /// (through descriptors, never following a symlink); missing is fine.
    pub fn remove_all_at(&self, name: &OsStr) -> io::Result<()> {
        let st = match self.lstat_at(name) {
            Ok(st) => st,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(e) => return Err(e),
        };
        if kind(&st) != libc::S_IFDIR {
            return self.unlink_at(name);
        }
        let sub = self.sub(name)?;
        for n in sub.entries()? {
            sub.remove_all_at(&n)?;
        }
        let c = name_c(name)?;
        // SAFETY: valid fd and name.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) })
    }

    /// Owner of `name` itself (a symlink's own owner).
    pub fn chown_at(&self, name: &OsStr, uid: u32, gid: u32) -> io::Result<()> {
        let c = name_c(name)?;
        // SAFETY: valid fd and name.
        check(unsafe {
            libc::fchownat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// Access and modification time of `name` itself, in whole seconds.
    pub fn set_mtime_at(&self, name: &OsStr, secs: i64) -> io::Result<()> {
        let c = name_c(name)?;
        let t = libc::timespec {
            tv_sec: secs as libc::time_t,
            tv_nsec: 0,
        };
        let times = [t, t];
        // SAFETY: valid fd, name, and two timespecs.
        check(unsafe {
            libc::utimensat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// `openat(name)` with `O_NOFOLLOW`: a symlink `name` is `ELOOP`.
    pub fn open_at(&self, name: &OsStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        let c = name_c(name)?;
        // SAFETY: valid fd and name.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// The subdirectory `name` (a symlink is `ELOOP`), with this rule.
    pub fn sub(&self, name: &OsStr) -> io::Result<Dir> {
        let fd = self.open_at(name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        Ok(Dir::from_fd(fd, self.resolve))
    }

    /// The names in this directory (without `.` and `..`), sorted.
    pub fn entries(&self) -> io::Result<Vec<OsString>> {
        // A description of its own, so reading moves no shared offset.
        let fd = openat2(
            self.fd.as_fd(),
            Path::new("."),
            libc::O_RDONLY | libc::O_DIRECTORY,
            0,
            libc::RESOLVE_BENEATH,
        )?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: raw is an open directory descriptor; fdopendir takes it over.
        let dir = unsafe { libc::fdopendir(raw) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: still ours when fdopendir failed.
            unsafe { libc::close(raw) };
            return Err(e);
        }
        let mut out = Vec::new();
        let result = loop {
            // SAFETY: errno is thread-local; readdir reports errors through it.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: dir is a valid DIR*.
            let ent = unsafe { libc::readdir64(dir) };
            if ent.is_null() {
                let e = io::Error::last_os_error();
                break if e.raw_os_error().unwrap_or(0) == 0 {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            // SAFETY: d_name is NUL-terminated within the entry.
            let n = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
            if n != b"." && n != b".." {
                out.push(OsString::from_vec(n.to_vec()));
            }
        };
        // SAFETY: dir is valid and closed once (it closes the descriptor).
        unsafe { libc::closedir(dir) };
        result?;
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

pub mod xattr;
