//! Key generations: master-key rotation stopped at every step, retirement,
//! per-tenant data-key rotation, crypto-erasure against a copy of the store.

use super::*;
use crate::keyring::{Kek, KekSource};
use std::sync::atomic::AtomicUsize;

fn key_a() -> MasterKey {
    MasterKey::from_bytes([0xa1; 32])
}
fn key_b() -> MasterKey {
    MasterKey::from_bytes([0xb2; 32])
}

async fn open_ring(dir: &Path, keys: Vec<MasterKey>) -> Result<Store> {
    Store::open_keyring(&format!("file://{}", dir.display()), keys, small_chunks()).await
}

fn small_artifact(dir: &Path, seed: u64) -> Vec<(String, String)> {
    std::fs::create_dir_all(dir).unwrap();
    let mut b = vec![0u8; 20_000];
    pseudo_random(seed, &mut b);
    std::fs::write(dir.join("disk"), &b).unwrap();
    vec![("disk".into(), "disk".into())]
}

/// `tenants` tenants with `per` snapshots each; returns (tenant, snapshot id, src dir).
async fn populate(
    store: &Store,
    root: &Path,
    tenants: usize,
    per: usize,
) -> Vec<(TenantId, SnapshotId, std::path::PathBuf)> {
    let mut out = Vec::new();
    for i in 0..tenants {
        let t = tid(&format!("t-k{i}"));
        for j in 0..per {
            let src = root.join(format!("src-{i}-{j}"));
            let arts = small_artifact(&src, (i * 1000 + j) as u64);
            let r = store
                .put_snapshot(new_meta(&t), &src, &arts, None)
                .await
                .unwrap();
            out.push((t.clone(), r.id, src));
        }
    }
    out
}

async fn restorable(
    store: &Store,
    snaps: &[(TenantId, SnapshotId, std::path::PathBuf)],
    out: &Path,
) -> usize {
    let mut ok = 0;
    for (i, (t, id, src)) in snaps.iter().enumerate() {
        let dst = out.join(format!("r{i}"));
        if store.restore_snapshot(t, id, &dst, None).await.is_ok() {
            assert_eq!(
                std::fs::read(dst.join("disk")).unwrap(),
                std::fs::read(src.join("disk")).unwrap()
            );
            ok += 1;
        }
    }
    ok
}

fn copy_dir(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

#[tokio::test]
async fn master_rotation_stopped_at_every_step_stays_readable_and_a_rerun_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    let store = open_ring(&base, vec![key_a()]).await.unwrap();
    let snaps = populate(&store, tmp.path(), 3, 2).await;
    // A second data-key generation for one tenant: rotation covers every generation.
    store.rotate_tenant_key(&tid("t-k0")).await.unwrap();
    let src = tmp.path().join("src-extra");
    let arts = small_artifact(&src, 99);
    let r = store
        .put_snapshot(new_meta(&tid("t-k0")), &src, &arts, None)
        .await
        .unwrap();
    let mut snaps = snaps;
    snaps.push((tid("t-k0"), r.id, src));
    drop(store);
    let fp_b = key_b().fingerprint();
    // Steps: register, 4 rewraps (3 tenants, one with 2 generations), switch.
    for stop_at in 0..6 {
        let dir = tmp.path().join(format!("kill{stop_at}"));
        copy_dir(&base, &dir);
        let s = open_ring(&dir, vec![key_a(), key_b()]).await.unwrap();
        let calls = AtomicUsize::new(0);
        let hook = |step: &str| -> Result<()> {
            if calls.fetch_add(1, Ordering::SeqCst) == stop_at {
                return Err(Error::internal(format!("killed before {step}")));
            }
            Ok(())
        };
        let e = s.rotate_master_key_with(&fp_b, &hook).await.unwrap_err();
        assert!(e.message.contains("killed"), "{e}");
        drop(s);
        // The old key alone still reads everything.
        let old = open_ring(&dir, vec![key_a()]).await.unwrap();
        let out = tmp.path().join(format!("out-old-{stop_at}"));
        assert_eq!(
            restorable(&old, &snaps, &out).await,
            snaps.len(),
            "stop {stop_at}"
        );
        // The new key alone reads what was rewrapped (nothing before `register`).
        let rewrapped = stop_at.saturating_sub(1);
        match open_ring(&dir, vec![key_b()]).await {
            Ok(new) => {
                assert!(stop_at >= 1);
                let out = tmp.path().join(format!("out-new-{stop_at}"));
                let n = restorable(&new, &snaps, &out).await;
                assert!(n > 0 || rewrapped == 0, "stop {stop_at}: {n}");
            }
            Err(e) => {
                assert_eq!(stop_at, 0, "{e}");
                assert_eq!(e.code, ErrorCode::Unauthorized);
            }
        }
        // A rerun finishes; then the new key alone reads everything.
        let s = open_ring(&dir, vec![key_a(), key_b()]).await.unwrap();
        let rep = s.rotate_master_key(&fp_b).await.unwrap();
        assert_eq!(rep.keys_rewrapped + rep.keys_already, 4, "{rep:?}");
        assert_eq!(rep.keys_already as usize, rewrapped.min(4), "{rep:?}");
        assert_eq!(s.current_master_fingerprint(), fp_b);
        let new = open_ring(&dir, vec![key_b()]).await.unwrap();
        let out = tmp.path().join(format!("out-after-{stop_at}"));
        assert_eq!(restorable(&new, &snaps, &out).await, snaps.len());
    }
}

