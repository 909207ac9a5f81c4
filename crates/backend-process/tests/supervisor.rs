//! The sandbox supervisor: processes, sessions and their buffered output
//! outlive the daemon (a second backend instance stands for the daemon after
//! a restart), and the supervisor's own death is reported, not hung on.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stasis_backend::{Backend, Recovered, SandboxSpec};
use stasis_backend_process::ProcessBackend;
use stasis_core::{ErrorCode, SessionSpec};

fn session(argv: &[&str]) -> SessionSpec {
    SessionSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        pty: None,
        user: None,
    }
}

/// Read a session from `off` until its text contains `needle`.
async fn read_until(
    be: &ProcessBackend,
    spec: &SandboxSpec,
    sid: &str,
    off: u64,
    needle: &str,
) -> (String, u64) {
    let (mut text, mut off) = (String::new(), off);
    let t = Instant::now();
    while !text.contains(needle) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no {needle:?} in {text:?}"
        );
        let o = be.session_read(&spec.id, sid, off, wait()).await.unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
    (text, off)
}

/// The supervisor of one sandbox (in its cgroup, running `supervise`; a
/// child it just spawned may sit there too until it joins its leaf).
fn supervisor_pids(e: &Env, spec: &SandboxSpec) -> Vec<i32> {
    in_supervisor_cgroup(e, spec)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|a| a == b"supervise"))
                .unwrap_or(false)
        })
        .collect()
}

fn in_supervisor_cgroup(e: &Env, spec: &SandboxSpec) -> Vec<i32> {
    let p = format!(
        "/sys/fs/cgroup/freezer/{}/{}/{}/cgroup.procs",
        e.parent,
        stasis_backend_process::cgroup::SUPERVISORS,
        spec.id
    );
    let p = if std::path::Path::new(&p).exists() {
        p
    } else {
        format!(
            "/sys/fs/cgroup/{}/{}/{}/cgroup.procs",
            e.parent,
            stasis_backend_process::cgroup::SUPERVISORS,
            spec.id
        )
    };
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect()
}

/// Gone, or exited (every thread) and not reaped yet by its new parent.
fn dead(pid: i32) -> bool {
    // Asked the way the backend asks (its pidfd polls readable): a killed
    // multi-threaded process shows its leader as a zombie in /proc while
    // its other threads are still exiting, and until they are gone the
    // backend rightly still sees it alive.
    // SAFETY: pidfd_open takes no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return true;
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one fd we own without waiting, then close it.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    unsafe { libc::close(fd) };
    r != 0
}

fn ticks(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.trim().parse().ok()))
        .collect()
}

