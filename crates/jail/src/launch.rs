//! Starting a process inside a planned jail: clone into the namespaces,
//! build the root, drop privileges, fork the program under a reaping init.
//! Everything after the clone runs on data prepared before it (the child of
//! a multi-threaded process may not allocate).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use stasis_core::{Error, Result};

use super::{resolve_bin, Bind, JailSpec};

/// The C strings and flags the child needs, built before the clone (the
/// child of a multi-threaded process may not allocate).
struct Plan {
    staging: CString,
    mkdirs: Vec<CString>,
    /// (source, target, dir, remount flags)
    mounts: Vec<(CString, CString, bool, libc::c_ulong)>,
    cwd: CString,
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
    new_root_dot: CString,
    slash: CString,
    tmpfs: CString,
    tmpfs_opts: CString,
    exe: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    no_thp: bool,
    stdin: RawFd,
    log: RawFd,
    err: RawFd,
}

/// Steps of the child, reported with errno when one fails.
const STEPS: &[&str] = &[
    "setsid",
    "make / private",
    "mount the jail tmpfs",
    "mkdir",
    "create a mount point",
    "bind mount",
    "remount read-only",
    "remount the jail root read-only",
    "chdir to the jail root",
    "pivot_root",
    "detach the host root",
    "chdir to the sandbox directory",
    "setgroups",
    "setresgid",
    "setresuid",
    "no_new_privs",
    "dup2",
    "exec",
    "fork the program from the jail's init",
];

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("{}: NUL in path", p.display())))
}

/// One bind mount as the launcher makes it: source, target under the
/// staging root, directory or file, and the flags of its read-only/noexec/
/// nodev remount.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    src: PathBuf,
    dst: PathBuf,
    dir: bool,
    flags: libc::c_ulong,
}

/// The directories to create under `staging` (parents first) and the bind
/// mounts, for `binds` (each at its host path below `staging`).
fn mount_plan(staging: &Path, binds: &[Bind]) -> (Vec<PathBuf>, Vec<Mount>) {
    let mut mkdirs: Vec<PathBuf> = Vec::new();
    let mut mounts = Vec::new();
    for b in binds {
        let target = staging.join(b.path.strip_prefix("/").unwrap_or(&b.path));
        let mut anc: Vec<PathBuf> = target
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(staging) && *a != staging)
            .map(Path::to_path_buf)
            .collect();
        anc.reverse();
        for a in anc {
            if !mkdirs.contains(&a) {
                mkdirs.push(a);
            }
        }
        let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID;
        if !b.writable {
            flags |= libc::MS_RDONLY;
        }
        if !b.device {
            flags |= libc::MS_NODEV;
        }
        if !b.exec {
            flags |= libc::MS_NOEXEC;
        }
        mounts.push(Mount {
            src: b.path.clone(),
            dst: target,
            dir: b.dir,
            flags,
        });
    }
    (mkdirs, mounts)
}

/// A jailed program: its host pid and the jail's init (pid 1 of the jail's
/// pid namespace, a child of this process: reap it with waitpid). The init
/// only reaps (anything re-parented to pid 1 would otherwise stay a
/// zombie). It exits with the program, which takes the whole namespace
/// down.
#[derive(Debug, Clone, Copy)]
pub struct Jailed {
    pub child: i32,
    pub init: i32,
}

