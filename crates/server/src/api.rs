//! The HTTP API. Handlers only translate between HTTP and `Manager` calls;
//! every error leaves as `{"error": {"code", "message", "field"?}}` with the
//! status its code maps to.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::{request::Parts, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::sync::mpsc;
use utoipa::{OpenApi, ToSchema};

use stasis_core::{
    b64, Error, ErrorCode, ExecRequest, ExecResult, Manifest, SandboxId, SandboxState, SessionSpec,
    SnapshotId, Stream, TenantId,
};
use stasis_meta::SandboxRecord;

use crate::manager::{Manager, OpTiming};

pub use crate::auth::DEFAULT_TENANT;
use crate::auth::{AdminAuthed, Authed, Limiter};

#[derive(Clone)]
pub struct AppState {
    pub manager: Arc<Manager>,
    pub doctor: Arc<serde_json::Value>,
    /// Per-token request rate limit.
    pub limiter: Arc<Limiter>,
}

// ----- errors ------------------------------------------------------------

/// An API error: a stasis error rendered as JSON with its HTTP status.
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `not_found`, `invalid_state`.
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.0.code.as_str().to_string(),
                message: self.0.message,
                field: self.0.field,
            },
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if self.0.code == ErrorCode::Overloaded {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(crate::inflight::RETRY_AFTER_SECS),
            );
        }
        resp
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// JSON body extractor whose rejections are API errors.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError(Error::invalid(
                "expected a JSON body with content-type application/json",
            )));
        }
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|r| ApiError(bytes_rejection(r)))?;
        require_object(&body)?;
        Ok(ApiJson(strict_json(&body)?))
    }
}

/// A JSON object body as `T`: syntax errors as `invalid_argument`; type and
/// shape errors name the field (non-objects refused at every level).
fn strict_json<T: DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError(Error::invalid(format!("the request body is not JSON: {e}"))))?;
    Ok(stasis_core::strict::from_value(
        v,
        ErrorCode::InvalidArgument,
        "body",
    )?)
}

/// `application/json` or any `application/...+json`, parameters ignored:
/// the rule of axum's `Json` extractor, which keeps its check private; the
/// body is read as bytes first so that it can be checked to be an object.
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn bytes_rejection(r: BytesRejection) -> Error {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        Error::new(
            ErrorCode::PayloadTooLarge,
            "request body exceeds the configured limit",
        )
    } else {
        Error::invalid(r.body_text())
    }
}

/// Raw body extractor with API errors (413 for oversized bodies).
pub struct ApiBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(ApiBytes)
            .map_err(|r| ApiError(bytes_rejection(r)))
    }
}

/// Query extractor with API errors.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|r: QueryRejection| ApiError(Error::invalid(r.body_text())))
    }
}

// ----- caller identity ---------------------------------------------------

fn sandbox_id(s: &str) -> ApiResult<SandboxId> {
    Ok(SandboxId::parse(s)?)
}

fn snapshot_id(s: &str) -> ApiResult<SnapshotId> {
    Ok(SnapshotId::parse(s)?)
}

// ----- request / response bodies -------------------------------------------

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// The sandbox's manifest (see the README); every field is optional.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub manifest: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct Sandbox {
    pub id: String,
    pub state: String,
    pub backend: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[schema(value_type = Object)]
    pub manifest: Manifest,
    /// Format version of the manifest the sandbox runs under.
    pub manifest_version: u32,
    /// Digest of that manifest (also recorded in every snapshot taken of it).
    pub manifest_digest: String,
    pub created_at_ms: i64,
    /// Running time so far; paused time does not count.
    pub running_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at_ms: Option<i64>,
    /// When this paused sandbox will be destroyed (TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_snapshot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_snapshot: Option<String>,
    /// Last periodic checkpoint (`lifecycle.checkpoint_secs`) and when it was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_snapshot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_at_ms: Option<i64>,
    /// Set after another node took the sandbox over because the node running
    /// it died: the snapshot it was restored from, when, and how much running
    /// time after that snapshot was lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_from_snapshot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_lost_ms: Option<i64>,
    /// Node running the sandbox (several daemons sharing one database).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Timing of the operation that produced this response, when it was a lifecycle change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub timing: Option<OpTiming>,
}

