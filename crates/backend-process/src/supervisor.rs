//! The sandbox supervisor: one small process per process-backend sandbox
//! that owns the sandbox's long-lived processes and their pipes, so that they
//! outlive the daemon (the pattern of containerd-shim and conmon).
//!
//! Started by the daemon as `<shim> supervise -` (config on stdin), it forks
//! once more and the parent exits at once, so the supervisor is nobody's
//! child but init's; it calls `setsid` (no terminal or process-group signal
//! of the daemon reaches it) and moves itself into its own cgroup
//! (`<parent>/.supervisors/<id>`, see [`crate::cgroup`]): outside the
//! daemon's cgroup (a service manager's stop does not kill it) and outside
//! the sandbox's (a pause freezes the sandbox, never its supervisor, which
//! keeps answering and buffering).
//!
//! It then starts the sandbox's PID 1 through the `init` shim (its waiter is
//! the supervisor's child), binds a unix socket in the sandbox's `run/`
//! directory (mode 0600), reports `ok <init pid> <supervisor pid>` on stdout,
//! detaches its stdio and serves persistent sessions over that socket with
//! the guest agent's protocol ([`stasis_agent_proto`]: `Hello`,
//! `SessionStart/Write/Read/List/Resize/Kill`): the same semantics as
//! sessions in a microVM. A session started with a PTY gets a terminal
//! ([`crate::pty`]): the supervisor keeps its master, the session's
//! shim gets the slave as its controlling terminal. Each session runs through the `exec` shim in its own cgroup
//! leaf; its output (stdout and stderr on two pipes, kept as one combined
//! window with the stderr ranges marked: [`OutputBuffer`]) is buffered here, the last
//! `session_buffer` bytes kept (older output dropped, offsets keep growing),
//! so output produced while no daemon is attached is read later. A session's
//! environment (possibly secrets) travels over the socket and to its shim in
//! a memfd, never through a file.
//!
//! The daemon reattaches after a restart by connecting to the socket (the
//! peer's credentials name the supervisor's pid). Destroy kills the
//! sandbox's cgroup and then the supervisor's.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{ChildStdin, Command};
use tokio::sync::Notify;

use stasis_agent_proto::{asynch, Body, Frame, Reply, Request, PROTOCOL_VERSION};
use stasis_core::session_output::OutputBuffer;
use stasis_core::{
    Error, PtySize, Result, SessionInfo, SessionOutput, SessionSignal, SessionSpec, Stream,
};

use crate::cgroup::{Cgroups, SandboxCgroup};
use crate::shim_proto::{ExecConfig, ExecStatus, InitConfig};

/// Name of the supervisor's socket in the sandbox's `run/` directory.
pub const SOCKET_NAME: &str = "supervisor.sock";

/// The socket in `dir`, addressed through an open descriptor of `dir`
/// (`/proc/self/fd/<n>/supervisor.sock`): a unix socket address holds at
/// most 107 bytes, a data directory's path may be longer. Keep the returned
/// descriptor open while the path is used.
pub(crate) fn socket_via_fd(dir: &Path) -> std::io::Result<(OwnedFd, PathBuf)> {
    let d = std::fs::File::open(dir)?;
    let p = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET_NAME}", d.as_raw_fd()));
    Ok((d.into(), p))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SupervisorConfig {
    pub init: InitConfig,
    pub sandbox_id: String,
    pub cgroup_parent: String,
    /// The sandbox's `run/` directory (socket, exec status files).
    pub run_dir: PathBuf,
    pub shim_program: PathBuf,
    pub shim_args: Vec<String>,
    /// Bytes of output kept per session (oldest dropped first).
    pub session_buffer: usize,
    pub init_timeout_ms: u64,
}

