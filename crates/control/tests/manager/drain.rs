//! A draining node starts no sandbox, pauses every one it runs to the
//! store and gives up their leases, so another node (two managers on one
//! shared meta database, as in `lease`) resumes them on their next request
//! with their files and memory; undrain takes sandboxes again.

use std::sync::Arc;
use std::time::Duration;

use stasis_control::cluster::{Cluster, ClusterConfig};
use stasis_core::{ErrorCode, SandboxState};

use super::harness::*;

async fn node(env: &Env, id: &str) -> (Arc<stasis_control::Manager>, Arc<Cluster>) {
    let m = env.manager().await;
    let c = Cluster::start(
        ClusterConfig {
            node_id: id.into(),
            advertise_url: format!("http://{id}.invalid"),
            lease: Duration::from_secs(30),
        },
        m.meta().clone(),
    )
    .await
    .unwrap();
    m.set_cluster(c.clone());
    (m, c)
}

#[tokio::test]
async fn a_drained_node_hands_its_sandboxes_to_another_node() {
    let env = Env::process();
    let (a, _ca) = node(&env, "a").await;
    let (b, cb) = node(&env, "b").await;
    let one = running(&a).await;
    let two = running(&a).await;
    let paused = running(&a).await;
    a.pause(&ctx(), &paused.id, None).await.unwrap();
    let elsewhere = running(&b).await;
    assert_eq!(a.drain_status().await.unwrap().running_here, 2);

    let report = a.drain("test", Duration::from_secs(30)).await.unwrap();
    let mut got = report.paused.clone();
    got.sort();
    let mut want = vec![one.id.to_string(), two.id.to_string()];
    want.sort();
    assert_eq!(got, want, "{report:?}");
    assert!(report.failed.is_empty() && report.left_running.is_empty());
    assert!(a.is_draining());
    assert_eq!(a.drain_status().await.unwrap().running_here, 0);
    for id in [&one.id, &two.id] {
        let r = record(&a, id).await;
        assert_eq!(r.state, SandboxState::Paused);
        assert_eq!(r.owner, None, "the lease is given up");
    }
    // Another node's sandbox is not this node's to pause.
    assert_eq!(state(&a, &elsewhere.id).await, SandboxState::Running);

    // The draining node starts nothing: no create, no resume (explicit or
    // by a request), and the sandbox stays as it was.
    assert_eq!(
        code(a.create(&ctx(), manifest()).await),
        ErrorCode::Unavailable
    );
    assert_eq!(
        code(a.resume(&ctx(), &one.id).await),
        ErrorCode::Unavailable
    );
    let e = a.exec(&ctx(), &one.id, req(&["get", "k"]), None).await;
    assert_eq!(code(e), ErrorCode::Unavailable);
    assert_eq!(state(&a, &one.id).await, SandboxState::Paused);

    // The other node resumes it on its next request, files and memory kept.
    assert_eq!(run(&b, &one.id, &["get", "k"]).await.trim(), "memory");
    let f = b.read_file(&ctx(), &one.id, "f").await.unwrap();
    assert_eq!(f.as_slice(), b"files");
    assert!(cb.serves(&one.id));
    assert_eq!(record(&b, &one.id).await.owner.as_deref(), Some("b"));

    // Undrained, the node takes sandboxes again.
    a.undrain();
    assert!(!a.is_draining());
    assert_eq!(run(&a, &two.id, &["get", "k"]).await.trim(), "memory");
    running(&a).await;
}

#[tokio::test]
async fn a_drain_waits_for_a_request_in_flight_only_as_long_as_it_may() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    // A request holds the sandbox (its slot shared) past the drain's time.
    let (m2, id) = (m.clone(), rec.id.clone());
    let hold = tokio::spawn(async move { m2.exec(&ctx(), &id, req(&["sleep", "2"]), None).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = m.drain("test", Duration::from_millis(300)).await.unwrap();
    assert_eq!(report.left_running, vec![rec.id.to_string()]);
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    hold.await.unwrap().unwrap();
    // Called again once the request ended, the drain pauses it.
    let report = m.drain("test", Duration::from_secs(30)).await.unwrap();
    assert_eq!(report.paused, vec![rec.id.to_string()]);
    assert_eq!(state(&m, &rec.id).await, SandboxState::Paused);
}
