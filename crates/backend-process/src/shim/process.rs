//! Process plumbing both shim modes share: joining cgroup leaves, a
//! close-on-exec pipe, and pointing stdio at /dev/null.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

pub(super) fn join_cgroups(files: &[PathBuf]) -> Result<(), String> {
    let pid = std::process::id().to_string();
    for f in files {
        fs::write(f, &pid).map_err(|e| format!("join cgroup {}: {e}", f.display()))?;
    }
    if let Ok(cgs) = crate::cgroup::Cgroups::detect() {
        cgs.escape_service(files);
    }
    Ok(())
}

pub(super) fn pipe() -> Result<(File, File), String> {
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    Ok((File::from(r), File::from(w)))
}

/// Point stdin, stdout and stderr at /dev/null.
pub(super) fn stdio_to_null() {
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            unsafe {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
    }
}
