//! The artifact format of a pause or snapshot: which files an artifact
//! directory holds, `meta.json` (its encoding, its version, the checks that
//! decide whether this backend may load it) and the integrity of the memory
//! files.
//!
//! ## Layout of an artifact directory
//! | file | present | content |
//! |---|---|---|
//! | `memory.state` | `memory` | QEMU migration stream: device state, plus guest RAM unless `ram_file` |
//! | `memory.ram` | `memory && ram_file` | guest RAM as a sparse file (the guest's own RAM file, or a copy of its allocated extents) |
//! | `disk.qcow2` | always | one qcow2 overlay whose backing file is the image's `rootfs.qcow2` |
//! | `meta.json` | always | [`SnapshotMeta`], written last (atomically, through `.meta.json.tmp`) |
//!
//! `meta.json` is written only once the memory files are complete and carries
//! the blake3 of `memory.state` (and its size): a `meta.json` that verifies
//! is the proof that the memory state is whole. From format 4, `memory.ram`
//! carries no blake3 when it is the guest's own RAM file (a pause writes no
//! copy of it and reads none of it): the file is whole by construction (the
//! guest is stopped before the state is saved and is never continued while
//! the artifacts exist), the snapshot store verifies every chunk of it on
//! the way back (keyed blake3 address, AEAD), and on the host that wrote it
//! a local resume trusts it only through `local` (the record binding the
//! files, unchanged, to the stored snapshot).
//!
//! ## Version
//! `meta.json`'s `format` is the version of the whole artifact format
//! ([`META_FORMAT`]). Version history:
//! * 1: guest RAM was QEMU's implicit RAM block (no longer loadable: the
//!   device state names another RAM object).
//! * 2: guest RAM is the memory backend object `mem`; optional `memory.ram`.
//!   `network` says whether the guest had a NIC (only with an allowlist).
//! * 3: every guest has a NIC (`network` is always true; see `net`). Still
//!   loadable: version 2, whose guest gets a NIC exactly when its meta says
//!   `network: true` (a memory state loads only into the devices it was
//!   saved with), so an old guest without one restores without network
//!   and without ports.
//! * 4: `memory.ram` may be the guest's own RAM file, without a blake3 (see
//!   above). Formats 2 and 3 still load.
//!
//! [`check_format`] refuses any other version (older or newer) with
//! `unsupported` before anything is started or touched. Fields added within
//! a version carry serde defaults so older files of that version still read.
//! Beyond the format, a memory state loads only under the QEMU version that
//! saved it ([`same_qemu`]), on the same image build, with the same devices
//! ([`check_devices`]) and matching hashes ([`verify`]).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use stasis_backend::{Artifact, ArtifactKind};
use stasis_core::{Error, ErrorCode, Manifest, Result};

use crate::qemu::Accel;

/// Artifact file names.
pub const MEMORY_STATE: &str = "memory.state";
pub const MEMORY_RAM: &str = "memory.ram";
pub const DISK_ARTIFACT: &str = "disk.qcow2";
pub const META: &str = "meta.json";
/// meta.json format written: 4 = the RAM file may carry no blake3.
pub const META_FORMAT: u32 = 4;
/// Formats this backend loads (see the version history above).
pub const LOADABLE_FORMATS: &[u32] = &[2, 3, META_FORMAT];

/// Identity of a file version: device, inode, size, mtime, ctime.
pub(crate) type FileKey = (u64, u64, u64, i64, i64);

/// Whether a memory image saved under QEMU `saved` loads under `running`:
/// the same upstream version ("10.0.2"; Debian revisions of one upstream
/// version share its migration format).
pub(crate) fn same_qemu(saved: &str, running: &str) -> bool {
    saved == running && saved != "unknown"
}

/// `meta.json` of a pause or snapshot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub format: u32,
    pub image: String,
    pub image_digest: String,
    pub memory_mb: u64,
    pub qemu_version: String,
    pub accelerator: Accel,
    pub boot_id: String,
    /// Whether guest memory was saved (false: filesystem-only pause).
    pub memory: bool,
    /// RAM travels as a separate file (`memory.ram`) instead of in the stream.
    #[serde(default)]
    pub ram_file: bool,
    /// blake3 of memory.state, checked before it is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_state_blake3: Option<String>,
    #[serde(default)]
    pub memory_state_bytes: u64,
    /// blake3 of memory.ram (when `ram_file` and it was copied; none when it
    /// is the guest's own RAM file, format 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_ram_blake3: Option<String>,
    pub workdir: String,
    pub created_ms: i64,
    /// The guest had a NIC (always, from format 3): a memory state loads
    /// only into a VM with the same devices, so it decides the NIC of a
    /// memory restore.
    #[serde(default)]
    pub network: bool,
    /// Content digests of the read-only input disks, in drive order.
    #[serde(default)]
    pub inputs: Vec<String>,
    /// vCPUs of the saved guest (a memory state loads only into as many).
    #[serde(default = "one_vcpu")]
    pub vcpus: u32,
}

pub(crate) fn one_vcpu() -> u32 {
    1
}

