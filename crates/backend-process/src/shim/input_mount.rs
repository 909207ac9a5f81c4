//! Read-only input mounts, bound fd to fd into the new root with the new
//! mount API (never a path a sandbox could redirect).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::mount_api::{
    mount_setattr, MountAttr, MOUNT_ATTR_IDMAP, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY, MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH, OPEN_TREE_CLONE,
};

/// Bind one read-only input into the new root: `src` (the canonical host
/// path the daemon checked against its allowed roots) is opened without
/// following any symlink, the target is created and opened *inside* the
/// root (`RESOLVE_IN_ROOT`: a symlink the sandbox left in its writable layer
/// cannot point the mount, or the mkdir, at a host path), and the bind is
/// made fd to fd, read-only, nosuid, nodev from the start. Not recursive:
/// mounts below the source are not carried in. Only the (empty) mount point
/// lands in the writable layer; the content never does.
///
/// With a user namespace the bind is also idmapped through it, so host
/// owners keep their ids inside (host root's files are root's, readable as
/// before, and writes fail with EROFS, not EACCES); on a filesystem that
/// cannot be idmapped the plain bind is kept (host root's files then appear
/// as `nobody`: readable when world-readable).
pub(super) fn input_mount(
    root: &Path,
    src: &Path,
    target: &str,
    userns: Option<&OwnedFd>,
) -> Result<(), String> {
    let c = CString::new(src.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("mount source {} has NUL", src.display()))?;
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(format!(
            "open mount source {}: {}",
            src.display(),
            std::io::Error::last_os_error()
        ));
    }
    let src_fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let is_dir = File::from(src_fd.try_clone().map_err(|e| format!("dup: {e}"))?)
        .metadata()
        .map_err(|e| format!("stat {}: {e}", src.display()))?
        .is_dir();
    let r = crate::fsops::Root::open_dir(root).map_err(|e| format!("open root: {e}"))?;
    let tfd = if is_dir {
        r.mkdir_p(target)
            .map_err(|e| format!("mount target {target}: {}", e.message))?;
        r.open(target, libc::O_PATH | libc::O_DIRECTORY, 0)
    } else {
        let parent = target.rsplit_once('/').map(|(p, _)| p).unwrap_or("/");
        r.mkdir_p(parent)
            .map_err(|e| format!("mount target {target}: {}", e.message))?;
        r.open(
            target,
            libc::O_WRONLY | libc::O_CREAT | libc::O_NOCTTY,
            0o644,
        )
    }
    .map_err(|e| format!("mount target {target}: {e}"))?;
    // New mount API: clone the source as a detached mount, make it
    // read-only, nosuid, nodev while still detached, then attach it on the
    // target fd (no window in which it is writable, no path re-lookup).
    let e = |what: &str| {
        format!(
            "{what} {}: {}",
            src.display(),
            std::io::Error::last_os_error()
        )
    };
    let empty = c"";
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            src_fd.as_raw_fd(),
            empty.as_ptr(),
            (OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | libc::AT_EMPTY_PATH as u32) as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(e("open_tree"));
    }
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let setattr = |attr: MountAttr| mount_setattr(&tree, &attr);
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    let mut rc = -1;
    if let Some(ns) = userns {
        rc = setattr(MountAttr {
            attr_set: ro | MOUNT_ATTR_IDMAP,
            attr_clr: 0,
            propagation: 0,
            userns_fd: ns.as_raw_fd() as u64,
        });
    }
    if rc != 0 {
        rc = setattr(MountAttr {
            attr_set: ro,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        });
    }
    if rc != 0 {
        return Err(e("mount_setattr read-only"));
    }
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            tfd.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(format!(
            "move_mount {} onto {target}: {}",
            src.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
