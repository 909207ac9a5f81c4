//! The sandbox manager on the in-memory fake backend: every legal and
//! illegal lifecycle transition, what meta holds after each, backend
//! failures, a daemon killed at each persisted step (then a new manager and
//! reconcile), the idle/TTL reaper, and a second node's view of a sandbox.
//! No root, no namespaces, no VM: the whole file runs in seconds.

#[path = "manager/harness.rs"]
mod harness;

#[path = "manager/attach.rs"]
mod attach;
#[path = "manager/autostart.rs"]
mod autostart;
#[path = "manager/crash.rs"]
mod crash;
#[path = "manager/drain.rs"]
mod drain;
#[path = "manager/images.rs"]
mod images;
#[path = "manager/lease.rs"]
mod lease;
#[path = "manager/local_cap.rs"]
mod local_cap;
#[path = "manager/network.rs"]
mod network;
#[path = "manager/ports.rs"]
mod ports;
#[path = "manager/reaper.rs"]
mod reaper;
#[path = "manager/standby.rs"]
mod standby;
#[path = "manager/templates.rs"]
mod templates;
#[path = "manager/timeout.rs"]
mod timeout;

use harness::*;
use stasis_backend::fake::FakeBackend;
use stasis_core::{BackendKind, ErrorCode, SandboxState, WriteMode};
use stasis_meta::PauseKind;

#[tokio::test]
async fn create_pause_resume_destroy_persists_each_state() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let id = rec.id.clone();
    assert_eq!(state(&m, &id).await, SandboxState::Running);
    assert!(record(&m, &id).await.running_since_ms.is_some());
    assert!(env.fake.sandbox(&id).unwrap().running);

    // Pause with memory: state moves into a pause snapshot in the store.
    let (rec, _) = m.pause(&ctx(), &id, None).await.unwrap();
    assert_eq!(rec.state, SandboxState::Paused);
    let r = record(&m, &id).await;
    assert_eq!(r.state, SandboxState::Paused);
    assert_eq!(r.pause_kind, Some(PauseKind::Memory));
    assert!(r.paused_at_ms.is_some() && r.expires_at_ms.is_some());
    assert!(r.running_since_ms.is_none());
    let snap = r.pause_snapshot.clone().expect("pause snapshot");
    assert!(stored(&m, &snap).await);
    assert!(!env.fake.sandbox(&id).unwrap().running);

    // Resume reads it back: files and memory.
    let (rec, _) = m.resume(&ctx(), &id).await.unwrap();
    assert_eq!(rec.state, SandboxState::Running);
    let r = record(&m, &id).await;
    assert_eq!(r.state, SandboxState::Running);
    assert!(r.paused_at_ms.is_none() && r.expires_at_ms.is_none());
    assert_eq!(run(&m, &id, &["cat", "f"]).await, "files");
    assert_eq!(run(&m, &id, &["get", "k"]).await, "memory\n");

    // A filesystem pause keeps files only; the older pause snapshot goes.
    m.pause(&ctx(), &id, Some(false)).await.unwrap();
    let r = record(&m, &id).await;
    assert_eq!(r.pause_kind, Some(PauseKind::Filesystem));
    assert!(
        !stored(&m, &snap).await,
        "superseded pause snapshot deleted"
    );
    let snap2 = r.pause_snapshot.clone().unwrap();
    m.resume(&ctx(), &id).await.unwrap();
    assert_eq!(run(&m, &id, &["cat", "f"]).await, "files");
    assert_eq!(exit_of(&m, &id, &["get", "k"]).await, Some(1));

    // Destroy: record Destroyed, snapshot, backend state and dir gone.
    m.pause(&ctx(), &id, None).await.unwrap();
    let snap3 = record(&m, &id).await.pause_snapshot.unwrap();
    assert!(!stored(&m, &snap2).await);
    let rec = m.destroy(&ctx(), &id).await.unwrap();
    assert_eq!(rec.state, SandboxState::Destroyed);
    let r = record(&m, &id).await;
    assert_eq!(r.state, SandboxState::Destroyed);
    assert!(r.pause_snapshot.is_none());
    assert!(!stored(&m, &snap3).await);
    assert!(env.fake.sandbox(&id).is_none());
    assert!(!env.data_dir().join("sandboxes").join(id.as_str()).exists());
    // The audit log has each step.
    let actions: Vec<String> = m
        .meta()
        .audit_list(None, Some(id.as_str()), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    for a in ["create", "exec", "pause", "resume", "delete"] {
        assert!(actions.iter().any(|x| x == a), "{a} in {actions:?}");
    }
    assert!(m.meta().audit_verify().await.unwrap().ok);
}

