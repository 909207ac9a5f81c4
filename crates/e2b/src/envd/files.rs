//! envd's HTTP routes: `GET /files` (download), `POST /files` (upload, as
//! `multipart/form-data` with one part per file, or one file as
//! `application/octet-stream`), `GET /health`, `GET /envs`. Errors are
//! envd's `{"code": <HTTP status>, "message": ...}`.
//!
//! Files go through the control plane's file API, streamed both ways and
//! bounded by the daemon's file limit (`stasis serve --max-file-mb`):
//! uploads are spooled a chunk at a time, downloads read a range at a time.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use stasis_access::scope::Scope;
use stasis_core::{Error, ErrorCode, FileKind, FileOp, SandboxState, WriteMode};

use super::{caller, fs_msg, owners, Caller};
use crate::E2b;

/// One read of a download.
const CHUNK: u64 = 1024 * 1024;

/// An envd error answer.
pub struct EnvdError(pub Error);

impl From<Error> for EnvdError {
    fn from(e: Error) -> Self {
        EnvdError(e)
    }
}

impl IntoResponse for EnvdError {
    fn into_response(self) -> Response {
        let status = status_of(self.0.code);
        let body = serde_json::json!({"code": status.as_u16(), "message": self.0.message});
        (status, Json(body)).into_response()
    }
}

/// The status envd answers for a stasis error (a sandbox gone is the 502
/// E2B's proxy answers, which the SDKs read as "not running").
pub fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

type EnvdResult<T> = std::result::Result<T, EnvdError>;

#[derive(Debug, Default, Deserialize)]
pub struct FileQuery {
    #[serde(default)]
    pub path: Option<String>,
    /// The user an upload's files and the directories it makes are given
    /// to (see [`super::owners`]); a download reads as the daemon.
    #[serde(default)]
    pub username: Option<String>,
}

/// `GET /health`: 204 while the sandbox runs. A paused sandbox answers
/// "not running" (502) and is not resumed: the SDKs' `is_running()` is this
/// probe, and asking must not change the answer.
pub async fn health(State(st): State<E2b>, headers: HeaderMap) -> Response {
    match caller(&st, &headers, Scope::Read).await {
        Ok(c) if c.state == SandboxState::Running => StatusCode::NO_CONTENT.into_response(),
        Ok(c) => EnvdError(super::not_running(c.id.as_str())).into_response(),
        Err(e) => EnvdError(e).into_response(),
    }
}

/// `GET /envs`: the sandbox's environment (its manifest's).
pub async fn envs(State(st): State<E2b>, headers: HeaderMap) -> EnvdResult<Response> {
    let c = caller(&st, &headers, Scope::Read).await?;
    let rec = st.manager.get(&c.ctx, &c.id).await?;
    Ok(Json(rec.manifest.env).into_response())
}

fn need_path(q: &FileQuery) -> Result<&str, Error> {
    match q.path.as_deref() {
        Some(p) if !p.is_empty() => Ok(p),
        _ => Err(Error::invalid("path: required").with_field("path")),
    }
}

/// `GET /files?path=`: the file's bytes, streamed.
pub async fn download(
    State(st): State<E2b>,
    headers: HeaderMap,
    Query(q): Query<FileQuery>,
) -> EnvdResult<Response> {
    let c = caller(&st, &headers, Scope::Read).await?;
    let path = need_path(&q)?.to_string();
    let s = st.manager.stat(&c.ctx, &c.id, &path).await?;
    if s.kind == FileKind::Dir {
        return Err(Error::invalid(format!("path {path} is a directory")).into());
    }
    let max = st.manager.config().max_file_bytes;
    if s.size > max {
        return Err(
            stasis_control::manager::file_limit_error(&format!("{path} exceeds"), max).into(),
        );
    }
    let size = s.size;
    let name = fs_msg::base_name(&s.path);
    let body = futures::stream::unfold(
        (st, c, s.path, 0u64, false),
        move |(st, c, p, off, done)| async move {
            if done {
                return None;
            }
            match st.manager.read_range(&c.ctx, &c.id, &p, off, CHUNK).await {
                Ok((data, _)) if data.is_empty() => None,
                Ok((data, total)) => {
                    let next = off + data.len() as u64;
                    let end = next >= total || data.len() < CHUNK as usize;
                    Some((Ok(Bytes::from(data)), (st, c, p, next, end)))
                }
                Err(e) => Some((Err(std::io::Error::other(e.message)), (st, c, p, off, true))),
            }
        },
    );
    let disposition = format!("attachment; filename={:?}", name);
    let mut resp = (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(body),
    )
        .into_response();
    // A length only when the size means it: /proc and /sys files report 0
    // and still have content, which then goes chunked.
    if size > 0 {
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, header::HeaderValue::from(size));
    }
    Ok(resp)
}

