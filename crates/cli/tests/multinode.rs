//! Three `stasis serve` nodes on loopback sharing one PostgreSQL database
//! (STASIS_TEST_PG_URL, a fresh database per test) and one S3-compatible
//! store (moto_server), each with its own data dir and the same master key.
//! One node is killed with SIGKILL; its paused sandbox resumes on another
//! node, its running sandbox is taken over from its last checkpoint by
//! exactly one node, and the API reports the progress lost.
//!
//! What each variant proves:
//! - `failover_process_backend` (always; bounded): forwarding to the owner
//!   (run tool calls included, which run once under their idempotency key
//!   whichever node gets them, across the takeover too),
//!   takeover of a running sandbox from its periodic checkpoint (files as of
//!   the checkpoint; later writes lost and reported as `progress_lost_ms`),
//!   resume of a paused sandbox on another node from its pause snapshot —
//!   files only: the process backend's memory state lives in a frozen cgroup
//!   of the node that paused it and cannot cross nodes — exactly one
//!   takeover under concurrent requests to two nodes, an intact audit chain.
//! - `drain_and_rolling_restart` (always): `stasis node drain` pauses a
//!   node's sandboxes to the store and gives up their leases (`/readyz` 503,
//!   creates and resumes there refused as `unavailable`), another node
//!   resumes them with their files on the next request, `undrain` takes
//!   sandboxes again; then each of the three nodes in turn is stopped by
//!   SIGTERM (which drains) and started again while it runs the session,
//!   and the session's files survive every step.
//! - `failover_microvm_memory` (when the guest image is present): a paused
//!   microVM resumes on another node with its memory state intact (a
//!   background counter continues from where it was, same boot id, an
//!   interpreter keeps its variable).

mod common;

use common::{Daemon, Http};
use serde_json::{json, Value};
use stasis_store::testing::MotoServer;
use std::time::{Duration, Instant};

const LEASE_SECS: &str = "3";

/// One cluster at a time: each has its own moto_server, whose address the
/// daemons take from the process environment.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Cluster {
    nodes: Vec<Daemon>,
    _moto: MotoServer,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

async fn cluster(name: &str) -> Option<Cluster> {
    cluster_with(name, &[]).await
}

/// [`cluster`] with more serve flags for every node.
async fn cluster_with(name: &str, extra: &[&str]) -> Option<Cluster> {
    let serial = SERIAL.lock().await;
    let pg = stasis_meta::testing::pg_fresh_database_from_env()
        .await
        .expect("test database")?;
    let moto = MotoServer::start("stasis-multinode", "multinode test")?;
    // The daemons a cluster starts inherit its server's address.
    moto.set_aws_env();
    let store = format!("s3://stasis-multinode/{name}-{}", common::unique("c"));
    let mut nodes = Vec::new();
    for i in 0..3 {
        let node = format!("n{i}");
        let mut args = vec![
            "--meta",
            &pg,
            "--store",
            &store,
            "--node-id",
            &node,
            "--lease-secs",
            LEASE_SECS,
        ];
        args.extend_from_slice(extra);
        nodes.push(Daemon::start(&args).await);
    }
    Some(Cluster {
        nodes,
        _moto: moto,
        _serial: serial,
    })
}

/// Retry `f` until it returns Some (bounded).
async fn until<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn get(h: &Http, id: &str) -> Value {
    h.ok("GET", &format!("/v1/sandboxes/{id}"), None).await
}

/// Exec through `h`, retrying while the cluster answers "busy" (the dead
/// owner's lease has not expired yet). Returns stdout.
async fn sh_retry(h: &Http, id: &str, script: &str) -> String {
    until("a node to serve the sandbox", 120, || async {
        let r = h
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/exec"),
                Some(json!({"argv": ["sh", "-c", script]})),
            )
            .await;
        if r.status == 200 {
            assert_eq!(r.body["exit_code"], 0, "{}", r.body);
            return Some(r.body["stdout"].as_str().unwrap_or("").to_string());
        }
        assert_eq!(r.body["error"]["code"], "busy", "{} {}", r.status, r.body);
        None
    })
    .await
}

async fn audit_actions(h: &Http, id: &str, action: &str) -> usize {
    let v = h
        .ok("GET", &format!("/v1/audit?target={id}&limit=1000"), None)
        .await;
    let entries = v
        .as_array()
        .or_else(|| v["entries"].as_array())
        .cloned()
        .unwrap_or_default();
    entries.iter().filter(|e| e["action"] == action).count()
}

