//! Output collection: a tar of the manifest's output directories, read
//! through the sandbox's own root with the same rules as the file API
//! ([`crate::fsops`]): each output dir is opened with `openat2(RESOLVE_IN_ROOT
//! | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS)`, and below it every entry is
//! opened relative to its parent's fd with `O_NOFOLLOW`. Symlinks are stored
//! as links and never followed, other mounts (input mounts, /proc, /dev) are
//! not entered, and only regular files, directories and symlinks are
//! collected (FIFOs, devices and sockets are skipped). So nothing outside the
//! sandbox's writable view can end up in the archive, whatever the sandbox
//! planted in its output dirs.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use stasis_core::{Error, Result};

use crate::fsops::Root;

fn fstatat(dfd: i32, name: &CStr) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(dfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn openat(dfd: i32, name: &CStr, flags: i32) -> io::Result<OwnedFd> {
    let fd = unsafe {
        libc::openat(
            dfd,
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn header(st: &libc::stat, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(st.st_mode & 0o7777);
    h.set_mtime(st.st_mtime.max(0) as u64);
    h.set_uid(st.st_uid as u64);
    h.set_gid(st.st_gid as u64);
    h
}

struct Walk<W: io::Write> {
    tar: tar::Builder<W>,
    dev: u64,
}

impl<W: io::Write> Walk<W> {
    /// Add directory `path` (open as `dir`) and everything below it.
    fn dir(&mut self, dir: OwnedFd, path: &str, st: &libc::stat) -> io::Result<()> {
        let mut h = header(st, tar::EntryType::Directory, 0);
        self.tar
            .append_data(&mut h, format!("{path}/"), io::empty())?;
        let dfd = dir.as_raw_fd();
        // `Dir` owns the fd from here on (closed when it drops).
        let mut d = nix::dir::Dir::from_fd(dir.into_raw_fd()).map_err(io::Error::from)?;
        let mut names: Vec<CString> = Vec::new();
        for ent in d.iter() {
            let ent = ent.map_err(io::Error::from)?;
            let n = ent.file_name();
            if n.to_bytes() != b"." && n.to_bytes() != b".." {
                names.push(n.to_owned());
            }
        }
        names.sort();
        for name in names {
            let Ok(st) = fstatat(dfd, &name) else {
                continue; // vanished meanwhile
            };
            let child = format!("{path}/{}", String::from_utf8_lossy(name.to_bytes()));
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    if st.st_dev != self.dev {
                        continue; // another mount: not part of the outputs
                    }
                    let Ok(fd) = openat(dfd, &name, libc::O_RDONLY | libc::O_DIRECTORY) else {
                        continue;
                    };
                    self.dir(fd, &child, &st)?;
                }
                libc::S_IFREG => {
                    let Ok(fd) = openat(dfd, &name, libc::O_RDONLY | libc::O_NONBLOCK) else {
                        continue;
                    };
                    let f = File::from(fd);
                    let md = f.metadata()?;
                    // Same inode as the one listed, still a regular file.
                    if !md.file_type().is_file() {
                        continue;
                    }
                    let mut h = header(&st, tar::EntryType::Regular, md.len());
                    // A file growing meanwhile is cut at its size now.
                    self.tar
                        .append_data(&mut h, &child, io::Read::take(f, md.len()))?;
                }
                libc::S_IFLNK => {
                    let mut buf = vec![0u8; 4096];
                    let n = unsafe {
                        libc::readlinkat(dfd, name.as_ptr(), buf.as_mut_ptr() as *mut _, buf.len())
                    };
                    if n < 0 {
                        continue;
                    }
                    buf.truncate(n as usize);
                    let target = String::from_utf8_lossy(&buf).into_owned();
                    let mut h = header(&st, tar::EntryType::Symlink, 0);
                    self.tar.append_link(&mut h, &child, target)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Write the tar of `outputs` (absolute sandbox paths) from `root` to `out`.
/// A missing output dir is skipped. Returns the archive's size.
pub fn collect(root: &Root, outputs: &[String], out: &std::path::Path) -> Result<u64> {
    let f = File::create(out)?;
    let mut w = Walk {
        tar: tar::Builder::new(io::BufWriter::new(f)),
        dev: 0,
    };
    for o in outputs {
        let path = o.trim_end_matches('/');
        let fd = match root.open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => {
                return Err(Error::invalid(format!(
                    "output {o}: {e} (it must be a directory of the sandbox's own filesystem)"
                ))
                .with_field("outputs"))
            }
        };
        let st = {
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
                return Err(io::Error::last_os_error().into());
            }
            st
        };
        w.dev = st.st_dev;
        w.dir(fd, path.trim_start_matches('/'), &st)
            .map_err(|e| Error::backend(format!("collect output {o}: {e}")))?;
    }
    let buf = w.tar.into_inner()?;
    let f = buf.into_inner().map_err(|e| Error::from(e.into_error()))?;
    f.sync_all()?;
    Ok(f.metadata()?.len())
}
