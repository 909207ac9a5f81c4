//! Small host helpers: unix sockets with long paths, /proc readers, files.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::net::UnixStream;

use stasis_core::{Error, Result};

/// `sun_path` holds 108 bytes; longer socket paths are reached through
/// `/proc/self/fd/<dirfd>/<name>` with the directory held open.
const SUN_PATH_MAX: usize = 107;

pub async fn connect_unix(path: &Path) -> std::io::Result<UnixStream> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return UnixStream::connect(path).await;
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default();
    let d = std::fs::File::open(dir)?;
    use std::os::fd::AsRawFd;
    let short = PathBuf::from(format!("/proc/self/fd/{}", d.as_raw_fd())).join(name);
    let s = UnixStream::connect(&short).await;
    drop(d);
    s
}

/// Run `cmd` to completion and collect its output, bounded by `limit`: a run
/// still going then is killed (the child is killed when the wait is
/// dropped) and answered with a timeout error naming `what`.
pub async fn output_bounded(
    mut cmd: tokio::process::Command,
    limit: Duration,
    what: &str,
) -> Result<std::process::Output> {
    let run = cmd.kill_on_drop(true).output();
    tokio::time::timeout(limit, run)
        .await
        .map_err(|_| {
            Error::timeout(format!(
                "{what} did not finish within {} s; killed",
                limit.as_secs()
            ))
        })?
        .map_err(|e| {
            Error::backend(format!(
                "cannot run {}: {e}",
                Path::new(cmd.as_std().get_program()).display()
            ))
        })
}

