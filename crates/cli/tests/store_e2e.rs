//! Issue 4 through the real daemon: snapshots go through the encrypted
//! store, tampering at rest is refused, export/import moves a snapshot
//! between deployments, and a daemon killed during GC loses nothing live.

mod common;

use common::Daemon;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn manifest() -> serde_json::Value {
    json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
}

fn files_under(dir: &Path, part: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.to_string_lossy().contains(part) {
                    out.push(p);
                }
            }
        }
    }
    out.sort_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0));
    out
}

#[tokio::test]
async fn flipped_bit_at_rest_refuses_restore() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(manifest()).await;
    h.sh(
        &id,
        "head -c 3000000 /dev/urandom > data.bin; sha256sum data.bin > sum",
    )
    .await;
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    let snap_id = snap["id"].as_str().unwrap().to_string();
    // A clean restore works and has the same bytes.
    let ok = h
        .ok("POST", &format!("/v1/snapshots/{snap_id}/restore"), None)
        .await;
    let child = ok["id"].as_str().unwrap();
    assert!(h.sh(child, "sha256sum -c sum").await.contains("OK"));
    // No plaintext at rest: the file's bytes are nowhere in the store.
    let probe = h
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "head -c 64 data.bin | od -An -tx1 | tr -d ' \\n'",
            ],
        )
        .await;
    let hex = probe["stdout"].as_str().unwrap().to_string();
    let needle: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    for f in files_under(&d.dir.join("store"), "") {
        let data = std::fs::read(&f).unwrap();
        assert!(
            !data.windows(needle.len()).any(|w| w == needle.as_slice()),
            "plaintext found in {}",
            f.display()
        );
    }
    // Flip one bit in the largest chunk.
    let chunk = files_under(&d.dir.join("store"), "/chunks/")
        .pop()
        .expect("a chunk object");
    let mut data = std::fs::read(&chunk).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x01;
    std::fs::write(&chunk, &data).unwrap();
    let r = h
        .call("POST", &format!("/v1/snapshots/{snap_id}/restore"), None)
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "integrity_error");
    // Nothing half-made: no running sandbox was added, no leftover dir has files.
    let running = h.ok("GET", "/v1/sandboxes?state=running", None).await;
    assert_eq!(running.as_array().unwrap().len(), 2, "{running}");
    let audit = h.ok("GET", &format!("/v1/audit?target={id}"), None).await;
    assert!(audit
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["action"] == "snapshot"));
}

#[tokio::test]
async fn export_import_moves_a_snapshot_between_deployments() {
    let a = Daemon::start(&[]).await;
    let b = Daemon::start(&[]).await;
    let ha = a.http();
    let id = ha.create(manifest()).await;
    ha.sh(&id, "seq 1 100000 > numbers.txt; echo exported > note")
        .await;
    let snap = ha
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    let snap_id = snap["id"].as_str().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("snap.stasis");
    let out = a.cli(&[
        "--json",
        "snapshots",
        "export",
        &snap_id,
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size > 0);
    // The export file carries no plaintext.
    let bytes = std::fs::read(&file).unwrap();
    assert!(
        !bytes.windows(8).any(|w| w == b"exported"),
        "plaintext in export file"
    );
    // A tampered copy is refused by the other deployment, and nothing is imported.
    let bad = tmp.path().join("bad.stasis");
    let mut tampered = bytes.clone();
    let n = tampered.len();
    tampered[n / 2] ^= 0x40;
    std::fs::write(&bad, &tampered).unwrap();
    let out = b.cli(&["snapshots", "import", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("integrity_error"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        b.http()
            .ok("GET", "/v1/snapshots", None)
            .await
            .as_array()
            .unwrap()
            .len(),
        0
    );
    // The genuine file imports, verifies, and restores in deployment B.
    let out = b.cli(&["--json", "snapshots", "import", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hb = b.http();
    let r = hb
        .ok("POST", &format!("/v1/snapshots/{snap_id}/restore"), None)
        .await;
    let child = r["id"].as_str().unwrap();
    assert_eq!(
        hb.sh(child, "cat note; wc -l < numbers.txt").await,
        "exported\n100000\n"
    );
    let audit = ha
        .ok("GET", &format!("/v1/audit?target={snap_id}"), None)
        .await;
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "download"),
        "{audit}"
    );
}

#[tokio::test]
async fn daemon_killed_during_gc_keeps_every_live_snapshot() {
    let mut d = Daemon::start(&["--gc-grace-secs", "0"]).await;
    let h = d.http();
    let id = h.create(manifest()).await;
    let mut keep = Vec::new();
    let mut drop_ids = Vec::new();
    for i in 0..6 {
        h.sh(
            &id,
            &format!("head -c 4000000 /dev/urandom > gen{i}.bin; sha256sum gen*.bin > sums"),
        )
        .await;
        let s = h
            .ok(
                "POST",
                &format!("/v1/sandboxes/{id}/snapshots"),
                Some(json!({})),
            )
            .await;
        let sid = s["id"].as_str().unwrap().to_string();
        if i % 2 == 0 {
            drop_ids.push(sid)
        } else {
            keep.push(sid)
        }
    }
    for s in &drop_ids {
        h.ok("DELETE", &format!("/v1/snapshots/{s}"), None).await;
    }
    // Kill the daemon at several points during GC runs.
    for delay_ms in [5u64, 20, 60] {
        let url = d.url.clone();
        let client = Daemon::client_with(&d.admin_token());
        let gc = tokio::spawn(async move {
            let _ = client.post(format!("{url}/v1/store/gc")).send().await;
        });
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        d.kill9();
        let _ = gc.await;
        d.restart().await;
    }
    let h = d.http();
    // GC sweeps every tenant's chunks: an operator (admin token) action.
    let denied = h.call("POST", "/v1/store/gc", None).await;
    assert_eq!(
        denied.status, 403,
        "a tenant token may not run the store's GC"
    );
    let report = d
        .http_as(Some(&d.admin_token()))
        .ok("POST", "/v1/store/gc", None)
        .await;
    assert!(
        report["errors"]
            .as_array()
            .map(|e| e.is_empty())
            .unwrap_or(true),
        "{report}"
    );
    // Every kept snapshot still restores, byte for byte.
    for s in &keep {
        let r = h
            .ok("POST", &format!("/v1/snapshots/{s}/restore"), None)
            .await;
        let child = r["id"].as_str().unwrap();
        let out = h.sh(child, "sha256sum -c sums").await;
        assert!(!out.contains("FAILED"), "{out}");
    }
    for s in &drop_ids {
        assert_eq!(
            h.call("GET", &format!("/v1/snapshots/{s}"), None)
                .await
                .status,
            404
        );
    }
}
