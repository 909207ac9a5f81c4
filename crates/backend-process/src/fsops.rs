//! File operations through a sandbox's own view of its filesystem.
//!
//! The daemon opens `/proc/<init>/root` (the sandbox's pivoted root, in its
//! mount namespace) and resolves every path with `openat2(2)` and
//! `RESOLVE_IN_ROOT | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS`: `..` and
//! absolute symlinks are clamped to the sandbox root, magic links
//! (/proc/self/...) are refused, and no path can leave the overlay root mount
//! (so /proc, /dev and hidden paths are out of reach of the file API, which
//! runs with the daemon's host privileges). Only regular files are read or
//! written (FIFOs and devices are refused).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use stasis_core::{Error, ErrorCode, FileEntry, FileKind, Result};

/// Normalize a sandbox path: relative paths are relative to `workdir`; `.`
/// and `..` are resolved lexically and may not climb above `/`.
pub fn normalize(workdir: &str, path: &str) -> Result<String> {
    if path.is_empty() {
        return Err(Error::invalid("empty path").with_field("path"));
    }
    if path.contains('\0') || path.len() > 4096 {
        return Err(Error::invalid("path has NUL or is too long").with_field("path"));
    }
    let full = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{}", workdir.trim_end_matches('/'), path)
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in full.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(
                        Error::invalid(format!("path {path:?} escapes the sandbox root"))
                            .with_field("path"),
                    );
                }
            }
            c => parts.push(c),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

pub(crate) fn map_err(e: io::Error, path: &str) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOENT) => Error::not_found(format!("file {path}")),
        Some(libc::ENOTDIR) => Error::new(
            ErrorCode::NotFound,
            format!("{path}: a path component is not a directory"),
        ),
        Some(libc::EXDEV) => Error::invalid(format!(
            "{path}: crosses a mount point (/proc, /dev, ...) the file API does not reach"
        ))
        .with_field("path"),
        Some(libc::ELOOP) => {
            Error::invalid(format!("{path}: too many or forbidden symlinks")).with_field("path")
        }
        Some(libc::EISDIR) => Error::invalid(format!("{path} is a directory")).with_field("path"),
        Some(libc::ENAMETOOLONG) => {
            Error::invalid(format!("{path}: name too long")).with_field("path")
        }
        Some(libc::EAGAIN) => {
            Error::invalid(format!("{path}: unsupported file type")).with_field("path")
        }
        _ => Error::internal(format!("{path}: {e}")),
    }
}

/// A sandbox's root as the file API sees it. Paths resolve through
/// [`stasis_fsroot::openat2`] (the one owner of that primitive, shared with
/// the image crate); `Root` stays this crate's type because the file API's
/// operations (here and in `fileops`) are its inherent methods.
pub struct Root(pub(crate) OwnedFd);

