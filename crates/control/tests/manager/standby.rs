//! Standby on the fake backend: an idle pause stores its snapshot and keeps
//! the stopped compute for the sandbox's standby window; a resume in that
//! window continues it without reading the store; the window's end, an
//! explicit pause, a destroy and a failed upload each end it as they should.

use std::time::Duration;

use stasis_core::{OnIdle, SandboxState};
use stasis_meta::PauseKind;

use crate::harness::*;

fn with_standby(secs: u64) -> stasis_core::Manifest {
    let mut m = short_lived(OnIdle::Pause);
    m.lifecycle.paused_ttl_secs = 3600;
    m.lifecycle.standby_secs = Some(secs);
    m
}

async fn idle_pause(m: &stasis_control::Manager, id: &stasis_core::SandboxId) {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let done = m.reap_once().await.unwrap();
    assert!(done.contains(&(id.clone(), "idle_paused")), "{done:?}");
}

#[tokio::test]
async fn an_idle_pause_is_stored_and_held_and_a_resume_continues_it() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, with_standby(60)).await;
    idle_pause(&m, &rec.id).await;
    let r = record(&m, &rec.id).await;
    assert_eq!(r.state, SandboxState::Paused);
    assert_eq!(r.pause_kind, Some(PauseKind::Memory));
    // Durable as always: the pause snapshot is in the store.
    assert!(stored(&m, r.pause_snapshot.as_ref().unwrap()).await);
    let held = m.standby_of(&r).expect("held in standby");
    assert!(held.until_ms - held.since_ms >= 59_000, "{held:?}");
    assert_eq!(m.standby_all().len(), 1);
    // The next request continues the held sandbox: memory and files intact,
    // nothing fetched.
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");
    assert!(env.fake.calls().contains(&"resume.standby".to_string()));
    assert!(m.standby_all().is_empty());
    let text = m.metrics().render(m.meta(), m.snapshots()).await.unwrap();
    assert!(
        text.contains("stasis_resumes_total{path=\"local\"} 1")
            || text.contains("stasis_resumes_total{path=\"standby\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn the_window_ends_the_standby_and_the_store_resumes_it() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, with_standby(1)).await;
    idle_pause(&m, &rec.id).await;
    assert!(m.standby_of(&record(&m, &rec.id).await).is_some());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let done = m.reap_once().await.unwrap();
    assert!(
        done.contains(&(rec.id.clone(), "standby_released")),
        "{done:?}"
    );
    let r = record(&m, &rec.id).await;
    assert_eq!(r.state, SandboxState::Paused);
    assert!(m.standby_of(&r).is_none());
    // From the stored snapshot, with its memory.
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");
    assert!(!env.fake.calls().contains(&"resume.standby".to_string()));
}

#[tokio::test]
async fn standby_zero_or_an_explicit_pause_frees_the_compute() {
    let env = Env::process();
    // The daemon's default off, the manifest silent: no standby.
    let m = env.manager_with(|c| c.standby = Duration::ZERO).await;
    let mut man = with_standby(0);
    man.lifecycle.standby_secs = None;
    let a = running_with(&m, man).await;
    idle_pause(&m, &a.id).await;
    assert!(m.standby_of(&record(&m, &a.id).await).is_none());
    // The manifest's 0 wins over the daemon's default.
    let m = env.manager().await;
    let b = running_with(&m, with_standby(0)).await;
    idle_pause(&m, &b.id).await;
    assert!(m.standby_of(&record(&m, &b.id).await).is_none());
    // An explicit pause frees the compute unless it asks for standby.
    let c = running_with(&m, with_standby(60)).await;
    m.pause(&ctx(), &c.id, None).await.unwrap();
    assert!(m.standby_of(&record(&m, &c.id).await).is_none());
    let d = running_with(&m, with_standby(60)).await;
    m.pause_with(&ctx(), &d.id, None, true).await.unwrap();
    assert!(m.standby_of(&record(&m, &d.id).await).is_some());
    // A filesystem-only pause has no memory to hold.
    let e = running_with(&m, with_standby(60)).await;
    m.pause_with(&ctx(), &e.id, Some(false), true)
        .await
        .unwrap();
    assert!(m.standby_of(&record(&m, &e.id).await).is_none());
}

#[tokio::test]
async fn destroying_a_sandbox_in_standby_releases_it() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, with_standby(60)).await;
    idle_pause(&m, &rec.id).await;
    let snap = record(&m, &rec.id).await.pause_snapshot.unwrap();
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert!(m.standby_all().is_empty());
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
    assert!(!stored(&m, &snap).await);
}

