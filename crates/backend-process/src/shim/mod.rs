//! The sandbox shim: a small, single-threaded program the (multi-threaded)
//! daemon spawns to do what must not happen inside it: unshare/setns, fork
//! into a PID namespace, mount, pivot_root, drop capabilities, install the
//! seccomp filter, exec.
//!
//! The `stasis` binary dispatches `stasis __process-shim <mode> <config>` to
//! [`shim_main`]; this crate's `stasis-process-shim` binary does the same for
//! tests. The mode and config path are always the last two arguments, so any
//! leading arguments ([`crate::ProcessConfig::shim_args`]) are ignored.
//!
//! Modes:
//! - `init CONFIG`: joins the sandbox's `init` cgroup leaf, creates the
//!   sandbox's user namespace (when the config has an id map), unshares mount,
//!   pid, net, ipc and uts namespaces and forks the sandbox's PID 1, which
//!   builds the root filesystem (see [`crate::shim_proto::InitConfig`]), pivots into it, brings
//!   `lo` up, joins the user namespace as its root, drops privileges and then
//!   only reaps orphans. The shim itself
//!   stays outside as the waiter of PID 1 and prints one line on stdout:
//!   `ok <host pid of PID 1>` or `error <message>`.
//! - `supervise CONFIG`: the sandbox's long-lived supervisor (see
//!   [`crate::supervisor`]), which runs `init` and, for every session,
//!   `exec` as its children and outlives the daemon.
//! - `exec CONFIG`: joins a cgroup leaf, enters the namespaces of the
//!   sandbox's PID 1 (its root is the pivoted root), forks, and the child
//!   joins PID 1's user namespace as its root, drops privileges, applies
//!   seccomp and execs the command. The outcome is
//!   written as JSON ([`crate::shim_proto::ExecStatus`]) to `status_path` (opened before
//!   entering the sandbox's mount namespace).
//!
//! Layout: `config` (what the daemon sends, what an exec reports),
//! `init` (the `init` mode and PID 1's reaper loop), `rootfs` (PID 1's
//! mounts and pivot), `input_mount` (read-only input binds), `jail`
//! (capabilities and seccomp), `exec` (the `exec` mode), `process` (cgroup
//! joins and pipes both modes use).

mod exec;
mod init;
mod input_mount;
pub(crate) mod jail;
mod process;
mod rootfs;

use std::fs;

/// Subcommand under which the `stasis` binary must call [`shim_main`].
pub const SHIM_SUBCOMMAND: &str = "__process-shim";

/// Call first thing in `main` (before any thread or async runtime starts):
/// when the process was started as `<exe> __process-shim ...`, runs the shim
/// and never returns; otherwise returns and the program carries on.
pub fn dispatch_if_shim() {
    if std::env::args().nth(1).as_deref() == Some(SHIM_SUBCOMMAND) {
        shim_main()
    }
}

/// Entry point of the shim; never returns.
pub fn shim_main() -> ! {
    let args: Vec<String> = std::env::args().collect();
    let n = args.len();
    if n < 3 {
        eprintln!("usage: {SHIM_SUBCOMMAND} (init|exec|supervise) CONFIG");
        std::process::exit(2);
    }
    // unshare(CLONE_NEWNS) and setns(mnt) refuse multi-threaded callers:
    // the `stasis` binary must dispatch here before starting any runtime.
    let threads = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().to_string()))
        })
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1);
    if threads > 1 {
        eprintln!(
            "stasis shim: called with {threads} threads; dispatch `{SHIM_SUBCOMMAND}` before starting any thread or async runtime"
        );
        println!("error shim started multi-threaded ({threads} threads): dispatch it before the async runtime starts");
        std::process::exit(125);
    }
    let code = match args[n - 2].as_str() {
        "init" => init::run_init(&args[n - 1]),
        "exec" => exec::run_exec(&args[n - 1]),
        "supervise" => match crate::shim_proto::read_config(&args[n - 1]) {
            Ok(cfg) => crate::supervisor::run_supervise(cfg),
            Err(e) => {
                println!("error {e}");
                1
            }
        },
        other => {
            eprintln!("stasis shim: unknown mode {other:?}");
            2
        }
    };
    std::process::exit(code)
}
