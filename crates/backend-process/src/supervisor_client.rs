//! The daemon's side of a sandbox supervisor (see [`crate::supervisor`]):
//! start one, reattach to one after a daemon restart, send it requests,
//! watch and end it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use stasis_agent_proto::{asynch, Body, Frame, Reply, Request, PROTOCOL_VERSION};
use stasis_core::{Error, ErrorCode, Result};

use crate::supervisor::{socket_via_fd, SupervisorConfig, SOCKET_NAME};

/// Longest a supervisor may take to answer, beyond a read's own wait (a
/// session kill waits up to 10 s for the leaf to empty).
const ANSWER_GRACE: Duration = Duration::from_secs(30);

/// A running supervisor, pinned by a pidfd (a recycled pid is never signalled).
#[derive(Clone)]
pub(crate) struct SupervisorHandle {
    pub pid: i32,
    pidfd: Arc<OwnedFd>,
    /// The sandbox's `run/` directory, holding the socket.
    run_dir: PathBuf,
}

/// Whether the process behind a pidfd has exited (the pidfd polls readable).
pub(crate) fn exited(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid fd without waiting.
    unsafe { libc::poll(&mut p, 1, 0) != 0 }
}

fn reply_error(code: &str, message: &str) -> Error {
    let code: ErrorCode = serde_json::from_value(serde_json::Value::String(code.to_string()))
        .unwrap_or(ErrorCode::BackendError);
    Error::new(code, message.to_string())
}

fn gone(e: impl std::fmt::Display) -> Error {
    Error::backend(format!(
        "the sandbox's supervisor is gone ({e}): its sessions ended; pause and resume the sandbox to restart it from its files, or destroy it"
    ))
}

impl SupervisorHandle {
    pub fn alive(&self) -> bool {
        !exited(&self.pidfd)
    }

    /// One request, one reply, on a fresh connection.
    pub async fn call(&self, req: Request, wait: Duration) -> Result<Reply> {
        if !self.alive() {
            return Err(gone("process exited"));
        }
        let exchange = async {
            let (_dir, path) = socket_via_fd(&self.run_dir).map_err(gone)?;
            let mut conn = UnixStream::connect(&path).await.map_err(gone)?;
            let frame = Frame {
                id: 1,
                body: Body::Request(req),
            };
            asynch::write_frame(&mut conn, &frame).await.map_err(gone)?;
            let f = asynch::read_frame(&mut conn).await.map_err(gone)?;
            match f.body {
                Body::Reply(Reply::Error { code, message }) => Err(reply_error(&code, &message)),
                Body::Reply(r) => Ok(r),
                other => Err(Error::backend(format!(
                    "supervisor answered with {other:?}"
                ))),
            }
        };
        match tokio::time::timeout(wait + ANSWER_GRACE, exchange).await {
            Ok(r) => r,
            Err(_) => Err(Error::backend(format!(
                "the sandbox's supervisor (pid {}) did not answer within {} s",
                self.pid,
                (wait + ANSWER_GRACE).as_secs()
            ))),
        }
    }

    /// SIGKILL the supervisor and wait (bounded) until it is gone.
    pub async fn kill(&self) {
        // SAFETY: pidfd_send_signal on our own pidfd.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Start a supervisor (which starts the sandbox's PID 1); returns it and
/// the host pid of PID 1.
pub(crate) async fn spawn(
    program: &Path,
    args: &[String],
    cfg: &SupervisorConfig,
    timeout: Duration,
) -> std::result::Result<(SupervisorHandle, i32), String> {
    let cfg_json = serde_json::to_vec(cfg).map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .arg("supervise")
        .arg("-")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| format!("spawn shim {}: {e}", program.display()))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let _ = stdin.write_all(&cfg_json).await;
    drop(stdin);
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    // The init's own timeout runs inside; allow a little beyond it.
    let line = tokio::time::timeout(timeout + Duration::from_secs(5), lines.next_line()).await;
    // The direct child only forks the supervisor and exits.
    let _ = child.wait().await;
    let l = match line {
        Ok(Ok(Some(l))) => l,
        Ok(Ok(None)) => return Err("sandbox supervisor exited without a report".into()),
        Ok(Err(e)) => return Err(format!("read supervisor report: {e}")),
        Err(_) => return Err("sandbox supervisor did not come up in time".into()),
    };
    let Some(rest) = l.strip_prefix("ok ") else {
        return Err(l.strip_prefix("error ").unwrap_or(&l).to_string());
    };
    let mut it = rest.split_whitespace().map(|v| v.parse::<i32>());
    let (Some(Ok(init)), Some(Ok(sup))) = (it.next(), it.next()) else {
        return Err(format!("bad supervisor report {l:?}"));
    };
    let pidfd =
        crate::sys::pidfd_open(sup).map_err(|e| format!("supervisor {sup} vanished: {e}"))?;
    Ok((
        SupervisorHandle {
            pid: sup,
            pidfd: Arc::new(pidfd),
            run_dir: cfg.run_dir.clone(),
        },
        init,
    ))
}

/// Reattach to the supervisor of a sandbox after a daemon restart: connect
/// to its socket, learn its pid from the socket's peer credentials and the
/// init's pid from its `Hello`.
pub(crate) async fn attach(run_dir: &Path) -> Result<(SupervisorHandle, i32)> {
    let socket = run_dir.join(SOCKET_NAME);
    let (_dir, path) = socket_via_fd(run_dir).map_err(gone)?;
    let mut conn = tokio::time::timeout(Duration::from_secs(5), UnixStream::connect(&path))
        .await
        .map_err(|_| gone("connect timed out"))?
        .map_err(gone)?;
    let cred = conn.peer_cred().map_err(gone)?;
    let pid = cred
        .pid()
        .ok_or_else(|| gone("socket peer without a pid"))?;
    if cred.uid() != 0 {
        return Err(Error::backend(format!(
            "{} is not served by a root process",
            socket.display()
        )));
    }
    let pidfd = crate::sys::pidfd_open(pid).map_err(gone)?;
    let frame = Frame {
        id: 1,
        body: Body::Request(Request::Hello),
    };
    let hello = async {
        asynch::write_frame(&mut conn, &frame).await?;
        asynch::read_frame(&mut conn).await
    };
    let f = tokio::time::timeout(ANSWER_GRACE, hello)
        .await
        .map_err(|_| gone("no answer to hello"))?
        .map_err(gone)?;
    let init = match f.body {
        Body::Reply(Reply::Hello {
            protocol, boot_id, ..
        }) if protocol == PROTOCOL_VERSION => boot_id
            .parse::<i32>()
            .map_err(|_| gone(format!("bad init pid {boot_id:?}")))?,
        other => return Err(gone(format!("unexpected hello answer {other:?}"))),
    };
    Ok((
        SupervisorHandle {
            pid,
            pidfd: Arc::new(pidfd),
            run_dir: run_dir.to_path_buf(),
        },
        init,
    ))
}
