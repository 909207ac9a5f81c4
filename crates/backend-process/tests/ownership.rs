//! Daemons sharing one cgroup parent: each owns the group named by its
//! daemon id (`<parent>/.daemon-<id>`) and its orphan cleanup never reaches
//! another's sandboxes; a sandbox made before daemons had a group (directly
//! under the parent) is still recovered and removed by the daemon that
//! knows it, and left alone by the others.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stasis_backend::{Backend, Recovered, SandboxSpec};
use stasis_backend_process::cgroup::Cgroups;
use stasis_backend_process::{ProcessBackend, ProcessConfig};
use stasis_core::SessionSpec;

/// A Python session in `spec` with `name = value` set.
async fn python_with(be: &ProcessBackend, spec: &SandboxSpec, name: &str, value: u32) -> String {
    let s = SessionSpec {
        argv: ["python3", "-i", "-u", "-q"].map(String::from).to_vec(),
        env: BTreeMap::new(),
        cwd: None,
        pty: None,
        user: None,
    };
    let s = be.session_start(&spec.id, s).await.unwrap();
    let line = format!("{name} = {value}\n");
    be.session_write(&spec.id, &s.id, line.as_bytes())
        .await
        .unwrap();
    s.id
}

/// `name` as the session's Python prints it now.
async fn python_value(be: &ProcessBackend, spec: &SandboxSpec, sid: &str, name: &str) -> String {
    let marker = format!("value-of-{name}:");
    let line = format!("print('{marker}', {name})\n");
    be.session_write(&spec.id, sid, line.as_bytes())
        .await
        .unwrap();
    let (mut text, mut off) = (String::new(), 0);
    let t = Instant::now();
    loop {
        if let Some(rest) = text.split(&format!("{marker} ")).nth(1) {
            if let Some((v, _)) = rest.split_once('\n') {
                return v.trim().to_string();
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no {name} in {text:?}"
        );
        let o = be.session_read(&spec.id, sid, off, wait()).await.unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
}

/// Removes what a daemon id's group holds when the test ends (also when it
/// fails half-way).
struct Owned(ProcessConfig);

impl Drop for Owned {
    fn drop(&mut self) {
        ProcessBackend::new(self.0.clone()).destroy_owned();
    }
}

fn owned_by(cfg: &ProcessConfig, id: &str) -> (ProcessConfig, Owned) {
    let mut c = cfg.clone();
    c.daemon_id = Some(id.to_string());
    let guard = Owned(c.clone());
    (c, guard)
}

/// A group's directory in the freezer (v1) or unified (v2) hierarchy.
fn group_dir(rel: &str) -> std::path::PathBuf {
    let cg = Cgroups::detect().unwrap();
    let root = match cg.version {
        stasis_backend_process::cgroup::Version::V1 => cg.v1["freezer"].clone(),
        stasis_backend_process::cgroup::Version::V2 => cg.v2_root.clone(),
    };
    root.join(rel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_sharing_a_parent_leave_each_others_sandboxes_alone() {
    let e = env("owners");
    let (ca, _ga) = owned_by(e.be.config(), "00000000000000aa");
    let (cb, _gb) = owned_by(e.be.config(), "00000000000000bb");
    let a = ProcessBackend::new(ca.clone());
    let b = ProcessBackend::new(cb.clone());
    let sa = e.spec(Default::default());
    a.create(&sa).await.unwrap();
    let pa = python_with(&a, &sa, "x", 42).await;
    assert!(group_dir(&format!("{}/{}", ca.own_cgroup(), sa.id)).is_dir());

    // B starts: its reconcile knows none of A's sandboxes.
    b.cleanup_orphans(&[]).await.unwrap();
    assert_eq!(python_value(&a, &sa, &pa, "x").await, "42");
    let sb = e.spec(Default::default());
    b.create(&sb).await.unwrap();
    let pb = python_with(&b, &sb, "y", 7).await;

    // A restarts (a new instance on its own id) and reconciles: B's stays.
    let a2 = ProcessBackend::new(ca);
    assert_eq!(a2.recover(&sa).await.unwrap(), Recovered::Running);
    a2.cleanup_orphans(std::slice::from_ref(&sa.id))
        .await
        .unwrap();
    assert_eq!(python_value(&b, &sb, &pb, "y").await, "7");
    assert_eq!(python_value(&a2, &sa, &pa, "x").await, "42");

    // What a daemon owns and no longer knows still goes.
    b.cleanup_orphans(&[]).await.unwrap();
    assert!(b.exec(&sb.id, sh("true"), None).await.is_err());
    assert!(!group_dir(&format!("{}/{}", cb.own_cgroup(), sb.id)).exists());
    assert_eq!(python_value(&a2, &sa, &pa, "x").await, "42");
    a2.destroy(&sa.id, &sa.dir).await.unwrap();
    b.destroy(&sb.id, &sb.dir).await.unwrap();

    // At a stop, a daemon's empty group goes; another's stays.
    a2.release_cgroups();
    assert!(!group_dir(&a2.config().own_cgroup()).exists());
    assert!(group_dir(&cb.own_cgroup()).is_dir());
    b.release_cgroups();
    assert!(!group_dir(&cb.own_cgroup()).exists());
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_from_before_daemon_groups_stays_its_daemons() {
    // No daemon id: the layout of earlier versions, `<parent>/<sandbox>`.
    let e = env("legacy");
    let old = e.create().await;
    let py = python_with(&e.be, &old, "x", 42).await;
    let other = e.create().await;
    run(&e, &other, sh("true")).await;

    // The upgraded daemon: same parent, an id of its own; it knows `old`
    // (its metadata names it), not `other` (another daemon's).
    let (cfg, _g) = owned_by(e.be.config(), "00000000000000cc");
    let be2 = ProcessBackend::new(cfg);
    assert_eq!(be2.recover(&old).await.unwrap(), Recovered::Running);
    be2.cleanup_orphans(std::slice::from_ref(&old.id))
        .await
        .unwrap();
    assert_eq!(python_value(&be2, &old, &py, "x").await, "42");
    assert_eq!(out(&run(&e, &other, sh("echo alive")).await), "alive\n");
    let r = be2.exec(&old.id, sh("echo upgraded"), None).await.unwrap();
    assert_eq!(out(&r), "upgraded\n");

    // Its destroy removes the old places (sandbox and supervisor groups).
    be2.destroy(&old.id, &old.dir).await.unwrap();
    let left = e.cgroup_dirs();
    assert!(!left.is_empty());
    assert!(
        left.iter().all(|d| d.ends_with(other.id.as_str())),
        "{left:?}"
    );
    e.be.destroy(&other.id, &other.dir).await.unwrap();
    assert!(e.cgroup_dirs().is_empty(), "{:?}", e.cgroup_dirs());
    e.cleanup_parent();
}
