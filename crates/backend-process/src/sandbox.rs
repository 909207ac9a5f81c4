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
    /// How long each frozen sandbox stays on the host (see [`crate::hold`]).
    pub(crate) holds: Holds,
}

impl ProcessBackend {
    pub fn new(cfg: ProcessConfig) -> Self {
        ProcessBackend {
            cg: Cgroups::detect(),
            cfg,
            sandboxes: Mutex::new(HashMap::new()),
            holds: Default::default(),
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

    /// Where a sandbox's cgroup is: under this daemon's own group; or, for
    /// a sandbox made before daemons had one (it runs on across the
    /// upgrade), directly under the shared parent, when it is there and
    /// not in the own group. Only sandboxes this daemon knows (its own
    /// metadata names them) are ever looked up, and sandbox ids are random:
    /// the old place of a known id is this daemon's.
    pub(crate) fn cgroup_of(&self, id: &str) -> Result<SandboxCgroup> {
        let cgs = self.cgroups()?;
        let own = cgs.sandbox(&self.cfg.own_cgroup(), id);
        if !own.exists() {
            if let Some(old) = self.legacy_cgroups(id).into_iter().next() {
                if old.exists() {
                    return Ok(old);
                }
            }
        }
        Ok(own)
    }

    /// The cgroups a sandbox of this daemon had before daemons had a group
    /// of their own (`<cgroup-parent>/<id>` and
    /// `<cgroup-parent>/.supervisors/<id>`); none when the backend owns the
    /// whole parent (the places are then the same).
    pub(crate) fn legacy_cgroups(&self, id: &str) -> Vec<SandboxCgroup> {
        match (&self.cfg.daemon_id, self.cg.as_ref()) {
            (Some(_), Ok(cgs)) => vec![
                cgs.sandbox(&self.cfg.cgroup_parent, id),
                cgs.supervisor(&self.cfg.cgroup_parent, id),
            ],
            _ => Vec::new(),
        }
    }

    /// At the daemon's stop: remove the empty groups of its own (those of
    /// sandboxes that outlive it stay).
    pub fn release_cgroups(&self) {
        if let Ok(cgs) = &self.cg {
            cgs.remove_empty(&self.cfg.own_cgroup());
        }
    }

    /// Kill and remove every sandbox and supervisor in this daemon's own
    /// group, the group itself, and the quota filesystems under its state
    /// dir: for a temporary daemon (`stasis demo`, `stasis bench`) whose
    /// data dir goes with it, so that nobody would reconcile what it left.
    pub fn destroy_owned(&self) {
        if let Ok(cgs) = &self.cg {
            let own = self.cfg.own_cgroup();
            if let Err(e) = cgs.destroy_except(&own, &[]) {
                tracing::warn!("remove the cgroups of {own}: {e}");
            }
            cgs.remove_empty(&own);
        }
        if let Some(dir) = &self.cfg.state_dir {
            let _ = crate::disk::unmount_stale(dir, &[]);
        }
    }

    pub(crate) fn sandbox_for(&self, spec: &SandboxSpec) -> Result<Arc<Sandbox>> {
        if !spec.dir.is_absolute() {
            return Err(Error::invalid(format!(
                "sandbox dir {} must be an absolute path",
                spec.dir.display()
            )));
        }
        let cg = self.cgroup_of(spec.id.as_str())?;
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

/// A frozen sandbox's hold on the host (see [`crate::hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub since_ms: i64,
    /// When its processes end; None: kept until resumed or destroyed
    /// (`lifecycle.keep_frozen`).
    pub until_ms: Option<i64>,
}

/// The table of holds, by sandbox.
#[derive(Default)]
pub(crate) struct Holds(Mutex<HashMap<SandboxId, Hold>>);

impl Holds {
    pub(crate) fn get(&self, id: &SandboxId) -> Option<Hold> {
        self.0.lock().unwrap().get(id).copied()
    }
    pub(crate) fn all(&self) -> Vec<(SandboxId, Hold)> {
        let map = self.0.lock().unwrap();
        map.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
    pub(crate) fn remove(&self, id: &SandboxId) {
        self.0.lock().unwrap().remove(id);
    }
    pub(crate) fn insert(&self, id: &SandboxId, hold: Hold) {
        self.0.lock().unwrap().insert(id.clone(), hold);
    }
}
