//! A manager on the fake backend in a temporary directory: meta (SQLite),
//! snapshot store and sandbox dirs live in it, the backend's state in a
//! shared [`FakeBackend`] handle, so a test can drop a manager (a killed
//! daemon) and start another on what the first left.

use std::sync::Arc;
use std::time::Duration;

use stasis_backend::fake::FakeBackend;
use stasis_backend::Backend;
use stasis_control::{Ctx, Manager, ManagerConfig, Snapshots};
use stasis_core::{
    BackendKind, ErrorCode, ExecRequest, Manifest, OnIdle, Result, SandboxId, SandboxState,
    TenantId,
};
use stasis_meta::{Meta, SandboxRecord};
use stasis_store::{MasterKey, Store};

pub struct Env {
    pub root: std::path::PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub fake: FakeBackend,
}

impl Env {
    pub fn new(kind: BackendKind) -> Env {
        let tmp = tempfile::tempdir().unwrap();
        Env {
            root: tmp.path().to_path_buf(),
            _tmp: Some(tmp),
            fake: FakeBackend::new(kind),
        }
    }

    /// On a directory another process made (kept when this is dropped).
    pub fn at(root: std::path::PathBuf, kind: BackendKind) -> Env {
        Env {
            root,
            _tmp: None,
            fake: FakeBackend::new(kind),
        }
    }

    pub fn process() -> Env {
        Env::new(BackendKind::Process)
    }

    pub fn data_dir(&self) -> std::path::PathBuf {
        self.root.join("data")
    }

    /// The meta database as a restarted daemon finds it.
    pub async fn meta(&self) -> Meta {
        Meta::open(&self.data_dir().join("meta.db")).await.unwrap()
    }

    /// The state meta holds of `id` (what a restarted daemon reads first).
    pub async fn persisted(&self, id: &SandboxId) -> SandboxState {
        self.meta().await.get(id).await.unwrap().state
    }

    /// A fresh manager (a daemon start) on this directory and backend state.
    pub async fn manager(&self) -> Arc<Manager> {
        self.manager_with(|_| {}).await
    }

    pub async fn manager_with(&self, tweak: impl FnOnce(&mut ManagerConfig)) -> Arc<Manager> {
        let data = self.data_dir();
        std::fs::create_dir_all(data.join("sandboxes")).unwrap();
        std::fs::create_dir_all(data.join("store")).unwrap();
        let meta = Meta::open(&data.join("meta.db")).await.unwrap();
        let store = Store::open(
            &format!("file://{}", data.join("store").display()),
            MasterKey::insecure_dev(),
        )
        .await
        .unwrap();
        let mut cfg = ManagerConfig::new(data);
        cfg.default_backend = self.fake.kind();
        cfg.gc_interval = Duration::from_secs(3600);
        tweak(&mut cfg);
        let backend: Arc<dyn Backend> = Arc::new(self.fake.clone());
        Manager::new(cfg, meta, Snapshots::new(store), vec![backend])
    }
}

pub fn ctx() -> Ctx {
    Ctx {
        tenant: TenantId::parse("t-default").unwrap(),
        actor: "test".into(),
    }
}

pub fn manifest() -> Manifest {
    Manifest::default()
}

/// A manifest whose idle policy is `on_idle` after one second, paused
/// sandboxes expiring one second after their pause.
pub fn short_lived(on_idle: OnIdle) -> Manifest {
    let mut m = Manifest::default();
    m.lifecycle.idle_timeout_secs = 1;
    m.lifecycle.on_idle = on_idle;
    m.lifecycle.paused_ttl_secs = 1;
    m
}

pub fn req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: Default::default(),
        cwd: None,
        timeout_ms: 5000,
        stdin: None,
        user: None,
    }
}

/// Stdout of a successful exec, as text.
pub async fn run(m: &Manager, id: &SandboxId, argv: &[&str]) -> String {
    let r = m.exec(&ctx(), id, req(argv), None).await.unwrap();
    assert_eq!(r.exit_code, Some(0), "{argv:?}: {r:?}");
    String::from_utf8(r.stdout).unwrap()
}

/// Exit code of an exec.
pub async fn exit_of(m: &Manager, id: &SandboxId, argv: &[&str]) -> Option<i32> {
    m.exec(&ctx(), id, req(argv), None).await.unwrap().exit_code
}

/// A running sandbox with a file `f` = "files" and memory `k` = "memory".
pub async fn running(m: &Manager) -> SandboxRecord {
    running_with(m, manifest()).await
}

pub async fn running_with(m: &Manager, manifest: Manifest) -> SandboxRecord {
    let rec = m.create(&ctx(), manifest).await.unwrap();
    assert_eq!(rec.state, SandboxState::Running);
    m.write_file(&ctx(), &rec.id, "f", b"files", None)
        .await
        .unwrap();
    run(m, &rec.id, &["set", "k", "memory"]).await;
    rec
}

/// The state meta holds (what a restarted daemon would read).
pub async fn state(m: &Manager, id: &SandboxId) -> SandboxState {
    m.meta().get(id).await.unwrap().state
}

pub async fn record(m: &Manager, id: &SandboxId) -> SandboxRecord {
    m.meta().get(id).await.unwrap()
}

/// The error code of a call that must fail.
pub fn code<T: std::fmt::Debug>(r: Result<T>) -> ErrorCode {
    r.expect_err("must fail").code
}

/// Run `op` until the fake's crash point makes it hang, then drop it (the
/// daemon was killed there). Panics if `op` answered instead.
pub async fn crash<T: std::fmt::Debug>(
    fake: &FakeBackend,
    op: impl std::future::Future<Output = T>,
) {
    let before = fake.crashes().len();
    let reached = async {
        while fake.crashes().len() == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Let anything else the op does without the backend run out.
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::select! {
        r = op => panic!("the operation answered instead of crashing: {r:?}"),
        _ = tokio::time::timeout(Duration::from_secs(10), reached) => {}
    }
    assert_eq!(fake.crashes().len(), before + 1, "crash point reached");
}

/// A snapshot is in the store.
pub async fn stored(m: &Manager, id: &stasis_core::SnapshotId) -> bool {
    m.snapshots().get(&ctx().tenant, id).await.is_ok()
}
