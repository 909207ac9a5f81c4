//! Key governance and regions through the real daemon and CLI:
//! - master-key rotation online (`stasis admin rotate-master-key`), a node
//!   whose key file lacks the current generation refusing to start,
//!   retirement of the old key, and snapshots restored under the new key;
//! - crypto-erasure (`stasis admin tenant erase --yes`): a copy of the store
//!   made before it decrypts nothing of the tenant with the daemon's keys;
//! - regions: two nodes (eu, us) with their own stores sharing PostgreSQL
//!   metadata; a tenant pinned to eu is refused (409 `region_mismatch`,
//!   audited) on the us node, whose store never receives its data.

mod common;

use common::{Daemon, Http};
use serde_json::{json, Value};
use stasis_core::{SnapshotId, TenantId};
use stasis_store::{MasterKey, Store};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn manifest() -> Value {
    json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}
fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

async fn snapshot(h: &Http, id: &str) -> String {
    let s = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    s["id"].as_str().unwrap().to_string()
}

async fn restore_reads(h: &Http, snap: &str, want: &str) {
    let r = h
        .ok("POST", &format!("/v1/snapshots/{snap}/restore"), None)
        .await;
    let child = r["id"].as_str().unwrap();
    assert_eq!(h.sh(child, "cat note").await.trim(), want);
}

