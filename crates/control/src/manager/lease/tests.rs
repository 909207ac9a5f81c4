//! The leasing and takeover decisions.

use super::*;
use stasis_core::SnapshotId;

use SandboxState as S;

fn sid(s: &str) -> SnapshotId {
    SnapshotId::parse(&format!("snap-{s}")).unwrap()
}

#[test]
fn only_a_sandbox_that_should_run_and_is_not_held_here_is_taken_over() {
    for state in SandboxState::ALL {
        let live = matches!(state, S::Running | S::Pausing | S::Resuming);
        assert_eq!(must_take_over(state, false), live, "{state}");
        // A lease this node holds is never taken over again.
        assert!(!must_take_over(state, true), "{state}");
    }
}

#[test]
fn takeover_reaches_resuming_by_legal_steps() {
    for state in [S::Running, S::Pausing, S::Resuming] {
        let steps = to_resuming(state);
        let mut at = state;
        for (from, to) in &steps {
            assert_eq!(*from, at, "{state}: {steps:?}");
            assert!(from.can_transition_to(*to), "{state}: {from} -> {to}");
            at = *to;
        }
        assert_eq!(at, S::Resuming, "{state}");
    }
    assert_eq!(to_resuming(S::Pausing).len(), 2);
    assert_eq!(to_resuming(S::Resuming), vec![]);
}

#[test]
fn last_alive_is_the_latest_known_moment() {
    assert_eq!(last_alive_ms(None, None, 100), 100);
    assert_eq!(last_alive_ms(Some(300), None, 100), 300);
    assert_eq!(last_alive_ms(None, Some(200), 100), 200);
    assert_eq!(last_alive_ms(Some(300), Some(400), 100), 400);
    // The record's own last change is a lower bound.
    assert_eq!(last_alive_ms(Some(50), Some(60), 100), 100);
}

#[test]
fn progress_lost_by_a_takeover_is_never_negative() {
    assert_eq!(takeover_lost_ms(1_000, 400), 600);
    assert_eq!(takeover_lost_ms(400, 400), 0);
    // A snapshot taken after the last sign of life (clock skew): nothing lost.
    assert_eq!(takeover_lost_ms(400, 1_000), 0);
}

#[test]
fn takeover_restores_the_newest_snapshot_and_the_pause_on_a_tie() {
    let pause = Some((sid("pause"), 1_000));
    let older = Some((sid("checkpt"), 900));
    let newer = Some((sid("checkpt"), 1_100));
    let same = Some((sid("checkpt"), 1_000));
    assert!(!newest_earlier(pause.clone(), older).unwrap().checkpoint);
    let e = newest_earlier(pause.clone(), newer).unwrap();
    assert!(e.checkpoint);
    assert_eq!((e.id, e.at_ms), (sid("checkpt"), 1_100));
    assert!(
        !newest_earlier(pause.clone(), same.clone())
            .unwrap()
            .checkpoint
    );
    assert!(newest_earlier(None, same).unwrap().checkpoint);
    assert!(!newest_earlier(pause, None).unwrap().checkpoint);
    assert_eq!(newest_earlier(None, None), None);
}

#[test]
fn a_restarting_node_claims_only_what_ran_on_it() {
    for state in SandboxState::ALL {
        assert_eq!(claim(state, false), Claim::Skip, "{state}");
        let want = if matches!(state, S::Paused | S::Failed) {
            Claim::Keep
        } else {
            Claim::Lease
        };
        assert_eq!(claim(state, true), want, "{state}");
    }
}

#[test]
fn heartbeats_run_at_a_third_of_the_lease() {
    assert_eq!(heartbeat_every(30_000), Duration::from_secs(10));
    assert_eq!(heartbeat_every(3_000), Duration::from_secs(1));
    assert_eq!(heartbeat_every(150), Duration::from_millis(100));
}

#[test]
fn a_lease_held_elsewhere_answers_busy_naming_the_node() {
    let id = SandboxId::generate();
    let e = held_elsewhere(&id, Some("node-b".into()));
    assert_eq!(e.code, ErrorCode::Busy);
    assert_eq!(
        e.message,
        format!("sandbox {id} runs on node node-b; try again")
    );
    let e = held_elsewhere(&id, None);
    assert_eq!(e.message, format!("sandbox {id} runs on node ; try again"));
}

#[test]
fn a_lease_is_served_on_for_most_of_it_then_not() {
    use crate::cluster::lease_fresh;
    let lease = Duration::from_secs(10);
    assert!(lease_fresh(Duration::ZERO, lease));
    assert!(lease_fresh(Duration::from_millis(7_999), lease));
    // The last fifth is left for skew: another node may take it at 10 s.
    assert!(!lease_fresh(Duration::from_secs(8), lease));
    assert!(!lease_fresh(Duration::from_secs(60), lease));
}

#[test]
fn only_the_same_fence_of_this_node_continues_without_a_restore() {
    use stasis_meta::lease::Lease;
    use stasis_meta::Fence;
    let fence = Fence {
        node: "a".into(),
        token: 7,
    };
    let row = |node: Option<&str>, token| Lease {
        sandbox: "s".into(),
        node: node.map(String::from),
        token,
        expires_at_ms: 0,
        acquired_at_ms: 0,
    };
    assert!(still_ours(Some(&fence), Some(&row(Some("a"), 7)), "a"));
    // Another node held it in between (the token moved), or holds it.
    assert!(!still_ours(Some(&fence), Some(&row(Some("a"), 8)), "a"));
    assert!(!still_ours(Some(&fence), Some(&row(Some("b"), 7)), "a"));
    // Released (paused elsewhere), never held here, or no row at all.
    assert!(!still_ours(Some(&fence), Some(&row(None, 7)), "a"));
    assert!(!still_ours(None, Some(&row(Some("a"), 7)), "a"));
    assert!(!still_ours(Some(&fence), None, "a"));
}
