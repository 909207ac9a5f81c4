//! Unit/integration tests of the store against the local filesystem backend:
//! shared fixtures here, one module per concern below.

use super::*;
use crate::bench::{mutate_in_place, pseudo_random, write_vm_like_image};
use stasis_core::BackendKind;
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

mod access;
mod blocks;
mod export_import;
mod gc_crash;
mod gc_sweep;
mod keys;
mod put_crash;
mod roundtrip;
mod verify;

fn tid(s: &str) -> TenantId {
    TenantId::parse(s).unwrap()
}

fn test_key() -> MasterKey {
    MasterKey::from_bytes([7u8; 32])
}

fn small_chunks() -> StoreConfig {
    StoreConfig {
        chunk_min: 2048,
        chunk_avg: 8192,
        chunk_max: 32768,
        ..StoreConfig::default()
    }
}

async fn open_dir(dir: &Path, key: MasterKey) -> Result<Store> {
    Store::open_with_config(&format!("file://{}", dir.display()), key, small_chunks()).await
}

/// memory (VM-like), disk (random), fs.tar (compressible text), empty.
fn write_artifacts(dir: &Path, seed: u64) -> Vec<(String, String)> {
    std::fs::create_dir_all(dir).unwrap();
    write_vm_like_image(&dir.join("memory"), 2 << 20, seed).unwrap();
    let mut disk = vec![0u8; 700_000];
    pseudo_random(seed + 1, &mut disk);
    std::fs::write(dir.join("disk"), &disk).unwrap();
    let mut text = String::new();
    for i in 0..30_000 {
        text.push_str(&format!("line {i} of the filesystem layer, seed {seed}\n"));
    }
    std::fs::write(dir.join("fs.tar"), text).unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    vec![
        ("memory".into(), "memory".into()),
        ("disk".into(), "disk-overlay".into()),
        ("fs.tar".into(), "fs-tar".into()),
        ("empty".into(), "fs-tar".into()),
    ]
}

fn assert_same_files(a: &Path, b: &Path, arts: &[(String, String)]) {
    for (n, _) in arts {
        let x = std::fs::read(a.join(n)).unwrap();
        let y = std::fs::read(b.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
        assert!(x == y, "artifact {n} differs after restore");
    }
}

fn new_meta(t: &TenantId) -> NewSnapshot {
    let mut m = NewSnapshot::new(t.clone(), BackendKind::Microvm);
    m.manifest_digest = "sha:abc".into();
    m.created_by = "test".into();
    m.meta = serde_json::json!({"qemu": {"mem_mb": 256}});
    m
}

#[derive(Default)]
struct CountProgress {
    total: AtomicU64,
    done: AtomicU64,
    finished: AtomicU64,
}
impl Progress for CountProgress {
    fn set_total(&self, b: u64) {
        self.total.store(b, Ordering::SeqCst);
    }
    fn inc(&self, b: u64) {
        self.done.fetch_add(b, Ordering::SeqCst);
    }
    fn finish(&self) {
        self.finished.fetch_add(1, Ordering::SeqCst);
    }
}

fn chunk_files(store_dir: &Path, t: &TenantId) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let root = store_dir.join("tenants").join(t.as_str()).join("chunks");
    if let Ok(rd) = std::fs::read_dir(&root) {
        for d in rd.flatten() {
            for f in std::fs::read_dir(d.path()).unwrap().flatten() {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

fn chunk_file(store_dir: &Path, t: &TenantId, a: &ChunkAddr) -> std::path::PathBuf {
    let h = a.to_hex();
    store_dir
        .join("tenants")
        .join(t.as_str())
        .join("chunks")
        .join(&h[..2])
        .join(h)
}

fn no_leftovers(parent: &Path) {
    for e in std::fs::read_dir(parent).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        assert!(!n.contains("stasis-restore"), "temp dir left behind: {n}");
    }
}