/// What an upload answers for each file.
#[derive(Debug, Serialize, PartialEq)]
pub struct WriteInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub path: String,
    /// The file's metadata after the upload (absent when it has none).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// The header prefix of file metadata: the SDK sends each key `k` as a
/// header `X-Metadata-k` (names arrive lowercased, so keys are lowercase,
/// as envd stores them).
const METADATA_HEADER: &str = "x-metadata-";

/// The metadata an upload carries in its `X-Metadata-<key>` headers, to be
/// stored on every file it writes (a repeated key: its last value). Keys
/// and values are checked as the SDK checks them (HTTP token keys,
/// printable ASCII values), and within 64 entries / 64 KiB.
pub fn metadata_of(headers: &HeaderMap) -> Result<BTreeMap<String, String>, Error> {
    let mut meta = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(METADATA_HEADER) else {
            continue;
        };
        let value = value.to_str().map_err(|_| {
            Error::invalid(format!(
                "metadata value for {key:?}: values must be printable US-ASCII"
            ))
        })?;
        meta.insert(key.to_string(), value.to_string());
    }
    stasis_core::exec::check_meta(&meta)?;
    Ok(meta)
}

/// `POST /files`: one file as the body (`application/octet-stream`, path
/// in the query) or several as multipart parts (each part's filename its
/// path, or the query's path for a single part).
pub async fn upload(
    State(st): State<E2b>,
    Query(q): Query<FileQuery>,
    req: Request,
) -> EnvdResult<Response> {
    let headers = req.headers().clone();
    let c = caller(&st, &headers, Scope::Exec).await?;
    let meta = metadata_of(&headers)?;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    let gzip = match encoding.as_deref() {
        None | Some("identity") => false,
        Some("gzip") => true,
        Some(other) => {
            return Err(Error::unsupported(format!(
                "Content-Encoding {other} is not supported: send gzip or identity"
            ))
            .into())
        }
    };
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let owner = owners::target(&st, &c, q.username.as_deref(), "username").await?;
    let mut written = Vec::new();
    if ct.starts_with("multipart/form-data") {
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| Error::invalid(format!("multipart body: {e}")))?;
        let mut parts = 0;
        while let Some(field) = mp
            .next_field()
            .await
            .map_err(|e| Error::invalid(format!("multipart body: {e}")))?
        {
            parts += 1;
            let path = match (field.file_name(), q.path.as_deref()) {
                (_, Some(p)) if parts == 1 && !p.is_empty() => p.to_string(),
                (Some(f), _) if !f.is_empty() => f.to_string(),
                _ => return Err(Error::invalid("each part needs a filename (its path)").into()),
            };
            let spooled = st.manager.spool_upload(field).await?;
            written.push(put(&st, &c, &path, &spooled, &owner, &meta).await?);
        }
    } else {
        let path = need_path(&q)?.to_string();
        let body = req.into_body().into_data_stream();
        let spooled = if gzip {
            st.manager.spool_upload(Box::pin(gunzip(body))).await?
        } else {
            st.manager.spool_upload(body).await?
        };
        written.push(put(&st, &c, &path, &spooled, &owner, &meta).await?);
    }
    if written.is_empty() {
        return Err(Error::invalid("no file in the request").into());
    }
    Ok(Json(written).into_response())
}

