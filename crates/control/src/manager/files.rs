//! The file API beyond whole-file reads and writes: create-exclusive
//! writes, ranged reads, stat / exists / remove / mkdir / rename, and
//! watching a directory. Each is a use of the running sandbox (a paused one
//! is resumed first) like any other request; a watch holds the sandbox only
//! while it is set up, and ends when the sandbox pauses.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use stasis_core::{Error, ErrorCode, FileEvent, FileOp, FileStat, Result, SandboxId, WriteMode};

use super::{Ctx, Manager};
use crate::inflight::Permit;

impl Manager {
    /// A write; `CreateExclusive` answers `already_exists` for an existing path.
    pub async fn write_file_with(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        if how == WriteMode::Overwrite {
            return self.write_file(ctx, id, path, data, mode).await;
        }
        self.check_size(data.len() as u64)?;
        self.with_running(ctx, id, |b| async move {
            b.write_file_with(id, path, data, mode, how).await
        })
        .await
    }

    pub(crate) fn check_size(&self, n: u64) -> Result<()> {
        let max = self.cfg.max_file_bytes;
        if n > max {
            return Err(file_limit_error(&format!("{n} bytes exceed"), max));
        }
        Ok(())
    }

    /// Receive an upload into a transfer file of the daemon, a chunk at a
    /// time, never more than the file limit on disk and nothing of it held
    /// in memory. Over the limit, the rest of the body is still read (up to
    /// four times the limit) so the client gets the 413 rather than a reset
    /// connection, and the answer names the setting.
    pub async fn spool_upload<S, B, E>(&self, mut body: S) -> Result<Spooled>
    where
        S: futures::Stream<Item = std::result::Result<B, E>> + Unpin,
        B: AsRef<[u8]>,
        E: std::fmt::Display,
    {
        use futures::StreamExt;
        let limit = self.cfg.max_file_bytes;
        let drain_cap = limit.saturating_mul(4).max(64 * 1024 * 1024);
        let spooled = Spooled(self.transfer_path("upload").await?);
        let mut f = tokio::fs::File::create(&spooled.0).await?;
        let mut seen = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| Error::invalid(format!("reading the request body: {e}")))?;
            let chunk = chunk.as_ref();
            seen += chunk.len() as u64;
            if seen <= limit {
                f.write_all(chunk).await?;
            } else if seen > drain_cap {
                break;
            }
        }
        if seen > limit {
            return Err(file_limit_error("the upload exceeds", limit));
        }
        f.flush().await?;
        Ok(spooled)
    }

    /// Write an upload spooled by [`Manager::spool_upload`]: the backend
    /// copies it into the sandbox a piece at a time.
    pub async fn write_spooled(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
        src: &Spooled,
        mode: Option<u32>,
        how: WriteMode,
    ) -> Result<()> {
        let len = tokio::fs::metadata(&src.0).await?.len();
        self.check_size(len)?;
        let src = src.0.as_path();
        self.with_running(ctx, id, |b| async move {
            b.write_file_from(id, path, src, mode, how).await
        })
        .await
    }

    /// `len` bytes from `offset` (fewer at the end) and the file's size;
    /// `len` at most the configured file limit.
    pub async fn read_range(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
        offset: u64,
        len: u64,
    ) -> Result<(Vec<u8>, u64)> {
        self.check_size(len)?;
        self.with_running(ctx, id, |b| async move {
            b.read_range(id, path, offset, len).await
        })
        .await
    }

    pub async fn stat(&self, ctx: &Ctx, id: &SandboxId, path: &str) -> Result<FileStat> {
        let op = FileOp::Stat { path: path.into() };
        let st = self
            .with_running(ctx, id, |b| async move { b.file_op(id, op).await })
            .await?;
        st.ok_or_else(|| Error::internal("stat answered nothing"))
    }

    /// Whether `path` exists (a dangling symlink does: it is an entry).
    pub async fn exists(&self, ctx: &Ctx, id: &SandboxId, path: &str) -> Result<bool> {
        match self.stat(ctx, id, path).await {
            Ok(_) => Ok(true),
            // The sandbox itself missing is an error, not `false`.
            Err(e) if e.code == ErrorCode::NotFound && !e.message.starts_with("sandbox ") => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Remove, mkdir, rename, chown or set_meta (a stat goes through
    /// [`Manager::stat`]).
    pub async fn file_op(&self, ctx: &Ctx, id: &SandboxId, op: FileOp) -> Result<()> {
        self.with_running(ctx, id, |b| async move { b.file_op(id, op).await })
            .await
            .map(|_| ())
    }

    /// Events for changes under the directory `path`, until the receiver is
    /// dropped or the sandbox stops running. The permit returned is a slot
    /// of the sandbox's in-flight limit held for as long as the watch is
    /// open: an open watch is a request in flight, so the sandbox does not
    /// idle-pause under it (its lifetime limit still applies).
    pub async fn watch(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
    ) -> Result<(mpsc::Receiver<FileEvent>, Permit)> {
        let hold = self.reserve(ctx, id).await?;
        let rx = self
            .with_running(ctx, id, |b| async move { b.watch(id, path).await })
            .await?;
        Ok((rx, hold))
    }
}

/// An upload received to a transfer file; the file is removed when this
/// is dropped.
#[derive(Debug)]
pub struct Spooled(PathBuf);

impl Spooled {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The refusal of a file over the limit `max`, naming the setting that
/// raises it. `what` says what exceeded it ("the upload exceeds").
pub fn file_limit_error(what: &str, max: u64) -> Error {
    let mib = max / (1024 * 1024);
    Error::new(
        ErrorCode::PayloadTooLarge,
        format!(
            "{what} the file limit of {mib} MiB ({max} bytes); the daemon's operator sets it \
             with `stasis serve --max-file-mb N`"
        ),
    )
}
