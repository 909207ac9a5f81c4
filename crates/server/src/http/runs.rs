//! HTTP API of run state (issue 5). Handlers translate HTTP to
//! [`crate::runs::Runs`] calls; errors are the API's usual JSON errors.
//!
//! - `POST /v1/runs` `{sandbox?}` -> 201 run
//! - `GET  /v1/runs` -> run summaries; `GET /v1/runs/{id}` -> run with steps, calls, approvals
//! - `POST /v1/runs/{id}/steps` `{kind: model_step|handover|completed|failed, data?}`
//! - `POST /v1/runs/{id}/tool-calls` `{idempotency_key, kind: "exec", argv, cwd?, timeout_ms?, env?,
//!   side_effecting, requires_approval}` -> 200 with the result (or the recorded one on a
//!   retry), 202 when it waits for approval
//! - `POST /v1/runs/{id}/approvals/{call}/approve|reject` `{reason}` (actor: `x-stasis-actor`)
//! - `GET  /v1/runs/{id}/state` -> signed RunState document
//! - `POST /v1/runs/resume` with a document -> checks and a fresh document

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::Error;
use stasis_meta::runs::RunSummary;
use stasis_runstate::{CallState, Run, StateDocument, StepKind};

use super::auth::Authed;
use super::error::{optional_json, ApiError, ApiJson, ApiResult, ErrorBody};
use super::state::AppState;
use crate::runs::{CallOutcome, ResumeReport, ToolCallRequest};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    #[serde(default)]
    pub sandbox: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepBody {
    pub kind: String,
    #[serde(default)]
    pub data: serde_json::Value,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    #[serde(default)]
    pub reason: String,
}

/// Run an operation that may execute a tool call to its end even if the
/// client goes away: a dropped request must not cut an exec between its
/// intent and its result (that would make its outcome unknown).
async fn detached<T: Send + 'static>(
    f: impl std::future::Future<Output = stasis_core::Result<T>> + Send + 'static,
) -> ApiResult<T> {
    tokio::spawn(f)
        .await
        .map_err(|e| ApiError(Error::internal(format!("tool call task: {e}"))))?
        .map_err(ApiError)
}

#[utoipa::path(post, path = "/v1/runs", request_body(content = Object, description = "{sandbox?}"),
    responses((status = 201, description = "the new run"), (status = 404, body = ErrorBody)))]
async fn create_run(
    State(st): State<AppState>,
    auth: Authed,
    ApiJson(body): ApiJson<CreateRun>,
) -> ApiResult<(StatusCode, axum::Json<Run>)> {
    let ctx = auth.ctx();
    let run = st.runs.create(&ctx, body.sandbox).await?;
    Ok((StatusCode::CREATED, axum::Json(run)))
}

#[utoipa::path(get, path = "/v1/runs", responses((status = 200, description = "run summaries of this tenant")))]
async fn list_runs(
    State(st): State<AppState>,
    auth: Authed,
) -> ApiResult<axum::Json<Vec<RunSummary>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.runs.list(&ctx).await?))
}

#[utoipa::path(get, path = "/v1/runs/{id}", responses((status = 200, description = "the run: status, ordered steps, tool calls, approvals"), (status = 404, body = ErrorBody)))]
async fn get_run(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Run>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.runs.get(&ctx, &id).await?))
}

#[utoipa::path(post, path = "/v1/runs/{id}/steps", request_body(content = Object, description = "{kind: model_step|handover|completed|failed, data?}"),
    responses((status = 200, description = "the run"), (status = 409, body = ErrorBody)))]
async fn append_step(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<StepBody>,
) -> ApiResult<axum::Json<Run>> {
    let ctx = auth.ctx();
    let kind = StepKind::parse(&body.kind).map_err(|e| e.with_field("kind"))?;
    Ok(axum::Json(st.runs.step(&ctx, &id, kind, body.data).await?))
}

fn call_status(o: &CallOutcome) -> StatusCode {
    if o.call.state == CallState::AwaitingApproval {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    }
}

