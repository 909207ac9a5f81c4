//! Standby in the fake: a paused sandbox whose "compute" (its in-memory
//! state, processes included) is kept until it resumes, its window passes
//! or it is released, mirroring the microVM backend's standby.

use std::path::Path;
use std::time::Duration;

use super::{FakeSandbox, State};
use crate::{SandboxSpec, Standby};
use stasis_core::{now_ms, SandboxId, SnapshotId};

/// RAM a held fake sandbox reports.
const HELD_BYTES: u64 = 1 << 20;

#[derive(Debug)]
pub(super) struct Held {
    sandbox: FakeSandbox,
    since_ms: i64,
    until_ms: i64,
    pub(super) snapshot: Option<SnapshotId>,
}

impl Held {
    pub(super) fn info(&self) -> Standby {
        Standby {
            ram_bytes: HELD_BYTES,
            since_ms: self.since_ms,
            until_ms: self.until_ms,
        }
    }
}

/// The running sandbox `id` (its artifacts written) goes into standby: its
/// state is held as it is and the sandbox no longer runs.
pub(super) fn enter(st: &mut State, id: &SandboxId, keep_for: Duration) {
    let Some(sb) = st.sandboxes.get_mut(id) else {
        return;
    };
    let held = sb.clone();
    *sb = FakeSandbox {
        workdir: sb.workdir.clone(),
        ..Default::default()
    };
    let now = now_ms();
    st.standby.insert(
        id.clone(),
        Held {
            sandbox: held,
            since_ms: now,
            until_ms: now + keep_for.as_millis() as i64,
            snapshot: None,
        },
    );
}

/// Whether `id` is held for stored snapshot `snap`.
pub(super) fn holds(st: &State, id: &SandboxId, snap: &SnapshotId) -> bool {
    st.standby
        .get(id)
        .is_some_and(|h| h.snapshot.as_ref() == Some(snap))
}

/// A resume: with no artifacts and a held sandbox, it continues (true);
/// with artifacts, whatever is held is dropped (the store's copy resumes).
pub(super) fn resume(st: &mut State, spec: &SandboxSpec, artifacts: &Path) -> bool {
    let empty = std::fs::read_dir(artifacts)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    let held = st.standby.remove(&spec.id);
    match held {
        Some(h) if empty => {
            st.sandboxes.insert(spec.id.clone(), h.sandbox);
            true
        }
        _ => false,
    }
}

/// Continue a held sandbox (recover after a failed upload).
pub(super) fn continue_any(st: &mut State, id: &SandboxId) {
    if let Some(h) = st.standby.remove(id) {
        st.sandboxes.insert(id.clone(), h.sandbox);
    }
}

/// Standbys past their window released; their ids.
pub(super) fn expire(st: &mut State, now: i64) -> Vec<SandboxId> {
    let due: Vec<SandboxId> = st
        .standby
        .iter()
        .filter(|(_, h)| h.until_ms <= now)
        .map(|(id, _)| id.clone())
        .collect();
    for id in &due {
        st.standby.remove(id);
    }
    due
}
