//! Work inside a running sandbox: exec, files, sessions, outputs, usage,
//! connections to the ports it serves.
//! Every call takes one path, [`Manager::with_running`]: a slot of the
//! sandbox's in-flight limit, the sandbox held running (resumed first when
//! paused), the backend call, then [`Manager::done`], which notes the
//! activity and settles a sandbox the call found gone.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedRwLockReadGuard};
use tracing::warn;

use stasis_backend::{Backend, ExecChunk, Recovered, Usage};
use stasis_core::{
    Error, ErrorCode, ExecRequest, ExecResult, FileEntry, PtySize, Result, SandboxId, SandboxState,
    SessionInfo, SessionOutput, SessionSpec,
};
use stasis_meta::SandboxRecord;

use super::{Ctx, Manager};
use crate::inflight::Permit;

/// Longest wait of one session output read (`wait_ms`).
pub const MAX_SESSION_WAIT: Duration = Duration::from_secs(60);

/// Longest one read of an attached terminal holds the sandbox.
pub const MAX_ATTACHED_WAIT: Duration = Duration::from_secs(1);

/// The environment of one exec or session.
type Env = BTreeMap<String, String>;

/// What one guest call needs besides its backend call.
#[derive(Default)]
struct Call {
    /// A slot of the in-flight limit the caller already holds (from
    /// [`Manager::reserve`]); else one is taken.
    permit: Option<Permit>,
    /// The request's env: layered over the manifest's and the tenant
    /// secrets it names ([`Manager::exec_env`]) and handed to the call.
    env: Option<Env>,
}

/// What the manifest gives an exec or session that names none of its own.
struct Defaults {
    /// `manifest.user`.
    user: Option<String>,
    /// `manifest.command`: a session's command when it names none.
    command: Option<Vec<String>>,
}