/// Sessions (an interpreter with a variable, a ticking background job, a
/// job whose output overflows the buffer while no daemon is attached) and a
/// background process started by exec survive the daemon: a new backend
/// reattaches, reads every byte produced meanwhile (up to the buffer
/// limit), writes to the interpreter, pauses, resumes and destroys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_processes_survive_a_daemon_restart() {
    const CAP: usize = 64 * 1024;
    let e = env_with("sup-restart", |c| c.session_buffer = CAP);
    let spec = e.create().await;
    let id = &spec.id;
    e.be.write_file(id, "data", b"kept", None).await.unwrap();
    run(&e, &spec, sh("(sleep 104 &) ; echo ok")).await;
    let py =
        e.be.session_start(id, session(&["python3", "-i", "-u", "-q"]))
            .await
            .unwrap();
    e.be.session_write(id, &py.id, b"x = 41\nprint('set', x)\n")
        .await
        .unwrap();
    read_until(&e.be, &spec, &py.id, 0, "set 41").await;
    let ticker =
        e.be.session_start(
            id,
            session(&[
                "sh",
                "-c",
                "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.1; done",
            ]),
        )
        .await
        .unwrap();
    let (_, tick_off) = read_until(&e.be, &spec, &ticker.id, 0, "tick 2\n").await;
    // Waits for a file the test writes once the first backend is gone,
    // then prints far more than the buffer holds.
    let flood =
        e.be.session_start(
            id,
            session(&[
                "sh",
                "-c",
                "while [ ! -e go ]; do sleep 0.05; done; seq 1 100000; echo END",
            ]),
        )
        .await
        .unwrap();

    // "Restart": a new backend instance knows nothing but the specs.
    let be2 = ProcessBackend::new(e.be.config().clone());
    assert_eq!(be2.recover(&spec).await.unwrap(), Recovered::Running);
    assert!(!host_pids_with("sleep 104").is_empty());
    assert_eq!(be2.read_file(id, "data", 100).await.unwrap(), b"kept");
    be2.write_file(id, "go", b"", None).await.unwrap();

    let mut ids: Vec<String> = be2
        .session_list(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    let mut want = vec![py.id.clone(), ticker.id.clone(), flood.id.clone()];
    want.sort();
    assert_eq!(ids, want);
    // The interpreter kept its variable and takes input from the new daemon.
    be2.session_write(id, &py.id, b"print('now', x + 1)\n")
        .await
        .unwrap();
    read_until(&be2, &spec, &py.id, 0, "now 42").await;
    // The ticker went on; its stream has no gap or repeat.
    let (_, off2) = read_until(&be2, &spec, &ticker.id, tick_off, "tick 6\n").await;
    assert!(off2 > tick_off);
    let all = be2.session_read(id, &ticker.id, 0, wait()).await.unwrap();
    assert_eq!(all.offset, 0);
    let t = ticks(&String::from_utf8_lossy(&all.data));
    assert_eq!(t, (0..t.len() as u64).collect::<Vec<_>>());
    // The flood's output: the newest CAP bytes, at absolute offsets.
    let total: u64 = (1..=100_000u64)
        .map(|n| n.to_string().len() as u64 + 1)
        .sum::<u64>()
        + 4;
    let t0 = Instant::now();
    let o = loop {
        let o = be2.session_read(id, &flood.id, 0, wait()).await.unwrap();
        if !o.running {
            break o;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "flood still running"
        );
    };
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(o.next_offset, total);
    assert_eq!(o.offset, total - CAP as u64);
    assert_eq!(o.data.len(), CAP);
    assert!(o.data.ends_with(b"\n99999\n100000\nEND\n"));

    // Pause (freeze) and resume through the new instance.
    let arts = e.tmp.path().join("p");
    be2.pause(id, &arts, true).await.unwrap();
    let err = be2.session_write(id, &py.id, b"x\n").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState);
    // Buffered output is served while frozen.
    let frozen = be2
        .session_read(id, &ticker.id, 0, Duration::ZERO)
        .await
        .unwrap();
    assert!(frozen.running && !frozen.data.is_empty());
    assert!(
        !be2.resume_needs_artifacts(&spec, &stasis_core::SnapshotId::generate())
            .await
    );
    be2.resume(&spec, &arts).await.unwrap();
    be2.session_write(id, &py.id, b"print('after', x)\n")
        .await
        .unwrap();
    read_until(&be2, &spec, &py.id, 0, "after 41").await;
    assert!(!host_pids_with("sleep 104").is_empty());

    // Destroy: sandbox, sessions and supervisor all go.
    let sups = supervisor_pids(&e, &spec);
    assert_eq!(sups.len(), 1, "{sups:?}");
    be2.destroy(id, &spec.dir).await.unwrap();
    assert!(host_pids_with("sleep 104").is_empty());
    assert!(dead(sups[0]), "supervisor survived destroy");
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}

/// A sandbox paused with memory stays frozen across a restart: the new
/// instance reports it not running (the server keeps it paused), needs no
/// artifacts, and its resume thaws the same processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_sandbox_stays_paused_across_a_restart() {
    let e = env("sup-frozen");
    let spec = e.create().await;
    let id = &spec.id;
    let py =
        e.be.session_start(id, session(&["python3", "-i", "-u", "-q"]))
            .await
            .unwrap();
    e.be.session_write(id, &py.id, b"x = 5\n").await.unwrap();
    run(&e, &spec, sh("(sleep 106 &) ; echo ok")).await;
    let arts = e.tmp.path().join("arts");
    e.be.pause(id, &arts, true).await.unwrap();
    let be2 = ProcessBackend::new(e.be.config().clone());
    assert_eq!(be2.recover(&spec).await.unwrap(), Recovered::NotRunning);
    assert!(!host_pids_with("sleep 106").is_empty());
    assert!(
        !be2.resume_needs_artifacts(&spec, &stasis_core::SnapshotId::generate())
            .await
    );
    be2.resume(&spec, &arts).await.unwrap();
    be2.session_write(id, &py.id, b"print('x is', x * 2)\n")
        .await
        .unwrap();
    read_until(&be2, &spec, &py.id, 0, "x is 10").await;
    be2.destroy(id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}

