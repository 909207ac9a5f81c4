//! Stage directories: where a backend's artifacts wait between the backend
//! and the snapshot store. Every operation that moves a sandbox's state
//! through the store (pause, snapshot, checkpoint, resume, restore,
//! takeover) prepares a stage, lets the backend and the store work on it,
//! and removes it: [`staged`] is that one pattern.

use std::future::Future;
use std::path::Path;

use stasis_core::{Error, Result};

/// How a stage is made ready before the work on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prep {
    /// Made afresh by the daemon (see `fresh_stage`); a failure to make it
    /// is the operation's error and the work does not run.
    Fresh,
    /// Whatever an earlier attempt left is removed; the work makes it.
    Clear,
    /// Nothing: the work makes it in a directory that was just created.
    AsIs,
}

/// When the stage is removed after the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cleanup {
    /// Whatever the outcome.
    Always,
    /// Only when the work succeeded: a failed pause leaves its stage to the
    /// settling of the interrupted pause, which may still upload it.
    OnSuccess,
}

/// Prepare `stage`, run `work` (which writes and reads it: the backend's
/// artifacts into the store, or a stored snapshot into the backend), then
/// remove the stage as `cleanup` says. `work` is not polled before the
/// stage is ready.
pub(super) async fn staged<T>(
    stage: &Path,
    prep: Prep,
    cleanup: Cleanup,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    match prep {
        Prep::Fresh => fresh_stage(stage).await?,
        Prep::Clear => {
            let _ = tokio::fs::remove_dir_all(stage).await;
        }
        Prep::AsIs => {}
    }
    let r = work.await;
    if r.is_ok() || cleanup == Cleanup::Always {
        let _ = tokio::fs::remove_dir_all(stage).await;
    }
    r
}

/// A stage directory in the sandbox directory, which a jailed QEMU may write
/// too: cleared without following what it finds, made by `mkdir`, checked
/// to be the daemon's own directory (see `stasis_backend::fsafe`).
async fn fresh_stage(stage: &Path) -> Result<()> {
    let s = stage.to_path_buf();
    tokio::task::spawn_blocking(move || stasis_backend::fsafe::fresh_dir(&s))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}

#[cfg(test)]
mod tests;