#[tokio::test]
async fn a_running_sandbox_can_be_destroyed_and_use_resumes_a_paused_one() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    // Any use of a paused sandbox resumes it transparently.
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    let got = m.read_file(&ctx(), &rec.id, "f").await.unwrap();
    assert_eq!(got, b"files");
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
    assert!(env.fake.held().is_empty());
}

#[tokio::test]
async fn snapshot_restore_and_fork() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let snap = m.snapshot(&ctx(), &rec.id, None).await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    run(&m, &rec.id, &["write", "f", "changed"]).await;

    let child = m.restore(&ctx(), &snap.id, None).await.unwrap();
    assert_eq!(child.state, SandboxState::Running);
    let r = record(&m, &child.id).await;
    assert_eq!(r.source_snapshot.as_ref(), Some(&snap.id));
    assert_eq!(run(&m, &child.id, &["cat", "f"]).await, "files");
    assert_eq!(run(&m, &child.id, &["get", "k"]).await, "memory\n");
    assert_eq!(run(&m, &rec.id, &["cat", "f"]).await, "changed");

    // A snapshot of a paused sandbox resumes it first.
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    m.snapshot(&ctx(), &rec.id, None).await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);

    let (fsnap, children) = m.fork(&ctx(), &rec.id, 2).await.unwrap();
    assert_eq!(children.len(), 2);
    for c in &children {
        assert_eq!(state(&m, &c.id).await, SandboxState::Running);
        assert_eq!(run(&m, &c.id, &["cat", "f"]).await, "changed");
        assert_eq!(
            record(&m, &c.id).await.source_snapshot.as_ref(),
            Some(&fsnap.id)
        );
    }
    assert_eq!(
        code(m.fork(&ctx(), &rec.id, 0).await),
        ErrorCode::InvalidArgument
    );

    // A fork whose second restore fails leaves no child and no snapshot.
    let before = m.list(&ctx(), None).await.unwrap().len();
    let snaps_before = m.list_snapshots(&ctx()).await.unwrap().len();
    env.fake.fail_at("restore.done", ErrorCode::BackendError);
    let e = m.fork(&ctx(), &rec.id, 2).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BackendError);
    assert_eq!(m.list(&ctx(), None).await.unwrap().len(), before);
    assert_eq!(m.list_snapshots(&ctx()).await.unwrap().len(), snaps_before);

    // A user snapshot survives its sandbox; a paused sandbox's own does not
    // go while the sandbox needs it.
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert!(stored(&m, &snap.id).await);
    let p = running(&m).await;
    m.pause(&ctx(), &p.id, None).await.unwrap();
    let ps = record(&m, &p.id).await.pause_snapshot.unwrap();
    assert_eq!(
        code(m.delete_snapshot(&ctx(), &ps).await),
        ErrorCode::InvalidState
    );
    m.delete_snapshot(&ctx(), &snap.id).await.unwrap();
    assert_eq!(
        code(m.restore(&ctx(), &snap.id, None).await),
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn illegal_transitions_answer_invalid_state_and_change_nothing() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let id = rec.id.clone();

    // Resume a running sandbox.
    assert_eq!(code(m.resume(&ctx(), &id).await), ErrorCode::InvalidState);
    assert_eq!(state(&m, &id).await, SandboxState::Running);

    // Pause a paused one.
    m.pause(&ctx(), &id, None).await.unwrap();
    assert_eq!(
        code(m.pause(&ctx(), &id, None).await),
        ErrorCode::InvalidState
    );
    assert_eq!(state(&m, &id).await, SandboxState::Paused);

    // Everything but reading the record on a destroyed one.
    m.destroy(&ctx(), &id).await.unwrap();
    let calls = env.fake.calls().len();
    assert_eq!(
        code(m.pause(&ctx(), &id, None).await),
        ErrorCode::InvalidState
    );
    assert_eq!(code(m.resume(&ctx(), &id).await), ErrorCode::InvalidState);
    // Destroying again is no error and changes nothing (idempotent removal).
    let again = m.destroy(&ctx(), &id).await.unwrap();
    assert_eq!(again.state, SandboxState::Destroyed);
    let e = m.exec(&ctx(), &id, req(&["true"]), None).await;
    assert_eq!(code(e), ErrorCode::InvalidState);
    let e = m.write_file(&ctx(), &id, "f", b"x", None).await;
    assert_eq!(code(e), ErrorCode::InvalidState);
    assert_eq!(
        code(m.read_file(&ctx(), &id, "f").await),
        ErrorCode::InvalidState
    );
    assert_eq!(
        code(m.snapshot(&ctx(), &id, None).await),
        ErrorCode::InvalidState
    );
    assert_eq!(code(m.fork(&ctx(), &id, 1).await), ErrorCode::InvalidState);
    assert_eq!(state(&m, &id).await, SandboxState::Destroyed);
    assert_eq!(env.fake.calls().len(), calls, "the backend was not asked");

    // Unknown ids and other tenants' sandboxes are not found.
    let other = stasis_core::SandboxId::generate();
    assert_eq!(
        code(m.pause(&ctx(), &other, None).await),
        ErrorCode::NotFound
    );
    assert_eq!(code(m.destroy(&ctx(), &other).await), ErrorCode::NotFound);
    let live = running(&m).await;
    let stranger = stasis_control::Ctx {
        tenant: stasis_core::TenantId::parse("t-other").unwrap(),
        actor: "x".into(),
    };
    assert_eq!(
        code(m.pause(&stranger, &live.id, None).await),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(m.destroy(&stranger, &live.id).await),
        ErrorCode::NotFound
    );
    assert_eq!(state(&m, &live.id).await, SandboxState::Running);
}