/// The supervisor killed (-9): requests fail with a clear error at once
/// (no hang); a restart then finds no supervisor, ends what is left and
/// reports the sandbox not running; resume rebuilds it from its files.
/// cleanup_orphans removes sandboxes (and supervisors) nobody knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_death_is_reported_and_recovered() {
    let e = env("sup-death");
    let spec = e.create().await;
    let id = &spec.id;
    e.be.write_file(id, "data", b"survives", None)
        .await
        .unwrap();
    run(&e, &spec, sh("(sleep 107 &) ; echo ok")).await;
    let s = e.be.session_start(id, session(&["sh"])).await.unwrap();
    let sups = supervisor_pids(&e, &spec);
    assert_eq!(sups.len(), 1, "{sups:?}");
    unsafe { libc::kill(sups[0], libc::SIGKILL) };
    let t = Instant::now();
    while !dead(sups[0]) && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let err = e.be.exec(id, sh("true"), None).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::BackendError);
    assert!(err.message.contains("supervisor"), "{}", err.message);
    let err = e.be.session_read(id, &s.id, 0, wait()).await.unwrap_err();
    assert!(err.message.contains("supervisor"), "{}", err.message);
    assert!(t.elapsed() < Duration::from_secs(5));

    let be2 = ProcessBackend::new(e.be.config().clone());
    assert_eq!(be2.recover(&spec).await.unwrap(), Recovered::NotRunning);
    assert!(host_pids_with("sleep 107").is_empty());
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    let empty = e.tmp.path().join("none");
    std::fs::create_dir_all(&empty).unwrap();
    be2.resume(&spec, &empty).await.unwrap();
    assert_eq!(be2.read_file(id, "data", 100).await.unwrap(), b"survives");
    assert!(be2.session_list(id).await.unwrap().is_empty());

    let spec3 = e.create().await;
    run(&e, &spec3, sh("(sleep 105 &) ; echo ok")).await;
    assert_eq!(supervisor_pids(&e, &spec3).len(), 1);
    be2.cleanup_orphans(std::slice::from_ref(&spec.id))
        .await
        .unwrap();
    assert!(host_pids_with("sleep 105").is_empty());
    assert!(in_supervisor_cgroup(&e, &spec3).is_empty());
    assert_eq!(be2.usage(id).await.unwrap().host_processes, 2);
    be2.destroy(id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}

/// A unix socket address holds at most 107 bytes; a sandbox directory
/// deeper than that still gets a supervisor, and a restart reattaches to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_sandbox_paths_work() {
    let e = env("sup-long");
    let mut spec = e.spec(stasis_core::Manifest::default());
    let deep = e
        .tmp
        .path()
        .join("d".repeat(120))
        .join("sandboxes")
        .join(spec.id.as_str());
    std::fs::create_dir_all(&deep).unwrap();
    spec.dir = deep;
    assert!(spec.dir.join("run/supervisor.sock").as_os_str().len() > 108);
    e.be.create(&spec).await.unwrap();
    let s =
        e.be.session_start(&spec.id, session(&["sh", "-c", "echo hello; sleep 100"]))
            .await
            .unwrap();
    let be2 = ProcessBackend::new(e.be.config().clone());
    assert_eq!(be2.recover(&spec).await.unwrap(), Recovered::Running);
    read_until(&be2, &spec, &s.id, 0, "hello\n").await;
    be2.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}