#[tokio::test]
async fn retire_refuses_while_a_key_is_wrapped_only_under_the_old_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let s = open_ring(&dir, vec![key_a(), key_b()]).await.unwrap();
    let snaps = populate(&s, tmp.path(), 2, 1).await;
    let (fa, fb) = (key_a().fingerprint(), key_b().fingerprint());
    let e = s.retire_master_key(&fa).await.unwrap_err();
    assert!(e.message.contains("current"), "{e}");
    s.rotate_master_key(&fb).await.unwrap();
    // A node that only has the old key creates a tenant meanwhile.
    let old_node = open_ring(&dir, vec![key_a()]).await.unwrap();
    let late = populate(&old_node, &tmp.path().join("late"), 3, 1).await;
    let e = s.retire_master_key(&fa).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.contains("t-k2 generation 0"), "{e}");
    // A rerun wraps the late key too; then retiring works and is final.
    s.rotate_master_key(&fb).await.unwrap();
    let rep = s.retire_master_key(&fa).await.unwrap();
    assert_eq!(rep.tenants, 3, "{rep:?}");
    assert_eq!(s.master_fingerprints(), vec![fb.clone()]);
    let e = open_ring(&dir, vec![key_a()]).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unauthorized, "{e}");
    let new = open_ring(&dir, vec![key_b()]).await.unwrap();
    let all: Vec<_> = snaps.into_iter().chain(late).collect();
    assert_eq!(
        restorable(&new, &all, &tmp.path().join("o")).await,
        all.len()
    );
    for t in ["t-k0", "t-k1", "t-k2"] {
        let g = new.tenant_key_generations(&tid(t)).await.unwrap();
        assert_eq!(g[&0], vec![fb.clone()], "{t}");
    }
}

#[tokio::test]
async fn older_store_layout_rotates_and_retires() {
    // A store written before key generations: `keycheck` and `tenants/<t>/key` only.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    drop(open_ring(&dir, vec![key_a()]).await.unwrap());
    assert!(dir.join("keycheck").exists());
    let t = tid("t-old");
    let tdir = dir.join("tenants").join(t.as_str());
    std::fs::create_dir_all(&tdir).unwrap();
    let legacy = crypto::seal(
        &key_a().wrap_key(),
        &crypto::tenant_key_aad(t.as_str()),
        &[5u8; 32],
    );
    std::fs::write(tdir.join("key"), legacy).unwrap();
    let s = open_ring(&dir, vec![key_a(), key_b()]).await.unwrap();
    let src = tmp.path().join("legacy-src");
    let arts = small_artifact(&src, 7);
    let r = s
        .put_snapshot(new_meta(&t), &src, &arts, None)
        .await
        .unwrap();
    let snaps = vec![(t.clone(), r.id, src)];
    assert!(tdir.join("key").exists() && !tdir.join("dk").exists());
    s.rotate_master_key(&key_b().fingerprint()).await.unwrap();
    s.retire_master_key(&key_a().fingerprint()).await.unwrap();
    assert!(!tdir.join("key").exists());
    assert!(!dir.join("keycheck").exists());
    let new = open_ring(&dir, vec![key_b()]).await.unwrap();
    assert_eq!(restorable(&new, &snaps, &tmp.path().join("o")).await, 1);
    let e = open_ring(&dir, vec![key_a()]).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unauthorized, "{e}");
}

#[tokio::test]
async fn tenant_key_rotation_seals_new_snapshots_under_the_new_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let s = open_ring(&dir, vec![key_a()]).await.unwrap();
    let mut snaps = populate(&s, tmp.path(), 1, 1).await;
    let t = snaps[0].0.clone();
    assert_eq!(s.rotate_tenant_key(&t).await.unwrap(), 1);
    let src = tmp.path().join("after");
    let arts = small_artifact(&src, 1); // same bytes as... a new seed; addresses differ anyway
    let r = s
        .put_snapshot(new_meta(&t), &src, &arts, None)
        .await
        .unwrap();
    let rec = std::fs::read(
        dir.join("tenants")
            .join(t.as_str())
            .join("snapshots")
            .join(r.id.as_str()),
    )
    .unwrap();
    assert_eq!(&rec[..6], &[b'R', 2, 1, 0, 0, 0]);
    let first = std::fs::read(
        dir.join("tenants")
            .join(t.as_str())
            .join("snapshots")
            .join(snaps[0].1.as_str()),
    )
    .unwrap();
    assert_eq!(&first[..2], &[b'R', 1]);
    snaps.push((t.clone(), r.id, src));
    // A fresh node (no cache) reads both generations.
    let fresh = open_ring(&dir, vec![key_a()]).await.unwrap();
    assert_eq!(restorable(&fresh, &snaps, &tmp.path().join("o")).await, 2);
    assert_eq!(fresh.list_snapshots(&t).await.unwrap().len(), 2);
    assert_eq!(fresh.tenant_key_generations(&t).await.unwrap().len(), 2);
}

