//! A daemon killed at each persisted step of create, pause, resume,
//! destroy, restore and snapshot (the fake backend never answers at that
//! step; the manager is dropped), then a new manager on the same meta, store
//! and backend state runs `reconcile`: the sandbox must land in the one
//! consistent state named per step.

use std::sync::Arc;

use stasis_control::Manager;
use stasis_core::{BackendKind, SandboxId, SandboxState};
use stasis_meta::PauseKind;

use crate::harness::*;

/// Restart: a new manager on the same state, reconciled; the reconcile
/// of an already reconciled state changes nothing.
async fn restart(env: &Env) -> Arc<Manager> {
    let m = env.manager().await;
    let report = m.reconcile().await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let again = m.reconcile().await.unwrap();
    assert!(
        again.changed.is_empty(),
        "reconcile is idempotent: {again:?}"
    );
    m
}

async fn only_sandbox(env: &Env) -> SandboxId {
    let all = env.meta().await.list_live().await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].id.clone()
}

/// Killed during create, before or after the backend started it: Failed,
/// nothing left running, its directory gone.
#[tokio::test]
async fn crash_during_create_fails_the_sandbox_and_frees_it() {
    for step in ["create", "create.done"] {
        let env = Env::process();
        let m = env.manager().await;
        env.fake.crash_at(step);
        crash(&env.fake, m.create(&ctx(), manifest())).await;
        drop(m);
        let id = only_sandbox(&env).await;
        assert_eq!(env.persisted(&id).await, SandboxState::Creating);
        let m = restart(&env).await;
        let r = record(&m, &id).await;
        assert_eq!(r.state, SandboxState::Failed, "{step}");
        assert!(r.reason.unwrap().contains("being created"), "{step}");
        assert!(env.fake.held().is_empty(), "{step}");
        assert!(!env.data_dir().join("sandboxes").join(id.as_str()).exists());
        m.destroy(&ctx(), &id).await.unwrap();
    }
}

/// Killed during a restore (a create from a snapshot): the same.
#[tokio::test]
async fn crash_during_restore_fails_the_new_sandbox() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let snap = m.snapshot(&ctx(), &rec.id, None).await.unwrap();
    env.fake.crash_at("restore.done");
    crash(&env.fake, m.restore(&ctx(), &snap.id, None)).await;
    drop(m);
    let m = restart(&env).await;
    let all = m.list(&ctx(), None).await.unwrap();
    let child = all.iter().find(|r| r.id != rec.id).unwrap();
    assert_eq!(child.state, SandboxState::Failed);
    assert_eq!(env.fake.held(), vec![rec.id.clone()]);
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
}

/// Killed during a snapshot: nothing was persisted, the sandbox runs on and
/// no snapshot is recorded.
#[tokio::test]
async fn crash_during_snapshot_keeps_the_sandbox_running() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    env.fake.crash_at("snapshot.done");
    crash(&env.fake, m.snapshot(&ctx(), &rec.id, None)).await;
    drop(m);
    let m = restart(&env).await;
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    assert!(m.list_snapshots(&ctx()).await.unwrap().is_empty());
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");
}

/// Killed while running (no operation in flight): the compute survives
/// the daemon (Running), or it died with it (process: files kept, Paused;
/// microVM: Failed).
#[tokio::test]
async fn crash_while_running() {
    for (kind, lose, want) in [
        (BackendKind::Process, false, SandboxState::Running),
        (BackendKind::Microvm, false, SandboxState::Running),
        (BackendKind::Process, true, SandboxState::Paused),
        (BackendKind::Microvm, true, SandboxState::Failed),
    ] {
        let env = Env::new(kind);
        let m = env.manager().await;
        let rec = running(&m).await;
        drop(m);
        if lose {
            env.fake.lose_compute();
        }
        let m = restart(&env).await;
        let r = record(&m, &rec.id).await;
        assert_eq!(r.state, want, "{kind} lost={lose}: {:?}", r.reason);
        match want {
            SandboxState::Running => assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n"),
            SandboxState::Paused => {
                assert_eq!(r.pause_kind, Some(PauseKind::Filesystem));
                assert_eq!(run(&m, &rec.id, &["cat", "f"]).await, "files");
            }
            _ => assert!(r.reason.unwrap().contains("VM is gone")),
        }
    }
}

