//! Bringing a sandbox's processes up and down: start its supervisor and
//! PID 1 under fresh cgroups (with its user namespace range, its network
//! namespace attached to the egress service), reattach to a supervisor after a daemon restart, and stop
//! (kill every process, remove cgroups, network and supervisor).

use std::path::PathBuf;
use std::sync::Arc;

use stasis_core::{Error, Result};

use crate::rootfs::{self, layer_root};
use crate::sandbox::{ProcessBackend, Run, Sandbox};
use crate::shim_proto::InitConfig;
use crate::supervisor_client::{self, SupervisorHandle};
use crate::sys::{blocking, pidfd_open};
use crate::{net, supervisor, userns};

/// Start the sandbox's PID 1 (namespaces, root filesystem) under fresh
/// cgroups, its network attached under `manifest`'s policy (the server's
/// current one: it may have changed since the sandbox was first made).
pub(crate) async fn start_init(
    be: &ProcessBackend,
    sb: &Arc<Sandbox>,
    manifest: &stasis_core::Manifest,
) -> Result<()> {
    let mut run = sb.run.lock().await;
    if let Run::Running { .. } = &*run {
        return Err(Error::state("sandbox is already running"));
    }
    let spec = &sb.spec;
    let cg = sb.cg.clone();
    let res = spec.manifest.resources.clone();
    let procs = blocking(move || {
        // Leftovers of an earlier life (crash) go first.
        cg.destroy()?;
        cg.create(&res)?;
        cg.leaf("init")
    })
    .await?;
    // A supervisor left from an earlier life goes too.
    kill_supervisor(be, sb, None).await;
    let mut hide = be.cfg.hide_paths.clone();
    if let Some(p) = spec.dir.parent() {
        hide.push(p.to_path_buf());
    }
    // Covering `/` would hide the whole root.
    hide.retain(|p| p.is_absolute() && p.parent().is_some());
    let idmap = match be.cfg.userns.clone() {
        Some(u) => {
            let dir = spec.dir.clone();
            Some(blocking(move || userns::allocate(&u, &dir)).await?)
        }
        None => None,
    };
    let cfg = InitConfig {
        idmap,
        cgroup_procs: procs,
        lower: rootfs::lower(&be.cfg, spec)?,
        upper: layer_root(spec).join("upper"),
        work: layer_root(spec).join("work"),
        root: spec.dir.join("root"),
        workdir: spec.manifest.workdir.clone(),
        hostname: spec.id.as_str().to_string(),
        hide,
        outputs: spec.manifest.outputs.clone(),
        mounts: spec
            .manifest
            .mounts
            .iter()
            .map(|m| (PathBuf::from(&m.source), m.target.clone()))
            .collect(),
    };
    let sup_cfg = supervisor::SupervisorConfig {
        init: cfg,
        sandbox_id: spec.id.as_str().to_string(),
        cgroup_parent: sb.cg.parent().to_string(),
        run_dir: spec.dir.join("run"),
        shim_program: be.cfg.shim_program.clone(),
        shim_args: be.cfg.shim_args.clone(),
        session_buffer: be.cfg.session_buffer,
        init_timeout_ms: be.cfg.init_timeout.as_millis() as u64,
    };
    let started = supervisor_client::spawn(
        &be.cfg.shim_program,
        &be.cfg.shim_args,
        &sup_cfg,
        be.cfg.init_timeout,
    )
    .await;
    let fail = |msg: String| async move {
        let cg = sb.cg.clone();
        let _ = blocking(move || cg.destroy()).await;
        kill_supervisor(be, sb, None).await;
        Err(Error::backend(format!("create sandbox: {msg}")))
    };
    let (sup, init_pid) = match started {
        Ok(x) => x,
        Err(msg) => return fail(msg).await,
    };
    let init_fd = match pidfd_open(init_pid) {
        Ok(fd) => fd,
        Err(e) => return fail(format!("init {init_pid} vanished: {e}")).await,
    };
    if let Err(e) = net::attach(be, &spec.id, init_pid, manifest).await {
        return fail(e.message).await;
    }
    let _ = tokio::fs::write(spec.dir.join("run").join("init.pid"), init_pid.to_string()).await;
    *run = Run::Running {
        init_pid,
        sup,
        init_fd,
        frozen: false,
    };
    Ok(())
}

/// Connect to a sandbox's supervisor and check that the init it names
/// is this sandbox's PID 1 (its cgroup, PID 1 of its own namespace).
pub(crate) async fn reattach(
    sb: &Sandbox,
) -> Result<(SupervisorHandle, i32, std::os::fd::OwnedFd)> {
    let (sup, init_pid) = supervisor_client::attach(&sb.spec.dir.join("run")).await?;
    let init_fd = pidfd_open(init_pid)
        .map_err(|e| Error::backend(format!("sandbox init {init_pid} is gone: {e}")))?;
    let cg = std::fs::read_to_string(format!("/proc/{init_pid}/cgroup")).unwrap_or_default();
    let marker = format!("/{}", sb.init_cgroup_marker());
    let status = std::fs::read_to_string(format!("/proc/{init_pid}/status")).unwrap_or_default();
    let nspid_1 = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last())
        == Some("1");
    if !cg.lines().any(|l| l.ends_with(&marker)) || !nspid_1 || supervisor_client::exited(&init_fd)
    {
        sup.kill().await;
        return Err(Error::backend(format!(
            "pid {init_pid} is not this sandbox's init"
        )));
    }
    Ok((sup, init_pid, init_fd))
}

/// SIGKILL a sandbox's supervisor (the handle's, or whatever sits in its
/// cgroup after a restart) and remove its cgroup and socket.
pub(crate) async fn kill_supervisor(
    be: &ProcessBackend,
    sb: &Sandbox,
    sup: Option<&SupervisorHandle>,
) {
    if let Some(s) = sup {
        s.kill().await;
    }
    if let Ok(cgs) = be.cgroups() {
        let id = sb.spec.id.as_str();
        // Its place beside the sandbox's group, and the place it had before
        // daemons had a group of their own (an upgrade's leftover).
        let mut cgs = vec![cgs.supervisor(sb.cg.parent(), id)];
        cgs.extend(be.legacy_cgroups(id).into_iter().skip(1));
        let r = blocking(move || cgs.iter().try_for_each(|cg| cg.destroy())).await;
        if let Err(e) = r {
            tracing::warn!(sandbox = %sb.spec.id, "remove supervisor cgroup: {}", e.message);
        }
    }
    let _ = tokio::fs::remove_file(sb.spec.dir.join("run").join(supervisor::SOCKET_NAME)).await;
}

/// Kill every process of the sandbox and remove its cgroups.
///
/// The supervisor (and whatever is still in its cgroup: a shim it forked
/// for a session that has not joined the sandbox yet) goes first, so
/// nothing can join the sandbox's cgroups while they are removed.
pub(crate) async fn stop(be: &ProcessBackend, sb: &Arc<Sandbox>, run: &mut Run) -> Result<()> {
    let sup = match run {
        Run::Running { sup, .. } => Some(sup.clone()),
        Run::Stopped => None,
    };
    kill_supervisor(be, sb, sup.as_ref()).await;
    let cg = sb.cg.clone();
    blocking(move || cg.destroy()).await?;
    net::detach(be, &sb.spec.id);
    *run = Run::Stopped;
    Ok(())
}