impl Sandbox {
    pub fn from_record(r: SandboxRecord) -> Self {
        let now = stasis_core::now_ms();
        Sandbox {
            running_ms: r.running_time_ms(now),
            id: r.id.to_string(),
            state: r.state.to_string(),
            backend: r.backend.to_string(),
            reason: r.reason,
            manifest_version: r.manifest.version,
            manifest: r.manifest,
            manifest_digest: r.manifest_digest,
            created_at_ms: r.created_at_ms,
            paused_at_ms: r.paused_at_ms,
            expires_at_ms: r.expires_at_ms,
            pause_kind: r.pause_kind.map(|k| k.as_str().to_string()),
            pause_snapshot: r.pause_snapshot.map(|s| s.to_string()),
            source_snapshot: r.source_snapshot.map(|s| s.to_string()),
            checkpoint_snapshot: r.checkpoint_snapshot.map(|s| s.to_string()),
            checkpoint_at_ms: r.checkpoint_at_ms,
            recovered_from_snapshot: r.recovered_from_snapshot.map(|s| s.to_string()),
            recovered_at_ms: r.recovered_at_ms,
            progress_lost_ms: r.progress_lost_ms,
            node: r.owner,
            timing: None,
        }
    }
    fn timed(mut self, t: OpTiming) -> Self {
        self.timing = Some(t);
        self
    }
}

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
        })
    }
}

#[derive(Serialize, Deserialize, ToSchema)]
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

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PathQuery {
    /// Path inside the sandbox (absolute, or relative to the workdir).
    pub path: String,
    /// Octal file mode for writes, e.g. "755".
    #[serde(default)]
    pub mode: Option<String>,
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only sandboxes in this state (e.g. `paused`).
    #[serde(default)]
    pub state: Option<String>,
}

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

#[derive(Serialize, Deserialize, ToSchema)]
pub struct SessionOutputResponse {
    pub offset: u64,
    pub data: String,
    pub data_b64: String,
    pub next_offset: u64,
    pub running: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// false: keep only the filesystem. Default: the sandbox's policy.
    #[serde(default)]
    pub keep_memory: Option<bool>,
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct SnapshotBody {
    /// Seconds the snapshot is kept, 1 to 315360000 (10 years); default 7 days.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    /// Manifest for the new sandbox; default: the one the snapshot was taken under.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub manifest: Option<serde_json::Value>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    pub count: u32,
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// Every request body is a JSON object. serde's derived structs would also
/// take a JSON array as their fields in order, so `[]` would pass as a
/// request whose fields all have defaults.
fn require_object(body: &[u8]) -> ApiResult<()> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        Ok(())
    } else {
        Err(ApiError(Error::invalid(
            "the request body must be a JSON object",
        )))
    }
}

/// A body that may be empty (then `T::default()`) or else a JSON object.
pub(crate) fn optional_json<T: DeserializeOwned + Default>(body: &Bytes) -> ApiResult<T> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(T::default());
    }
    require_object(body)?;
    strict_json(body)
}

fn manifest_from(v: Option<serde_json::Value>) -> ApiResult<Manifest> {
    Ok(match v {
        Some(v) => Manifest::parse(v)?,
        None => Manifest::default(),
    })
}

// ----- handlers ------------------------------------------------------------

#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "daemon is up")))]
async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(get, path = "/v1/doctor", responses((status = 200, description = "what this machine and daemon support")))]
async fn doctor(State(st): State<AppState>) -> axum::Json<serde_json::Value> {
    let mut v = (*st.doctor).clone();
    v["backends"] = serde_json::to_value(st.manager.capabilities()).unwrap_or_default();
    axum::Json(v)
}

#[utoipa::path(post, path = "/v1/sandboxes", request_body = CreateSandbox,
    responses((status = 201, body = Sandbox), (status = 400, body = ErrorBody)))]
