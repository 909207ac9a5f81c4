//! The image resource: list, inspect, delete and import (an OCI layout or
//! `docker save` tar as the request body) a tenant's images; the operator
//! registers a host directory as a public image.

use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::Error;

use super::auth::{AdminAuthed, Authed};
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::state::AppState;
use crate::images::{ImageEntry, ImageInfo};
use crate::Ctx;

#[utoipa::path(get, path = "/v1/images", responses((status = 200, body = Vec<ImageEntry>, description = "the tenant's images, then the public ones")))]
async fn list_images(
    State(st): State<AppState>,
    auth: Authed,
) -> ApiResult<axum::Json<Vec<ImageEntry>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(st.manager.images()?.list(&ctx.tenant).await?))
}

#[utoipa::path(get, path = "/v1/images/{name}", params(("name" = String, Path, description = "name[:tag] or sha256:<id>")),
    responses((status = 200, body = ImageInfo), (status = 404, body = ErrorBody)))]
async fn inspect_image(
    State(st): State<AppState>,
    auth: Authed,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<ImageInfo>> {
    let ctx = auth.ctx();
    Ok(axum::Json(
        st.manager.images()?.inspect(&ctx.tenant, &name).await?,
    ))
}

#[utoipa::path(delete, path = "/v1/images/{name}", params(("name" = String, Path, description = "name[:tag]")),
    responses((status = 204), (status = 404, body = ErrorBody)))]
async fn delete_image(
    State(st): State<AppState>,
    auth: Authed,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let id = st.manager.images()?.delete(&ctx.tenant, &name).await?;
    st.manager
        .audit_image(&ctx, "image.delete", &name, json!({"id": id}))
        .await;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
pub struct ImportQuery {
    /// name[:tag] to give the image; default: the name the archive carries.
    #[serde(default)]
    pub name: Option<String>,
}

#[utoipa::path(post, path = "/v1/images/import", params(ImportQuery), request_body(content = Vec<u8>, content_type = "application/x-tar"),
    responses((status = 201, body = ImageInfo), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn import_image(
    State(st): State<AppState>,
    auth: Authed,
    Query(q): Query<ImportQuery>,
    body: Body,
) -> ApiResult<(StatusCode, axum::Json<ImageInfo>)> {
    let ctx = auth.ctx();
    let images = st.manager.images()?.clone();
    let path = images.upload_path("upload")?;
    let result = async {
        save_body(body, &path).await?;
        images
            .import(&ctx.tenant, path.clone(), q.name.clone())
            .await
    }
    .await;
    if let Some(dir) = path.parent() {
        let _ = tokio::fs::remove_dir_all(dir).await;
    }
    audit(&st, &ctx, "image.import", &result).await;
    Ok((StatusCode::CREATED, axum::Json(result?)))
}

async fn audit(st: &AppState, ctx: &Ctx, action: &str, r: &stasis_core::Result<ImageInfo>) {
    let (target, detail) = match r {
        Ok(i) => (
            i.names.first().cloned().unwrap_or_else(|| i.id.clone()),
            json!({"id": i.id}),
        ),
        Err(e) => (
            "images".to_string(),
            json!({"refused": e.message, "code": e.code}),
        ),
    };
    st.manager.audit_image(ctx, action, &target, detail).await;
}

async fn save_body(body: Body, path: &std::path::Path) -> stasis_core::Result<()> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let mut f = tokio::fs::File::create(path).await?;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::invalid(format!("reading the upload: {e}")))?;
        f.write_all(&chunk).await?;
    }
    f.flush().await?;
    Ok(())
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    /// name[:tag] of the public image.
    pub name: String,
    /// A host directory used in place, read-only, as the image's root.
    pub dir: String,
}

#[utoipa::path(post, path = "/v1/admin/images", request_body = RegisterBody,
    responses((status = 201, body = ImageEntry), (status = 403, body = ErrorBody), (status = 400, body = ErrorBody)))]
async fn register_image(
    State(st): State<AppState>,
    _admin: AdminAuthed,
    ApiJson(body): ApiJson<RegisterBody>,
) -> ApiResult<(StatusCode, axum::Json<ImageEntry>)> {
    let e = st
        .manager
        .images()?
        .register(&body.name, &PathBuf::from(&body.dir))
        .await?;
    Ok((StatusCode::CREATED, axum::Json(e)))
}

/// The routes of this module; the import route takes uploads of any size
/// (layers are bounded when applied).
pub fn routes() -> OpenApiRouter<AppState> {
    let import = OpenApiRouter::new()
        .routes(routes!(import_image))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(list_images))
        .routes(routes!(inspect_image, delete_image))
        .routes(routes!(register_image))
        .merge(import)
}
