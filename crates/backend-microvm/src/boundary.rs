//! The manifest's boundaries on the host side of a microVM.
//!
//! * **Egress**: an empty allowlist gives the guest no NIC at all. Otherwise
//!   the guest gets one virtio-net device on QEMU user networking (slirp)
//!   with `restrict=on`, which drops every packet the guest sends out
//!   (nothing reaches the host or beyond), plus one `guestfwd` per
//!   allowlisted destination: a guest connection to `10.0.2.100:<20000+i>`
//!   is handed by QEMU itself to a relay command it spawns per connection
//!   (`busybox nc <ip> <port>`), which connects to the destination as
//!   written. Only these forwards pass, and they live in QEMU, outside the
//!   untrusted guest. Inside, the agent keeps each destination's address as
//!   written: it adds a non-loopback destination's address to the guest's
//!   `lo` and listens on `ip:port` there, relaying to the guestfwd port, so
//!   code in the guest connects to the address in the manifest. "127.0.0.1:P"
//!   is the host's loopback port P (the guest's own loopback port P is
//!   taken by the relay). A guest that tears its relays down only loses its
//!   own egress.
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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stasis_agent_proto::{GuestConfig, GuestForward, GuestMount, GuestNetwork};
use stasis_core::{Error, ErrorCode, Manifest, Result};

/// QEMU user networking's defaults (guest 10.0.2.15, host alias 10.0.2.2).
pub const GUEST_CIDR: &str = "10.0.2.15/24";
pub const GATEWAY: &str = "10.0.2.2";
/// The address every guestfwd listens on inside the virtual network.
pub const RELAY_ADDR: &str = "10.0.2.100";
pub const RELAY_BASE_PORT: u16 = 20000;
/// `disk_mb: 0` ("no cap beyond the host's"): the disk a VM gets anyway.
pub const UNCAPPED_DISK_MB: u64 = 16 * 1024;
const INPUTS_DIR: &str = "inputs";

/// One allowlisted destination as QEMU forwards it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forward {
    pub guest_port: u16,
    pub host: SocketAddr,
}

/// Refuse network entries this backend's forwards cannot serve (names,
/// wildcards, networks, a deny list): only `ip:port` destinations are
/// relayed, so anything else would silently reach nothing.
pub fn check_network(m: &Manifest) -> Result<()> {
    for (i, a) in m.network.allow.iter().enumerate() {
        if a.parse::<SocketAddr>().is_err() {
            let field = format!("network.allow[{i}]");
            return Err(Error::new(
                ErrorCode::InvalidManifest,
                format!("{field}: the microVM backend reaches ip:port destinations only"),
            )
            .with_field(&field));
        }
    }
    if !m.network.deny.is_empty() {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            "network.deny: the microVM backend has no deny list (it reaches listed ip:port destinations only)",
        )
        .with_field("network.deny"));
    }
    Ok(())
}

/// The egress forwards of a manifest (empty: no NIC).
pub fn forwards(m: &Manifest) -> Vec<Forward> {
    m.network
        .destinations()
        .into_iter()
        .enumerate()
        .map(|(i, host)| Forward {
            guest_port: RELAY_BASE_PORT + i as u16,
            host,
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
) -> GuestConfig {
    let fw = forwards(m);
    GuestConfig {
        network: (!fw.is_empty()).then(|| GuestNetwork {
            address: GUEST_CIDR.into(),
            gateway: GATEWAY.into(),
            forwards: fw
                .iter()
                .map(|f| GuestForward {
                    destination: f.host.to_string(),
                    via: format!("{RELAY_ADDR}:{}", f.guest_port),
                })
                .collect(),
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
    fn network_entries_it_cannot_relay_are_refused() {
        let mut m = Manifest::default();
        m.network.allow = vec!["127.0.0.1:80".into(), "pypi.org".into()];
        let e = check_network(&m).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network.allow[1]"));
        m.network.allow = vec!["127.0.0.1:80".into()];
        assert!(check_network(&m).is_ok());
        m.network.deny = vec!["127.0.0.1:80".into()];
        assert_eq!(
            check_network(&m).unwrap_err().field.as_deref(),
            Some("network.deny")
        );
    }

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
    fn forwards_and_disk_size_follow_the_manifest() {
        let mut m = Manifest::default();
        assert!(forwards(&m).is_empty());
        assert!(guest_config(&m, &[], &[], false).network.is_none());
        m.network.allow = vec!["127.0.0.1:5000".into(), "[::1]:6000".into()];
        let f = forwards(&m);
        assert_eq!(f[1].guest_port, RELAY_BASE_PORT + 1);
        let g = guest_config(&m, &[], &[], true).network.unwrap();
        assert_eq!(g.forwards[0].via, "10.0.2.100:20000");
        assert_eq!(g.forwards[1].destination, "[::1]:6000");
        m.resources.disk_mb = 64;
        assert_eq!(disk_bytes(1 << 30, &m), (1 << 30) + (64 << 20));
    }
}
