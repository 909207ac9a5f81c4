//! Several daemons on one host: on the default cgroup parent (as `stasis
//! serve`, `stasis demo` and `stasis bench` run), each daemon's start and
//! reconcile leave the others' sandboxes and sessions alone; a daemon's
//! stop removes its own empty cgroups. And what a user sees of their
//! sandboxes: `ls` lists live ones (not destroyed ones, not image builds'
//! RUN sandboxes) unless asked, and removal is idempotent.

mod common;

use common::{cgroup_roots, Daemon, Http};
use serde_json::{json, Value};

/// A Python session in `id` with `name = value` set.
async fn python_with(h: &Http, id: &str, name: &str, value: u32) -> String {
    let s = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["python3", "-i", "-u", "-q"]})),
        )
        .await;
    let sid = s["id"].as_str().unwrap().to_string();
    h.send(id, &sid, &format!("{name} = {value}\n")).await;
    sid
}

/// Wait until the session's Python prints `name` as `expected` (`tag`
/// tells this question's answer from earlier ones).
async fn python_says(h: &Http, id: &str, sid: &str, tag: &str, name: &str, expected: &str) {
    h.send(id, sid, &format!("print('{tag}', {name})\n")).await;
    h.session_until(id, sid, 0, &format!("{tag} {expected}\n"))
        .await;
}

fn process_manifest() -> Value {
    json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
}

/// Whether `rel` exists as a cgroup in any hierarchy.
fn cgroup_exists(rel: &str) -> bool {
    cgroup_roots().iter().any(|r| r.join(rel).is_dir())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_on_the_default_parent_keep_their_sandboxes_and_sessions() {
    let mut a = Daemon::start_on_default_parent(&[]).await;
    let ha = a.http();
    let sa = ha.create(process_manifest()).await;
    let pa = python_with(&ha, &sa, "x", 42).await;
    python_says(&ha, &sa, &pa, "a1", "x", "42").await;
    let own_a = a.own_cgroup().expect("daemon id in the data dir");
    assert!(cgroup_exists(&format!("{own_a}/{sa}")), "{own_a}/{sa}");

    // Another daemon on another data dir starts (and reconciles) beside it.
    let mut b = Daemon::start_on_default_parent(&[]).await;
    let own_b = b.own_cgroup().unwrap();
    assert_ne!(own_a, own_b);
    python_says(&ha, &sa, &pa, "a2", "x", "42").await;
    assert_eq!(ha.sh(&sa, "echo alive").await, "alive\n");
    let hb = b.http();
    let sb = hb.create(process_manifest()).await;
    let pb = python_with(&hb, &sb, "y", 7).await;
    python_says(&hb, &sb, &pb, "b1", "y", "7").await;

    // Each restarts (after a kill: its reconcile runs again) without
    // touching the other's; its own sandbox is reattached.
    b.restart().await;
    let hb = b.http();
    python_says(&ha, &sa, &pa, "a3", "x", "42").await;
    python_says(&hb, &sb, &pb, "b2", "y", "7").await;
    a.restart().await;
    let ha = a.http();
    python_says(&hb, &sb, &pb, "b3", "y", "7").await;
    python_says(&ha, &sa, &pa, "a4", "x", "42").await;

    // A stop removes the daemon's own group once it is empty, and only it.
    ha.ok("DELETE", &format!("/v1/sandboxes/{sa}"), None).await;
    stop(&mut a);
    assert!(!cgroup_exists(&own_a), "{own_a} left behind");
    assert!(cgroup_exists(&format!("{own_b}/{sb}")));
    python_says(&hb, &sb, &pb, "b4", "y", "7").await;
    hb.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None).await;
    stop(&mut b);
    assert!(!cgroup_exists(&own_b), "{own_b} left behind");
}

/// SIGTERM the daemon and wait for its exit (the harness's own cleanup
/// runs only when it is dropped).
fn stop(d: &mut Daemon) {
    let mut c = d.child.take().unwrap();
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let st = c.wait().unwrap();
    assert!(st.success(), "{st}: {}", d.log());
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_shows_live_sandboxes_and_rm_is_idempotent() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let live = h.create(process_manifest()).await;
    let gone = h.create(process_manifest()).await;

    // Removal: twice is no error, over HTTP and in the CLI.
    let first = h.ok("DELETE", &format!("/v1/sandboxes/{gone}"), None).await;
    assert_eq!(first["state"], "destroyed");
    let again = h.ok("DELETE", &format!("/v1/sandboxes/{gone}"), None).await;
    assert_eq!(again["state"], "destroyed");
    let o = d.cli(&["rm", &gone]);
    assert!(o.status.success(), "{o:?}");
    // An id that never existed stays not found.
    let r = h
        .call("DELETE", "/v1/sandboxes/sb-nosuchsandbox0", None)
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let o = d.cli(&["rm", "sb-nosuchsandbox0"]);
    assert!(!o.status.success());

    // Listing: live ones by default; destroyed ones when asked.
    let l = ids(&h.ok("GET", "/v1/sandboxes", None).await);
    assert_eq!(l, vec![live.clone()]);
    let l = ids(&h.ok("GET", "/v1/sandboxes?state=destroyed", None).await);
    assert_eq!(l, vec![gone.clone()]);
    let l = ids(&h.ok("GET", "/v1/sandboxes?all=true", None).await);
    assert_eq!(l, vec![live.clone(), gone.clone()]);
    let cli_ids = |args: &[&str]| {
        let o = d.cli(args);
        assert!(o.status.success(), "{o:?}");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        ids(&v)
    };
    assert_eq!(cli_ids(&["--json", "ls"]), vec![live.clone()]);
    assert_eq!(cli_ids(&["--json", "ls", "--all"]), vec![live, gone]);

    // An image build's RUN sandboxes are not the user's sandboxes.
    if std::env::var_os("STASIS_IMAGE_DIR").is_none() {
        eprintln!("build sandboxes in ls NOT CHECKED: STASIS_IMAGE_DIR is not set");
        return;
    }
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM stasis-base:bookworm\nRUN echo built > /built.txt\n",
    )
    .unwrap();
    let o = d.cli(&[
        "image",
        "build",
        "-t",
        "listed:1",
        &ctx.path().display().to_string(),
    ]);
    assert!(o.status.success(), "{o:?}");
    let before = cli_ids(&["--json", "ls"]);
    assert_eq!(before.len(), 1, "{before:?}");
    let all = h.ok("GET", "/v1/sandboxes?all=true", None).await;
    let builds: Vec<&Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["labels"]["stasis.build"] == "run")
        .collect();
    assert_eq!(builds.len(), 1, "{all}");
    let only = h
        .ok(
            "GET",
            "/v1/sandboxes?label=stasis.build=run&state=destroyed",
            None,
        )
        .await;
    assert_eq!(ids(&only).len(), 1, "{only}");
}
