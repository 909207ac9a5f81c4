//! The idle / TTL / lifetime reaper (`reap_once`, `spawn_reaper`) on short
//! manifest durations, and a second node's view of a sandbox that another
//! node runs (a cluster on one shared SQLite meta database: leases work
//! there too, so no PostgreSQL is needed for this much).

use std::time::Duration;

use stasis_core::{ErrorCode, OnIdle, SandboxState};
use stasis_meta::PauseKind;

use crate::harness::*;

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test]
async fn idle_sandbox_is_paused_then_destroyed_when_its_pause_expires() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, short_lived(OnIdle::Pause)).await;
    // Active: not idle yet.
    assert!(m.reap_once().await.unwrap().is_empty());
    sleep_ms(1100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "idle_paused")]);
    let r = record(&m, &rec.id).await;
    assert_eq!(r.state, SandboxState::Paused);
    assert_eq!(r.pause_kind, Some(PauseKind::Memory));
    let snap = r.pause_snapshot.clone().unwrap();
    // Not expired yet, then expired.
    assert!(m.reap_once().await.unwrap().is_empty());
    sleep_ms(1100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "ttl_expired")]);
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
    assert!(!stored(&m, &snap).await);
    assert!(env.fake.held().is_empty());
}

#[tokio::test]
async fn each_idle_policy_and_the_lifetime_limit() {
    let env = Env::process();
    let m = env.manager().await;
    let fs = running_with(&m, short_lived(OnIdle::PauseFilesystem)).await;
    let gone = running_with(&m, short_lived(OnIdle::Destroy)).await;
    let mut keep = short_lived(OnIdle::Nothing);
    keep.lifecycle.idle_timeout_secs = 1;
    let keep = running_with(&m, keep).await;
    let mut short = manifest();
    short.lifecycle.max_lifetime_secs = 1;
    let old = running_with(&m, short).await;
    sleep_ms(1100).await;
    let mut done = m.reap_once().await.unwrap();
    done.sort();
    let mut want = vec![
        (fs.id.clone(), "idle_paused_filesystem"),
        (gone.id.clone(), "idle_destroyed"),
        (old.id.clone(), "lifetime_expired"),
    ];
    want.sort();
    assert_eq!(done, want);
    let r = record(&m, &fs.id).await;
    assert_eq!(r.state, SandboxState::Paused);
    assert_eq!(r.pause_kind, Some(PauseKind::Filesystem));
    assert_eq!(state(&m, &gone.id).await, SandboxState::Destroyed);
    assert_eq!(state(&m, &old.id).await, SandboxState::Destroyed);
    assert_eq!(state(&m, &keep.id).await, SandboxState::Running);
    // The filesystem-paused one comes back with its files, not its memory.
    assert_eq!(run(&m, &fs.id, &["cat", "f"]).await, "files");
    assert_eq!(exit_of(&m, &fs.id, &["get", "k"]).await, Some(1));
}

#[tokio::test]
async fn the_reaper_never_pauses_under_a_request_in_flight() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, short_lived(OnIdle::Pause)).await;
    sleep_ms(1100).await;
    // An exec that hangs in the backend holds the sandbox.
    env.fake.crash_at("exec");
    let m2 = m.clone();
    let id = rec.id.clone();
    let hung = tokio::spawn(async move { m2.exec(&ctx(), &id, req(&["true"]), None).await });
    while env.fake.crashes().is_empty() {
        sleep_ms(10).await;
    }
    assert!(m.reap_once().await.unwrap().is_empty());
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    hung.abort();
    let _ = hung.await;
    sleep_ms(1100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "idle_paused")]);
}

#[tokio::test]
async fn the_spawned_reaper_applies_the_policies() {
    let env = Env::process();
    let m = env
        .manager_with(|c| c.reaper_interval = Duration::from_millis(50))
        .await;
    let rec = running_with(&m, short_lived(OnIdle::Pause)).await;
    let reaper = m.spawn_reaper();
    let mut seen_paused = false;
    for _ in 0..100 {
        sleep_ms(50).await;
        match state(&m, &rec.id).await {
            SandboxState::Paused => seen_paused = true,
            SandboxState::Destroyed => break,
            _ => {}
        }
    }
    reaper.abort();
    assert!(seen_paused, "paused when idle");
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
}

