//! Requests to a running guest's agent: one request with its timeout and
//! the liveness probe that tells a slow guest from a dead one, reconnecting
//! a dropped channel, failing a sandbox, and the requests the lifecycle
//! sends (time, identity, the manifest's boundaries, the workdir), and the
//! session requests that check what an older agent may not know (terminals).

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

use stasis_agent_proto::{Reply, Request};
use stasis_backend::ExecChunk;
use stasis_core::{
    Error, ErrorCode, ExecRequest, PtySize, Result, SessionInfo, SessionSignal, SessionSpec,
};

use crate::agent::AgentConn;
use crate::boundary;
use crate::qemu;
use crate::state::{MicrovmBackend, Vm};
use crate::util;

/// An agent request on a sandbox. A request not answered in time is
/// only that: slowness (a loaded guest) is not death. Whether the guest
/// is alive is decided by a liveness probe on the same multiplexed
/// channel: if the agent answers it, the request fails with `timeout`
/// and the sandbox keeps running; if not, the sandbox fails (QEMU is
/// killed and every later call reports why).
pub(crate) async fn call(
    b: &MicrovmBackend,
    vm: &Vm,
    req: Request,
    events: Option<mpsc::Sender<ExecChunk>>,
    extra: Duration,
) -> Result<Reply> {
    let agent = agent_of(b, vm).await?;
    let r = agent
        .request(req, events, b.config.agent_timeout + extra)
        .await;
    if let Err(e) = &r {
        if e.code == ErrorCode::Timeout && e.message.starts_with("guest agent did not answer") {
            // Through `agent_of`: a channel that closed meanwhile is
            // reconnected (a rebooted guest fails there).
            let alive = match agent_of(b, vm).await {
                Ok(a) => a.probe(&vm.boot_id, b.config.agent_timeout).await,
                Err(e) => Err(format!("agent reconnect failed: {}", e.message)),
            };
            return match alive {
                Ok(()) => Err(Error::timeout(format!(
                    "{}; the guest answers its liveness probe, the sandbox keeps running",
                    e.message
                ))),
                Err(why) => {
                    let why = format!("{}; {why}", e.message);
                    fail_vm(vm, &why).await;
                    Err(Error::backend(format!(
                        "sandbox {} failed: {why}; QEMU was killed",
                        vm.id
                    )))
                }
            };
        }
    }
    r
}

/// The agent connection, reconnected (with a new `hello`) when it dropped.
pub(crate) async fn agent_of(b: &MicrovmBackend, vm: &Vm) -> Result<Arc<AgentConn>> {
    {
        let a = vm.agent.read().await;
        if !a.is_closed() {
            return Ok(a.clone());
        }
    }
    let mut a = vm.agent.write().await;
    if !a.is_closed() {
        return Ok(a.clone());
    }
    let path = vm.dir.join(qemu::AGENT_SOCK);
    let fresh = AgentConn::connect(&path, Duration::from_secs(5)).await?;
    let boot = fresh.hello(b.config.agent_timeout).await?;
    if boot != vm.boot_id {
        let msg = format!("guest rebooted (boot_id {boot}, expected {})", vm.boot_id);
        drop(a);
        fail_vm(vm, &msg).await;
        return Err(Error::backend(msg));
    }
    *a = fresh.clone();
    Ok(fresh)
}

pub(crate) async fn fail_vm(vm: &Vm, why: &str) {
    tracing::error!(sandbox = %vm.id, "{why}; killing QEMU");
    *vm.failed.lock().unwrap() = Some(why.to_string());
    vm.proc.lock().await.kill().await;
}

pub(crate) async fn set_time(b: &MicrovmBackend, vm: &Vm) -> Result<()> {
    let r = call(
        b,
        vm,
        Request::SetTime {
            unix_nanos: util::now_unix_nanos(),
        },
        None,
        Duration::ZERO,
    )
    .await?;
    expect_ok(r)
}

pub(crate) fn resolve_path(vm: &Vm, path: &str) -> Result<String> {
    if path.is_empty() || path.contains('\0') {
        return Err(Error::invalid("path must be non-empty without NUL"));
    }
    if path.starts_with('/') {
        Ok(path.to_string())
    } else {
        Ok(format!("{}/{}", vm.workdir.trim_end_matches('/'), path))
    }
}

