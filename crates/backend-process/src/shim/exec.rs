//! The shim's `exec` mode: join the exec's cgroup leaf, enter the
//! namespaces of the sandbox's PID 1 (checked to be it), fork, and in the
//! child join its user namespace, enter the working directory, take the
//! jail and exec the command; the outcome goes to the status file.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Write};

use nix::sched::{setns, CloneFlags};
use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

use super::jail::drop_privileges;
use super::process::{join_cgroups, pipe};
use crate::shim_proto::{read_config, ExecConfig, ExecStatus};

pub(super) fn run_exec(path: &str) -> i32 {
    let cfg: Result<ExecConfig, String> = read_config(path);
    // The config (with the command's environment, possibly secrets) came in
    // an inherited memory file: close it so the command does not inherit it.
    if let Some(fd) = path
        .strip_prefix("/proc/self/fd/")
        .and_then(|n| n.parse::<i32>().ok())
    {
        // SAFETY: closing an fd this process inherited for this purpose only.
        unsafe { libc::close(fd) };
    }
    let cfg: ExecConfig = match cfg {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stasis shim: {e}");
            return 125;
        }
    };
    let mut status_file = match File::create(&cfg.status_path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("stasis shim: create {}: {e}", cfg.status_path.display());
            return 125;
        }
    };
    let mut report = |st: &ExecStatus| {
        let _ = status_file.write_all(&serde_json::to_vec(st).unwrap_or_default());
        let _ = status_file.flush();
    };
    match exec_inner(&cfg) {
        Ok(st) => {
            report(&st);
            match st {
                ExecStatus::Exited(c) => c,
                ExecStatus::Signaled(s) => 128 + s,
                _ => 125,
            }
        }
        Err(e) => {
            report(&ExecStatus::Setup(e));
            125
        }
    }
}

