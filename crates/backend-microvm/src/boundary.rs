//! The manifest's boundaries on the host side of a microVM.
//!
//! * **Egress** is the egress service's, in QEMU's network namespace (see
//!   `net`). The guest gets the NIC's address and route, `10.0.2.2` as its
//!   nameserver (its queries are answered by the egress service's resolver
//!   in QEMU's namespace, not by slirp's forwarder), and one relay per allow entry on the
//!   host's loopback: "127.0.0.1:P" means the host's loopback port P, so
//!   the agent listens on the guest's own `127.0.0.1:P` and relays to
//!   `10.0.2.2:P`, slirp's alias for QEMU's loopback, where the egress
//!   service takes it to the host's port (the guest's own loopback port P
//!   is taken by the relay). IPv6 loopback entries are not relayed (slirp
//!   runs IPv4 only). Every other destination is reached directly through
//!   the NIC.
//! * **Read-only inputs**: virtio-9p would block migration while mounted,
//!   so each mount's source is copied at create into an ext4 image
//!   (`mkfs.ext4 -d`, no journal) cached by content digest in the sandbox
//!   directory (`inputs/<digest>.ext4`) and attached as a read-only
//!   virtio-blk drive (`readonly=on`: the guest cannot write it whatever it
//!   does) with serial `stasis-in<i>`; the agent mounts it read-only at the
//!   target. The images never enter a snapshot's disk. Resume and restore
//!   re-validate the source and rebuild the image when its content changed.
//! * **Disk quota**: the writable overlay's virtual size is the image's
//!   root filesystem plus `resources.disk_mb`, and the agent grows the
//!   root ext4 to it at cold boot: a guest that fills its disk gets ENOSPC,
//!   and the host file cannot grow beyond the virtual size.

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stasis_agent_proto::{GuestConfig, GuestForward, GuestMount, GuestNetwork};
use stasis_core::{Error, ErrorCode, Manifest, Result};

use crate::net::{self, Nic};

/// `disk_mb: 0` ("no cap beyond the host's"): the disk a VM gets anyway.
pub const UNCAPPED_DISK_MB: u64 = 16 * 1024;
const INPUTS_DIR: &str = "inputs";

/// The guest relays of a manifest: each allow entry on the host's IPv4
/// loopback, from the same address in the guest to slirp's host alias.
pub fn loopback_forwards(m: &Manifest) -> Vec<GuestForward> {
    m.network
        .allow
        .iter()
        .filter_map(|a| a.parse::<SocketAddrV4>().ok())
        .filter(|a| a.ip().is_loopback())
        .map(|a| GuestForward {
            destination: a.to_string(),
            via: format!("{}:{}", net::GATEWAY, a.port()),
        })
        .collect()
}

/// A read-only input disk of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputDisk {
    pub serial: String,
    /// The ext4 image (absolute).
    pub image: PathBuf,
    pub target: String,
    /// Single-file source: its name on the disk.
    pub file: Option<String>,
    /// Content digest of the source when the image was built.
    pub digest: String,
}