#[tokio::test]
async fn a_failed_sandbox_can_only_be_destroyed() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    // A resume whose artifacts do not verify fails the sandbox.
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    env.fake.fail_at("resume", ErrorCode::IntegrityError);
    assert_eq!(
        code(m.resume(&ctx(), &rec.id).await),
        ErrorCode::IntegrityError
    );
    let r = record(&m, &rec.id).await;
    assert_eq!(r.state, SandboxState::Failed);
    assert!(r.reason.unwrap().contains("resume failed"));
    let e = m.exec(&ctx(), &rec.id, req(&["true"]), None).await;
    assert_eq!(code(e), ErrorCode::InvalidState);
    assert_eq!(
        code(m.pause(&ctx(), &rec.id, None).await),
        ErrorCode::InvalidState
    );
    assert_eq!(
        code(m.resume(&ctx(), &rec.id).await),
        ErrorCode::InvalidState
    );
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
}

#[tokio::test]
async fn backend_failures_settle_on_what_is_true() {
    let env = Env::process();
    let m = env.manager().await;

    // A refused create leaves no record and nothing held.
    env.fake.fail_at("create", ErrorCode::BackendError);
    assert_eq!(
        code(m.create(&ctx(), manifest()).await),
        ErrorCode::BackendError
    );
    assert!(m.list(&ctx(), None).await.unwrap().is_empty());
    assert!(env.fake.held().is_empty());
    // Also when the backend had started it.
    env.fake.fail_at("create.done", ErrorCode::Internal);
    assert_eq!(
        code(m.create(&ctx(), manifest()).await),
        ErrorCode::Internal
    );
    assert!(m.list(&ctx(), None).await.unwrap().is_empty());
    assert!(env.fake.held().is_empty());
    // An unavailable backend refuses.
    env.fake.set_unavailable(Some("test"));
    assert_eq!(
        code(m.create(&ctx(), manifest()).await),
        ErrorCode::Unsupported
    );
    env.fake.set_unavailable(None);

    let rec = running(&m).await;
    // A pause the backend refused before stopping anything: still running.
    env.fake.fail_at("pause", ErrorCode::BackendError);
    let e = m.pause(&ctx(), &rec.id, None).await.unwrap_err();
    assert!(e.message.contains("kept running"), "{e:?}");
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");

    // A pause that failed after the backend saved and stopped it: the
    // complete stage is uploaded, the sandbox paused on it.
    env.fake.fail_at("pause.done", ErrorCode::BackendError);
    assert!(m.pause(&ctx(), &rec.id, None).await.is_err());
    let r = record(&m, &rec.id).await;
    assert_eq!(r.state, SandboxState::Paused, "{:?}", r.reason);
    assert!(r.pause_snapshot.is_some());
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");

    // A resume that failed (not an integrity error): still paused, retried.
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    env.fake.fail_at("resume", ErrorCode::BackendError);
    assert_eq!(
        code(m.resume(&ctx(), &rec.id).await),
        ErrorCode::BackendError
    );
    assert_eq!(state(&m, &rec.id).await, SandboxState::Paused);
    m.resume(&ctx(), &rec.id).await.unwrap();
    assert_eq!(run(&m, &rec.id, &["cat", "f"]).await, "files");

    // A destroy that failed: Failed, destroyable again.
    env.fake.fail_at("destroy", ErrorCode::BackendError);
    assert_eq!(
        code(m.destroy(&ctx(), &rec.id).await),
        ErrorCode::BackendError
    );
    assert_eq!(state(&m, &rec.id).await, SandboxState::Failed);
    m.destroy(&ctx(), &rec.id).await.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
}

