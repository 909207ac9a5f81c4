//! The sandbox lifecycle state machine.
//!
//! Stable states: `Running`, `Paused`, `Destroyed`, `Failed`. Transitional
//! states (`Creating`, `Pausing`, `Resuming`, `Destroying`) are persisted
//! *before* the backend is asked to act, so a daemon killed at any instant
//! finds on restart exactly which operation was in flight and resolves it
//! (see the server's reconcile pass). Only the transitions listed in
//! [`SandboxState::can_transition_to`] are legal.

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Creating,
    Running,
    Pausing,
    Paused,
    Resuming,
    Destroying,
    Destroyed,
    Failed,
}

impl SandboxState {
    pub const ALL: [SandboxState; 8] = [
        SandboxState::Creating,
        SandboxState::Running,
        SandboxState::Pausing,
        SandboxState::Paused,
        SandboxState::Resuming,
        SandboxState::Destroying,
        SandboxState::Destroyed,
        SandboxState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Creating => "creating",
            SandboxState::Running => "running",
            SandboxState::Pausing => "pausing",
            SandboxState::Paused => "paused",
            SandboxState::Resuming => "resuming",
            SandboxState::Destroying => "destroying",
            SandboxState::Destroyed => "destroyed",
            SandboxState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| Error::invalid(format!("unknown sandbox state {s:?}")))
    }

    /// A transitional state: an operation was in flight.
    pub fn is_transitional(self) -> bool {
        matches!(
            self,
            SandboxState::Creating
                | SandboxState::Pausing
                | SandboxState::Resuming
                | SandboxState::Destroying
        )
    }

    /// Terminal: nothing can happen to the sandbox any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, SandboxState::Destroyed)
    }

    pub fn can_transition_to(self, to: SandboxState) -> bool {
        use SandboxState::*;
        matches!(
            (self, to),
            (Creating, Running)
                | (Creating, Failed)
                | (Creating, Destroying)
                | (Running, Pausing)
                | (Running, Destroying)
                | (Running, Failed)
                // Takeover: the node running it died (its lease expired) and
                // another node restores it from its newest snapshot.
                | (Running, Resuming)
                | (Pausing, Paused)
                | (Pausing, Running)
                | (Pausing, Failed)
                | (Paused, Resuming)
                | (Paused, Destroying)
                | (Resuming, Running)
                | (Resuming, Paused)
                | (Resuming, Failed)
                | (Destroying, Destroyed)
                | (Destroying, Failed)
                | (Failed, Destroying)
        )
    }

    /// Check a transition, with the error the API returns for an illegal one.
    pub fn check_transition(self, to: SandboxState) -> Result<(), Error> {
        if self.can_transition_to(to) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorCode::InvalidState,
                format!("sandbox is {}: cannot go to {}", self.as_str(), to.as_str()),
            ))
        }
    }
}

impl std::fmt::Display for SandboxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SandboxState::*;

    #[test]
    fn destroyed_is_a_sink() {
        for to in SandboxState::ALL {
            assert!(!Destroyed.can_transition_to(to));
        }
    }

    #[test]
    fn every_transitional_state_can_settle() {
        // A daemon restart must be able to resolve any in-flight operation
        // into a stable state without passing through another transitional one.
        for st in SandboxState::ALL
            .into_iter()
            .filter(|s| s.is_transitional())
        {
            let stable = SandboxState::ALL
                .into_iter()
                .filter(|t| !t.is_transitional())
                .any(|t| st.can_transition_to(t));
            assert!(stable, "{st} cannot settle");
        }
    }

    #[test]
    fn illegal_transitions_are_refused() {
        assert!(Paused.check_transition(Pausing).is_err());
        assert!(Running.check_transition(Paused).is_err());
        assert!(Destroyed.check_transition(Running).is_err());
        assert_eq!(
            Destroyed.check_transition(Running).unwrap_err().code,
            ErrorCode::InvalidState
        );
        assert!(Running.check_transition(Pausing).is_ok());
    }

    #[test]
    fn names_round_trip() {
        for st in SandboxState::ALL {
            assert_eq!(SandboxState::parse(st.as_str()).unwrap(), st);
        }
    }
}
