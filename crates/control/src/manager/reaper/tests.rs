//! The reaper's decisions over every state, idle policy, and deadline.

use super::*;
use stasis_core::manifest::LifecyclePolicy;
use stasis_core::{BackendKind, Manifest, TenantId};

use SandboxState as S;

const SEC: i64 = 1_000;
const NOW: i64 = 1_000_000 * SEC;

fn policy(on_idle: OnIdle) -> LifecyclePolicy {
    LifecyclePolicy {
        idle_timeout_secs: 60,
        on_idle,
        paused_ttl_secs: 3600,
        max_lifetime_secs: 0,
        checkpoint_secs: 0,
        standby_secs: None,
        ..Default::default()
    }
}

/// A sandbox record in `state` under `lifecycle`, running since an hour ago.
fn rec(state: SandboxState, lifecycle: LifecyclePolicy) -> SandboxRecord {
    let manifest = Manifest {
        lifecycle,
        ..Default::default()
    };
    SandboxRecord {
        id: SandboxId::generate(),
        tenant: TenantId::generate(),
        backend: BackendKind::Process,
        state,
        reason: None,
        manifest,
        manifest_digest: String::new(),
        created_at_ms: NOW - 7200 * SEC,
        updated_at_ms: NOW - 3600 * SEC,
        running_ms: 0,
        running_since_ms: (state == S::Running).then_some(NOW - 3600 * SEC),
        paused_at_ms: None,
        expires_at_ms: None,
        pause_snapshot: None,
        pause_kind: None,
        source_snapshot: None,
        checkpoint_snapshot: None,
        checkpoint_at_ms: None,
        recovered_from_snapshot: None,
        recovered_at_ms: None,
        progress_lost_ms: None,
        owner: None,
    }
}

const ON_IDLE: [OnIdle; 4] = [
    OnIdle::Pause,
    OnIdle::PauseFilesystem,
    OnIdle::Destroy,
    OnIdle::Nothing,
];

#[test]
fn an_idle_running_sandbox_gets_its_on_idle() {
    for on_idle in ON_IDLE {
        let r = rec(S::Running, policy(on_idle));
        // Active 59 s ago: not idle yet; 60 s ago: idle.
        assert_eq!(decide(NOW, &r, NOW - 59 * SEC), None, "{on_idle:?}");
        let want = match on_idle {
            OnIdle::Pause => Some(Reap::IdlePause { keep_memory: true }),
            OnIdle::PauseFilesystem => Some(Reap::IdlePause { keep_memory: false }),
            OnIdle::Destroy => Some(Reap::IdleDestroy),
            OnIdle::Nothing => None,
        };
        assert_eq!(decide(NOW, &r, NOW - 60 * SEC), want, "{on_idle:?}");
        assert_eq!(decide(NOW, &r, 0), want, "{on_idle:?}");
    }
}

#[test]
fn the_lifetime_limit_wins_over_idle_and_counts_running_time_only() {
    for on_idle in ON_IDLE {
        let mut p = policy(on_idle);
        p.max_lifetime_secs = 3600;
        let r = rec(S::Running, p.clone());
        // Running for exactly an hour: over, active or idle.
        assert_eq!(decide(NOW, &r, NOW), Some(Reap::LifetimeExpired));
        assert_eq!(decide(NOW, &r, 0), Some(Reap::LifetimeExpired));
        // Paused time does not count: half an hour before, half after a pause.
        let mut r = rec(S::Running, p);
        r.running_ms = 1800 * SEC;
        r.running_since_ms = Some(NOW - 1799 * SEC);
        assert_eq!(decide(NOW, &r, NOW), None, "{on_idle:?}");
        r.running_since_ms = Some(NOW - 1800 * SEC);
        assert_eq!(decide(NOW, &r, NOW), Some(Reap::LifetimeExpired));
    }
    // No limit (0): never over.
    let mut r = rec(S::Running, policy(OnIdle::Nothing));
    r.running_ms = 100 * 365 * 24 * 3600 * SEC;
    assert_eq!(decide(NOW, &r, NOW), None);
}

