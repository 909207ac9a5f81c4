//! The shim's `init` mode: join the sandbox's `init` cgroup leaf, create
//! its user namespace, unshare the other namespaces and fork the sandbox's
//! PID 1 (which builds its root, see [`super::rootfs`], then only reaps
//! orphans), staying outside as PID 1's waiter.

use std::io::{Read, Write};

use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

use super::process::{join_cgroups, pipe, stdio_to_null};
use super::rootfs::init_setup;
use crate::shim_proto::{read_config, InitConfig};

pub(super) fn run_init(path: &str) -> i32 {
    let report = |msg: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{msg}");
        let _ = out.flush();
    };
    let cfg: InitConfig = match read_config(path) {
        Ok(c) => c,
        Err(e) => {
            report(&format!("error {e}"));
            return 1;
        }
    };
    if let Err(e) = join_cgroups(&cfg.cgroup_procs) {
        report(&format!("error {e}"));
        return 1;
    }
    // The user namespace is made first: its helper must not become the
    // new PID namespace's first process.
    let userns = match cfg.idmap.as_ref().map(crate::userns::create).transpose() {
        Ok(u) => u,
        Err(e) => {
            report(&format!("error {e}"));
            return 1;
        }
    };
    // Own session: terminal signals to the daemon's process group (Ctrl-C)
    // do not reach sandboxes; the daemon ends them explicitly.
    let _ = nix::unistd::setsid();
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        // (cgroup namespace: the sandbox sees its own cgroup as "/", not host paths)
        | CloneFlags::CLONE_NEWCGROUP;
    if let Err(e) = unshare(flags) {
        report(&format!("error unshare namespaces: {e}"));
        return 1;
    }
    let (mut r, mut w) = match pipe() {
        Ok(p) => p,
        Err(e) => {
            report(&format!("error {e}"));
            return 1;
        }
    };
    match unsafe { fork() } {
        Err(e) => {
            report(&format!("error fork: {e}"));
            1
        }
        Ok(ForkResult::Child) => {
            drop(r);
            match init_setup(&cfg, userns) {
                Err(e) => {
                    let _ = w.write_all(format!("error {e}").as_bytes());
                    std::process::exit(1);
                }
                Ok(()) => {
                    let _ = w.write_all(b"ok");
                    drop(w);
                    init_loop()
                }
            }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(w);
            drop(userns);
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            if msg == "ok" {
                report(&format!("ok {child}"));
            } else if msg.is_empty() {
                report("error sandbox init died during setup");
            } else {
                report(&msg);
            }
            // Nothing more goes to the daemon: detach from its pipes so a
            // daemon restart does not leave us writing into a dead pipe.
            stdio_to_null();
            loop {
                match waitpid(child, None) {
                    Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => break,
                    Err(nix::errno::Errno::EINTR) | Ok(_) => continue,
                    Err(_) => break,
                }
            }
            if msg == "ok" {
                0
            } else {
                1
            }
        }
    }
}

/// PID 1's job after setup: reap orphans, forever, sleeping in sigwait.
fn init_loop() -> ! {
    stdio_to_null();
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
    loop {
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        let _ = set.wait();
    }
}