async fn create_sandbox(
    State(st): State<AppState>,
    auth: Authed,
    ApiJson(body): ApiJson<CreateSandbox>,
) -> ApiResult<(StatusCode, axum::Json<Sandbox>)> {
    let ctx = auth.ctx();
    let manifest = manifest_from(body.manifest)?;
    // Runs to its end even if the client goes away: dropped half-way, the
    // create would leave its record in Creating and what the backend had
    // built (a VM, or a cgroup and a loop-mounted layer) until a restart.
    let manager = st.manager.clone();
    let rec = tokio::spawn(async move { manager.create(&ctx, manifest).await })
        .await
        .map_err(|e| Error::internal(format!("create task: {e}")))??;
    Ok((StatusCode::CREATED, axum::Json(Sandbox::from_record(rec))))
}

#[utoipa::path(get, path = "/v1/sandboxes", params(ListQuery), responses((status = 200, body = [Sandbox])))]
async fn list_sandboxes(
    State(st): State<AppState>,
    auth: Authed,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<Vec<Sandbox>>> {
    let ctx = auth.ctx();
    let state = q.state.as_deref().map(SandboxState::parse).transpose()?;
    let recs = st.manager.list(&ctx, state).await?;
    Ok(axum::Json(
        recs.into_iter().map(Sandbox::from_record).collect(),
    ))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", responses((status = 200, body = Sandbox), (status = 404, body = ErrorBody)))]
async fn get_sandbox(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Sandbox>> {
    let ctx = auth.ctx();
    Ok(axum::Json(Sandbox::from_record(
        st.manager.get(&ctx, &sandbox_id(&id)?).await?,
    )))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", responses((status = 200, body = Sandbox), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn destroy_sandbox(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Sandbox>> {
    let ctx = auth.ctx();
    Ok(axum::Json(Sandbox::from_record(
        st.manager.destroy(&ctx, &sandbox_id(&id)?).await?,
    )))
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
#[derive(Serialize, Deserialize, ToSchema)]
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

fn parse_mode(mode: Option<&str>) -> ApiResult<Option<u32>> {
    mode.map(|m| {
        u32::from_str_radix(m, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| {
                ApiError(
                    Error::invalid(format!("mode {m:?} is not an octal file mode"))
                        .with_field("mode"),
                )
            })
    })
    .transpose()
}

#[utoipa::path(put, path = "/v1/sandboxes/{id}/files", params(PathQuery), request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 204), (status = 413, body = ErrorBody)))]
async fn put_file(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    body: Body,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let mode = parse_mode(q.mode.as_deref())?;
    let limit = st.manager.config().max_file_bytes;
    let data = read_limited(body, limit).await?;
    st.manager
        .write_file(&ctx, &sandbox_id(&id)?, &q.path, &data, mode)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Read a request body of at most `limit` bytes. An oversized body is still
/// drained (up to a hard cap) so the client receives the 413 instead of a
/// connection reset in the middle of its upload.
async fn read_limited(body: Body, limit: u64) -> ApiResult<Vec<u8>> {
    use futures::StreamExt;
    let drain_cap = limit.saturating_mul(4).max(64 * 1024 * 1024);
    let mut stream = body.into_data_stream();
    let mut data = Vec::new();
    let mut seen = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::invalid(format!("reading the request body: {e}")))?;
        seen += chunk.len() as u64;
        if seen <= limit {
            data.extend_from_slice(&chunk);
        } else if seen > drain_cap {
            break;
        }
    }
    if seen > limit {
        return Err(Error::new(
            ErrorCode::PayloadTooLarge,
            format!("file exceeds the limit of {limit} bytes"),
        )
        .into());
    }
    Ok(data)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", params(PathQuery),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>), (status = 404, body = ErrorBody)))]
async fn get_file(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    let data = st
        .manager
        .read_file(&ctx, &sandbox_id(&id)?, &q.path)
        .await?;
    Ok(([("content-type", "application/octet-stream")], data).into_response())
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/list", params(PathQuery), responses((status = 200, description = "directory entries")))]
async fn list_files(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> ApiResult<axum::Json<Vec<stasis_core::FileEntry>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(
        st.manager
            .list_files(&ctx, &sandbox_id(&id)?, &q.path)
            .await?,
    ))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/sessions", request_body(content = Object, description = "{argv, env?, cwd?}"),
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
    Ok(axum::Json(SessionOutputResponse {
        offset: out.offset,
        data: String::from_utf8_lossy(&out.data).into_owned(),
        data_b64: b64::encode(&out.data),
        next_offset: out.next_offset,
        running: out.running,
        exit_code: out.exit_code,
    }))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/sessions/{session}", responses((status = 204)))]
async fn kill_session(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, session)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    st.manager
        .session_kill(&ctx, &sandbox_id(&id)?, session_name(&session)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/pause", request_body = PauseBody,
    responses((status = 200, body = Sandbox), (status = 409, body = ErrorBody)))]
async fn pause(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<axum::Json<Sandbox>> {
    let ctx = auth.ctx();
    let body: PauseBody = optional_json(&body)?;
    let (rec, t) = st
        .manager
        .pause(&ctx, &sandbox_id(&id)?, body.keep_memory)
        .await?;
    Ok(axum::Json(Sandbox::from_record(rec).timed(t)))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/resume", responses((status = 200, body = Sandbox), (status = 409, body = ErrorBody)))]
async fn resume(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Sandbox>> {
    let ctx = auth.ctx();
    let (rec, t) = st.manager.resume(&ctx, &sandbox_id(&id)?).await?;
    Ok(axum::Json(Sandbox::from_record(rec).timed(t)))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/usage", responses((status = 200, description = "host CPU time, RSS and process count of the sandbox")))]
async fn usage(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<stasis_backend::Usage>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.manager.usage(&ctx, &sandbox_id(&id)?).await?))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/snapshots", request_body = SnapshotBody, responses((status = 201, description = "snapshot taken")))]
async fn take_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<(StatusCode, axum::Json<crate::SnapshotInfo>)> {
    let ctx = auth.ctx();
    let body: SnapshotBody = optional_json(&body)?;
    let snap = st
        .manager
        .snapshot(
            &ctx,
            &sandbox_id(&id)?,
            body.ttl_secs.map(Duration::from_secs),
        )
        .await?;
    Ok((StatusCode::CREATED, axum::Json(snap)))
}

#[derive(Serialize, ToSchema)]
pub struct ForkResponse {
    pub snapshot: String,
    pub sandboxes: Vec<Sandbox>,
    pub total_ms: u64,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/fork", request_body = ForkBody, responses((status = 201, body = ForkResponse)))]
async fn fork(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ForkBody>,
) -> ApiResult<(StatusCode, axum::Json<ForkResponse>)> {
    let ctx = auth.ctx();
    let t0 = std::time::Instant::now();
    let (snap, children) = st.manager.fork(&ctx, &sandbox_id(&id)?, body.count).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(ForkResponse {
            snapshot: snap.id.to_string(),
            sandboxes: children.into_iter().map(Sandbox::from_record).collect(),
            total_ms: t0.elapsed().as_millis() as u64,
        }),
    ))
}

#[utoipa::path(get, path = "/v1/snapshots", responses((status = 200, description = "the tenant's snapshots")))]
async fn list_snapshots(
    State(st): State<AppState>,
    auth: Authed,
) -> ApiResult<axum::Json<Vec<crate::SnapshotInfo>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.manager.list_snapshots(&ctx).await?))
}

#[utoipa::path(get, path = "/v1/snapshots/{id}", responses((status = 200, description = "snapshot"), (status = 404, body = ErrorBody)))]
async fn get_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<crate::SnapshotInfo>> {
    let ctx = auth.ctx();
    Ok(axum::Json(
        st.manager.get_snapshot(&ctx, &snapshot_id(&id)?).await?,
    ))
}

#[utoipa::path(delete, path = "/v1/snapshots/{id}", responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn delete_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    st.manager.delete_snapshot(&ctx, &snapshot_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/snapshots/{id}/restore", request_body = RestoreBody, responses((status = 201, body = Sandbox), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn restore_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<(StatusCode, axum::Json<Sandbox>)> {
    let ctx = auth.ctx();
    let body: RestoreBody = optional_json(&body)?;
    let manifest = body.manifest.map(Manifest::parse).transpose()?;
    let rec = st
        .manager
        .restore(&ctx, &snapshot_id(&id)?, manifest)
        .await?;
    Ok((StatusCode::CREATED, axum::Json(Sandbox::from_record(rec))))
}

#[utoipa::path(get, path = "/v1/snapshots/{id}/export",
    responses((status = 200, content_type = "application/octet-stream", description = "the snapshot as one encrypted, self-verifying file"), (status = 404, body = ErrorBody)))]
