//! A node that cannot confirm its lease stops serving the sandbox before
//! another node may take it over, and resumes serving without a restore when
//! the lease turns out to be still its own.

use std::sync::Arc;
use std::time::Duration;

use stasis_control::cluster::{Cluster, ClusterConfig};
use stasis_core::{ErrorCode, SandboxState};

use super::harness::*;

const LEASE: Duration = Duration::from_millis(1000);

async fn node(env: &Env, id: &str) -> (Arc<stasis_control::Manager>, Arc<Cluster>) {
    let m = env.manager().await;
    let c = Cluster::start(
        ClusterConfig {
            node_id: id.into(),
            advertise_url: format!("http://{id}.invalid"),
            lease: LEASE,
        },
        m.meta().clone(),
    )
    .await
    .unwrap();
    m.set_cluster(c.clone());
    (m, c)
}

#[tokio::test]
async fn an_unconfirmed_lease_stops_serving_until_confirmed_again() {
    let env = Env::process();
    // No heartbeat task: the lease is confirmed only when taken.
    let (m, c) = node(&env, "a").await;
    let rec = running(&m).await;
    assert!(c.serves(&rec.id));
    tokio::time::sleep(LEASE.mul_f64(0.85)).await;
    assert!(!c.serves(&rec.id), "unconfirmed for 85% of the lease");
    assert!(c.fence(&rec.id).is_some(), "writes keep their fence");

    // The next request confirms the lease (still this node's) and is
    // served by the same sandbox: nothing was restored.
    let restores_before = env
        .fake
        .calls()
        .iter()
        .filter(|c| c.starts_with("restore") || c.starts_with("destroy"))
        .count();
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await.trim(), "memory");
    assert!(c.serves(&rec.id));
    let restores = env
        .fake
        .calls()
        .iter()
        .filter(|c| c.starts_with("restore") || c.starts_with("destroy"))
        .count();
    assert_eq!(
        restores,
        restores_before,
        "no takeover of its own sandbox: {:?}",
        env.fake.calls()
    );
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
}

#[tokio::test]
async fn a_node_whose_lease_was_taken_no_longer_serves_the_sandbox() {
    let env = Env::process();
    let (a, ca) = node(&env, "a").await;
    let rec = running(&a).await;
    // Node a is cut off (no heartbeat); its lease runs out and node b,
    // alive and heartbeating, takes the lease.
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let b = Cluster::start(
        ClusterConfig {
            node_id: "b".into(),
            advertise_url: "http://b.invalid".into(),
            lease: LEASE,
        },
        a.meta().clone(),
    )
    .await
    .unwrap();
    let got = a
        .meta()
        .lease_acquire(&rec.id, "b", LEASE.as_millis() as i64)
        .await
        .unwrap();
    assert!(matches!(got, stasis_meta::lease::Acquire::Acquired { .. }));
    b.heartbeat().await.unwrap();

    // Before a's heartbeat notices, a request reaching node a is refused
    // (it runs on b) instead of being answered by a's stale copy.
    assert!(!ca.serves(&rec.id));
    let e = a
        .exec(&ctx(), &rec.id, req(&["get", "k"]), None)
        .await
        .expect_err("a stale node must not serve");
    assert_eq!(e.code, ErrorCode::Busy, "{e}");
    assert!(e.message.contains("node b"), "{e}");
    // Its heartbeat then reports the sandbox lost.
    assert_eq!(ca.heartbeat().await.unwrap(), vec![rec.id.clone()]);
    assert!(ca.fence(&rec.id).is_none());
}

#[tokio::test]
async fn a_heartbeat_confirms_and_keeps_serving() {
    let env = Env::process();
    let (m, c) = node(&env, "a").await;
    let rec = running(&m).await;
    for _ in 0..4 {
        tokio::time::sleep(LEASE / 3).await;
        assert!(c.heartbeat().await.unwrap().is_empty());
        assert!(c.serves(&rec.id), "renewed by each heartbeat");
    }
}
