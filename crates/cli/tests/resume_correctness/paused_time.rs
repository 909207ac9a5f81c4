//! Point 6: paused time is not counted; paused sandboxes are listed with their expiry.

use super::*;

// ----- point 6 --------------------------------------------------------------------

/// `max_lifetime_secs` counts running time only: a sandbox paused for longer
/// than its lifetime resumes fine with `running_ms` unchanged by the pause,
/// then is destroyed once its *running* time reaches the lifetime. While
/// paused it is listed by `GET /v1/sandboxes?state=paused` and `stasis ls
/// --state paused` (human and JSON) with its expiry.
pub(super) async fn paused_time_not_counted(b: B) {
    let d = TestDaemon::start(&format!("p6_lifetime::{}", b.name())).await;
    let h = d.http();
    let life: i64 = match b {
        B::Process => 8,
        B::Microvm => 30,
    };
    let id = h
        .create(manifest(
            b,
            json!({"on_idle": "nothing", "paused_ttl_secs": 3600, "max_lifetime_secs": life}),
        ))
        .await;
    let p = pause(&h, &id).await;
    let ran = p["running_ms"].as_i64().unwrap();
    assert!(
        ran < life * 1000 / 2,
        "create+pause already used {ran} ms of {life} s: test cannot prove anything"
    );
    // Listed as paused, with expiry.
    let listed = h.ok("GET", "/v1/sandboxes?state=paused", None).await;
    let me = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("not listed as paused: {listed}"))
        .clone();
    assert_eq!(
        me["expires_at_ms"].as_i64().unwrap() - me["paused_at_ms"].as_i64().unwrap(),
        3_600_000
    );
    let running = h.ok("GET", "/v1/sandboxes?state=running", None).await;
    assert!(!running
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == id.as_str()));
    let out = d.d.cli(&["--json", "ls", "--state", "paused"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = v
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap_or_else(|| panic!("stasis ls --state paused: {v}"));
    assert_eq!(row["expires_at_ms"], me["expires_at_ms"]);
    let out = d.d.cli(&["ls", "--state", "paused"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(&id))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("paused") && line.contains("expires in 3"),
        "{line}"
    );
    // Paused for longer than the lifetime: running_ms frozen, not destroyed.
    let r0 = h.state(&id).await["running_ms"].as_i64().unwrap();
    tokio::time::sleep(Duration::from_secs(life as u64 + 4)).await;
    let st = h.state(&id).await;
    assert_eq!(st["state"], "paused", "paused time ate the lifetime: {st}");
    assert_eq!(st["running_ms"].as_i64().unwrap(), r0, "{st}");
    let r = h
        .ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
        .await;
    assert_eq!(r["state"], "running");
    assert_eq!(h.sh(&id, "echo alive").await, "alive\n");
    let st = h.state(&id).await;
    assert!(
        st["running_ms"].as_i64().unwrap() < life * 1000,
        "running_ms counted the pause: {st}"
    );
    // Running time reaches the lifetime: destroyed (max_lifetime_secs path of point 3).
    let t = Instant::now();
    let fin = h
        .wait_state(&id, "destroyed", Duration::from_secs(life as u64 + 120))
        .await;
    let total = fin["running_ms"].as_i64().unwrap();
    eprintln!(
        "[p6::{}] destroyed {:.1} s after the resume, running_ms {total} (lifetime {life} s, paused {} s not counted)",
        b.name(),
        t.elapsed().as_secs_f64(),
        life + 4
    );
    assert!(
        total >= life * 1000 && total < life * 1000 + 15_000,
        "{fin}"
    );
    wait_audit(&h, &id, "expire", |e| e["action"] == "expire").await;
}
