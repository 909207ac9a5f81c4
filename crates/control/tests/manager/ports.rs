//! `Manager::connect_port` on the fake backend: a connection to a port the
//! sandbox serves resumes a paused sandbox first (resume on traffic), and
//! traffic reported on it starts the idle window again; nothing listening,
//! a bad port, another tenant's or a destroyed sandbox answer their stable
//! codes.

use std::time::Duration;

use stasis_core::{ErrorCode, OnIdle, SandboxState, TenantId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

#[tokio::test]
async fn connecting_resumes_a_paused_sandbox() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let id = rec.id.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    env.fake
        .serve_port(&id, 8000, listener.local_addr().unwrap());
    m.pause(&ctx(), &id, None).await.unwrap();
    assert_eq!(state(&m, &id).await, SandboxState::Paused);

    let mut c = m.connect_port(&ctx(), &id, 8000).await.unwrap();
    assert_eq!(state(&m, &id).await, SandboxState::Running);
    let (mut s, _) = listener.accept().await.unwrap();
    c.write_all(b"hi").await.unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).await.unwrap();
    assert_eq!(&b, b"hi");

    // Nothing listening: port_unreachable, the sandbox still running.
    assert_eq!(
        code(m.connect_port(&ctx(), &id, 9).await),
        ErrorCode::PortUnreachable
    );
    assert_eq!(state(&m, &id).await, SandboxState::Running);
    assert_eq!(run(&m, &id, &["echo", "fine"]).await, "fine\n");
    // Port 0, another tenant's sandbox.
    assert_eq!(
        code(m.connect_port(&ctx(), &id, 0).await),
        ErrorCode::InvalidArgument
    );
    let other = stasis_control::Ctx {
        tenant: TenantId::parse("t-other").unwrap(),
        actor: "test".into(),
    };
    assert_eq!(
        code(m.connect_port(&other, &id, 8000).await),
        ErrorCode::NotFound
    );
    // A destroyed sandbox answers like any other use of it.
    m.destroy(&ctx(), &id).await.unwrap();
    assert_eq!(
        code(m.connect_port(&ctx(), &id, 8000).await),
        ErrorCode::InvalidState
    );
}

#[tokio::test]
async fn port_traffic_keeps_a_sandbox_from_idling() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running_with(&m, short_lived(OnIdle::Pause)).await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        m.port_activity(&rec.id);
        assert!(m.reap_once().await.unwrap().is_empty());
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "idle_paused")]);
}
