//! File operations beyond content: stat, exists, remove, mkdir, rename,
//! ranged reads (for `files::get_file`), and watching a directory as a
//! stream of NDJSON events.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{Error, FileOp, FileStat};

use super::auth::Authed;
use super::error::{ApiError, ApiJson, ApiQuery, ApiResult, ErrorBody};
use super::sandboxes::sandbox_id;
use super::state::AppState;
use crate::manager::Ctx;

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PathQuery {
    /// Path inside the sandbox (absolute, or relative to the workdir).
    pub path: String,
    /// Octal file mode for writes, e.g. "755".
    #[serde(default)]
    pub mode: Option<String>,
    /// Writes: create the file only if nothing is at `path` (else 409
    /// `already_exists`).
    #[serde(default)]
    pub exclusive: bool,
    /// Reads: the first byte to return (answers 206 with `Content-Range`).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Reads: how many bytes at most from `offset` (default: to the end,
    /// within the file limit).
    #[serde(default)]
    pub length: Option<u64>,
}

/// A single byte range asked for, before the file size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// `bytes=START-` or `bytes=START-END` (END inclusive).
    From { start: u64, end: Option<u64> },
    /// `bytes=-N`: the last N bytes.
    Suffix(u64),
}

/// Parse a `Range` header. Only one `bytes` range is served; anything else
/// (several ranges, other units) is ignored, as HTTP allows, and the whole
/// file is sent.
pub fn parse_range(v: &str) -> Option<Range> {
    let spec = v.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        return b.parse().ok().filter(|n| *n > 0).map(Range::Suffix);
    }
    let start: u64 = a.parse().ok()?;
    let end = if b.is_empty() {
        None
    } else {
        Some(b.parse::<u64>().ok().filter(|e| *e >= start)?)
    };
    Some(Range::From { start, end })
}

/// How many bytes to read for `bytes=START-END` (END inclusive, or open),
/// at most `max`. An END past the file (even `u64::MAX`) is served as the
/// file's end (RFC 9110, section 14.1.2): the read stops there.
pub fn span_len(start: u64, end: Option<u64>, max: u64) -> u64 {
    end.map(|e| e.saturating_sub(start).saturating_add(1))
        .unwrap_or(max)
        .min(max)
}

fn unsatisfiable(size: u64) -> Response {
    let mut r = super::error::ApiError(
        Error::invalid(format!(
            "the range starts past the end of the file ({size} bytes)"
        ))
        .with_field("range"),
    )
    .into_response();
    *r.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
    r.headers_mut().insert(
        "content-range",
        format!("bytes */{size}").parse().expect("header value"),
    );
    r
}

/// The answer to a ranged read, or `None` when the whole file was asked for.
pub(super) async fn ranged(
    st: &AppState,
    ctx: &Ctx,
    id: &str,
    q: &PathQuery,
    headers: &HeaderMap,
) -> ApiResult<Option<Response>> {
    let max = st.manager.config().max_file_bytes;
    let header = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_range);
    let range = match (q.offset, q.length, header) {
        (None, None, None) => return Ok(None),
        (None, None, Some(r)) => r,
        (o, l, _) => Range::From {
            start: o.unwrap_or(0),
            end: l.map(|l| o.unwrap_or(0).saturating_add(l).saturating_sub(1)),
        },
    };
    if q.length == Some(0) {
        return Err(Error::invalid("length must be at least 1")
            .with_field("length")
            .into());
    }
    let sid = sandbox_id(id)?;
    let (start, len) = match range {
        Range::From { start, end } => (start, span_len(start, end, max)),
        Range::Suffix(n) => {
            let (_, size) = st.manager.read_range(ctx, &sid, &q.path, 0, 0).await?;
            let n = n.min(size).min(max);
            (size - n, n)
        }
    };
    let (data, size) = st
        .manager
        .read_range(ctx, &sid, &q.path, start, len)
        .await?;
    if start >= size && !(start == 0 && size == 0) {
        return Ok(Some(unsatisfiable(size)));
    }
    let last = (start + data.len() as u64).saturating_sub(1);
    Ok(Some(
        (
            StatusCode::PARTIAL_CONTENT,
            [
                ("content-type", "application/octet-stream".to_string()),
                ("content-range", format!("bytes {start}-{last}/{size}")),
                ("accept-ranges", "bytes".to_string()),
            ],
            data,
        )
            .into_response(),
    ))
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OnePath {
    /// Path inside the sandbox (absolute, or relative to the workdir).
    pub path: String,
}

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RemoveQuery {
    pub path: String,
    /// Remove a directory and everything under it.
    #[serde(default)]
    pub recursive: bool,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MkdirBody {
    pub path: String,
    /// Make missing parents; an existing directory is then no error.
    #[serde(default)]
    pub parents: bool,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    pub from: String,
    pub to: String,
}

#[derive(Serialize, ToSchema)]
pub struct Exists {
    pub exists: bool,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/stat", params(OnePath),
    responses((status = 200, description = "`{path, kind: file|dir|symlink|other, size, mode, mtime, symlink_target?}` of the entry itself (a symlink is not followed)"), (status = 404, body = ErrorBody)))]