/// Start `exe args` in the jail `spec`; stdout/stderr go to `log`.
pub fn spawn(spec: &JailSpec, exe: &Path, args: &[String], log: &std::fs::File) -> Result<Jailed> {
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::backend(
            "the jail needs a daemon running as root (namespaces, mounts, uid switch)",
        ));
    }
    std::fs::create_dir_all(&spec.staging)?;
    let exe = resolve_bin(exe)?;
    let (mkdirs, planned) = mount_plan(&spec.staging, &spec.binds);
    let mounts = planned
        .iter()
        .map(|m| Ok((cstr(&m.src)?, cstr(&m.dst)?, m.dir, m.flags)))
        .collect::<Result<_>>()?;
    let args_c: Vec<CString> = std::iter::once(cstr(&exe))
        .chain(args.iter().map(|a| {
            CString::new(a.as_bytes())
                .map_err(|_| Error::invalid("NUL in an argument of the jailed program"))
        }))
        .collect::<Result<_>>()?;
    let mut argv: Vec<*const libc::c_char> = args_c.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envp: Vec<*const libc::c_char> = vec![std::ptr::null()];
    let null = std::fs::File::open("/dev/null")?;
    let (rd, wr) = {
        let mut fds = [0; 2];
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    };
    let plan = Plan {
        staging: cstr(&spec.staging)?,
        mkdirs: mkdirs.iter().map(|p| cstr(p)).collect::<Result<_>>()?,
        mounts,
        cwd: cstr(&spec.cwd)?,
        uid: spec.uid,
        gid: spec.gid,
        groups: spec.groups.clone(),
        new_root_dot: CString::new(".").unwrap(),
        slash: CString::new("/").unwrap(),
        tmpfs: CString::new("tmpfs").unwrap(),
        tmpfs_opts: CString::new("mode=0755,size=1m,nr_inodes=4096").unwrap(),
        exe: cstr(&exe)?,
        argv,
        envp,
        no_thp: spec.no_thp,
        stdin: null.as_raw_fd(),
        log: log.as_raw_fd(),
        err: wr.as_raw_fd(),
    };
    let mut flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if spec.new_net {
        flags |= libc::CLONE_NEWNET;
    }
    let mut stack = vec![0u8; 256 << 10];
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) };
    let top = (top as usize & !15) as *mut libc::c_void;
    let pid = unsafe {
        libc::clone(
            child,
            top,
            flags | libc::SIGCHLD,
            &plan as *const Plan as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(Error::backend(format!(
            "cannot start the jail: clone: {}",
            std::io::Error::last_os_error()
        )));
    }
    drop(wr);
    // EOF: exec succeeded (the pipe is close-on-exec); else the failed step.
    // Bounded: a start that reports nothing in time is killed, not waited for.
    let deadline = std::time::Instant::now() + EXEC_REPORT_TIMEOUT;
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut pfd = libc::pollfd {
            fd: rd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ready =
            unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if ready < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if ready == 0 {
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let mut status = 0;
            unsafe { libc::waitpid(pid, &mut status, 0) };
            return Err(Error::timeout(format!(
                "the jail did not report its start within {} s; killed",
                EXEC_REPORT_TIMEOUT.as_secs()
            )));
        }
        let n = unsafe { libc::read(rd.as_raw_fd(), buf[got..].as_mut_ptr().cast(), 8 - got) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    drop(plan);
    drop(stack);
    if got == 0 {
        // The program is the init's only child (forked before the pipe
        // closed).
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(child) = children
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
        {
            return Ok(Jailed { child, init: pid });
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(Error::backend(format!(
            "the jailed program exited as soon as it started (status {status})"
        )));
    }
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let step = i32::from_ne_bytes(buf[..4].try_into().unwrap());
    let errno = i32::from_ne_bytes(buf[4..].try_into().unwrap());
    Err(Error::backend(format!(
        "cannot start the program in its jail: {}: {}",
        STEPS.get(step as usize).unwrap_or(&"?"),
        std::io::Error::from_raw_os_error(errno)
    )))
}

/// How long a jail start may take to exec the program or report its failed
/// step.
const EXEC_REPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Close every descriptor from `low` up (in the cloned child: system calls
/// only). `close_range` where the kernel has it, else one by one.
unsafe fn close_from(low: libc::c_uint) {
    if libc::syscall(
        libc::SYS_close_range,
        low,
        libc::c_uint::MAX,
        0 as libc::c_uint,
    ) == 0
    {
        return;
    }
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 {
        rl.rlim_cur.min(1 << 16) as libc::c_int
    } else {
        1024
    };
    for fd in low as libc::c_int..max {
        libc::close(fd);
    }
}

fn fail(err: RawFd, step: usize) -> ! {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&(step as i32).to_ne_bytes());
    b[4..].copy_from_slice(&errno.to_ne_bytes());
    unsafe {
        libc::write(err, b.as_ptr().cast(), 8);
        libc::_exit(127)
    }
}

/// The cloned child: only system calls on the prepared plan.
extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    let p = unsafe { &*(arg as *const Plan) };
    let null = std::ptr::null::<libc::c_char>();
    let nulv = std::ptr::null::<libc::c_void>();
    unsafe {
        if libc::setsid() < 0 {
            fail(p.err, 0);
        }
        if libc::mount(
            null,
            p.slash.as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            nulv,
        ) < 0
        {
            fail(p.err, 1);
        }
        if libc::mount(
            p.tmpfs.as_ptr(),
            p.staging.as_ptr(),
            p.tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            p.tmpfs_opts.as_ptr().cast(),
        ) < 0
        {
            fail(p.err, 2);
        }
        for d in &p.mkdirs {
            if libc::mkdir(d.as_ptr(), 0o755) < 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
            {
                fail(p.err, 3);
            }
        }
        for (src, dst, dir, flags) in &p.mounts {
            if *dir {
                if libc::mkdir(dst.as_ptr(), 0o755) < 0
                    && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                {
                    fail(p.err, 4);
                }
            } else {
                let fd = libc::open(
                    dst.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    fail(p.err, 4);
                }
                libc::close(fd);
            }
            if libc::mount(src.as_ptr(), dst.as_ptr(), null, libc::MS_BIND, nulv) < 0 {
                fail(p.err, 5);
            }
            if libc::mount(null, dst.as_ptr(), null, *flags, nulv) < 0 {
                fail(p.err, 6);
            }
        }
        if libc::mount(
            null,
            p.staging.as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            nulv,
        ) < 0
        {
            fail(p.err, 7);
        }
        if libc::chdir(p.staging.as_ptr()) < 0 {
            fail(p.err, 8);
        }
        if libc::syscall(
            libc::SYS_pivot_root,
            p.new_root_dot.as_ptr(),
            p.new_root_dot.as_ptr(),
        ) < 0
        {
            fail(p.err, 9);
        }
        if libc::umount2(p.new_root_dot.as_ptr(), libc::MNT_DETACH) < 0 {
            fail(p.err, 10);
        }
        if libc::chdir(p.cwd.as_ptr()) < 0 {
            fail(p.err, 11);
        }
        if libc::setgroups(p.groups.len(), p.groups.as_ptr()) < 0 {
            fail(p.err, 12);
        }
        if libc::setresgid(p.gid, p.gid, p.gid) < 0 {
            fail(p.err, 13);
        }
        if libc::setresuid(p.uid, p.uid, p.uid) < 0 {
            fail(p.err, 14);
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            fail(p.err, 15);
        }
        if p.no_thp {
            // Best effort: memory use only.
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
        if libc::dup2(p.stdin, 0) < 0 || libc::dup2(p.log, 1) < 0 || libc::dup2(p.log, 2) < 0 {
            fail(p.err, 16);
        }
        // A raw fork (no atfork handlers: this is the copy of a
        // multi-threaded process).
        let prog = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0);
        if prog < 0 {
            fail(p.err, 18);
        }
        if prog == 0 {
            libc::execve(p.exe.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
            fail(p.err, 17)
        }
        // The init: hold nothing, reap everything, leave with the program.
        libc::prctl(libc::PR_SET_NAME, c"stasis-jail".as_ptr(), 0, 0, 0);
        for fd in [p.err, 0, 1, 2] {
            libc::close(fd);
        }
        // Nor any other descriptor of the daemon's copied at clone: among
        // them can be the write end of another jail's exec-report pipe
        // (opened by a concurrent start); an init holding it would keep that
        // start's read below from ever seeing EOF while this program lives.
        close_from(3);
        loop {
            let mut status = 0;
            let r = libc::waitpid(-1, &mut status, 0);
            if r == prog as libc::pid_t {
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                };
                libc::_exit(code)
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                libc::_exit(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_become_mounts_at_their_host_paths_below_the_staging_root() {
        let staging = Path::new("/run/j");
        let binds = [
            Bind::file("/usr/bin/prog".into(), true),
            Bind::file("/usr/lib/x/libc.so".into(), true),
            Bind::file("/data/kernel".into(), false),
            Bind::device("/dev/null".into()),
            Bind {
                path: "/srv/sb/1".into(),
                dir: true,
                writable: true,
                exec: false,
                device: false,
            },
        ];
        let (mkdirs, mounts) = mount_plan(staging, &binds);
        // Every parent once, parents before children, none outside staging.
        let want: Vec<PathBuf> = [
            "/run/j/usr",
            "/run/j/usr/bin",
            "/run/j/usr/lib",
            "/run/j/usr/lib/x",
            "/run/j/data",
            "/run/j/dev",
            "/run/j/srv",
            "/run/j/srv/sb",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(mkdirs, want);
        let by = |p: &str| mounts.iter().find(|m| m.src == Path::new(p)).unwrap();
        assert_eq!(by("/usr/bin/prog").dst, Path::new("/run/j/usr/bin/prog"));
        let base = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID;
        // Code: read-only, no devices, executable.
        assert_eq!(
            by("/usr/bin/prog").flags,
            base | libc::MS_RDONLY | libc::MS_NODEV
        );
        // Data: read-only, no devices, no exec.
        assert_eq!(
            by("/data/kernel").flags,
            base | libc::MS_RDONLY | libc::MS_NODEV | libc::MS_NOEXEC
        );
        // A device: writable, device access, no exec.
        assert_eq!(by("/dev/null").flags, base | libc::MS_NOEXEC);
        // The working directory: writable, whole, nothing else.
        let sb = by("/srv/sb/1");
        assert!(sb.dir);
        assert_eq!(sb.flags, base | libc::MS_NODEV | libc::MS_NOEXEC);
        assert_eq!(mounts.len(), binds.len());
    }
}
