//! The node's cap on local pause state on the fake backend (each stored
//! pause leaving a set size "on the host"): past the cap the reaper evicts
//! the least recently paused first, never a sandbox that runs; cap 0
//! evicts every stored pause; an evicted sandbox resumes from the store
//! with its files and memory; a restarted daemon counts what is left.

use std::time::Duration;

use stasis_control::Manager;
use stasis_core::{SandboxId, SandboxState};

use crate::harness::*;

const EACH: u64 = 100 << 20;

async fn paused(m: &Manager) -> SandboxId {
    let rec = running(m).await;
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    // Pause times a few ms apart: the order of eviction is theirs.
    tokio::time::sleep(Duration::from_millis(5)).await;
    rec.id
}

fn evicted(done: &[(SandboxId, &'static str)]) -> Vec<SandboxId> {
    done.iter()
        .filter(|(_, w)| *w == "local_evicted")
        .map(|(id, _)| id.clone())
        .collect()
}

fn evict_calls(env: &Env) -> usize {
    env.fake.calls().iter().filter(|c| *c == "evict").count()
}

async fn metrics(m: &Manager) -> String {
    m.metrics().render(m.meta(), m.snapshots()).await.unwrap()
}

/// Resumes (from the store: nothing is kept locally) with what it had.
async fn resumes_intact(m: &Manager, id: &SandboxId) {
    assert_eq!(run(m, id, &["cat", "f"]).await, "files");
    assert_eq!(run(m, id, &["get", "k"]).await, "memory\n");
    assert_eq!(state(m, id).await, SandboxState::Running);
}

#[tokio::test]
async fn over_the_cap_the_oldest_pause_is_evicted_first() {
    let env = Env::process();
    env.fake.set_local_bytes(EACH);
    let m = env
        .manager_with(|c| c.local_pause_max_bytes = Some(2 * EACH + EACH / 2))
        .await;
    let live = running(&m).await;
    let a = paused(&m).await;
    let b = paused(&m).await;
    let c = paused(&m).await;
    assert_eq!(m.local_pause_bytes(), 3 * EACH);

    let done = m.reap_once().await.unwrap();
    assert_eq!(evicted(&done), vec![a.clone()], "{done:?}");
    assert_eq!(evict_calls(&env), 1);
    assert_eq!(m.local_pause_bytes(), 2 * EACH);
    assert_eq!(m.local_pause_bytes_of(&a), None);
    assert_eq!(m.local_pause_bytes_of(&b), Some(EACH));
    assert_eq!(m.local_pause_bytes_of(&c), Some(EACH));
    assert_eq!(state(&m, &live.id).await, SandboxState::Running);
    // Under the cap now: the next pass leaves the rest.
    let done = m.reap_once().await.unwrap();
    assert!(evicted(&done).is_empty(), "{done:?}");
    assert_eq!(evict_calls(&env), 1);

    // Audited as the system's evict, and counted.
    let audit = m
        .meta()
        .audit_list(None, Some(a.as_str()), 100)
        .await
        .unwrap();
    let e = audit.iter().find(|e| e.action == "evict").expect("audited");
    assert_eq!(e.actor, "system");
    assert_eq!(e.detail["reason"], "local_cap");
    let text = metrics(&m).await;
    assert!(
        text.contains("stasis_local_pause_evictions_total 1"),
        "{text}"
    );
    assert!(text.contains(&format!("stasis_local_pause_bytes {}", 2 * EACH)));
    let cap = 2 * EACH + EACH / 2;
    assert!(text.contains(&format!("stasis_local_pause_cap_bytes {cap}")));

    // The evicted one resumes from the store, its files and memory intact;
    // a resume takes a sandbox out of the count.
    resumes_intact(&m, &a).await;
    resumes_intact(&m, &c).await;
    assert_eq!(m.local_pause_bytes(), EACH);
    assert_eq!(m.local_pause_bytes_of(&b), Some(EACH));
}

#[tokio::test]
async fn a_sandbox_that_runs_is_never_evicted() {
    let env = Env::process();
    env.fake.set_local_bytes(EACH);
    let m = env
        .manager_with(|c| c.local_pause_max_bytes = Some(0))
        .await;
    let never_paused = running(&m).await;
    // Paused (counted), then resumed before any pass: no longer counted.
    let resumed = running(&m).await;
    m.pause(&ctx(), &resumed.id, None).await.unwrap();
    assert_eq!(m.local_pause_bytes(), EACH);
    run(&m, &resumed.id, &["true"]).await;
    assert_eq!(m.local_pause_bytes(), 0);
    // Paused, then destroyed: gone from the count too.
    let gone = paused(&m).await;
    m.destroy(&ctx(), &gone).await.unwrap();
    assert_eq!(m.local_pause_bytes(), 0);
    let done = m.reap_once().await.unwrap();
    assert!(evicted(&done).is_empty(), "{done:?}");
    assert_eq!(evict_calls(&env), 0);
    for id in [&never_paused.id, &resumed.id] {
        assert_eq!(state(&m, id).await, SandboxState::Running);
        assert_eq!(run(&m, id, &["get", "k"]).await, "memory\n");
    }
}

#[tokio::test]
async fn cap_zero_evicts_every_stored_pause_standby_included() {
    let env = Env::process();
    env.fake.set_local_bytes(EACH);
    let m = env
        .manager_with(|c| c.local_pause_max_bytes = Some(0))
        .await;
    let a = paused(&m).await;
    let b = paused(&m).await;
    let held = running(&m).await;
    m.pause_with(&ctx(), &held.id, None, true).await.unwrap();
    assert_eq!(m.standby_all().len(), 1);
    assert_eq!(m.local_pause_bytes(), 3 * EACH);

    let done = m.reap_once().await.unwrap();
    let mut got = evicted(&done);
    got.sort();
    let mut want = vec![a.clone(), b.clone(), held.id.clone()];
    want.sort();
    assert_eq!(got, want, "{done:?}");
    assert_eq!(m.local_pause_bytes(), 0);
    assert!(m.standby_all().is_empty(), "evicting ends the standby");
    for id in [&a, &b, &held.id] {
        assert_eq!(state(&m, id).await, SandboxState::Paused);
    }
    for id in [&a, &b, &held.id] {
        resumes_intact(&m, id).await;
    }
    assert!(!env.fake.calls().contains(&"resume.standby".to_string()));
}

#[tokio::test]
async fn a_restarted_daemon_counts_what_its_paused_sandboxes_keep() {
    let env = Env::process();
    env.fake.set_local_bytes(EACH);
    let m = env.manager().await;
    assert!(m.local_pause_cap() > 0, "the default: half the free disk");
    let a = paused(&m).await;
    let b = paused(&m).await;
    drop(m);
    let m = env
        .manager_with(|c| c.local_pause_max_bytes = Some(EACH))
        .await;
    assert_eq!(m.local_pause_bytes(), 0);
    m.reconcile().await.unwrap();
    assert_eq!(m.local_pause_bytes(), 2 * EACH);
    let done = m.reap_once().await.unwrap();
    assert_eq!(evicted(&done), vec![a.clone()], "{done:?}");
    assert_eq!(m.local_pause_bytes_of(&b), Some(EACH));
    resumes_intact(&m, &a).await;
}

#[tokio::test]
async fn a_pause_not_yet_stored_is_never_evicted() {
    let env = Env::process();
    env.fake.set_local_bytes(EACH);
    let m = env
        .manager_with(|c| c.local_pause_max_bytes = Some(0))
        .await;
    let rec = running(&m).await;
    // The daemon dies after the backend saved the pause, before the store
    // has it: the sandbox is Pausing, its state only in the stage.
    env.fake.crash_at("pause.done");
    crash(&env.fake, m.pause(&ctx(), &rec.id, None)).await;
    drop(m);
    env.fake.clear_faults();
    let m = env
        .manager_with(|c| c.local_pause_max_bytes = Some(0))
        .await;
    assert_eq!(state(&m, &rec.id).await, SandboxState::Pausing);
    let done = m.reap_once().await.unwrap();
    assert!(evicted(&done).is_empty(), "{done:?}");
    assert_eq!(evict_calls(&env), 0);
    // Reconcile stores and records the pause: now it counts, and goes.
    m.reconcile().await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Paused);
    assert_eq!(m.local_pause_bytes(), EACH);
    let done = m.reap_once().await.unwrap();
    assert_eq!(evicted(&done), vec![rec.id.clone()], "{done:?}");
    resumes_intact(&m, &rec.id).await;
}
