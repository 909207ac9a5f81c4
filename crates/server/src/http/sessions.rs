//! Long-running sessions in a sandbox: start and list them (on a terminal
//! with `pty: {cols, rows}`), write to their input, read their output from
//! an offset (waiting for more), resize their terminal, kill them. Attaching
//! over a WebSocket is `http::attach`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{b64, Error, PtySize, SessionSpec};

use super::auth::Authed;
use super::error::{ApiJson, ApiQuery, ApiResult};
use super::sandboxes::sandbox_id;
use super::state::AppState;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInput {
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub data_b64: Option<String>,
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutputQuery {
    #[serde(default)]
    pub offset: u64,
    /// Wait up to this long for new output (at most 60000; more is refused).
    #[serde(default)]
    pub wait_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionOutputResponse {
    pub offset: u64,
    /// The window's combined stdout and stderr, as text (invalid UTF-8
    /// replaced; `data_b64` has the bytes).
    pub data: String,
    pub data_b64: String,
    /// The same window's bytes that came from stdout (a terminal's output is
    /// all stdout), as text and base64.
    pub stdout: String,
    pub stdout_b64: String,
    /// The same window's bytes that came from stderr.
    pub stderr: String,
    pub stderr_b64: String,
    pub next_offset: u64,
    pub running: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/sessions", request_body(content = Object, description = "{argv? (default: the manifest's command, from the image's ENTRYPOINT + CMD), env?, cwd?, pty?: {cols, rows}, user?}"),
    responses((status = 201, description = "session started")))]
async fn start_session(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(spec): ApiJson<SessionSpec>,
) -> ApiResult<(StatusCode, axum::Json<stasis_core::SessionInfo>)> {
    let ctx = auth.ctx();
    let info = st
        .manager
        .session_start(&ctx, &sandbox_id(&id)?, spec)
        .await?;
    Ok((StatusCode::CREATED, axum::Json(info)))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/sessions", responses((status = 200, description = "sessions, with the same ids across pause/resume")))]
async fn list_sessions(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Vec<stasis_core::SessionInfo>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(
        st.manager.session_list(&ctx, &sandbox_id(&id)?).await?,
    ))
}

fn session_name(s: &str) -> ApiResult<&str> {
    stasis_core::id::validate_id("session", s)?;
    Ok(s)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/sessions/{session}/input", request_body = SessionInput, responses((status = 204)))]
async fn session_input(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, session)): Path<(String, String)>,
    ApiJson(body): ApiJson<SessionInput>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let data = match (body.data, body.data_b64) {
        (Some(s), None) => s.into_bytes(),
        (None, Some(b)) => b64::decode(&b).map_err(|e| Error::invalid(format!("data_b64: {e}")))?,
        _ => return Err(Error::invalid("give exactly one of data, data_b64").into()),
    };
    st.manager
        .session_write(&ctx, &sandbox_id(&id)?, session_name(&session)?, &data)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/sessions/{session}/output", params(OutputQuery), responses((status = 200, body = SessionOutputResponse)))]
async fn session_output(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, session)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<OutputQuery>,
) -> ApiResult<axum::Json<SessionOutputResponse>> {
    let ctx = auth.ctx();
    let out = st
        .manager
        .session_read(
            &ctx,
            &sandbox_id(&id)?,
            session_name(&session)?,
            q.offset,
            Duration::from_millis(q.wait_ms),
        )
        .await?;
    let (stdout, stderr) = out.split();
    Ok(axum::Json(SessionOutputResponse {
        offset: out.offset,
        data: String::from_utf8_lossy(&out.data).into_owned(),
        data_b64: b64::encode(&out.data),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stdout_b64: b64::encode(&stdout),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        stderr_b64: b64::encode(&stderr),
        next_offset: out.next_offset,
        running: out.running,
        exit_code: out.exit_code,
    }))
}

/// The body of a resize: the terminal's size and nothing else (an unknown
/// field is refused, as in every other body).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeBody {
    pub cols: u16,
    pub rows: u16,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/sessions/{session}/resize", request_body(content = Object, description = "{cols, rows}: each 1..=1000"),
    responses((status = 204, description = "resized; the session's foreground job gets SIGWINCH"),
              (status = 400, description = "size out of range"),
              (status = 409, description = "the session has no terminal or has ended")))]
async fn resize_session(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, session)): Path<(String, String)>,
    ApiJson(ResizeBody { cols, rows }): ApiJson<ResizeBody>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let size = PtySize { cols, rows };
    st.manager
        .session_resize(&ctx, &sandbox_id(&id)?, session_name(&session)?, size)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KillQuery {
    /// The signal: `HUP`, `INT` (a ^C), `QUIT`, `KILL` (default: the
    /// session's whole process tree), `USR1`, `USR2`, `TERM`; `SIG` prefix
    /// and case are free. Any other signal goes to the session's command and
    /// its process group, which may handle it. The session stays readable
    /// (output, exit status) after it ended.
    #[serde(default)]
    pub signal: Option<String>,
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/sessions/{session}", params(KillQuery),
    responses((status = 204, description = "signal sent"), (status = 400, description = "unknown signal")))]
async fn kill_session(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, session)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<KillQuery>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let signal = match q.signal.as_deref() {
        Some(name) => stasis_core::SessionSignal::parse(name)?,
        None => stasis_core::SessionSignal::Kill,
    };
    st.manager
        .session_kill(&ctx, &sandbox_id(&id)?, session_name(&session)?, signal)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(start_session, list_sessions))
        .routes(routes!(kill_session))
        .routes(routes!(session_input))
        .routes(routes!(session_output))
        .routes(routes!(resize_session))
}
