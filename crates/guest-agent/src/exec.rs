//! Running commands: PATH lookup, environment, process group/tree kill on
//! timeout, output capture with a limit, or streaming.

use crate::reaper::{self, Exit};
use crate::AgentError;
use stasis_core::{ExecRequest, ExecResult, Stream};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Captured bytes per stream when not streaming (both fit in one frame as base64).
pub const CAPTURE_LIMIT: usize = 4 * 1024 * 1024;
/// After the command exits, how long to keep reading output that background
/// children may still be writing to the inherited pipes.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);
const READ_CHUNK: usize = 64 * 1024;

pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment every command starts from (the request's env is laid over it).
pub fn base_env() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("PATH".into(), DEFAULT_PATH.into());
    env.insert("HOME".into(), "/root".into());
    env.insert("USER".into(), "root".into());
    env.insert("LOGNAME".into(), "root".into());
    env.insert("SHELL".into(), "/bin/sh".into());
    env.insert("LANG".into(), "C.UTF-8".into());
    env.insert("TERM".into(), "dumb".into());
    env
}

pub fn default_cwd() -> &'static str {
    if Path::new("/root").is_dir() {
        "/root"
    } else {
        "/"
    }
}

/// Overwrite secrets before their memory is freed (best effort).
pub fn scrub_env(env: BTreeMap<String, String>) {
    for (k, v) in env {
        for s in [k, v] {
            let mut b = s.into_bytes();
            b.fill(0);
            std::hint::black_box(&b);
        }
    }
}

/// Find argv[0] like execvp does, in the PATH the command will get.
pub fn resolve(program: &str, path_var: &str, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = cwd.join(program);
        return p.exists().then_some(p);
    }
    path_var
        .split(':')
        .map(|d| if d.is_empty() { "." } else { d })
        .map(|d| cwd.join(d).join(program))
        .find(|p| is_exec(p))
}

