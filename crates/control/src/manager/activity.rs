//! A sandbox's last activity as this daemon's idle reaper sees it.

use std::sync::atomic::Ordering;

use stasis_core::SandboxId;

use super::Manager;

impl Manager {
    /// When the sandbox was last active, if this daemon tracks it (the node
    /// running it does, from the reaper's first pass on).
    pub fn last_active_ms(&self, id: &SandboxId) -> Option<i64> {
        self.slots
            .lock()
            .expect("slots lock")
            .get(id)
            .map(|s| s.last_active_ms.load(Ordering::Relaxed))
    }
}
