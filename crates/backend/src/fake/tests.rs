use super::*;
use stasis_core::Manifest;

fn spec(dir: &Path) -> SandboxSpec {
    SandboxSpec {
        id: SandboxId::generate(),
        manifest: Manifest::default(),
        dir: dir.to_path_buf(),
    }
}

fn req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: Default::default(),
        cwd: None,
        timeout_ms: 1000,
        stdin: None,
        user: None,
    }
}

async fn run(b: &FakeBackend, id: &SandboxId, argv: &[&str]) -> ExecResult {
    b.exec(id, req(argv), None).await.unwrap()
}

#[test]
fn paths_resolve_inside_the_sandbox() {
    assert_eq!(resolve("/work", "a/b").unwrap(), "/work/a/b");
    assert_eq!(resolve("/work", "/etc/x").unwrap(), "/etc/x");
    assert_eq!(resolve("/work", "../../../x").unwrap(), "/x");
    assert_eq!(resolve("/work", "./a/./b/..").unwrap(), "/work/a");
    assert!(resolve("/work", "").is_err());
}

#[tokio::test]
async fn exec_files_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let b = FakeBackend::default();
    let s = spec(dir.path());
    b.create(&s).await.unwrap();
    assert_eq!(
        run(&b, &s.id, &["echo", "hi", "there"]).await.stdout,
        b"hi there\n"
    );
    assert_eq!(run(&b, &s.id, &["true"]).await.exit_code, Some(0));
    assert_eq!(run(&b, &s.id, &["false"]).await.exit_code, Some(1));
    assert_eq!(run(&b, &s.id, &["nope"]).await.exit_code, Some(127));
    b.write_file(&s.id, "a.txt", b"data", None).await.unwrap();
    assert_eq!(run(&b, &s.id, &["cat", "a.txt"]).await.stdout, b"data");
    assert_eq!(run(&b, &s.id, &["cat", "missing"]).await.exit_code, Some(1));
    run(&b, &s.id, &["write", "sub/b.txt", "x", "y"]).await;
    assert_eq!(
        b.read_file(&s.id, "/workspace/sub/b.txt", 100)
            .await
            .unwrap(),
        b"x y"
    );
    let e = b.read_file(&s.id, "sub/b.txt", 1).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    let names: Vec<_> = b
        .list_files(&s.id, ".")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert_eq!(
        names,
        vec![
            ("a.txt".into(), FileKind::File),
            ("sub".into(), FileKind::Dir)
        ]
    );
    run(&b, &s.id, &["set", "k", "v"]).await;
    assert_eq!(run(&b, &s.id, &["get", "k"]).await.stdout, b"v\n");
    let r = b
        .exec(
            &s.id,
            ExecRequest {
                timeout_ms: 20,
                ..req(&["sleep", "5"])
            },
            None,
        )
        .await
        .unwrap();
    assert!(r.timed_out && r.exit_code.is_none());
    let (tx, mut rx) = mpsc::channel(4);
    let r = b.exec(&s.id, req(&["echo", "x"]), Some(tx)).await.unwrap();
    assert!(r.stdout.is_empty());
    assert_eq!(rx.recv().await.unwrap().data, b"x\n");
    let u = b.usage(&s.id).await.unwrap();
    assert!(u.rss_bytes > 0 && u.host_processes == 1);
}

#[tokio::test]
async fn sessions_echo_and_end() {
    let dir = tempfile::tempdir().unwrap();
    let b = FakeBackend::default();
    let s = spec(dir.path());
    b.create(&s).await.unwrap();
    let cat = SessionSpec {
        argv: vec!["cat".into()],
        env: Default::default(),
        cwd: None,
        pty: None,
        user: None,
    };
    let info = b.session_start(&s.id, cat.clone()).await.unwrap();
    assert!(info.running);
    b.session_write(&s.id, &info.id, b"abc").await.unwrap();
    let out = b
        .session_read(&s.id, &info.id, 1, Duration::from_millis(10))
        .await
        .unwrap();
    assert_eq!((out.data.as_slice(), out.next_offset), (&b"bc"[..], 3));
    b.session_kill(&s.id, &info.id, Default::default())
        .await
        .unwrap();
    let echo = SessionSpec {
        argv: vec!["echo".into(), "done".into()],
        ..cat
    };
    let e = b.session_start(&s.id, echo).await.unwrap();
    assert!(!e.running && e.exit_code == Some(0));
    let list = b.session_list(&s.id).await.unwrap();
    assert!(list.iter().all(|s| !s.running) && list.len() == 2);
}

