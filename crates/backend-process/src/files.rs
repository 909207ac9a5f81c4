//! The file API on a running sandbox's root (through its PID 1's root, never
//! a host path), and collecting its output directories.

use std::path::Path;

use stasis_core::{Error, FileEntry, Result};

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

pub(crate) async fn read_file(sb: &Sandbox, path: &str, limit: u64) -> Result<Vec<u8>> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    tokio::task::spawn_blocking(move || fsops::Root::of_pid(pid)?.read_file(&p, limit))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}

pub(crate) async fn list_files(sb: &Sandbox, path: &str) -> Result<Vec<FileEntry>> {
    let p = fsops::normalize(sb.workdir(), path)?;
    let pid = sb.pid().await?;
    tokio::task::spawn_blocking(move || fsops::Root::of_pid(pid)?.list(&p))
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
