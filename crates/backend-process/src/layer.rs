//! The writable layer as a tar file (`fs.tar`), overlayfs-aware.
//!
//! The upper dir of an overlay holds, besides plain files: whiteouts
//! (character devices 0:0 that hide a lower file: a deleted file), opaque
//! directories (xattr `trusted.overlay.opaque=y`: a directory that was deleted
//! and re-created, hiding all lower content), symlinks, hard links and modes.
//! All of that is written and restored here: devices as tar char/block
//! entries with their numbers, xattrs as PAX `SCHILY.xattr.*` records. We
//! mount with `redirect_dir=off,metacopy=off`, so no other overlay xattr
//! carries meaning (origin/impure are only hints and are not kept).
//!
//! Extraction is our own (the `tar` crate does not create device nodes) and
//! refuses absolute paths, `..`, and paths through symlinks.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

fn keep_xattr(name: &[u8]) -> bool {
    name == b"trusted.overlay.opaque"
        || name.starts_with(b"user.")
        || name == b"security.capability"
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn list_xattrs(p: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = cpath(p)?;
    let mut out = Vec::new();
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    if n <= 0 {
        return Ok(out);
    }
    let mut names = vec![0u8; n as usize];
    let n = unsafe {
        libc::llistxattr(
            c.as_ptr(),
            names.as_mut_ptr() as *mut libc::c_char,
            names.len(),
        )
    };
    if n < 0 {
        return Ok(out);
    }
    names.truncate(n as usize);
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        if !keep_xattr(name) {
            continue;
        }
        let cname = CString::new(name).unwrap();
        let sz = unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), std::ptr::null_mut(), 0) };
        if sz < 0 {
            continue;
        }
        let mut val = vec![0u8; sz as usize];
        let sz = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cname.as_ptr(),
                val.as_mut_ptr() as *mut libc::c_void,
                val.len(),
            )
        };
        if sz < 0 {
            continue;
        }
        val.truncate(sz as usize);
        out.push((name.to_vec(), val));
    }
    Ok(out)
}

/// Write the tree under `dir` to `out` as a tar file; returns its size.
pub fn write_tar(dir: &Path, out: &Path) -> io::Result<u64> {
    let f = File::create(out)?;
    let mut b = tar::Builder::new(BufWriter::with_capacity(1 << 20, f));
    b.mode(tar::HeaderMode::Complete);
    b.follow_symlinks(false);
    let mut links: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let abs = dir.join(&rel);
        let mut entries: Vec<_> = fs::read_dir(&abs)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let rel_p = rel.join(e.file_name());
            let abs_p = abs.join(e.file_name());
            let md = fs::symlink_metadata(&abs_p)?;
            let ft = md.file_type();
            let xattrs = list_xattrs(&abs_p)?;
            if !xattrs.is_empty() {
                let recs: Vec<(String, Vec<u8>)> = xattrs
                    .iter()
                    .map(|(k, v)| {
                        (
                            format!("SCHILY.xattr.{}", String::from_utf8_lossy(k)),
                            v.clone(),
                        )
                    })
                    .collect();
                b.append_pax_extensions(recs.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
            }
            let mut h = tar::Header::new_gnu();
            h.set_metadata_in_mode(&md, tar::HeaderMode::Complete);
            use std::os::unix::fs::FileTypeExt;
            if ft.is_dir() {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, &rel_p, io::empty())?;
                stack.push(rel_p);
            } else if ft.is_symlink() {
                let target = fs::read_link(&abs_p)?;
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, &rel_p, &target)?;
            } else if ft.is_file() {
                let key = (md.dev(), md.ino());
                if md.nlink() > 1 {
                    if let Some(first) = links.get(&key) {
                        h.set_entry_type(tar::EntryType::Link);
                        h.set_size(0);
                        b.append_link(&mut h, &rel_p, first)?;
                        continue;
                    }
                    links.insert(key, rel_p.clone());
                }
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(md.len());
                let f = File::open(&abs_p)?;
                b.append_data(&mut h, &rel_p, f.take(md.len()))?;
            } else if ft.is_char_device() || ft.is_block_device() {
                h.set_entry_type(if ft.is_char_device() {
                    tar::EntryType::Char
                } else {
                    tar::EntryType::Block
                });
                let rdev = md.rdev();
                h.set_device_major(libc::major(rdev))?;
                h.set_device_minor(libc::minor(rdev))?;
                h.set_size(0);
                b.append_data(&mut h, &rel_p, io::empty())?;
            } else if ft.is_fifo() {
                h.set_entry_type(tar::EntryType::Fifo);
                h.set_size(0);
                b.append_data(&mut h, &rel_p, io::empty())?;
            }
            // sockets are not kept
        }
    }
    let w = b.into_inner()?;
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    Ok(f.metadata()?.len())
}

fn safe_rel(p: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unsafe path in layer tar: {}", p.display()),
                ))
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "empty path in layer tar",
        ));
    }
    Ok(out)
}

/// Every ancestor of `rel` under `dest` must be a real directory (no symlink).
fn check_parents(dest: &Path, rel: &Path) -> io::Result<()> {
    let mut cur = dest.to_path_buf();
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            cur.push(c);
            let md = fs::symlink_metadata(&cur)?;
            if !md.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("layer tar path through non-directory {}", cur.display()),
                ));
            }
        }
    }
    Ok(())
}

fn remove_existing(p: &Path) {
    if let Ok(md) = fs::symlink_metadata(p) {
        if md.is_dir() {
            let _ = fs::remove_dir_all(p);
        } else {
            let _ = fs::remove_file(p);
        }
    }
}