#[tokio::test]
async fn pause_writes_artifacts_and_resume_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let b = FakeBackend::default();
    let s = spec(dir.path());
    b.create(&s).await.unwrap();
    b.write_file(&s.id, "f", b"1", None).await.unwrap();
    run(&b, &s.id, &["set", "k", "v"]).await;
    let out = dir.path().join("stage");
    std::fs::create_dir(&out).unwrap();
    let arts = b.pause(&s.id, &out, true).await.unwrap();
    let names: Vec<_> = arts.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, [FS_ARTIFACT, MEMORY_ARTIFACT, META_ARTIFACT]);
    for a in &arts {
        assert_eq!(std::fs::metadata(out.join(&a.name)).unwrap().len(), a.size);
    }
    assert_eq!(b.recover(&s).await.unwrap(), Recovered::NotRunning);
    assert!(
        b.sandbox(&s.id).unwrap().files.is_empty(),
        "state moved out"
    );
    assert!(b.exec(&s.id, req(&["true"]), None).await.is_err());
    b.resume(&s, &out).await.unwrap();
    assert_eq!(run(&b, &s.id, &["cat", "f"]).await.stdout, b"1");
    assert_eq!(run(&b, &s.id, &["get", "k"]).await.stdout, b"v\n");
    // A filesystem pause keeps files, not memory.
    let out2 = dir.path().join("stage2");
    std::fs::create_dir(&out2).unwrap();
    b.pause(&s.id, &out2, false).await.unwrap();
    b.resume(&s, &out2).await.unwrap();
    assert_eq!(run(&b, &s.id, &["cat", "f"]).await.stdout, b"1");
    assert_eq!(run(&b, &s.id, &["get", "k"]).await.exit_code, Some(1));
    // Corrupted artifacts do not verify.
    let out3 = dir.path().join("stage3");
    std::fs::create_dir(&out3).unwrap();
    b.pause(&s.id, &out3, true).await.unwrap();
    std::fs::write(out3.join(FS_ARTIFACT), b"{}").unwrap();
    let e = b.resume(&s, &out3).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError);
}

#[tokio::test]
async fn snapshot_restores_into_a_new_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let b = FakeBackend::new(BackendKind::Microvm);
    assert_eq!(b.kind(), BackendKind::Microvm);
    let s = spec(dir.path());
    b.create(&s).await.unwrap();
    b.write_file(&s.id, "f", b"1", None).await.unwrap();
    b.snapshot(&s.id, dir.path()).await.unwrap();
    let child = spec(dir.path());
    b.restore(&child, dir.path()).await.unwrap();
    assert_eq!(run(&b, &child.id, &["cat", "f"]).await.stdout, b"1");
    assert_eq!(run(&b, &s.id, &["cat", "f"]).await.stdout, b"1");
    b.destroy(&child.id, dir.path()).await.unwrap();
    b.destroy(&child.id, dir.path()).await.unwrap();
    assert_eq!(b.held(), vec![s.id.clone()]);
    b.cleanup_orphans(&[]).await.unwrap();
    assert!(b.held().is_empty());
}

#[tokio::test]
async fn faults_fail_or_hang_once_and_compute_can_be_lost() {
    let dir = tempfile::tempdir().unwrap();
    let b = FakeBackend::default();
    let s = spec(dir.path());
    b.fail_at("create", ErrorCode::BackendError);
    let e = b.create(&s).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BackendError);
    assert!(b.held().is_empty());
    b.create(&s).await.unwrap();
    b.crash_at("exec.done");
    let hung = tokio::time::timeout(
        Duration::from_millis(50),
        run(&b, &s.id, &["set", "a", "1"]),
    );
    assert!(hung.await.is_err(), "a crash never answers");
    assert_eq!(b.crashes(), vec!["exec.done".to_string()]);
    // The effect before the crash point was made; the next call answers.
    assert_eq!(run(&b, &s.id, &["get", "a"]).await.stdout, b"1\n");
    // A clone is the same backend (a second manager's view).
    let again = b.clone();
    b.write_file(&s.id, "f", b"x", None).await.unwrap();
    again.lose_compute();
    assert_eq!(b.recover(&s).await.unwrap(), Recovered::NotRunning);
    let left = b.pause_leftovers(&s, dir.path()).await.unwrap();
    assert!(left.files_kept && left.artifacts.is_none());
    // Resume with no artifacts rebuilds from the files on the host.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    b.resume(&s, &empty).await.unwrap();
    assert_eq!(run(&b, &s.id, &["cat", "f"]).await.stdout, b"x");
    assert_eq!(run(&b, &s.id, &["get", "a"]).await.exit_code, Some(1));
    assert!(b.calls().contains(&"pause_leftovers".to_string()));
    b.set_unavailable(Some("off"));
    assert!(!b.capabilities().available);
}

#[tokio::test]
async fn a_lost_microvm_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let b = FakeBackend::new(BackendKind::Microvm);
    let s = spec(dir.path());
    b.create(&s).await.unwrap();
    b.write_file(&s.id, "f", b"x", None).await.unwrap();
    b.lose_compute();
    let left = b.pause_leftovers(&s, dir.path()).await.unwrap();
    assert!(!left.files_kept);
    let e = b.resume(&s, dir.path()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BackendError);
}

#[tokio::test]
async fn outputs_are_collected_as_a_tar() {
    let dir = tempfile::tempdir().unwrap();
    let b = FakeBackend::default();
    let mut s = spec(dir.path());
    s.manifest.outputs = vec!["/out".into()];
    b.create(&s).await.unwrap();
    b.write_file(&s.id, "/out/sub/r.txt", b"result", None)
        .await
        .unwrap();
    b.write_file(&s.id, "/elsewhere", b"no", None)
        .await
        .unwrap();
    let tar_path = dir.path().join("out.tar");
    let n = b.collect_outputs(&s.id, &tar_path).await.unwrap();
    assert_eq!(n, std::fs::metadata(&tar_path).unwrap().len());
    let mut names = Vec::new();
    let mut ar = tar::Archive::new(std::fs::File::open(&tar_path).unwrap());
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().display().to_string();
        if name == "out/sub/r.txt" {
            let mut data = String::new();
            std::io::Read::read_to_string(&mut e, &mut data).unwrap();
            assert_eq!(data, "result");
        }
        names.push(name);
    }
    assert_eq!(names, ["out", "out/sub", "out/sub/r.txt"]);
}