#[tokio::test]
async fn failover_process_backend() {
    let Some(mut c) = cluster("process").await else {
        return;
    };
    let (h0, h1, h2) = (c.nodes[0].http(), c.nodes[1].http(), c.nodes[2].http());

    // A sandbox that will be paused, and one that keeps running with a
    // checkpoint every 2 s; both created on n0.
    let paused = h0
        .create(json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    h0.sh(&paused, "echo kept > /workspace/paused.txt").await;
    let running = h0
        .create(json!({"backend": "process",
                       "lifecycle": {"on_idle": "nothing", "checkpoint_secs": 2}}))
        .await;
    assert_eq!(get(&h1, &running).await["node"], "n0");

    // Any node accepts any request: n1 and n2 forward to the owner n0.
    h1.sh(&running, "echo base > /workspace/base.txt").await;
    assert_eq!(h2.sh(&running, "cat /workspace/base.txt").await, "base\n");
    // Run tool calls follow the run's sandbox to its owner as well: a call
    // sent to n1 executes on n0, once; its retry through n2 is the record.
    let run = h1
        .ok("POST", "/v1/runs", Some(json!({"sandbox": running})))
        .await;
    let calls = format!("/v1/runs/{}/tool-calls", run["id"].as_str().unwrap());
    let call = json!({"idempotency_key": "mail-1", "kind": "exec", "side_effecting": true,
                      "argv": ["sh", "-c", "echo sent >> /workspace/mail.log; hostname"]});
    let first = h1.ok("POST", &calls, Some(call.clone())).await;
    assert_eq!(first["outcome"], "succeeded", "{first}");
    assert_eq!(first["replayed"], false, "{first}");
    let again = h2.ok("POST", &calls, Some(call)).await;
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["call"]["result"], first["call"]["result"]);
    assert_eq!(h2.sh(&running, "cat /workspace/mail.log").await, "sent\n");
    // A call reaching a node that does not own the sandbox and may not
    // forward it (marked as forwarded already) is refused as busy before
    // anything is recorded, so the same key then runs normally, once.
    let call0 = json!({"idempotency_key": "mail-0", "kind": "exec", "side_effecting": true,
                       "argv": ["sh", "-c", "echo early >> /workspace/mail.log"]});
    let r =
        h1.c.post(format!("{}{calls}", h1.base))
            .header(stasis_server::cluster::HOP_HEADER, "n2")
            .json(&call0)
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "busy", "{v}");
    let ok = h1.ok("POST", &calls, Some(call0)).await;
    assert_eq!(ok["outcome"], "succeeded", "{ok}");
    assert_eq!(ok["replayed"], false, "{ok}");
    assert_eq!(
        h2.sh(&running, "grep -c early /workspace/mail.log").await,
        "1\n"
    );
    let p = h1
        .ok(
            "POST",
            &format!("/v1/sandboxes/{paused}/pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(p["state"], "paused");
    assert!(
        p.get("node").is_none(),
        "a paused sandbox belongs to no node: {p}"
    );

    // Wait for a checkpoint that holds base.txt (taken after it was written).
    let written_at = stasis_core::now_ms();
    let ckpt = until("a checkpoint after base.txt", 60, || async {
        let v = get(&h0, &running).await;
        match v["checkpoint_at_ms"].as_i64() {
            Some(t) if t > written_at => Some(v),
            _ => None,
        }
    })
    .await;
    // Progress after the checkpoint: lost with n0 unless a later checkpoint
    // caught it (then progress_lost_ms says so).
    let late_started_at = stasis_core::now_ms();
    h0.sh(&running, "echo late > /workspace/late.txt").await;
    let late_written_at = stasis_core::now_ms();

    // kill -9 the node running both.
    let killed_at = Instant::now();
    c.nodes[0].kill9();
    // The newest checkpoint n0 recorded (read from the database by another
    // node; the dead node writes nothing more).
    let at_kill = get(&h1, &running).await;

    // The paused sandbox resumes on another node at once (no lease to wait
    // for), from its pause snapshot in the store.
    assert_eq!(h1.sh(&paused, "cat /workspace/paused.txt").await, "kept\n");
    let pv = get(&h2, &paused).await;
    assert_eq!(pv["state"], "running");
    assert_eq!(pv["node"], "n1");

    // The running one: requests to n1 and n2 at once; both are served once
    // n0's lease expires, exactly one node takes it over, the other forwards.
    // A run's tool call joins the race: refused as busy while the lease
    // lives, with nothing recorded, so its retries under the same key run
    // it exactly once.
    let after_kill = json!({"idempotency_key": "mail-2", "kind": "exec", "side_effecting": true,
                            "argv": ["sh", "-c", "echo again >> /workspace/mail.log"]});
    let (a, b, _) = tokio::join!(
        sh_retry(&h1, &running, "cat /workspace/base.txt"),
        sh_retry(&h2, &running, "cat /workspace/base.txt"),
        until("the tool call to run", 120, || async {
            let r = h1.call("POST", &calls, Some(after_kill.clone())).await;
            if r.status == 200 {
                assert_eq!(r.body["outcome"], "succeeded", "{}", r.body);
                return Some(());
            }
            assert_eq!(r.body["error"]["code"], "busy", "{} {}", r.status, r.body);
            None
        })
    );
    assert_eq!(
        h1.sh(&running, "grep -c again /workspace/mail.log").await,
        "1\n"
    );
    let takeover_ms = killed_at.elapsed().as_millis();
    assert_eq!(a, "base\n");
    assert_eq!(b, "base\n");
    let rv = get(&h1, &running).await;
    assert_eq!(rv["state"], "running", "{rv}");
    let owner = rv["node"].as_str().unwrap().to_string();
    assert!(owner == "n1" || owner == "n2", "{rv}");
    assert_eq!(audit_actions(&h1, &running, "takeover").await, 1);
    let from = rv["recovered_from_snapshot"].as_str().unwrap();
    let lost = rv["progress_lost_ms"].as_i64().unwrap();
    assert!(lost >= 0);
    // Recovered from the newest checkpoint n0 recorded (at least the one
    // seen). The new owner goes on checkpointing, so `rv`'s own checkpoint
    // may already be a later one of its own.
    let last_ckpt_at = at_kill["checkpoint_at_ms"].as_i64().unwrap();
    assert!(last_ckpt_at >= ckpt["checkpoint_at_ms"].as_i64().unwrap());
    assert_eq!(
        from,
        at_kill["checkpoint_snapshot"].as_str().unwrap(),
        "{rv}\n{at_kill}"
    );
    // late.txt exists exactly when a checkpoint was taken after it was written.
    let late = h2
        .sh(
            &running,
            "cat /workspace/late.txt 2>/dev/null || echo missing",
        )
        .await;
    if last_ckpt_at > late_written_at {
        assert_eq!(late, "late\n");
    } else if last_ckpt_at >= late_started_at {
        // A checkpoint taken while the write was in flight: either outcome.
    } else {
        assert_eq!(late, "missing\n", "{rv}");
        // The lost write happened after the checkpoint: reported as lost time.
        assert!(lost > 0, "{rv}");
    }
    eprintln!(
        "FAILOVER process: kill -9 -> running sandbox served again after {takeover_ms} ms \
         (lease {LEASE_SECS} s); progress lost {lost} ms (checkpoint every 2 s); late write {}",
        if late == "late\n" { "kept" } else { "lost" }
    );

    // Nothing else lost: the shared audit chain verifies from any node.
    let admin = c.nodes[2].http_as(Some(&c.nodes[1].admin_token()));
    let v = admin.ok("GET", "/v1/audit/verify", None).await;
    assert_eq!(v["ok"], true, "{v}");
    // Destroy works from any node and removes its snapshots.
    h2.ok("DELETE", &format!("/v1/sandboxes/{running}"), None)
        .await;
    h1.ok("DELETE", &format!("/v1/sandboxes/{paused}"), None)
        .await;
}

async fn readyz(d: &Daemon) -> (u16, Value) {
    let r = reqwest::get(format!("{}/readyz", d.url)).await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn cli_ok(d: &Daemon, args: &[&str]) -> String {
    let out = d.cli(args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn drain_and_rolling_restart() {
    let Some(mut c) = cluster_with("drain", &["--drain-on-stop-secs", "60"]).await else {
        return;
    };
    let (h0, h1) = (c.nodes[0].http(), c.nodes[1].http());
    let manifest = json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}});
    let sb = h0.create(manifest.clone()).await;
    h0.sh(&sb, "echo one > /workspace/a.txt").await;
    assert_eq!(get(&h1, &sb).await["node"], "n0");
    assert_eq!(readyz(&c.nodes[0]).await.0, 200);

    let out = cli_ok(&c.nodes[0], &["node", "drain", "--within-secs", "60"]);
    assert!(out.contains("1 paused"), "{out}");
    let (status, body) = readyz(&c.nodes[0]).await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert_eq!(readyz(&c.nodes[1]).await.0, 200);
    let v = get(&h1, &sb).await;
    assert_eq!(v["state"], "paused", "{v}");
    assert!(v.get("node").is_none(), "the lease is given up: {v}");
    assert!(cli_ok(&c.nodes[0], &["node", "status"]).contains("draining"));
    // The drained node starts nothing: no create, no resume.
    let r = h0
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({ "manifest": manifest })),
        )
        .await;
    assert_eq!(
        (r.status, r.body["error"]["code"].clone()),
        (503, json!("unavailable"))
    );
    let r = h0
        .call(
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(json!({"argv": ["true"]})),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(get(&h1, &sb).await["state"], "paused");
    // Another node resumes it with its files; the drained node forwards to it.
    assert_eq!(h1.sh(&sb, "cat /workspace/a.txt").await, "one\n");
    assert_eq!(get(&h0, &sb).await["node"], "n1");
    assert_eq!(h0.sh(&sb, "cat /workspace/a.txt").await, "one\n");
    cli_ok(&c.nodes[0], &["node", "undrain"]);
    assert_eq!(readyz(&c.nodes[0]).await.0, 200);

    // A rolling restart: each node in turn runs the session, is stopped by
    // SIGTERM (which drains it) and starts again; the next node resumes it.
    for i in 0..3 {
        let here = c.nodes[i].http();
        let next = c.nodes[(i + 1) % 3].http();
        if get(&here, &sb).await["state"] == "running" {
            here.ok(
                "POST",
                &format!("/v1/sandboxes/{sb}/pause"),
                Some(json!({})),
            )
            .await;
        }
        here.sh(&sb, &format!("echo {i} >> /workspace/log.txt"))
            .await;
        assert_eq!(get(&next, &sb).await["node"], format!("n{i}"));
        c.nodes[i].stop(Duration::from_secs(90));
        let v = get(&next, &sb).await;
        assert_eq!(v["state"], "paused", "stopping n{i} drained it: {v}");
        assert!(c.nodes[i].log().contains("node drained"));
        assert_eq!(next.sh(&sb, "cat /workspace/a.txt").await, "one\n");
        c.nodes[i].start_again().await;
        assert_eq!(readyz(&c.nodes[i]).await.0, 200);
    }
    let h = c.nodes[0].http();
    assert_eq!(h.sh(&sb, "cat /workspace/log.txt").await, "0\n1\n2\n");
    assert_eq!(h.sh(&sb, "cat /workspace/a.txt").await, "one\n");
}

