mod common;
use common::*;
use stasis_backend::Backend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_exec_exit_codes_stderr() {
    let e = env("basic");
    let t = std::time::Instant::now();
    let spec = e.create().await;
    eprintln!("create: {:?}", t.elapsed());
    let t = std::time::Instant::now();
    let r = run(&e, &spec, sh("echo hello; echo oops >&2; exit 3")).await;
    eprintln!("exec: {:?}", t.elapsed());
    assert_eq!(out(&r), "hello\n");
    assert_eq!(String::from_utf8_lossy(&r.stderr), "oops\n");
    assert_eq!(r.exit_code, Some(3));
    assert!(!r.timed_out);
    let r = run(&e, &spec, req(&["no-such-command"])).await;
    assert_eq!(r.exit_code, Some(127));
    let r = run(&e, &spec, sh("kill -9 $$")).await;
    assert_eq!(r.signal, Some(9));
    let r = run(
        &e,
        &spec,
        sh("echo $$; hostname; ls /; id -u; cat /proc/1/cmdline | tr '\\0' ' '"),
    )
    .await;
    eprintln!("{}", out(&r));
    // The sandbox's PID 1 shows no host paths.
    assert!(
        !out(&r).contains(&spec.dir.display().to_string()),
        "{}",
        out(&r)
    );
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_init_is_reported_not_bypassed() {
    let e = env("deadinit");
    let spec = e.create().await;
    let pid: i32 = std::fs::read_to_string(spec.dir.join("run/init.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let t = std::time::Instant::now();
    loop {
        match e.be.exec(&spec.id, sh("echo hi"), None).await {
            Err(err) => {
                assert_eq!(err.code, stasis_core::ErrorCode::BackendError, "{err}");
                break;
            }
            Ok(r) => assert!(t.elapsed().as_secs() < 5, "exec still runs: {r:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The sandbox can be brought back from its upper layer.
    let none = e.tmp.path().join("none");
    std::fs::create_dir_all(&none).unwrap();
    e.be.resume(&spec, &none).await.unwrap();
    let pid2 = std::fs::read_to_string(spec.dir.join("run/init.pid")).unwrap();
    let r = e.be.exec(&spec.id, sh("echo back"), None).await;
    assert!(r.is_ok(), "old {pid} new {pid2}: {r:?}");
    assert_eq!(out(&r.unwrap()), "back\n");
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty());
    e.cleanup_parent();
}

/// The server may run on a current-thread runtime (e.g. plain #[tokio::test]).
#[tokio::test]
async fn works_on_a_current_thread_runtime() {
    let e = env("curthread");
    let spec = e.create().await;
    let mut r = sh("cat; echo done >&2");
    r.stdin = Some(vec![b'z'; 300_000]);
    let res = run(&e, &spec, r).await;
    assert_eq!(res.stdout.len(), 300_000);
    assert_eq!(res.stderr, b"done\n");
    let s =
        e.be.session_start(
            &spec.id,
            stasis_core::SessionSpec {
                argv: vec!["sh".into()],
                env: Default::default(),
                cwd: None,
                pty: None,
                user: None,
            },
        )
        .await
        .unwrap();
    e.be.session_write(&spec.id, &s.id, b"echo hi\n")
        .await
        .unwrap();
    let o = e.be.session_read(&spec.id, &s.id, 0, wait()).await.unwrap();
    assert_eq!(o.data, b"hi\n");
    let arts = e.tmp.path().join("a");
    e.be.pause(&spec.id, &arts, true).await.unwrap();
    e.be.resume(&spec, &arts).await.unwrap();
    let mut r = sh("sleep 5");
    r.timeout_ms = 200;
    assert!(run(&e, &spec, r).await.timed_out);
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty());
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_host_cgroup_paths_inside() {
    let e = env("cgns");
    let spec = e.create().await;
    let r = run(&e, &spec, sh("cat /proc/self/cgroup /proc/1/cgroup")).await;
    assert!(!out(&r).contains(&e.parent), "{}", out(&r));
    assert!(!out(&r).contains(spec.id.as_str()), "{}", out(&r));
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}