/// Input fed to the decompressor at a time: a gzip member expands at most
/// about a thousandfold, so no step holds more than about a MiB.
const GUNZIP_STEP: usize = 1024;

/// A gzip body (`Content-Encoding: gzip`), decompressed as it streams;
/// a corrupt or truncated one is an error.
pub fn gunzip<S, E>(body: S) -> impl futures::Stream<Item = std::io::Result<Bytes>>
where
    S: futures::Stream<Item = std::result::Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    use futures::StreamExt;
    use std::io::Write;
    struct St<S> {
        body: S,
        dec: Option<flate2::write::GzDecoder<Vec<u8>>>,
        pending: Bytes,
    }
    let start = St {
        body,
        dec: Some(flate2::write::GzDecoder::new(Vec::new())),
        pending: Bytes::new(),
    };
    futures::stream::unfold(start, |mut s| async move {
        loop {
            let dec = s.dec.as_mut()?;
            if !s.pending.is_empty() {
                let n = s.pending.len().min(GUNZIP_STEP);
                let piece = s.pending.split_to(n);
                if let Err(e) = dec.write_all(&piece) {
                    s.dec = None;
                    return Some((Err(e), s));
                }
                let out = std::mem::take(dec.get_mut());
                if !out.is_empty() {
                    return Some((Ok(Bytes::from(out)), s));
                }
                continue;
            }
            match s.body.next().await {
                Some(Ok(chunk)) => s.pending = chunk,
                Some(Err(e)) => {
                    s.dec = None;
                    return Some((Err(std::io::Error::other(e.to_string())), s));
                }
                None => {
                    let mut dec = s.dec.take()?;
                    let r = dec
                        .try_finish()
                        .map(|_| Bytes::from(std::mem::take(dec.get_mut())));
                    return Some((r, s));
                }
            }
        }
    })
}