/// The audit entry of a guest call, from its result (none: not audited).
type Audit = Option<(&'static str, serde_json::Value)>;

/// A request's hold on a running sandbox: its in-flight slot and the shared
/// lock that keeps lifecycle changes out while it runs.
pub(crate) struct InUse {
    _guard: OwnedRwLockReadGuard<()>,
    _permit: Permit,
}

/// A request's own `user`, checked before anything runs.
fn check_user(user: Option<&str>) -> Result<()> {
    if let Some(u) = user {
        stasis_core::user::UserSpec::parse(u, "user")?;
    }
    Ok(())
}

impl Manager {
    /// [`Manager::running`] for one request of work (exec, files, sessions):
    /// first a slot of the sandbox's in-flight limit (waiting in its bounded
    /// queue; 429 `overloaded` beyond it), unless the caller already holds
    /// one (from [`Manager::reserve`]). The caller's tenant is checked
    /// first, so another tenant's sandbox answers 404, never 429.
    async fn in_use(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        permit: Option<Permit>,
    ) -> Result<(InUse, SandboxRecord)> {
        let permit = match permit {
            Some(p) => p,
            None => self.reserve(ctx, id).await?,
        };
        let (guard, rec) = self.running(ctx, id).await?;
        Ok((
            InUse {
                _guard: guard,
                _permit: permit,
            },
            rec,
        ))
    }

    /// A slot of the sandbox's in-flight limit, held until dropped: for a
    /// caller that must know before it answers (a streamed exec answers 429
    /// `overloaded` as a plain response, not inside its stream). 404 for
    /// another tenant's sandbox.
    pub async fn reserve(&self, ctx: &Ctx, id: &SandboxId) -> Result<Permit> {
        self.meta.get_for(&ctx.tenant, id).await?;
        let limiter = self.slot(id).inflight.clone();
        limiter.acquire(&format!("sandbox {id}")).await
    }

    /// The one path of a guest operation: hold the sandbox running, call its
    /// backend, then [`Manager::done`].
    pub(super) async fn with_running<T, Fut>(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        call: impl FnOnce(Arc<dyn Backend>) -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        self.with_running_as(ctx, id, Call::default(), |b, _, _| call(b), |_| None)
            .await
    }

    /// [`Manager::with_running`] with what `how` asks (a reserved slot, the
    /// request's env), and the call audited as `audit` says while the
    /// sandbox is still held. The call gets the env and the manifest's
    /// `user` (the default of an exec's or session's own).
    async fn with_running_as<T, Fut>(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        how: Call,
        call: impl FnOnce(Arc<dyn Backend>, Env, Defaults) -> Fut,
        audit: impl FnOnce(&Result<T>) -> Audit,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>>,
    {
        let (_g, rec) = self.in_use(ctx, id, how.permit).await?;
        let env = match how.env {
            Some(env) => self.exec_env(&rec, env).await?,
            None => Env::new(),
        };
        let defaults = Defaults {
            user: rec.manifest.user.clone(),
            command: rec.manifest.command.clone(),
        };
        let r = call(self.backend(rec.backend)?.clone(), env, defaults).await;
        let r = self.done(&rec, r).await;
        if let Some((action, detail)) = audit(&r) {
            self.audit(ctx, action, id.as_str(), detail).await;
        }
        r
    }

    pub async fn exec(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
    ) -> Result<ExecResult> {
        self.exec_reserved(ctx, id, req, output, None).await
    }

    /// [`Manager::exec`] in a slot already reserved (see [`Manager::reserve`]).
    pub async fn exec_reserved(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        mut req: ExecRequest,
        output: Option<mpsc::Sender<ExecChunk>>,
        permit: Option<Permit>,
    ) -> Result<ExecResult> {
        stasis_core::exec::check_argv(&req.argv)?;
        check_user(req.user.as_deref())?;
        stasis_core::exec::check_timeout_ms(req.timeout_ms)?;
        stasis_core::exec::check_env(&req.env)?;
        let argv0 = req.argv[0].clone();
        let how = Call {
            permit,
            env: Some(std::mem::take(&mut req.env)),
        };
        self.with_running_as(
            ctx,
            id,
            how,
            move |b, env, d| {
                req.env = env;
                req.user = req.user.or(d.user);
                async move { b.exec(id, req, output).await }
            },
            |r| {
                let exit_code = r.as_ref().ok().and_then(|r| r.exit_code);
                let detail = serde_json::json!({"argv0": argv0, "exit_code": exit_code});
                Some(("exec", detail))
            },
        )
        .await
    }

    /// The environment of one exec or session: the manifest's env, then the
    /// tenant secrets the manifest names (opened here, for this call only),
    /// then the request's own env (which wins).
    async fn exec_env(&self, rec: &SandboxRecord, request: Env) -> Result<Env> {
        let secrets = crate::tenancy::resolve_secrets(
            &self.meta,
            self.snapshots.store(),
            &rec.tenant,
            &rec.manifest,
        )
        .await?;
        Ok(stasis_core::exec::merge_env([
            &rec.manifest.env,
            &secrets,
            &request,
        ]))
    }

    pub async fn write_file(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
        data: &[u8],
        mode: Option<u32>,
    ) -> Result<()> {
        self.check_size(data.len() as u64)?;
        self.with_running(ctx, id, |b| async move {
            b.write_file(id, path, data, mode).await
        })
        .await
    }

    pub async fn read_file(&self, ctx: &Ctx, id: &SandboxId, path: &str) -> Result<Vec<u8>> {
        let max = self.cfg.max_file_bytes;
        self.with_running_as(
            ctx,
            id,
            Call::default(),
            |b, _, _| async move {
                b.read_file(id, path, max).await.map_err(|e| match e.code {
                    ErrorCode::PayloadTooLarge => {
                        super::files::file_limit_error(&format!("{path} exceeds"), max)
                    }
                    _ => e,
                })
            },
            |r| {
                r.is_ok()
                    .then(|| ("download", serde_json::json!({"path": path})))
            },
        )
        .await
    }

    /// A tar of the sandbox's output directories (manifest `outputs`) in a
    /// transfer file the caller streams and removes. A paused sandbox is read
    /// where it lies when its backend can (a frozen process sandbox); else
    /// it is resumed first, like any other use.
    pub async fn collect_outputs(&self, ctx: &Ctx, id: &SandboxId) -> Result<(PathBuf, u64)> {
        let rec = self.meta.get_for(&ctx.tenant, id).await?;
        let out = self.transfer_path("outputs").await?;
        let backend = self.backend(rec.backend)?.clone();
        let mut size = None;
        if rec.state == SandboxState::Paused {
            // Hold off lifecycle operations while reading the paused sandbox.
            let slot = self.slot(id);
            let _g = slot.lock.clone().read_owned().await;
            if self.meta.get(id).await?.state == SandboxState::Paused {
                match backend.collect_outputs(id, &out).await {
                    Ok(n) => size = Some(n),
                    Err(e)
                        if e.code == ErrorCode::InvalidState || e.code == ErrorCode::NotFound => {}
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&out).await;
                        return Err(e);
                    }
                }
            }
        }
        let n = match size {
            Some(n) => n,
            None => {
                let to = &out;
                let r = self
                    .with_running(ctx, id, |b| async move { b.collect_outputs(id, to).await })
                    .await;
                match r {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&out).await;
                        return Err(e);
                    }
                }
            }
        };
        self.audit(
            ctx,
            "download",
            id.as_str(),
            serde_json::json!({"object": "outputs", "dirs": rec.manifest.outputs, "bytes": n}),
        )
        .await;
        Ok((out, n))
    }

    pub async fn list_files(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        path: &str,
    ) -> Result<Vec<FileEntry>> {
        self.with_running(ctx, id, |b| async move { b.list_files(id, path).await })
            .await
    }

    /// Start the sandbox's default command as a session (manifest
    /// `autostart`, at create). If it does not start, the sandbox is
    /// destroyed: a create either leaves the server running or nothing.
    pub(super) async fn autostart(&self, ctx: &Ctx, id: &SandboxId) -> Result<()> {
        let spec = SessionSpec {
            argv: vec![],
            env: Default::default(),
            cwd: None,
            pty: None,
            user: None,
        };
        match self.session_start(ctx, id, spec).await {
            Ok(_) => Ok(()),
            Err(e) => {
                warn!(sandbox = %id, error = %e, "autostart failed; destroying the sandbox");
                if let Err(d) = self.destroy(ctx, id).await {
                    warn!(sandbox = %id, error = %d, "the sandbox whose autostart failed was not destroyed");
                }
                Err(e)
            }
        }
    }

    pub async fn session_start(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        mut spec: SessionSpec,
    ) -> Result<SessionInfo> {
        // An empty argv runs the sandbox's default command.
        if !spec.argv.is_empty() {
            stasis_core::exec::check_argv(&spec.argv)?;
        }
        check_user(spec.user.as_deref())?;
        stasis_core::exec::check_env(&spec.env)?;
        if let Some(size) = spec.pty {
            stasis_core::exec::check_pty_size(size)?;
        }
        let how = Call {
            permit: None,
            env: Some(std::mem::take(&mut spec.env)),
        };
        self.with_running_as(
            ctx,
            id,
            how,
            move |b, env, d| {
                spec.env = env;
                spec.user = spec.user.or(d.user);
                async move {
                    if spec.argv.is_empty() {
                        spec.argv = d.command.ok_or_else(|| {
                            Error::invalid(
                                "argv must name a command (the sandbox has no default command: \
                                 its image has no ENTRYPOINT or CMD and its manifest no command)",
                            )
                            .with_field("argv")
                        })?;
                    }
                    b.session_start(id, spec).await
                }
            },
            |r| {
                let info = r.as_ref().ok()?;
                let argv0 = info.argv.first().cloned().unwrap_or_default();
                let detail = serde_json::json!({"session": info.id, "argv0": argv0});
                Some(("session_start", detail))
            },
        )
        .await
    }

    pub async fn session_write(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
        data: &[u8],
    ) -> Result<()> {
        self.with_running(ctx, id, |b| async move {
            b.session_write(id, session, data).await
        })
        .await
    }

    pub async fn session_read(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<SessionOutput> {
        if wait > MAX_SESSION_WAIT {
            return Err(Error::invalid(format!(
                "wait_ms: must be at most {} (got {})",
                MAX_SESSION_WAIT.as_millis(),
                wait.as_millis()
            ))
            .with_field("wait_ms"));
        }
        self.with_running(ctx, id, |b| async move {
            b.session_read(id, session, offset, wait).await
        })
        .await
    }

    /// A read for an attached terminal: unlike [`Manager::session_read`] it
    /// neither resumes the sandbox nor counts as activity (an idle attached
    /// terminal must not keep it awake), and it holds the sandbox shared for
    /// at most `wait` (at most [`MAX_ATTACHED_WAIT`]), so a pause is not held up.
    /// `None`: the sandbox is no longer running (paused, stopped): the
    /// attached client should detach and may reattach later.
    pub async fn session_read_attached(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
        offset: u64,
        wait: Duration,
    ) -> Result<Option<SessionOutput>> {
        self.meta.get_for(&ctx.tenant, id).await?;
        let _guard = self.slot(id).lock.clone().read_owned().await;
        let rec = match self.meta.get_for(&ctx.tenant, id).await {
            Ok(r) if r.state == SandboxState::Running => r,
            Ok(_) => return Ok(None),
            Err(e) if e.code == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let b = self.backend(rec.backend)?;
        let wait = wait.min(MAX_ATTACHED_WAIT);
        b.session_read(id, session, offset, wait).await.map(Some)
    }

    /// Change a terminal session's size (counts as activity).
    pub async fn session_resize(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
        size: PtySize,
    ) -> Result<()> {
        stasis_core::exec::check_pty_size(size)?;
        self.with_running(ctx, id, |b| async move {
            b.session_resize(id, session, size).await
        })
        .await
    }

    /// Close a session's standard input (not a terminal session's); counts
    /// as activity.
    pub async fn session_close_input(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
    ) -> Result<()> {
        self.with_running(ctx, id, |b| async move {
            b.session_close_input(id, session).await
        })
        .await
    }

    pub async fn session_list(&self, ctx: &Ctx, id: &SandboxId) -> Result<Vec<SessionInfo>> {
        self.with_running(ctx, id, |b| async move { b.session_list(id).await })
            .await
    }

    /// Send `signal` to a session (KILL ends its process tree).
    pub async fn session_kill(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        session: &str,
        signal: stasis_core::SessionSignal,
    ) -> Result<()> {
        self.with_running(ctx, id, |b| async move {
            b.session_kill(id, session, signal).await
        })
        .await
    }

    /// A TCP connection to `port` on the sandbox's own loopback, for the
    /// port proxy. A paused sandbox is resumed first (resume on traffic),
    /// and the connect counts as activity. Nothing listening:
    /// `port_unreachable`, the sandbox left as it was. The connection does
    /// not hold the sandbox: the proxy reports traffic on it with
    /// [`Manager::port_activity`].
    pub async fn connect_port(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        port: u16,
    ) -> Result<tokio::net::TcpStream> {
        if port == 0 {
            return Err(Error::invalid("port: must be 1-65535").with_field("port"));
        }
        self.with_running(ctx, id, |b| async move { b.connect_port(id, port).await })
            .await
    }

    /// Traffic on a port connection: the sandbox is active (its idle
    /// window starts again).
    pub fn port_activity(&self, id: &SandboxId) {
        self.touch(id);
    }

    /// After a backend call on a running sandbox: note the activity, and if
    /// the call failed in a way that may mean the sandbox is gone (backend
    /// error, agent timeout), find out and settle its state so it is not left
    /// claiming to run.
    async fn done<T>(&self, rec: &SandboxRecord, r: Result<T>) -> Result<T> {
        self.touch(&rec.id);
        if let Err(e) = &r {
            // invalid_state from a backend: it no longer holds a sandbox we
            // believe runs.
            if matches!(
                e.code,
                ErrorCode::BackendError | ErrorCode::Timeout | ErrorCode::InvalidState
            ) {
                if let Ok(b) = self.backend(rec.backend) {
                    if let Ok(Recovered::NotRunning) = b.recover(&self.spec(rec)).await {
                        warn!(sandbox = %rec.id, error = %e, "sandbox lost during a request");
                        if let Err(e2) = self
                            .settle_lost(rec, SandboxState::Running, &e.message)
                            .await
                        {
                            warn!(sandbox = %rec.id, error = %e2, "could not settle a lost sandbox");
                        }
                    }
                }
            }
        }
        r
    }

    pub async fn usage(&self, ctx: &Ctx, id: &SandboxId) -> Result<Usage> {
        let rec = self.meta.get_for(&ctx.tenant, id).await?;
        self.backend(rec.backend)?.usage(id).await
    }
}
