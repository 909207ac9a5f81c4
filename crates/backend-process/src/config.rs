//! The process backend's configuration ([`ProcessConfig`]) and its defaults.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stasis_backend::Egress;

use crate::shim::SHIM_SUBCOMMAND;
use crate::userns;

#[derive(Clone)]
pub struct ProcessConfig {
    /// Program run as the shim, followed by `shim_args`, then `<mode> <config>`.
    /// Default: the current executable with `["__process-shim"]` (the
    /// `stasis` binary dispatches that to [`crate::shim_main`]).
    pub shim_program: PathBuf,
    pub shim_args: Vec<String>,
    /// Name of the parent cgroup in each hierarchy; several daemons may
    /// share it (default `stasis`).
    pub cgroup_parent: String,
    /// The id of the daemon this backend works for (kept in its data dir):
    /// its sandboxes' and supervisors' cgroups go under
    /// `<cgroup_parent>/.daemon-<id>/`, the only place its orphan cleanup
    /// looks, so daemons sharing a parent never touch each other's
    /// sandboxes. `None`: this backend owns all of `cgroup_parent` (tests
    /// that give each backend a parent of its own).
    pub daemon_id: Option<String>,
    /// Exec output kept per stream; beyond it `truncated` is set.
    pub capture_limit: usize,
    /// Bytes of output kept per session (oldest dropped first).
    pub session_buffer: usize,
    /// Host paths to hide from sandboxes whose lower layer is the host's `/`
    /// (an empty read-only tmpfs is mounted over each one visible inside).
    /// The parent of each sandbox's `spec.dir` is always hidden; the server
    /// should add its data directory here.
    pub hide_paths: Vec<PathBuf>,
    /// How long a sandbox's init may take to come up.
    pub init_timeout: Duration,
    /// The directory holding every sandbox's `spec.dir` (the server's
    /// `<data-dir>/sandboxes`): orphan cleanup unmounts quota filesystems
    /// left under it by sandboxes the server no longer knows.
    pub state_dir: Option<PathBuf>,
    /// Host uid/gid ranges of the sandboxes' user namespaces (see
    /// [`crate::userns`]); `None` runs sandboxes without one (host root with
    /// reduced capabilities).
    pub userns: Option<userns::UsernsConfig>,
    /// The operator's images directory (the server's `--images`): a
    /// manifest's `image` names `<images_dir>/<name>/rootfs/`, a root
    /// filesystem directory used as the read-only lower layer. Never a path
    /// a tenant gives; `None`: only the default (host root, masked).
    pub images_dir: Option<PathBuf>,
    /// The daemon's image store (built and imported images): a manifest's
    /// `image` of `sha256:<id>` (the daemon pins names to ids after checking
    /// the tenant may use them) is that image's root directory.
    pub image_store: Option<PathBuf>,
    /// The daemon's egress service: each sandbox's network namespace is
    /// attached to it once PID 1 runs. `None`: loopback only, and manifests
    /// that allow destinations are refused.
    pub egress: Option<Arc<dyn Egress>>,
    /// How long a memory pause keeps the sandbox's processes frozen on the
    /// host (or its standby window, if longer): past it they end and the
    /// pause becomes filesystem-only, unless the manifest asks
    /// `lifecycle.keep_frozen` (see [`crate::hold`]).
    pub frozen_window: Duration,
}

impl std::fmt::Debug for ProcessConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessConfig")
            .field("shim_program", &self.shim_program)
            .field("cgroup_parent", &self.cgroup_parent)
            .field("daemon_id", &self.daemon_id)
            .field("state_dir", &self.state_dir)
            .field("images_dir", &self.images_dir)
            .field("image_store", &self.image_store)
            .field("egress", &self.egress.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            shim_program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("stasis")),
            shim_args: vec![SHIM_SUBCOMMAND.to_string()],
            cgroup_parent: "stasis".to_string(),
            daemon_id: None,
            capture_limit: 16 << 20,
            session_buffer: 4 << 20,
            hide_paths: Vec::new(),
            init_timeout: Duration::from_secs(20),
            state_dir: None,
            userns: Some(userns::UsernsConfig::default()),
            images_dir: None,
            image_store: None,
            egress: None,
            frozen_window: Duration::from_secs(DEFAULT_FROZEN_SECS),
        }
    }
}

/// Default of [`ProcessConfig::frozen_window`]: ten minutes.
pub const DEFAULT_FROZEN_SECS: u64 = 600;

/// Prefix of a daemon's own group under the shared parent. It starts with a
/// dot: sandbox ids never do, and daemons of earlier versions, which took
/// every other name under the parent for a sandbox of theirs, skip it.
pub const DAEMON_PREFIX: &str = ".daemon-";

impl ProcessConfig {
    /// The cgroup (relative to each hierarchy) holding what this backend
    /// owns: its sandboxes' groups and `.supervisors`.
    pub fn own_cgroup(&self) -> String {
        match &self.daemon_id {
            Some(id) => format!("{}/{DAEMON_PREFIX}{id}", self.cgroup_parent),
            None => self.cgroup_parent.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroup_carries_the_daemon_id() {
        let mut c = ProcessConfig::default();
        assert_eq!(c.own_cgroup(), "stasis");
        c.daemon_id = Some("0123456789abcdef".into());
        assert_eq!(c.own_cgroup(), "stasis/.daemon-0123456789abcdef");
    }
}
