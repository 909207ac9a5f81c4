//! `TempDaemon`: a `stasis serve` child of this executable on a temporary
//! data dir, for `stasis demo` and `stasis bench`; stopped when dropped.

use std::path::PathBuf;
use std::time::Duration;

use stasis_cli::daemon_proc::{serve_command, wait_ready, NotReady};
use stasis_core::{Error, Result};

use crate::client::Client;

/// Start `stasis serve` from this executable on a temporary data dir and
/// wait until it serves. The child is killed when the guard drops.
pub struct TempDaemon {
    pub child: std::process::Child,
    pub client: Client,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl TempDaemon {
    pub async fn start(extra: &[&str], data_dir: Option<PathBuf>) -> Result<TempDaemon> {
        let (tmp, dir) = match data_dir {
            Some(d) => (None, d),
            None => {
                let t = tempfile::Builder::new().prefix("stasis-").tempdir()?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let exe = std::env::current_exe()?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        let mut cmd = serve_command(&exe, &dir, &ready, log)?;
        cmd.args(extra);
        let mut child = cmd.spawn()?;
        match wait_ready(&mut child, &ready, Duration::from_secs(120)).await {
            Ok(addr) => {
                let token = std::fs::read_to_string(dir.join("token")).ok();
                let client = Client::new(&format!("http://{addr}")).with_token(token);
                Ok(TempDaemon {
                    child,
                    client,
                    data_dir: dir,
                    _tmp: tmp,
                })
            }
            Err(NotReady::Exited(status)) => {
                let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                Err(Error::internal(format!(
                    "daemon exited ({status}): {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )))
            }
            Err(NotReady::TimedOut) => {
                let _ = child.kill();
                Err(Error::timeout("daemon did not start within 120 s"))
            }
            Err(NotReady::Io(e)) => Err(e.into()),
        }
    }
}

impl Drop for TempDaemon {
    fn drop(&mut self) {
        // SIGTERM first so the daemon exits cleanly; then make sure.
        let _ = nix_kill(self.child.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut exited = false;
        while !exited && std::time::Instant::now() < deadline {
            exited = matches!(self.child.try_wait(), Ok(Some(_)));
            if !exited {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if self._tmp.is_some() {
            destroy_owned(&self.data_dir);
        }
    }
}

/// A temporary data dir goes with its daemon, and no later daemon will
/// reconcile the process sandboxes it left (a demo stopped half-way): they
/// go now, found by the daemon id in that data dir (the daemon's own
/// cgroup group), and only they.
pub fn destroy_owned(data_dir: &std::path::Path) {
    let Ok(id) = std::fs::read_to_string(data_dir.join("daemon-id")) else {
        return;
    };
    let id = id.trim();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return;
    }
    let cfg = stasis_backend_process::ProcessConfig {
        daemon_id: Some(id.to_string()),
        state_dir: Some(data_dir.join("sandboxes")),
        ..Default::default()
    };
    stasis_backend_process::ProcessBackend::new(cfg).destroy_owned();
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    // SAFETY: kill(2) with a pid we spawned and a valid signal number.
    let r = unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
