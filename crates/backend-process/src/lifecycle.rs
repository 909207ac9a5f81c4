//! A sandbox's life as the server drives it: create (build) and restore,
//! pause (freeze, or stop, plus `fs.tar`) and resume (thaw, or rebuild from
//! the files), snapshot, destroy, recover after a daemon restart, and
//! cleaning up what sandboxes the server no longer knows left behind.

use std::path::Path;
use std::time::Duration;

use stasis_backend::{Artifact, PauseLeftovers, Recovered, SandboxSpec};
use stasis_core::{Error, ErrorCode, Result, SandboxId};

use crate::rootfs::{self, FS_TAR};
use crate::sandbox::{alive, ProcessBackend, Run};
use crate::start;
use crate::sys::blocking;
use crate::{disk, hold, net, userns};

pub(crate) async fn build(
    be: &ProcessBackend,
    spec: &SandboxSpec,
    artifacts: Option<&Path>,
) -> Result<()> {
    spec.manifest
        .validate()
        .map_err(|e| e.context("manifest"))?;
    let disk_mb = spec.manifest.resources.disk_mb;
    if disk_mb > 0 && disk_mb < disk::MIN_DISK_MB {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "resources.disk_mb: the process backend needs at least {} MiB (or 0 for no quota)",
                disk::MIN_DISK_MB
            ),
        )
        .with_field("resources.disk_mb"));
    }
    net::check(&spec.manifest, be.cfg.egress.is_some())?;
    let existing = be.sandboxes.lock().unwrap().contains_key(&spec.id);
    if existing {
        return Err(Error::state(format!("sandbox {} already exists", spec.id)));
    }
    let tar = artifacts.map(|a| a.join(FS_TAR)).filter(|p| p.is_file());
    let result = async {
        rootfs::prepare_dirs(&be.cfg, spec, tar).await?;
        let sb = be.sandbox_for(spec)?;
        start::start_init(be, &sb, &spec.manifest).await
    }
    .await;
    if result.is_err() {
        be.sandboxes.lock().unwrap().remove(&spec.id);
    }
    result
}

pub(crate) async fn pause(
    be: &ProcessBackend,
    id: &SandboxId,
    out: &Path,
    keep_memory: bool,
    window: Option<Duration>,
) -> Result<Vec<Artifact>> {
    let sb = be.get(id)?;
    let mut run = sb.run.lock().await;
    match &*run {
        Run::Stopped => return Err(Error::state("sandbox is not running")),
        Run::Running { frozen: true, .. } if keep_memory => {
            return Err(Error::state("sandbox is already paused"))
        }
        _ => {}
    }
    tokio::fs::create_dir_all(out).await?;
    if keep_memory {
        let cg = sb.cg.clone();
        blocking(move || cg.freeze()).await?;
        match rootfs::tar_upper(sb.upper(), out).await {
            Ok(a) => {
                if let Run::Running { frozen, .. } = &mut *run {
                    *frozen = true;
                }
                let keep = sb.spec.manifest.lifecycle.keep_frozen;
                hold::start(be, id, keep, window);
                Ok(a)
            }
            Err(e) => {
                let cg = sb.cg.clone();
                let _ = blocking(move || cg.thaw()).await;
                Err(e)
            }
        }
    } else {
        // Processes end; the writable layer is written after they are gone.
        start::stop(be, &sb, &mut run).await?;
        rootfs::tar_upper(sb.upper(), out).await
    }
}

