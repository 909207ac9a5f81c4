//! Starting `stasis serve` as a child process on a data dir and waiting
//! until it serves: shared by `stasis demo`/`bench` (a temporary daemon) and
//! the integration tests' harness (a daemon they can kill and restart).

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `exe serve` on `data_dir`, listening on a free loopback port, with the
/// insecure dev key, writing its address to `ready` once serving; stdin
/// closed, stdout and stderr into `log`. Callers add their own flags.
pub fn serve_command(
    exe: &Path,
    data_dir: &Path,
    ready: &Path,
    log: File,
) -> std::io::Result<Command> {
    serve_command_keyed(exe, data_dir, ready, log, None)
}

/// [`serve_command`] with the master keys of `key_file` instead of the
/// insecure dev key when given.
pub fn serve_command_keyed(
    exe: &Path,
    data_dir: &Path,
    ready: &Path,
    log: File,
    key_file: Option<&Path>,
) -> std::io::Result<Command> {
    let mut cmd = Command::new(exe);
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--listen")
        .arg("127.0.0.1:0");
    match key_file {
        Some(f) => cmd.arg("--master-key-file").arg(f),
        None => cmd.arg("--insecure-dev-key"),
    };
    // A temporary daemon's data dir goes with it: nothing to drain at its
    // stop (a later `--drain-on-stop-secs` overrides this).
    cmd.args(["--drain-on-stop-secs", "0"]);
    cmd.arg("--ready-file")
        .arg(ready)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    Ok(cmd)
}

/// Why a started daemon never became ready.
#[derive(Debug)]
pub enum NotReady {
    /// The daemon exited first.
    Exited(ExitStatus),
    /// No ready file within the timeout (the child is left running).
    TimedOut,
    /// Polling the child failed.
    Io(std::io::Error),
}

/// Wait until `child` writes its address to `ready` (returned trimmed),
/// polling every 50 ms for at most `timeout`.
pub async fn wait_ready(
    child: &mut Child,
    ready: &Path,
    timeout: Duration,
) -> Result<String, NotReady> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(addr) = std::fs::read_to_string(ready) {
            return Ok(addr.trim().to_string());
        }
        if let Some(status) = child.try_wait().map_err(NotReady::Io)? {
            return Err(NotReady::Exited(status));
        }
        if Instant::now() > deadline {
            return Err(NotReady::TimedOut);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
