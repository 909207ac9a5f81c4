//! Exposed ports across two `stasis serve` nodes sharing one PostgreSQL
//! database (STASIS_TEST_PG_URL, a fresh database) and one S3-compatible
//! store (moto_server): a request to the node that does not run the sandbox
//! is forwarded to the one that does, for the token route, signed URLs (the
//! sandbox read from the token, verified by the owner with the key both
//! nodes share) and WebSockets; a URL issued on one node and revoked on the
//! other is refused by both. Not run (and says so) without PostgreSQL.

mod common;
mod ports_fixtures;

use common::Daemon;
use ports_fixtures::{wait_serving, ws_echo, SRV};
use serde_json::json;
use stasis_store::testing::MotoServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ports_across_nodes() {
    let Some(pg) = stasis_meta::testing::pg_fresh_database_from_env()
        .await
        .expect("test database")
    else {
        eprintln!("ports_across_nodes NOT RUN: set STASIS_TEST_PG_URL (scripts/pg-test-server.sh)");
        return;
    };
    let Some(moto) = MotoServer::start("stasis-ports", "ports_across_nodes") else {
        return;
    };
    moto.set_aws_env();
    let store = format!("s3://stasis-ports/{}", common::unique("c"));
    let mut nodes = Vec::new();
    for i in 0..2 {
        let node = format!("n{i}");
        let args = [
            "--meta",
            &pg,
            "--store",
            &store,
            "--node-id",
            &node,
            "--lease-secs",
            "3",
        ];
        nodes.push(Daemon::start(&args).await);
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    // Both nodes share tenants and tokens through the database.
    let (ha, hb) = (a.http(), b.http_as(Some(&a.token())));
    let id = ha.create(json!({})).await;
    let put = ha
        .raw(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=srv.py"),
            SRV.as_bytes().to_vec(),
        )
        .await;
    assert!(put.status < 300, "{}", put.body);
    ha.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/sessions"),
        Some(json!({"argv": ["python3", "srv.py", "8002"]})),
    )
    .await;
    let p = format!("/v1/sandboxes/{id}/ports/8002");
    wait_serving(&ha, &format!("{p}/headers")).await;

    // Token route through the other node.
    let seen = hb.ok("GET", &format!("{p}/headers"), None).await;
    assert!(seen.get("authorization").is_none(), "{seen}");
    assert_eq!(seen[":path"], "/headers");
    // WebSocket through the other node.
    let echoed = ws_echo(&b.url, &format!("{p}/ws"), Some(&a.token()), &[b"across"])
        .await
        .unwrap();
    assert_eq!(echoed, vec![b"across".to_vec()]);

    // A URL issued on A works on B (and on A), WebSocket included.
    let u = ha
        .ok("POST", &format!("{p}/urls"), Some(json!({"ttl_secs": 60})))
        .await;
    let path = u["path"].as_str().unwrap().to_string();
    let anon_b = b.http_as(None);
    let r = anon_b.call("GET", &format!("{path}headers"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let echoed = ws_echo(&b.url, &format!("{path}ws"), None, &[b"signed-across"])
        .await
        .unwrap();
    assert_eq!(echoed, vec![b"signed-across".to_vec()]);
    // Revoked on B: refused by both nodes.
    hb.ok(
        "DELETE",
        &format!("{p}/urls/{}", u["id"].as_str().unwrap()),
        None,
    )
    .await;
    for node in [a, b] {
        let r = node
            .http_as(None)
            .call("GET", &format!("{path}headers"), None)
            .await;
        assert_eq!(r.status, 403, "{}: {}", node.url, r.body);
    }
    // A tampered token whose sandbox id no longer parses is refused where
    // it lands.
    let r = anon_b.call("GET", "/p/AAAA/headers", None).await;
    assert_eq!(r.status, 403, "{}", r.body);
    ha.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}