/// `supervise` mode of the shim (single-threaded when called).
pub(crate) fn run_supervise(cfg: SupervisorConfig) -> i32 {
    let report = |msg: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{msg}");
        let _ = out.flush();
    };
    let cgs = match Cgroups::detect() {
        Ok(c) => c,
        Err(e) => {
            report(&format!("error {e}"));
            return 1;
        }
    };
    let own = cgs.supervisor(&cfg.cgroup_parent, &cfg.sandbox_id);
    let procs = match own.create_plain() {
        Ok(p) => p,
        Err(e) => {
            report(&format!("error supervisor cgroup: {e}"));
            return 1;
        }
    };
    // SAFETY: single-threaded here (checked by shim_main).
    match unsafe { nix::unistd::fork() } {
        Err(e) => {
            report(&format!("error fork: {e}"));
            1
        }
        // The daemon reaps this one; the supervisor is reparented to init.
        Ok(nix::unistd::ForkResult::Parent { .. }) => 0,
        Ok(nix::unistd::ForkResult::Child) => {
            let _ = nix::unistd::setsid();
            let me = std::process::id().to_string();
            for f in &procs {
                if let Err(e) = std::fs::write(f, &me) {
                    report(&format!("error join cgroup {}: {e}", f.display()));
                    return 1;
                }
            }
            cgs.escape_service(&procs);
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(4)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    report(&format!("error runtime: {e}"));
                    return 1;
                }
            };
            let sb = cgs.sandbox(&cfg.cgroup_parent, &cfg.sandbox_id);
            rt.block_on(serve(cfg, sb, report))
        }
    }
}

async fn serve(cfg: SupervisorConfig, cg: SandboxCgroup, report: impl Fn(&str)) -> i32 {
    let socket = cfg.run_dir.join(SOCKET_NAME);
    let _ = std::fs::remove_file(&socket);
    let bound = socket_via_fd(&cfg.run_dir).and_then(|(_dir, p)| UnixListener::bind(p));
    let listener = match bound {
        Ok(l) => l,
        Err(e) => {
            report(&format!("error bind {}: {e}", socket.display()));
            return 1;
        }
    };
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
    }
    let (init_pid, mut waiter) = match start_init(&cfg).await {
        Ok(x) => x,
        Err(e) => {
            let _ = std::fs::remove_file(&socket);
            report(&format!("error {e}"));
            return 1;
        }
    };
    report(&format!("ok {init_pid} {}", std::process::id()));
    // Nothing more goes to the daemon: a dead daemon's pipes must not matter.
    if let Ok(null) = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    // Reap the init's waiter; the daemon sees PID 1's end through its pidfd.
    tokio::spawn(async move {
        let _ = waiter.wait().await;
    });
    let state = Arc::new(Sup {
        cfg,
        cg,
        init_pid,
        sessions: Mutex::new(BTreeMap::new()),
        seq: std::sync::atomic::AtomicU64::new(1),
    });
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                // Only root (the daemon) may talk to a supervisor.
                if conn.peer_cred().map(|c| c.uid() != 0).unwrap_or(true) {
                    continue;
                }
                tokio::spawn(handle_conn(state.clone(), conn));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Start the sandbox's PID 1 through the `init` shim; returns its host pid
/// and the shim that waits for it.
async fn start_init(
    cfg: &SupervisorConfig,
) -> std::result::Result<(i32, tokio::process::Child), String> {
    let cfg_json = serde_json::to_vec(&cfg.init).map_err(|e| e.to_string())?;
    let mut child = Command::new(&cfg.shim_program)
        .args(&cfg.shim_args)
        .arg("init")
        .arg("-")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| format!("spawn shim {}: {e}", cfg.shim_program.display()))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    // The shim reads all of stdin before anything else.
    let _ = stdin.write_all(&cfg_json).await;
    drop(stdin);
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(
        Duration::from_millis(cfg.init_timeout_ms),
        lines.next_line(),
    )
    .await;
    let outcome = match line {
        Ok(Ok(Some(l))) => match l.strip_prefix("ok ") {
            Some(p) => p
                .trim()
                .parse::<i32>()
                .map_err(|_| format!("bad init report {l:?}")),
            None => Err(l.strip_prefix("error ").unwrap_or(&l).to_string()),
        },
        Ok(Ok(None)) => Err("sandbox init exited without a report".to_string()),
        Ok(Err(e)) => Err(format!("read init report: {e}")),
        Err(_) => Err("sandbox init did not come up in time".to_string()),
    };
    match outcome {
        Ok(pid) => Ok((pid, child)),
        Err(e) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            Err(e)
        }
    }
}