/// Check a mount source against the operator's allowed roots.
pub fn validate_source(i: usize, source: &str, roots: &[PathBuf]) -> Result<PathBuf> {
    let field = format!("mounts[{i}].source");
    let bad = |msg: String| Error::new(ErrorCode::InvalidManifest, msg).with_field(&field);
    let real = std::fs::canonicalize(source).map_err(|e| bad(format!("{field}: {source}: {e}")))?;
    let allowed = roots.iter().any(|r| {
        std::fs::canonicalize(r)
            .map(|r| real.starts_with(&r))
            .unwrap_or(false)
    });
    if !allowed {
        return Err(bad(if roots.is_empty() {
            format!("{field}: {source}: this daemon allows no mounts (stasis serve --allow-mount <dir>)")
        } else {
            format!(
                "{field}: {source} is not under an allowed mount root ({})",
                roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }));
    }
    let md = std::fs::metadata(&real).map_err(|e| bad(format!("{field}: {source}: {e}")))?;
    if !md.is_dir() && !md.is_file() {
        return Err(bad(format!(
            "{field}: {source} is neither a directory nor a regular file"
        )));
    }
    Ok(real)
}

/// Content digest of a file or directory tree: names, types, modes,
/// owners, link targets and file contents (not times).
pub fn tree_digest(path: &Path) -> Result<(String, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut h = blake3::Hasher::new();
    let (mut bytes, mut entries) = (0u64, 0u64);
    fn walk(
        base: &Path,
        rel: &Path,
        h: &mut blake3::Hasher,
        bytes: &mut u64,
        entries: &mut u64,
    ) -> Result<()> {
        let p = if rel.as_os_str().is_empty() {
            base.to_path_buf()
        } else {
            base.join(rel)
        };
        let md = std::fs::symlink_metadata(&p)?;
        *entries += 1;
        h.update(rel.as_os_str().as_encoded_bytes());
        h.update(&[0]);
        h.update(&md.mode().to_le_bytes());
        h.update(&md.uid().to_le_bytes());
        h.update(&md.gid().to_le_bytes());
        let ft = md.file_type();
        if ft.is_symlink() {
            h.update(std::fs::read_link(&p)?.as_os_str().as_encoded_bytes());
        } else if ft.is_file() {
            h.update(&md.len().to_le_bytes());
            let mut f = std::fs::File::open(&p)?;
            *bytes += std::io::copy(&mut f, h)?;
        } else if ft.is_dir() {
            let mut names: Vec<_> = std::fs::read_dir(&p)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<std::io::Result<_>>()?;
            names.sort();
            for n in names {
                walk(base, &rel.join(n), h, bytes, entries)?;
            }
        }
        h.update(b"\n");
        Ok(())
    }
    walk(path, Path::new(""), &mut h, &mut bytes, &mut entries)?;
    Ok((h.finalize().to_hex().to_string(), bytes, entries))
}

/// Validate every mount and make sure its image exists in `dir/inputs`
/// (built when missing). Blocking (hashes and copies the sources).
pub fn prepare_inputs(
    m: &Manifest,
    dir: &Path,
    roots: &[PathBuf],
    mkfs: &Path,
) -> Result<Vec<InputDisk>> {
    let mut out = Vec::new();
    for (i, mnt) in m.mounts.iter().enumerate() {
        let real = validate_source(i, &mnt.source, roots)?;
        let (digest, bytes, entries) = tree_digest(&real)
            .map_err(|e| e.context(format!("mounts[{i}].source {}", mnt.source)))?;
        let inputs = dir.join(INPUTS_DIR);
        std::fs::create_dir_all(&inputs)?;
        let image = inputs.join(format!("{}.ext4", &digest[..32]));
        let file = real
            .is_file()
            .then(|| real.file_name().unwrap().to_string_lossy().into_owned());
        if !image.is_file() {
            build_image(&real, file.is_some(), &image, bytes, entries, mkfs)
                .map_err(|e| e.context(format!("mounts[{i}]: building the input disk")))?;
        }
        out.push(InputDisk {
            serial: format!("stasis-in{i}"),
            image,
            target: mnt.target.clone(),
            file,
            digest,
        });
    }
    // Images no mount uses any more (a source changed since the last start).
    if let Ok(rd) = std::fs::read_dir(dir.join(INPUTS_DIR)) {
        for e in rd.flatten() {
            if !out.iter().any(|d| d.image == e.path()) {
                let _ = std::fs::remove_file(e.path());
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    Ok(out)
}

fn build_image(
    src: &Path,
    is_file: bool,
    image: &Path,
    bytes: u64,
    entries: u64,
    mkfs: &Path,
) -> Result<()> {
    let tmp = image.with_extension("tmp");
    let stage = image.with_extension("stage");
    let _ = std::fs::remove_file(&tmp);
    let _ = std::fs::remove_dir_all(&stage);
    // A single file goes onto the disk through a staging directory.
    let root = if is_file {
        std::fs::create_dir_all(&stage)?;
        crate::util::link_or_copy(src, &stage.join(src.file_name().unwrap()))?;
        stage.clone()
    } else {
        src.to_path_buf()
    };
    // Room for the data (4 KiB blocks), one block per entry, metadata.
    let size = (bytes + bytes / 10 + (entries + 16) * 4096 + (8 << 20)).div_ceil(1 << 20);
    let inodes = (entries + 64).to_string();
    let f = std::fs::File::create(&tmp)?;
    f.set_len(size << 20)?;
    drop(f);
    let out = std::process::Command::new(mkfs)
        .args([
            "-q",
            "-F",
            "-t",
            "ext4",
            "-O",
            "^has_journal",
            "-L",
            "stasis-input",
        ])
        .args(["-b", "4096", "-m", "0", "-N", &inodes, "-d"])
        .arg(&root)
        .arg(&tmp)
        .output()
        .map_err(|e| Error::backend(format!("cannot run {}: {e}", mkfs.display())));
    let _ = std::fs::remove_dir_all(&stage);
    let out = out?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::backend(format!(
            "mkfs.ext4 -d {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    std::fs::rename(&tmp, image)?;
    Ok(())
}

/// What the agent applies for a manifest. `refresh` lists the serials whose
/// content changed under a guest that had them mounted.
pub fn guest_config(
    m: &Manifest,
    disks: &[InputDisk],
    refresh: &[String],
    grow_root: bool,
    nic: Nic,
) -> GuestConfig {
    GuestConfig {
        network: (nic != Nic::None).then(|| GuestNetwork {
            address: net::GUEST_CIDR.into(),
            gateway: net::GATEWAY.into(),
            forwards: loopback_forwards(m),
        }),
        mounts: disks
            .iter()
            .map(|d| GuestMount {
                serial: d.serial.clone(),
                target: d.target.clone(),
                file: d.file.clone(),
                refresh: refresh.contains(&d.serial),
            })
            .collect(),
        outputs: m.outputs.clone(),
        pids: m.resources.pids,
        grow_root,
    }
}

/// Virtual size (bytes) of a qcow2 image, from its header.
pub fn qcow2_virtual_size(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut h = [0u8; 32];
    std::fs::File::open(path)?.read_exact(&mut h)?;
    if &h[..4] != b"QFI\xfb" {
        return Err(Error::backend(format!("{} is not qcow2", path.display())));
    }
    Ok(u64::from_be_bytes(h[24..32].try_into().unwrap()))
}

/// The writable disk's virtual size for a manifest: the image's root
/// filesystem plus `disk_mb`.
pub fn disk_bytes(base_virtual: u64, m: &Manifest) -> u64 {
    let mb = match m.resources.disk_mb {
        0 => UNCAPPED_DISK_MB,
        n => n,
    };
    base_virtual + (mb << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_must_lie_under_an_allowed_root() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("allowed");
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::create_dir_all(d.path().join("other")).unwrap();
        std::os::unix::fs::symlink(d.path().join("other"), root.join("link")).unwrap();
        let roots = vec![root.clone()];
        let ok = root.join("data");
        assert!(validate_source(0, ok.to_str().unwrap(), &roots).is_ok());
        for bad in [
            d.path().join("other"),
            root.join("link"), // a symlink out of the root
            root.join("missing"),
        ] {
            let e = validate_source(2, bad.to_str().unwrap(), &roots).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidManifest, "{bad:?}");
            assert_eq!(e.field.as_deref(), Some("mounts[2].source"), "{e}");
        }
        let e = validate_source(0, ok.to_str().unwrap(), &[]).unwrap_err();
        assert!(e.message.contains("allows no mounts"), "{e}");
    }

    #[test]
    fn digest_follows_content_not_times() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), "1").unwrap();
        let (a, _, n) = tree_digest(d.path()).unwrap();
        assert_eq!(n, 2);
        std::fs::write(d.path().join("a"), "1").unwrap();
        assert_eq!(tree_digest(d.path()).unwrap().0, a);
        std::fs::write(d.path().join("a"), "2").unwrap();
        assert_ne!(tree_digest(d.path()).unwrap().0, a);
    }

    #[test]
    fn relays_and_disk_size_follow_the_manifest() {
        let mut m = Manifest::default();
        assert!(loopback_forwards(&m).is_empty());
        assert!(guest_config(&m, &[], &[], false, Nic::None)
            .network
            .is_none());
        // Every guest with a NIC gets its address, even without an allowlist.
        let g = guest_config(&m, &[], &[], false, Nic::Restricted)
            .network
            .unwrap();
        assert_eq!(
            (g.address.as_str(), g.gateway.as_str()),
            ("10.0.2.15/24", "10.0.2.2")
        );
        assert!(g.forwards.is_empty());
        m.network.allow = vec![
            "127.0.0.1:5000".into(),
            "[::1]:6000".into(),
            "93.184.216.34:443".into(),
            "pypi.org".into(),
        ];
        // Only the host's IPv4 loopback needs a relay; the rest goes
        // through the NIC to the egress service.
        let g = guest_config(&m, &[], &[], true, Nic::Open).network.unwrap();
        assert_eq!(
            g.forwards,
            vec![GuestForward {
                destination: "127.0.0.1:5000".into(),
                via: "10.0.2.2:5000".into()
            }]
        );
        m.resources.disk_mb = 64;
        assert_eq!(disk_bytes(1 << 30, &m), (1 << 30) + (64 << 20));
    }
}
