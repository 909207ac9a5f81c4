//! Templates on the fake backend: versions and what each one restores,
//! another tenant's templates not found, the snapshot of a version kept
//! through expiry and GC while it exists, and the secret scan refusing a
//! sandbox whose memory or a session holds a tenant secret.

use super::harness::*;
use stasis_control::{Ctx, Manager, SnapshotKind};
use stasis_core::{BackendKind, ErrorCode, Manifest, SessionSpec, TenantId};

fn other_tenant() -> Ctx {
    Ctx {
        tenant: TenantId::parse("t-other").unwrap(),
        actor: "intruder".into(),
    }
}

/// Register a secret of the default tenant (sealed, as the admin API does).
async fn secret(m: &Manager, name: &str, value: &str) {
    let t = ctx().tenant;
    m.meta().ensure_tenant(&t, "default").await.unwrap();
    let sealed = m
        .snapshots()
        .store()
        .seal_secret(&t, name, value.as_bytes());
    m.meta().put_secret(&t, name, &sealed).await.unwrap();
}

#[tokio::test]
async fn versions_restore_what_they_captured_and_stay_in_their_tenant() {
    let env = Env::process();
    let m = env.manager().await;
    let src = running(&m).await;
    let v1 = m.create_template(&ctx(), "py", &src.id).await.unwrap();
    assert_eq!(v1.version, 1);
    assert_eq!(v1.manifest_digest, src.manifest_digest);
    assert_eq!(v1.backend, BackendKind::Process);
    assert_eq!(v1.source_sandbox.as_ref(), Some(&src.id));
    let snap = m.get_snapshot(&ctx(), &v1.snapshot).await.unwrap();
    assert_eq!(snap.kind, SnapshotKind::Template);
    assert_eq!(
        snap.expires_at_ms, None,
        "a template's snapshot never expires"
    );

    // The source changes; version 2 captures the change.
    run(&m, &src.id, &["set", "k", "changed"]).await;
    m.write_file(&ctx(), &src.id, "g", b"two", None)
        .await
        .unwrap();
    let v2 = m.create_template(&ctx(), "py", &src.id).await.unwrap();
    assert_eq!(v2.version, 2);

    // The latest by default: files and memory of version 2.
    let a = m.create_from_template(&ctx(), "py", None).await.unwrap();
    assert_eq!(a.source_snapshot.as_ref(), Some(&v2.snapshot));
    assert_eq!(a.manifest_digest, v2.manifest_digest);
    assert_eq!(run(&m, &a.id, &["get", "k"]).await, "changed\n");
    assert_eq!(run(&m, &a.id, &["cat", "g"]).await, "two");
    // A pinned version: version 1's state.
    let b = m.create_from_template(&ctx(), "py:1", None).await.unwrap();
    assert_eq!(run(&m, &b.id, &["get", "k"]).await, "memory\n");
    assert_eq!(exit_of(&m, &b.id, &["cat", "g"]).await, Some(1));
    // The sandboxes are independent of the template and of each other.
    run(&m, &a.id, &["set", "k", "mine"]).await;
    let c = m.create_from_template(&ctx(), "py:2", None).await.unwrap();
    assert_eq!(run(&m, &c.id, &["get", "k"]).await, "changed\n");

    let all = m.list_templates(&ctx()).await.unwrap();
    assert_eq!(
        all.iter().map(|t| t.version).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(m.template_versions(&ctx(), "py").await.unwrap(), all);

    // Another tenant: nothing to see, start from or delete.
    let o = other_tenant();
    assert!(m.list_templates(&o).await.unwrap().is_empty());
    assert_eq!(
        code(m.template_versions(&o, "py").await),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(m.create_from_template(&o, "py", None).await),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(m.delete_template(&o, "py", None).await),
        ErrorCode::NotFound
    );
    // Nor template another tenant's sandbox.
    assert_eq!(
        code(m.create_template(&o, "mine", &src.id).await),
        ErrorCode::NotFound
    );

    // Bad references and names: 400 naming the field; unknown: 404.
    for bad in ["Py", "py:0", "py:x", "", "a/b"] {
        let e = m.create_from_template(&ctx(), bad, None).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        assert_eq!(e.field.as_deref(), Some("template"), "{bad}");
    }
    let e = m
        .create_template(&ctx(), "Bad Name", &src.id)
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.field.as_deref()),
        (ErrorCode::InvalidArgument, Some("name"))
    );
    for missing in ["py:3", "nope"] {
        assert_eq!(
            code(m.create_from_template(&ctx(), missing, None).await),
            ErrorCode::NotFound,
            "{missing}"
        );
    }

    // A manifest given with the template is checked as a restore checks it.
    let other_backend = Manifest {
        backend: Some(BackendKind::Microvm),
        ..Default::default()
    };
    let e = m
        .create_from_template(&ctx(), "py", Some(other_backend))
        .await
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("backend"), "{e:?}");
    let mut with_env = Manifest::default();
    with_env.env.insert("MODE".into(), "fast".into());
    let d = m
        .create_from_template(&ctx(), "py", Some(with_env))
        .await
        .unwrap();
    assert_eq!(run(&m, &d.id, &["env", "MODE"]).await, "fast\n");
    assert_eq!(run(&m, &d.id, &["get", "k"]).await, "changed\n");

    // Audited: the publication and the creates from it.
    let audit = m
        .meta()
        .audit_list(Some(&ctx().tenant), None, 200)
        .await
        .unwrap();
    let text = serde_json::to_string(&audit).unwrap();
    assert!(text.contains("template_create"), "{text}");
    assert!(text.contains("\"template\":\"py:1\""), "{text}");
}