impl Root {
    /// The root directory of the sandbox whose PID 1 is `pid` (host pid).
    pub fn of_pid(pid: i32) -> Result<Root> {
        let p = CString::new(format!("/proc/{pid}/root")).unwrap();
        let fd = unsafe {
            libc::open(
                p.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Error::backend(format!(
                "sandbox root gone: {}",
                io::Error::last_os_error()
            )));
        }
        Ok(Root(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// A root directory given by its host path (the shim uses it to resolve
    /// mount targets inside the sandbox's root before pivoting into it).
    pub fn open_dir(path: &std::path::Path) -> io::Result<Root> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(path)?;
        Ok(Root(f.into()))
    }

    /// Open `path` resolved inside this root (see the module doc).
    pub fn open(&self, path: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        self.openat2(path, flags, mode)
    }

    pub(crate) fn openat2(&self, path: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        // The resolution itself is the workspace's one primitive for
        // tenant-shaped trees (`stasis_fsroot`); the file API adds
        // RESOLVE_NO_XDEV so no path crosses into /proc, /dev or a mount.
        stasis_fsroot::openat2(
            self.0.as_fd(),
            std::path::Path::new(path),
            flags,
            mode,
            stasis_fsroot::Resolve::InRoot.bits() | libc::RESOLVE_NO_XDEV,
        )
    }

    pub fn mkdir_p(&self, dir: &str) -> Result<()> {
        self.mkdir_p_hops(dir, 0)
    }

    /// `mkdir -p` inside the root. A component that is a symlink to a
    /// directory not made yet (`alias -> /workspace/later`) has its target
    /// made (resolved inside the root, like every path here), as a local
    /// filesystem's `mkdir -p` through the link would; `hops` bounds chains.
    fn mkdir_p_hops(&self, dir: &str, hops: u32) -> Result<()> {
        if hops > 16 {
            return Err(map_err(io::Error::from_raw_os_error(libc::ELOOP), dir));
        }
        let mut cur = String::new();
        for comp in dir.split('/').filter(|c| !c.is_empty()) {
            let parent = if cur.is_empty() {
                "/".to_string()
            } else {
                cur.clone()
            };
            cur = format!("{cur}/{comp}");
            match self.openat2(&cur, libc::O_PATH | libc::O_DIRECTORY, 0) {
                Ok(_) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let pfd = self
                        .openat2(&parent, libc::O_PATH | libc::O_DIRECTORY, 0)
                        .map_err(|e| map_err(e, &parent))?;
                    let name = CString::new(comp).unwrap();
                    let rc = unsafe { libc::mkdirat(pfd.as_raw_fd(), name.as_ptr(), 0o755) };
                    if rc != 0 {
                        let e = io::Error::last_os_error();
                        if e.raw_os_error() != Some(libc::EEXIST) {
                            return Err(map_err(e, &cur));
                        }
                        // A dangling symlink: make what it points to.
                        if let Some(target) = read_link_at(&pfd, comp) {
                            let base = if target.starts_with('/') {
                                "/"
                            } else {
                                &parent
                            };
                            let t = normalize(base, &target).unwrap_or_else(|_| "/".into());
                            self.mkdir_p_hops(&t, hops + 1)?;
                        }
                    }
                    // Re-resolve (it may be a symlink now; openat2 keeps it inside).
                    self.openat2(&cur, libc::O_PATH | libc::O_DIRECTORY, 0)
                        .map_err(|e| map_err(e, &cur))?;
                }
                Err(e) => return Err(map_err(e, &cur)),
            }
        }
        Ok(())
    }

    pub fn write_file(&self, path: &str, data: &[u8], mode: Option<u32>) -> Result<()> {
        self.write_file_with(path, data, mode, false)
    }

    /// With `exclusive`, an existing entry (even a dangling symlink) answers
    /// `already_exists` and nothing is written.
    pub fn write_file_with(
        &self,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
        exclusive: bool,
    ) -> Result<()> {
        if path == "/" {
            return Err(Error::invalid("cannot write to /").with_field("path"));
        }
        let (parent, _) = path.rsplit_once('/').unwrap();
        self.mkdir_p(parent)?;
        let fd = self
            .openat2(
                path,
                libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_NONBLOCK
                    | libc::O_NOCTTY
                    | if exclusive { libc::O_EXCL } else { 0 },
                mode.unwrap_or(0o644) & 0o7777,
            )
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EEXIST) if exclusive => {
                    Error::new(ErrorCode::AlreadyExists, format!("{path} already exists"))
                }
                _ => map_err(e, path),
            })?;
        let f = File::from(fd);
        let md = f.metadata().map_err(|e| map_err(e, path))?;
        if !md.file_type().is_file() {
            return Err(Error::invalid(format!("{path} is not a regular file")).with_field("path"));
        }
        f.set_len(0).map_err(|e| map_err(e, path))?;
        let mut f = f;
        f.write_all(data).map_err(|e| map_err(e, path))?;
        if let Some(m) = mode {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(m & 0o7777))
                .map_err(|e| map_err(e, path))?;
        }
        Ok(())
    }

    pub fn read_file(&self, path: &str, limit: u64) -> Result<Vec<u8>> {
        let fd = self
            .openat2(path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)
            .map_err(|e| map_err(e, path))?;
        let f = File::from(fd);
        let md = f.metadata().map_err(|e| map_err(e, path))?;
        if md.is_dir() {
            return Err(Error::invalid(format!("{path} is a directory")).with_field("path"));
        }
        if !md.file_type().is_file() {
            return Err(Error::invalid(format!("{path} is not a regular file")).with_field("path"));
        }
        let too_large = || {
            Error::new(
                ErrorCode::PayloadTooLarge,
                format!("{path} is larger than the limit of {limit} bytes"),
            )
        };
        if md.len() > limit {
            return Err(too_large());
        }
        let mut buf = Vec::with_capacity(md.len() as usize);
        f.take(limit + 1)
            .read_to_end(&mut buf)
            .map_err(|e| map_err(e, path))?;
        if buf.len() as u64 > limit {
            return Err(too_large());
        }
        Ok(buf)
    }

    pub fn list(&self, path: &str) -> Result<Vec<FileEntry>> {
        let fd = self
            .openat2(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| map_err(e, path))?;
        let mut dir = nix::dir::Dir::from_fd(fd.as_raw_fd())
            .map_err(|e| Error::internal(format!("{path}: {e}")))?;
        std::mem::forget(fd); // owned by `dir` now
        let dfd = dir.as_raw_fd();
        let mut out = Vec::new();
        for ent in dir.iter() {
            let ent = ent.map_err(|e| Error::internal(format!("{path}: {e}")))?;
            let name = ent.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            let rc =
                unsafe { libc::fstatat(dfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
            if rc != 0 {
                continue; // vanished meanwhile
            }
            let kind = match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => FileKind::File,
                libc::S_IFDIR => FileKind::Dir,
                libc::S_IFLNK => FileKind::Symlink,
                _ => FileKind::Other,
            };
            out.push(FileEntry {
                name: String::from_utf8_lossy(bytes).into_owned(),
                kind,
                size: st.st_size as u64,
                mode: st.st_mode & 0o7777,
                mtime: st.st_mtime,
                // As the daemon sees them (see `Root::stat`).
                uid: Some(st.st_uid),
                gid: Some(st.st_gid),
                xattrs: matches!(kind, FileKind::File | FileKind::Dir)
                    .then(|| {
                        // SAFETY: `dfd` is `dir`'s, open for this loop.
                        let d = unsafe { std::os::fd::BorrowedFd::borrow_raw(dfd) };
                        meta_in(d, name)
                    })
                    .flatten(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

/// The text of the symlink `name` in the directory `dir`, if it is one.
pub(crate) fn read_link_at(dir: &OwnedFd, name: &str) -> Option<String> {
    let d = stasis_fsroot::Dir::from_fd(dir.try_clone().ok()?, stasis_fsroot::Resolve::InRoot);
    let t = d.read_link_at(std::ffi::OsStr::new(name)).ok()?;
    Some(t.to_string_lossy().into_owned())
}

/// The metadata (`user.e2b.*` xattrs) of the entry `name` in `dir` (a file
/// or directory opened with `O_NOFOLLOW` beneath it); none on any error.
pub(crate) fn meta_in(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> Option<std::collections::BTreeMap<String, String>> {
    let fd = stasis_fsroot::xattr::open_entry(dir, name).ok()??;
    stasis_fsroot::xattr::read(fd.as_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_paths() {
        assert_eq!(normalize("/workspace", "a/b").unwrap(), "/workspace/a/b");
        assert_eq!(normalize("/workspace", "/etc/x").unwrap(), "/etc/x");
        assert_eq!(normalize("/workspace", "../etc/x").unwrap(), "/etc/x");
        assert_eq!(normalize("/workspace", ".").unwrap(), "/workspace");
        assert!(normalize("/workspace", "../../etc/passwd").is_err());
        assert!(normalize("/workspace", "").is_err());
        assert!(normalize("/workspace", "a\0b").is_err());
    }
}
