//! A running-time deadline that pauses instead of destroying
//! (`lifecycle.on_lifetime`), renewed by the resume after that pause, and
//! the E2B-style timeout (`Manager::set_timeout`): set from now, extended
//! only when asked, kept across a daemon restart because it lives in the
//! sandbox's persisted policy.

use std::time::Duration;

use stasis_core::{OnIdle, OnLifetime, SandboxState};
use stasis_meta::PauseKind;

use crate::harness::*;

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn paused_at_lifetime(on_lifetime: OnLifetime, renew_secs: u64) -> stasis_core::Manifest {
    let mut m = manifest();
    m.lifecycle.on_idle = OnIdle::Nothing;
    m.lifecycle.max_lifetime_secs = 1;
    m.lifecycle.on_lifetime = on_lifetime;
    m.lifecycle.renew_secs = renew_secs;
    m
}

#[tokio::test]
async fn a_pausing_lifetime_pauses_and_its_resume_is_renewed() {
    let env = Env::process();
    let m = env.manager().await;
    let mem = running_with(&m, paused_at_lifetime(OnLifetime::Pause, 60)).await;
    let fs = running_with(&m, paused_at_lifetime(OnLifetime::PauseFilesystem, 0)).await;
    sleep_ms(1100).await;
    let mut done = m.reap_once().await.unwrap();
    done.sort();
    let mut want = vec![
        (mem.id.clone(), "lifetime_paused"),
        (fs.id.clone(), "lifetime_paused_filesystem"),
    ];
    want.sort();
    assert_eq!(done, want);
    let r = record(&m, &mem.id).await;
    assert_eq!(r.state, SandboxState::Paused);
    assert_eq!(r.pause_kind, Some(PauseKind::Memory));
    assert!(r.expires_at_ms.is_some(), "kept per its paused TTL");
    assert_eq!(
        record(&m, &fs.id).await.pause_kind,
        Some(PauseKind::Filesystem)
    );

    // A resume (here E2B's connect) grants renew_secs more (0: the limit is lifted), so the next
    // pass leaves both running.
    let (r, resumed) = m.ensure_running(&ctx(), &mem.id).await.unwrap();
    assert!(resumed);
    assert_eq!(r.state, SandboxState::Running);
    assert!(
        (61..=63).contains(&r.manifest.lifecycle.max_lifetime_secs),
        "{}",
        r.manifest.lifecycle.max_lifetime_secs
    );
    let (r, _) = m.resume(&ctx(), &fs.id).await.unwrap();
    assert_eq!(r.manifest.lifecycle.max_lifetime_secs, 0);
    assert!(m.reap_once().await.unwrap().is_empty());
    assert_eq!(state(&m, &mem.id).await, SandboxState::Running);
    let (_, resumed) = m.ensure_running(&ctx(), &mem.id).await.unwrap();
    assert!(!resumed, "already running");
}

#[tokio::test]
async fn set_timeout_counts_from_now_extends_only_when_asked_and_survives_a_restart() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.lifecycle.on_idle = OnIdle::Nothing;
    man.lifecycle.on_lifetime = OnLifetime::Pause;
    let rec = running_with(&m, man).await;

    let r = m.set_timeout(&ctx(), &rec.id, 300, false).await.unwrap();
    let l = &r.manifest.lifecycle;
    assert!((300..=302).contains(&l.max_lifetime_secs));
    assert_eq!(l.renew_secs, 300);
    // Extending with a shorter timeout keeps the later limit; a longer one moves it.
    let r = m.set_timeout(&ctx(), &rec.id, 10, true).await.unwrap();
    assert!((300..=302).contains(&r.manifest.lifecycle.max_lifetime_secs));
    let r = m.set_timeout(&ctx(), &rec.id, 600, true).await.unwrap();
    assert!((600..=602).contains(&r.manifest.lifecycle.max_lifetime_secs));
    // Shortening is what set_timeout itself does.
    let r = m.set_timeout(&ctx(), &rec.id, 1, false).await.unwrap();
    assert!(r.manifest.lifecycle.max_lifetime_secs <= 3);

    // The deadline is the sandbox's persisted policy: a new daemon's reaper
    // applies it.
    drop(m);
    let m = env.manager().await;
    m.reconcile().await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    sleep_ms(3100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "lifetime_paused")]);

    // 0: the deadline is now. Audited, like every lifecycle change.
    let (r, _) = m.resume(&ctx(), &rec.id).await.unwrap();
    assert_eq!(r.state, SandboxState::Running);
    m.set_timeout(&ctx(), &rec.id, 0, false).await.unwrap();
    sleep_ms(1100).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "lifetime_paused")]);
    let audit = m
        .meta()
        .audit_list(None, Some(rec.id.as_str()), 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.action == "lifecycle.set")
        .count();
    assert!(audit >= 5, "{audit} lifecycle.set entries");

    // Refused: another tenant's sandbox is not found; a destroyed one is final.
    let other = stasis_control::manager::Ctx {
        tenant: stasis_core::TenantId::parse("t-other").unwrap(),
        actor: "test".into(),
    };
    assert_eq!(
        code(m.set_timeout(&other, &rec.id, 5, false).await),
        stasis_core::ErrorCode::NotFound
    );
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert_eq!(
        code(m.set_timeout(&ctx(), &rec.id, 5, false).await),
        stasis_core::ErrorCode::InvalidState
    );
}