struct Sup {
    cfg: SupervisorConfig,
    cg: SandboxCgroup,
    init_pid: i32,
    sessions: Mutex<BTreeMap<String, Arc<Session>>>,
    seq: std::sync::atomic::AtomicU64,
}

struct SessBuf {
    out: OutputBuffer,
    running: bool,
    exit_code: Option<i32>,
}

struct Session {
    id: String,
    argv: Vec<String>,
    started_at_ms: i64,
    leaf: String,
    /// Host pid of the session's `exec` shim (its child is the command).
    shim_pid: Option<i32>,
    /// Ended by a kill of its whole leaf (the shim too, so it recorded
    /// nothing): reported as a SIGKILL (137), as the guest agent does.
    killed: std::sync::atomic::AtomicBool,
    stdin: tokio::sync::Mutex<Option<Input>>,
    /// The terminal's current size (sessions with a PTY only).
    pty: Mutex<Option<PtySize>>,
    buf: Mutex<SessBuf>,
    notify: Notify,
}

/// Where a session's input goes: its stdin pipe, or its terminal's master.
enum Input {
    Pipe(ChildStdin),
    Pty(Arc<crate::pty::Master>),
}

impl Input {
    async fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Input::Pipe(w) => {
                w.write_all(data).await?;
                w.flush().await
            }
            Input::Pty(m) => m.write_all(data).await,
        }
    }
}

impl Session {
    fn info(&self) -> SessionInfo {
        let b = self.buf.lock().unwrap();
        SessionInfo {
            id: self.id.clone(),
            argv: self.argv.clone(),
            running: b.running,
            exit_code: b.exit_code,
            started_at_ms: self.started_at_ms,
            output_end: b.out.end(),
            pty: *self.pty.lock().unwrap(),
        }
    }

    fn finish(&self, exit_code: Option<i32>) {
        let mut b = self.buf.lock().unwrap();
        if b.running {
            b.running = false;
            b.exit_code = exit_code;
        }
        drop(b);
        self.notify.notify_waiters();
    }

    /// Append output, keeping at most `cap` bytes (oldest dropped).
    fn push(&self, stream: Stream, data: &[u8], cap: usize) {
        self.buf.lock().unwrap().out.push(stream, data, cap);
        self.notify.notify_waiters();
    }
}

fn read_from(b: &SessBuf, offset: u64) -> SessionOutput {
    b.out.read(offset, usize::MAX, b.running, b.exit_code)
}

/// Send `sig` to a session's command (the `exec` shim's child in the
/// session's leaf) and its process group: what a ^C on a terminal does to
/// the foreground job. The shim itself is left alone, so it still records
/// how the command ended.
/// Whether a process to signal was found (the shim's child: none yet right
/// after a start, while the shim is still forking it).
fn signal_session(pids: &[i32], shim_pid: i32, sig: i32) -> bool {
    let mut found = false;
    for &pid in pids {
        if parent_of(pid) == Some(shim_pid) {
            found = true;
            // SAFETY: kill(2) on a process (and its group: it called setsid)
            // of this sandbox's session leaf.
            unsafe {
                libc::kill(-pid, sig);
                libc::kill(pid, sig);
            }
        }
    }
    found
}

