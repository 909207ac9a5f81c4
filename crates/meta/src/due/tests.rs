use stasis_core::{BackendKind, LifecyclePolicy, Manifest, SandboxId, TenantId};

use super::*;
use crate::Patch;

fn manifest(p: LifecyclePolicy) -> Manifest {
    Manifest {
        lifecycle: p,
        ..Manifest::default()
    }
}

async fn running(m: &Meta, p: LifecyclePolicy) -> SandboxRecord {
    let id = SandboxId::generate();
    let t = TenantId::parse("t-a").unwrap();
    m.insert_sandbox(&id, &t, &manifest(p), BackendKind::Process, None)
        .await
        .unwrap();
    let since = stasis_core::now_ms();
    m.transition(
        &id,
        SandboxState::Creating,
        SandboxState::Running,
        Patch {
            running_since_ms: Some(Some(since)),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

fn policy(idle: u64, on_idle: OnIdle, ttl: u64) -> LifecyclePolicy {
    LifecyclePolicy {
        idle_timeout_secs: idle,
        on_idle,
        paused_ttl_secs: ttl,
        ..LifecyclePolicy::default()
    }
}

#[test]
fn the_earliest_deadline_of_the_state_counts() {
    let rec = |state, p: LifecyclePolicy| SandboxRecord {
        id: SandboxId::generate(),
        tenant: TenantId::parse("t-a").unwrap(),
        backend: BackendKind::Process,
        state,
        reason: None,
        manifest: manifest(p),
        manifest_digest: String::new(),
        created_at_ms: 1_000,
        updated_at_ms: 5_000,
        running_ms: 2_000,
        running_since_ms: Some(4_000),
        paused_at_ms: None,
        expires_at_ms: Some(90_000),
        pause_snapshot: None,
        pause_kind: None,
        source_snapshot: None,
        checkpoint_snapshot: None,
        checkpoint_at_ms: None,
        recovered_from_snapshot: None,
        recovered_at_ms: None,
        progress_lost_ms: None,
        owner: None,
    };
    // Running: idle from when it started running.
    let r = rec(SandboxState::Running, policy(10, OnIdle::Pause, 3600));
    assert_eq!(due_at(&r), Some(14_000));
    // The reaper counts it from the last activity it saw.
    assert_eq!(due_after_activity(&r, Some(20_000)), Some(30_000));
    // Lifetime: its remaining running time, when earlier.
    let mut p = policy(10, OnIdle::Pause, 3600);
    p.max_lifetime_secs = 5;
    assert_eq!(due_at(&rec(SandboxState::Running, p.clone())), Some(7_000));
    // Checkpoint: counted from the last one.
    p.max_lifetime_secs = 0;
    p.checkpoint_secs = 3;
    let mut c = rec(SandboxState::Running, p);
    c.checkpoint_at_ms = Some(8_000);
    assert_eq!(due_at(&c), Some(11_000));
    // Nothing to do on idle and no other policy: never due.
    let never = rec(SandboxState::Running, policy(10, OnIdle::Nothing, 3600));
    assert_eq!(due_at(&never), None);
    // Paused: its expiry, whatever the running policies say.
    let paused = rec(SandboxState::Paused, policy(10, OnIdle::Pause, 3600));
    assert_eq!(due_at(&paused), Some(90_000));
    // Transitional and final states are reconcile's, not the reaper's.
    for s in [
        SandboxState::Pausing,
        SandboxState::Failed,
        SandboxState::Destroyed,
    ] {
        assert_eq!(
            due_at(&rec(s, policy(10, OnIdle::Pause, 3600))),
            None,
            "{s}"
        );
    }
}

#[tokio::test]
async fn state_writes_keep_the_index_and_only_due_rows_are_read() {
    for db in crate::testdb::all().await {
        eprintln!("engine {}", db.name);
        let m = &db.meta;
        let soon = running(m, policy(1, OnIdle::Pause, 3600)).await;
        let later = running(m, policy(3600, OnIdle::Pause, 3600)).await;
        let never = running(m, policy(1, OnIdle::Nothing, 3600)).await;
        let now = stasis_core::now_ms();
        assert_eq!(m.due_of(&never.id).await.unwrap(), None);
        let due: Vec<_> = m.due(now + 2_000, None, 100).await.unwrap();
        assert_eq!(due.iter().map(|r| &r.id).collect::<Vec<_>>(), [&soon.id]);
        let both = m.due(now + 4_000_000, None, 100).await.unwrap();
        assert_eq!(both.len(), 2, "earliest first");
        assert_eq!(both[0].id, soon.id);
        assert_eq!(m.due(now + 4_000_000, None, 1).await.unwrap().len(), 1);

        // Paused: due at its expiry, not at the running deadlines.
        let paused_at = stasis_core::now_ms();
        m.transition(
            &soon.id,
            SandboxState::Running,
            SandboxState::Pausing,
            Patch::default(),
        )
        .await
        .unwrap();
        assert_eq!(
            m.due_of(&soon.id).await.unwrap(),
            None,
            "a pause in progress is not due"
        );
        let p = m
            .transition(
                &soon.id,
                SandboxState::Pausing,
                SandboxState::Paused,
                Patch {
                    paused_at_ms: Some(Some(paused_at)),
                    expires_at_ms: Some(Some(paused_at + 3_600_000)),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(m.due_of(&p.id).await.unwrap(), Some(paused_at + 3_600_000));

        // A later deadline the reaper computed replaces the stored one
        // only while the row is as the reaper read it.
        let later_rec = m.get(&later.id).await.unwrap();
        m.set_due(&later_rec, Some(42)).await.unwrap();
        assert_eq!(m.due_of(&later.id).await.unwrap(), Some(42));
        let stale = SandboxRecord {
            updated_at_ms: later_rec.updated_at_ms - 1,
            ..later_rec.clone()
        };
        m.set_due(&stale, Some(43)).await.unwrap();
        assert_eq!(m.due_of(&later.id).await.unwrap(), Some(42));

        // A runtime policy change recomputes it.
        let mut shorter = later_rec.manifest.lifecycle.clone();
        shorter.on_idle = OnIdle::Nothing;
        m.set_lifecycle(&later.id, &later_rec.manifest_digest, &shorter)
            .await
            .unwrap();
        assert_eq!(m.due_of(&later.id).await.unwrap(), None);
    }
}
