//! The new mount API's flags, `struct mount_attr` and `mount_setattr(2)`,
//! shared by the shim's input mounts and the user namespace's idmapped
//! layers.

use std::os::fd::{AsRawFd, OwnedFd};

// The new mount API's flags and `struct mount_attr` (linux/mount.h; the
// libc crate has the syscall numbers but not these).
pub(crate) const OPEN_TREE_CLONE: u32 = 1;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(crate) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
pub(crate) const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
pub(crate) const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

#[repr(C)]
pub(crate) struct MountAttr {
    pub(crate) attr_set: u64,
    pub(crate) attr_clr: u64,
    pub(crate) propagation: u64,
    pub(crate) userns_fd: u64,
}

/// mount_setattr(2) on a detached mount tree (`open_tree` with
/// OPEN_TREE_CLONE); 0 or -1 with errno set.
pub(crate) fn mount_setattr(tree: &OwnedFd, attr: &MountAttr) -> libc::c_long {
    let empty = c"";
    // SAFETY: a valid fd, an empty NUL-terminated path with AT_EMPTY_PATH,
    // and a pointer to a live `mount_attr` of the size passed.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    }
}