#[tokio::test]
async fn a_checkpoint_is_taken_on_schedule_and_replaces_the_last() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.lifecycle.checkpoint_secs = 1;
    let rec = running_with(&m, man).await;
    sleep_ms(1100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "checkpointed")]);
    let first = record(&m, &rec.id).await.checkpoint_snapshot.unwrap();
    assert!(stored(&m, &first).await);
    sleep_ms(1100).await;
    m.reap_once().await.unwrap();
    let second = record(&m, &rec.id).await.checkpoint_snapshot.unwrap();
    assert_ne!(first, second);
    assert!(!stored(&m, &first).await, "the older checkpoint deleted");
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert!(!stored(&m, &second).await, "destroy deletes the checkpoint");
}

/// The lifetime limit counts running time only: time paused is not spent.
/// A checkpoint is not activity: an idle sandbox is paused in the same pass.
#[tokio::test]
async fn lifetime_excludes_paused_time_and_checkpoints_are_not_activity() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.lifecycle.max_lifetime_secs = 2;
    man.lifecycle.on_idle = OnIdle::Nothing;
    let rec = running_with(&m, man).await;
    sleep_ms(1100).await;
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    sleep_ms(1500).await;
    m.resume(&ctx(), &rec.id).await.unwrap();
    assert!(
        m.reap_once().await.unwrap().is_empty(),
        "about 1.1 s of 2 s used"
    );
    sleep_ms(1000).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "lifetime_expired")]);

    let mut man = short_lived(OnIdle::Pause);
    man.lifecycle.checkpoint_secs = 1;
    let rec = running_with(&m, man).await;
    sleep_ms(1100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(
        done,
        vec![
            (rec.id.clone(), "checkpointed"),
            (rec.id.clone(), "idle_paused")
        ]
    );
}

/// A destroyed sandbox's record names no snapshot that destroy deleted:
/// its pause snapshot is cleared, and so must its checkpoint be.
#[tokio::test]
async fn a_destroyed_record_names_no_deleted_checkpoint() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.lifecycle.checkpoint_secs = 1;
    let rec = running_with(&m, man).await;
    sleep_ms(1100).await;
    m.reap_once().await.unwrap();
    let snap = record(&m, &rec.id).await.checkpoint_snapshot.unwrap();
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert!(!stored(&m, &snap).await);
    let r = record(&m, &rec.id).await;
    assert_eq!(r.checkpoint_snapshot, None);
    assert_eq!(r.checkpoint_at_ms, None);
}

