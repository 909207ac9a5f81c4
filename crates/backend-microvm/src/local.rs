//! Local state: what a paused sandbox keeps on the host that paused it, and
//! when a resume may use it instead of fetching the snapshot from the store.
//!
//! A pause leaves the sandbox directory holding the guest's own RAM file
//! (`memory.ram`, when the guest owns its RAM), its disk chain (`disk.qcow2`,
//! and `base.qcow2` under it after a resume from the store) and `local/` with
//! that pause's `memory.state` and `meta.json` (links to the files the pause
//! wrote). Once the server has stored the pause as snapshot S it calls
//! `pause_stored`, which writes `local/local.json`: S, the host's boot id and
//! the identity (device, inode, size, mtime) of each of those files.
//!
//! A resume of snapshot S uses them as they are (no fetch from the store, no
//! hashing) only when `local.json` names S, the host has not rebooted since
//! (the page cache that holds the files' latest writes survives a daemon
//! restart, not a host crash) and every file still has its recorded
//! identity. Otherwise the resume takes the store's copy, which is verified
//! chunk by chunk.
//!
//! ## What the trust is anchored in
//! The files never left this host and nothing could write them since they
//! were bound to S: `local/` is the daemon's (root, not writable by any
//! QEMU); the RAM file and the disk lie in the sandbox directory, writable
//! only by root and the sandbox's own jailed QEMU, which was stopped before
//! the state was saved and is gone, or held stopped in standby, whenever
//! `local.json` exists: it is removed before any QEMU may run on the files
//! again (a resume of any kind, a new pause, destroy). The recorded mtimes
//! are a tripwire for anything else touching them. What this does not cover
//! is a compromised QEMU in standby writing its own guest's RAM: that
//! changes only its own sandbox, never another's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stasis_core::{Result, SnapshotId};

use crate::qemu::{BASE_DISK, DISK, RAM_FILE};
use crate::snapshot::{self, SnapshotMeta, MEMORY_STATE, META};

/// The directory of a sandbox's local pause files.
pub(crate) const LOCAL_DIR: &str = "local";
/// The record binding them to a stored snapshot.
const RECORD: &str = "local.json";

/// `local/local.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    snapshot: SnapshotId,
    host_boot: String,
    /// (path relative to the sandbox directory, identity).
    files: Vec<(String, FileId)>,
}

/// Identity of a file version: device, inode, size, mtime (s, ns).
type FileId = (u64, u64, u64, i64, i64);

fn file_id(p: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(p).ok()?;
    if !md.file_type().is_file() {
        return None;
    }
    Some((md.dev(), md.ino(), md.size(), md.mtime(), md.mtime_nsec()))
}

/// The host's boot id: local files are trusted only within one boot.
pub(crate) fn host_boot() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The local directory of a sandbox.
pub(crate) fn dir_of(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join(LOCAL_DIR)
}

/// Forget the binding: from now on the files may change. Idempotent.
pub(crate) fn unbind(sandbox_dir: &Path) {
    let _ = std::fs::remove_file(dir_of(sandbox_dir).join(RECORD));
}

/// Keep the memory state and meta.json a pause wrote into `out` as the
/// sandbox's local pause files (links; `local/` made afresh, the daemon's).
pub(crate) fn keep_pause_files(sandbox_dir: &Path, out: &Path) -> Result<()> {
    let local = dir_of(sandbox_dir);
    stasis_backend::fsafe::fresh_dir(&local)?;
    for f in [MEMORY_STATE, META] {
        let src = out.join(f);
        if src.is_file() {
            std::fs::hard_link(&src, local.join(f))?;
        }
    }
    Ok(())
}