/// Killed during a pause:
/// - at `pause` (Pausing persisted, backend not yet asked; compute runs): Running;
/// - at `pause.done` (= the manager's `pause.staged`: the stage is complete,
///   the compute stopped, no intent yet): Paused on the uploaded stage;
/// - at `pause` with the compute lost too: process -> Paused (files kept);
///   microVM, first pause -> Failed; microVM with an earlier pause -> Paused
///   on that earlier snapshot, progress lost recorded.
#[tokio::test]
async fn crash_during_pause() {
    struct Case {
        kind: BackendKind,
        step: &'static str,
        lose: bool,
        earlier: bool,
        want: SandboxState,
        memory_back: bool,
    }
    let cases = [
        Case {
            kind: BackendKind::Process,
            step: "pause",
            lose: false,
            earlier: false,
            want: SandboxState::Running,
            memory_back: true,
        },
        Case {
            kind: BackendKind::Microvm,
            step: "pause",
            lose: false,
            earlier: false,
            want: SandboxState::Running,
            memory_back: true,
        },
        Case {
            kind: BackendKind::Process,
            step: "pause.done",
            lose: false,
            earlier: false,
            want: SandboxState::Paused,
            memory_back: true,
        },
        Case {
            kind: BackendKind::Microvm,
            step: "pause.done",
            lose: false,
            earlier: true,
            want: SandboxState::Paused,
            memory_back: true,
        },
        Case {
            kind: BackendKind::Process,
            step: "pause",
            lose: true,
            earlier: false,
            want: SandboxState::Paused,
            memory_back: false,
        },
        Case {
            kind: BackendKind::Microvm,
            step: "pause",
            lose: true,
            earlier: false,
            want: SandboxState::Failed,
            memory_back: false,
        },
        Case {
            kind: BackendKind::Microvm,
            step: "pause",
            lose: true,
            earlier: true,
            want: SandboxState::Paused,
            memory_back: true,
        },
    ];
    for c in cases {
        let what = format!(
            "{} at {} lost={} earlier={}",
            c.kind, c.step, c.lose, c.earlier
        );
        let env = Env::new(c.kind);
        let m = env.manager().await;
        let rec = running(&m).await;
        let mut earlier = None;
        if c.earlier {
            m.pause(&ctx(), &rec.id, None).await.unwrap();
            earlier = record(&m, &rec.id).await.pause_snapshot;
            m.resume(&ctx(), &rec.id).await.unwrap();
        }
        run(&m, &rec.id, &["write", "f", "newer"]).await;
        env.fake.crash_at(c.step);
        crash(&env.fake, m.pause(&ctx(), &rec.id, None)).await;
        drop(m);
        assert_eq!(env.persisted(&rec.id).await, SandboxState::Pausing);
        if c.lose {
            env.fake.lose_compute();
        }
        let m = restart(&env).await;
        let r = record(&m, &rec.id).await;
        assert_eq!(r.state, c.want, "{what}: {:?}", r.reason);
        let stage = env
            .data_dir()
            .join("sandboxes")
            .join(rec.id.as_str())
            .join("pause-stage");
        if c.want != SandboxState::Failed {
            assert!(!stage.exists(), "{what}: stage dropped");
        }
        match c.want {
            SandboxState::Failed => {
                assert!(r.reason.unwrap().contains("no earlier snapshot"), "{what}");
                continue;
            }
            SandboxState::Paused => {
                let snap = r.pause_snapshot.clone();
                if c.lose && c.earlier {
                    assert_eq!(snap, earlier, "{what}: paused on the earlier snapshot");
                    assert_eq!(r.recovered_from_snapshot, earlier, "{what}");
                    assert!(r.progress_lost_ms.is_some(), "{what}");
                } else if let Some(s) = &snap {
                    assert!(stored(&m, s).await, "{what}");
                    if let Some(e) = &earlier {
                        assert!(!stored(&m, e).await, "{what}: superseded pause deleted");
                    }
                }
            }
            _ => {}
        }
        let f = run(&m, &rec.id, &["cat", "f"]).await;
        let want_f = if c.lose && c.earlier {
            "files"
        } else {
            "newer"
        };
        assert_eq!(f, want_f, "{what}");
        let k = exit_of(&m, &rec.id, &["get", "k"]).await;
        assert_eq!(k == Some(0), c.memory_back, "{what}");
        assert_eq!(state(&m, &rec.id).await, SandboxState::Running, "{what}");
    }
}