/// Extract a tar written by [`write_tar`] into `dest` (which must exist).
pub fn extract_tar(tar_path: &Path, dest: &Path) -> io::Result<()> {
    let f = File::open(tar_path)?;
    let mut ar = tar::Archive::new(io::BufReader::with_capacity(1 << 20, f));
    let mut dir_times: Vec<(PathBuf, i64)> = Vec::new();
    for entry in ar.entries()? {
        let mut entry = entry?;
        let rel = safe_rel(&entry.path()?)?;
        check_parents(dest, &rel)?;
        let target = dest.join(&rel);
        let h = entry.header().clone();
        let mode = h.mode()? & 0o7777;
        let uid = h.uid()? as u32;
        let gid = h.gid()? as u32;
        let mtime = h.mtime()? as i64;
        let mut xattrs = Vec::new();
        if let Some(exts) = entry.pax_extensions()? {
            for ext in exts {
                let ext = ext?;
                if let Some(name) = ext.key_bytes().strip_prefix(b"SCHILY.xattr.") {
                    xattrs.push((name.to_vec(), ext.value_bytes().to_vec()));
                }
            }
        }
        let ct = cpath(&target)?;
        let kind = h.entry_type();
        match kind {
            tar::EntryType::Directory => {
                if !fs::symlink_metadata(&target)
                    .map(|m| m.is_dir())
                    .unwrap_or(false)
                {
                    remove_existing(&target);
                    fs::create_dir(&target)?;
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                remove_existing(&target);
                let mut out = File::options().write(true).create_new(true).open(&target)?;
                io::copy(&mut entry, &mut out)?;
            }
            tar::EntryType::Symlink => {
                remove_existing(&target);
                let link = entry.link_name()?.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "symlink without target")
                })?;
                std::os::unix::fs::symlink(&link, &target)?;
            }
            tar::EntryType::Link => {
                remove_existing(&target);
                let link = entry.link_name()?.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "link without target")
                })?;
                let src = dest.join(safe_rel(&link)?);
                check_parents(dest, &safe_rel(&link)?)?;
                fs::hard_link(&src, &target)?;
            }
            tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
                remove_existing(&target);
                let (ty, dev) = match kind {
                    tar::EntryType::Char => (
                        libc::S_IFCHR,
                        libc::makedev(
                            h.device_major()?.unwrap_or(0),
                            h.device_minor()?.unwrap_or(0),
                        ),
                    ),
                    tar::EntryType::Block => (
                        libc::S_IFBLK,
                        libc::makedev(
                            h.device_major()?.unwrap_or(0),
                            h.device_minor()?.unwrap_or(0),
                        ),
                    ),
                    _ => (libc::S_IFIFO, 0),
                };
                if unsafe { libc::mknod(ct.as_ptr(), ty | mode, dev) } != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            _ => continue,
        }
        unsafe {
            libc::lchown(ct.as_ptr(), uid, gid);
        }
        if kind != tar::EntryType::Symlink {
            fs::set_permissions(&target, fs::Permissions::from_mode(mode))?;
        }
        for (k, v) in xattrs {
            let ck = CString::new(k).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            let rc = unsafe {
                libc::lsetxattr(
                    ct.as_ptr(),
                    ck.as_ptr(),
                    v.as_ptr() as *const libc::c_void,
                    v.len(),
                    0,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if kind == tar::EntryType::Directory {
            dir_times.push((target, mtime));
        } else {
            set_mtime(&ct, mtime);
        }
    }
    // Directory mtimes last (creating entries inside changes them).
    for (p, t) in dir_times.into_iter().rev() {
        if let Ok(c) = cpath(&p) {
            set_mtime(&c, t);
        }
    }
    Ok(())
}

fn set_mtime(c: &CString, t: i64) {
    let ts = [
        libc::timespec {
            tv_sec: t,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: t,
            tv_nsec: 0,
        },
    ];
    unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_whiteouts_opaque_links_modes() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::create_dir_all(src.join("d/e")).unwrap();
        fs::write(src.join("d/e/f"), b"hello").unwrap();
        fs::set_permissions(src.join("d/e/f"), fs::Permissions::from_mode(0o751)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("abs")).unwrap();
        fs::hard_link(src.join("d/e/f"), src.join("hl")).unwrap();
        let wh = cpath(&src.join("gone")).unwrap();
        assert_eq!(unsafe { libc::mknod(wh.as_ptr(), libc::S_IFCHR, 0) }, 0);
        let op = cpath(&src.join("d")).unwrap();
        let k = CString::new("trusted.overlay.opaque").unwrap();
        assert_eq!(
            unsafe { libc::lsetxattr(op.as_ptr(), k.as_ptr(), b"y".as_ptr() as *const _, 1, 0) },
            0
        );
        let tarp = t.path().join("fs.tar");
        write_tar(&src, &tarp).unwrap();
        let dst = t.path().join("dst");
        fs::create_dir(&dst).unwrap();
        extract_tar(&tarp, &dst).unwrap();
        assert_eq!(fs::read(dst.join("d/e/f")).unwrap(), b"hello");
        assert_eq!(
            fs::metadata(dst.join("d/e/f"))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777,
            0o751
        );
        assert_eq!(
            fs::read_link(dst.join("abs")).unwrap(),
            Path::new("/etc/passwd")
        );
        assert_eq!(
            fs::metadata(dst.join("hl")).unwrap().ino(),
            fs::metadata(dst.join("d/e/f")).unwrap().ino()
        );
        use std::os::unix::fs::FileTypeExt;
        let md = fs::symlink_metadata(dst.join("gone")).unwrap();
        assert!(md.file_type().is_char_device());
        assert_eq!(md.rdev(), 0);
        let x = list_xattrs(&dst.join("d")).unwrap();
        assert_eq!(x, vec![(b"trusted.overlay.opaque".to_vec(), b"y".to_vec())]);
    }
}