/// A request whose backend call fails in a way that may mean the sandbox is
/// gone: the manager asks the backend and settles the record. Process: the
/// files stay on the host (a filesystem pause); microVM: Failed.
#[tokio::test]
async fn a_sandbox_lost_during_a_request_is_settled() {
    for (kind, want) in [
        (BackendKind::Process, SandboxState::Paused),
        (BackendKind::Microvm, SandboxState::Failed),
    ] {
        let env = Env::new(kind);
        let m = env.manager().await;
        let rec = running(&m).await;
        env.fake.lose_compute();
        let e = m.exec(&ctx(), &rec.id, req(&["true"]), None).await;
        assert_eq!(code(e), ErrorCode::InvalidState, "{kind}");
        let r = record(&m, &rec.id).await;
        assert_eq!(r.state, want, "{kind}: {:?}", r.reason);
        if kind == BackendKind::Process {
            assert_eq!(r.pause_kind, Some(PauseKind::Filesystem));
            // The next use resumes it from the files on the host.
            assert_eq!(run(&m, &rec.id, &["cat", "f"]).await, "files");
            assert_eq!(exit_of(&m, &rec.id, &["get", "k"]).await, Some(1));
        }
    }
}

#[tokio::test]
async fn sessions_files_and_usage_go_through_to_the_backend() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.env.insert("FROM_MANIFEST".into(), "yes".into());
    let rec = running_with(&m, man).await;
    assert_eq!(run(&m, &rec.id, &["env", "FROM_MANIFEST"]).await, "yes\n");
    let mut r = req(&["env", "FROM_MANIFEST"]);
    r.env.insert("FROM_MANIFEST".into(), "request".into());
    let out = m.exec(&ctx(), &rec.id, r, None).await.unwrap();
    assert_eq!(out.stdout, b"request\n", "the request's env wins");
    let files = m.list_files(&ctx(), &rec.id, ".").await.unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].name, "f");
    let spec = stasis_core::SessionSpec {
        argv: vec!["cat".into()],
        env: Default::default(),
        cwd: None,
        pty: None,
        user: None,
    };
    let s = m.session_start(&ctx(), &rec.id, spec).await.unwrap();
    m.session_write(&ctx(), &rec.id, &s.id, b"hello")
        .await
        .unwrap();
    // Sessions survive a pause that keeps memory.
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    let out = m
        .session_read(&ctx(), &rec.id, &s.id, 0, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(out.data, b"hello");
    assert_eq!(m.session_list(&ctx(), &rec.id).await.unwrap().len(), 1);
    m.session_kill(&ctx(), &rec.id, &s.id, Default::default())
        .await
        .unwrap();
    let u = m.usage(&ctx(), &rec.id).await.unwrap();
    assert!(u.host_processes == 1 && u.rss_bytes > 0);
    // Over the manager's file limit: refused before the backend is asked.
    let m2 = env.manager_with(|c| c.max_file_bytes = 4).await;
    let e = m2.write_file(&ctx(), &rec.id, "big", b"12345", None).await;
    assert_eq!(code(e), ErrorCode::PayloadTooLarge);
    assert_eq!(
        code(m2.read_file(&ctx(), &rec.id, "f").await),
        ErrorCode::PayloadTooLarge
    );
    // An upload is received to disk up to the limit; over it, the refusal
    // names the setting and the transfer file is gone.
    let chunks =
        |n: usize| futures::stream::iter((0..n).map(|i| Ok::<_, std::io::Error>(vec![i as u8; 2])));
    let e = m2.spool_upload(chunks(3)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    assert!(e.message.contains("--max-file-mb"), "{}", e.message);
    let up = m2.spool_upload(chunks(2)).await.unwrap();
    assert_eq!(std::fs::read(up.path()).unwrap(), [0, 0, 1, 1]);
    let kept = up.path().to_path_buf();
    m2.write_spooled(&ctx(), &rec.id, "spooled", &up, None, WriteMode::Overwrite)
        .await
        .unwrap();
    drop(up);
    assert!(!kept.exists(), "the transfer file outlived its upload");
    assert_eq!(
        m2.read_file(&ctx(), &rec.id, "spooled")
            .await
            .map_err(|e| e.code),
        Ok(vec![0, 0, 1, 1])
    );
}

#[test]
fn the_fake_is_the_backend_kind_it_was_given() {
    use stasis_backend::Backend;
    assert_eq!(FakeBackend::default().kind(), BackendKind::Process);
    assert_eq!(
        FakeBackend::new(BackendKind::Microvm).kind(),
        BackendKind::Microvm
    );
}

/// Two lifecycle changes at once: the slot lock orders them, the second
/// finds the state the first left and answers accordingly.
#[tokio::test]
async fn concurrent_lifecycle_changes_are_serialized() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let c = ctx();
    let (a, b) = tokio::join!(m.pause(&c, &rec.id, None), m.pause(&c, &rec.id, None));
    let codes: Vec<_> = [a.map(|_| ()), b.map(|_| ())]
        .into_iter()
        .map(|r| r.err().map(|e| e.code))
        .collect();
    assert!(codes.contains(&None), "{codes:?}");
    assert!(codes.contains(&Some(ErrorCode::InvalidState)), "{codes:?}");
    assert_eq!(state(&m, &rec.id).await, SandboxState::Paused);
    let (d, r) = tokio::join!(m.destroy(&c, &rec.id), m.resume(&c, &rec.id));
    // Destroy wins either way; a resume that came second found it destroyed.
    d.unwrap();
    assert_eq!(state(&m, &rec.id).await, SandboxState::Destroyed);
    if let Err(e) = r {
        assert_eq!(e.code, ErrorCode::InvalidState);
    }
    assert!(env.fake.held().is_empty());
}