/// Killed during a resume: at `resume` (nothing started) -> Paused, and the
/// next resume works from the intact snapshot; at `resume.done` (it runs)
/// -> Running.
#[tokio::test]
async fn crash_during_resume() {
    for (step, want) in [
        ("resume", SandboxState::Paused),
        ("resume.done", SandboxState::Running),
    ] {
        for kind in [BackendKind::Process, BackendKind::Microvm] {
            let env = Env::new(kind);
            let m = env.manager().await;
            let rec = running(&m).await;
            m.pause(&ctx(), &rec.id, None).await.unwrap();
            let snap = record(&m, &rec.id).await.pause_snapshot;
            env.fake.crash_at(step);
            crash(&env.fake, m.resume(&ctx(), &rec.id)).await;
            drop(m);
            assert_eq!(env.persisted(&rec.id).await, SandboxState::Resuming);
            let m = restart(&env).await;
            let r = record(&m, &rec.id).await;
            assert_eq!(r.state, want, "{kind} at {step}: {:?}", r.reason);
            if want == SandboxState::Paused {
                assert_eq!(r.pause_snapshot, snap, "{kind} at {step}");
                m.resume(&ctx(), &rec.id).await.unwrap();
            }
            assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");
            assert_eq!(run(&m, &rec.id, &["cat", "f"]).await, "files");
        }
    }
}

/// Killed during a destroy, before or after the backend released it, of a
/// running or a paused sandbox: Destroyed, nothing held, snapshot deleted.
#[tokio::test]
async fn crash_during_destroy() {
    for step in ["destroy", "destroy.done"] {
        for paused in [false, true] {
            let env = Env::process();
            let m = env.manager().await;
            let rec = running(&m).await;
            if paused {
                m.pause(&ctx(), &rec.id, None).await.unwrap();
            }
            let snap = record(&m, &rec.id).await.pause_snapshot;
            env.fake.crash_at(step);
            crash(&env.fake, m.destroy(&ctx(), &rec.id)).await;
            drop(m);
            assert_eq!(env.persisted(&rec.id).await, SandboxState::Destroying);
            let m = restart(&env).await;
            let r = record(&m, &rec.id).await;
            assert_eq!(r.state, SandboxState::Destroyed, "{step} paused={paused}");
            assert!(env.fake.held().is_empty());
            if let Some(s) = snap {
                assert!(!stored(&m, &s).await, "{step}: pause snapshot deleted");
            }
        }
    }
}

/// Reconcile removes what the backend holds of no live sandbox.
#[tokio::test]
async fn reconcile_cleans_up_orphans() {
    let env = Env::process();
    let m = env.manager().await;
    let keep = running(&m).await;
    let gone = running(&m).await;
    drop(m);
    let m = env.manager().await;
    // Forget one sandbox's record as if it never was (destroyed, then
    // discarded): its backend state is an orphan.
    m.meta()
        .transition(
            &gone.id,
            SandboxState::Running,
            SandboxState::Destroying,
            Default::default(),
        )
        .await
        .unwrap();
    m.meta()
        .transition(
            &gone.id,
            SandboxState::Destroying,
            SandboxState::Destroyed,
            Default::default(),
        )
        .await
        .unwrap();
    m.reconcile().await.unwrap();
    assert_eq!(env.fake.held(), vec![keep.id.clone()]);
}

/// Set (to a directory) only in the child process of
/// [`daemon_killed_at_each_pause_failpoint`].
const CHILD_DIR: &str = "STASIS_TEST_MANAGER_CHILD_DIR";

