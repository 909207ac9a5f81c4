//! Child processes: the agent is a child subreaper and the only place that
//! reaps. Every spawn registers its pid (under the same lock the reaper takes
//! before reaping) so an exit is never lost and never attributed to a reused
//! pid; orphans re-parented to the agent are reaped and dropped.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    pub fn code(self) -> Option<i32> {
        match self {
            Exit::Code(c) => Some(c),
            Exit::Signal(_) => None,
        }
    }
    pub fn signal(self) -> Option<i32> {
        match self {
            Exit::Code(_) => None,
            Exit::Signal(s) => Some(s),
        }
    }
}

/// Where the reaper puts a child's exit; waitable with a condvar or, for
/// poll(2) loops, through an eventfd.
pub struct ExitSlot {
    status: Mutex<Option<Exit>>,
    cv: Condvar,
    efd: OwnedFd,
}

impl ExitSlot {
    fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ExitSlot {
            status: Mutex::new(None),
            cv: Condvar::new(),
            // SAFETY: fd is a fresh, valid descriptor nobody else owns.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn set(&self, exit: Exit) {
        *lock(&self.status) = Some(exit);
        self.cv.notify_all();
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.efd.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }

    pub fn get(&self) -> Option<Exit> {
        *lock(&self.status)
    }

    /// Readable (POLLIN) once the child has exited.
    pub fn event_fd(&self) -> i32 {
        self.efd.as_raw_fd()
    }

    /// Wait for the exit, at most `timeout` (None: forever).
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Exit> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = lock(&self.status);
        loop {
            if let Some(e) = *g {
                return Some(e);
            }
            match deadline {
                None => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    g = self
                        .cv
                        .wait_timeout(g, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }
}

struct Reaper {
    children: Mutex<HashMap<i32, Arc<ExitSlot>>>,
    wake: Condvar,
}

static REAPER: OnceLock<Reaper> = OnceLock::new();

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn reaper() -> &'static Reaper {
    REAPER.get_or_init(|| {
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        std::thread::Builder::new()
            .name("reaper".into())
            .spawn(reap_loop)
            .expect("spawn reaper thread");
        Reaper {
            children: Mutex::new(HashMap::new()),
            wake: Condvar::new(),
        }
    })
}

/// Make the agent a subreaper and start reaping (idempotent).
pub fn init() {
    reaper();
}

fn reap_loop() {
    let r = loop {
        if let Some(r) = REAPER.get() {
            break r;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    loop {
        // Look at (but do not reap) the next exited child, so that a spawn in
        // progress (which holds `children`) registers its pid first.
        // SAFETY: zeroed siginfo_t is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to siginfo_t.
        let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ECHILD) {
                let g = lock(&r.children);
                let _ = r.wake.wait_timeout(g, Duration::from_millis(500));
            }
            continue;
        }
        // SAFETY: waitid filled a SIGCHLD siginfo.
        let pid = unsafe { info.si_pid() };
        if pid <= 0 {
            continue;
        }
        let mut g = lock(&r.children);
        let mut status = 0;
        // SAFETY: valid pointer; WNOHANG.
        let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if got == pid {
            let exit = if libc::WIFSIGNALED(status) {
                Exit::Signal(libc::WTERMSIG(status))
            } else {
                Exit::Code(libc::WEXITSTATUS(status))
            };
            if let Some(slot) = g.remove(&pid) {
                slot.set(exit);
            }
        }
        drop(g);
    }
}

/// Spawn `cmd` and register it with the reaper. Never call `wait` on the child.
pub fn spawn(cmd: &mut Command) -> io::Result<(Child, Arc<ExitSlot>)> {
    let r = reaper();
    let slot = Arc::new(ExitSlot::new()?);
    let mut g = lock(&r.children);
    let child = cmd.spawn()?;
    g.insert(child.id() as i32, slot.clone());
    drop(g);
    r.wake.notify_all();
    Ok((child, slot))
}

/// All descendants of `root` (children first), from /proc.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut parent: Vec<(i32, i32)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid ...": comm may contain spaces and parens.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let mut it = rest.split_whitespace();
            let _state = it.next();
            if let Some(ppid) = it.next().and_then(|s| s.parse::<i32>().ok()) {
                parent.push((pid, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &parent {
            if pp == p && !out.contains(&c) && c != root {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// Kill a process, its process group (it is a session/group leader) and every
/// descendant found through /proc, including ones that left the group. Stops
/// everything first so nothing can fork while the tree is being walked.
pub fn kill_tree(root: i32) {
    if root <= 1 {
        return;
    }
    for sig in [libc::SIGSTOP, libc::SIGKILL] {
        for _ in 0..2 {
            let desc = descendants(root);
            // SAFETY: kill(2) with a pid/pgid we spawned.
            unsafe {
                libc::kill(-root, sig);
                libc::kill(root, sig);
                for &p in &desc {
                    libc::kill(p, sig);
                }
            }
        }
    }
}
