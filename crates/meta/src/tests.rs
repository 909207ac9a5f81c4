//! The sandbox records' state writes, on every engine.

use super::*;
use stasis_core::ErrorCode;

#[tokio::test]
async fn transitions_are_compare_and_set() {
    for db in crate::testdb::all().await {
        eprintln!("engine {}", db.name);
        transitions_are_compare_and_set_on(&db.meta).await;
    }
}

#[tokio::test]
async fn only_unstarted_or_destroyed_records_are_discarded() {
    for db in crate::testdb::all().await {
        eprintln!("engine {}", db.name);
        let m = &db.meta;
        let t = TenantId::parse("t-a").unwrap();
        let new = |m: &Meta| {
            let id = SandboxId::generate();
            let t = t.clone();
            let m = m.clone();
            async move {
                m.insert_sandbox(&id, &t, &Manifest::default(), BackendKind::Process, None)
                    .await
                    .unwrap();
                id
            }
        };
        // A refused start: Creating -> gone.
        let a = new(m).await;
        m.discard(&a, SandboxState::Creating).await.unwrap();
        assert_eq!(m.get(&a).await.unwrap_err().code, ErrorCode::NotFound);
        // A started sandbox is never discarded as Creating, nor in any
        // state other than Creating/Destroyed.
        let b = new(m).await;
        m.transition(
            &b,
            SandboxState::Creating,
            SandboxState::Running,
            Patch::default(),
        )
        .await
        .unwrap();
        for s in [
            SandboxState::Creating,
            SandboxState::Running,
            SandboxState::Failed,
        ] {
            assert_eq!(
                m.discard(&b, s).await.unwrap_err().code,
                ErrorCode::InvalidState,
                "{s}"
            );
        }
        assert_eq!(m.get(&b).await.unwrap().state, SandboxState::Running);
        m.transition(
            &b,
            SandboxState::Running,
            SandboxState::Destroying,
            Patch::default(),
        )
        .await
        .unwrap();
        m.transition(
            &b,
            SandboxState::Destroying,
            SandboxState::Destroyed,
            Patch::default(),
        )
        .await
        .unwrap();
        m.discard(&b, SandboxState::Destroyed).await.unwrap();
        assert!(m.list(Some(&t), None).await.unwrap().is_empty());
    }
}

async fn transitions_are_compare_and_set_on(m: &Meta) {
    let id = SandboxId::generate();
    let t = TenantId::parse("t-a").unwrap();
    let rec = m
        .insert_sandbox(&id, &t, &Manifest::default(), BackendKind::Process, None)
        .await
        .unwrap();
    assert_eq!(rec.state, SandboxState::Creating);
    m.transition(
        &id,
        SandboxState::Creating,
        SandboxState::Running,
        Patch::default(),
    )
    .await
    .unwrap();
    // A second racer that still believes the sandbox is Creating loses.
    let e = m
        .transition(
            &id,
            SandboxState::Creating,
            SandboxState::Running,
            Patch::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, stasis_core::ErrorCode::InvalidState);
    // Illegal transitions are refused before touching the row.
    let e = m
        .transition(
            &id,
            SandboxState::Running,
            SandboxState::Paused,
            Patch::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, stasis_core::ErrorCode::InvalidState);
    let snap = SnapshotId::generate();
    let rec = m
        .transition(
            &id,
            SandboxState::Running,
            SandboxState::Pausing,
            Patch {
                pause_snapshot: Some(Some(snap.clone())),
                pause_kind: Some(Some(PauseKind::Memory)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(rec, m.get(&id).await.unwrap());
    assert_eq!(rec.pause_snapshot, Some(snap));
}

#[tokio::test]
async fn other_tenants_see_not_found() {
    for db in crate::testdb::all().await {
        eprintln!("engine {}", db.name);
        other_tenants_see_not_found_on(&db.meta).await;
    }
}

/// A write transaction abandoned at any point (its request cancelled
/// because the client went away) leaves no pooled connection inside it:
/// every later insert is visible at once from every connection, and no
/// writer waits on a lock nobody will release. (Before, such a connection
/// went back to the pool mid-transaction and a later create answered 404
/// for its own sandbox.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_transactions_never_poison_the_pool() {
    for db in crate::testdb::all().await {
        eprintln!("engine {}", db.name);
        abandoned_transactions_never_poison_the_pool_on(&db.meta).await;
    }
}

async fn abandoned_transactions_never_poison_the_pool_on(m: &Meta) {
    let t = TenantId::parse("t-a").unwrap();
    let entry = |i: u64| NewAuditEntry {
        tenant: t.clone(),
        actor: "test".into(),
        action: "exec".into(),
        target: format!("sb-{i}"),
        detail: serde_json::json!({"i": i}),
    };
    for i in 0..12u64 {
        // Dropped right after BEGIN...
        drop(m.begin().await.unwrap());
        // ...and audit appends cancelled at varying points of their way.
        let _ = tokio::time::timeout(Duration::from_micros(i * 150), m.audit(entry(i))).await;
    }
    for _ in 0..24 {
        let id = SandboxId::generate();
        m.insert_sandbox(&id, &t, &Manifest::default(), BackendKind::Process, None)
            .await
            .unwrap();
        // Concurrent reads spread over the pool's connections.
        let (a, b, c, d) = tokio::join!(m.get(&id), m.get(&id), m.get(&id), m.get(&id));
        for r in [a, b, c, d] {
            assert_eq!(r.unwrap().id, id);
        }
        m.transition(
            &id,
            SandboxState::Creating,
            SandboxState::Running,
            Patch::default(),
        )
        .await
        .unwrap();
        m.audit(entry(99)).await.unwrap();
    }
    let v = m.audit_verify().await.unwrap();
    assert!(v.ok, "{v:?}");
}

async fn other_tenants_see_not_found_on(m: &Meta) {
    let id = SandboxId::generate();
    let a = TenantId::parse("t-a").unwrap();
    let b = TenantId::parse("t-b").unwrap();
    m.insert_sandbox(&id, &a, &Manifest::default(), BackendKind::Process, None)
        .await
        .unwrap();
    assert!(m.get_for(&a, &id).await.is_ok());
    let e = m.get_for(&b, &id).await.unwrap_err();
    assert_eq!(e.code, stasis_core::ErrorCode::NotFound);
    assert_eq!(m.list(Some(&b), None).await.unwrap().len(), 0);
    assert_eq!(
        m.list(Some(&a), Some(SandboxState::Creating))
            .await
            .unwrap()
            .len(),
        1
    );
}