/// Apply the manifest's boundaries in the guest. After a memory restore,
/// `saved` holds the input digests the guest had mounted: disks whose
/// content changed since are remounted.
pub(crate) async fn configure(
    b: &MicrovmBackend,
    vm: &Vm,
    grow_root: bool,
    saved: Option<&[String]>,
) -> Result<()> {
    let refresh: Vec<String> = match saved {
        Some(old) => vm
            .inputs
            .iter()
            .enumerate()
            .filter(|(i, d)| old.get(*i) != Some(&d.digest))
            .map(|(_, d)| d.serial.clone())
            .collect(),
        None => Vec::new(),
    };
    let config = boundary::guest_config(&vm.manifest, &vm.inputs, &refresh, grow_root, vm.nic);
    let r = call(b,
            vm,
            Request::Configure { config },
            None,
            Duration::from_secs(60),
        )
        .await
        .map_err(|e| {
            if e.message.contains("unknown variant `configure`") {
                // An agent from before boundaries existed cannot apply them.
                Error::unsupported(format!(
                    "the guest image {:?} has an agent too old to apply the manifest's boundaries; rebuild it (scripts/build-guest-image.sh)",
                    vm.image.name
                ))
            } else {
                e
            }
        })?;
    expect_ok(r).map_err(|e| e.context("applying the manifest in the guest"))?;
    if vm.nic != crate::net::Nic::None {
        // Names resolve through slirp's forwarder (see `net`).
        let r = call(
            b,
            vm,
            Request::WriteFile {
                path: "/etc/resolv.conf".into(),
                data: format!("nameserver {}\n", crate::net::NAMESERVER).into_bytes(),
                append: false,
                mode: Some(0o644),
                offset: None,
            },
            None,
            Duration::ZERO,
        )
        .await?;
        expect_ok(r).map_err(|e| e.context("writing the guest's resolv.conf"))?;
    }
    Ok(())
}

/// Remove the addresses the relays of snapshot format 2 put on the guest's
/// `lo` (every non-loopback IPv4 address there): today such destinations
/// are reached through the NIC. The guest's agent is the one saved with it.
pub(crate) async fn drop_relay_addresses(b: &MicrovmBackend, vm: &Vm) -> Result<()> {
    let script = "B=/run/stasis/busybox; [ -x $B ] || B=/bin/busybox; \
        for a in $($B ip -4 addr show dev lo | $B awk '$1==\"inet\" && $2 !~ /^127\\./ {print $2}'); do \
        $B ip addr del \"$a\" dev lo || exit 1; done";
    run_ok(
        b,
        vm,
        vec!["sh".into(), "-c".into(), script.into()],
        "removing the old relay addresses from the guest's lo",
    )
    .await
}

/// Run a short housekeeping command in the guest (10 s at most); an error
/// unless it exits 0, saying `what` failed.
async fn run_ok(b: &MicrovmBackend, vm: &Vm, argv: Vec<String>, what: &str) -> Result<()> {
    let r = call(
        b,
        vm,
        Request::Exec {
            req: ExecRequest {
                argv,
                env: Default::default(),
                cwd: Some("/".into()),
                timeout_ms: 10_000,
                stdin: None,
                user: None,
            },
            stream: false,
        },
        None,
        Duration::from_secs(10),
    )
    .await?;
    match r {
        Reply::Exec { result } if result.exit_code == Some(0) => Ok(()),
        other => Err(Error::backend(format!("{what}: {other:?}"))),
    }
}

pub(crate) async fn after_cold_boot(b: &MicrovmBackend, vm: &Vm) -> Result<()> {
    set_time(b, vm).await?;
    // An image from the daemon's image store brings its own userland, which
    // need not have resize2fs: its root filesystem is made with room to
    // spare (see stasis_image::guest) and is not grown.
    let from_store = vm
        .manifest
        .image
        .as_deref()
        .is_some_and(|i| i.starts_with("sha256:"));
    configure(b, vm, !from_store, None).await?;
    run_ok(
        b,
        vm,
        vec!["mkdir".into(), "-p".into(), vm.workdir.clone()],
        &format!("cannot create workdir {}", vm.workdir),
    )
    .await
}