#[test]
fn a_paused_sandbox_expires_at_its_deadline() {
    for on_idle in ON_IDLE {
        let mut r = rec(S::Paused, policy(on_idle));
        assert_eq!(decide(NOW, &r, 0), None, "no deadline");
        r.expires_at_ms = Some(NOW + 1);
        assert_eq!(decide(NOW, &r, 0), None);
        r.expires_at_ms = Some(NOW);
        assert_eq!(decide(NOW, &r, 0), Some(Reap::TtlExpired));
        r.expires_at_ms = Some(NOW - 1);
        assert_eq!(decide(NOW, &r, NOW), Some(Reap::TtlExpired));
    }
}

#[test]
fn every_state_policy_and_deadline() {
    for state in SandboxState::ALL {
        for on_idle in ON_IDLE {
            for lifetime in [0, 1] {
                for expires in [None, Some(NOW - 1), Some(NOW + 1)] {
                    for active in [NOW, 0] {
                        let mut p = policy(on_idle);
                        p.max_lifetime_secs = lifetime;
                        let mut r = rec(state, p);
                        r.expires_at_ms = expires;
                        let d = decide(NOW, &r, active);
                        let case = format!("{state} {on_idle:?} {lifetime} {expires:?} {active}");
                        // Only running and paused sandboxes are ever reaped;
                        // one in flight between states is left alone.
                        match state {
                            S::Running => {
                                assert_ne!(d, Some(Reap::TtlExpired), "{case}");
                                // Something happens exactly when a limit is reached.
                                let idle = active == 0 && on_idle != OnIdle::Nothing;
                                assert_eq!(d.is_some(), lifetime == 1 || idle, "{case}");
                            }
                            S::Paused => {
                                let expired = expires == Some(NOW - 1);
                                let want = expired.then_some(Reap::TtlExpired);
                                assert_eq!(d, want, "{case}");
                            }
                            _ => assert_eq!(d, None, "{case}"),
                        }
                        // Idle reaps only ever apply to a running sandbox
                        // (the pass decides again under the lock).
                        if let Some(reap) = d {
                            assert_eq!(
                                reap.is_idle(),
                                state == S::Running && reap != Reap::LifetimeExpired,
                                "{case}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn what_the_reaper_did_keeps_its_names() {
    assert_eq!(Reap::LifetimeExpired.what(), "lifetime_expired");
    assert_eq!(Reap::IdlePause { keep_memory: true }.what(), "idle_paused");
    assert_eq!(
        Reap::IdlePause { keep_memory: false }.what(),
        "idle_paused_filesystem"
    );
    assert_eq!(Reap::IdleDestroy.what(), "idle_destroyed");
    assert_eq!(Reap::TtlExpired.what(), "ttl_expired");
}

#[test]
fn checkpoints_fall_due_from_the_last_one_else_the_start() {
    let mut p = policy(OnIdle::Pause);
    assert!(!checkpoint_due(NOW, &rec(S::Running, p.clone())), "off");
    p.checkpoint_secs = 60;
    // Running since an hour ago, never checkpointed: due.
    let mut r = rec(S::Running, p.clone());
    assert!(checkpoint_due(NOW, &r));
    // Checkpointed 59 s ago: not yet; 60 s ago: due.
    r.checkpoint_at_ms = Some(NOW - 59 * SEC);
    assert!(!checkpoint_due(NOW, &r));
    r.checkpoint_at_ms = Some(NOW - 60 * SEC);
    assert!(checkpoint_due(NOW, &r));
    // Never started running: counted from its creation.
    let mut r = rec(S::Running, p.clone());
    r.running_since_ms = None;
    r.created_at_ms = NOW - 30 * SEC;
    assert!(!checkpoint_due(NOW, &r));
    r.created_at_ms = NOW - 60 * SEC;
    assert!(checkpoint_due(NOW, &r));
    // Only running sandboxes are checkpointed.
    for state in SandboxState::ALL {
        if state != S::Running {
            assert!(!checkpoint_due(NOW, &rec(state, p.clone())), "{state}");
        }
    }
}
