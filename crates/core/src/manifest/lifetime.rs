//! What happens when a running sandbox reaches its `max_lifetime_secs`.
//!
//! The default destroys it (the limit as it always was). A sandbox created
//! through the E2B edge, whose "timeout" is a lifetime, is paused instead
//! unless its creator asked to kill on timeout; a resume after such a pause
//! grants `renew_secs` more seconds of running time, so the sandbox is not
//! paused again at once.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnLifetime {
    /// Destroy the sandbox.
    #[default]
    Destroy,
    /// Pause with memory (kept per `paused_ttl_secs`).
    Pause,
    /// Pause keeping only the filesystem.
    PauseFilesystem,
}

impl OnLifetime {
    pub fn is_destroy(&self) -> bool {
        *self == OnLifetime::Destroy
    }

    /// The pause it asks for (`keep_memory`), if it pauses.
    pub fn pause(self) -> Option<bool> {
        match self {
            OnLifetime::Destroy => None,
            OnLifetime::Pause => Some(true),
            OnLifetime::PauseFilesystem => Some(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_pauses() {
        for (v, name, pause) in [
            (OnLifetime::Destroy, "destroy", None),
            (OnLifetime::Pause, "pause", Some(true)),
            (OnLifetime::PauseFilesystem, "pause_filesystem", Some(false)),
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), name);
            assert_eq!(v.pause(), pause);
        }
        assert!(OnLifetime::default().is_destroy());
    }
}
