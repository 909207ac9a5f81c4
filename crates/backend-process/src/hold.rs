//! How long a paused sandbox's frozen processes stay on the host.
//!
//! A memory pause freezes the sandbox's cgroup: its processes stop but keep
//! their memory, its supervisor and PID 1 stay, and a resume thaws them
//! mid-instruction. Nothing can carry those processes anywhere else: the
//! store holds only the writable layer (`fs.tar`), because no checkpointer
//! works here (Debian bookworm's CRIU 3.17 cannot start on the hosts' 6.x
//! kernels: `vdso: Unexpected rt vDSO area bounds`). So the frozen
//! processes are the whole of the memory, and they cost the host RAM and
//! processes for as long as they are held.
//!
//! Each frozen sandbox therefore gets a hold: the backend's `frozen_window`
//! (the node's `--frozen-secs`), or the sandbox's standby window when the
//! server gave a longer one, or no end at all when its manifest asks
//! `lifecycle.keep_frozen`. [`housekeeping`] ends the processes of every
//! sandbox whose hold is over: its supervisor, PID 1 and every process exit,
//! its cgroups go, and the pause becomes a filesystem-only pause (the
//! server records the loss; see `Backend::memory_survives_release`). A
//! resume then starts the sandbox afresh from its files.

use std::time::Duration;

use stasis_backend::Standby;
use stasis_core::{now_ms, SandboxId};

use crate::sandbox::{Hold, ProcessBackend, Run};
use crate::start;

/// The sandbox was frozen just now: hold it for the longer of `window`
/// (its standby window, when the server gave one) and the backend's
/// `frozen_window`, or for good when its manifest keeps it frozen.
pub(crate) fn start(
    be: &ProcessBackend,
    id: &SandboxId,
    keep_frozen: bool,
    window: Option<Duration>,
) {
    let now = now_ms();
    let window = window.unwrap_or_default().max(be.cfg.frozen_window);
    let until_ms =
        (!keep_frozen).then(|| now.saturating_add(window.as_millis().min(i64::MAX as u128) as i64));
    be.holds.insert(
        id,
        Hold {
            since_ms: now,
            until_ms,
        },
    );
}

/// What a hold shows as the sandbox's standby: the RAM its frozen processes
/// hold (their cgroup's charge) and its window (`until_ms` is
/// `i64::MAX` for a sandbox kept frozen).
pub(crate) fn standby(be: &ProcessBackend, id: &SandboxId) -> Option<Standby> {
    let hold = be.holds.get(id)?;
    let sb = be.get(id).ok()?;
    let (_, ram_bytes, _) = sb.cg.usage();
    Some(Standby {
        ram_bytes,
        since_ms: hold.since_ms,
        until_ms: hold.until_ms.unwrap_or(i64::MAX),
    })
}

/// End the frozen processes of `id` now (the server evicts it). True if
/// it had frozen processes to end.
pub(crate) async fn release(be: &ProcessBackend, id: &SandboxId) -> stasis_core::Result<bool> {
    end(be, id, None).await
}

/// End the frozen processes of `id` if its hold is over at `due_at`
/// (None: whatever its hold). Decided under the sandbox's run lock, which
/// a resume (that thaws it and drops the hold) and a pause (that starts a
/// new one) also take.
async fn end(
    be: &ProcessBackend,
    id: &SandboxId,
    due_at: Option<i64>,
) -> stasis_core::Result<bool> {
    let Ok(sb) = be.get(id) else {
        be.holds.remove(id);
        return Ok(false);
    };
    let mut run = sb.run.lock().await;
    if let Some(now) = due_at {
        let over = be
            .holds
            .get(id)
            .is_some_and(|h| h.until_ms.is_some_and(|u| u <= now));
        if !over {
            return Ok(false);
        }
    }
    be.holds.remove(id);
    if !matches!(&*run, Run::Running { frozen: true, .. }) {
        return Ok(false);
    }
    start::stop(be, &sb, &mut run).await?;
    Ok(true)
}

/// End every hold that is over. Returns the sandboxes whose processes ended.
pub(crate) async fn housekeeping(be: &ProcessBackend) -> Vec<SandboxId> {
    let now = now_ms();
    let due: Vec<SandboxId> = be
        .holds
        .all()
        .into_iter()
        .filter(|(_, h)| h.until_ms.is_some_and(|u| u <= now))
        .map(|(id, _)| id)
        .collect();
    let mut ended = Vec::new();
    for id in due {
        match end(be, &id, Some(now)).await {
            Ok(true) => {
                tracing::info!(sandbox = %id, "frozen window over: its processes ended, its files are kept");
                ended.push(id);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(sandbox = %id, "ending the frozen processes: {}", e.message),
        }
    }
    ended
}
