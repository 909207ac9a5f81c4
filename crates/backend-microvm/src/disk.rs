//! The qcow2 disk chain of a sandbox: a fresh overlay on the image's
//! `rootfs.qcow2`; on resume/restore the artifact's disk hard-linked as
//! `base.qcow2` under a new empty overlay; on pause/snapshot the chain
//! flattened back into one overlay on the image. Every disk a jailed QEMU
//! wrote is checked (`trust`) before root reads or keeps it.

use std::path::Path;
use std::time::Duration;

use stasis_core::{Error, Result};

use crate::qemu;
use crate::snapshot::DISK_ARTIFACT;
use crate::util;
use crate::{jail, trust};
use stasis_backend::failpoint;

/// The longest a `qemu-img` run may take (a commit of a large overlay on a
/// loaded host takes seconds to minutes); then it is killed.
pub(crate) const QEMU_IMG_TIMEOUT: Duration = Duration::from_secs(900);

/// Run `qemu-img` in `cwd`; its stderr is the error. Bounded by
/// [`QEMU_IMG_TIMEOUT`] (the child is killed when the wait is dropped).
pub(crate) async fn qemu_img(bin: &Path, cwd: &Path, args: &[&str]) -> Result<()> {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(args).current_dir(cwd);
    let what = format!("qemu-img {}", args.join(" "));
    let out = util::output_bounded(cmd, QEMU_IMG_TIMEOUT, &what).await?;
    if !out.status.success() {
        return Err(Error::backend(format!(
            "qemu-img {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// A disk a jailed QEMU wrote (or an artifact made of one) is used only
/// when its header names no external data file and exactly the backing
/// file the daemon gave it: both the daemon's own reading of the header
/// and `qemu-img info`'s must agree (`trust`).
pub(crate) async fn check_disk(img_bin: &Path, disk: &Path, backing: &Path) -> Result<()> {
    trust::check_disk(disk, backing)?;
    trust::check_disk_qemu_img(img_bin, disk, backing).await
}

/// Put the disk of an artifact directory under `dir`: `base.qcow2` (a hard
/// link when possible) plus a fresh overlay `disk.qcow2` on it. The
/// artifact must be an overlay on exactly `rootfs`.
pub(crate) async fn import_disk(
    img_bin: &Path,
    artifacts: &Path,
    dir: &Path,
    rootfs: &Path,
) -> Result<()> {
    let src = artifacts.join(DISK_ARTIFACT);
    if !src.is_file() {
        return Err(Error::not_found(format!("{}", src.display())));
    }
    check_disk(img_bin, &src, rootfs).await?;
    util::link_or_copy(&src, &dir.join(qemu::BASE_DISK))?;
    let _ = std::fs::remove_file(dir.join(qemu::DISK));
    qemu_img(
        img_bin,
        dir,
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            qemu::BASE_DISK,
            "-F",
            "qcow2",
            qemu::DISK,
        ],
    )
    .await
}

/// How [`export_disk`] puts a sandbox's disk into an artifact directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Export {
    /// The guest is stopped for good or held stopped (a pause): a lone
    /// overlay is hard-linked, nothing copied; the sandbox keeps its disk
    /// for a local resume. The link stays the QEMU's file (a QEMU held in
    /// standby may continue on it); whoever uses the artifact later checks
    /// its header again (`import_disk`).
    Link,
    /// The guest runs on afterwards (a snapshot): the disk is copied, and
    /// the copy becomes the daemon's.
    Copy,
}

/// Write the sandbox's disk as one overlay on the image (`rootfs`) into
/// `out`; the sandbox's own disk files are left as they are. The disk was
/// written by the jailed QEMU: every layer is checked (`check_disk`) before
/// root hands it to `qemu-img` or keeps it as an artifact; a disk that
/// fails is left where it was.
pub(crate) async fn export_disk(
    img_bin: &Path,
    dir: &Path,
    out: &Path,
    how: Export,
    rootfs: &Path,
) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dst = out.join(DISK_ARTIFACT);
    let base = dir.join(qemu::BASE_DISK);
    let disk = dir.join(qemu::DISK);
    // base.qcow2 is the daemon's (root's, made by `import_disk`); a
    // name the QEMU created is no base.
    let has_base = match std::fs::symlink_metadata(&base) {
        Ok(md) if md.file_type().is_file() && md.uid() == 0 => true,
        Ok(_) => {
            return Err(Error::integrity(format!(
                "{} is not the daemon's file: refusing to export the disk",
                base.display()
            )))
        }
        Err(_) => false,
    };
    if !has_base {
        check_disk(img_bin, &disk, rootfs).await?;
        if how == Export::Link {
            let f = trust::open_regular(&disk)?;
            return crate::util::link_open_file(&f, &dst);
        }
        let (d, o) = (disk.clone(), dst.clone());
        tokio::task::spawn_blocking(move || std::fs::copy(d, o))
            .await
            .map_err(|e| Error::internal(e.to_string()))??;
        jail::disown(&dst)?;
        // What is kept is checked again (a QEMU that still runs may
        // have rewritten the header between the check and the copy).
        if let Err(e) = check_disk(img_bin, &dst, rootfs).await {
            let _ = std::fs::remove_file(&dst);
            return Err(e);
        }
        return Ok(());
    }
    // Flatten overlay -> base -> image into a single overlay on the image:
    // copy base (it may be a hard link to someone else's artifact) and the
    // top (the sandbox keeps its own), then commit the top into the copy.
    let tmp_base = out.join(".base.qcow2");
    let tmp_top = out.join(".top.qcow2");
    let (b, tb, d, tt) = (
        base.clone(),
        tmp_base.clone(),
        disk.clone(),
        tmp_top.clone(),
    );
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::copy(b, tb)?;
        std::fs::copy(d, tt)?;
        Ok(())
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))??;
    failpoint::hit("pause.disk-top-copied");
    let r = async {
        // Both layers as root will read them: the base on the image, the
        // top on the base (`import_disk` made it so), neither with an
        // external data file. The rebase then forces the top onto the
        // copy of the base.
        check_disk(img_bin, &tmp_base, rootfs).await?;
        // The top names `base.qcow2` (`import_disk`), or `.base.qcow2`
        // when a flatten interrupted after its rebase is redone
        // (`finish_pause`): both are the daemon's names, and the rebase
        // below forces it onto the checked copy either way.
        let redone = trust::qcow2_refs(&tmp_top)?
            .and_then(|r| r.backing)
            .is_some_and(|b| b == Path::new(".base.qcow2"));
        let top_backing = if redone {
            ".base.qcow2"
        } else {
            qemu::BASE_DISK
        };
        check_disk(img_bin, &tmp_top, Path::new(top_backing)).await?;
        qemu_img(
            img_bin,
            out,
            &[
                "rebase",
                "-u",
                "-b",
                ".base.qcow2",
                "-F",
                "qcow2",
                ".top.qcow2",
            ],
        )
        .await?;
        // -d: the top keeps its data, so a flatten interrupted at any
        // point can be redone from the files left (see `pause_leftovers`).
        qemu_img(img_bin, out, &["commit", "-q", "-d", ".top.qcow2"]).await?;
        failpoint::hit("pause.disk-committed");
        std::fs::rename(&tmp_base, &dst)?;
        Ok(())
    }
    .await;
    let _ = std::fs::remove_file(&tmp_top);
    let _ = std::fs::remove_file(&tmp_base);
    r
}