/// The files a local resume of `meta` reads, relative to the sandbox dir.
fn files_of(sandbox_dir: &Path, meta: &SnapshotMeta) -> Vec<String> {
    let mut v = vec![format!("{LOCAL_DIR}/{META}"), DISK.to_string()];
    if sandbox_dir.join(BASE_DISK).exists() {
        v.push(BASE_DISK.to_string());
    }
    if meta.memory {
        v.push(format!("{LOCAL_DIR}/{MEMORY_STATE}"));
        if meta.ram_file {
            v.push(RAM_FILE.to_string());
        }
    }
    v
}

/// Bind the local pause files to stored snapshot `snap`. Nothing is bound
/// when they are incomplete (the next resume takes the store's copy).
pub(crate) fn bind(sandbox_dir: &Path, snap: &SnapshotId) -> Result<bool> {
    unbind(sandbox_dir);
    let Some(meta) = snapshot::read_meta(&dir_of(sandbox_dir))? else {
        return Ok(false);
    };
    if meta.memory && meta.ram_file && meta.memory_ram_blake3.is_some() {
        // A copied RAM file (an old memfd guest) is not the guest's own.
        return Ok(false);
    }
    let mut files = Vec::new();
    for f in files_of(sandbox_dir, &meta) {
        let Some(id) = file_id(&sandbox_dir.join(&f)) else {
            return Ok(false);
        };
        files.push((f, id));
    }
    let rec = Record {
        snapshot: snap.clone(),
        host_boot: host_boot(),
        files,
    };
    stasis_backend::fsafe::write_replace(
        &dir_of(sandbox_dir).join(RECORD),
        &serde_json::to_vec(&rec)?,
        0o600,
    )?;
    Ok(true)
}

/// The meta of the local pause files when they are bound to `snap` and
/// unchanged since (see the module docs); None otherwise.
pub(crate) fn check(sandbox_dir: &Path, snap: &SnapshotId) -> Option<SnapshotMeta> {
    let bytes = std::fs::read(dir_of(sandbox_dir).join(RECORD)).ok()?;
    let rec: Record = serde_json::from_slice(&bytes).ok()?;
    if &rec.snapshot != snap || rec.host_boot != host_boot() || rec.host_boot.is_empty() {
        return None;
    }
    let meta = snapshot::read_meta(&dir_of(sandbox_dir)).ok()??;
    snapshot::check_format(&meta).ok()?;
    let want = files_of(sandbox_dir, &meta);
    if want.len() != rec.files.len() {
        return None;
    }
    for (name, id) in &rec.files {
        if !want.contains(name) || file_id(&sandbox_dir.join(name)) != Some(*id) {
            return None;
        }
    }
    Some(meta)
}

