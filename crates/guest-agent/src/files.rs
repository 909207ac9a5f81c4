//! File requests: write (parents created), chunked read, directory listing.

use crate::AgentError;
use stasis_core::{FileEntry, FileKind};
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Largest chunk one ReadFile returns (base64 of it fits in a frame).
pub const READ_CHUNK_LIMIT: u64 = 8 * 1024 * 1024;

fn check_path(path: &str) -> Result<&Path, AgentError> {
    if path.is_empty() || !path.starts_with('/') {
        return Err(AgentError::invalid(format!(
            "path must be absolute: {path:?}"
        )));
    }
    if path.contains('\0') {
        return Err(AgentError::invalid("path contains NUL"));
    }
    Ok(Path::new(path))
}

pub fn write(path: &str, data: &[u8], append: bool, mode: Option<u32>) -> Result<(), AgentError> {
    let p = check_path(path)?;
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent).map_err(|e| AgentError::io(parent, e))?;
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .truncate(!append)
        .mode(mode.unwrap_or(0o644))
        .open(p)
        .map_err(|e| AgentError::io(p, e))?;
    f.write_all(data).map_err(|e| AgentError::io(p, e))?;
    if let Some(m) = mode {
        f.set_permissions(fs::Permissions::from_mode(m & 0o7777))
            .map_err(|e| AgentError::io(p, e))?;
    }
    Ok(())
}

/// Returns (data, total size).
pub fn read(path: &str, offset: u64, limit: u64) -> Result<(Vec<u8>, u64), AgentError> {
    let p = check_path(path)?;
    let mut f = fs::File::open(p).map_err(|e| AgentError::io(p, e))?;
    let md = f.metadata().map_err(|e| AgentError::io(p, e))?;
    if md.is_dir() {
        return Err(AgentError::invalid(format!("{path} is a directory")));
    }
    let size = md.len();
    let limit = limit.min(READ_CHUNK_LIMIT);
    let mut data = Vec::new();
    // Read even when the size says there is nothing: /proc and /sys files report 0.
    if limit > 0 {
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| AgentError::io(p, e))?;
        f.take(limit)
            .read_to_end(&mut data)
            .map_err(|e| AgentError::io(p, e))?;
    }
    Ok((data, size))
}

pub fn list(path: &str) -> Result<Vec<FileEntry>, AgentError> {
    let p = check_path(path)?;
    let rd = fs::read_dir(p).map_err(|e| AgentError::io(p, e))?;
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| AgentError::io(p, e))?;
        let Ok(md) = e.path().symlink_metadata() else {
            continue; // raced with a delete
        };
        let ft = md.file_type();
        out.push(FileEntry {
            name: e.file_name().to_string_lossy().into_owned(),
            kind: if ft.is_symlink() {
                FileKind::Symlink
            } else if ft.is_dir() {
                FileKind::Dir
            } else if ft.is_file() {
                FileKind::File
            } else {
                FileKind::Other
            },
            size: md.len(),
            mode: md.mode() & 0o7777,
            mtime: md.mtime(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}