/// Requests refused before anything is made: bad arguments, a backend not
/// enabled here, a restore onto another backend.
#[tokio::test]
async fn refused_requests_make_nothing() {
    let env = Env::process();
    let m = env.manager().await;
    let mut vm = manifest();
    vm.backend = Some(BackendKind::Microvm);
    assert_eq!(
        code(m.create(&ctx(), vm.clone()).await),
        ErrorCode::Unsupported
    );
    assert!(m.list(&ctx(), None).await.unwrap().is_empty());
    let rec = running(&m).await;
    assert_eq!(
        code(m.fork(&ctx(), &rec.id, 65).await),
        ErrorCode::InvalidArgument
    );
    let e = m
        .snapshot(&ctx(), &rec.id, Some(std::time::Duration::ZERO))
        .await;
    assert_eq!(code(e), ErrorCode::InvalidArgument);
    let snap = m.snapshot(&ctx(), &rec.id, None).await.unwrap();
    let e = m.restore(&ctx(), &snap.id, Some(vm)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert_eq!(e.field.as_deref(), Some("backend"));
    assert_eq!(m.list(&ctx(), None).await.unwrap().len(), 1);
    assert_eq!(env.fake.held(), vec![rec.id.clone()]);
}

/// A daemon restarted without the backend a sandbox runs on leaves it
/// alone (counted as skipped), and settles it once the backend is back.
#[tokio::test]
async fn reconcile_skips_sandboxes_of_a_backend_not_enabled() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    m.destroy(&ctx(), &running(&m).await.id).await.unwrap();
    drop(m);
    let other = Env::at(env.root.clone(), BackendKind::Microvm);
    let m = other.manager().await;
    let report = m.reconcile().await.unwrap();
    assert_eq!(report.skipped, 1, "{report:?}");
    assert!(report.changed.is_empty());
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
    drop(m);
    let m = env.manager().await;
    let report = m.reconcile().await.unwrap();
    assert_eq!(report.skipped, 0);
    assert_eq!(run(&m, &rec.id, &["get", "k"]).await, "memory\n");
}

/// Outputs of a running sandbox, and of a paused one (which this backend
/// cannot read where it lies: the manager resumes it first).
#[tokio::test]
async fn outputs_are_collected_resuming_a_paused_sandbox() {
    let env = Env::process();
    let m = env.manager().await;
    let mut man = manifest();
    man.outputs = vec!["/out".into()];
    let rec = running_with(&m, man).await;
    m.write_file(&ctx(), &rec.id, "/out/r.txt", b"result", None)
        .await
        .unwrap();
    let (path, n) = m.collect_outputs(&ctx(), &rec.id).await.unwrap();
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len() as u64, n);
    assert!(data.windows(6).any(|w| w == b"result"));
    std::fs::remove_file(&path).unwrap();
    m.pause(&ctx(), &rec.id, None).await.unwrap();
    let (path, _) = m.collect_outputs(&ctx(), &rec.id).await.unwrap();
    assert!(std::fs::read(&path)
        .unwrap()
        .windows(10)
        .any(|w| w == b"out/r.txt\0"));
    assert_eq!(state(&m, &rec.id).await, SandboxState::Running);
}