/// The local pause files bound to `snap` and unchanged since, as
/// `(artifact name, file)` (the disk beneath the overlay is no artifact of
/// `snap`); empty when [`check`] refuses them. The store reads them to
/// repair its copy of `snap`, verifying every byte it takes.
pub(crate) fn copies(sandbox_dir: &Path, snap: &SnapshotId) -> Vec<(String, PathBuf)> {
    let Some(meta) = check(sandbox_dir, snap) else {
        return Vec::new();
    };
    files_of(sandbox_dir, &meta)
        .into_iter()
        .filter(|f| f != BASE_DISK)
        .map(|f| {
            let name = f.rsplit('/').next().unwrap_or(&f).to_string();
            (name, sandbox_dir.join(&f))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::Accel;

    fn meta(ram_hash: Option<&str>) -> SnapshotMeta {
        SnapshotMeta {
            format: snapshot::META_FORMAT,
            image: "default".into(),
            image_digest: "d".repeat(64),
            memory_mb: 8,
            qemu_version: "10.0.2".into(),
            accelerator: Accel::Tcg,
            boot_id: "b".into(),
            memory: true,
            ram_file: true,
            memory_state_blake3: Some("s".into()),
            memory_state_bytes: 1,
            memory_ram_blake3: ram_hash.map(str::to_string),
            workdir: "/workspace".into(),
            created_ms: 1,
            network: true,
            inputs: vec![],
            vcpus: 1,
        }
    }

    /// A sandbox dir as a pause leaves it: RAM file, disk, local/ files.
    fn paused(ram_hash: Option<&str>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("stage");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join(MEMORY_STATE), b"state").unwrap();
        snapshot::write(&out, &meta(ram_hash)).unwrap();
        std::fs::write(d.path().join(RAM_FILE), b"ram").unwrap();
        std::fs::write(d.path().join(DISK), b"disk").unwrap();
        keep_pause_files(d.path(), &out).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
        d
    }

    #[test]
    fn bound_files_are_trusted_for_their_snapshot_only() {
        let d = paused(None);
        let (s1, s2) = (SnapshotId::generate(), SnapshotId::generate());
        assert!(check(d.path(), &s1).is_none(), "nothing bound yet");
        assert!(bind(d.path(), &s1).unwrap());
        assert!(check(d.path(), &s1).is_some());
        assert!(check(d.path(), &s2).is_none(), "another snapshot");
        unbind(d.path());
        assert!(check(d.path(), &s1).is_none(), "unbound");
    }

    #[test]
    fn a_changed_or_missing_file_voids_the_binding() {
        for f in [RAM_FILE, DISK, "local/memory.state", "local/meta.json"] {
            let d = paused(None);
            let s = SnapshotId::generate();
            assert!(bind(d.path(), &s).unwrap());
            let p = d.path().join(f);
            // Another version of the file: a new inode under the name.
            let data = std::fs::read(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            std::fs::write(&p, &data).unwrap();
            assert!(check(d.path(), &s).is_none(), "{f} replaced");
            std::fs::remove_file(&p).unwrap();
            assert!(check(d.path(), &s).is_none(), "{f} missing");
        }
        // Grown in place (same inode).
        let d = paused(None);
        let s = SnapshotId::generate();
        assert!(bind(d.path(), &s).unwrap());
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join(RAM_FILE))
            .unwrap();
        f.set_len(10).unwrap();
        assert!(check(d.path(), &s).is_none());
    }

    #[test]
    fn a_new_base_disk_or_another_boot_voids_the_binding() {
        let d = paused(None);
        let s = SnapshotId::generate();
        assert!(bind(d.path(), &s).unwrap());
        std::fs::write(d.path().join(BASE_DISK), b"base").unwrap();
        assert!(
            check(d.path(), &s).is_none(),
            "a file appeared in the chain"
        );
        assert!(bind(d.path(), &s).unwrap());
        assert!(check(d.path(), &s).is_some());
        // The same record from another boot of the host.
        let p = dir_of(d.path()).join(RECORD);
        let mut rec: Record = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        rec.host_boot = "another-boot".into();
        std::fs::write(&p, serde_json::to_vec(&rec).unwrap()).unwrap();
        assert!(check(d.path(), &s).is_none());
    }

    #[test]
    fn copies_name_the_artifacts_of_the_bound_snapshot_only() {
        let d = paused(None);
        let s = SnapshotId::generate();
        assert!(copies(d.path(), &s).is_empty(), "nothing bound yet");
        assert!(bind(d.path(), &s).unwrap());
        let mut got = copies(d.path(), &s);
        got.sort();
        let want = [
            (DISK, DISK.to_string()),
            (RAM_FILE, RAM_FILE.to_string()),
            (MEMORY_STATE, format!("{LOCAL_DIR}/{MEMORY_STATE}")),
            (META, format!("{LOCAL_DIR}/{META}")),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(n, f)| (n.to_string(), d.path().join(f)))
            .collect();
        assert_eq!(got, want);
        assert!(copies(d.path(), &SnapshotId::generate()).is_empty());
        unbind(d.path());
        assert!(copies(d.path(), &s).is_empty(), "unbound");
    }

    #[test]
    fn a_copied_ram_file_is_never_bound() {
        let d = paused(Some("abc"));
        assert!(!bind(d.path(), &SnapshotId::generate()).unwrap());
    }
}