pub(crate) async fn resume(
    be: &ProcessBackend,
    spec: &SandboxSpec,
    artifacts: &Path,
) -> Result<()> {
    let sb = be.sandbox_for(spec)?;
    {
        let mut run = sb.run.lock().await;
        if let Run::Running {
            sup,
            frozen,
            init_fd,
            init_pid,
        } = &mut *run
        {
            if alive(sup, init_fd) {
                // The policy in force now (changed while paused, or a new
                // operator deny list) applies before anything runs again.
                net::check(&spec.manifest, be.cfg.egress.is_some())?;
                net::attach(be, &spec.id, *init_pid, &spec.manifest).await?;
                if *frozen {
                    let cg = sb.cg.clone();
                    blocking(move || cg.thaw()).await?;
                    *frozen = false;
                }
                be.holds.remove(&spec.id);
                return Ok(());
            }
        }
        // Not alive: rebuild. Leftovers go first.
        be.holds.remove(&spec.id);
        start::stop(be, &sb, &mut run).await?;
    }
    let tar = Some(artifacts.join(FS_TAR)).filter(|p| p.is_file());
    if tar.is_none() && !sb.upper().is_dir() {
        return Err(Error::backend(format!(
            "cannot resume sandbox {}: no {FS_TAR} in {} and no writable layer in {}",
            spec.id,
            artifacts.display(),
            spec.dir.display()
        )));
    }
    rootfs::prepare_dirs(&be.cfg, spec, tar).await?;
    start::start_init(be, &sb, &spec.manifest).await
}

pub(crate) async fn resume_needs_artifacts(be: &ProcessBackend, id: &SandboxId) -> bool {
    let Ok(sb) = be.get(id) else { return true };
    let mut run = sb.run.lock().await;
    match &mut *run {
        Run::Running {
            sup,
            init_fd,
            frozen: true,
            ..
        } => !alive(sup, init_fd),
        _ => true,
    }
}

pub(crate) async fn snapshot(
    be: &ProcessBackend,
    id: &SandboxId,
    out: &Path,
) -> Result<Vec<Artifact>> {
    let sb = be.get(id)?;
    let run = sb.run.lock().await;
    let was_frozen = match &*run {
        Run::Stopped => false,
        Run::Running { frozen, .. } => *frozen,
    };
    let running = matches!(&*run, Run::Running { .. });
    tokio::fs::create_dir_all(out).await?;
    if running && !was_frozen {
        let cg = sb.cg.clone();
        blocking(move || cg.freeze()).await?;
    }
    let r = rootfs::tar_upper(sb.upper(), out).await;
    if running && !was_frozen {
        let cg = sb.cg.clone();
        blocking(move || cg.thaw()).await?;
    }
    r
}

pub(crate) async fn restore(
    be: &ProcessBackend,
    spec: &SandboxSpec,
    artifacts: &Path,
) -> Result<()> {
    if !artifacts.join(FS_TAR).is_file() {
        return Err(Error::invalid(format!(
            "no {FS_TAR} in artifacts {}",
            artifacts.display()
        )));
    }
    build(be, spec, Some(artifacts)).await
}

pub(crate) async fn destroy(be: &ProcessBackend, id: &SandboxId, dir: &Path) -> Result<()> {
    be.holds.remove(id);
    let sb = be.sandboxes.lock().unwrap().remove(id);
    let dir = match &sb {
        Some(sb) => sb.spec.dir.clone(),
        None => dir.to_path_buf(),
    };
    match sb {
        Some(sb) => {
            let mut run = sb.run.lock().await;
            start::stop(be, &sb, &mut run).await?;
        }
        None => {
            if let Ok(cgs) = be.cgroups() {
                // Wherever this daemon may have put it: its own group, or
                // the shared parent before daemons had one.
                let mut cgs = vec![
                    cgs.sandbox(&be.cfg.own_cgroup(), id.as_str()),
                    cgs.supervisor(&be.cfg.own_cgroup(), id.as_str()),
                ];
                cgs.extend(be.legacy_cgroups(id.as_str()));
                blocking(move || cgs.iter().try_for_each(|cg| cg.destroy())).await?;
            }
            net::detach(be, id);
        }
    }
    if dir.is_absolute() {
        let ucfg = be.cfg.userns.clone();
        blocking(move || {
            if let Some(u) = &ucfg {
                userns::release(u, &dir);
            }
            disk::unmount(&dir)
        })
        .await?;
    }
    Ok(())
}

