//! Slot claims of process sandboxes' user namespaces under concurrency:
//! no two sandboxes ever get the same host id range (no root needed).

use nix::fcntl::{Flock, FlockArg};
use stasis_backend_process::userns::{allocate, release, IdMap, UsernsConfig};
use std::fs::{self, File};
use std::path::{Path, PathBuf};

fn map(cfg: &UsernsConfig, slot: u32) -> IdMap {
    IdMap {
        host: cfg.base + slot * cfg.size,
        size: cfg.size,
    }
}

fn name(d: &Path) -> String {
    d.file_name().unwrap().to_string_lossy().into_owned()
}

fn cfg_in(t: &Path, slots: u32) -> UsernsConfig {
    UsernsConfig {
        base: 200_000,
        size: 65_536,
        slots,
        claims_dir: Some(t.join("claims")),
        subid_files: vec![],
    }
}

fn sandbox(t: &Path, name: &str) -> PathBuf {
    let d = t.join(name);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Run `f(i)` for `0..n` on `n` threads released at once.
fn race<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let go = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let (go, f) = (&go, &f);
                s.spawn(move || {
                    go.wait();
                    f(i)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn assert_distinct(maps: &[IdMap]) {
    let mut hosts: Vec<u32> = maps.iter().map(|m| m.host).collect();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), maps.len(), "shared ranges: {maps:?}");
}

#[test]
fn concurrent_allocations_never_share_and_release_frees_only_its_own() {
    let t = tempfile::tempdir().unwrap();
    let cfg = cfg_in(t.path(), 40);
    let claims = t.path().join("claims");
    let first: Vec<PathBuf> = (0..32)
        .map(|i| sandbox(t.path(), &format!("a{i}")))
        .collect();
    let maps = race(32, |i| allocate(&cfg, &first[i]).unwrap());
    assert_distinct(&maps);
    // Half of them go away while 24 new ones start, all at once.
    let second: Vec<PathBuf> = (0..24)
        .map(|i| sandbox(t.path(), &format!("b{i}")))
        .collect();
    let got = race(40, |i| {
        if i < 16 {
            release(&cfg, &first[i * 2]);
            None
        } else {
            Some(allocate(&cfg, &second[i - 16]))
        }
    });
    let mut live: Vec<(PathBuf, IdMap)> = (0..16)
        .map(|i| (first[i * 2 + 1].clone(), maps[i * 2 + 1]))
        .collect();
    let mut full = 0;
    for (i, r) in got.into_iter().enumerate().skip(16) {
        match r.unwrap() {
            Ok(m) => live.push((second[i - 16].clone(), m)),
            Err(e) => {
                assert!(e.to_string().contains("in use"), "{e}");
                full += 1;
            }
        }
    }
    // 40 slots: 16 kept + at least 8 new ones; none shared.
    assert!(live.len() >= 24 && live.len() <= 40, "{}", live.len());
    assert!(full <= 24 - 8, "{full}");
    let ms: Vec<IdMap> = live.iter().map(|(_, m)| *m).collect();
    assert_distinct(&ms);
    // Every live sandbox's claim still names it; no claim names a
    // released one.
    for (d, m) in &live {
        let slot = (m.host - cfg.base) / cfg.size;
        let o = fs::read_to_string(claims.join(slot.to_string())).unwrap();
        assert_eq!(o, name(d));
        assert_eq!(allocate(&cfg, d).unwrap(), *m);
    }
    let owners: Vec<String> = fs::read_dir(&claims)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .map(|e| fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(owners.len(), live.len(), "{owners:?}");
    for i in 0..16 {
        assert!(!owners.contains(&format!("a{}", i * 2)));
    }
}

#[test]
fn stale_claims_are_taken_over_by_one_sandbox_each() {
    let t = tempfile::tempdir().unwrap();
    let cfg = cfg_in(t.path(), 8);
    let claims = t.path().join("claims");
    fs::create_dir_all(&claims).unwrap();
    // Every slot claimed by a sandbox whose dir is gone.
    for s in 0..8 {
        fs::write(claims.join(s.to_string()), format!("gone{s}")).unwrap();
    }
    let dirs: Vec<PathBuf> = (0..12)
        .map(|i| sandbox(t.path(), &format!("s{i}")))
        .collect();
    let got = race(12, |i| allocate(&cfg, &dirs[i]));
    let mut maps = Vec::new();
    for (i, r) in got.into_iter().enumerate() {
        match r {
            Ok(m) => {
                let slot = (m.host - cfg.base) / cfg.size;
                let o = fs::read_to_string(claims.join(slot.to_string())).unwrap();
                assert_eq!(o, format!("s{i}"));
                maps.push(m)
            }
            Err(e) => assert!(e.to_string().contains("in use"), "{e}"),
        }
    }
    assert_eq!(maps.len(), 8);
    assert_distinct(&maps);
}

#[test]
fn an_empty_or_odd_claim_is_never_taken_over() {
    let t = tempfile::tempdir().unwrap();
    let cfg = cfg_in(t.path(), 4);
    let claims = t.path().join("claims");
    fs::create_dir_all(&claims).unwrap();
    fs::write(claims.join("0"), "").unwrap();
    fs::write(claims.join("1"), "..").unwrap();
    fs::write(claims.join("2"), "x/y").unwrap();
    let a = sandbox(t.path(), "a");
    assert_eq!(allocate(&cfg, &a).unwrap(), map(&cfg, 3));
    let b = sandbox(t.path(), "b");
    let e = allocate(&cfg, &b).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
    assert_eq!(fs::read_to_string(claims.join("0")).unwrap(), "");
}

#[test]
fn allocation_waits_for_another_process_holding_the_claims_lock() {
    let t = tempfile::tempdir().unwrap();
    let cfg = cfg_in(t.path(), 2);
    let claims = t.path().join("claims");
    fs::create_dir_all(&claims).unwrap();
    // Another daemon (another open file, as flock sees a process)
    // holds the lock while it claims slot 0.
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(claims.join(".lock"))
        .unwrap();
    let held = Flock::lock(f, FlockArg::LockExclusive).unwrap();
    let a = sandbox(t.path(), "a");
    let other = sandbox(t.path(), "other");
    std::thread::scope(|s| {
        let h = s.spawn(|| allocate(&cfg, &a));
        // (the sleep only makes a missing lock likelier to show)
        std::thread::sleep(std::time::Duration::from_millis(200));
        fs::write(claims.join("0"), name(&other)).unwrap();
        drop(held);
        assert_eq!(h.join().unwrap().unwrap(), map(&cfg, 1));
    });
}

#[test]
fn slots_overlapping_subordinate_id_ranges_are_skipped() {
    let t = tempfile::tempdir().unwrap();
    let mut cfg = cfg_in(t.path(), 4);
    let a = sandbox(t.path(), "a");
    assert_eq!(allocate(&cfg, &a).unwrap(), map(&cfg, 0));
    // A host user gets slot 0's range (subuid) and a bit of slot 2's
    // (subgid) after `a` took slot 0.
    let subuid = t.path().join("subuid");
    let subgid = t.path().join("subgid");
    fs::write(&subuid, "alice:200000:65536\n").unwrap();
    fs::write(&subgid, "alice:200000:65536\nbob:340000:10\n").unwrap();
    cfg.subid_files = vec![subuid, subgid, t.path().join("absent")];
    // `a` (resumed) moves off it and gives slot 0 back.
    assert_eq!(allocate(&cfg, &a).unwrap(), map(&cfg, 1));
    assert!(!t.path().join("claims/0").exists());
    let b = sandbox(t.path(), "b");
    assert_eq!(allocate(&cfg, &b).unwrap(), map(&cfg, 3));
    let c = sandbox(t.path(), "c");
    let e = allocate(&cfg, &c).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
}