/// Builds the Command for an exec or a session: own session and process group,
/// clean environment, cwd checked. Returns the command and the merged env
/// (to be scrubbed by the caller once spawned).
pub fn command(
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
    user: Option<&str>,
) -> Result<Command, AgentError> {
    stasis_core::exec::check_argv(argv).map_err(|e| AgentError::invalid(e.message))?;
    // Resolved in the guest's own /etc/passwd and /etc/group.
    let ident = match user {
        Some(u) => {
            Some(stasis_core::user::resolve_in(Path::new("/"), u).map_err(AgentError::invalid)?)
        }
        None => None,
    };
    let program = &argv[0];
    let cwd = PathBuf::from(cwd.unwrap_or_else(|| default_cwd()));
    if !cwd.is_dir() {
        return Err(AgentError::not_found(format!(
            "working directory {} does not exist",
            cwd.display()
        )));
    }
    let mut merged = base_env();
    if let Some(id) = &ident {
        merged.insert("HOME".into(), id.home.clone());
        merged.insert("USER".into(), id.name.clone());
        merged.insert("LOGNAME".into(), id.name.clone());
    }
    for (k, v) in env {
        merged.insert(k.clone(), v.clone());
    }
    let path_var = merged.get("PATH").cloned().unwrap_or_default();
    let resolved = resolve(program, &path_var, &cwd)
        .ok_or_else(|| AgentError::new("not_found", format!("{program}: command not found")))?;
    let mut cmd = Command::new(resolved);
    cmd.arg0(program)
        .args(&argv[1..])
        .env_clear()
        .envs(&merged)
        .current_dir(&cwd);
    scrub_env(merged);
    let switch = ident.map(|id| (id.uid, id.gid, id.groups));
    // SAFETY: only async-signal-safe calls (setsid, open, write, close,
    // setgroups, setgid, setuid) run in the forked child before exec; the
    // group list was built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The agent protects itself from the OOM killer; its children must not
            // inherit that.
            let fd = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr() as *const _, 1);
                libc::close(fd);
            }
            // The sandbox's pids cap (when configured).
            crate::boundary::join_sandbox_cgroup_in_child();
            // Last, as root could still do the above: become the user.
            if let Some((uid, gid, groups)) = &switch {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// Receives output chunks of a streaming exec.
pub type Emit<'a> = &'a mut dyn FnMut(Stream, &[u8]);

/// Run to completion. `emit` receives output chunks when streaming.
pub fn run(req: ExecRequest, mut emit: Option<Emit<'_>>) -> Result<ExecResult, AgentError> {
    let started = Instant::now();
    let ExecRequest {
        argv,
        env,
        cwd,
        timeout_ms,
        stdin,
        user,
    } = req;
    let built = command(&argv, &env, cwd.as_deref(), user.as_deref());
    scrub_env(env);
    let mut cmd = match built {
        Ok(c) => c,
        Err(e) if e.code == "not_found" && e.message.ends_with("command not found") => {
            // Like a shell: exit status 127 and a message on stderr.
            let msg = format!("stasis-agent: {}\n", e.message).into_bytes();
            if let Some(f) = emit.as_mut() {
                f(Stream::Stderr, &msg);
            }
            return Ok(ExecResult {
                exit_code: Some(127),
                signal: None,
                stdout: Vec::new(),
                stderr: if emit.is_some() { Vec::new() } else { msg },
                timed_out: false,
                truncated: false,
                duration_ms: started.elapsed().as_millis() as u64,
            });
        }
        Err(e) => return Err(e),
    };
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let (mut child, slot) = reaper::spawn(&mut cmd).map_err(|e| {
        AgentError::new(
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                "invalid_argument"
            } else {
                "internal"
            },
            format!("spawn {}: {e}", argv[0]),
        )
    })?;
    drop(cmd);
    let pid = child.id() as i32;
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let mut pipes: [Option<OwnedFd>; 2] = [
        child.stdout.take().map(OwnedFd::from),
        child.stderr.take().map(OwnedFd::from),
    ];
    let deadline = (timeout_ms > 0).then(|| started + Duration::from_millis(timeout_ms));
    let mut bufs: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut truncated = false;
    let mut timed_out = false;
    let mut drain_until: Option<Instant> = None;
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let exited = slot.get().is_some();
        if exited && drain_until.is_none() {
            drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
        }
        if exited && pipes.iter().all(Option::is_none) {
            break;
        }
        let now = Instant::now();
        if let Some(d) = drain_until {
            if now >= d {
                break;
            }
        }
        if !timed_out {
            if let Some(d) = deadline {
                if now >= d {
                    timed_out = true;
                    reaper::kill_tree(pid);
                    // Killed: give it a moment to die, then collect what's left.
                    slot.wait(Some(Duration::from_secs(5)));
                    continue;
                }
            }
        }
        let mut wait_until = drain_until;
        if !timed_out {
            if let Some(d) = deadline {
                wait_until = Some(wait_until.map_or(d, |w| w.min(d)));
            }
        }
        let timeout = wait_until
            .map(|w| {
                w.saturating_duration_since(now)
                    .as_millis()
                    .min(i32::MAX as u128) as i32
                    + 1
            })
            .unwrap_or(-1);
        let mut fds = [
            libc::pollfd {
                fd: pipes[0].as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pipes[1].as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if exited { -1 } else { slot.event_fd() },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: valid array of pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout) };
        if n <= 0 {
            continue;
        }
        for (i, stream) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
            if fds[i].revents == 0 {
                continue;
            }
            let got = match pipes[i].as_ref() {
                Some(r) => read_fd(r.as_raw_fd(), &mut chunk),
                None => continue,
            };
            match got {
                Ok(0) | Err(_) => pipes[i] = None, // EOF: close our end
                Ok(n) => {
                    if let Some(f) = emit.as_mut() {
                        f(stream, &chunk[..n]);
                    } else {
                        let b = &mut bufs[i];
                        let room = CAPTURE_LIMIT.saturating_sub(b.len());
                        if n > room {
                            truncated = true;
                        }
                        b.extend_from_slice(&chunk[..n.min(room)]);
                    }
                }
            }
        }
    }
    drop(pipes);
    let exit = slot
        .wait(Some(Duration::from_secs(5)))
        .unwrap_or(Exit::Signal(libc::SIGKILL));
    let [stdout, stderr] = bufs;
    Ok(ExecResult {
        exit_code: if timed_out { None } else { exit.code() },
        signal: exit.signal(),
        stdout,
        stderr,
        timed_out,
        truncated,
        duration_ms: started.elapsed().as_millis() as u64,
    })
}

fn read_fd(fd: i32, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        // SAFETY: reading into a valid buffer of the given length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut _, buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