/// On a cgroup v1 host a service manager tracks the daemon through its own
/// hierarchies (`name=systemd`, the hybrid cgroup2 mount): the sandbox's
/// processes and its supervisor leave the daemon's cgroup there too, so a
/// service restart that kills the daemon's cgroup does not reach them; and
/// destroy removes those cgroups as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_leave_the_daemons_service_cgroup() {
    let cgs = stasis_backend_process::cgroup::Cgroups::detect().unwrap();
    if cgs.service.is_empty() {
        eprintln!("no service-tracking hierarchy on this host (cgroup v2): nothing to check");
        return;
    }
    let e = env("sup-service");
    let spec = e.create().await;
    let s =
        e.be.session_start(&spec.id, session(&["sleep", "108"]))
            .await
            .unwrap();
    let sup = supervisor_pids(&e, &spec)[0];
    let init: i32 = std::fs::read_to_string(spec.dir.join("run/init.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let t = Instant::now();
    while host_pids_with("sleep 108").is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sleeper = host_pids_with("sleep 108")[0];
    let sub = |p: &str| format!("/{}/{}", e.parent, p);
    for (pid, want) in [
        (sup, sub(&format!(".supervisors/{}", spec.id))),
        (init, sub(&format!("{}/init", spec.id))),
        (sleeper, sub(&format!("{}/", spec.id))),
    ] {
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        for line in cg.lines() {
            let mut f = line.splitn(3, ':');
            let (_, ctl, path) = (f.next(), f.next().unwrap(), f.next().unwrap());
            if ctl.starts_with("name=") || ctl.is_empty() {
                assert!(path.starts_with(&want), "pid {pid}: {line} (want {want})");
            }
        }
    }
    e.be.session_kill(&spec.id, &s.id, Default::default())
        .await
        .unwrap();
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    for svc in &cgs.service {
        let d = svc.join(&e.parent).join(spec.id.as_str());
        assert!(!d.exists(), "{} left behind", d.display());
        let d = svc
            .join(&e.parent)
            .join(stasis_backend_process::cgroup::SUPERVISORS)
            .join(spec.id.as_str());
        assert!(!d.exists(), "{} left behind", d.display());
    }
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}

/// Everything a session printed once it ended: (stdout, stderr, combined, exit).
async fn read_to_end(
    be: &ProcessBackend,
    spec: &SandboxSpec,
    sid: &str,
) -> (String, String, String, Option<i32>) {
    let (mut out, mut err, mut all, mut off) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let t = Instant::now();
    loop {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "session {sid} never ended"
        );
        let o = be.session_read(&spec.id, sid, off, wait()).await.unwrap();
        let (so, se) = o.split();
        out.extend(so);
        err.extend(se);
        all.extend(&o.data);
        off = o.next_offset;
        if !o.running && o.data.is_empty() {
            let s = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
            return (s(out), s(err), s(all), o.exit_code);
        }
    }
}

/// A session without a terminal reports stdout and stderr apart (and
/// still together), and a signal reaches its command: an untrapped ^C ends
/// it with 130, a trapped one runs the program's handler; a killed session
/// keeps its output and status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_streams_apart_and_signals_reach_the_command() {
    use stasis_core::SessionSignal;
    // As when the daemon runs as a background job of a script: SIGINT
    // ignored, which the supervisor and the sessions would inherit.
    // SAFETY: setting a disposition; the test runs no handler.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    let e = env("sup-signal");
    let spec = e.create().await;
    let id = &spec.id;
    let s =
        e.be.session_start(
            id,
            session(&["sh", "-c", "echo out1; echo err1 >&2; echo out2"]),
        )
        .await
        .unwrap();
    let (out, err, all, code) = read_to_end(&e.be, &spec, &s.id).await;
    assert_eq!(
        (out.as_str(), err.as_str(), code),
        ("out1\nout2\n", "err1\n", Some(0))
    );
    assert_eq!(all.len(), out.len() + err.len());

    // Start `script`, wait for its `marker`, send `sig`, read it to its end.
    let signalled = |script: &'static str, marker: &'static str, sig: SessionSignal| {
        let (e, spec) = (&e, &spec);
        async move {
            let s =
                e.be.session_start(&spec.id, session(&["sh", "-c", script]))
                    .await
                    .unwrap();
            read_until(&e.be, spec, &s.id, 0, marker).await;
            e.be.session_kill(&spec.id, &s.id, sig).await.unwrap();
            read_to_end(&e.be, spec, &s.id).await
        }
    };
    let (_, _, all, code) =
        signalled("echo ready; exec sleep 1000", "ready", SessionSignal::Int).await;
    assert_eq!(code, Some(130), "{all}");
    let trap = "trap 'echo caught; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    let (out, _, all, code) = signalled(trap, "ready", SessionSignal::Int).await;
    assert_eq!(code, Some(7), "{all}");
    assert!(out.contains("caught"), "{out}");
    let (_, _, all, code) = signalled(
        "echo before; exec sleep 1000",
        "before",
        SessionSignal::Kill,
    )
    .await;
    assert_eq!((all.as_str(), code), ("before\n", Some(137)));
    e.be.destroy(id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}
