//! Running a command in a sandbox: `POST .../exec` answers once it ended,
//! `POST .../exec/stream` streams its output as NDJSON lines.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{b64, Error, ExecRequest, ExecResult, Stream};

use super::auth::Authed;
use super::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use super::sandboxes::sandbox_id;
use super::state::AppState;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Default 60000.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Text fed to stdin.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Bytes fed to stdin, base64 (instead of `stdin`).
    #[serde(default)]
    pub stdin_b64: Option<String>,
    /// Run as `USER[:GROUP]` (default: the manifest's `user`, else root).
    #[serde(default)]
    pub user: Option<String>,
}

impl ExecBody {
    fn into_request(self) -> ApiResult<ExecRequest> {
        stasis_core::exec::check_env(&self.env).map_err(ApiError::from)?;
        let stdin =
            match (self.stdin, self.stdin_b64) {
                (Some(_), Some(_)) => {
                    return Err(Error::invalid("give stdin or stdin_b64, not both").into())
                }
                (Some(s), None) => Some(s.into_bytes()),
                (None, Some(b)) => Some(b64::decode(&b).map_err(|e| {
                    Error::invalid(format!("stdin_b64: {e}")).with_field("stdin_b64")
                })?),
                (None, None) => None,
            };
        Ok(ExecRequest {
            argv: self.argv,
            env: self.env,
            cwd: self.cwd,
            timeout_ms: self.timeout_ms.unwrap_or(60_000),
            stdin,
            user: self.user,
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecResponse {
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Output as text (invalid UTF-8 replaced; see `stdout_b64` for the bytes).
    pub stdout: String,
    pub stderr: String,
    pub stdout_b64: String,
    pub stderr_b64: String,
    pub timed_out: bool,
    pub truncated: bool,
    pub duration_ms: u64,
}

impl From<ExecResult> for ExecResponse {
    fn from(r: ExecResult) -> Self {
        ExecResponse {
            exit_code: r.exit_code,
            signal: r.signal,
            stdout: String::from_utf8_lossy(&r.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&r.stderr).into_owned(),
            stdout_b64: b64::encode(&r.stdout),
            stderr_b64: b64::encode(&r.stderr),
            timed_out: r.timed_out,
            truncated: r.truncated,
            duration_ms: r.duration_ms,
        }
    }
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", request_body = ExecBody,
    responses((status = 200, body = ExecResponse), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn exec(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExecBody>,
) -> ApiResult<axum::Json<ExecResponse>> {
    let ctx = auth.ctx();
    let r = st
        .manager
        .exec(&ctx, &sandbox_id(&id)?, body.into_request()?, None)
        .await?;
    Ok(axum::Json(r.into()))
}

/// One line of the streaming exec response (NDJSON).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecStreamLine {
    Output {
        stream: String,
        data: String,
        data_b64: String,
    },
    Exit {
        exit_code: Option<i32>,
        signal: Option<i32>,
        timed_out: bool,
        truncated: bool,
        duration_ms: u64,
    },
    Error {
        code: String,
        message: String,
    },
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec/stream", request_body = ExecBody,
    responses((status = 200, description = "NDJSON lines: output chunks, then one exit or error line", body = ExecStreamLine)))]
async fn exec_stream(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ExecBody>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    let id = sandbox_id(&id)?;
    let req = body.into_request()?;
    // Resolve the sandbox and take its in-flight slot up front, so an unknown
    // id is a plain 404 and a full queue a plain 429, not a stream.
    let permit = st.manager.reserve(&ctx, &id).await?;
    let (tx, mut rx) = mpsc::channel::<stasis_backend::ExecChunk>(64);
    let (line_tx, line_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let manager = st.manager.clone();
    tokio::spawn(async move {
        let lines = line_tx.clone();
        let forward = tokio::spawn(async move {
            while let Some(c) = rx.recv().await {
                let line = ExecStreamLine::Output {
                    stream: match c.stream {
                        Stream::Stdout => "stdout".into(),
                        Stream::Stderr => "stderr".into(),
                    },
                    data: String::from_utf8_lossy(&c.data).into_owned(),
                    data_b64: b64::encode(&c.data),
                };
                if lines.send(Ok(ndjson(&line))).await.is_err() {
                    break;
                }
            }
        });
        let result = manager
            .exec_reserved(&ctx, &id, req, Some(tx), Some(permit))
            .await;
        let _ = forward.await;
        let last = match result {
            Ok(r) => ExecStreamLine::Exit {
                exit_code: r.exit_code,
                signal: r.signal,
                timed_out: r.timed_out,
                truncated: r.truncated,
                duration_ms: r.duration_ms,
            },
            Err(e) => ExecStreamLine::Error {
                code: e.code.as_str().into(),
                message: e.message,
            },
        };
        let _ = line_tx.send(Ok(ndjson(&last))).await;
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(line_rx);
    Ok(Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(Body::from_stream(stream))
        .map_err(|e| Error::internal(e.to_string()))?)
}

fn ndjson<T: Serialize>(v: &T) -> Bytes {
    let mut s = serde_json::to_vec(v).unwrap_or_default();
    s.push(b'\n');
    Bytes::from(s)
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(exec_stream))
}