fn image_available() -> bool {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(d) if std::path::Path::new(&d).exists() => true,
        _ => {
            eprintln!("multinode microVM failover NOT RUN: STASIS_IMAGE_DIR is not set");
            false
        }
    }
}

#[tokio::test]
async fn failover_microvm_memory() {
    if !image_available() {
        return;
    }
    let Some(mut c) = cluster("microvm").await else {
        return;
    };
    let (h0, h1) = (c.nodes[0].http(), c.nodes[1].http());
    let id = h0
        .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    h0.sh(&id, "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 &").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let boot_id = h0.sh(&id, "cat /proc/sys/kernel/random/boot_id").await;
    let p = h0
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(p["pause_kind"], "memory");
    let before: u64 = h1
        .sh(&id, "cat /tmp/count")
        .await
        .trim()
        .parse()
        .unwrap_or(0);
    // That resumed it on n1 (n0 had paused it); pause again into standby
    // (n1 keeps the stopped QEMU), kill n0 and n1 while it sits there, and
    // n1's twin n2 resumes it: memory crosses nodes through the store, which
    // the standby pause wrote before holding the VM.
    assert_eq!(get(&h1, &id).await["node"], "n1");
    let p = h1
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/pause"),
            Some(json!({"standby": true})),
        )
        .await;
    assert!(
        p.get("standby").is_some_and(|s| s.is_object()),
        "not held in standby: {p}"
    );
    c.nodes[0].kill9();
    c.nodes[1].kill9();
    let h2 = c.nodes[2].http();
    let t0 = Instant::now();
    let after: u64 = h2.sh(&id, "cat /tmp/count").await.trim().parse().unwrap();
    eprintln!(
        "FAILOVER microvm: paused sandbox resumed on a third node (memory from the store) \
         and answered in {} ms",
        t0.elapsed().as_millis()
    );
    assert!(after >= before, "counter went back: {before} -> {after}");
    assert_eq!(
        h2.sh(&id, "cat /proc/sys/kernel/random/boot_id").await,
        boot_id,
        "the guest rebooted: memory state was not carried over"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later: u64 = h2.sh(&id, "cat /tmp/count").await.trim().parse().unwrap();
    assert!(later > after, "counter stopped: {after} -> {later}");
    assert_eq!(get(&h2, &id).await["node"], "n2");
    h2.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    for d in &c.nodes {
        common::kill_qemus_under(&d.dir);
    }
}
