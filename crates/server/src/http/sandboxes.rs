//! The sandbox resource: create, list, read and destroy sandboxes, pause,
//! resume and fork them, their resource usage and their output directories.
//! Holds the [`Sandbox`] representation every lifecycle answer uses.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{Error, Manifest, SandboxId, SandboxState};
use stasis_meta::SandboxRecord;

use super::auth::Authed;
use super::error::{optional_json, ApiBytes, ApiError, ApiJson, ApiQuery, ApiResult, ErrorBody};
use super::state::AppState;
use crate::manager::OpTiming;

pub(crate) fn sandbox_id(s: &str) -> ApiResult<SandboxId> {
    Ok(SandboxId::parse(s)?)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// The sandbox's manifest (see the README); every field is optional.
    /// With `template`: replaces the template's manifest, checked as a
    /// restore checks it (same backend).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub manifest: Option<serde_json::Value>,
    /// Start from a template (`name` or `name:version`, latest by default):
    /// its memory and disk restored instead of a cold boot.
    #[serde(default)]
    pub template: Option<String>,
    /// Key/value labels (at most 32; keys 1 to 63 of letters, digits and
    /// `._/-`; values at most 256 bytes). Not part of the manifest; listed
    /// and filtered on (`GET /v1/sandboxes?label=k=v`).
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
    /// A paused sandbox whose stopped compute this node still holds
    /// (standby: no CPU, `ram_bytes` of host RAM, until `until_ms`): the next
    /// request continues it at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub standby: Option<stasis_backend::Standby>,
    /// The labels given at create (left out when none, and in answers to
    /// lifecycle operations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
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
            standby: None,
            labels: BTreeMap::new(),
            timing: None,
        }
    }
    /// The record as this node sees it: with what it holds in standby.
    pub fn of(m: &crate::Manager, r: SandboxRecord) -> Self {
        let standby = m.standby_of(&r);
        Sandbox {
            standby,
            ..Self::from_record(r)
        }
    }
    fn labelled(mut self, labels: BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }
    fn timed(mut self, t: OpTiming) -> Self {
        self.timing = Some(t);
        self
    }
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only sandboxes in this state (e.g. `paused`, `destroyed`). Without
    /// it (and without `all`), destroyed sandboxes are left out.
    #[serde(default)]
    pub state: Option<String>,
    /// Every sandbox: destroyed ones and those the daemon made for itself
    /// (image builds' `RUN` steps, labelled `stasis.build`) too.
    #[serde(default)]
    pub all: bool,
    /// Only sandboxes with these labels: `key=value`, several separated by
    /// commas (all must match).
    #[serde(default)]
    pub label: Option<String>,
    /// Only sandboxes created after this instant (milliseconds since the epoch).
    #[serde(default)]
    pub created_after: Option<i64>,
    /// At most this many (1 to 1000); when more remain, the answer's
    /// `x-next-cursor` header holds the cursor of the next page.
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `x-next-cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

fn label_filter(s: Option<&str>) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for pair in s.unwrap_or("").split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            ApiError(
                Error::invalid(format!("label filter {pair:?} is not key=value"))
                    .with_field("label"),
            )
        })?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    /// false: keep only the filesystem. Default: the sandbox's policy.
    #[serde(default)]
    pub keep_memory: Option<bool>,
    /// Keep the stopped compute and its RAM on the node for the sandbox's
    /// standby window (`lifecycle.standby_secs`), as an idle pause does; the
    /// pause is stored as always. Default false: an explicit pause frees it.
    #[serde(default)]
    pub standby: bool,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    pub count: u32,
}

fn manifest_from(v: Option<serde_json::Value>) -> ApiResult<Manifest> {
    Ok(match v {
        Some(v) => Manifest::parse(v)?,
        None => Manifest::default(),
    })
}

#[utoipa::path(post, path = "/v1/sandboxes", request_body = CreateSandbox,
    responses((status = 201, body = Sandbox), (status = 400, body = ErrorBody)))]
async fn create_sandbox(
    State(st): State<AppState>,
    auth: Authed,
    ApiJson(body): ApiJson<CreateSandbox>,
) -> ApiResult<(StatusCode, axum::Json<Sandbox>)> {
    let ctx = auth.ctx();
    let labels = body.labels.unwrap_or_default();
    stasis_meta::labels::validate_labels(&labels)?;
    // Runs to its end even if the client goes away: dropped half-way, the
    // create would leave its record in Creating and what the backend had
    // built (a VM, or a cgroup and a loop-mounted layer) until a restart.
    let manager = st.manager.clone();
    let rec = if let Some(template) = body.template {
        let manifest = body.manifest.map(Manifest::parse).transpose()?;
        tokio::spawn(async move {
            manager
                .create_from_template(&ctx, &template, manifest)
                .await
        })
    } else {
        let manifest = manifest_from(body.manifest)?;
        tokio::spawn(async move { manager.create(&ctx, manifest).await })
    };
    let rec = rec
        .await
        .map_err(|e| Error::internal(format!("create task: {e}")))??;
    st.manager.set_labels(&rec.id, &labels).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(Sandbox::from_record(rec).labelled(labels)),
    ))
}

#[utoipa::path(get, path = "/v1/sandboxes", params(ListQuery),
    responses((status = 200, body = [Sandbox], headers(("x-next-cursor" = String, description = "present when `limit` cut the list short: pass it as `cursor` for the next page"))),
        (status = 400, body = ErrorBody)))]
async fn list_sandboxes(
    State(st): State<AppState>,
    auth: Authed,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    let filter = stasis_meta::ListFilter {
        state: q.state.as_deref().map(SandboxState::parse).transpose()?,
        labels: label_filter(q.label.as_deref())?,
        created_after_ms: q.created_after,
        limit: q.limit,
        cursor: q.cursor,
        ..Default::default()
    };
    let (recs, next) = st.manager.list_view(&ctx, filter, q.all).await?;
    let body: Vec<Sandbox> = recs
        .into_iter()
        .map(|(r, l)| Sandbox::of(&st.manager, r).labelled(l))
        .collect();
    let mut resp = axum::Json(body).into_response();
    if let Some(c) = next {
        let v = c
            .parse()
            .map_err(|_| ApiError(Error::internal("cursor is not a header value")))?;
        resp.headers_mut().insert("x-next-cursor", v);
    }
    Ok(resp)
}

#[utoipa::path(patch, path = "/v1/sandboxes/{id}/lifecycle", request_body = crate::manager::LifecycleChange,
    responses((status = 200, body = Sandbox, description = "the sandbox under its new policy (audited as `lifecycle.set`)"),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn set_lifecycle(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(change): ApiJson<crate::manager::LifecycleChange>,
) -> ApiResult<axum::Json<Sandbox>> {
    let ctx = auth.ctx();
    let sid = sandbox_id(&id)?;
    let rec = st.manager.set_lifecycle(&ctx, &sid, &change).await?;
    let labels = st.manager.labels(&sid).await?;
    Ok(axum::Json(Sandbox::of(&st.manager, rec).labelled(labels)))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", responses((status = 200, body = Sandbox), (status = 404, body = ErrorBody)))]
async fn get_sandbox(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Sandbox>> {
    let ctx = auth.ctx();
    let sid = sandbox_id(&id)?;
    let rec = st.manager.get(&ctx, &sid).await?;
    let labels = st.manager.labels(&sid).await?;
    Ok(axum::Json(Sandbox::of(&st.manager, rec).labelled(labels)))
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
        .pause_with(&ctx, &sandbox_id(&id)?, body.keep_memory, body.standby)
        .await?;
    Ok(axum::Json(Sandbox::of(&st.manager, rec).timed(t)))
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

#[utoipa::path(post, path = "/v1/sandboxes/{id}/evict",
    responses((status = 200, body = Sandbox, description = "this node's standby and local pause files of the paused sandbox dropped; its next resume comes from the store"), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn evict(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Sandbox>> {
    let ctx = auth.ctx();
    let rec = st.manager.evict(&ctx, &sandbox_id(&id)?).await?;
    Ok(axum::Json(Sandbox::of(&st.manager, rec)))
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

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_sandbox, list_sandboxes))
        .routes(routes!(get_sandbox, destroy_sandbox))
        .routes(routes!(set_lifecycle))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(evict))
        .routes(routes!(usage))
        .routes(routes!(fork))
        .routes(routes!(sandbox_outputs))
}