async fn export_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    let path = st.manager.export_snapshot(&ctx, &snapshot_id(&id)?).await?;
    let file = tokio::fs::File::open(&path).await.map_err(Error::from)?;
    let len = file.metadata().await.map_err(Error::from)?.len();
    // Unlinked now, read through the open handle: nothing is left behind
    // whether or not the client reads to the end.
    let _ = tokio::fs::remove_file(&path).await;
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20);
    Response::builder()
        .header("content-type", "application/octet-stream")
        .header("content-length", len)
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError(Error::internal(e.to_string())))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/outputs",
    responses((status = 200, content_type = "application/x-tar", description = "tar of the manifest's output directories (entries named by sandbox path without the leading /; files, directories, symlinks as links)"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn sandbox_outputs(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    let (path, len) = st.manager.collect_outputs(&ctx, &sandbox_id(&id)?).await?;
    let file = tokio::fs::File::open(&path).await.map_err(Error::from)?;
    let _ = tokio::fs::remove_file(&path).await;
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20);
    Response::builder()
        .header("content-type", "application/x-tar")
        .header("content-length", len)
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError(Error::internal(e.to_string())))
}

#[utoipa::path(post, path = "/v1/snapshots/import", request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, description = "imported snapshot"), (status = 422, body = ErrorBody)))]
async fn import_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    body: Body,
) -> ApiResult<(StatusCode, axum::Json<crate::SnapshotInfo>)> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let ctx = auth.ctx();
    let path = st.manager.transfer_path("import").await?;
    let result = async {
        let mut f = tokio::fs::File::create(&path).await?;
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Error::invalid(format!("reading the upload: {e}")))?;
            f.write_all(&chunk).await?;
        }
        f.flush().await?;
        drop(f);
        st.manager.import_snapshot(&ctx, &path).await
    }
    .await;
    let _ = tokio::fs::remove_file(&path).await;
    Ok((StatusCode::CREATED, axum::Json(result?)))
}