fn exec_inner(cfg: &ExecConfig) -> Result<ExecStatus, String> {
    join_cgroups(&cfg.cgroup_procs)?;
    // Pin the init process with a pidfd, then make sure it is the sandbox's
    // PID 1 (its cgroup), so a recycled pid cannot take us elsewhere.
    let pidfd = crate::sys::pidfd_open(cfg.init_pid)
        .map_err(|e| format!("sandbox init {} is gone: {e}", cfg.init_pid))?;
    let cg = fs::read_to_string(format!("/proc/{}/cgroup", cfg.init_pid)).unwrap_or_default();
    let marker = format!("/{}", cfg.init_cgroup.trim_start_matches('/'));
    if !cg.lines().any(|l| l.ends_with(&marker)) {
        return Err(format!(
            "pid {} is not this sandbox's init (cgroup {marker} not found)",
            cfg.init_pid
        ));
    }
    let all = CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWCGROUP;
    // setns(pidfd, flags) enters all namespaces at once (Linux 5.8+).
    setns(&pidfd, all).map_err(|e| format!("setns into sandbox: {e}"))?;
    // setns(mnt) moved our root and cwd to the sandbox's (pivoted) root:
    // the user is looked up in the sandbox's own files.
    let ident = match &cfg.user {
        Some(u) => match stasis_core::user::resolve_in(std::path::Path::new("/"), u) {
            Ok(id) => Some(id),
            Err(e) => return Ok(ExecStatus::User(e)),
        },
        None => None,
    };
    let mut env = cfg.env.clone();
    if let Some(id) = &ident {
        for (k, v) in [
            ("HOME", &id.home),
            ("USER", &id.name),
            ("LOGNAME", &id.name),
        ] {
            if !env.iter().any(|(e, _)| e == k) {
                env.push((k.to_string(), v.clone()));
            }
        }
    }
    let argv: Vec<CString> = cfg
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| "argv contains NUL".to_string()))
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(|_| "env contains NUL".to_string()))
        .collect::<Result<_, _>>()?;
    let path_var = cfg
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let cwd = cfg.cwd.clone();
    let merge = cfg.merge_stderr;
    let pty = cfg.pty;
    let (mut r, mut w) = pipe()?;
    let forked =
        match unsafe { fork() } {
            Ok(f) => f,
            // The sandbox is at its pids cap: report it as the command's failure
            // (like a shell would), not as a broken sandbox.
            Err(nix::errno::Errno::EAGAIN) => return Ok(ExecStatus::Exec(
                126,
                "cannot start the command: the sandbox reached its process limit (resources.pids)"
                    .to_string(),
            )),
            Err(e) => return Err(format!("fork: {e}")),
        };
    match forked {
        ForkResult::Child => {
            drop(r);
            let mut fail = |tag: &str, code: i32, msg: String| -> ! {
                let _ = w.write_all(format!("{tag}\n{code}\n{msg}").as_bytes());
                unsafe { libc::_exit(code) }
            };
            let _ = nix::unistd::setsid();
            // SAFETY: ioctl on our stdin; the new session has no terminal yet.
            if pty && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
                let e = std::io::Error::last_os_error();
                fail(
                    "setup",
                    125,
                    format!("make the terminal the controlling one: {e}"),
                );
            }
            // The interrupt signals must act even when the daemon was started
            // with them ignored (a background job of a script): a ^C typed on
            // a terminal, or sent through the API to a command without one.
            // The job-control ones only with a terminal.
            let job_control: &[i32] = if pty {
                &[libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU]
            } else {
                &[]
            };
            for &sig in [libc::SIGINT, libc::SIGQUIT].iter().chain(job_control) {
                // SAFETY: resetting a disposition in the forked child.
                unsafe { libc::signal(sig, libc::SIG_DFL) };
            }
            // Rust ignores SIGPIPE at startup; commands expect the default.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            }
            let _ = nix::sys::signal::sigprocmask(
                SigmaskHow::SIG_SETMASK,
                Some(&SigSet::empty()),
                None,
            );
            if merge {
                unsafe {
                    libc::dup2(1, 2);
                }
            }
            // Last namespace: the sandbox's user namespace, as its root
            // (a no-op for a sandbox started without one).
            {
                use std::os::fd::AsFd;
                if let Err(e) = crate::userns::enter(pidfd.as_fd()) {
                    fail("setup", 125, e);
                }
            }
            drop(pidfd);
            if let Err(e) = nix::unistd::chdir(cwd.as_str()) {
                fail(
                    "cwd",
                    126,
                    format!("cannot enter working directory {cwd}: {e}"),
                );
            }
            if let Err(e) = drop_privileges() {
                fail("setup", 125, e);
            }
            // Last: the sandbox's root (all it needs is done) becomes the user.
            if let Some(id) = &ident {
                // SAFETY: plain syscalls on a list built before the fork.
                let rc = unsafe {
                    if libc::setgroups(id.groups.len(), id.groups.as_ptr()) != 0 {
                        -1
                    } else if libc::setgid(id.gid) != 0 {
                        -2
                    } else {
                        libc::setuid(id.uid)
                    }
                };
                if rc != 0 {
                    let e = std::io::Error::last_os_error();
                    fail("user", 126, format!("cannot become user {}: {e}", id.name));
                }
            }
            let prog = &cfg.argv[0];
            let candidates: Vec<String> = if prog.contains('/') {
                vec![prog.clone()]
            } else {
                path_var
                    .split(':')
                    .filter(|d| !d.is_empty())
                    .map(|d| format!("{}/{prog}", d.trim_end_matches('/')))
                    .collect()
            };
            let mut err = nix::errno::Errno::ENOENT;
            for c in candidates {
                let Ok(cpath) = CString::new(c) else { continue };
                let Err(e) = nix::unistd::execve(&cpath, &argv, &envp);
                // Keep the most telling error (EACCES beats ENOENT).
                if e != nix::errno::Errno::ENOENT && err != nix::errno::Errno::EACCES {
                    err = e;
                }
            }
            let code = if err == nix::errno::Errno::ENOENT {
                127
            } else {
                126
            };
            let msg = if err == nix::errno::Errno::ENOENT {
                format!("{prog}: command not found")
            } else {
                format!("{prog}: {err}")
            };
            fail("exec", code, msg)
        }
        ForkResult::Parent { child } => {
            drop(w);
            drop(pidfd);
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            let status = loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(_, c)) => break ExecStatus::Exited(c),
                    Ok(WaitStatus::Signaled(_, s, _)) => break ExecStatus::Signaled(s as i32),
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(format!("waitpid: {e}")),
                }
            };
            if !msg.is_empty() {
                let mut parts = msg.splitn(3, '\n');
                let tag = parts.next().unwrap_or("");
                let code: i32 = parts.next().and_then(|c| c.parse().ok()).unwrap_or(125);
                let text = parts.next().unwrap_or("").to_string();
                return Ok(match tag {
                    "cwd" => ExecStatus::Cwd(text),
                    "user" => ExecStatus::User(text),
                    "exec" => ExecStatus::Exec(code, text),
                    _ => ExecStatus::Setup(text),
                });
            }
            Ok(status)
        }
    }
}
