//! Starting the shim in `exec` mode, shared by execs and the supervisor's
//! sessions: its config goes in an anonymous memory file passed as fd 3,
//! and once the command's main process exits its output is drained.

use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

use stasis_core::{Error, Result};

use crate::cgroup::SandboxCgroup;

/// The fd number at which the shim finds its exec config.
const SHIM_CONFIG_FD: i32 = 3;

/// An exec's config carries its environment, which may hold tenant secrets:
/// it must never touch a disk. It goes to the shim in an anonymous memory
/// file (memfd, close-on-exec here) that only the shim inherits, as fd 3;
/// the shim reads it and closes it before anything else runs.
pub(crate) fn config_memfd(data: &[u8]) -> Result<std::os::fd::OwnedFd> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a valid NUL-terminated name; the returned fd is owned here.
    let fd = unsafe { libc::memfd_create(c"stasis-exec-config".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::backend(format!(
            "memfd_create: {}",
            std::io::Error::last_os_error()
        )));
    }
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(fd);
    f.write_all(data)?;
    Ok(f.into())
}

/// `<parent>/<id>/init`, what `/proc/<init>/cgroup` of a sandbox's PID 1
/// ends with: the shim checks it so a recycled pid can never lead an exec
/// into the wrong namespaces.
pub(crate) fn init_cgroup_marker(cg: &SandboxCgroup) -> String {
    format!("{}/init", cg.rel_path().display())
}

/// The shim in `exec` mode, its config passed as fd 3 (never a file).
pub(crate) fn shim_exec_command(
    program: &Path,
    args: &[String],
    cfg: &std::os::fd::OwnedFd,
) -> Command {
    use std::os::fd::AsRawFd;
    let mut c = Command::new(program);
    c.args(args)
        .arg("exec")
        .arg(format!("/proc/self/fd/{SHIM_CONFIG_FD}"))
        .env_clear()
        .kill_on_drop(false);
    let raw = cfg.as_raw_fd();
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
    unsafe {
        c.pre_exec(move || {
            if raw == SHIM_CONFIG_FD {
                if libc::fcntl(raw, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, SHIM_CONFIG_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// After the command's main process exited, collect the rest of its output.
/// When nothing is left in its cgroup leaf, nobody can hold the pipes' write
/// ends any more, so EOF is certain and we wait for it (however loaded the
/// machine is); when background processes remain and keep the pipes open,
/// we give them a short grace and stop reading.
pub(crate) async fn drain(cg: &SandboxCgroup, leaf: &str, tasks: Vec<tokio::task::JoinHandle<()>>) {
    let (c, l) = (cg.clone(), leaf.to_string());
    let leftovers = tokio::task::spawn_blocking(move || !c.procs(&l).is_empty())
        .await
        .unwrap_or(true);
    let grace = if leftovers {
        Duration::from_millis(150)
    } else {
        Duration::from_secs(10)
    };
    let deadline = tokio::time::Instant::now() + grace;
    for t in tasks {
        let abort = t.abort_handle();
        if tokio::time::timeout_at(deadline, t).await.is_err() {
            abort.abort();
        }
    }
}