/// Garbage collection sweeps every tenant's chunks: an operator action, so
/// it needs an admin token.
#[utoipa::path(post, path = "/v1/store/gc", security(("bearer" = [])), responses((status = 200, description = "garbage collection report: expired snapshots, chunks freed"), (status = 403, description = "not an admin token")))]
async fn store_gc(
    State(st): State<AppState>,
    _admin: AdminAuthed,
) -> ApiResult<axum::Json<stasis_store::GcReport>> {
    Ok(axum::Json(st.manager.snapshots().gc().await?))
}

#[utoipa::path(get, path = "/v1/store/stats", responses((status = 200, description = "the tenant's snapshot bytes, raw and stored")))]
async fn store_stats(
    State(st): State<AppState>,
    auth: Authed,
) -> ApiResult<axum::Json<stasis_store::StoreStats>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.manager.snapshots().stats(&ctx.tenant).await?))
}

#[utoipa::path(get, path = "/v1/audit", params(AuditQuery), responses((status = 200, description = "audit entries, oldest first")))]
async fn audit_list(
    State(st): State<AppState>,
    auth: Authed,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<axum::Json<Vec<stasis_meta::AuditEntry>>> {
    let ctx = auth.ctx();
    let limit = q.limit.unwrap_or(1000).clamp(1, 100_000);
    Ok(axum::Json(
        st.manager
            .meta()
            .audit_list(Some(&ctx.tenant), q.target.as_deref(), limit)
            .await?,
    ))
}

/// The hash chain runs through every tenant's entries, so verifying it (and
/// the entry count it reports) is for the operator: admin token.
#[utoipa::path(get, path = "/v1/audit/verify", security(("bearer" = [])), responses((status = 200, description = "whether the hash chain is intact"), (status = 403, description = "not an admin token")))]
async fn audit_verify(
    State(st): State<AppState>,
    _admin: AdminAuthed,
) -> ApiResult<axum::Json<stasis_meta::AuditVerification>> {
    Ok(axum::Json(st.manager.meta().audit_verify().await?))
}

// ----- admin: tenants, tokens, secrets ---------------------------------------

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    /// Tenant id (`[A-Za-z0-9_-]`, up to 64); default: a generated `t-...`.
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenBody {
    /// What the token is for (shown in lists and the audit log).
    pub name: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretBody {
    /// The secret's value; stored sealed, never shown again.
    pub value: String,
}

fn tenant_id(s: &str) -> ApiResult<TenantId> {
    Ok(TenantId::parse(s)?)
}

#[utoipa::path(post, path = "/v1/admin/tenants", request_body = CreateTenantBody, security(("bearer" = [])),
    responses((status = 201, description = "tenant created"), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn admin_create_tenant(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    ApiJson(body): ApiJson<CreateTenantBody>,
) -> ApiResult<(StatusCode, axum::Json<stasis_meta::Tenant>)> {
    let t =
        crate::tenancy::create_tenant(&st.manager, &who, body.id.as_deref(), &body.name).await?;
    Ok((StatusCode::CREATED, axum::Json(t)))
}

#[utoipa::path(get, path = "/v1/admin/tenants", security(("bearer" = [])),
    responses((status = 200, description = "all tenants"), (status = 403, body = ErrorBody)))]
async fn admin_list_tenants(
    State(st): State<AppState>,
    AdminAuthed(_who): AdminAuthed,
) -> ApiResult<axum::Json<Vec<stasis_meta::Tenant>>> {
    Ok(axum::Json(st.manager.meta().list_tenants().await?))
}

#[utoipa::path(post, path = "/v1/admin/tenants/{tenant}/tokens", request_body = CreateTokenBody, security(("bearer" = [])),
    responses((status = 201, body = crate::tenancy::NewToken, description = "the token, shown only in this answer"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_create_token(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(tenant): Path<String>,
    ApiJson(body): ApiJson<CreateTokenBody>,
) -> ApiResult<(StatusCode, axum::Json<crate::tenancy::NewToken>)> {
    let t = tenant_id(&tenant)?;
    let tok = crate::tenancy::create_token(&st.manager, &who, &t, &body.name).await?;
    Ok((StatusCode::CREATED, axum::Json(tok)))
}

#[utoipa::path(get, path = "/v1/admin/tenants/{tenant}/tokens", security(("bearer" = [])),
    responses((status = 200, description = "the tenant's tokens (never their text)"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_list_tokens(
    State(st): State<AppState>,
    AdminAuthed(_who): AdminAuthed,
    Path(tenant): Path<String>,
) -> ApiResult<axum::Json<Vec<stasis_meta::TokenRecord>>> {
    let t = tenant_id(&tenant)?;
    Ok(axum::Json(
        crate::tenancy::list_tokens(&st.manager, &t).await?,
    ))
}

#[utoipa::path(delete, path = "/v1/admin/tokens/{token}", security(("bearer" = [])),
    responses((status = 200, description = "the revoked token's record"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn admin_revoke_token(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(token): Path<String>,
) -> ApiResult<axum::Json<stasis_meta::TokenRecord>> {
    Ok(axum::Json(
        crate::tenancy::revoke_token(&st.manager, &who, &token).await?,
    ))
}

#[utoipa::path(get, path = "/v1/admin/tenants/{tenant}/secrets", security(("bearer" = [])),
    responses((status = 200, description = "names of the tenant's secrets (never values)"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_list_secrets(
    State(st): State<AppState>,
    AdminAuthed(_who): AdminAuthed,
    Path(tenant): Path<String>,
) -> ApiResult<axum::Json<Vec<String>>> {
    let t = tenant_id(&tenant)?;
    Ok(axum::Json(
        crate::tenancy::secret_names(&st.manager, &t).await?,
    ))
}

#[utoipa::path(put, path = "/v1/admin/tenants/{tenant}/secrets/{name}", request_body = SecretBody, security(("bearer" = [])),
    responses((status = 204, description = "secret stored (sealed)"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_set_secret(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path((tenant, name)): Path<(String, String)>,
    ApiJson(body): ApiJson<SecretBody>,
) -> ApiResult<StatusCode> {
    let t = tenant_id(&tenant)?;
    crate::tenancy::set_secret(&st.manager, &who, &t, &name, &body.value).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/admin/tenants/{tenant}/secrets/{name}", security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_delete_secret(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path((tenant, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let t = tenant_id(&tenant)?;
    crate::tenancy::delete_secret(&st.manager, &who, &t, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Adds the bearer scheme to the document and requires it on every `/v1` route.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("stk_ token")
                    .description(Some(
                        "API token: `stk_` + 43 base64url characters. Tenant tokens use the sandbox, \
                         snapshot, run and audit routes; admin tokens only `/v1/admin/...`.",
                    ))
                    .build(),
            ),
        );
        doc.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
        // The public routes need no token.
        for (path, item) in doc.paths.paths.iter_mut() {
            if crate::auth::PUBLIC_PATHS.contains(&path.as_str()) {
                for op in [&mut item.get, &mut item.post].into_iter().flatten() {
                    op.security = Some(vec![SecurityRequirement::default()]);
                }
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    paths(
        admin_create_tenant,
        admin_list_tenants,
        admin_create_token,
        admin_list_tokens,
        admin_revoke_token,
        admin_list_secrets,
        admin_set_secret,
        admin_delete_secret
    ),
    components(schemas(
        CreateTenantBody,
        CreateTokenBody,
        SecretBody,
        crate::tenancy::NewToken
    ))
)]
pub struct AdminApiDoc;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "stasis",
        description = "Stateful sandboxes for AI agents: create, exec, pause, resume, snapshot, restore, fork."
    ),
    paths(
        healthz,
        doctor,
        create_sandbox,
        list_sandboxes,
        get_sandbox,
        destroy_sandbox,
        exec,
        exec_stream,
        put_file,
        get_file,
        list_files,
        start_session,
        list_sessions,
        session_input,
        session_output,
        kill_session,
        pause,
        resume,
        usage,
        take_snapshot,
        fork,
        list_snapshots,
        get_snapshot,
        delete_snapshot,
        restore_snapshot,
        sandbox_outputs,
        audit_list,
        audit_verify
    ),
    components(schemas(
        ErrorBody,
        ErrorDetail,
        CreateSandbox,
        Sandbox,
        ExecBody,
        ExecResponse,
        ExecStreamLine,
        SessionInput,
        SessionOutputResponse,
        PauseBody,
        SnapshotBody,
        RestoreBody,
        ForkBody,
        ForkResponse
    )),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

async fn openapi() -> axum::Json<utoipa::openapi::OpenApi> {
    let mut doc = ApiDoc::openapi();
    doc.merge(crate::runs_api::RunsApiDoc::openapi());
    doc.merge(AdminApiDoc::openapi());
    axum::Json(doc)
}

/// Every error leaves as JSON: rejections produced by axum itself (a path
/// segment that is not UTF-8, a method the route does not have, ...) come
/// as plain text and are rewritten here, keeping their status.
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let mut message = String::from_utf8_lossy(&text).trim().to_string();
    if message.is_empty() {
        message = status.canonical_reason().unwrap_or("error").to_string();
    }
    let code = match status.as_u16() {
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        409 => ErrorCode::InvalidState,
        413 => ErrorCode::PayloadTooLarge,
        429 => ErrorCode::RateLimited,
        400..=499 => ErrorCode::InvalidArgument,
        _ => ErrorCode::Internal,
    };
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.as_str().to_string(),
            message,
            field: None,
        },
    };
    let mut out = (status, axum::Json(body)).into_response();
    for (k, v) in parts.headers.iter() {
        if k != axum::http::header::CONTENT_TYPE && k != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

async fn fallback() -> ApiError {
    ApiError(Error::new(ErrorCode::NotFound, "no such endpoint"))
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.manager.config().max_file_bytes as usize + 64 * 1024;
    let metrics = state.manager.metrics().clone();
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(crate::metrics::handler))
        .route("/openapi.json", get(openapi))
        .route("/v1/doctor", get(doctor))
        .route("/v1/sandboxes", post(create_sandbox).get(list_sandboxes))
        .route(
            "/v1/sandboxes/{id}",
            get(get_sandbox).delete(destroy_sandbox),
        )
        .route("/v1/sandboxes/{id}/exec", post(exec))
        .route("/v1/sandboxes/{id}/exec/stream", post(exec_stream))
        .route(
            "/v1/sandboxes/{id}/files",
            get(get_file)
                .put(put_file)
                .layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/sandboxes/{id}/files/list", get(list_files))
        .route(
            "/v1/sandboxes/{id}/sessions",
            post(start_session).get(list_sessions),
        )
        .route(
            "/v1/sandboxes/{id}/sessions/{session}",
            axum::routing::delete(kill_session),
        )
        .route(
            "/v1/sandboxes/{id}/sessions/{session}/input",
            post(session_input),
        )
        .route(
            "/v1/sandboxes/{id}/sessions/{session}/output",
            get(session_output),
        )
        .route("/v1/sandboxes/{id}/pause", post(pause))
        .route("/v1/sandboxes/{id}/resume", post(resume))
        .route("/v1/sandboxes/{id}/usage", get(usage))
        .route("/v1/sandboxes/{id}/snapshots", post(take_snapshot))
        .route("/v1/sandboxes/{id}/fork", post(fork))
        .route("/v1/snapshots", get(list_snapshots))
        .route(
            "/v1/snapshots/{id}",
            get(get_snapshot).delete(delete_snapshot),
        )
        .route("/v1/snapshots/{id}/restore", post(restore_snapshot))
        .route("/v1/snapshots/{id}/export", get(export_snapshot))
        .route("/v1/sandboxes/{id}/outputs", get(sandbox_outputs))
        .route(
            "/v1/snapshots/import",
            post(import_snapshot).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/store/gc", post(store_gc))
        .route("/v1/store/stats", get(store_stats))
        .route("/v1/audit", get(audit_list))
        .route("/v1/audit/verify", get(audit_verify))
        .route(
            "/v1/admin/tenants",
            post(admin_create_tenant).get(admin_list_tenants),
        )
        .route(
            "/v1/admin/tenants/{tenant}/tokens",
            post(admin_create_token).get(admin_list_tokens),
        )
        .route(
            "/v1/admin/tokens/{token}",
            axum::routing::delete(admin_revoke_token),
        )
        .route(
            "/v1/admin/tenants/{tenant}/secrets",
            get(admin_list_secrets),
        )
        .route(
            "/v1/admin/tenants/{tenant}/secrets/{name}",
            axum::routing::put(admin_set_secret).delete(admin_delete_secret),
        )
        .merge(crate::runs_api::routes())
        .fallback(fallback)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::cluster::forward_layer,
        ))
        // Outermost: authenticate before anything, forwarding included.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::authenticate,
        ))
        // Outside authentication, so refused requests are counted too.
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            crate::metrics::track,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(state)
}
