//! The image resource: list, inspect, delete and import (an OCI layout or
//! `docker save` tar as the request body) a tenant's images; the operator
//! registers a host directory as a public image. `build` takes a context
//! tar and streams the build's progress as JSON lines.

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
    let limit = images.upload_limit();
    let result = async {
        save_body(body, &path, limit).await?;
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

/// Save an upload to `path`, at most `limit` bytes: a declared or actual
/// size past it is 413 `payload_too_large` (the caller removes the upload's
/// directory either way).
async fn save_body(body: Body, path: &std::path::Path, limit: u64) -> stasis_core::Result<()> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let too_large = || {
        Error::new(
            stasis_core::ErrorCode::PayloadTooLarge,
            format!("upload is larger than the limit of {limit} bytes (--max-upload-mb)"),
        )
    };
    if http_body::Body::size_hint(&body)
        .exact()
        .is_some_and(|n| n > limit)
    {
        return Err(too_large());
    }
    let mut f = tokio::fs::File::create(path).await?;
    let mut stream = body.into_data_stream();
    let mut written: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Error::invalid(format!("reading the upload: {e}")))?;
        written += chunk.len() as u64;
        if written > limit {
            drop(f);
            let _ = tokio::fs::remove_file(path).await;
            return Err(too_large());
        }
        f.write_all(&chunk).await?;
    }
    f.flush().await?;
    Ok(())
}

#[derive(Deserialize, IntoParams)]
pub struct BuildQuery {
    /// name[:tag] of the image to build.
    pub tag: String,
    /// Build arguments as a JSON object of strings (`{"VERSION":"2"}`).
    #[serde(default)]
    pub build_args: Option<String>,
    /// The network policy of the RUN steps' build sandboxes, as the
    /// manifest's (`{"allow": ["pypi.org", "*.pythonhosted.org"]}`); default: none.
    #[serde(default)]
    pub network: Option<String>,
}

/// Build an image from a Dockerfile. The body is the build context as a tar
/// (the Dockerfile at `.stasis-dockerfile`, else `Dockerfile`); the answer
/// streams progress as JSON lines (`step`, `cached`, `output`, `step_done`),
/// ending with `done` (with the image id) or `error` (code and message).
#[utoipa::path(post, path = "/v1/images/build", params(BuildQuery), request_body(content = Vec<u8>, content_type = "application/x-tar"),
    responses((status = 200, content_type = "application/x-ndjson", description = "progress events, then done or error"), (status = 400, body = ErrorBody), (status = 413, body = ErrorBody)))]
async fn build_image(
    State(st): State<AppState>,
    auth: Authed,
    Query(q): Query<BuildQuery>,
    body: Body,
) -> ApiResult<axum::response::Response> {
    let ctx = auth.ctx();
    stasis_image::store::Reference::parse(&q.tag).map_err(|e| e.with_field("tag"))?;
    let args: std::collections::HashMap<String, String> = match &q.build_args {
        Some(s) => serde_json::from_str(s).map_err(|e| {
            Error::invalid(format!("build_args: a JSON object of strings: {e}"))
                .with_field("build_args")
        })?,
        None => Default::default(),
    };
    let network: stasis_core::manifest::NetworkPolicy = match &q.network {
        Some(s) => serde_json::from_str(s).map_err(|e| {
            Error::invalid(format!("network: a network policy object: {e}")).with_field("network")
        })?,
        None => Default::default(),
    };
    network.validate()?;
    let images = st.manager.images()?.clone();
    let path = images.upload_path("context")?;
    if let Err(e) = save_body(body, &path, images.upload_limit()).await {
        if let Some(dir) = path.parent() {
            let _ = tokio::fs::remove_dir_all(dir).await;
        }
        return Err(e.into());
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let (line_tx, line_rx) =
        tokio::sync::mpsc::channel::<std::result::Result<String, std::io::Error>>(64);
    let tag = q.tag.clone();
    tokio::spawn(async move {
        let fwd = line_tx.clone();
        let forward = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let line = serde_json::to_string(&ev).unwrap_or_default() + "\n";
                if fwd.send(Ok(line)).await.is_err() {
                    break;
                }
            }
        });
        let runner = std::sync::Arc::new(crate::image_runner::SandboxRunner {
            manager: st.manager.clone(),
            ctx: ctx.clone(),
            network,
            store: images.store().clone(),
            handle: tokio::runtime::Handle::current(),
        });
        let r = images
            .build(&ctx.tenant, path.clone(), tag.clone(), args, runner, tx)
            .await;
        let _ = forward.await;
        if let Some(dir) = path.parent() {
            let _ = tokio::fs::remove_dir_all(dir).await;
        }
        let (detail, last) = match &r {
            Ok(i) => (json!({"id": i.id}), None),
            Err(e) => (
                json!({"refused": e.message, "code": e.code}),
                Some(
                    json!({"event": "error", "code": e.code, "message": e.message, "field": e.field}),
                ),
            ),
        };
        st.manager
            .audit_image(&ctx, "image.build", &tag, detail)
            .await;
        if let Some(l) = last {
            let _ = line_tx.send(Ok(l.to_string() + "\n")).await;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(line_rx);
    Ok(axum::response::Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(Body::from_stream(stream))
        .map_err(|e| Error::internal(format!("response: {e}")))?)
}

/// Garbage-collect images: only images no name points at and no live
/// sandbox or stored snapshot uses go, then unneeded layers.
#[utoipa::path(post, path = "/v1/admin/images/gc", responses((status = 200, description = "images and layers removed, bytes freed"), (status = 403, body = ErrorBody)))]
async fn gc_images(
    State(st): State<AppState>,
    _admin: AdminAuthed,
) -> ApiResult<axum::Json<stasis_image::store::GcReport>> {
    Ok(axum::Json(st.manager.images()?.gc(&st.manager).await?))
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

/// The routes of this module; the import and build routes stream their
/// uploads to disk under their own limit (`Images::upload_limit`), not the
/// JSON body limit (layers and the archive are bounded again when unpacked).
pub fn routes() -> OpenApiRouter<AppState> {
    let import = OpenApiRouter::new()
        .routes(routes!(import_image))
        .routes(routes!(build_image))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(list_images))
        .routes(routes!(inspect_image, delete_image))
        .routes(routes!(register_image))
        .routes(routes!(gc_images))
        .merge(import)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::ErrorCode;

    fn streamed(chunks: usize, size: usize) -> Body {
        let it = (0..chunks).map(move |_| Ok::<_, std::io::Error>(vec![7u8; size]));
        Body::from_stream(futures::stream::iter(it))
    }

    #[tokio::test]
    async fn uploads_past_the_limit_are_413_and_leave_no_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("upload");
        // Declared bigger than the limit: refused before anything is written.
        let e = save_body(Body::from(vec![0u8; 1025]), &p, 1024)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{}", e.message);
        assert!(!p.exists());
        // Streamed without a length: refused once it passes, the part gone.
        let e = save_body(streamed(5, 300), &p, 1024).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{}", e.message);
        assert!(!p.exists());
        // At the limit exactly: saved whole.
        save_body(streamed(4, 256), &p, 1024).await.unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 1024);
        save_body(Body::from(vec![1u8; 1024]), &p, 1024)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), vec![1u8; 1024]);
    }
}