/// The parent pid of `pid` (from `/proc/<pid>/stat`; the name in it may hold
/// spaces and parentheses, so fields are counted after the last `)`).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn error_reply(e: &Error) -> Reply {
    let code = serde_json::to_value(e.code)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_else(|| "backend_error".into());
    Reply::Error {
        code,
        message: e.message.clone(),
    }
}

async fn handle_conn(sup: Arc<Sup>, mut conn: UnixStream) {
    while let Ok(frame) = asynch::read_frame(&mut conn).await {
        let reply = match frame.body {
            Body::Request(req) => match sup.handle(req).await {
                Ok(r) => r,
                Err(e) => error_reply(&e),
            },
            _ => error_reply(&Error::invalid("expected a request")),
        };
        let out = Frame {
            id: frame.id,
            body: Body::Reply(reply),
        };
        if asynch::write_frame(&mut conn, &out).await.is_err() {
            break;
        }
    }
}

impl Sup {
    fn session(&self, id: &str) -> Result<Arc<Session>> {
        self.sessions
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("session {id}")))
    }

    async fn handle(self: &Arc<Self>, req: Request) -> Result<Reply> {
        Ok(match req {
            Request::Hello => Reply::Hello {
                protocol: PROTOCOL_VERSION,
                agent_version: env!("CARGO_PKG_VERSION").to_string(),
                // For a supervisor: the host pid of the sandbox's PID 1
                // (fixed for the life of the sandbox's processes).
                boot_id: self.init_pid.to_string(),
                features: Vec::new(),
            },
            Request::SessionStart { spec } => Reply::Session {
                info: self.start_session(spec).await?,
            },
            Request::SessionWrite { session, data } => {
                let s = self.session(&session)?;
                if !s.buf.lock().unwrap().running {
                    return Err(Error::state(format!("session {session} has exited")));
                }
                let mut stdin = s.stdin.lock().await;
                let w = stdin
                    .as_mut()
                    .ok_or_else(|| Error::state(format!("session {session} has no input")))?;
                w.write_all(&data)
                    .await
                    .map_err(|e| Error::state(format!("session {session}: write: {e}")))?;
                Reply::Ok
            }
            Request::SessionRead {
                session,
                offset,
                wait_ms,
            } => {
                let s = self.session(&session)?;
                let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
                let output = loop {
                    let notified = s.notify.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    {
                        let b = s.buf.lock().unwrap();
                        let end = b.out.end();
                        if end > offset || !b.running || tokio::time::Instant::now() >= deadline {
                            break read_from(&b, offset);
                        }
                    }
                    let _ = tokio::time::timeout_at(deadline, notified).await;
                };
                Reply::SessionOutput { output }
            }
            Request::SessionList => Reply::Sessions {
                sessions: self
                    .sessions
                    .lock()
                    .unwrap()
                    .values()
                    .map(|s| s.info())
                    .collect(),
            },
            Request::SessionCloseInput { session } => {
                let s = self.session(&session)?;
                let mut stdin = s.stdin.lock().await;
                if matches!(stdin.as_ref(), Some(Input::Pty(_))) {
                    return Err(Error::state(format!(
                        "session {session} has a terminal: its input cannot be closed (send ^D)"
                    )));
                }
                // Dropping the pipe's end is the close; closing twice, or
                // after the command ended, is a no-op.
                stdin.take();
                Reply::Ok
            }
            Request::SessionResize { session, size } => {
                stasis_core::exec::check_pty_size(size)?;
                let s = self.session(&session)?;
                let stdin = s.stdin.lock().await;
                let Some(Input::Pty(m)) = stdin.as_ref() else {
                    return Err(match stdin.as_ref() {
                        None if s.pty.lock().unwrap().is_some() => {
                            Error::state(format!("session {session} has ended"))
                        }
                        _ => Error::state(format!("session {session} has no terminal")),
                    });
                };
                m.resize(size)
                    .map_err(|e| Error::state(format!("session {session}: resize: {e}")))?;
                *s.pty.lock().unwrap() = Some(size);
                Reply::Ok
            }
            Request::SessionKill { session, signal } => {
                let s = self.session(&session)?;
                let sig = SessionSignal::from_number(signal.unwrap_or(9))?;
                if sig != SessionSignal::Kill {
                    if let Some(shim) = s.shim_pid {
                        // A signal sent right after the start (a ^C at once)
                        // waits for the command to exist instead of being
                        // lost: up to 2 s, while the session runs.
                        let deadline = std::time::Instant::now() + Duration::from_secs(2);
                        while !signal_session(&self.cg.procs(&s.leaf), shim, sig.number())
                            && s.buf.lock().unwrap().running
                            && std::time::Instant::now() < deadline
                        {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                    return Ok(Reply::Ok);
                }
                s.killed.store(true, std::sync::atomic::Ordering::SeqCst);
                let (cg, leaf) = (self.cg.clone(), s.leaf.clone());
                tokio::task::spawn_blocking(move || cg.kill(&leaf))
                    .await
                    .map_err(|e| Error::internal(e.to_string()))?
                    .map_err(|e| Error::backend(e.to_string()))?;
                *s.stdin.lock().await = None;
                Reply::Ok
            }
            other => {
                return Err(Error::unsupported(format!(
                    "the sandbox supervisor does not serve {other:?}"
                )))
            }
        })
    }

    /// `spec.env` is the full environment and `spec.cwd` the normalized
    /// working directory (the daemon merges and checks both).
    async fn start_session(self: &Arc<Self>, spec: SessionSpec) -> Result<SessionInfo> {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let leaf = format!("s{}-{n}", std::process::id());
        let (cg, l2) = (self.cg.clone(), leaf.clone());
        let procs = tokio::task::spawn_blocking(move || cg.leaf(&l2))
            .await
            .map_err(|e| Error::internal(e.to_string()))?
            .map_err(|e| Error::backend(e.to_string()))?;
        let status_path = self.cfg.run_dir.join(format!("{leaf}.status"));
        let term = match spec.pty {
            Some(size) => match crate::pty::open(size) {
                Ok(t) => Some(t),
                Err(e) => {
                    self.cg.remove_leaf(&leaf);
                    return Err(Error::backend(format!("open a terminal: {e}")));
                }
            },
            None => None,
        };
        let exec = ExecConfig {
            cgroup_procs: procs,
            init_pid: self.init_pid,
            argv: spec.argv.clone(),
            env: spec.env.into_iter().collect(),
            cwd: spec.cwd.unwrap_or_else(|| "/".into()),
            status_path: status_path.clone(),
            merge_stderr: false,
            pty: term.is_some(),
            init_cgroup: crate::launch::init_cgroup_marker(&self.cg),
            user: spec.user.clone(),
        };
        let cfg_fd = crate::launch::config_memfd(&serde_json::to_vec(&exec)?)?;
        let mut cmd =
            crate::launch::shim_exec_command(&self.cfg.shim_program, &self.cfg.shim_args, &cfg_fd);
        let mut master = None;
        match term {
            Some((m, slave)) => {
                let stdio = || slave.try_clone().map(Stdio::from);
                match (stdio(), stdio(), stdio()) {
                    (Ok(i), Ok(o), Ok(e)) => cmd.stdin(i).stdout(o).stderr(e),
                    _ => {
                        self.cg.remove_leaf(&leaf);
                        return Err(Error::backend("dup the terminal".to_string()));
                    }
                };
                master = Some(m);
            }
            None => {
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
            }
        }
        let spawned = cmd.spawn();
        // Our copies of the slave go with `cmd`: the master then reads EOF
        // once the session's processes closed theirs.
        drop(cmd);
        drop(cfg_fd);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                self.cg.remove_leaf(&leaf);
                return Err(Error::backend(format!("spawn shim: {e}")));
            }
        };
        let (input, master) = match master {
            Some(m) => {
                let m = crate::pty::Master::new(m)
                    .map(Arc::new)
                    .map_err(|e| Error::backend(format!("terminal master: {e}")));
                let m = match m {
                    Ok(m) => m,
                    Err(e) => {
                        let _ = child.start_kill();
                        return Err(e);
                    }
                };
                (Some(Input::Pty(m.clone())), Some(m))
            }
            None => (child.stdin.take().map(Input::Pipe), None),
        };
        let now = stasis_core::now_ms();
        let session = Arc::new(Session {
            // Unique across supervisors and daemon restarts.
            id: format!("sess-{now}-{}-{n}", std::process::id()),
            argv: spec.argv,
            started_at_ms: now,
            leaf,
            shim_pid: child.id().map(|p| p as i32),
            killed: Default::default(),
            stdin: tokio::sync::Mutex::new(input),
            pty: Mutex::new(spec.pty),
            buf: Mutex::new(SessBuf {
                out: OutputBuffer::new(),
                running: true,
                exit_code: None,
            }),
            notify: Notify::new(),
        });
        let cap = self.cfg.session_buffer;
        let s2 = session.clone();
        let readers = match master {
            Some(m) => vec![tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match m.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => s2.push(Stream::Stdout, &buf[..n], cap),
                    }
                }
            })],
            None => {
                let out = child.stdout.take().expect("piped stdout");
                let err = child.stderr.take().expect("piped stderr");
                vec![pump(s2, out, err, cap)]
            }
        };
        let s3 = session.clone();
        let cg = self.cg.clone();
        tokio::spawn(async move {
            let _ = child.wait().await;
            crate::launch::drain(&cg, &s3.leaf, readers).await;
            let status: Option<ExecStatus> = tokio::fs::read(&status_path)
                .await
                .ok()
                .and_then(|s| serde_json::from_slice(&s).ok());
            let code = match status {
                Some(ExecStatus::Exited(c)) => Some(c),
                Some(ExecStatus::Signaled(s)) => Some(128 + s),
                Some(ExecStatus::Exec(c, msg)) => {
                    s3.push(Stream::Stderr, format!("stasis: {msg}\n").as_bytes(), cap);
                    Some(c)
                }
                _ if s3.killed.load(std::sync::atomic::Ordering::SeqCst) => Some(128 + 9),
                _ => None,
            };
            s3.finish(code);
            let _ = tokio::fs::remove_file(&status_path).await;
            cg.remove_leaf(&s3.leaf);
        });
        let info = session.info();
        self.sessions
            .lock()
            .unwrap()
            .insert(session.id.clone(), session);
        Ok(info)
    }
}