/// The child's part: a sandbox checkpointed once (an earlier snapshot;
/// not a pause, which would hit the armed failpoint), changed, then paused
/// with the manager's failpoint `STASIS_FAILPOINT` armed, which aborts the
/// process. Does nothing outside that child.
#[tokio::test]
async fn failpoint_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let env = Env::at(dir.into(), BackendKind::Process);
    let m = env.manager().await;
    let mut man = manifest();
    man.lifecycle.on_idle = stasis_core::OnIdle::Nothing;
    man.lifecycle.checkpoint_secs = 1;
    let rec = running_with(&m, man).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let done = m.reap_once().await.unwrap();
    assert_eq!(done, vec![(rec.id.clone(), "checkpointed")]);
    run(&m, &rec.id, &["write", "f", "newer"]).await;
    std::fs::write(env.root.join("id"), rec.id.as_str()).unwrap();
    let r = m.pause(&ctx(), &rec.id, None).await;
    panic!("the failpoint did not fire: {r:?}");
}

/// The daemon process killed (abort, as `kill -9`) at each of the manager's
/// own pause failpoints; the backend's state dies with it (a fresh fake in
/// the restarted daemon: compute and host files gone). After reconcile:
/// - `pause.pausing` (Pausing persisted, nothing saved): Paused on the
///   earlier checkpoint, progress since it lost;
/// - `pause.staged` (stage complete, no intent): the stage is uploaded;
/// - `pause.intent-written` (intent names the snapshot id): uploaded as that id;
/// - `pause.stored` (snapshot in the store, not yet recorded): recorded;
/// - `pause.recorded` (Paused recorded, stage not yet dropped): Paused, the stage dropped;
/// in the last four, paused on the new state (files and memory).
#[tokio::test]
async fn daemon_killed_at_each_pause_failpoint() {
    for (point, persisted) in [
        ("pause.pausing", SandboxState::Pausing),
        ("pause.staged", SandboxState::Pausing),
        ("pause.intent-written", SandboxState::Pausing),
        ("pause.stored", SandboxState::Pausing),
        ("pause.recorded", SandboxState::Paused),
    ] {
        let env = Env::process();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash::failpoint_child", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_DIR, &env.root)
            .env("STASIS_FAILPOINT", point)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(&format!("failpoint {point}")),
            "{point}: {err}"
        );
        let id = std::fs::read_to_string(env.root.join("id")).unwrap();
        let id = SandboxId::parse(&id).unwrap();
        assert_eq!(env.persisted(&id).await, persisted, "{point}");
        let checkpoint = env.meta().await.get(&id).await.unwrap().checkpoint_snapshot;
        let m = restart(&env).await;
        let r = record(&m, &id).await;
        assert_eq!(r.state, SandboxState::Paused, "{point}: {:?}", r.reason);
        let stage = env
            .data_dir()
            .join("sandboxes")
            .join(id.as_str())
            .join("pause-stage");
        assert!(!stage.exists(), "{point}: stage dropped");
        let snap = r.pause_snapshot.clone().expect("paused on a snapshot");
        assert!(stored(&m, &snap).await, "{point}");
        if point == "pause.pausing" {
            assert_eq!(Some(&snap), checkpoint.as_ref(), "{point}: the checkpoint");
            assert_eq!(r.recovered_from_snapshot.as_ref(), Some(&snap), "{point}");
            assert!(r.checkpoint_snapshot.is_none(), "{point}: one owner");
            assert_eq!(run(&m, &id, &["cat", "f"]).await, "files", "{point}");
        } else {
            assert_ne!(Some(&snap), checkpoint.as_ref(), "{point}");
            assert_eq!(run(&m, &id, &["cat", "f"]).await, "newer", "{point}");
            assert_eq!(run(&m, &id, &["get", "k"]).await, "memory\n", "{point}");
        }
    }
}

/// A sandbox left Failed with backend state still held (its destroy
/// failed): a restart releases what the backend holds, the record stays
/// Failed (for the client to see why) until it is destroyed.
#[tokio::test]
async fn reconcile_releases_a_failed_sandbox() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    env.fake
        .fail_at("destroy", stasis_core::ErrorCode::BackendError);
    assert!(m.destroy(&ctx(), &rec.id).await.is_err());
    assert_eq!(state(&m, &rec.id).await, SandboxState::Failed);
    assert_eq!(env.fake.held(), vec![rec.id.clone()]);
    drop(m);
    let m = restart(&env).await;
    assert_eq!(state(&m, &rec.id).await, SandboxState::Failed);
    assert!(env.fake.held().is_empty());
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
}
