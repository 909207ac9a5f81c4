//! The build sandbox of `RUN` steps: a process-backend sandbox of the
//! building tenant whose read-only root is the parent step's directory
//! (named for the step only, then forgotten), created under the default
//! manifest (its resources and lifecycle) with the build's network policy
//! (none unless the build names one, e.g. PyPI's domains), the command run
//! with the image's ENV and WORKDIR, and the sandbox's writable layer (an
//! overlayfs upper directory, which stores in-sandbox owners) handed back as
//! the step's changes. The sandbox is destroyed whatever the outcome.

use std::path::Path;
use std::sync::Arc;

use stasis_core::{BackendKind, Error, ExecRequest, Manifest, OnIdle, Result};
use stasis_fsroot::{Dir, Resolve};
use stasis_image::build::{RunOutcome, RunStep, StepRunner};
use stasis_image::layer::{copy_tree, unique_suffix, ApplyOptions};
use stasis_image::store::{ImageStore, Owner};

use crate::manager::{Ctx, Manager};

/// How long one RUN step may take.
pub const RUN_TIMEOUT_MS: u64 = 30 * 60 * 1000;

pub struct SandboxRunner {
    pub manager: Arc<Manager>,
    pub ctx: Ctx,
    /// The network policy of every RUN step's sandbox.
    pub network: stasis_core::manifest::NetworkPolicy,
    pub store: Arc<ImageStore>,
    pub handle: tokio::runtime::Handle,
}

/// Top-level directories the process backend makes as mount points; they
/// are not part of a step's changes.
const MOUNT_POINTS: [&str; 4] = ["dev", "proc", "sys", "workspace"];

impl StepRunner for SandboxRunner {
    fn failure_hint(&self) -> Option<String> {
        egress_hint(&self.network)
    }

    fn run(&self, s: &RunStep<'_>) -> Result<RunOutcome> {
        let owner = Owner::Tenant(self.ctx.tenant.as_str().to_string());
        let name = format!("_build-{}", unique_suffix());
        let img = self.store.commit(
            &owner,
            &name,
            "run",
            Some(s.root),
            vec![],
            Default::default(),
            vec![],
            &ApplyOptions::default(),
        )?;
        let r = self
            .handle
            .block_on(self.run_in_sandbox(s, &format!("{name}:run")));
        let _ = self.store.delete(&owner, &format!("{name}:run"));
        let _ = self.store.discard(&img.record.id);
        r
    }
}

impl SandboxRunner {
    async fn run_in_sandbox(&self, s: &RunStep<'_>, image: &str) -> Result<RunOutcome> {
        let mut m = Manifest {
            backend: Some(BackendKind::Process),
            image: Some(image.to_string()),
            workdir: s.workdir.clone(),
            network: self.network.clone(),
            ..Default::default()
        };
        m.lifecycle.on_idle = OnIdle::Nothing;
        for kv in &s.env {
            if let Some((k, v)) = kv.split_once('=') {
                m.env.insert(k.to_string(), v.to_string());
            }
        }
        let rec = self.manager.create(&self.ctx, m).await?;
        // Not one of the user's sandboxes: listings leave it out.
        let _ = self.manager.mark_build(&rec.id).await;
        let result = async {
            let res = self
                .manager
                .exec(
                    &self.ctx,
                    &rec.id,
                    ExecRequest {
                        argv: s.argv.clone(),
                        env: Default::default(),
                        cwd: Some(s.workdir.clone()),
                        timeout_ms: RUN_TIMEOUT_MS,
                        stdin: None,
                        // USER so far; root (the sandbox's) when none.
                        user: (!s.user.is_empty()).then(|| s.user.clone()),
                    },
                    None,
                )
                .await?;
            let dir = self
                .manager
                .config()
                .data_dir
                .join("sandboxes")
                .join(rec.id.as_str());
            // On the sandbox's quota filesystem (`layer/`) when it has a disk limit.
            let upper = [dir.join("layer/upper"), dir.join("upper")]
                .into_iter()
                .find(|p| p.is_dir())
                .unwrap_or_else(|| dir.join("upper"));
            copy_changes(&upper, s.upper)?;
            let mut output = String::from_utf8_lossy(&res.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&res.stderr));
            let exit_code = match (res.exit_code, res.timed_out) {
                (_, true) => {
                    output.push_str("\n(timed out)");
                    124
                }
                (Some(c), _) => c,
                (None, _) => 128 + res.signal.unwrap_or(0),
            };
            Ok(RunOutcome { exit_code, output })
        }
        .await;
        let _ = self.manager.destroy(&self.ctx, &rec.id).await;
        result
    }
}

/// What a failed step's error adds when the build gave its RUN steps no
/// network: egress is closed by default, and how to open it.
pub fn egress_hint(network: &stasis_core::manifest::NetworkPolicy) -> Option<String> {
    network.allow.is_empty().then(|| {
        "this build has no network egress (closed by default), so a step that downloads \
         (pip, apt, npm) cannot; allow the hosts it needs with `stasis image build \
         --network-allow HOST` (API: network={\"allow\":[\"HOST\"]} on /v1/images/build)"
            .to_string()
    })
}

/// The sandbox's writable layer, less the backend's mount points.
fn copy_changes(upper: &Path, dest: &Path) -> Result<()> {
    if !upper.is_dir() {
        return Err(Error::internal(format!(
            "the build sandbox has no writable layer at {}",
            upper.display()
        )));
    }
    // `cp -a` never follows a symlink of the sandbox's tree and writes only
    // into `dest`, the build's fresh directory.
    copy_tree(upper, dest)?;
    // The copy is the tenant's tree: looked at through descriptors only (a
    // `dev` the step made a symlink to a host directory is not followed).
    let d = Dir::open(dest, Resolve::NoSymlinks)?;
    for m in MOUNT_POINTS {
        let m = std::ffi::OsStr::new(m);
        // Only an empty mount point is dropped; content written there stays.
        let empty = d
            .sub(m)
            .and_then(|s| s.entries())
            .is_ok_and(|e| e.is_empty());
        if empty {
            let _ = d.remove_all_at(m);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::manifest::NetworkPolicy;

    #[test]
    fn a_build_without_egress_says_so_and_how_to_open_it() {
        let h = egress_hint(&NetworkPolicy::default()).unwrap();
        assert!(
            h.contains("closed by default") && h.contains("--network-allow"),
            "{h}"
        );
        let open = NetworkPolicy {
            allow: vec!["pypi.org".into()],
            deny: vec![],
        };
        assert_eq!(egress_hint(&open), None);
    }

    #[test]
    fn a_mount_point_the_step_made_a_symlink_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let (upper, dest) = (t.path().join("upper"), t.path().join("dest"));
        std::fs::create_dir_all(upper.join("proc")).unwrap();
        std::fs::create_dir(&dest).unwrap();
        std::os::unix::fs::symlink(host.path(), upper.join("dev")).unwrap();
        copy_changes(&upper, &dest).unwrap();
        assert!(host.path().exists());
        assert!(
            !dest.join("proc").exists(),
            "an empty mount point is dropped"
        );
        assert!(dest
            .join("dev")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
