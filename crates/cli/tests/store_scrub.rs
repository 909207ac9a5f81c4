//! Latent damage in the store through the real daemon (process backend): a
//! truncated chunk of a stored snapshot is found by `stasis store verify`
//! (exit != 0, one line; `--json`), counted in `/metrics`, audited and
//! marked so that a restore names it; and the background scrub finds it on
//! its own after a restart.

mod common;

use common::{files_under, Daemon};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn manifest() -> Value {
    json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
}

/// A snapshot of a sandbox holding 2 MB of random bytes.
async fn snapshot_with_data(d: &Daemon) -> String {
    let h = d.http();
    let id = h.create(manifest()).await;
    h.sh(&id, "head -c 2000000 /dev/urandom > data.bin").await;
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    let snap = snap["id"].as_str().unwrap().to_string();
    snap
}

fn truncate_largest_chunk(d: &Daemon) {
    let mut chunks: Vec<_> = files_under(&d.dir.join("store"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/chunks/"))
        .collect();
    chunks.sort_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0));
    let p = chunks.pop().expect("a chunk object");
    let b = std::fs::read(&p).unwrap();
    std::fs::write(&p, &b[..b.len() / 2]).unwrap();
}

async fn scrub_metric(d: &Daemon, result: &str) -> f64 {
    let text = reqwest::get(format!("{}/metrics", d.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("stasis_store_scrub_chunks_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn store_verify_finds_a_truncated_chunk_and_a_restore_names_the_damage() {
    let d = Daemon::start(&["--scrub-rate", "0"]).await;
    let h = d.http();
    let snap = snapshot_with_data(&d).await;

    let o = d.cli(&["store", "verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("0 damaged"));
    // Only an admin may ask.
    let r = h
        .call("POST", "/v1/admin/store/verify", Some(json!({})))
        .await;
    assert_eq!(r.status, 403, "{}", r.body);

    truncate_largest_chunk(&d);
    let o = d.cli(&["store", "verify"]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("could not be repaired"), "{err}");
    let o = d.cli(&["--json", "store", "verify"]);
    assert!(!o.status.success());
    // The report, then the error, as JSON documents on stdout.
    let v: Value = serde_json::Deserializer::from_slice(&o.stdout)
        .into_iter::<Value>()
        .next()
        .expect("a JSON report")
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(v["chunks_damaged"], 1, "{v}");
    assert_eq!(v["damaged"][0]["snapshot"], snap.as_str());
    assert!(scrub_metric(&d, "damaged").await >= 2.0);
    assert!(scrub_metric(&d, "verified").await >= 3.0);

    // Audited once, in the tenant's log, against the snapshot.
    let audit = h.ok("GET", &format!("/v1/audit?target={snap}"), None).await;
    let found = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "store.damage")
        .count();
    assert_eq!(found, 1, "{audit}");
    // A restore is refused, and says the damage was known.
    let r = h
        .call("POST", &format!("/v1/snapshots/{snap}/restore"), None)
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("known damage"), "{msg}");
    // Bad input: a snapshot without its tenant.
    let admin = d.http_as(Some(&d.admin_token()));
    let r = admin
        .call(
            "POST",
            "/v1/admin/store/verify",
            Some(json!({"snapshot": snap})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
}

#[tokio::test]
async fn the_background_scrub_finds_damage_after_a_restart() {
    let mut d = Daemon::start(&["--scrub-rate", "0"]).await;
    snapshot_with_data(&d).await;
    truncate_largest_chunk(&d);
    d.set_extra(&["--scrub-rate", "64M"]);
    d.restart().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while scrub_metric(&d, "damaged").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the scrub found nothing: {}",
            d.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(d.log().contains("store damage"), "{}", d.log_tail(40));
}