/// Connect, retrying while the socket does not exist yet or refuses.
pub async fn connect_unix_retry(path: &Path, timeout: Duration) -> Result<UnixStream> {
    let deadline = Instant::now() + timeout;
    loop {
        // Each attempt bounded too (a listener whose backlog is full).
        let attempt = tokio::time::timeout(Duration::from_secs(1), connect_unix(path))
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect did not complete in 1 s",
                ))
            });
        match attempt {
            Ok(s) => return Ok(s),
            Err(e) => {
                if Instant::now() >= deadline {
                    return Err(Error::backend(format!(
                        "cannot connect to {}: {e}",
                        path.display()
                    )));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Fields of /proc/<pid>/stat after the command name.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = s.rfind(')')?;
    Some(
        s[close + 1..]
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// The process exists and is not a zombie.
pub fn pid_alive(pid: i32) -> bool {
    match stat_fields(pid) {
        Some(f) => f.first().map(|s| s != "Z" && s != "X").unwrap_or(false),
        None => false,
    }
}

/// utime + stime of a process, in ns.
pub fn cpu_ns(pid: i32) -> u64 {
    let Some(f) = stat_fields(pid) else { return 0 };
    // After ")": state(0) ppid(1) ... utime is field 14 overall -> index 11 here.
    let ticks: u64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * (1_000_000_000 / hz)
}

/// Resident set size in bytes (VmRSS).
pub fn rss_bytes(pid: i32) -> u64 {
    status_kb(&format!("/proc/{pid}/status"), "VmRSS:") * 1024
}

/// Proportional set size in bytes (shared pages divided among their users).
pub fn pss_bytes(pid: i32) -> u64 {
    status_kb(&format!("/proc/{pid}/smaps_rollup"), "Pss:") * 1024
}

fn status_kb(file: &str, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

pub fn cwd(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

pub use stasis_jail::all_pids;

/// Hard link `src` to `dst` (replacing `dst`), falling back to a copy across
/// filesystems.
pub fn link_or_copy(src: &Path, dst: &Path) -> Result<()> {
    let _ = std::fs::remove_file(dst);
    if std::fs::hard_link(src, dst).is_ok() {
        return Ok(());
    }
    std::fs::copy(src, dst)
        .map_err(|e| Error::backend(format!("copy {} -> {}: {e}", src.display(), dst.display())))?;
    Ok(())
}

/// Move `src` to `dst`, copying across filesystems.
pub fn move_file(src: &Path, dst: &Path) -> Result<()> {
    if std::fs::rename(src, dst).is_ok() {
        return Ok(());
    }
    std::fs::copy(src, dst)
        .map_err(|e| Error::backend(format!("move {} -> {}: {e}", src.display(), dst.display())))?;
    std::fs::remove_file(src)?;
    Ok(())
}

/// The last `max` bytes of a log file, for error messages.
/// The last `max` bytes of a log that a jailed QEMU may have written or
/// replaced: opened without following a symlink (O_NOFOLLOW) and read only
/// if it is a regular file, and only its tail, so a log swapped for a link
/// to a host file or for a device never reaches an error message or hangs
/// the daemon.
pub fn log_tail(path: &Path, max: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return String::new();
    };
    let len = match f.metadata() {
        Ok(m) if m.file_type().is_file() => m.len(),
        _ => return String::new(),
    };
    let start = len.saturating_sub(max as u64);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut s = Vec::with_capacity(max.min(len as usize));
    let _ = f.take(max as u64).read_to_end(&mut s);
    String::from_utf8_lossy(&s).trim().to_string()
}

pub fn now_unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A program as given (absolute) or looked up in PATH.
pub fn which(p: &Path) -> Option<PathBuf> {
    if p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(p))
            .find(|c| c.is_file())
    })
}

/// A hard link at `dst` to the open file `f`: `linkat` of
/// `/proc/self/fd/N` with `AT_SYMLINK_FOLLOW` links the file the
/// descriptor holds (checked when opened), not whatever its name points to
/// by now.
pub fn link_open_file(f: &std::fs::File, dst: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let src = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|e| Error::internal(e.to_string()))?;
    let dst_c = std::ffi::CString::new(dst.as_os_str().as_bytes())
        .map_err(|e| Error::internal(e.to_string()))?;
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            src.as_ptr(),
            libc::AT_FDCWD,
            dst_c.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r != 0 {
        return Err(Error::backend(format!(
            "linking {}: {}",
            dst.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tails_read_only_regular_files_and_only_their_tail() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("qemu.log");
        std::fs::write(&log, format!("{}the end\n", "x".repeat(5000))).unwrap();
        assert_eq!(log_tail(&log, 8), "the end");
        assert_eq!(log_tail(&log, 7), "he end");
        assert_eq!(log_tail(&log, 100_000).len(), 5007);
        // A log replaced by a link to another file, or by a device, is not read.
        let secret = d.path().join("secret");
        std::fs::write(&secret, "host secret").unwrap();
        let link = d.path().join("console.log");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        assert_eq!(log_tail(&link, 600), "");
        let dev = d.path().join("dev.log");
        std::os::unix::fs::symlink("/dev/zero", &dev).unwrap();
        assert_eq!(log_tail(&dev, 600), "");
        assert_eq!(log_tail(Path::new("/dev/zero"), 600), "");
        assert_eq!(log_tail(&d.path().join("missing"), 600), "");
    }

    #[test]
    fn reads_own_process() {
        let me = std::process::id() as i32;
        assert!(pid_alive(me));
        assert!(rss_bytes(me) > 0);
        assert!(!cmdline(me).is_empty());
        assert!(cwd(me).is_some());
        assert!(!pid_alive(i32::MAX));
        assert_eq!(rss_bytes(i32::MAX), 0);
    }

    #[tokio::test]
    async fn long_socket_paths_connect() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let sock = deep.join("agent.sock");
        assert!(sock.as_os_str().len() > SUN_PATH_MAX);
        // bind through the same /proc trick
        let d = std::fs::File::open(&deep).unwrap();
        use std::os::fd::AsRawFd;
        let short = PathBuf::from(format!("/proc/self/fd/{}", d.as_raw_fd())).join("agent.sock");
        let l = tokio::net::UnixListener::bind(&short).unwrap();
        let c = connect_unix(&sock).await;
        assert!(c.is_ok(), "{c:?}");
        drop(l);
    }
}
