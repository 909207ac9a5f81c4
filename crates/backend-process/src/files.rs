//! The file API on a running sandbox's root (through its PID 1's root, never
//! a host path), and collecting its output directories.

use std::path::Path;

use stasis_core::{Error, FileEntry, FileEvent, FileOp, FileStat, Result, WriteMode};

use crate::fileops::MountHolders;
use crate::sandbox::Sandbox;
use crate::{fsops, outputs, userns};

pub(crate) async fn write_file(
    sb: &Sandbox,
    path: &str,
    data: &[u8],
    mode: Option<u32>,
) -> Result<()> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    let data = data.to_vec();
    // Files are created as the sandbox's root (its host uid), so the
    // sandbox owns and can change what the file API writes.
    tokio::task::spawn_blocking(move || {
        userns::as_sandbox_root(pid, || {
            fsops::Root::of_pid(pid)?.write_file(&p, &data, mode)
        })
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
}

/// A write that may be create-exclusive (see [`WriteMode`]).
pub(crate) async fn write_file_with(
    sb: &Sandbox,
    path: &str,
    data: &[u8],
    mode: Option<u32>,
    how: WriteMode,
) -> Result<()> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    let data = data.to_vec();
    let excl = how == WriteMode::CreateExclusive;
    tokio::task::spawn_blocking(move || {
        userns::as_sandbox_root(pid, || {
            fsops::Root::of_pid(pid)?.write_file_with(&p, &data, mode, excl)
        })
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
}

/// A write copied from the daemon's file `src` a piece at a time (see
/// [`fsops::Root::write_from`]), as the sandbox's root.
pub(crate) async fn write_file_from(
    sb: &Sandbox,
    path: &str,
    src: &Path,
    mode: Option<u32>,
    how: WriteMode,
) -> Result<()> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    // Opened as the daemon: the spool file is not the sandbox's to read.
    let mut src = std::fs::File::open(src)
        .map_err(|e| Error::internal(format!("opening the upload: {e}")))?;
    let excl = how == WriteMode::CreateExclusive;
    tokio::task::spawn_blocking(move || {
        userns::as_sandbox_root(pid, || {
            fsops::Root::of_pid(pid)?.write_from(&p, &mut src, mode, excl)
        })
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
    .map(|_| ())
}

/// Stat, remove, mkdir, rename, chown, set_meta (see [`crate::fileops`]),
/// as the sandbox's root. Owners are ids as seen inside the sandbox, translated
/// through its user namespace's maps.
pub(crate) async fn file_op(sb: &Sandbox, op: FileOp) -> Result<Option<FileStat>> {
    let w = sb.workdir();
    let op = match op {
        FileOp::Stat { path } => FileOp::Stat {
            path: fsops::normalize(w, &path)?,
        },
        FileOp::Remove { path, recursive } => FileOp::Remove {
            path: fsops::normalize(w, &path)?,
            recursive,
        },
        FileOp::Mkdir { path, parents } => FileOp::Mkdir {
            path: fsops::normalize(w, &path)?,
            parents,
        },
        FileOp::Rename { from, to } => FileOp::Rename {
            from: fsops::normalize(w, &from)?,
            to: fsops::normalize(w, &to)?,
        },
        FileOp::Chown { path, uid, gid } => FileOp::Chown {
            path: fsops::normalize(w, &path)?,
            uid,
            gid,
        },
        FileOp::SetMeta { path, meta } => FileOp::SetMeta {
            path: fsops::normalize(w, &path)?,
            meta,
        },
    };
    let pid = sb.pid().await?;
    tokio::task::spawn_blocking(move || {
        // The sandbox's own list of mounts (paths as it sees them), read
        // as the daemon before acting as the sandbox's root.
        let held = || -> Result<MountHolders> {
            std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                .map(|t| MountHolders::from_mountinfo(&t))
                .map_err(|e| Error::backend(format!("reading the sandbox's mounts: {e}")))
        };
        let held = match &op {
            FileOp::Remove { .. } | FileOp::Rename { .. } => held()?,
            _ => MountHolders::default(),
        };
        let owners = match &op {
            FileOp::Stat { .. } | FileOp::Chown { .. } => Some(userns::Owners::of_pid(pid)?),
            _ => None,
        };
        let owners = owners.as_ref();
        userns::as_sandbox_root(pid, || {
            let r = fsops::Root::of_pid(pid)?;
            match op {
                FileOp::Stat { path } => {
                    let mut st = r.stat(&path)?;
                    if let Some(o) = owners {
                        (st.uid, st.gid) = inside(o, st.uid, st.gid);
                    }
                    Ok(Some(st))
                }
                FileOp::Chown { path, uid, gid } => {
                    let (u, g) = owners.map_or(Ok((uid, gid)), |o| o.host(uid, gid))?;
                    r.chown(&path, u, g).map(|_| None)
                }
                FileOp::Remove { path, recursive } => {
                    r.remove(&path, recursive, &held).map(|_| None)
                }
                FileOp::Mkdir { path, parents } => r.mkdir(&path, parents).map(|_| None),
                FileOp::Rename { from, to } => r.rename(&from, &to, &held).map(|_| None),
                FileOp::SetMeta { path, meta } => r.set_meta(&path, &meta).map(|_| None),
            }
        })
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
}

pub(crate) async fn read_range(
    sb: &Sandbox,
    path: &str,
    offset: u64,
    len: u64,
) -> Result<(Vec<u8>, u64)> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    tokio::task::spawn_blocking(move || fsops::Root::of_pid(pid)?.read_range(&p, offset, len))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}

pub(crate) async fn watch(
    sb: &Sandbox,
    path: &str,
) -> Result<tokio::sync::mpsc::Receiver<FileEvent>> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    tokio::task::spawn_blocking(move || crate::watch::start(fsops::Root::of_pid(pid)?, &p))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}

pub(crate) async fn read_file(sb: &Sandbox, path: &str, limit: u64) -> Result<Vec<u8>> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    tokio::task::spawn_blocking(move || fsops::Root::of_pid(pid)?.read_file(&p, limit))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}

/// Host ids as the sandbox sees them.
fn inside(o: &userns::Owners, uid: Option<u32>, gid: Option<u32>) -> (Option<u32>, Option<u32>) {
    (uid.map(|u| o.uids.inside(u)), gid.map(|g| o.gids.inside(g)))
}

pub(crate) async fn list_files(sb: &Sandbox, path: &str) -> Result<Vec<FileEntry>> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    tokio::task::spawn_blocking(move || {
        let owners = userns::Owners::of_pid(pid)?;
        let mut out = fsops::Root::of_pid(pid)?.list(&p)?;
        for e in &mut out {
            (e.uid, e.gid) = inside(&owners, e.uid, e.gid);
        }
        Ok(out)
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
}

/// Read from the sandbox's root even while it is paused (frozen): no
/// resume needed. A sandbox whose processes are gone (filesystem-only
/// pause, daemon restart) answers `invalid_state`; the server resumes it.
pub(crate) async fn collect_outputs(sb: &Sandbox, out: &Path) -> Result<u64> {
    let pid = sb.root_pid().await?;
    let outs = sb.spec.manifest.outputs.clone();
    let out = out.to_path_buf();
    tokio::task::spawn_blocking(move || outputs::collect(&fsops::Root::of_pid(pid)?, &outs, &out))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}
