//! A microVM guest image made from an image's root directory: an ext4 root
//! disk (`mkfs.ext4 -d ROOT` on a raw file, then `qemu-img convert -O
//! qcow2`) beside the default guest image's kernel and initrd (the stasis
//! agent lives in the initrd, whose `/init` only needs `/bin/sh` on the
//! root disk before it switches root). Built once per image into
//! `images/<id>/guest/` (staged, then renamed) and reused. The root
//! filesystem is made with room to spare (twice the image plus 128 MiB, at
//! least 1 GiB, sparse) since the image need not carry `resize2fs` to grow
//! it in the guest.

use crate::owned;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use stasis_core::{Error, Result};

use stasis_fsroot::{Dir, Resolve};

use crate::layer::unique_suffix;
use crate::store::Image;

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .map_err(|e| Error::internal(format!("{what}: {e} (is it installed?)")))?;
    if !out.status.success() {
        return Err(Error::internal(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The guest image directory of `image` (`vmlinux`, `initrd.img`,
/// `rootfs.qcow2`, `image.json`), built from `default_guest`'s kernel and
/// initrd when missing.
pub fn ensure_guest(image: &Image, default_guest: &Path) -> Result<PathBuf> {
    let dir = image.dir.join("guest");
    if owned::is_file(dir.join("rootfs.qcow2")) {
        return Ok(dir);
    }
    // Looked up as the guest will see it: inside the image's root.
    let sh = Dir::open(&image.rootfs, Resolve::InRoot).and_then(|r| r.lstat(Path::new("bin/sh")));
    if sh.is_err() {
        return Err(Error::invalid(format!(
            "image {} has no /bin/sh, which the microVM's init needs on its root disk",
            image.record.id
        ))
        .with_field("image"));
    }
    let staging = image.dir.join(format!(".guest-{}", unique_suffix()));
    owned::create_dir_all(&staging)?;
    let r = build_into(image, default_guest, &staging);
    if r.is_err() {
        let _ = owned::remove_dir_all(&staging);
        return r.map(|_| dir);
    }
    if owned::rename(&staging, &dir).is_err() {
        // Built concurrently by someone else: keep theirs.
        let _ = owned::remove_dir_all(&staging);
    }
    Ok(dir)
}

fn build_into(image: &Image, default_guest: &Path, staging: &Path) -> Result<()> {
    // Not grown later (the image need not have resize2fs): room to spare,
    // at least 1 GiB, sparse on disk.
    let used = image
        .record
        .rootfs_bytes
        .max(crate::store::tree_bytes(&image.rootfs))
        >> 20;
    let mb = (used * 2 + 128).max(1024);
    let raw = staging.join("rootfs.raw");
    run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "stasis-root", "-d"])
            .arg(&image.rootfs)
            .arg(&raw)
            .arg(format!("{mb}M")),
        "mkfs.ext4",
    )?;
    run(
        Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(&raw)
            .arg(staging.join("rootfs.qcow2")),
        "qemu-img convert",
    )?;
    owned::remove_file(&raw)?;
    for f in ["vmlinux", "initrd.img"] {
        let src = default_guest.join(f);
        if owned::hard_link(&src, staging.join(f)).is_err() {
            owned::copy(&src, staging.join(f))
                .map_err(|e| Error::internal(format!("{}: {e}", src.display())))?;
        }
    }
    // The kernel command lines and the kernel's identity come from the
    // default guest; the root disk is identified by the image id.
    let def: serde_json::Value = owned::read(default_guest.join("image.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let meta = json!({
        "format": 1,
        "from_image": image.record.id,
        "kernel_cmdline": def.get("kernel_cmdline"),
        "kernel_cmdline_tcg": def.get("kernel_cmdline_tcg"),
        "files": {
            "vmlinux": def.pointer("/files/vmlinux").cloned().unwrap_or(json!({"blake3": "unknown"})),
            "rootfs.qcow2": {"blake3": image.record.id.hex()},
        }
    });
    owned::write(
        staging.join("image.json"),
        serde_json::to_vec_pretty(&meta)?,
    )?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
mod tests {
    use super::*;
    use crate::layer::{tests::file, tests::symlink, tests::tar_bytes, ApplyOptions};
    use crate::store::{ImageConfig, ImageStore, Owner};

    #[test]
    fn builds_a_bootable_layout_once_and_refuses_a_root_without_a_shell() {
        // e2fsprogs and qemu-utils come from scripts/setup.sh.
        let tmp = tempfile::tempdir().unwrap();
        let s = ImageStore::open(&tmp.path().join("store")).unwrap();
        let guest = tmp.path().join("default");
        owned::create_dir_all(&guest).unwrap();
        owned::write(guest.join("vmlinux"), b"kernel").unwrap();
        owned::write(guest.join("initrd.img"), b"initrd").unwrap();
        owned::write(
            guest.join("image.json"),
            br#"{"kernel_cmdline":"console=ttyS0","files":{"vmlinux":{"blake3":"k"}}}"#,
        )
        .unwrap();
        let l = tmp.path().join("l.tar");
        owned::write(
            &l,
            tar_bytes(&[
                file("bin/busybox", b"bb"),
                symlink("bin/sh", "busybox"),
                file("etc/motd", b"hi\n"),
            ]),
        )
        .unwrap();
        let l = s.put_layer(&l).unwrap();
        let img = s
            .commit(
                &Owner::Public,
                "g",
                "1",
                None,
                vec![l],
                ImageConfig::default(),
                vec![],
                &ApplyOptions::default(),
            )
            .unwrap();
        let dir = ensure_guest(&img, &guest).unwrap();
        for f in ["vmlinux", "initrd.img", "rootfs.qcow2", "image.json"] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let meta: serde_json::Value =
            serde_json::from_slice(&owned::read(dir.join("image.json")).unwrap()).unwrap();
        assert_eq!(meta["kernel_cmdline"], "console=ttyS0");
        assert_eq!(meta["files"]["rootfs.qcow2"]["blake3"], img.record.id.hex());
        // The disk holds the image's files.
        let raw = tmp.path().join("check.raw");
        run(
            Command::new("qemu-img")
                .args(["convert", "-O", "raw"])
                .arg(dir.join("rootfs.qcow2"))
                .arg(&raw),
            "qemu-img",
        )
        .unwrap();
        let out = Command::new("debugfs")
            .args(["-R", "cat /etc/motd"])
            .arg(&raw)
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"hi\n");
        let _ = owned::remove_file(&raw);
        // Built once: a second call reuses it.
        let m1 = owned::metadata(dir.join("rootfs.qcow2"))
            .unwrap()
            .modified()
            .unwrap();
        ensure_guest(&img, &guest).unwrap();
        assert_eq!(
            owned::metadata(dir.join("rootfs.qcow2"))
                .unwrap()
                .modified()
                .unwrap(),
            m1
        );
        // No shell: refused, nothing left behind.
        let l2 = tmp.path().join("l2.tar");
        owned::write(&l2, tar_bytes(&[file("etc/only", b"x")])).unwrap();
        let l2 = s.put_layer(&l2).unwrap();
        let img2 = s
            .commit(
                &Owner::Public,
                "noshell",
                "1",
                None,
                vec![l2],
                ImageConfig::default(),
                vec![],
                &ApplyOptions::default(),
            )
            .unwrap();
        let e = ensure_guest(&img2, &guest).unwrap_err();
        assert!(e.message.contains("/bin/sh"), "{}", e.message);
        assert!(!img2.dir.join("guest").exists());
    }
}