/// Copy a session's stdout and stderr pipes into its buffer until both are
/// at EOF, in one task that reads stdout first whenever both are readable:
/// a program writes its output and then its next prompt or diagnostic
/// (`print` then the REPL's `>>> `), so both pending at one wake-up were
/// written in that order; two readers racing each other would interleave
/// them at random.
fn pump(
    s: Arc<Session>,
    mut out: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    mut err: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    cap: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ob = vec![0u8; 64 * 1024];
        let mut eb = vec![0u8; 64 * 1024];
        let (mut out_open, mut err_open) = (true, true);
        while out_open || err_open {
            // Both reads are cancel-safe: the one not taken consumed nothing.
            tokio::select! {
                biased;
                r = out.read(&mut ob), if out_open => match r {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => s.push(Stream::Stdout, &ob[..n], cap),
                },
                r = err.read(&mut eb), if err_open => match r {
                    Ok(0) | Err(_) => err_open = false,
                    Ok(n) => s.push(Stream::Stderr, &eb[..n], cap),
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_of_reads_the_ppid_after_the_command_name() {
        assert_eq!(
            parent_of(std::process::id() as i32),
            Some(std::os::unix::process::parent_id() as i32)
        );
        assert_eq!(parent_of(i32::MAX), None);
    }
}
