//! Building a sandbox's root filesystem on the host side: the read-only
//! lower layer (host `/` or a registered image), the writable layer's
//! directories (on a quota disk when `resources.disk_mb` is set), a fresh
//! upper layer masking the host root, or one restored from `fs.tar`, and
//! writing the upper layer back out as `fs.tar`.

use std::path::{Path, PathBuf};

use stasis_backend::{Artifact, ArtifactKind, SandboxSpec};
use stasis_core::{Error, ErrorCode, Result};

use crate::config::ProcessConfig;
use crate::sys::blocking;
use crate::{disk, layer};

/// Name of the writable-layer artifact of pause/snapshot.
pub const FS_TAR: &str = "fs.tar";

/// Top-level directories of the host's `/` a sandbox sees when it has no
/// image of its own. Every other top-level entry (/root, /home, /tmp, /work,
/// /srv, /mnt, ...) is masked by an opaque dir / whiteout in the upper layer.
pub const HOST_ROOT_ALLOW: [&str; 10] = [
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt", "var",
];

/// Host secrets and logs inside the allowed directories, masked too (files
/// become whiteouts, directories empty opaque directories).
pub const HOST_ROOT_MASK: [&str; 12] = [
    "etc/shadow",
    "etc/shadow-",
    "etc/gshadow",
    "etc/gshadow-",
    "etc/ssh",
    "etc/ssl/private",
    "etc/sudoers.d",
    "var/log",
    "var/mail",
    "var/spool",
    "var/backups",
    "var/lib/stasis",
];

/// Where the overlay's upper and work dirs live: on the sandbox's quota
/// filesystem when `resources.disk_mb` is set, else directly in its dir.
pub(crate) fn layer_root(spec: &SandboxSpec) -> PathBuf {
    if spec.manifest.resources.disk_mb > 0 {
        disk::mount_point(&spec.dir)
    } else {
        spec.dir.clone()
    }
}

/// The read-only lower layer: the host's `/` without an image, else the
/// registered image's `rootfs` directory, by name only. Its canonical
/// path must lie strictly inside the canonical images directory, so
/// neither `..` nor a symlink (in the name, the image's directory or its
/// `rootfs`) can make a host directory the sandbox's root.
pub(crate) fn lower(cfg: &ProcessConfig, spec: &SandboxSpec) -> Result<PathBuf> {
    let Some(name) = &spec.manifest.image else {
        return Ok(PathBuf::from("/"));
    };
    stasis_core::manifest::validate_image_name(name)?;
    let refuse = |why: String| {
        Error::new(ErrorCode::InvalidManifest, format!("image: {name:?} {why}")).with_field("image")
    };
    if name.starts_with("sha256:") {
        let Some(store) = &cfg.image_store else {
            return Err(refuse(
                "cannot be used: this daemon has no image store".into(),
            ));
        };
        let id = stasis_image::Digest::parse(name)?;
        let img = stasis_image::store::ImageStore::open(store)?
            .by_id(&id)
            .map_err(|e| refuse(e.message))?;
        return Ok(img.rootfs);
    }
    let Some(images) = &cfg.images_dir else {
        return Err(refuse(
            "cannot be used: this daemon has no images directory".into(),
        ));
    };
    let root = images.canonicalize().map_err(|e| {
        refuse(format!(
            "is not available: images directory {}: {e}",
            images.display()
        ))
    })?;
    if root.parent().is_none() {
        return Err(refuse(
            "cannot be used: the images directory must not be the host's /".into(),
        ));
    }
    let wanted = root.join(name).join("rootfs");
    let canon = wanted.canonicalize().map_err(|_| {
        refuse(format!(
            "is not a registered image (no directory {})",
            wanted.display()
        ))
    })?;
    if canon == root || !canon.starts_with(&root) {
        return Err(refuse(format!(
            "leads out of the images directory ({} resolves to {}; symlinks must stay inside it)",
            wanted.display(),
            canon.display()
        )));
    }
    if !canon.is_dir() {
        return Err(refuse(format!(
            "is not a registered image ({} is not a directory)",
            wanted.display()
        )));
    }
    Ok(canon)
}

/// Create the per-sandbox directories; a missing upper layer is made
/// fresh (with the host-root masks) or from `layer_tar`.
pub(crate) async fn prepare_dirs(
    cfg: &ProcessConfig,
    spec: &SandboxSpec,
    layer_tar: Option<PathBuf>,
) -> Result<()> {
    let lower = lower(cfg, spec)?;
    let dir = spec.dir.clone();
    let disk_mb = spec.manifest.resources.disk_mb;
    let lr = layer_root(spec);
    blocking(move || {
        for d in ["root", "run"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        if disk_mb > 0 {
            disk::ensure(&dir, disk_mb)?;
        }
        std::fs::create_dir_all(lr.join("work"))?;
        let upper = lr.join("upper");
        if let Some(tar) = layer_tar {
            let tmp = lr.join("upper.restore");
            let _ = std::fs::remove_dir_all(&tmp);
            // On a quota filesystem the old layer goes first, or a nearly
            // full one could not be extracted next to itself (the tar
            // is the newer, complete copy).
            if disk_mb > 0 && upper.exists() {
                std::fs::remove_dir_all(&upper)?;
            }
            std::fs::create_dir_all(&tmp)?;
            layer::extract_tar(&tar, &tmp)?;
            if upper.exists() {
                std::fs::remove_dir_all(&upper)?;
            }
            std::fs::rename(&tmp, &upper)?;
            // A stale overlay work dir must not meet a new upper dir.
            let _ = std::fs::remove_dir_all(lr.join("work"));
            std::fs::create_dir_all(lr.join("work"))?;
        } else if !upper.exists() {
            let tmp = lr.join("upper.new");
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&tmp)?;
            if lower == Path::new("/") {
                mask_host_root(&tmp)?;
            }
            std::fs::rename(&tmp, &upper)?;
        }
        Ok(())
    })
    .await
}

