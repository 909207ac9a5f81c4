//! The reconcile decision over every recorded state and every finding of the
//! backend (not asked, running, not running).

use super::*;

use SandboxState as S;

fn findings() -> [Option<Recovered>; 3] {
    [None, Some(Recovered::Running), Some(Recovered::NotRunning)]
}

/// Whether the decision for `state` depends on what the backend finds.
fn asks_backend(state: SandboxState) -> bool {
    matches!(state, S::Running | S::Resuming | S::Paused)
}

#[test]
fn every_state_and_finding() {
    use Action as A;
    let nr = Some(Recovered::NotRunning);
    let r = Some(Recovered::Running);
    let table = [
        (S::Creating, None, A::FailCreate),
        (S::Creating, r.clone(), A::FailCreate),
        (S::Creating, nr.clone(), A::FailCreate),
        (S::Running, None, A::Probe),
        (S::Running, r.clone(), A::KeepRunning),
        (S::Running, nr.clone(), A::SettleLost),
        (S::Pausing, None, A::SettlePause),
        (S::Pausing, r.clone(), A::SettlePause),
        (S::Pausing, nr.clone(), A::SettlePause),
        (S::Paused, None, A::Probe),
        (S::Paused, r.clone(), A::TidyPaused { stop: true }),
        (S::Paused, nr.clone(), A::TidyPaused { stop: false }),
        (S::Resuming, None, A::Probe),
        (S::Resuming, r.clone(), A::FinishResume),
        (S::Resuming, nr.clone(), A::BackToPaused),
        (S::Destroying, None, A::FinishDestroy),
        (S::Destroying, r.clone(), A::FinishDestroy),
        (S::Destroying, nr.clone(), A::FinishDestroy),
        (S::Destroyed, None, A::Nothing),
        (S::Destroyed, r.clone(), A::Nothing),
        (S::Destroyed, nr.clone(), A::Nothing),
        (S::Failed, None, A::ReleaseFailed),
        (S::Failed, r, A::ReleaseFailed),
        (S::Failed, nr, A::ReleaseFailed),
    ];
    assert_eq!(table.len(), SandboxState::ALL.len() * findings().len());
    for (state, found, want) in table {
        assert_eq!(decide(state, found.clone()), want, "{state} x {found:?}");
    }
}

#[test]
fn the_backend_is_asked_only_where_it_knows_and_only_once() {
    for state in SandboxState::ALL {
        assert_eq!(
            decide(state, None) == Action::Probe,
            asks_backend(state),
            "{state}"
        );
        for found in findings().into_iter().flatten() {
            // After the probe there is always an answer.
            assert_ne!(decide(state, Some(found.clone())), Action::Probe, "{state}");
            // A state the backend does not decide ignores what it found.
            if !asks_backend(state) {
                assert_eq!(decide(state, Some(found)), decide(state, None), "{state}");
            }
        }
    }
}

#[test]
fn compute_that_runs_is_never_settled_as_lost() {
    for state in SandboxState::ALL {
        let a = decide(state, Some(Recovered::Running));
        assert_ne!(a, Action::SettleLost, "{state}");
        assert_ne!(a, Action::BackToPaused, "{state}");
        // The only running compute stopped is one a paused record contradicts.
        if let Action::TidyPaused { stop } = a {
            assert!(stop);
            assert_eq!(state, S::Paused);
        }
    }
    for state in SandboxState::ALL {
        let a = decide(state, Some(Recovered::NotRunning));
        assert_ne!(a, Action::KeepRunning, "{state}");
        assert_ne!(a, Action::FinishResume, "{state}");
        // A paused sandbox frozen under its supervisor is left as it is.
        assert_ne!(a, Action::TidyPaused { stop: true }, "{state}");
    }
}

#[test]
fn every_state_change_reconcile_writes_is_legal() {
    for state in SandboxState::ALL {
        for found in findings() {
            let to = match decide(state, found.clone()) {
                Action::FailCreate | Action::ReleaseFailed => S::Failed,
                Action::KeepRunning | Action::FinishResume => S::Running,
                Action::BackToPaused | Action::TidyPaused { .. } => S::Paused,
                // Settled elsewhere, each through legal steps of its own.
                Action::SettleLost | Action::SettlePause | Action::FinishDestroy => continue,
                Action::Nothing | Action::Probe => continue,
            };
            assert!(
                to == state || state.can_transition_to(to),
                "{state} x {found:?} -> {to}"
            );
        }
    }
}
