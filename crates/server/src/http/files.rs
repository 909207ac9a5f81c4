//! Files in a sandbox: write one (a raw body up to the configured limit,
//! received to a transfer file and copied in a piece at a time;
//! `exclusive=true` creates only), read one (whole, or a range: `offset` /
//! `length`, or an HTTP `Range` header, answering 206), list a directory,
//! stat, exists, remove, mkdir, rename, and watch a directory (NDJSON
//! events). Ranges and watches are in `files_more`.

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use stasis_core::Error;

use super::auth::Authed;
use super::error::{ApiError, ApiQuery, ApiResult, ErrorBody};
pub use super::files_more::PathQuery;
use super::sandboxes::sandbox_id;
use super::state::AppState;

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
    responses((status = 204), (status = 409, body = ErrorBody, description = "`already_exists`: an exclusive write found the path taken"), (status = 413, body = ErrorBody)))]
async fn put_file(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    body: Body,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let mode = parse_mode(q.mode.as_deref())?;
    let sid = sandbox_id(&id)?;
    let spooled = st.manager.spool_upload(body.into_data_stream()).await?;
    let how = if q.exclusive {
        stasis_core::WriteMode::CreateExclusive
    } else {
        stasis_core::WriteMode::Overwrite
    };
    st.manager
        .write_spooled(&ctx, &sid, &q.path, &spooled, mode, how)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files", params(PathQuery),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, content_type = "application/octet-stream", body = Vec<u8>, description = "the range asked for (`offset`/`length`, or a `Range: bytes=...` header), with `Content-Range`"),
        (status = 404, body = ErrorBody), (status = 416, description = "the range starts past the end of the file")))]
async fn get_file(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    if let Some(r) = super::files_more::ranged(&st, &ctx, &id, &q, &headers).await? {
        return Ok(r);
    }
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

/// The routes of this module. A file upload is bounded by the configured
/// file limit (see `put_file`), not by the router's body limit.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_file, put_file).layer(DefaultBodyLimit::disable()))
        .routes(routes!(list_files))
        .merge(super::files_more::routes())
}