/// Two nodes on one meta database and store, each with its own host
/// (sandbox dirs, backend state). Node B does not touch what node A runs:
/// its reaper skips it, a request for it is refused (it should have been
/// forwarded), its reconcile leaves it alone. Once A's lease lapses (A
/// died), B takes it over from its newest checkpoint.
#[tokio::test]
async fn a_sandbox_run_by_another_node_is_not_touched_until_its_lease_lapses() {
    use stasis_control::cluster::{Cluster, ClusterConfig};
    let a = Env::process();
    let b = Env::process();
    // B shares A's meta database and store: B's own data dir holds links.
    std::fs::create_dir_all(a.data_dir().join("store")).unwrap();
    let ma = a.manager().await;
    std::fs::create_dir_all(b.data_dir().join("sandboxes")).unwrap();
    std::os::unix::fs::symlink(a.data_dir().join("store"), b.data_dir().join("store")).unwrap();
    std::os::unix::fs::symlink(a.data_dir().join("meta.db"), b.data_dir().join("meta.db")).unwrap();
    let mb = b.manager().await;
    let lease = Duration::from_millis(1500);
    let join = |node: &str, m: &stasis_control::Manager| {
        Cluster::start(
            ClusterConfig {
                node_id: node.into(),
                advertise_url: format!("http://127.0.0.1:1/{node}"),
                lease,
            },
            m.meta().clone(),
        )
    };
    ma.set_cluster(join("node-a", &ma).await.unwrap());
    mb.set_cluster(join("node-b", &mb).await.unwrap());

    let mut man = manifest();
    man.lifecycle.on_idle = OnIdle::Nothing;
    man.lifecycle.checkpoint_secs = 1;
    let rec = running_with(&ma, man).await;
    assert_eq!(record(&ma, &rec.id).await.owner.as_deref(), Some("node-a"));
    // A is alive (renews its lease) and takes a checkpoint.
    let hb_a = ma.spawn_heartbeat().expect("in a cluster");
    sleep_ms(1100).await;
    let done = ma.reap_once().await.unwrap();
    assert!(done.contains(&(rec.id.clone(), "checkpointed")), "{done:?}");
    let calls = b.fake.calls().len();
    // B, while A's lease is live.
    assert!(mb.reap_once().await.unwrap().is_empty());
    let e = mb.exec(&ctx(), &rec.id, req(&["true"]), None).await;
    assert_eq!(code(e), ErrorCode::Busy);
    assert_eq!(code(mb.pause(&ctx(), &rec.id, None).await), ErrorCode::Busy);
    let report = mb.reconcile().await.unwrap();
    assert!(report.changed.is_empty(), "{report:?}");
    assert_eq!(state(&mb, &rec.id).await, SandboxState::Running);
    assert!(b.fake.held().is_empty());
    let b_calls: Vec<_> = b.fake.calls()[calls..]
        .iter()
        .filter(|c| *c != "cleanup_orphans")
        .cloned()
        .collect();
    assert!(b_calls.is_empty(), "B asked its backend: {b_calls:?}");

    // A dies (no more heartbeats); once its lease lapses, B takes the
    // sandbox over from its checkpoint.
    hb_a.abort();
    sleep_ms(1700).await;
    assert_eq!(run(&mb, &rec.id, &["cat", "f"]).await, "files");
    let r = record(&mb, &rec.id).await;
    assert_eq!(r.state, SandboxState::Running);
    assert_eq!(r.owner.as_deref(), Some("node-b"));
    assert!(r.recovered_from_snapshot.is_some());
    assert_eq!(b.fake.held(), vec![rec.id.clone()]);
    // B stays alive (renews its lease) from here on.
    let hb_b = mb.spawn_heartbeat().expect("in a cluster");
    // A comes back: its heartbeat finds its lease taken, it stops its
    // copy, and from then on refuses the sandbox.
    let hb = ma.spawn_heartbeat().expect("in a cluster");
    for _ in 0..100 {
        if a.fake.held().is_empty() {
            break;
        }
        sleep_ms(20).await;
    }
    hb.abort();
    assert!(a.fake.held().is_empty(), "A stopped its stale copy");
    let e = ma.exec(&ctx(), &rec.id, req(&["true"]), None).await;
    assert_eq!(code(e), ErrorCode::Busy);
    assert_eq!(state(&ma, &rec.id).await, SandboxState::Running);
    assert_eq!(record(&ma, &rec.id).await.owner.as_deref(), Some("node-b"));
    hb_b.abort();
}

