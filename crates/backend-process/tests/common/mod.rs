#![allow(dead_code)]
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_process::{ProcessBackend, ProcessConfig};
use stasis_core::{ExecRequest, ExecResult, Manifest, SandboxId};

pub struct Env {
    pub be: ProcessBackend,
    pub tmp: tempfile::TempDir,
    pub parent: String,
}

pub fn env(tag: &str) -> Env {
    env_with(tag, |_| {})
}

pub fn env_with(tag: &str, f: impl FnOnce(&mut ProcessConfig)) -> Env {
    let parent = format!("stasis-test-{tag}-{}", std::process::id());
    let mut cfg = ProcessConfig {
        shim_program: PathBuf::from(env!("CARGO_BIN_EXE_stasis-process-shim")),
        shim_args: vec![],
        cgroup_parent: parent.clone(),
        // The daemon's egress service, when the test runs on a runtime.
        egress: tokio::runtime::Handle::try_current().ok().map(|_| {
            // The network fixture's private network and host loopback
            // listeners, which egress refuses unless the operator opens them.
            let svc = stasis_net::EgressService::new(stasis_net::EgressConfig {
                allow_private: true,
                expose: vec!["127.0.0.1".into()],
                ..Default::default()
            })
            .unwrap();
            std::sync::Arc::new(svc) as std::sync::Arc<dyn stasis_backend::Egress>
        }),
        ..Default::default()
    };
    f(&mut cfg);
    Env {
        be: ProcessBackend::new(cfg),
        tmp: tempfile::tempdir().unwrap(),
        parent,
    }
}

impl Env {
    pub fn spec(&self, manifest: Manifest) -> SandboxSpec {
        let id = SandboxId::generate();
        let dir = self.tmp.path().join("sandboxes").join(id.as_str());
        std::fs::create_dir_all(&dir).unwrap();
        SandboxSpec { id, manifest, dir }
    }

    pub async fn create(&self) -> SandboxSpec {
        let spec = self.spec(Manifest::default());
        self.be.create(&spec).await.unwrap();
        spec
    }

    /// Every cgroup dir of this test's parent, in all hierarchies.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        for e in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            let p = e.path().join(&self.parent);
            if let Ok(rd) = std::fs::read_dir(&p) {
                for s in rd.flatten() {
                    if !s.path().is_dir() {
                        continue;
                    }
                    // The supervisors' directory: count what is inside.
                    if s.file_name() == stasis_backend_process::cgroup::SUPERVISORS {
                        for x in std::fs::read_dir(s.path()).into_iter().flatten().flatten() {
                            if x.path().is_dir() {
                                v.push(x.path());
                            }
                        }
                        continue;
                    }
                    v.push(s.path());
                }
            }
        }
        v
    }

    pub fn cleanup_parent(&self) {
        for e in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            let p = e.path().join(&self.parent);
            let _ = std::fs::remove_dir(p.join(stasis_backend_process::cgroup::SUPERVISORS));
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// A failing test must not leave sandboxes behind: kill whatever is in this
/// test's cgroup parent and remove it.
impl Drop for Env {
    fn drop(&mut self) {
        let Ok(cg) = stasis_backend_process::cgroup::Cgroups::detect() else {
            return;
        };
        for name in cg.list_sandboxes(&self.parent) {
            let _ = cg.sandbox(&self.parent, &name).destroy();
        }
        let sups = format!(
            "{}/{}",
            self.parent,
            stasis_backend_process::cgroup::SUPERVISORS
        );
        for name in cg.list_sandboxes(&sups) {
            let _ = cg.supervisor(&self.parent, &name).destroy();
        }
        self.cleanup_parent();
        stasis_backend_process::net::cleanup_legacy(&self.parent);
        // Quota filesystems of sandboxes a failing test did not destroy.
        let _ =
            stasis_backend_process::disk::unmount_stale(&self.tmp.path().join("sandboxes"), &[]);
    }
}

pub fn req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        timeout_ms: 20_000,
        stdin: None,
        user: None,
    }
}

pub fn sh(cmd: &str) -> ExecRequest {
    req(&["/bin/sh", "-c", cmd])
}

pub async fn run(e: &Env, spec: &SandboxSpec, r: ExecRequest) -> ExecResult {
    e.be.exec(&spec.id, r, None).await.unwrap()
}

pub fn out(r: &ExecResult) -> String {
    String::from_utf8_lossy(&r.stdout).into_owned()
}

pub fn wait() -> Duration {
    Duration::from_secs(5)
}

/// Pids of host processes whose cmdline contains `needle`.
pub fn host_pids_with(needle: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let s = String::from_utf8_lossy(&c).replace('\0', " ");
            if s.contains(needle) {
                v.push(pid);
            }
        }
    }
    v
}
