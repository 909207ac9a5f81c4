//! The snapshot resource: take one of a sandbox, list, read, delete and
//! restore snapshots, export one as a file and import it elsewhere; the
//! store's garbage collection (admin) and per-tenant statistics.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{Error, Manifest, SnapshotId};

use super::auth::{AdminAuthed, Authed};
use super::error::{optional_json, ApiBytes, ApiError, ApiResult, ErrorBody};
use super::sandboxes::{sandbox_id, Sandbox};
use super::state::AppState;
use crate::snapshots::SnapshotInfo;

fn snapshot_id(s: &str) -> ApiResult<SnapshotId> {
    Ok(SnapshotId::parse(s)?)
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

#[utoipa::path(post, path = "/v1/sandboxes/{id}/snapshots", request_body = SnapshotBody, responses((status = 201, description = "snapshot taken")))]
async fn take_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiBytes(body): ApiBytes,
) -> ApiResult<(StatusCode, axum::Json<SnapshotInfo>)> {
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

#[utoipa::path(get, path = "/v1/snapshots", responses((status = 200, description = "the tenant's snapshots")))]
async fn list_snapshots(
    State(st): State<AppState>,
    auth: Authed,
) -> ApiResult<axum::Json<Vec<SnapshotInfo>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.manager.list_snapshots(&ctx).await?))
}

#[utoipa::path(get, path = "/v1/snapshots/{id}", responses((status = 200, description = "snapshot"), (status = 404, body = ErrorBody)))]
async fn get_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<SnapshotInfo>> {
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

#[utoipa::path(post, path = "/v1/snapshots/import", request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, description = "imported snapshot"), (status = 422, body = ErrorBody)))]
async fn import_snapshot(
    State(st): State<AppState>,
    auth: Authed,
    body: Body,
) -> ApiResult<(StatusCode, axum::Json<SnapshotInfo>)> {
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

/// The routes of this module. The import route takes uploads of any size
/// (streamed to a file), so the daemon's body limit is lifted for it alone.
pub fn routes() -> OpenApiRouter<AppState> {
    let import = OpenApiRouter::new()
        .routes(routes!(import_snapshot))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(take_snapshot))
        .routes(routes!(list_snapshots))
        .routes(routes!(get_snapshot, delete_snapshot))
        .routes(routes!(restore_snapshot))
        .routes(routes!(export_snapshot))
        .routes(routes!(store_gc))
        .routes(routes!(store_stats))
        .merge(import)
}