/// Key-encryption keys kept outside the store (the metadata database in the daemon).
#[derive(Default)]
pub(super) struct MemKeks(Mutex<HashMap<String, Kek>>);

#[async_trait::async_trait]
impl KekSource for MemKeks {
    async fn tenant_kek(&self, t: &TenantId, create: bool) -> Result<Kek> {
        let mut m = self.0.lock().unwrap();
        match m.get(t.as_str()) {
            Some(k) => Ok(k.clone()),
            None if create => {
                let k = Kek::Key(crypto::random_bytes());
                m.insert(t.as_str().to_string(), k.clone());
                Ok(k)
            }
            None => Ok(Kek::None),
        }
    }
}

#[tokio::test]
async fn erased_tenant_unreadable_even_from_a_copy_made_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let keks = Arc::new(MemKeks::default());
    let s = open_ring(&dir, vec![key_a()]).await.unwrap();
    s.set_kek_source(keks.clone());
    let snaps = populate(&s, tmp.path(), 2, 2).await;
    let (gone, kept): (Vec<_>, Vec<_>) = snaps.into_iter().partition(|x| x.0.as_str() == "t-k0");
    let backup = tmp.path().join("backup");
    copy_dir(&dir, &backup);
    // Erase t-k0: its KEK first (that is what makes every copy unreadable), then its wraps.
    keks.0.lock().unwrap().insert("t-k0".into(), Kek::Erased);
    assert_eq!(s.erase_tenant_keys(&tid("t-k0")).await.unwrap(), 1);
    assert_eq!(restorable(&s, &gone, &tmp.path().join("o1")).await, 0);
    // The copy, opened with the daemon's keys (master key + what the metadata still holds).
    let copy = open_ring(&backup, vec![key_a()]).await.unwrap();
    copy.set_kek_source(keks.clone());
    assert!(backup.join("tenants/t-k0/dk").read_dir().unwrap().count() == 1);
    assert_eq!(restorable(&copy, &gone, &tmp.path().join("o2")).await, 0);
    for (t, id, _) in &gone {
        assert!(copy.get_snapshot(t, id).await.is_err());
    }
    assert_eq!(
        restorable(&copy, &kept, &tmp.path().join("o3")).await,
        kept.len()
    );
    // Without any KEK source (master key only), the copy refuses too.
    let bare = open_ring(&backup, vec![key_a()]).await.unwrap();
    for (t, id, _) in &gone {
        let e = bare.get_snapshot(t, id).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    }
    // Puts for the erased tenant are refused; GC removes its bytes.
    let src = tmp.path().join("p");
    let arts = small_artifact(&src, 3);
    let e = s
        .put_snapshot(new_meta(&tid("t-k0")), &src, &arts, None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{e}");
    let rep = s.gc(stasis_core::now_ms()).await.unwrap();
    assert!(rep.objects_purged >= 2, "{rep:?}");
    assert!(
        !dir.join("tenants/t-k0/snapshots").exists()
            || dir
                .join("tenants/t-k0/snapshots")
                .read_dir()
                .unwrap()
                .count()
                == 0
    );
    assert_eq!(
        restorable(&s, &kept, &tmp.path().join("o4")).await,
        kept.len()
    );
}

/// The figure for the docs: rotating the master key of a store with 100
/// tenants and 1000 snapshots (rotation rewraps keys, never snapshot bytes).
#[tokio::test]
#[ignore = "a measurement: cargo test -p stasis-store --lib rotation_figure -- --ignored --nocapture"]
async fn rotation_figure_100_tenants_1000_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let s = open_ring(&dir, vec![key_a()]).await.unwrap();
    s.set_kek_source(Arc::new(MemKeks::default()));
    let t0 = std::time::Instant::now();
    let snaps = populate(&s, tmp.path(), 100, 10).await;
    let fill = t0.elapsed();
    s.add_master_key(key_b());
    let rep = s.rotate_master_key(&key_b().fingerprint()).await.unwrap();
    let t1 = std::time::Instant::now();
    let ret = s.retire_master_key(&key_a().fingerprint()).await.unwrap();
    let retire = t1.elapsed();
    println!(
        "rotation figure: {} tenants, {} snapshots (filled in {:.1}s): rotate-master-key {} ms \
         ({} keys rewrapped), retire {} ms ({} wraps removed)",
        rep.tenants,
        snaps.len(),
        fill.as_secs_f64(),
        rep.ms,
        rep.keys_rewrapped,
        retire.as_millis(),
        ret.wraps_removed
    );
    assert_eq!(rep.tenants, 100);
    assert_eq!(
        restorable(&s, &snaps[..10], &tmp.path().join("o")).await,
        10
    );
}