pub(crate) fn expect_ok(r: Reply) -> Result<()> {
    match r {
        Reply::Ok => Ok(()),
        other => Err(Error::backend(format!("unexpected agent reply {other:?}"))),
    }
}

fn too_old(vm: &Vm) -> Error {
    Error::unsupported(format!(
        "the guest image {:?} has an agent too old for terminal sessions; rebuild it (scripts/build-guest-image.sh)",
        vm.image.name
    ))
}

/// Start a session. An agent that does not know terminals ignores `pty`
/// and starts it on pipes: such a session is killed and the request refused.
pub(crate) async fn session_start(
    b: &MicrovmBackend,
    vm: &Vm,
    spec: SessionSpec,
) -> Result<SessionInfo> {
    if let Some(size) = spec.pty {
        stasis_core::exec::check_pty_size(size)?;
    }
    let want_pty = spec.pty.is_some();
    let info = match call(b, vm, Request::SessionStart { spec }, None, Duration::ZERO).await? {
        Reply::Session { info } => info,
        other => return Err(Error::backend(format!("unexpected reply: {other:?}"))),
    };
    if want_pty && info.pty.is_none() {
        let kill = Request::SessionKill {
            session: info.id.clone(),
            signal: None,
        };
        let _ = call(b, vm, kill, None, Duration::ZERO).await;
        return Err(too_old(vm));
    }
    Ok(info)
}

/// Send `signal` to a session. An agent from before signals (it would kill
/// whatever was asked) gets only KILL; anything else is refused.
pub(crate) async fn session_kill(
    b: &MicrovmBackend,
    vm: &Vm,
    session: &str,
    signal: SessionSignal,
) -> Result<()> {
    if signal != SessionSignal::Kill && !agent_of(b, vm).await?.session_signal() {
        return Err(Error::unsupported(format!(
            "the guest image {:?} has an agent too old to send {signal:?} to a session; rebuild it (scripts/build-guest-image.sh)",
            vm.image.name
        )));
    }
    let req = Request::SessionKill {
        session: session.to_string(),
        signal: Some(signal.number()),
    };
    expect_killed(call(b, vm, req, None, Duration::ZERO).await?)
}

/// The agent answers a kill with the session as it left it (older agents
/// with a bare `Ok`); either is a success.
fn expect_killed(r: Reply) -> Result<()> {
    match r {
        Reply::Ok | Reply::Session { .. } => Ok(()),
        other => expect_ok(other),
    }
}

pub(crate) async fn session_resize(
    b: &MicrovmBackend,
    vm: &Vm,
    session: &str,
    size: PtySize,
) -> Result<()> {
    stasis_core::exec::check_pty_size(size)?;
    let req = Request::SessionResize {
        session: session.to_string(),
        size,
    };
    match call(b, vm, req, None, Duration::ZERO).await {
        Ok(r) => expect_ok(r),
        Err(e) if e.message.contains("unknown variant `session_resize`") => Err(too_old(vm)),
        Err(e) => Err(e),
    }
}

pub(crate) async fn session_close_input(b: &MicrovmBackend, vm: &Vm, session: &str) -> Result<()> {
    let req = Request::SessionCloseInput {
        session: session.to_string(),
    };
    match call(b, vm, req, None, Duration::ZERO).await {
        Ok(r) => expect_ok(r),
        Err(e) if e.message.contains("unknown variant `session_close_input`") => {
            Err(Error::unsupported(format!(
                "the guest image {:?} has an agent too old to close a session's input; rebuild it (scripts/build-guest-image.sh)",
                vm.image.name
            )))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_answered_with_the_session_is_a_success() {
        let info = stasis_core::SessionInfo {
            id: "s1".into(),
            argv: vec!["sh".into()],
            running: false,
            exit_code: Some(137),
            started_at_ms: 0,
            output_end: 0,
            pty: None,
        };
        assert!(expect_killed(Reply::Session { info }).is_ok());
        assert!(expect_killed(Reply::Ok).is_ok());
        assert!(expect_killed(Reply::Sessions { sessions: vec![] }).is_err());
    }
}