/// `meta.json` as stored.
pub fn encode(meta: &SnapshotMeta) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec_pretty(meta)?)
}

/// Parse `meta.json` (any version: the version is checked by [`check_format`]).
pub fn decode(bytes: &[u8]) -> Result<SnapshotMeta> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::integrity(format!("meta.json undecodable: {e}")))
}

/// Whether this backend loads artifacts of `meta`'s format version.
pub fn check_format(meta: &SnapshotMeta) -> Result<()> {
    if !LOADABLE_FORMATS.contains(&meta.format) {
        return Err(Error::unsupported(format!(
            "snapshot format {} is not loadable by this backend (format {META_FORMAT}, loads {LOADABLE_FORMATS:?})",
            meta.format
        )));
    }
    if meta.format >= 3 && !meta.network {
        return Err(Error::integrity(format!(
            "meta.json of format {} says the guest had no NIC, which that format never writes",
            meta.format
        )));
    }
    Ok(())
}

/// Write `out/meta.json` atomically: a crash leaves the old file or none.
pub(crate) fn write(out: &Path, meta: &SnapshotMeta) -> Result<()> {
    let tmp = out.join(".meta.json.tmp");
    std::fs::write(&tmp, encode(meta)?)?;
    std::fs::rename(&tmp, out.join(META))?;
    Ok(())
}

pub(crate) fn read_meta(artifacts: &Path) -> Result<Option<SnapshotMeta>> {
    match std::fs::read(artifacts.join(META)) {
        Ok(b) => decode(&b).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The artifacts of a complete artifact directory, as its meta.json
/// lists them (memory files, then the disk, then meta.json).
/// The block the store cuts a RAM file into: 64 KiB (16 pages), the
/// content-defined chunks' average, so an idle guest's few changed pages
/// cost little and a 256 MiB guest is at most 4096 chunk objects.
pub(crate) const RAM_BLOCK: u32 = 64 * 1024;

pub(crate) fn artifacts_of(out: &Path) -> Result<Vec<Artifact>> {
    let meta =
        read_meta(out)?.ok_or_else(|| Error::backend(format!("no {META} in {}", out.display())))?;
    let size = |name: &str| -> Result<u64> {
        std::fs::metadata(out.join(name))
            .map(|m| m.len())
            .map_err(|e| Error::backend(format!("{name} in {}: {e}", out.display())))
    };
    let mut arts = Vec::new();
    if meta.memory {
        arts.push(Artifact {
            name: MEMORY_STATE.into(),
            kind: ArtifactKind::Memory,
            size: size(MEMORY_STATE)?,
            block: None,
        });
        if meta.ram_file {
            arts.push(Artifact {
                name: MEMORY_RAM.into(),
                kind: ArtifactKind::Memory,
                size: size(MEMORY_RAM)?,
                // The guest's RAM, page for page: cut into aligned blocks so
                // the next pause stores only what the guest changed.
                block: Some(RAM_BLOCK),
            });
        }
    }
    arts.push(Artifact {
        name: DISK_ARTIFACT.into(),
        kind: ArtifactKind::Disk,
        size: size(DISK_ARTIFACT)?,
        block: None,
    });
    arts.push(Artifact {
        name: META.into(),
        kind: ArtifactKind::Meta,
        size: size(META)?,
        block: None,
    });
    Ok(arts)
}

/// A memory state loads only into a VM with the devices it was saved with.
/// (The NIC follows the snapshot, see `net::Nic::choose`; the mounts must
/// be as many as it had.)
pub(crate) fn check_devices(meta: &SnapshotMeta, m: &Manifest) -> Result<()> {
    if meta.inputs.len() != m.mounts.len() {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "mounts: the snapshot's guest was saved with {} read-only mount(s); a memory restore needs the same number (got {})",
                meta.inputs.len(),
                m.mounts.len()
            ),
        )
        .with_field("mounts"));
    }
    Ok(())
}

pub(crate) fn hash_file(path: &Path) -> Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut h = blake3::Hasher::new();
    let n = std::io::copy(&mut f, &mut h)?;
    Ok((h.finalize().to_hex().to_string(), n))
}