#[tokio::test]
async fn a_pause_that_fails_after_the_hold_continues_the_held_sandbox() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, with_standby(60)).await;
    // The backend took the sandbox into standby, then failed: the settling
    // finds the compute held and continues it; it runs on as before.
    env.fake
        .fail_at("pause.done", stasis_core::ErrorCode::BackendError);
    let r = m.pause_with(&ctx(), &rec.id, None, true).await;
    assert!(r.is_err());
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    assert!(m.standby_all().is_empty());
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");
}

/// Where a release ends the memory (the process backend's frozen
/// processes), the window's end and an eviction each turn the pause into a
/// filesystem-only one: recorded, audited with what was lost, counted; the
/// sandbox still resumes from its files.
#[tokio::test]
async fn a_release_that_loses_the_memory_downgrades_the_pause() {
    let env = Env::process();
    env.fake.set_release_loses_memory(true);
    let m = env.manager().await;
    let rec = running_with(&m, with_standby(1)).await;
    idle_pause(&m, &rec.id).await;
    assert_eq!(
        record(&m, &rec.id).await.pause_kind,
        Some(PauseKind::Memory)
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let done = m.reap_once().await.unwrap();
    assert!(
        done.contains(&(rec.id.clone(), "pause_downgraded")),
        "{done:?}"
    );
    let r = record(&m, &rec.id).await;
    assert_eq!(r.state, SandboxState::Paused);
    assert_eq!(r.pause_kind, Some(PauseKind::Filesystem));
    assert!(
        r.reason
            .as_deref()
            .unwrap_or("")
            .contains("frozen window ended"),
        "{r:?}"
    );
    let audit = m
        .meta()
        .audit_list(Some(&r.tenant), Some(r.id.as_str()), 100)
        .await
        .unwrap();
    let entry = audit
        .iter()
        .find(|e| e.action == "pause_downgraded")
        .expect("audited");
    assert_eq!(entry.detail["pause_kind"], "filesystem");
    assert!(entry.detail["lost"].as_str().unwrap().contains("memory"));
    let text = m.metrics().render(m.meta(), m.snapshots()).await.unwrap();
    assert!(text.contains("stasis_pauses_downgraded_total 1"), "{text}");
    // It still resumes (from the store's copy).
    m.resume(&ctx(), &rec.id).await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);

    // An eviction of a memory pause ends the memory at once.
    let b = running_with(&m, with_standby(60)).await;
    m.pause(&ctx(), &b.id, None).await.unwrap();
    assert_eq!(record(&m, &b.id).await.pause_kind, Some(PauseKind::Memory));
    let r = m.evict(&ctx(), &b.id).await.unwrap();
    assert_eq!(r.pause_kind, Some(PauseKind::Filesystem));
    assert!(
        r.reason.as_deref().unwrap_or("").contains("evicted"),
        "{r:?}"
    );
    // A backend whose store copy keeps the memory never downgrades.
    env.fake.set_release_loses_memory(false);
    let c = running_with(&m, with_standby(60)).await;
    m.pause(&ctx(), &c.id, None).await.unwrap();
    let r = m.evict(&ctx(), &c.id).await.unwrap();
    assert_eq!(r.pause_kind, Some(PauseKind::Memory));
}