fn write_key_file(p: &Path, keys: &[&MasterKey]) {
    let text: String = keys.iter().map(|k| format!("{}\n", k.to_hex())).collect();
    std::fs::write(p, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[tokio::test]
async fn master_key_rotation_through_the_cli_then_restore() {
    let mut d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(manifest()).await;
    h.sh(&id, "echo before-rotation > note").await;
    let before = snapshot(&h, &id).await;

    let keys = tempfile::tempdir().unwrap();
    let new = MasterKey::generate();
    let new_file = keys.path().join("new.key");
    write_key_file(&new_file, &[&new]);
    let bad_file = keys.path().join("bad.key");
    std::fs::write(&bad_file, "not a key").unwrap();
    let o = d.cli(&[
        "admin",
        "rotate-master-key",
        "--new-key-file",
        bad_file.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));

    let t0 = Instant::now();
    let o = d.cli(&[
        "admin",
        "rotate-master-key",
        "--new-key-file",
        new_file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    println!(
        "rotate-master-key through the CLI: {:?}: {}",
        t0.elapsed(),
        stdout(&o)
    );
    assert!(stdout(&o).contains("generation 2"), "{}", stdout(&o));
    // A rerun finds everything done.
    let o = d.cli(&[
        "--json",
        "admin",
        "rotate-master-key",
        "--new-key-file",
        new_file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["keys_rewrapped"], 0, "{v}");
    assert!(v["keys_already"].as_u64().unwrap() >= 1, "{v}");
    // Online: the daemon kept serving; new and old snapshots restore.
    h.sh(&id, "echo after-rotation > note").await;
    let after = snapshot(&h, &id).await;
    restore_reads(&h, &before, "before-rotation").await;
    let o = d.cli(&["admin", "master-keys"]);
    assert!(
        stdout(&o).contains("current") && stdout(&o).contains("previous"),
        "{}",
        stdout(&o)
    );
    // A node holding only the old key refuses to start, with a clear line.
    d.kill9();
    let ready = d.dir.join("ready-old");
    let log = std::fs::File::create(d.dir.join("old-key.log")).unwrap();
    let mut child =
        stasis_cli::daemon_proc::serve_command(Path::new(common::BIN), &d.dir, &ready, log)
            .unwrap()
            .args(["--cgroup-parent", &d.cgroup_parent])
            .spawn()
            .unwrap();
    let st = child.wait().unwrap();
    assert!(!st.success());
    let log = std::fs::read_to_string(d.dir.join("old-key.log")).unwrap();
    assert!(log.contains("holds no key of generation 2"), "{log}");
    // Both keys: serves; then the old key is retired and the new one alone suffices.
    let ring = keys.path().join("ring.key");
    write_key_file(&ring, &[&MasterKey::insecure_dev(), &new]);
    d.key_file = Some(ring);
    d.restart().await;
    let h = d.http();
    restore_reads(&h, &after, "after-rotation").await;
    let old_fp = MasterKey::insecure_dev().fingerprint();
    let o = d.cli(&["admin", "retire-master-key", &old_fp]);
    assert!(o.status.success(), "{}", stderr(&o));
    d.key_file = Some(new_file);
    d.restart().await;
    let h = d.http();
    restore_reads(&h, &before, "before-rotation").await;
    restore_reads(&h, &after, "after-rotation").await;
    let audit = h.ok("GET", "/v1/audit?limit=1000", None).await;
    let s = audit.to_string();
    assert!(
        s.contains("master_key_rotate") && s.contains("master_key_retire"),
        "{s}"
    );
}

#[tokio::test]
async fn tenant_data_key_rotation_keeps_old_snapshots() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(manifest()).await;
    h.sh(&id, "echo one > note").await;
    let one = snapshot(&h, &id).await;
    let o = d.cli(&["admin", "tenant", "rotate-key", "t-default"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("generation 1"), "{}", stdout(&o));
    h.sh(&id, "echo two > note").await;
    let two = snapshot(&h, &id).await;
    restore_reads(&h, &one, "one").await;
    restore_reads(&h, &two, "two").await;
    let rec = std::fs::read(d.dir.join("store/tenants/t-default/snapshots").join(&two)).unwrap();
    assert_eq!(&rec[..3], &[b'R', 2, 1]);
}

#[tokio::test]
async fn erased_tenant_unreadable_even_from_a_store_copy() {
    let d = Daemon::start(&[]).await;
    let admin = d.http_as(Some(&d.admin_token()));
    let g = d.http_as(Some(&admin.new_tenant("t-gone").await));
    let id = g.create(manifest()).await;
    g.sh(&id, "echo personal-data > note").await;
    let gone = snapshot(&g, &id).await;
    let h = d.http();
    let kept_sb = h.create(manifest()).await;
    h.sh(&kept_sb, "echo kept > note").await;
    let kept = snapshot(&h, &kept_sb).await;
    // A copy of the store as a backup would hold it.
    let backup = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(d.dir.join("store"))
        .arg(backup.path())
        .status()
        .unwrap();
    assert!(st.success());
    let copy_dir = backup.path().join("store");

    let o = d.cli(&["admin", "tenant", "erase", "t-gone"]);
    assert!(
        !o.status.success() && stderr(&o).contains("--yes"),
        "{}",
        stderr(&o)
    );
    let t0 = Instant::now();
    let o = d.cli(&["admin", "tenant", "erase", "t-gone", "--yes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    println!("erase: {:?}: {}", t0.elapsed(), stdout(&o));
    // Its tokens are revoked; its bytes are gone from the live store.
    assert_eq!(g.call("GET", "/v1/snapshots", None).await.status, 401);
    let live = d.dir.join("store/tenants/t-gone");
    assert!(
        common::files_under(&live).is_empty(),
        "{:?}",
        common::files_under(&live)
    );

    // The copy still holds the tenant's wrapped keys, records and chunks ...
    let tdir = copy_dir.join("tenants/t-gone");
    assert!(tdir.join("dk").exists() && tdir.join("snapshots").join(&gone).exists());
    // ... and the daemon's keys (its master key, and its metadata) decrypt none of it.
    let meta = stasis_meta::Meta::open(&d.dir.join("meta.db"))
        .await
        .unwrap();
    let url = format!("file://{}", copy_dir.display());
    let copy = Store::open(&url, MasterKey::insecure_dev()).await.unwrap();
    copy.set_kek_source(Arc::new(stasis_server::governance::MetaKeks(meta.clone())));
    let t = TenantId::parse("t-gone").unwrap();
    let sid = SnapshotId::parse(&gone).unwrap();
    assert!(copy.get_snapshot(&t, &sid).await.is_err());
    assert!(copy.list_snapshots(&t).await.unwrap().is_empty());
    let out = tempfile::tempdir().unwrap();
    assert!(copy
        .restore_snapshot(&t, &sid, &out.path().join("r"), None)
        .await
        .is_err());
    // Without the metadata (master key alone) it fails as well.
    let bare = Store::open(&url, MasterKey::insecure_dev()).await.unwrap();
    let e = bare.get_snapshot(&t, &sid).await.unwrap_err();
    assert!(e.message.contains("key-encryption key"), "{e}");
    // The other tenant's snapshot in the same copy is intact.
    let dt = TenantId::parse("t-default").unwrap();
    copy.get_snapshot(&dt, &SnapshotId::parse(&kept).unwrap())
        .await
        .unwrap();
    restore_reads(&h, &kept, "kept").await;
    let audit = h.ok("GET", "/v1/audit?limit=1000", None).await;
    assert!(!audit.to_string().contains("tenant_erase"));
}

#[tokio::test]
async fn tenant_pinned_to_a_region_is_refused_on_another_regions_node() {
    let Some(pg) = stasis_meta::testing::pg_fresh_database_from_env()
        .await
        .expect("test database")
    else {
        eprintln!("skipped: STASIS_TEST_PG_URL is not set");
        return;
    };
    let eu = Daemon::start(&[
        "--meta",
        &pg,
        "--node-id",
        "eu1",
        "--region",
        "eu",
        "--lease-secs",
        "3",
    ])
    .await;
    let us = Daemon::start(&[
        "--meta",
        &pg,
        "--node-id",
        "us1",
        "--region",
        "us",
        "--lease-secs",
        "3",
    ])
    .await;
    let o = eu.cli(&["admin", "tenant", "pin", "t-default", "--region", "eu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (he, hu) = (eu.http(), us.http());

    let r = hu
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": manifest()})),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "region_mismatch", "{}", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("region us"));

    let id = he.create(manifest()).await;
    he.sh(&id, "echo eu-only > note").await;
    let snap = snapshot(&he, &id).await;
    let r = hu
        .call("POST", &format!("/v1/snapshots/{snap}/restore"), None)
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "region_mismatch");
    restore_reads(&he, &snap, "eu-only").await;
    // The eu node dies with the sandbox running: the us node does not take it
    // over (that would restore the eu snapshot into the us region).
    let mut eu = eu;
    eu.kill9();
    let deadline = Instant::now() + Duration::from_secs(60);
    let r = loop {
        let r = hu
            .call(
                "POST",
                &format!("/v1/sandboxes/{id}/exec"),
                Some(json!({"argv": ["true"]})),
            )
            .await;
        if r.body["error"]["code"] != "busy" {
            break r;
        }
        assert!(Instant::now() < deadline, "{}", r.body);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "region_mismatch", "{}", r.body);
    // The us store never received anything of the tenant.
    assert!(common::files_under(&us.dir.join("store/tenants/t-default")).is_empty());
    // Every refusal is in the audit log.
    let audit = hu.ok("GET", "/v1/audit?limit=1000", None).await;
    let entries = audit
        .as_array()
        .or_else(|| audit["entries"].as_array())
        .cloned()
        .unwrap_or_default();
    let refusals: Vec<_> = entries
        .iter()
        .filter(|e| e["action"] == "refused" && e["detail"]["code"] == "region_mismatch")
        .map(|e| e["detail"]["op"].as_str().unwrap_or("").to_string())
        .collect();
    for op in ["create", "restore", "takeover"] {
        assert!(refusals.iter().any(|o| o == op), "{op}: {refusals:?}");
    }
    // Unpinned, the us node serves the tenant.
    let o = us.cli(&["admin", "tenant", "pin", "t-default", "--any"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sb = hu.create(manifest()).await;
    hu.sh(&sb, "true").await;
}

#[tokio::test]
async fn retiring_an_unknown_master_key_is_not_found() {
    let d = Daemon::start(&[]).await;
    let admin = d.http_as(Some(&d.admin_token()));
    let r = admin
        .call(
            "POST",
            "/v1/admin/master-keys/0123456789abcdef/retire",
            None,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "not_found", "{}", r.body);
    let o = d.cli(&["admin", "retire-master-key", "0123456789abcdef"]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    // The current key is still refused as such, not as unknown.
    let keys = admin.ok("GET", "/v1/admin/master-keys", None).await;
    let fp = keys["current_here"].as_str().unwrap();
    let r = admin
        .call("POST", &format!("/v1/admin/master-keys/{fp}/retire"), None)
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
}
