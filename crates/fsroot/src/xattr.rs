//! File metadata as extended attributes `user.e2b.<key>` (where E2B's envd
//! keeps it, so programs in a sandbox read and set the same attributes),
//! read and replaced only through a descriptor of the entry itself: the
//! entry is opened relative to its parent directory's descriptor with
//! `O_NOFOLLOW`, so a symlink (which carries no `user.*` attributes) is
//! never followed out of the tree.
//!
//! The limits match `stasis_core::exec::XATTR_*` (that crate stays free of
//! platform dependencies, so they are repeated here).

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The attribute namespace of file metadata.
pub const PREFIX: &str = "user.e2b.";
/// At most this many metadata attributes per entry.
pub const MAX_COUNT: usize = 64;
/// At most this many bytes of names (prefix included) and values per entry.
pub const MAX_BYTES: usize = 64 * 1024;
/// The most of the whole attribute name list read (all namespaces).
const MAX_LIST: usize = 256 * 1024;

/// Kernel file systems whose files carry no `user.*` attributes and may
/// act on an open (procfs, sysfs, debugfs, tracefs, securityfs, cgroup,
/// bpf, devpts, pstore, efivarfs, configfs): their entries are not opened.
const KERNEL_FS: [i64; 12] = [
    0x9fa0,      // proc
    0x6265_6572, // sysfs
    0x6462_6720, // debugfs
    0x7472_6163, // tracefs
    0x7363_6673, // securityfs
    0x0027_e0eb, // cgroup
    0x6367_7270, // cgroup2
    0xcafe_4a11, // bpf
    0x1cd1,      // devpts
    0x6165_676c, // pstore
    0xde5e_81e4, // efivarfs
    0x6265_6570, // configfs
];

/// Whether the directory `dir` is on one of [`KERNEL_FS`].
fn on_kernel_fs(dir: BorrowedFd<'_>) -> bool {
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(dir.as_raw_fd(), &mut sf) } != 0 {
        return false;
    }
    KERNEL_FS.contains(&(sf.f_type as i64))
}

/// Open the entry `name` of `dir` to read or set its attributes: a regular
/// file or a directory, never following a final symlink. `None` for a
/// symlink or anything else (devices, FIFOs, sockets are not opened), and
/// for entries of kernel file systems such as /proc and /sys.
pub fn open_entry(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<OwnedFd>> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if !matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR) || on_kernel_fs(dir) {
        return Ok(None);
    }
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ELOOP) => Ok(None), // became a symlink meanwhile
            _ => Err(e),
        };
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = crate::fstat(std::os::fd::AsFd::as_fd(&fd))?;
    if !matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR) {
        return Ok(None); // replaced by something else meanwhile
    }
    Ok(Some(fd))
}

/// Errors meaning "this entry has no attributes to speak of".
fn none_here(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTSUP) | Some(libc::ENODATA) | Some(libc::EPERM) | Some(libc::EACCES)
    )
}

/// The names of the entry's `user.e2b.*` attributes (whole names), at most
/// [`MAX_COUNT`] of them.
fn names(fd: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    let size = unsafe { libc::flistxattr(fd.as_raw_fd(), std::ptr::null_mut(), 0) };
    if size < 0 {
        return Err(io::Error::last_os_error());
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    let mut buf = vec![0u8; (size as usize).min(MAX_LIST)];
    let n = unsafe { libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error()); // ERANGE: grew past the cap
    }
    buf.truncate(n as usize);
    Ok(buf
        .split(|b| *b == 0)
        .filter(|n| n.starts_with(PREFIX.as_bytes()) && n.len() > PREFIX.len())
        .take(MAX_COUNT)
        .filter_map(|n| CString::new(n).ok())
        .collect())
}