#[tokio::test]
async fn a_versions_snapshot_outlives_expiry_and_gc_until_the_version_goes() {
    let env = Env::process();
    let m = env.manager().await;
    let src = running(&m).await;
    let v1 = m.create_template(&ctx(), "base", &src.id).await.unwrap();
    let v2 = m.create_template(&ctx(), "base", &src.id).await.unwrap();
    // An ordinary snapshot with a TTL, for contrast.
    let plain = m
        .snapshot(&ctx(), &src.id, Some(std::time::Duration::from_secs(1)))
        .await
        .unwrap();
    // The source goes: the template does not depend on it.
    m.destroy(&ctx(), &src.id).await.unwrap();

    // GC as if far in the future, with no grace for unreferenced chunks.
    let opts = stasis_store::GcOptions {
        grace_ms: 0,
        ..Default::default()
    };
    let far = stasis_core::now_ms() + 100 * 365 * 24 * 3600 * 1000;
    let rep = m.snapshots().store().gc_with(far, &opts).await.unwrap();
    assert!(rep.errors.is_empty(), "{rep:?}");
    assert!(!stored(&m, &plain.id).await, "the plain snapshot expired");
    assert!(stored(&m, &v1.snapshot).await && stored(&m, &v2.snapshot).await);
    let s = m
        .create_from_template(&ctx(), "base:1", None)
        .await
        .unwrap();
    assert_eq!(run(&m, &s.id, &["cat", "f"]).await, "files");

    // Its snapshot cannot be deleted from under it.
    let e = m.delete_snapshot(&ctx(), &v1.snapshot).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.message.contains("base:1"), "{e:?}");

    // Deleting a version deletes its snapshot; the other version stays.
    let gone = m.delete_template(&ctx(), "base", Some(1)).await.unwrap();
    assert_eq!(gone.len(), 1);
    assert!(!stored(&m, &v1.snapshot).await);
    assert_eq!(
        code(m.delete_template(&ctx(), "base", Some(1)).await),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(m.create_from_template(&ctx(), "base:1", None).await),
        ErrorCode::NotFound
    );
    // The sandbox started from it lives on.
    assert_eq!(run(&m, &s.id, &["cat", "f"]).await, "files");
    // A new version gets a new number, never 1 again.
    let src2 = running(&m).await;
    let v3 = m.create_template(&ctx(), "base", &src2.id).await.unwrap();
    assert_eq!(v3.version, 3);
    // Deleting the name deletes every version's snapshot.
    assert_eq!(
        m.delete_template(&ctx(), "base", None).await.unwrap().len(),
        2
    );
    assert!(!stored(&m, &v2.snapshot).await && !stored(&m, &v3.snapshot).await);
    assert!(m.list_templates(&ctx()).await.unwrap().is_empty());
    assert_eq!(
        code(m.delete_template(&ctx(), "base", None).await),
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn template_snapshots_no_version_holds_are_swept_after_the_grace() {
    let env = Env::process();
    let m = env.manager().await;
    let src = running(&m).await;
    let kept = m.create_template(&ctx(), "kept", &src.id).await.unwrap();
    let lost = m.create_template(&ctx(), "lost", &src.id).await.unwrap();
    let user = m.snapshot(&ctx(), &src.id, None).await.unwrap();
    // The version goes but its snapshot stays (a delete that failed half-way).
    m.meta()
        .delete_template(&ctx().tenant, "lost", None)
        .await
        .unwrap();
    // Within the grace nothing goes (a publication may be in flight).
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(m.sweep_template_orphans(hour).await.unwrap(), 0);
    assert!(stored(&m, &lost.snapshot).await);
    // After it, only the orphan goes: not a live version's, not a user snapshot.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let none = std::time::Duration::ZERO;
    assert_eq!(m.sweep_template_orphans(none).await.unwrap(), 1);
    assert!(!stored(&m, &lost.snapshot).await);
    assert!(stored(&m, &kept.snapshot).await && stored(&m, &user.id).await);
    assert_eq!(m.sweep_template_orphans(none).await.unwrap(), 0);
}

#[tokio::test]
async fn a_secret_in_memory_or_in_a_session_refuses_the_template() {
    let env = Env::process();
    let m = env.manager().await;
    let value = "sk-test-4f1c9b7e2a";
    secret(&m, "API_KEY", value).await;
    secret(&m, "UNUSED", "another-secret-value").await;
    let man = Manifest {
        secrets: vec!["API_KEY".into()],
        ..Default::default()
    };
    let snapshots_before = m.list_snapshots(&ctx()).await.unwrap().len();

    // 1. A value the sandbox keeps in its memory state. (A file holding it
    //    is refused on the real process backend, crates/cli/tests/templates.rs:
    //    this backend's file layer stores bytes as JSON numbers.)
    let a = m.create(&ctx(), man.clone()).await.unwrap();
    run(&m, &a.id, &["set", "leak", value]).await;
    let e = m.create_template(&ctx(), "leaky", &a.id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{e:?}");
    assert!(e.message.contains("API_KEY"), "names the secret: {e:?}");
    assert!(!e.message.contains(value), "never its value: {e:?}");
    assert!(e.message.contains("memory.json"), "and the artifact: {e:?}");
    // Nothing was kept: no template, no snapshot, no stage left behind.
    assert_eq!(
        code(m.template_versions(&ctx(), "leaky").await),
        ErrorCode::NotFound
    );
    assert_eq!(
        m.list_snapshots(&ctx()).await.unwrap().len(),
        snapshots_before
    );
    let dir = env.data_dir().join("sandboxes").join(a.id.as_str());
    assert!(!dir.join("template-stage").exists());
    // The refusal is audited, without the value.
    let audit = m
        .meta()
        .audit_list(Some(&ctx().tenant), None, 200)
        .await
        .unwrap();
    let text = serde_json::to_string(&audit).unwrap();
    assert!(
        text.contains("template_create") && !text.contains(value),
        "{text}"
    );
    // Once the value is gone (overwritten), the template is accepted.
    run(&m, &a.id, &["set", "leak", "nothing"]).await;
    let ok = m.create_template(&ctx(), "leaky", &a.id).await.unwrap();
    assert_eq!(ok.version, 1);

    // 2. A session whose command line carries it (the fake keeps a
    //    session's argv in its memory image; a session holding it in its
    //    environment is refused on the microVM backend, crates/cli/tests).
    let b = m.create(&ctx(), man.clone()).await.unwrap();
    m.session_start(
        &ctx(),
        &b.id,
        SessionSpec {
            argv: vec!["echo".into(), value.into()],
            env: Default::default(),
            cwd: None,
            pty: None,
            user: None,
        },
    )
    .await
    .unwrap();
    let e = m.create_template(&ctx(), "warm", &b.id).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{e:?}");
    assert!(
        e.message.contains("API_KEY") && e.message.contains("memory.json"),
        "{e:?}"
    );
    assert!(!e.message.contains(value));
    assert_eq!(
        code(m.template_versions(&ctx(), "warm").await),
        ErrorCode::NotFound
    );
    assert_eq!(
        m.list_snapshots(&ctx()).await.unwrap().len(),
        snapshots_before + 1
    );
    // The sandbox itself is untouched and still gets its secret per exec.
    assert_eq!(
        run(&m, &b.id, &["env", "API_KEY"]).await,
        format!("{value}\n")
    );

    // 3. A sandbox whose manifest names the secret but holds it nowhere:
    //    accepted, and a sandbox from it still gets the secret per exec.
    let c = m.create(&ctx(), man).await.unwrap();
    run(&m, &c.id, &["set", "clean", "no secrets here"]).await;
    let t = m.create_template(&ctx(), "clean", &c.id).await.unwrap();
    let d = m.create_from_template(&ctx(), "clean", None).await.unwrap();
    assert_eq!(
        run(&m, &d.id, &["env", "API_KEY"]).await,
        format!("{value}\n")
    );
    assert_eq!(t.manifest_digest, d.manifest_digest);
}