/// Takeover with nothing to restore from: the sandbox whose node died
/// without any pause or checkpoint is Failed, saying so.
#[tokio::test]
async fn a_takeover_without_any_snapshot_fails_the_sandbox() {
    use stasis_control::cluster::{Cluster, ClusterConfig};
    let a = Env::process();
    let b = Env::process();
    let ma = a.manager().await;
    std::fs::create_dir_all(b.data_dir().join("sandboxes")).unwrap();
    std::os::unix::fs::symlink(a.data_dir().join("store"), b.data_dir().join("store")).unwrap();
    std::os::unix::fs::symlink(a.data_dir().join("meta.db"), b.data_dir().join("meta.db")).unwrap();
    let mb = b.manager().await;
    for (node, m) in [("node-a", &ma), ("node-b", &mb)] {
        let c = Cluster::start(
            ClusterConfig {
                node_id: node.into(),
                advertise_url: format!("http://127.0.0.1:1/{node}"),
                lease: Duration::from_millis(300),
            },
            m.meta().clone(),
        )
        .await
        .unwrap();
        m.set_cluster(c);
    }
    let rec = running(&ma).await;
    sleep_ms(500).await;
    let e = mb.exec(&ctx(), &rec.id, req(&["true"]), None).await;
    assert_eq!(code(e), ErrorCode::InvalidState);
    let r = record(&mb, &rec.id).await;
    assert_eq!(r.state, SandboxState::Failed);
    assert!(r.reason.unwrap().contains("no snapshot"), "says why");
    assert!(b.fake.held().is_empty());
    // The way into Failed is audited (webhooks deliver it as sandbox.failed).
    let audit = mb
        .meta()
        .audit_list(Some(&rec.tenant), Some(rec.id.as_str()), 100)
        .await
        .unwrap();
    let fails: Vec<_> = audit.iter().filter(|e| e.action == "fail").collect();
    assert_eq!(fails.len(), 1, "{audit:?}");
    assert_eq!(fails[0].actor, "system");
    assert!(fails[0].detail["reason"]
        .as_str()
        .unwrap()
        .contains("no snapshot"));
}

#[tokio::test]
async fn an_exec_longer_than_the_idle_window_is_activity_until_it_ends() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, short_lived(OnIdle::Pause)).await;
    // The exec runs 2 s, twice the idle window; the last activity before it
    // was its start.
    let m2 = m.clone();
    let id = rec.id.clone();
    let long = tokio::spawn(async move { m2.exec(&ctx(), &id, req(&["sleep", "2"]), None).await });
    sleep_ms(1200).await;
    // Idle by the clock, but a request is in flight: left alone, and the
    // pass does not wait for it to end and then pause what just worked.
    let t = std::time::Instant::now();
    assert!(m.reap_once().await.unwrap().is_empty());
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    long.await.unwrap().unwrap();
    // Just ended: its end is activity.
    assert!(m.reap_once().await.unwrap().is_empty());
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    sleep_ms(1100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "idle_paused")]);
}

/// A pass reads only the sandboxes whose deadline has come from the
/// deadline index: paused sandboxes far from their expiry cost nothing, and
/// a sandbox whose idle window activity moved is read once, then not again
/// until its new deadline.
#[tokio::test]
async fn a_pass_reads_only_the_sandboxes_due() {
    let env = Env::process();
    let m = env.manager().await;
    let mut long = manifest();
    long.lifecycle.paused_ttl_secs = 3600;
    for _ in 0..5 {
        let rec = running_with(&m, long.clone()).await;
        m.pause(&ctx(), &rec.id, None).await.unwrap();
    }
    let examined = |m: &stasis_control::Manager| m.metrics().reaper_examined_total();
    let busy = running_with(&m, short_lived(OnIdle::Pause)).await;
    let idle = running_with(&m, short_lived(OnIdle::Pause)).await;
    let before = examined(&m);
    assert!(m.reap_once().await.unwrap().is_empty());
    assert_eq!(examined(&m), before, "nothing is due yet");
    sleep_ms(700).await;
    run(&m, &busy.id, &["get", "k"]).await;
    sleep_ms(500).await;
    // Both are due by the index; only the one without activity is paused,
    // and the other's deadline moves to its last activity + the window.
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(idle.id.clone(), "idle_paused")]);
    assert_eq!(examined(&m), before + 2);
    assert!(m.reap_once().await.unwrap().is_empty());
    assert_eq!(
        examined(&m),
        before + 2,
        "the busy one is not read again yet"
    );
    sleep_ms(600).await;
    let done = m.reap_once().await.unwrap();
    assert!(done.contains(&(busy.id.clone(), "idle_paused")), "{done:?}");
    assert_eq!(state(&m, &busy.id).await, SandboxState::Paused);
}
