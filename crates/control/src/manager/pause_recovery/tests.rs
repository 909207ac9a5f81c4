//! The decision over every combination of what can be found, and over every
//! step at which each backend's pause can be interrupted.

use super::*;

fn sid(s: &str) -> SnapshotId {
    SnapshotId::parse(&format!("snap-{s}")).unwrap()
}

fn earlier_options() -> Vec<Option<Earlier>> {
    vec![
        None,
        Some(Earlier {
            id: sid("prevpause"),
            at_ms: 1_000,
            checkpoint: false,
        }),
        Some(Earlier {
            id: sid("checkpt"),
            at_ms: 2_000,
            checkpoint: true,
        }),
    ]
}

/// Every combination of the five findings (2 x 2 x 2 x 2 x 3 = 48).
fn all_findings() -> Vec<Found> {
    let mut out = Vec::new();
    for compute_running in [false, true] {
        for files_kept in [false, true] {
            for stored in [None, Some(sid("new"))] {
                for stage_complete in [false, true] {
                    for earlier in earlier_options() {
                        out.push(Found {
                            compute_running,
                            files_kept,
                            stored: stored.clone(),
                            stage_complete,
                            earlier,
                        });
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_combination_gets_the_most_recent_truthful_outcome() {
    let all = all_findings();
    assert_eq!(all.len(), 48);
    for f in &all {
        let a = decide(f);
        let restorable = f.compute_running
            || f.files_kept
            || f.stored.is_some()
            || f.stage_complete
            || f.earlier.is_some();
        // Failed only when nothing restorable exists, and then always.
        assert_eq!(a == Action::Fail, !restorable, "{f:?} -> {a:?}");
        // A sandbox that still runs keeps running: nothing is lost.
        assert_eq!(a == Action::Continue, f.compute_running, "{f:?} -> {a:?}");
        match &a {
            Action::KeepFiles => assert!(f.files_kept && !f.compute_running, "{f:?}"),
            // The completed upload is recorded, not uploaded again.
            Action::Record(s) => {
                assert_eq!(Some(s), f.stored.as_ref(), "{f:?}");
                assert!(!f.compute_running && !f.files_kept, "{f:?}");
            }
            Action::Upload => {
                assert!(f.stage_complete && f.stored.is_none(), "{f:?}");
                assert!(!f.compute_running && !f.files_kept, "{f:?}");
            }
            // Progress is given up only when nothing newer exists.
            Action::Fallback(e) => {
                assert_eq!(Some(e), f.earlier.as_ref(), "{f:?}");
                assert!(
                    !f.compute_running && !f.files_kept && f.stored.is_none() && !f.stage_complete,
                    "{f:?}"
                );
            }
            Action::Continue | Action::Fail => {}
        }
    }
}

/// What the restarted daemon finds when the daemon died at each persisted
/// step of a pause, and what it must do.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Running -> Pausing persisted, backend not asked yet.
    Pausing,
    /// QEMU stopped / migrating / memory saved / meta.json written (QEMU alive).
    VmStopped,
    /// QEMU quit: memory complete, disk still in the sandbox dir.
    VmQuit,
    /// Disk moved into the stage (stage complete).
    Staged,
    /// pause.json written, upload under way.
    Uploading,
    /// Upload complete, Paused not yet recorded.
    Stored,
}

const STEPS: [Step; 6] = [
    Step::Pausing,
    Step::VmStopped,
    Step::VmQuit,
    Step::Staged,
    Step::Uploading,
    Step::Stored,
];

fn microvm_found(step: Step, previous: Option<Earlier>, memory_intact: bool) -> Found {
    let alive = matches!(step, Step::Pausing | Step::VmStopped);
    Found {
        compute_running: alive,
        files_kept: false,
        stored: matches!(step, Step::Stored).then(|| sid("new")),
        // The backend finishes the disk move; a stage whose memory state
        // does not verify is not complete.
        stage_complete: !alive && memory_intact,
        earlier: previous,
    }
}

#[test]
fn microvm_crash_at_every_step_of_a_pause() {
    for step in STEPS {
        for previous in earlier_options() {
            let a = decide(&microvm_found(step, previous.clone(), true));
            let want = match step {
                Step::Pausing | Step::VmStopped => Action::Continue,
                Step::VmQuit | Step::Staged | Step::Uploading => Action::Upload,
                Step::Stored => Action::Record(sid("new")),
            };
            assert_eq!(a, want, "{step:?} with {previous:?}");
            // A damaged stage falls back to the earlier snapshot, or fails
            // only without one.
            let a = decide(&microvm_found(step, previous.clone(), false));
            match step {
                Step::Pausing | Step::VmStopped => assert_eq!(a, Action::Continue),
                Step::Stored => assert_eq!(a, Action::Record(sid("new"))),
                _ => match &previous {
                    Some(e) => assert_eq!(a, Action::Fallback(e.clone()), "{step:?}"),
                    None => assert_eq!(a, Action::Fail, "{step:?}"),
                },
            }
        }
    }
}

#[test]
fn process_crash_at_every_step_of_a_pause() {
    // The process backend's processes never survive a daemon restart, and
    // its writable layer stays on the host through every step: the files
    // are kept whatever the stage or store hold.
    for step in STEPS {
        for previous in earlier_options() {
            let f = Found {
                compute_running: false,
                files_kept: true,
                stored: matches!(step, Step::Stored).then(|| sid("new")),
                stage_complete: false,
                earlier: previous.clone(),
            };
            assert_eq!(decide(&f), Action::KeepFiles, "{step:?} {previous:?}");
        }
    }
    // A pause whose backend failed while the processes still run continues.
    let f = Found {
        compute_running: true,
        files_kept: true,
        ..Default::default()
    };
    assert_eq!(decide(&f), Action::Continue);
    // Layer gone too: a completed upload or an earlier snapshot still serves.
    let f = Found {
        stored: Some(sid("new")),
        earlier: earlier_options()[1].clone(),
        ..Default::default()
    };
    assert_eq!(decide(&f), Action::Record(sid("new")));
}

#[test]
fn the_newest_earlier_snapshot_is_chosen() {
    let p = (sid("p"), 100);
    let c = (sid("c"), 200);
    assert_eq!(newest_earlier(None, None), None);
    let e = newest_earlier(Some(p.clone()), None).unwrap();
    assert_eq!((e.id, e.checkpoint), (sid("p"), false));
    let e = newest_earlier(None, Some(c.clone())).unwrap();
    assert_eq!((e.id, e.checkpoint), (sid("c"), true));
    let e = newest_earlier(Some(p.clone()), Some(c.clone())).unwrap();
    assert_eq!((e.id, e.checkpoint), (sid("c"), true));
    let e = newest_earlier(Some((sid("p"), 300)), Some(c)).unwrap();
    assert_eq!((e.id, e.checkpoint), (sid("p"), false));
}

#[test]
fn progress_lost_counts_running_time_since_the_snapshot() {
    // Resumed from the snapshot at 5000, stopped at 9000: 4000 ms lost.
    assert_eq!(progress_lost_ms(9_000, Some(5_000), 1_000), 4_000);
    // A checkpoint taken while running (after the last start).
    assert_eq!(progress_lost_ms(9_000, Some(5_000), 7_000), 2_000);
    // No start recorded: from the snapshot.
    assert_eq!(progress_lost_ms(9_000, None, 7_000), 2_000);
    // Clocks never make it negative.
    assert_eq!(progress_lost_ms(1_000, Some(5_000), 7_000), 0);
}

#[test]
fn the_intent_round_trips_and_a_torn_one_reads_as_none() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(read_intent(d.path()), None);
    let i = Intent {
        snapshot: sid("x"),
        kind: PauseKind::Memory,
        previous: Some(sid("p")),
    };
    write_intent(d.path(), &i).unwrap();
    assert_eq!(read_intent(d.path()), Some(i));
    std::fs::write(d.path().join(INTENT), b"{\"snapshot\":").unwrap();
    assert_eq!(read_intent(d.path()), None);
}
