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
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}