/// The entry's metadata: its `user.e2b.*` attributes, the prefix stripped,
/// values as UTF-8 (lossily); `None` when there are none or the file
/// system keeps none. Past [`MAX_COUNT`] entries or [`MAX_BYTES`] the rest
/// is left out.
pub fn read(fd: BorrowedFd<'_>) -> Option<BTreeMap<String, String>> {
    let names = names(fd).ok()?;
    let mut out = BTreeMap::new();
    let mut left = MAX_BYTES;
    let mut buf = Vec::new();
    for name in names {
        let nb = name.as_bytes().len();
        if nb > left {
            break;
        }
        left -= nb;
        buf.resize(left, 0);
        let n = unsafe {
            libc::fgetxattr(
                fd.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::ERANGE) => break, // over the budget
                _ => continue,               // removed meanwhile
            }
        }
        let n = n as usize;
        left -= n;
        let key = String::from_utf8_lossy(&name.as_bytes()[PREFIX.len()..]).into_owned();
        out.insert(key, String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    (!out.is_empty()).then_some(out)
}

/// Make the entry's `user.e2b.*` attributes exactly `meta` (keys without
/// the prefix): each is set, and the ones not in `meta` are removed. With
/// an empty `meta` on a file system without attributes, nothing to do.
pub fn replace(fd: BorrowedFd<'_>, meta: &BTreeMap<String, String>) -> io::Result<()> {
    if meta.len() > MAX_COUNT
        || meta
            .iter()
            .map(|(k, v)| PREFIX.len() + k.len() + v.len())
            .sum::<usize>()
            > MAX_BYTES
    {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let old = match names(fd) {
        Ok(n) => n,
        Err(e) if meta.is_empty() && none_here(&e) => return Ok(()),
        Err(e) if none_here(&e) => Vec::new(),
        Err(e) => return Err(e),
    };
    for (k, v) in meta {
        let name = CString::new(format!("{PREFIX}{k}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let rc = unsafe {
            libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for name in old {
        let key = String::from_utf8_lossy(&name.as_bytes()[PREFIX.len()..]);
        if meta.contains_key(key.as_ref()) {
            continue;
        }
        let rc = unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENODATA) {
                return Err(e);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn dir(t: &tempfile::TempDir) -> OwnedFd {
        std::fs::File::open(t.path()).unwrap().into()
    }

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Set, replace (a key dropped is removed), clear; other namespaces
    /// and other `user.` attributes are left alone.
    #[test]
    fn set_replace_clear() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), "x").unwrap();
        let d = dir(&t);
        let fd = open_entry(d.as_fd(), c"f").unwrap().unwrap();
        if replace(fd.as_fd(), &m(&[("a", "1")])).is_err() {
            eprintln!("no user xattrs on this file system: skipped");
            return;
        }
        assert_eq!(read(fd.as_fd()), Some(m(&[("a", "1")])));
        let other = c"user.other";
        assert_eq!(
            unsafe { libc::fsetxattr(fd.as_raw_fd(), other.as_ptr(), c"o".as_ptr().cast(), 1, 0) },
            0
        );
        replace(fd.as_fd(), &m(&[("b", "2"), ("c", "three")])).unwrap();
        assert_eq!(read(fd.as_fd()), Some(m(&[("b", "2"), ("c", "three")])));
        replace(fd.as_fd(), &BTreeMap::new()).unwrap();
        assert_eq!(read(fd.as_fd()), None);
        let mut b = [0u8; 4];
        let n =
            unsafe { libc::fgetxattr(fd.as_raw_fd(), other.as_ptr(), b.as_mut_ptr().cast(), 4) };
        assert_eq!(n, 1, "other attributes stay");
        // A directory carries metadata too.
        std::fs::create_dir(t.path().join("sub")).unwrap();
        let sub = open_entry(d.as_fd(), c"sub").unwrap().unwrap();
        replace(sub.as_fd(), &m(&[("k", "v")])).unwrap();
        assert_eq!(read(sub.as_fd()), Some(m(&[("k", "v")])));
        // Too much is refused before anything is set.
        let big = m(&[("k", &"x".repeat(MAX_BYTES))]);
        assert!(replace(fd.as_fd(), &big).is_err());
        assert_eq!(read(fd.as_fd()), None);
    }

    /// A symlink is not opened, so its target (here outside the tree) is
    /// neither read nor changed; nor is a FIFO opened.
    #[test]
    fn symlinks_and_specials_are_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("target"), "x").unwrap();
        std::os::unix::fs::symlink(out.path().join("target"), t.path().join("l")).unwrap();
        let d = dir(&t);
        assert!(open_entry(d.as_fd(), c"l").unwrap().is_none());
        let fifo = CString::new(t.path().join("p").as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(open_entry(d.as_fd(), c"p").unwrap().is_none());
        assert!(open_entry(d.as_fd(), c"missing").is_err());
    }

    /// Entries of /proc are not opened (nor is their metadata read).
    #[test]
    fn kernel_file_systems_are_left_alone() {
        let proc: OwnedFd = std::fs::File::open("/proc/self").unwrap().into();
        assert!(open_entry(proc.as_fd(), c"status").unwrap().is_none());
        let t = tempfile::tempdir().unwrap();
        assert!(!on_kernel_fs(dir(&t).as_fd()));
    }
}
