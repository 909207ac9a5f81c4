//! Persistent processes (`python3 -i -u`, `sh`, servers): the agent keeps
//! their stdin pipe and a capped buffer of their combined stdout+stderr,
//! addressed by byte offsets that only grow, with the ranges that came from
//! stderr ([`OutputBuffer`]: stdout and stderr are two pipes, so their
//! relative order is the order the agent read them in). All of it lives in guest memory,
//! so it survives a pause/resume of the VM unchanged. A session started with
//! a PTY runs on a pseudo-terminal ([`crate::pty`]) as its controlling
//! terminal: input goes to the master, output is the master's.

use crate::exec::{command, scrub_env};
use crate::reaper::{self, lock, Exit, ExitSlot};
use crate::AgentError;
use stasis_core::session_output::OutputBuffer;
use stasis_core::{PtySize, SessionInfo, SessionOutput, SessionSpec, Stream};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Output kept per session; older bytes are dropped (reads then start later).
pub const SESSION_BUFFER: usize = 8 * 1024 * 1024;
/// Largest window one SessionRead returns.
pub const READ_LIMIT: usize = 4 * 1024 * 1024;
/// Longest a SessionRead may wait.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

struct Output {
    buf: OutputBuffer,
    /// Output pipes (or the terminal) not at EOF yet.
    open: u8,
    exit: Option<Exit>,
}

impl Output {
    fn end(&self) -> u64 {
        self.buf.end()
    }
}

pub struct Session {
    id: String,
    argv: Vec<String>,
    started_at_ms: i64,
    pid: i32,
    stdin: Mutex<Option<Box<dyn Write + Send>>>,
    /// The terminal's master and current size (sessions with a PTY only).
    pty: Mutex<Option<(OwnedFd, PtySize)>>,
    out: Mutex<Output>,
    cv: Condvar,
    slot: Arc<ExitSlot>,
}

impl Session {
    fn info(&self) -> SessionInfo {
        let o = lock(&self.out);
        SessionInfo {
            id: self.id.clone(),
            argv: self.argv.clone(),
            running: o.exit.is_none(),
            exit_code: o.exit.and_then(exit_code),
            started_at_ms: self.started_at_ms,
            output_end: o.end(),
            pty: lock(&self.pty).as_ref().map(|(_, size)| *size),
        }
    }
}

/// Exit status as reported to the host: the code, or 128+signal like a shell.
fn exit_code(e: Exit) -> Option<i32> {
    Some(match e {
        Exit::Code(c) => c,
        Exit::Signal(s) => 128 + s,
    })
}

#[derive(Default)]
pub struct Sessions {
    map: Mutex<BTreeMap<String, Arc<Session>>>,
    counter: AtomicU64,
}

