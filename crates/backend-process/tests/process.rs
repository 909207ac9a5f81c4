//! Drives the real process backend as root. Each test has its own temp dir
//! and its own cgroup parent.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stasis_backend::{ArtifactKind, Backend};
use stasis_core::{ErrorCode, FileKind, Manifest, SessionSpec, Stream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_cwd_stdin_streaming() {
    let e = env("envcwd");
    let mut m = Manifest::default();
    m.env.insert("FOO".into(), "m1".into());
    m.env.insert("BAR".into(), "m2".into());
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();

    let mut r = sh("echo $FOO $BAR; pwd");
    r.env.insert("BAR".into(), "req".into());
    let res = run(&e, &spec, r).await;
    assert_eq!(out(&res), "m1 req\n/workspace\n");

    run(&e, &spec, sh("mkdir -p /workspace/sub")).await;
    let mut r = req(&["pwd"]);
    r.cwd = Some("sub".into());
    assert_eq!(out(&run(&e, &spec, r).await), "/workspace/sub\n");
    let mut r = req(&["pwd"]);
    r.cwd = Some("/nope".into());
    let err = e.be.exec(&spec.id, r, None).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");

    let mut r = req(&["cat"]);
    r.stdin = Some(b"from stdin".to_vec());
    assert_eq!(out(&run(&e, &spec, r).await), "from stdin");

    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let res =
        e.be.exec(&spec.id, sh("echo a; sleep 0.1; echo b >&2"), Some(tx))
            .await
            .unwrap();
    assert!(res.stdout.is_empty());
    let mut got = Vec::new();
    while let Some(c) = rx.recv().await {
        got.push((c.stream, String::from_utf8_lossy(&c.data).into_owned()));
    }
    assert_eq!(
        got,
        vec![
            (Stream::Stdout, "a\n".into()),
            (Stream::Stderr, "b\n".into())
        ]
    );

    // Capture limit.
    let res = run(&e, &spec, sh("head -c 20000000 /dev/zero")).await;
    assert_eq!(res.stdout.len(), 16 << 20);
    assert!(res.truncated);

    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_process_tree() {
    let e = env("timeout");
    let spec = e.create().await;
    let mut r = sh("sleep 101 & sleep 102; echo never");
    r.timeout_ms = 500;
    let t = Instant::now();
    let res = run(&e, &spec, r).await;
    assert!(res.timed_out);
    assert_eq!(res.exit_code, None);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(host_pids_with("sleep 101").is_empty());
    assert!(host_pids_with("sleep 102").is_empty());
    // Only PID 1 and its host-side waiter remain.
    let u = e.be.usage(&spec.id).await.unwrap();
    assert_eq!(u.host_processes, 2, "{u:?}");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_round_trip() {
    let e = env("files");
    let spec = e.create().await;
    let id = &spec.id;
    e.be.write_file(id, "a/b/c.txt", b"hello", Some(0o600))
        .await
        .unwrap();
    assert_eq!(
        e.be.read_file(id, "/workspace/a/b/c.txt", 100)
            .await
            .unwrap(),
        b"hello"
    );
    let r = run(&e, &spec, sh("cat a/b/c.txt; stat -c %a a/b/c.txt")).await;
    assert_eq!(out(&r), "hello600\n");
    let l = e.be.list_files(id, "a/b").await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].name, "c.txt");
    assert_eq!(l[0].kind, FileKind::File);
    assert_eq!(l[0].size, 5);
    assert_eq!(l[0].mode, 0o600);
    let l = e.be.list_files(id, "/").await.unwrap();
    assert!(l.iter().any(|f| f.name == "usr" && f.kind == FileKind::Dir));
    // Overwrite truncates.
    e.be.write_file(id, "a/b/c.txt", b"x", None).await.unwrap();
    assert_eq!(e.be.read_file(id, "a/b/c.txt", 100).await.unwrap(), b"x");
    let err = e.be.read_file(id, "missing", 100).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    let err = e.be.list_files(id, "missing").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    e.be.write_file(id, "big", &vec![7u8; 1000], None)
        .await
        .unwrap();
    let err = e.be.read_file(id, "big", 999).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::PayloadTooLarge);
    assert_eq!(e.be.read_file(id, "big", 1000).await.unwrap().len(), 1000);
    let err = e.be.read_file(id, "a", 100).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    // Files written by processes are visible to the API.
    run(&e, &spec, sh("printf made > /tmp/p.txt")).await;
    assert_eq!(
        e.be.read_file(id, "/tmp/p.txt", 100).await.unwrap(),
        b"made"
    );
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_traversal_and_symlink_escape_refused() {
    let e = env("escape");
    let spec = e.create().await;
    let id = &spec.id;
    // A host file the sandbox must never see, and the sandbox's own passwd.
    let host_dir = e.tmp.path().join("hostonly");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(host_dir.join("secret"), b"host secret").unwrap();
    let host_rel = host_dir.strip_prefix("/").unwrap().display().to_string();
    run(&e, &spec, sh("echo sandbox-passwd > /etc/passwd")).await;
    let r = run(
        &e,
        &spec,
        sh("ln -s /etc/passwd pw && ln -s ../../../../../../.. up && ln -s /proc/self/root pr && ln -s /proc/1/root p1"),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");

    // Absolute symlink resolves inside the sandbox.
    assert_eq!(
        e.be.read_file(id, "pw", 1000).await.unwrap(),
        b"sandbox-passwd\n"
    );
    // `..` out of the root is refused lexically.
    let err =
        e.be.read_file(id, "../../etc/passwd", 1000)
            .await
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    let err =
        e.be.read_file(id, "/../../../etc/passwd", 1000)
            .await
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument);
    // `..` symlinks stay inside: the host file is not reachable.
    for p in [
        format!("up/{host_rel}/secret"),
        format!("up/up/up/{host_rel}/secret"),
        format!("pr/{host_rel}/secret"),
        format!("p1/{host_rel}/secret"),
    ] {
        match e.be.read_file(id, &p, 1000).await {
            Ok(data) => assert_ne!(data, b"host secret", "{p} reached the host"),
            Err(err) => assert!(
                matches!(err.code, ErrorCode::NotFound | ErrorCode::InvalidArgument),
                "{p}: {err}"
            ),
        }
    }
    // Through `up`, /etc/passwd is still the sandbox's.
    assert_eq!(
        e.be.read_file(id, "up/etc/passwd", 1000).await.unwrap(),
        b"sandbox-passwd\n"
    );
    // Writing through the symlinks never creates host files.
    let _ =
        e.be.write_file(id, &format!("up/{host_rel}/created"), b"x", None)
            .await;
    let _ =
        e.be.write_file(id, &format!("pr/{host_rel}/created2"), b"x", None)
            .await;
    assert!(!host_dir.join("created").exists());
    assert!(!host_dir.join("created2").exists());
    // A write through an absolute symlink lands in the sandbox.
    run(&e, &spec, sh("ln -s /etc/stasis-target-file tgt")).await;
    e.be.write_file(id, "tgt", b"inside", None).await.unwrap();
    assert!(!std::path::Path::new("/etc/stasis-target-file").exists());
    assert_eq!(
        out(&run(&e, &spec, sh("cat /etc/stasis-target-file")).await),
        "inside"
    );
    // /proc and /dev are not reachable through the file API.
    let err =
        e.be.read_file(id, "/proc/1/environ", 1000)
            .await
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
    let err =
        e.be.write_file(id, "/proc/sys/kernel/hostname", b"x", None)
            .await
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
    // The host's /tmp, /root are invisible inside.
    let r = run(
        &e,
        &spec,
        sh(&format!(
            "cat /{host_rel}/secret; find /root /home /var/log /etc/ssh -mindepth 1 | wc -l; test -e /etc/shadow || echo no-shadow; test -e /etc/os-release && echo os-release"
        )),
    )
    .await;
    assert_eq!(out(&r), "0\nno-shadow\nos-release\n", "{r:?}");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seccomp_and_capabilities() {
    let e = env("seccomp");
    let spec = e.create().await;
    let r = run(&e, &spec, sh("mount -t tmpfs x /mnt 2>&1; echo rc=$?")).await;
    assert!(
        out(&r).contains("rc=") && !out(&r).contains("rc=0"),
        "{}",
        out(&r)
    );
    let r = run(&e, &spec, sh("unshare -U true 2>&1; echo rc=$?")).await;
    assert!(!out(&r).contains("rc=0"), "{}", out(&r));
    let r = run(
        &e,
        &spec,
        req(&[
            "python3",
            "-c",
            "import ctypes,os\nlibc=ctypes.CDLL(None,use_errno=True)\nr=libc.syscall(165,b'x',b'/mnt',b'tmpfs',0,None)\nprint(r,ctypes.get_errno())\nr=libc.syscall(321,0,0,0)\nprint(r,ctypes.get_errno())\nimport socket\ntry:\n socket.socket(40, socket.SOCK_STREAM)\nexcept OSError as e: print('vsock', e.errno)\nprint(os.fork and 'forkok')",
        ]),
    )
    .await;
    // mount(2) and bpf(2): -1 EPERM.
    assert_eq!(out(&r), "-1 1\n-1 1\nvsock 1\nforkok\n", "{r:?}");
    let r = run(&e, &spec, sh("grep CapBnd /proc/self/status; python3 -c 'import threading; t=threading.Thread(target=print,args=(\"thr\",)); t.start(); t.join()'")).await;
    assert!(out(&r).contains("CapBnd:\t00000000a00425fb"), "{}", out(&r));
    assert!(out(&r).contains("thr"));
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_session_keeps_state() {
    let e = env("session");
    let spec = e.create().await;
    let id = &spec.id;
    let s =
        e.be.session_start(
            id,
            SessionSpec {
                argv: vec!["python3".into(), "-i".into(), "-u".into(), "-q".into()],
                env: BTreeMap::new(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .unwrap();
    assert!(s.running);
    e.be.session_write(id, &s.id, b"x = 41\n").await.unwrap();
    e.be.session_write(id, &s.id, b"print('val', x + 1)\n")
        .await
        .unwrap();
    let mut off = 0;
    let mut text = String::new();
    let t = Instant::now();
    while !text.contains("val 42") && t.elapsed() < Duration::from_secs(10) {
        let o = e.be.session_read(id, &s.id, off, wait()).await.unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
    assert!(text.contains("val 42"), "{text:?}");
    // A read at the tail waits, then returns nothing.
    let t = Instant::now();
    let o =
        e.be.session_read(id, &s.id, off, Duration::from_millis(300))
            .await
            .unwrap();
    let _ = o;
    assert!(t.elapsed() >= Duration::from_millis(250) || !o.data.is_empty());
    let list = e.be.session_list(id).await.unwrap();
    assert_eq!(list.len(), 1);
    // The interpreter survives a pause (frozen) and keeps its variables.
    let arts = e.tmp.path().join("p");
    e.be.pause(id, &arts, true).await.unwrap();
    let err = e.be.session_write(id, &s.id, b"x\n").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState);
    e.be.resume(&spec, &arts).await.unwrap();
    e.be.session_write(id, &s.id, b"print('after', x)\n")
        .await
        .unwrap();
    let mut text = String::new();
    let t = Instant::now();
    while !text.contains("after 41") && t.elapsed() < Duration::from_secs(10) {
        let o = e.be.session_read(id, &s.id, off, wait()).await.unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
    assert!(text.contains("after 41"), "{text:?}");
    e.be.session_write(id, &s.id, b"exit(7)\n").await.unwrap();
    let t = Instant::now();
    loop {
        let o = e.be.session_read(id, &s.id, off, wait()).await.unwrap();
        off = o.next_offset;
        if !o.running {
            assert_eq!(o.exit_code, Some(7));
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10));
    }
    // sh session, killed.
    let s2 =
        e.be.session_start(
            id,
            SessionSpec {
                argv: vec!["sh".into()],
                env: BTreeMap::new(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .unwrap();
    assert_ne!(s2.id, s.id);
    e.be.session_write(id, &s2.id, b"echo $((6*7)) >&2\n")
        .await
        .unwrap();
    let o = e.be.session_read(id, &s2.id, 0, wait()).await.unwrap();
    assert_eq!(o.data, b"42\n");
    e.be.session_kill(id, &s2.id, Default::default())
        .await
        .unwrap();
    let o =
        e.be.session_read(id, &s2.id, o.next_offset, wait())
            .await
            .unwrap();
    assert!(!o.running);
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_freezes_and_resume_continues() {
    let e = env("pause");
    let spec = e.create().await;
    let id = &spec.id;
    e.be.write_file(id, "f.txt", b"kept", None).await.unwrap();
    let r = run(
        &e,
        &spec,
        sh("(while :; do :; done) >/dev/null 2>&1 & echo started"),
    )
    .await;
    assert_eq!(out(&r), "started\n");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let c0 = e.be.usage(id).await.unwrap().cpu_ns;
    let out_dir = e.tmp.path().join("pause1");
    let t = Instant::now();
    let arts = e.be.pause(id, &out_dir, true).await.unwrap();
    eprintln!("pause(keep_memory): {:?}", t.elapsed());
    assert_eq!(arts.len(), 1);
    assert_eq!(arts[0].kind, ArtifactKind::FsLayer);
    assert!(out_dir.join(&arts[0].name).is_file());
    let c1 = e.be.usage(id).await.unwrap().cpu_ns;
    assert!(c1 > c0, "busy loop did not run");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c2 = e.be.usage(id).await.unwrap().cpu_ns;
    assert!(
        c2 - c1 < 5_000_000,
        "cpu advanced {} ns while paused",
        c2 - c1
    );
    // Exec while paused is refused.
    let err = e.be.exec(id, sh("true"), None).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState);
    let t = Instant::now();
    e.be.resume(&spec, &out_dir).await.unwrap();
    eprintln!("resume(thaw): {:?}", t.elapsed());
    // The loop continues (allow for a loaded machine).
    let t = Instant::now();
    loop {
        let c3 = e.be.usage(id).await.unwrap().cpu_ns;
        if c3 - c2 > 50_000_000 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "busy loop did not continue"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The same processes continue (no rebuild): the loop is still there.
    let r = run(&e, &spec, sh("ps -e -o args | grep -c 'while'")).await;
    let _ = r;
    assert_eq!(e.be.read_file(id, "f.txt", 100).await.unwrap(), b"kept");

    // Filesystem-only pause: processes end, files come back on resume.
    let out2 = e.tmp.path().join("pause2");
    let t = Instant::now();
    e.be.pause(id, &out2, false).await.unwrap();
    eprintln!("pause(fs only): {:?}", t.elapsed());
    assert_eq!(e.be.usage(id).await.unwrap().host_processes, 0);
    let t = Instant::now();
    e.be.resume(&spec, &out2).await.unwrap();
    eprintln!("resume(rebuild): {:?}", t.elapsed());
    assert_eq!(e.be.read_file(id, "f.txt", 100).await.unwrap(), b"kept");
    let u = e.be.usage(id).await.unwrap();
    assert_eq!(u.host_processes, 2, "{u:?}");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_restore_brings_files_and_deletions() {
    let e = env("snap");
    let spec = e.create().await;
    let id = &spec.id;
    let r = run(
        &e,
        &spec,
        sh(
            "set -e; echo keep > keep; echo gone > gone; rm gone; rm /etc/issue; \
            mkdir -p d/e; echo deep > d/e/f; chmod 751 d/e/f; ln -s /etc/hostname link; \
            ln keep hard; rm -rf /opt; mkdir /opt; echo new > /opt/only",
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert!(std::path::Path::new("/etc/issue").exists());
    let snap = e.tmp.path().join("snap");
    let t = Instant::now();
    let arts = e.be.snapshot(id, &snap).await.unwrap();
    eprintln!("snapshot: {:?} ({} bytes)", t.elapsed(), arts[0].size);
    // The source keeps running.
    assert_eq!(out(&run(&e, &spec, sh("cat keep")).await), "keep\n");

    let spec2 = e.spec(spec.manifest.clone());
    let t = Instant::now();
    e.be.restore(&spec2, &snap).await.unwrap();
    eprintln!("restore: {:?}", t.elapsed());
    let r = run(
        &e,
        &spec2,
        sh(
            "cat keep; test -e gone || echo no-gone; test -e /etc/issue || echo no-issue; \
            cat d/e/f; stat -c %a d/e/f; readlink link; stat -c %h keep; ls -A /opt; \
            test -e /usr/bin/env && echo lower-ok",
        ),
    )
    .await;
    assert_eq!(
        out(&r),
        "keep\nno-gone\nno-issue\ndeep\n751\n/etc/hostname\n2\nonly\nlower-ok\n",
        "{r:?}"
    );
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.be.destroy(&spec2.id, &spec2.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network_egress() {
    let e = env("net");
    let spec = e.create().await;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let r = run(
        &e,
        &spec,
        req(&[
            "python3",
            "-c",
            &format!(
                "import socket\ns=socket.socket()\ns.settimeout(2)\ntry:\n s.connect(('127.0.0.1',{port})); print('connected')\nexcept Exception as e: print('failed', type(e).__name__)\nimport os; print(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'nosys')"
            ),
        ]),
    )
    .await;
    assert!(out(&r).starts_with("failed"), "{r:?}");
    match l.accept() {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("listener saw a connection: {other:?}"),
    }
    // Loopback inside works.
    let r = run(
        &e,
        &spec,
        req(&["python3", "-c", "import socket\na=socket.socket(); a.bind(('127.0.0.1',0)); a.listen()\nb=socket.create_connection(a.getsockname()); print('lo-ok')"]),
    )
    .await;
    assert_eq!(out(&r), "lo-ok\n", "{r:?}");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_bomb_and_memory_hog_contained() {
    let e = env("caps");
    let mut m = Manifest::default();
    m.resources.pids = 64;
    m.resources.memory_mb = 64;
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();
    // The bomb starts in a subshell, forked while nothing else runs: dash
    // exits when a fork fails, and the top-level shell must outlive the
    // bomb to see the timeout (it never forks again: it loops on a builtin).
    let mut r = sh("(f(){ f | f & }; f) 2>/dev/null; while :; do :; done");
    r.timeout_ms = 1500;
    let t = Instant::now();
    let res = run(&e, &spec, r).await;
    assert!(
        res.timed_out,
        "exit {:?} signal {:?}",
        res.exit_code, res.signal
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    // Everything of the bomb is gone, the sandbox still works.
    let u = e.be.usage(&spec.id).await.unwrap();
    assert_eq!(u.host_processes, 2, "{u:?}");
    assert_eq!(out(&run(&e, &spec, sh("echo alive")).await), "alive\n");

    let res = run(
        &e,
        &spec,
        req(&["python3", "-c", "a = b'x' * (512 << 20); print('survived')"]),
    )
    .await;
    assert_eq!(res.signal, Some(9), "{res:?}");
    assert!(!out(&res).contains("survived"));
    assert_eq!(out(&run(&e, &spec, sh("echo alive")).await), "alive\n");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_leaves_nothing_and_is_idempotent() {
    let e = env("destroy");
    let spec = e.create().await;
    run(&e, &spec, sh("(sleep 103 &) ; echo ok")).await;
    assert!(!host_pids_with("sleep 103").is_empty());
    assert!(!e.cgroup_dirs().is_empty());
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    assert!(host_pids_with("sleep 103").is_empty());
    assert!(host_pids_with(&spec.dir.display().to_string()).is_empty());
    // No mount of the sandbox is visible on the host.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&spec.dir.display().to_string()));
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    let err = e.be.exec(&spec.id, sh("true"), None).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_and_probe() {
    let e = env("caps-report");
    let c = e.be.capabilities();
    assert!(c.available, "{c:?}");
    assert!(c.pause_keeps_processes && !c.restore_keeps_processes && !c.pause_frees_memory);
    assert!(c
        .notes
        .iter()
        .any(|n| n.contains("cgroup v1") || n.contains("cgroup v2")));
    let p = stasis_backend_process::probe();
    assert_eq!(p["available"], true, "{p}");
    assert_eq!(p["live_check"]["ok"], true, "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_image_as_lower_layer() {
    let images = tempfile::tempdir().unwrap();
    let e = env_with("image", |c| {
        c.images_dir = Some(images.path().to_path_buf())
    });
    let img = images.path().join("mini/rootfs");
    for d in ["bin", "etc"] {
        std::fs::create_dir_all(img.join(d)).unwrap();
    }
    std::fs::copy("/usr/bin/busybox", img.join("bin/busybox")).unwrap();
    for a in ["sh", "cat", "echo", "ls", "ln", "rm", "mkdir", "id"] {
        std::os::unix::fs::symlink("busybox", img.join("bin").join(a)).unwrap();
    }
    std::fs::write(img.join("etc/passwd"), "root:x:0:0:image:/root:/bin/sh\n").unwrap();
    let mut m = Manifest {
        image: Some("mini".into()),
        ..Default::default()
    };
    m.env.insert("PATH".into(), "/bin".into());
    let spec = e.spec(m.clone());
    e.be.create(&spec).await.unwrap();
    let r = run(
        &e,
        &spec,
        sh("cat /etc/passwd; ls /; echo x > /etc/new; rm /etc/passwd; ln -s ../../../.. up"),
    )
    .await;
    assert_eq!(
        out(&r),
        "root:x:0:0:image:/root:/bin/sh\nbin\ndev\netc\nproc\ntmp\nworkspace\n",
        "{r:?}"
    );
    // The image is read-only underneath: writes and deletions went to the upper layer.
    assert!(img.join("etc/passwd").exists());
    assert!(!img.join("etc/new").exists());
    let err =
        e.be.read_file(&spec.id, "up/etc/passwd", 1000)
            .await
            .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    assert_eq!(
        e.be.read_file(&spec.id, "up/etc/new", 1000).await.unwrap(),
        b"x\n"
    );
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

/// A tenant never names a host directory as its root: paths, `..`, and
/// symlinks in the images directory that lead out of it are all refused
/// (`invalid_manifest`, field `image`) before anything is set up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_never_resolves_to_a_host_directory() {
    let images = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("rootfs/etc")).unwrap();
    std::fs::write(outside.path().join("rootfs/etc/secret"), "HOST").unwrap();
    let e = env_with("imgesc", |c| {
        c.images_dir = Some(images.path().to_path_buf())
    });
    let ip = images.path();
    // The whole image directory is a link out; its rootfs is a link out;
    // its rootfs is a link to the host's / or to the images directory itself.
    std::os::unix::fs::symlink(outside.path(), ip.join("linked")).unwrap();
    std::fs::create_dir_all(ip.join("rootlink")).unwrap();
    std::os::unix::fs::symlink("/", ip.join("rootlink/rootfs")).unwrap();
    std::fs::create_dir_all(ip.join("uplink")).unwrap();
    std::os::unix::fs::symlink("../..", ip.join("uplink/rootfs")).unwrap();
    std::fs::create_dir_all(ip.join("self")).unwrap();
    std::os::unix::fs::symlink("..", ip.join("self/rootfs")).unwrap();
    std::fs::create_dir_all(ip.join("filefs")).unwrap();
    std::fs::write(ip.join("filefs/rootfs"), "not a dir").unwrap();
    let host_paths = [
        "/".to_string(),
        "/usr/..".into(),
        "/etc/..".into(),
        "/var/../".into(),
        "/tmp".into(),
        outside.path().join("rootfs").display().to_string(),
        "..".into(),
        "../../..".into(),
        "x/../..".into(),
        "relative/path".into(),
    ];
    let links = ["linked", "rootlink", "uplink", "self", "filefs", "missing"];
    for image in host_paths.iter().map(String::as_str).chain(links) {
        let spec = e.spec(Manifest {
            image: Some(image.into()),
            ..Default::default()
        });
        let err = e.be.create(&spec).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidManifest, "{image}: {err}");
        assert_eq!(err.field.as_deref(), Some("image"), "{image}: {err}");
        assert!(e.cgroup_dirs().is_empty(), "{image}");
        let _ = e.be.destroy(&spec.id, &spec.dir).await;
    }
    // Without an images directory no name resolves.
    let none = env("imgnone");
    let spec = none.spec(Manifest {
        image: Some("default".into()),
        ..Default::default()
    });
    let err = none.be.create(&spec).await.unwrap_err();
    assert_eq!(err.field.as_deref(), Some("image"), "{err}");
    e.cleanup_parent();
    none.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_buffer_drops_oldest() {
    let e = env_with("sessbuf", |c| c.session_buffer = 64 * 1024);
    let spec = e.create().await;
    let id = &spec.id;
    let s =
        e.be.session_start(
            id,
            SessionSpec {
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    "head -c 200000 /dev/zero; echo; echo END".into(),
                ],
                env: BTreeMap::new(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .unwrap();
    let t = Instant::now();
    loop {
        let info = &e.be.session_list(id).await.unwrap()[0];
        if !info.running {
            assert_eq!(info.exit_code, Some(0));
            assert_eq!(info.output_end, 200_005);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let o = e.be.session_read(id, &s.id, 0, wait()).await.unwrap();
    assert_eq!(o.offset, 200_005 - 64 * 1024);
    assert_eq!(o.data.len(), 64 * 1024);
    assert!(o.data.ends_with(b"\nEND\n"));
    assert_eq!(o.next_offset, 200_005);
    assert!(!o.running);
    let err = e.be.session_write(id, &s.id, b"x").await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidState);
    let err = e.be.session_read(id, "nope", 0, wait()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_quota_applies() {
    let e = env("cpuquota");
    let mut m = Manifest::default();
    m.resources.cpus = 0.2;
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();
    let c0 = e.be.usage(&spec.id).await.unwrap().cpu_ns;
    let mut r = sh("while :; do :; done");
    r.timeout_ms = 1000;
    let res = run(&e, &spec, r).await;
    assert!(res.timed_out);
    let used = e.be.usage(&spec.id).await.unwrap().cpu_ns - c0;
    // 0.2 cores over ~1 s: well under half a core-second.
    assert!(used < 450_000_000, "used {used} ns");
    assert!(used > 50_000_000, "used {used} ns");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}

/// Lifecycle timings (medians); run with `--ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_lifecycle() {
    let e = env("bench");
    let n = 10;
    let mut t: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    for i in 0..n {
        let spec = e.spec(Manifest::default());
        let s = Instant::now();
        e.be.create(&spec).await.unwrap();
        t.entry("create").or_default().push(ms(s.elapsed()));
        let s = Instant::now();
        run(&e, &spec, req(&["true"])).await;
        t.entry("first_exec").or_default().push(ms(s.elapsed()));
        let s = Instant::now();
        run(&e, &spec, req(&["true"])).await;
        t.entry("exec").or_default().push(ms(s.elapsed()));
        e.be.write_file(&spec.id, "f", &vec![1u8; 1 << 20], None)
            .await
            .unwrap();
        let d = e.tmp.path().join(format!("p{i}"));
        let s = Instant::now();
        e.be.pause(&spec.id, &d, true).await.unwrap();
        t.entry("pause_keep_memory")
            .or_default()
            .push(ms(s.elapsed()));
        let c0 = e.be.usage(&spec.id).await.unwrap().cpu_ns;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let paused_cpu = e.be.usage(&spec.id).await.unwrap().cpu_ns - c0;
        t.entry("cpu_ms_used_while_paused_200ms")
            .or_default()
            .push(paused_cpu as f64 / 1e6);
        let s = Instant::now();
        e.be.resume(&spec, &d).await.unwrap();
        t.entry("resume_thaw").or_default().push(ms(s.elapsed()));
        let d2 = e.tmp.path().join(format!("q{i}"));
        let s = Instant::now();
        e.be.pause(&spec.id, &d2, false).await.unwrap();
        t.entry("pause_fs_only").or_default().push(ms(s.elapsed()));
        let s = Instant::now();
        e.be.resume(&spec, &d2).await.unwrap();
        run(&e, &spec, req(&["true"])).await;
        t.entry("resume_rebuild_to_first_exec")
            .or_default()
            .push(ms(s.elapsed()));
        let d3 = e.tmp.path().join(format!("s{i}"));
        let s = Instant::now();
        e.be.snapshot(&spec.id, &d3).await.unwrap();
        t.entry("snapshot").or_default().push(ms(s.elapsed()));
        let spec2 = e.spec(Manifest::default());
        let s = Instant::now();
        e.be.restore(&spec2, &d3).await.unwrap();
        run(&e, &spec2, req(&["true"])).await;
        t.entry("restore_to_first_exec")
            .or_default()
            .push(ms(s.elapsed()));
        let s = Instant::now();
        e.be.destroy(&spec.id, &spec.dir).await.unwrap();
        t.entry("destroy").or_default().push(ms(s.elapsed()));
        e.be.destroy(&spec2.id, &spec2.dir).await.unwrap();
    }
    for (k, mut v) in t {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        eprintln!(
            "{k:30} median {:7.1} ms  (min {:.1}, max {:.1})",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        );
    }
    e.cleanup_parent();
}