#[utoipa::path(post, path = "/v1/runs/{id}/tool-calls",
    request_body(content = Object, description = "{idempotency_key, kind: \"exec\", argv, cwd?, timeout_ms?, env?, side_effecting, requires_approval}"),
    responses((status = 200, description = "{run, call, outcome, replayed}: executed now, or the recorded outcome of the key (succeeded, failed, rejected, outcome_unknown)"),
        (status = 202, description = "held until approved"), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn request_call(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ToolCallRequest>,
) -> ApiResult<(StatusCode, axum::Json<CallOutcome>)> {
    let ctx = auth.ctx();
    let r = st.runs.clone();
    let o = detached(async move { r.request_call(&ctx, &id, body).await }).await?;
    Ok((call_status(&o), axum::Json(o)))
}

async fn decide(
    st: AppState,
    auth: Authed,
    id: String,
    call: String,
    body: bytes::Bytes,
    approve: bool,
) -> ApiResult<(StatusCode, axum::Json<CallOutcome>)> {
    let ctx = auth.ctx();
    let body: DecisionBody = optional_json(&body)?;
    let r = st.runs.clone();
    let o =
        detached(async move { r.decide(&ctx, &id, &call, approve, &body.reason).await }).await?;
    Ok((call_status(&o), axum::Json(o)))
}

#[utoipa::path(post, path = "/v1/runs/{id}/approvals/{call}/approve", request_body(content = Object, description = "{reason}"),
    responses((status = 200, description = "decision recorded and the call executed"), (status = 409, body = ErrorBody)))]
async fn approve(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, call)): Path<(String, String)>,
    body: bytes::Bytes,
) -> ApiResult<(StatusCode, axum::Json<CallOutcome>)> {
    decide(st, auth, id, call, body, true).await
}

#[utoipa::path(post, path = "/v1/runs/{id}/approvals/{call}/reject", request_body(content = Object, description = "{reason}"),
    responses((status = 200, description = "decision recorded; the call never runs"), (status = 409, body = ErrorBody)))]
async fn reject(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, call)): Path<(String, String)>,
    body: bytes::Bytes,
) -> ApiResult<(StatusCode, axum::Json<CallOutcome>)> {
    decide(st, auth, id, call, body, false).await
}

#[utoipa::path(get, path = "/v1/runs/{id}/state", responses((status = 200, description = "signed, versioned RunState document")))]
async fn run_state(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<StateDocument>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.runs.state(&ctx, &id).await?))
}

#[utoipa::path(post, path = "/v1/runs/resume", request_body(content = Object, description = "a RunState document, or {document, sandbox} to continue the run in another sandbox (e.g. restored from a snapshot)"),
    responses((status = 200, description = "checks (pending approvals, sandbox) and a fresh document"), (status = 400, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn resume_run(
    State(st): State<AppState>,
    auth: Authed,
    ApiJson(doc): ApiJson<serde_json::Value>,
) -> ApiResult<axum::Json<ResumeReport>> {
    let ctx = auth.ctx();
    // Either the document itself, or {"document": ..., "sandbox": "sb-..."}
    // to move the run to another sandbox (e.g. restored from a snapshot).
    let (doc, rebind) = match doc.get("document") {
        Some(d) if doc.get("format").is_none() => {
            let sb = match doc.get("sandbox") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    return Err(Error::invalid("sandbox must be a sandbox id")
                        .with_field("sandbox")
                        .into())
                }
            };
            (d.clone(), sb)
        }
        _ => (doc, None),
    };
    Ok(axum::Json(st.runs.resume(&ctx, &doc, rebind).await?))
}

/// The run-state routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_run, list_runs))
        .routes(routes!(resume_run))
        .routes(routes!(get_run))
        .routes(routes!(append_step))
        .routes(routes!(request_call))
        .routes(routes!(approve))
        .routes(routes!(reject))
        .routes(routes!(run_state))
}
