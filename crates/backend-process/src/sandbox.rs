//! The daemon's record of its sandboxes: [`ProcessBackend`] (config,
//! cgroups and the table of sandboxes), each [`Sandbox`] (spec, cgroup,
//! sequence of exec leaves) and its run state ([`Run`]: stopped, or running
//! with its supervisor and PID 1, frozen or not).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stasis_agent_proto::{Reply, Request};
use stasis_backend::SandboxSpec;
use stasis_core::{Error, Result, SandboxId};

use crate::cgroup::{Cgroups, SandboxCgroup};
use crate::config::ProcessConfig;
use crate::rootfs::layer_root;
use crate::supervisor_client::{self, SupervisorHandle};

pub struct ProcessBackend {
    pub(crate) cfg: ProcessConfig,
    pub(crate) cg: std::result::Result<Cgroups, String>,
    pub(crate) sandboxes: Mutex<HashMap<SandboxId, Arc<Sandbox>>>,
}

impl ProcessBackend {
    pub fn new(cfg: ProcessConfig) -> Self {
        ProcessBackend {
            cg: Cgroups::detect(),
            cfg,
            sandboxes: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &ProcessConfig {
        &self.cfg
    }

    pub(crate) fn cgroups(&self) -> Result<&Cgroups> {
        self.cg
            .as_ref()
            .map_err(|e| Error::unsupported(format!("process backend: {e}")))
    }

    pub(crate) fn get(&self, id: &SandboxId) -> Result<Arc<Sandbox>> {
        self.sandboxes
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("sandbox {id}")))
    }

    pub(crate) fn sandbox_for(&self, spec: &SandboxSpec) -> Result<Arc<Sandbox>> {
        if !spec.dir.is_absolute() {
            return Err(Error::invalid(format!(
                "sandbox dir {} must be an absolute path",
                spec.dir.display()
            )));
        }
        let cg = self
            .cgroups()?
            .sandbox(&self.cfg.cgroup_parent, spec.id.as_str());
        let mut map = self.sandboxes.lock().unwrap();
        Ok(map
            .entry(spec.id.clone())
            .or_insert_with(|| {
                Arc::new(Sandbox {
                    spec: spec.clone(),
                    cg,
                    run: tokio::sync::Mutex::new(Run::Stopped),
                    // Exec leaves `x<N>` must not meet leaves left by an
                    // earlier daemon (its background processes survive a
                    // restart): start past any earlier counter.
                    seq: AtomicU64::new(stasis_core::now_ms() as u64 * 1000),
                })
            })
            .clone())
    }
}

#[allow(clippy::large_enum_variant)] // one per sandbox
pub(crate) enum Run {
    Stopped,
    Running {
        init_pid: i32,
        /// The sandbox's supervisor: owns PID 1's waiter and the sessions
        /// (see [`crate::supervisor`]); it outlives the daemon.
        sup: SupervisorHandle,
        /// pidfd of PID 1: readable once it has exited (even before reaped).
        init_fd: std::os::fd::OwnedFd,
        frozen: bool,
    },
}

pub(crate) struct Sandbox {
    pub(crate) spec: SandboxSpec,
    pub(crate) cg: SandboxCgroup,
    pub(crate) run: tokio::sync::Mutex<Run>,
    seq: AtomicU64,
}

impl Sandbox {
    pub(crate) fn upper(&self) -> PathBuf {
        layer_root(&self.spec).join("upper")
    }
    pub(crate) fn workdir(&self) -> &str {
        &self.spec.manifest.workdir
    }
    pub(crate) fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// PID 1 of a running, not frozen sandbox.
    pub(crate) async fn pid(&self) -> Result<i32> {
        let mut run = self.run.lock().await;
        match &mut *run {
            Run::Running { frozen: true, .. } => Err(Error::state("sandbox is paused")),
            Run::Running {
                sup,
                init_pid,
                init_fd,
                ..
            } => {
                if !sup.alive() {
                    Err(Error::backend(
                        "the sandbox's supervisor has died (its sessions ended); pause and resume the sandbox to restart it from its files, or destroy it",
                    ))
                } else if alive(sup, init_fd) {
                    Ok(*init_pid)
                } else {
                    Err(Error::backend(
                        "the sandbox's init process has died; resume or recreate it",
                    ))
                }
            }
            Run::Stopped => Err(Error::state("sandbox is not running")),
        }
    }

    /// PID 1 of a running sandbox, frozen or not (its root stays readable
    /// while frozen).
    pub(crate) async fn root_pid(&self) -> Result<i32> {
        let mut run = self.run.lock().await;
        match &mut *run {
            Run::Running {
                sup,
                init_pid,
                init_fd,
                ..
            } => {
                if alive(sup, init_fd) {
                    Ok(*init_pid)
                } else {
                    Err(Error::state("sandbox is not running"))
                }
            }
            Run::Stopped => Err(Error::state("sandbox is not running")),
        }
    }

    /// What `/proc/<init>/cgroup` of this sandbox's PID 1 contains: the shim
    /// checks it so a recycled pid can never lead an exec into the wrong
    /// namespaces.
    pub(crate) fn init_cgroup_marker(&self) -> String {
        crate::launch::init_cgroup_marker(&self.cg)
    }

    /// The supervisor of a running sandbox (frozen or not).
    pub(crate) async fn supervisor_call(&self, req: Request, wait: Duration) -> Result<Reply> {
        let run = self.run.lock().await;
        match &*run {
            Run::Running { sup, .. } => {
                let sup = sup.clone();
                drop(run);
                sup.call(req, wait).await
            }
            Run::Stopped => Err(Error::state("sandbox is not running")),
        }
    }
}

/// PID 1 and the supervisor both still run.
pub(crate) fn alive(sup: &SupervisorHandle, init_fd: &std::os::fd::OwnedFd) -> bool {
    sup.alive() && !supervisor_client::exited(init_fd)
}