/// Check a memory artifact against meta.json's blake3 (and size). Files
/// already verified (same inode, size, mtime, ctime) are not hashed
/// again: N forks from one materialized snapshot hash it once.
pub(crate) async fn verify(
    verified: &Mutex<HashMap<FileKey, String>>,
    path: &Path,
    want: &str,
    size: Option<u64>,
) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let name = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let md = std::fs::metadata(path).map_err(|e| Error::integrity(format!("{name}: {e}")))?;
    let key = (
        md.dev(),
        md.ino(),
        md.size(),
        md.mtime_nsec() ^ md.mtime() << 30,
        md.ctime_nsec() ^ md.ctime() << 30,
    );
    if verified
        .lock()
        .unwrap()
        .get(&key)
        .is_some_and(|h| h == want)
    {
        return Ok(());
    }
    let p = path.to_path_buf();
    let (got, n) = tokio::task::spawn_blocking(move || hash_file(&p))
        .await
        .map_err(|e| Error::internal(e.to_string()))??;
    if got != want || size.is_some_and(|s| s != n) {
        return Err(Error::integrity(format!(
            "{name} is corrupt or truncated ({n} bytes, blake3 {}; meta.json says {} bytes, blake3 {}): refusing to restore",
            &got[..12],
            size.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
            &want[..12.min(want.len())]
        )));
    }
    let mut v = verified.lock().unwrap();
    if v.len() > 1024 {
        v.clear();
    }
    v.insert(key, got);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn memory_images_load_only_under_the_qemu_that_saved_them() {
        assert!(same_qemu("10.0.2", "10.0.2"));
        assert!(!same_qemu("7.2.19", "10.0.2"));
        assert!(!same_qemu("10.0.2", "10.0.3"));
        assert!(!same_qemu("unknown", "unknown"));
    }

    pub(crate) fn meta() -> SnapshotMeta {
        SnapshotMeta {
            format: META_FORMAT,
            image: "default".into(),
            image_digest: "d".repeat(64),
            memory_mb: 256,
            qemu_version: "7.2.22".into(),
            accelerator: Accel::Tcg,
            boot_id: "b".into(),
            memory: true,
            ram_file: true,
            memory_state_blake3: Some("s".into()),
            memory_state_bytes: 42,
            memory_ram_blake3: Some("r".into()),
            workdir: "/workspace".into(),
            created_ms: 1,
            network: true,
            inputs: vec!["i".into()],
            vcpus: 2,
        }
    }

    #[test]
    fn meta_encodes_and_decodes_to_the_same_fields() {
        let m = meta();
        let back = decode(&encode(&m).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&m).unwrap()
        );
        check_format(&back).unwrap();
    }

    #[test]
    fn fields_added_within_a_version_default_when_absent() {
        let mut v = serde_json::to_value(meta()).unwrap();
        for k in [
            "ram_file",
            "memory_state_blake3",
            "memory_state_bytes",
            "memory_ram_blake3",
            "network",
            "inputs",
            "vcpus",
        ] {
            v.as_object_mut().unwrap().remove(k);
        }
        v["format"] = 2.into();
        let m = decode(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(!m.ram_file && !m.network && m.inputs.is_empty());
        assert_eq!((m.vcpus, m.memory_state_bytes), (1, 0));
        assert!(m.memory_state_blake3.is_none() && m.memory_ram_blake3.is_none());
        check_format(&m).unwrap();
    }

    #[test]
    fn other_format_versions_are_refused_clearly() {
        for f in [0, 1, META_FORMAT + 1, 99] {
            assert!(!LOADABLE_FORMATS.contains(&f));
            let mut m = meta();
            m.format = f;
            let m = decode(&encode(&m).unwrap()).unwrap();
            let e = check_format(&m).unwrap_err();
            assert_eq!(e.code, ErrorCode::Unsupported, "{f}");
            assert!(
                e.message.contains(&format!("snapshot format {f}"))
                    && e.message.contains(&format!("format {META_FORMAT}")),
                "{e}"
            );
        }
    }

    /// Format 2 (the NIC only with an allowlist) still loads, with or
    /// without a NIC; formats 3 and 4 always have one, and a meta of those
    /// that says otherwise is refused.
    #[test]
    fn format_2_loads_and_later_formats_always_have_a_nic() {
        assert_eq!(META_FORMAT, 4);
        let mut m = meta();
        m.format = 3;
        check_format(&m).unwrap();
        for network in [false, true] {
            let mut m = meta();
            m.format = 2;
            m.network = network;
            check_format(&decode(&encode(&m).unwrap()).unwrap()).unwrap();
        }
        let mut m = meta();
        check_format(&m).unwrap();
        m.network = false;
        let e = check_format(&m).unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
        assert!(e.message.contains("no NIC"), "{e}");
    }

    #[test]
    fn memory_restores_need_as_many_mounts() {
        let m = meta();
        let mut man = Manifest::default();
        let e = check_devices(&m, &man).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("mounts"), "{e}");
        man.mounts = vec![stasis_core::manifest::Mount {
            source: "/x".into(),
            target: "/y".into(),
        }];
        check_devices(&m, &man).unwrap();
        // The allowlist no longer decides devices.
        man.network.allow = vec!["127.0.0.1:1".into()];
        check_devices(&m, &man).unwrap();
    }

    #[test]
    fn undecodable_meta_is_an_integrity_error() {
        for bad in [&b"{"[..], b"[]", b"{\"format\":2}"] {
            let e = decode(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::IntegrityError);
            assert!(e.message.starts_with("meta.json undecodable"), "{e}");
        }
    }

    #[test]
    fn meta_is_written_atomically_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_meta(d.path()).unwrap().is_none());
        write(d.path(), &meta()).unwrap();
        assert!(!d.path().join(".meta.json.tmp").exists());
        let m = read_meta(d.path()).unwrap().unwrap();
        assert_eq!(m.vcpus, 2);
    }
}