pub(crate) async fn recover(be: &ProcessBackend, spec: &SandboxSpec) -> Result<Recovered> {
    let sb = be.sandbox_for(spec)?;
    let mut run = sb.run.lock().await;
    if let Run::Running { sup, init_fd, .. } = &mut *run {
        if alive(sup, init_fd) {
            return Ok(Recovered::Running);
        }
    }
    // After a daemon restart: reattach to the sandbox's supervisor,
    // which kept its processes, sessions and their output.
    match start::reattach(&sb).await {
        Ok((sup, init_pid, init_fd)) => {
            let frozen = {
                let cg = sb.cg.clone();
                blocking(move || Ok(cg.frozen())).await?
            };
            // The egress service of this daemon has not seen the sandbox.
            if let Err(e) = net::attach(be, &spec.id, init_pid, &spec.manifest).await {
                tracing::warn!(sandbox = %spec.id, "egress not reattached: {}", e.message);
            }
            *run = Run::Running {
                init_pid,
                sup,
                init_fd,
                frozen,
            };
            // A frozen sandbox (paused with memory) stays paused: the
            // server keeps it so and the next resume thaws it. Its hold
            // starts again from now (the daemon did not keep the old one).
            if frozen {
                hold::start(be, &spec.id, spec.manifest.lifecycle.keep_frozen, None);
            }
            Ok(if frozen {
                Recovered::NotRunning
            } else {
                Recovered::Running
            })
        }
        Err(e) => {
            tracing::info!(sandbox = %spec.id, "not reattached: {}", e.message);
            // No supervisor (or no init): whatever is left goes.
            start::stop(be, &sb, &mut run).await?;
            Ok(Recovered::NotRunning)
        }
    }
}

/// What a pause interrupted by a daemon restart left for a resume: the
/// writable layer (an upper dir, or the quota filesystem's image).
pub(crate) fn pause_leftovers(spec: &SandboxSpec) -> PauseLeftovers {
    let files_kept = if spec.manifest.resources.disk_mb > 0 {
        disk::image(&spec.dir).is_file()
    } else {
        spec.dir.join("upper").is_dir()
    };
    PauseLeftovers {
        artifacts: None,
        files_kept,
    }
}

pub(crate) async fn cleanup_orphans(be: &ProcessBackend, known: &[SandboxId]) -> Result<()> {
    let cgs = match be.cgroups() {
        Ok(c) => c.clone(),
        Err(_) => return Ok(()),
    };
    let known: Vec<&str> = known.iter().map(|k| k.as_str()).collect();
    let stale: Vec<SandboxId> = be
        .sandboxes
        .lock()
        .unwrap()
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .cloned()
        .collect();
    for id in stale {
        destroy(be, &id, Path::new("")).await?;
    }
    // Only this daemon's own group: other daemons' sandboxes share the
    // parent. (Groups an earlier version left directly under the parent
    // are not told apart from another daemon's and stay; those of a
    // sandbox this daemon knows are found by `cgroup_of` and go with it.)
    let keep: Vec<String> = known.iter().map(|k| k.to_string()).collect();
    {
        let (own, keep) = (be.cfg.own_cgroup(), keep.clone());
        blocking(move || {
            let keep: Vec<&str> = keep.iter().map(|s| s.as_str()).collect();
            cgs.destroy_except(&own, &keep)
        })
        .await?;
    }
    {
        let parent = be.cfg.cgroup_parent.clone();
        blocking(move || {
            net::cleanup_legacy(&parent);
            Ok(())
        })
        .await?;
    }
    if let Some(base) = be.cfg.state_dir.clone() {
        blocking(move || {
            let keep: Vec<&str> = keep.iter().map(|s| s.as_str()).collect();
            disk::unmount_stale(&base, &keep)
        })
        .await?;
    }
    Ok(())
}