async fn stat_file(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<OnePath>,
) -> ApiResult<axum::Json<FileStat>> {
    let ctx = auth.ctx();
    Ok(axum::Json(
        st.manager.stat(&ctx, &sandbox_id(&id)?, &q.path).await?,
    ))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/exists", params(OnePath),
    responses((status = 200, body = Exists), (status = 404, body = ErrorBody, description = "no such sandbox")))]
async fn file_exists(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<OnePath>,
) -> ApiResult<axum::Json<Exists>> {
    let ctx = auth.ctx();
    let exists = st.manager.exists(&ctx, &sandbox_id(&id)?, &q.path).await?;
    Ok(axum::Json(Exists { exists }))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files", params(RemoveQuery),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "a directory that is not empty, without `recursive`")))]
async fn remove_file(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<RemoveQuery>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let op = FileOp::Remove {
        path: q.path,
        recursive: q.recursive,
    };
    st.manager.file_op(&ctx, &sandbox_id(&id)?, op).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/mkdir", request_body = MkdirBody,
    responses((status = 204), (status = 409, body = ErrorBody, description = "`already_exists` without `parents`")))]
async fn make_dir(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<MkdirBody>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let op = FileOp::Mkdir {
        path: b.path,
        parents: b.parents,
    };
    st.manager.file_op(&ctx, &sandbox_id(&id)?, op).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/files/rename", request_body = RenameBody,
    responses((status = 204), (status = 404, body = ErrorBody)))]
async fn rename_file(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<RenameBody>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let op = FileOp::Rename {
        from: b.from,
        to: b.to,
    };
    st.manager.file_op(&ctx, &sandbox_id(&id)?, op).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/files/watch", params(OnePath),
    responses((status = 200, content_type = "application/x-ndjson", description = "one JSON object per line, `{kind: created|modified|removed|renamed, path, to?}` (paths relative to the watched directory), for as long as the connection stays open; an open watch keeps the sandbox from idling; it ends when the sandbox pauses. On the microVM backend changes within one 100 ms scan coalesce."),
        (status = 404, body = ErrorBody), (status = 501, body = ErrorBody)))]
async fn watch_dir(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<OnePath>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    let (rx, hold) = st.manager.watch(&ctx, &sandbox_id(&id)?, &q.path).await?;
    let stream = futures::stream::unfold((rx, hold), |(mut rx, hold)| async move {
        let ev = rx.recv().await?;
        let mut line = serde_json::to_vec(&ev).unwrap_or_default();
        line.push(b'\n');
        Some((Ok::<_, std::io::Error>(Bytes::from(line)), (rx, hold)))
    });
    Response::builder()
        .header("content-type", "application/x-ndjson")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError(Error::internal(e.to_string())))
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(remove_file))
        .routes(routes!(stat_file))
        .routes(routes!(file_exists))
        .routes(routes!(make_dir))
        .routes(routes!(rename_file))
        .routes(routes!(watch_dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(
            parse_range("bytes=0-9"),
            Some(Range::From {
                start: 0,
                end: Some(9)
            })
        );
        assert_eq!(
            parse_range("bytes=5-"),
            Some(Range::From {
                start: 5,
                end: None
            })
        );
        assert_eq!(parse_range("bytes=-3"), Some(Range::Suffix(3)));
        assert_eq!(parse_range("bytes=9-1"), None);
        assert_eq!(parse_range("bytes=0-1,4-5"), None);
        assert_eq!(parse_range("items=0-1"), None);
        assert_eq!(parse_range("bytes=-0"), None);
        assert_eq!(
            parse_range("bytes=0-18446744073709551615"),
            Some(Range::From {
                start: 0,
                end: Some(u64::MAX)
            })
        );
        assert_eq!(parse_range("bytes=0-18446744073709551616"), None);
    }

    #[test]
    fn span_lengths_never_wrap() {
        let max = 64;
        assert_eq!(span_len(0, Some(u64::MAX), max), max);
        assert_eq!(span_len(0, Some(u64::MAX), u64::MAX), u64::MAX);
        assert_eq!(span_len(10, Some(u64::MAX), max), max);
        assert_eq!(span_len(u64::MAX, Some(u64::MAX), max), 1);
        assert_eq!(span_len(0, Some(0), max), 1);
        assert_eq!(span_len(3, Some(9), max), 7);
        assert_eq!(span_len(0, Some(max), max), max);
        assert_eq!(span_len(5, None, max), max);
    }
}
