//! The file API beyond whole-file reads and writes: create-exclusive
//! writes, ranged reads, stat / exists / remove / mkdir / rename, and
//! watching a directory. Each is a use of the running sandbox (a paused one
//! is resumed first) like any other request; a watch holds the sandbox only
//! while it is set up, and ends when the sandbox pauses.

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

    fn check_size(&self, n: u64) -> Result<()> {
        let max = self.cfg.max_file_bytes;
        if n > max {
            return Err(Error::new(
                ErrorCode::PayloadTooLarge,
                format!("{n} bytes exceed the file limit of {max}"),
            ));
        }
        Ok(())
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

    /// Remove, mkdir or rename (a stat goes through [`Manager::stat`]).
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