impl Sessions {
    pub fn start(&self, spec: SessionSpec) -> Result<SessionInfo, AgentError> {
        let SessionSpec {
            argv,
            mut env,
            cwd,
            pty,
            user,
        } = spec;
        if let Some(size) = pty {
            if let Err(e) = stasis_core::exec::check_pty_size(size) {
                scrub_env(env);
                return Err(AgentError::invalid(e.message));
            }
            env.entry("TERM".into())
                .or_insert_with(|| crate::pty::TERM.into());
        }
        let built = command(&argv, &env, cwd.as_deref(), user.as_deref());
        scrub_env(env);
        let mut cmd = built?;
        let dup = |fd: &OwnedFd| {
            fd.try_clone()
                .map_err(|e| AgentError::internal(format!("dup: {e}")))
        };
        let (readers, master) = match pty {
            Some(size) => {
                let (master, slave) = crate::pty::open(size)
                    .map_err(|e| AgentError::internal(format!("open a terminal: {e}")))?;
                cmd.stdin(Stdio::from(dup(&slave)?))
                    .stdout(Stdio::from(dup(&slave)?))
                    .stderr(Stdio::from(slave));
                crate::pty::make_controlling(&mut cmd);
                (vec![(Stream::Stdout, dup(&master)?)], Some((master, size)))
            }
            None => {
                reset_interrupts(&mut cmd);
                let (out_rd, out_wr) = pipe()?;
                let (err_rd, err_wr) = pipe()?;
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::from(out_wr))
                    .stderr(Stdio::from(err_wr));
                (
                    vec![(Stream::Stdout, out_rd), (Stream::Stderr, err_rd)],
                    None,
                )
            }
        };
        let (mut child, slot) = reaper::spawn(&mut cmd)
            .map_err(|e| AgentError::internal(format!("spawn {}: {e}", argv[0])))?;
        // Drop our copies of the write end or slave (held by `cmd`) so EOF
        // can happen.
        drop(cmd);
        let stdin: Option<Box<dyn Write + Send>> = match &master {
            Some((m, _)) => Some(Box::new(File::from(dup(m)?))),
            None => child
                .stdin
                .take()
                .map(|w| Box::new(w) as Box<dyn Write + Send>),
        };
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("s{n}-{}", crate::random_hex(3));
        let sess = Arc::new(Session {
            id: id.clone(),
            argv,
            started_at_ms: stasis_core::now_ms(),
            pid: child.id() as i32,
            stdin: Mutex::new(stdin),
            pty: Mutex::new(master),
            out: Mutex::new(Output {
                buf: OutputBuffer::new(),
                open: readers.len() as u8,
                exit: None,
            }),
            cv: Condvar::new(),
            slot,
        });
        let s = sess.clone();
        std::thread::Builder::new()
            .name(format!("{id}-out"))
            .spawn(move || pump(s, readers))
            .map_err(|e| AgentError::internal(format!("thread: {e}")))?;
        let s = sess.clone();
        std::thread::Builder::new()
            .name(format!("{id}-wait"))
            .spawn(move || {
                let e = s.slot.wait(None);
                lock(&s.out).exit = e;
                s.cv.notify_all();
            })
            .map_err(|e| AgentError::internal(format!("thread: {e}")))?;
        let info = sess.info();
        lock(&self.map).insert(id, sess);
        Ok(info)
    }

    fn get(&self, id: &str) -> Result<Arc<Session>, AgentError> {
        lock(&self.map)
            .get(id)
            .cloned()
            .ok_or_else(|| AgentError::not_found(format!("no session {id}")))
    }

    pub fn write(&self, id: &str, data: &[u8]) -> Result<(), AgentError> {
        let s = self.get(id)?;
        let mut g = lock(&s.stdin);
        let Some(w) = g.as_mut() else {
            return Err(AgentError::new(
                "invalid_state",
                format!("session {id} stdin is closed"),
            ));
        };
        if let Err(e) = w.write_all(data).and_then(|_| w.flush()) {
            *g = None;
            return Err(AgentError::new(
                "invalid_state",
                format!("session {id} stdin: {e}"),
            ));
        }
        Ok(())
    }

    /// Close the input of a session without a terminal: its command reads
    /// end of file. Closing twice, or after the command ended, is a no-op.
    pub fn close_input(&self, id: &str) -> Result<(), AgentError> {
        let s = self.get(id)?;
        if lock(&s.pty).is_some() {
            return Err(AgentError::new(
                "invalid_state",
                format!("session {id} has a terminal: its input cannot be closed (send ^D)"),
            ));
        }
        lock(&s.stdin).take();
        Ok(())
    }

    /// Set the terminal size of a session with a PTY (its foreground
    /// process group gets SIGWINCH).
    pub fn resize(&self, id: &str, size: PtySize) -> Result<(), AgentError> {
        stasis_core::exec::check_pty_size(size).map_err(|e| AgentError::invalid(e.message))?;
        let s = self.get(id)?;
        let mut g = lock(&s.pty);
        let Some((master, cur)) = g.as_mut() else {
            return Err(AgentError::new(
                "invalid_state",
                format!("session {id} has no terminal"),
            ));
        };
        crate::pty::resize(master, size)
            .map_err(|e| AgentError::new("invalid_state", format!("session {id}: resize: {e}")))?;
        *cur = size;
        Ok(())
    }

    pub fn read(&self, id: &str, offset: u64, wait_ms: u64) -> Result<SessionOutput, AgentError> {
        let s = self.get(id)?;
        let deadline = Instant::now() + Duration::from_millis(wait_ms).min(MAX_WAIT);
        let mut g = lock(&s.out);
        loop {
            let finished = g.open == 0 && g.exit.is_some();
            if g.end() > offset || finished {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            g =
                s.cv.wait_timeout(g, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
        }
        Ok(g.buf.read(
            offset,
            READ_LIMIT,
            g.exit.is_none(),
            g.exit.and_then(exit_code),
        ))
    }

    pub fn list(&self) -> Vec<SessionInfo> {
        let all: Vec<Arc<Session>> = lock(&self.map).values().cloned().collect();
        let mut v: Vec<SessionInfo> = all.iter().map(|s| s.info()).collect();
        v.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        v
    }

    /// Kill the session's process tree (`signal` None or 9), or send
    /// `signal` to its process group (the session leader's: a ^C to a
    /// command without a terminal). The session stays listed and readable
    /// (output, exit status) after it ended, as on the process backend.
    pub fn kill(&self, id: &str, signal: Option<i32>) -> Result<SessionInfo, AgentError> {
        let s = self.get(id)?;
        let sig = signal.unwrap_or(libc::SIGKILL);
        stasis_core::SessionSignal::from_number(sig).map_err(|e| AgentError::invalid(e.message))?;
        if sig != libc::SIGKILL {
            if s.slot.get().is_none() {
                // SAFETY: kill(2) on the group of a session leader we spawned
                // (setsid in `command`), and on the leader itself.
                unsafe {
                    libc::kill(-s.pid, sig);
                    libc::kill(s.pid, sig);
                }
            }
            return Ok(s.info());
        }
        // The input is closed after the kill, not before: a shell reading
        // it would see end of file and exit 0 before the SIGKILL lands.
        if s.slot.get().is_none() {
            reaper::kill_tree(s.pid);
            s.slot.wait(Some(Duration::from_secs(5)));
        }
        *lock(&s.stdin) = None;
        // Let the waiter thread record the exit.
        let deadline = Instant::now() + Duration::from_secs(1);
        while lock(&s.out).exit.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(s.info())
    }
}

/// Copy a session's output pipes into its buffer until each is at EOF, in
/// one thread: whenever several are readable at once, they are read in the
/// order given (stdout before stderr). A program writes its output and then
/// its next prompt or diagnostic (`print` then the REPL's `>>> `), so both
/// pending at one wake-up were written in that order; two readers racing
/// each other would interleave them at random.
fn pump(s: Arc<Session>, readers: Vec<(Stream, OwnedFd)>) {
    use std::os::fd::AsRawFd;
    let mut files: Vec<(Stream, File, bool)> = readers
        .into_iter()
        .map(|(stream, fd)| (stream, File::from(fd), true))
        .collect();
    let mut buf = vec![0u8; 64 * 1024];
    while files.iter().any(|f| f.2) {
        let mut fds: Vec<libc::pollfd> = files
            .iter()
            .map(|(_, f, open)| libc::pollfd {
                // A closed one is left out (negative fds are ignored).
                fd: if *open { f.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        for (i, pfd) in fds.iter().enumerate() {
            if pfd.revents == 0 || !files[i].2 {
                continue;
            }
            let (stream, f, open) = &mut files[i];
            match f.read(&mut buf) {
                Ok(0) => *open = false,
                Ok(n) => lock(&s.out).buf.push(*stream, &buf[..n], SESSION_BUFFER),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => *open = false,
            }
            if !*open {
                lock(&s.out).open -= 1;
            }
            s.cv.notify_all();
        }
    }
    // A poll failure leaves the rest unread: they count as closed.
    let left = files.iter().filter(|f| f.2).count() as u8;
    if left > 0 {
        lock(&s.out).open -= left;
        s.cv.notify_all();
    }
}

/// Let SIGINT and SIGQUIT act on a session without a terminal (the agent
/// may have been started with them ignored, which a child inherits), so an
/// interrupt sent through the API reaches the command.
fn reset_interrupts(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only signal(2), async-signal-safe, runs in the forked child.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> Result<(OwnedFd, OwnedFd), AgentError> {
    let mut fds = [0i32; 2];
    // SAFETY: valid 2-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(AgentError::internal(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fresh descriptors owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
