//! Persistent sessions: the daemon's side checks the command and its
//! working directory and asks the sandbox's supervisor, which owns the
//! sessions' processes and buffered output, to start, feed, read, list or
//! kill them.

use std::time::Duration;

use stasis_agent_proto::{Reply, Request};
use stasis_core::{Error, ErrorCode, PtySize, Result, SessionInfo, SessionOutput, SessionSpec};

use crate::exec::{command_env_cwd, command_user};
use crate::fsops;
use crate::sandbox::Sandbox;

/// `TERM` of a session with a PTY unless its environment sets one.
pub(crate) const TERM: &str = "xterm-256color";

pub(crate) async fn start(sb: &Sandbox, spec: SessionSpec) -> Result<SessionInfo> {
    if let Some(size) = spec.pty {
        stasis_core::exec::check_pty_size(size)?;
    }
    let user = command_user(sb, spec.user.as_deref())?;
    let (mut env, cwd) = command_env_cwd(
        sb,
        &spec.argv,
        &spec.env,
        spec.cwd.as_deref(),
        user.as_deref(),
    )?;
    if spec.pty.is_some() && !env.iter().any(|(k, _)| k == "TERM") {
        env.push(("TERM".into(), TERM.into()));
    }
    let init_pid = sb.pid().await?;
    {
        let (c, u) = (cwd.clone(), user.clone());
        let (ok, ident) = tokio::task::spawn_blocking(move || {
            let root = fsops::Root::of_pid(init_pid);
            let ok = root.as_ref().is_ok_and(|r| r.list(&c).is_ok());
            // A session's shim reports no status to anyone waiting: its
            // user is resolved here first, in the sandbox's files, so a bad
            // one is the caller's error, not a session that dies at once.
            let ident = match (&u, &root) {
                (Some(u), Ok(r)) => Some(resolve_user(r, u)),
                _ => None,
            };
            (ok, ident)
        })
        .await
        .unwrap_or((false, None));
        if !ok {
            return Err(
                Error::invalid(format!("working directory {cwd} does not exist")).with_field("cwd"),
            );
        }
        if let Some(Err(e)) = ident {
            return Err(Error::invalid(e).with_field("user"));
        }
    }
    let spec = SessionSpec {
        argv: spec.argv,
        env: env.into_iter().collect(),
        cwd: Some(cwd),
        pty: spec.pty,
        user,
    };
    match sb
        .supervisor_call(Request::SessionStart { spec }, Duration::ZERO)
        .await?
    {
        Reply::Session { info } => Ok(info),
        other => Err(unexpected(other)),
    }
}

pub(crate) async fn write(sb: &Sandbox, session: &str, data: &[u8]) -> Result<()> {
    sb.pid().await?;
    let req = Request::SessionWrite {
        session: session.to_string(),
        data: data.to_vec(),
    };
    match sb.supervisor_call(req, Duration::ZERO).await? {
        Reply::Ok => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// Served by the supervisor from its buffer, also while the sandbox is
/// frozen.
pub(crate) async fn read(
    sb: &Sandbox,
    session: &str,
    offset: u64,
    wait: Duration,
) -> Result<SessionOutput> {
    let req = Request::SessionRead {
        session: session.to_string(),
        offset,
        wait_ms: wait.as_millis() as u64,
    };
    match sb.supervisor_call(req, wait).await? {
        Reply::SessionOutput { output } => Ok(output),
        other => Err(unexpected(other)),
    }
}

pub(crate) async fn list(sb: &Sandbox) -> Result<Vec<SessionInfo>> {
    match sb
        .supervisor_call(Request::SessionList, Duration::ZERO)
        .await
    {
        Ok(Reply::Sessions { sessions }) => Ok(sessions),
        Ok(other) => Err(unexpected(other)),
        // Processes gone (filesystem pause): no sessions.
        Err(e) if e.code == ErrorCode::InvalidState => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

pub(crate) async fn close_input(sb: &Sandbox, session: &str) -> Result<()> {
    sb.pid().await?;
    let req = Request::SessionCloseInput {
        session: session.to_string(),
    };
    match sb.supervisor_call(req, Duration::ZERO).await? {
        Reply::Ok => Ok(()),
        other => Err(unexpected(other)),
    }
}

pub(crate) async fn resize(sb: &Sandbox, session: &str, size: PtySize) -> Result<()> {
    stasis_core::exec::check_pty_size(size)?;
    sb.pid().await?;
    let req = Request::SessionResize {
        session: session.to_string(),
        size,
    };
    match sb.supervisor_call(req, Duration::ZERO).await? {
        Reply::Ok => Ok(()),
        other => Err(unexpected(other)),
    }
}

pub(crate) async fn kill(
    sb: &Sandbox,
    session: &str,
    signal: stasis_core::SessionSignal,
) -> Result<()> {
    sb.pid().await?;
    let req = Request::SessionKill {
        session: session.to_string(),
        signal: Some(signal.number()),
    };
    match sb.supervisor_call(req, Duration::ZERO).await? {
        Reply::Ok => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// `user` resolved in the sandbox's `/etc/passwd` and `/etc/group`.
fn resolve_user(root: &fsops::Root, user: &str) -> std::result::Result<(), String> {
    let spec = stasis_core::user::UserSpec::parse(user, "user").map_err(|e| e.message)?;
    let read = |p: &str| {
        root.read_file(p, 4 << 20)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    spec.resolve(&read("/etc/passwd"), &read("/etc/group"))
        .map(|_| ())
}

fn unexpected(r: Reply) -> Error {
    Error::backend(format!(
        "unexpected answer from the sandbox's supervisor: {r:?}"
    ))
}