/// Write the upper layer `upper` as `out/fs.tar`.
pub(crate) async fn tar_upper(upper: PathBuf, out: &Path) -> Result<Vec<Artifact>> {
    let dest = out.join(FS_TAR);
    let size = blocking(move || layer::write_tar(&upper, &dest)).await?;
    Ok(vec![Artifact {
        name: FS_TAR.to_string(),
        kind: ArtifactKind::FsLayer,
        size,
        block: None,
    }])
}

/// Mask every top-level entry of the host's `/` outside [`HOST_ROOT_ALLOW`]
/// in a fresh upper dir: directories become opaque empty directories (so
/// /tmp, /root, /home, /proc, /dev mount points exist but show nothing of
/// the host), other entries become whiteouts.
fn mask_host_root(upper: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for e in std::fs::read_dir("/")? {
        let e = e?;
        let name = e.file_name();
        let n = name.to_string_lossy();
        if HOST_ROOT_ALLOW.contains(&n.as_ref()) {
            continue;
        }
        let p = upper.join(&name);
        let md = std::fs::symlink_metadata(e.path())?;
        if md.is_dir() {
            let mode = match n.as_ref() {
                "tmp" => 0o1777,
                "root" => 0o700,
                _ => 0o755,
            };
            opaque_dir(&p, std::fs::Permissions::from_mode(mode))?;
        } else {
            whiteout(&p)?;
        }
    }
    for m in HOST_ROOT_MASK {
        let host = Path::new("/").join(m);
        let Ok(md) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        // Parents in the upper layer must carry the lower's owner and mode:
        // a merged directory takes its attributes from the upper one.
        let mut rel = PathBuf::new();
        let comps: Vec<_> = Path::new(m).components().collect();
        for comp in &comps[..comps.len() - 1] {
            rel.push(comp);
            let (u, h) = (upper.join(&rel), Path::new("/").join(&rel));
            if !u.exists() {
                let hm = std::fs::metadata(&h)?;
                std::fs::create_dir(&u)?;
                std::fs::set_permissions(&u, hm.permissions())?;
                std::os::unix::fs::lchown(&u, Some(hm.uid()), Some(hm.gid()))?;
            }
        }
        let p = upper.join(m);
        if md.is_dir() {
            opaque_dir(&p, md.permissions())?;
        } else {
            whiteout(&p)?;
        }
    }
    Ok(())
}

/// An empty overlayfs opaque directory at `p` (hides the lower's content).
fn opaque_dir(p: &Path, perm: std::fs::Permissions) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    std::fs::create_dir(p)?;
    std::fs::set_permissions(p, perm)?;
    let k = c"trusted.overlay.opaque";
    if unsafe { libc::lsetxattr(c.as_ptr(), k.as_ptr(), b"y".as_ptr() as *const _, 1, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// An overlayfs whiteout at `p` (a 0/0 character device: hides the lower's entry).
fn whiteout(p: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::{Manifest, SandboxId};

    fn spec(image: Option<&str>, disk_mb: u64) -> SandboxSpec {
        let mut manifest = Manifest {
            image: image.map(str::to_string),
            ..Default::default()
        };
        manifest.resources.disk_mb = disk_mb;
        SandboxSpec {
            id: SandboxId::generate(),
            manifest,
            dir: PathBuf::from("/data/sandboxes/sb"),
        }
    }

    fn images(dir: &Path) -> ProcessConfig {
        ProcessConfig {
            images_dir: Some(dir.to_path_buf()),
            userns: None,
            ..Default::default()
        }
    }

    #[test]
    fn the_writable_layer_lives_on_the_quota_disk_only_with_one() {
        let s = spec(None, 0);
        assert_eq!(layer_root(&s), s.dir);
        let s = spec(None, 64);
        assert_eq!(layer_root(&s), disk::mount_point(&s.dir));
    }

    #[test]
    fn without_an_image_the_lower_layer_is_the_host_root() {
        let cfg = ProcessConfig::default();
        assert_eq!(lower(&cfg, &spec(None, 0)).unwrap(), PathBuf::from("/"));
    }

    #[test]
    fn an_image_resolves_to_its_rootfs_inside_the_images_dir() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("alpine/rootfs")).unwrap();
        let got = lower(&images(tmp.path()), &spec(Some("alpine"), 0)).unwrap();
        assert_eq!(
            got,
            tmp.path().join("alpine/rootfs").canonicalize().unwrap()
        );
    }

    #[test]
    fn an_image_is_refused_without_an_images_dir_or_when_missing() {
        let cfg = ProcessConfig {
            images_dir: None,
            ..Default::default()
        };
        let e = lower(&cfg, &spec(Some("alpine"), 0)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidManifest);
        let tmp = tempfile::tempdir().unwrap();
        let e = lower(&images(tmp.path()), &spec(Some("nope"), 0)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidManifest);
        assert!(
            e.message.contains("not a registered image"),
            "{}",
            e.message
        );
    }

    #[test]
    fn an_image_symlinked_out_of_the_images_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (imgs, outside) = (tmp.path().join("images"), tmp.path().join("outside"));
        std::fs::create_dir_all(outside.join("rootfs")).unwrap();
        std::fs::create_dir_all(&imgs).unwrap();
        std::os::unix::fs::symlink(&outside, imgs.join("evil")).unwrap();
        let e = lower(&images(&imgs), &spec(Some("evil"), 0)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidManifest);
        assert!(e.message.contains("leads out"), "{}", e.message);
    }
}