/// Write one spooled upload, making its parent directories first; what
/// it makes and the file are given to the request's user. The file's
/// metadata becomes `meta`: set when given, and cleared when the file it
/// overwrote had some and the upload has none (as envd does), so a
/// plain upload of a new file costs nothing more.
async fn put(
    st: &E2b,
    c: &Caller,
    path: &str,
    spooled: &stasis_control::manager::Spooled,
    to: &owners::Target,
    meta: &BTreeMap<String, String>,
) -> Result<WriteInfo, Error> {
    let m = &st.manager;
    if let Some((parent, _)) = path.trim_end_matches('/').rsplit_once('/') {
        if !parent.is_empty() {
            owners::make_dirs(st, c, parent, to.owner, &to.workdir).await?;
        }
    }
    m.write_spooled(&c.ctx, &c.id, path, spooled, None, WriteMode::Overwrite)
        .await?;
    if let Some(o) = to.owner {
        owners::give(st, c, &owners::absolute(&to.workdir, path), o).await?;
    }
    let s = m.stat(&c.ctx, &c.id, path).await?;
    // Written through a symlink: the metadata belongs to the file written.
    let mut file = s.clone();
    for _ in 0..8 {
        match (&file.kind, &file.symlink_target) {
            (FileKind::Symlink, Some(t)) => {
                let abs = fs_msg::resolve_link(&file.path, t);
                file = m.stat(&c.ctx, &c.id, &abs).await?;
            }
            _ => break,
        }
    }
    let had = file.xattrs.clone().unwrap_or_default();
    if &had != meta && file.kind != FileKind::Symlink {
        let op = FileOp::SetMeta {
            path: file.path.clone(),
            meta: meta.clone(),
        };
        m.file_op(&c.ctx, &c.id, op).await?;
    }
    Ok(WriteInfo {
        name: fs_msg::base_name(&s.path),
        kind: "file",
        path: s.path,
        metadata: meta.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn errors_are_envd_shaped() {
        let r = EnvdError(Error::not_found("path /x")).into_response();
        assert_eq!(r.status(), 404);
        let b = http_body_util::BodyExt::collect(r.into_body())
            .await
            .unwrap()
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["code"], 404);
        assert_eq!(v["message"], "path /x not found");
        assert_eq!(status_of(ErrorCode::PortUnreachable), 502);
        assert_eq!(status_of(ErrorCode::PayloadTooLarge), 413);
    }

    #[tokio::test]
    async fn gzip_uploads_are_decompressed_as_they_stream() {
        use futures::StreamExt;
        use std::io::Write;
        let text = "streamed gzip upload ".repeat(5000);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(text.as_bytes()).unwrap();
        let gz = enc.finish().unwrap();
        let chunks: Vec<std::result::Result<Bytes, std::io::Error>> = gz
            .chunks(100)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let out: Vec<_> = gunzip(futures::stream::iter(chunks)).collect().await;
        let mut all = Vec::new();
        for o in out {
            all.extend_from_slice(&o.unwrap());
        }
        assert_eq!(all, text.as_bytes());
        // Cut short: an error, not a silently short file.
        let cut: Vec<std::result::Result<Bytes, std::io::Error>> =
            vec![Ok(Bytes::copy_from_slice(&gz[..gz.len() / 2]))];
        let out: Vec<_> = gunzip(futures::stream::iter(cut)).collect().await;
        assert!(out.iter().any(|o| o.is_err()));
    }

    #[test]
    fn metadata_comes_from_its_headers() {
        let mut h = HeaderMap::new();
        assert!(metadata_of(&h).unwrap().is_empty());
        h.insert("content-type", "text/plain".parse().unwrap());
        // As the SDK sends them: `X-Metadata-<key>`; names arrive lowercased.
        h.insert("X-Metadata-Author", "mish".parse().unwrap());
        h.insert("x-metadata-purpose", "an upload".parse().unwrap());
        h.insert("x-metadata-a.b_c~", "".parse().unwrap());
        let m = metadata_of(&h).unwrap();
        let want: BTreeMap<String, String> =
            [("author", "mish"), ("purpose", "an upload"), ("a.b_c~", "")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        assert_eq!(m, want);
        // An empty key, a value that is not printable ASCII: 400s.
        let mut bad = HeaderMap::new();
        bad.insert("x-metadata-", "v".parse().unwrap());
        let e = metadata_of(&bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert_eq!(status_of(e.code), 400);
        let mut bad = HeaderMap::new();
        bad.insert(
            "x-metadata-k",
            header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert!(metadata_of(&bad).is_err());
        let mut bad = HeaderMap::new();
        bad.insert("x-metadata-k", "tab\there".parse().unwrap());
        assert!(metadata_of(&bad).is_err());
        // Too many entries.
        let mut many = HeaderMap::new();
        for i in 0..65 {
            let n = header::HeaderName::from_bytes(format!("x-metadata-k{i}").as_bytes()).unwrap();
            many.insert(n, "v".parse().unwrap());
        }
        assert!(metadata_of(&many).is_err());
    }

    #[test]
    fn upload_answers_carry_metadata_only_when_there_is_some() {
        let mut w = WriteInfo {
            name: "a.txt".into(),
            kind: "file",
            path: "/home/user/a.txt".into(),
            metadata: BTreeMap::new(),
        };
        let v = serde_json::to_value(&w).unwrap();
        assert!(v.get("metadata").is_none());
        w.metadata.insert("author".into(), "mish".into());
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(v["metadata"], serde_json::json!({"author": "mish"}));
    }

    #[test]
    fn a_path_is_required() {
        assert!(need_path(&FileQuery::default()).is_err());
        let q = FileQuery {
            path: Some("/a".into()),
            username: None,
        };
        assert_eq!(need_path(&q).unwrap(), "/a");
    }
}
