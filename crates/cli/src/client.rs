//! A small typed client of the stasis HTTP API (used by the CLI, the demo and
//! the benches). Every non-2xx answer becomes a `stasis_core::Error` with the
//! server's code and message. The main resources come back as the very types
//! the server serializes (its `http` response types, `SnapshotInfo`, `Usage`,
//! ...); what is not typed goes through the generic `get`/`post`/`put_json`/
//! `delete` helpers as `serde_json::Value`.

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::time::Duration;

use stasis_backend::Usage;
use stasis_core::{Error, ErrorCode, FileEntry, Result, SessionInfo};
use stasis_server::http::exec::{ExecResponse, ExecStreamLine};
use stasis_server::http::sandboxes::{ForkResponse, Sandbox};
use stasis_server::http::sessions::SessionOutputResponse;
use stasis_server::http::ErrorBody;
use stasis_server::templates::TemplateInfo;
use stasis_server::SnapshotInfo;

#[derive(Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    actor: Option<String>,
    token: Option<String>,
}

fn code_from(s: &str) -> ErrorCode {
    serde_json::from_value(Value::String(s.to_string())).unwrap_or(ErrorCode::Internal)
}

impl Client {
    pub fn new(base: &str) -> Self {
        Client {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(3600))
                .build()
                .expect("http client"),
            actor: std::env::var("STASIS_ACTOR").ok(),
            token: None,
        }
    }

    /// Send `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The bearer token sent with every request, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(a) = &self.actor {
            r = r.header("x-stasis-actor", a);
        }
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    async fn send(&self, rb: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let resp = rb.send().await.map_err(|e| {
            let what = if e.is_connect() {
                format!(
                    "cannot reach the stasis daemon at {} (is `stasis serve` running?)",
                    self.base
                )
            } else {
                format!("request to {} failed: {e}", self.base)
            };
            Error::new(ErrorCode::Internal, what)
        })?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp.text().await.unwrap_or_default();
        match serde_json::from_str::<ErrorBody>(&text) {
            Ok(ErrorBody { error: d }) => {
                let mut e = Error::new(code_from(&d.code), d.message);
                e.field = d.field;
                if status.as_u16() == 429 {
                    if let Some(secs) = retry_after {
                        e.message = format!("{} (Retry-After: {secs} s)", e.message);
                    }
                }
                if status.as_u16() == 401 && self.token.is_none() {
                    e.message = format!(
                        "{} (give --token, set STASIS_TOKEN, or point STASIS_DATA_DIR at the daemon's data dir)",
                        e.message
                    );
                }
                Err(e)
            }
            _ => Err(Error::internal(format!("HTTP {status}: {text}"))),
        }
    }

    async fn json<T: DeserializeOwned>(&self, rb: reqwest::RequestBuilder) -> Result<T> {
        let resp = self.send(rb).await?;
        resp.json::<T>()
            .await
            .map_err(|e| Error::internal(format!("undecodable answer: {e}")))
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        self.get_as(path).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.post_as(path, body).await
    }

    /// GET, the answer decoded as `T`.
    async fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.json(self.req(reqwest::Method::GET, path)).await
    }

    /// POST a JSON body, the answer decoded as `T`.
    async fn post_as<T: DeserializeOwned>(&self, path: &str, body: Value) -> Result<T> {
        self.json(self.req(reqwest::Method::POST, path).json(&body))
            .await
    }

    /// PUT a JSON body; an empty answer (204) is `null`.
    pub async fn put_json(&self, path: &str, body: Value) -> Result<Value> {
        let resp = self
            .send(self.req(reqwest::Method::PUT, path).json(&body))
            .await?;
        let text = resp.text().await.unwrap_or_default();
        if text.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&text).map_err(|e| Error::internal(e.to_string()))
        }
    }

    /// PATCH a JSON body, the answer decoded as JSON.
    pub async fn patch(&self, path: &str, body: Value) -> Result<Value> {
        self.json(self.req(reqwest::Method::PATCH, path).json(&body))
            .await
    }

    pub async fn delete(&self, path: &str) -> Result<Value> {
        let resp = self.send(self.req(reqwest::Method::DELETE, path)).await?;
        let text = resp.text().await.unwrap_or_default();
        if text.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_str(&text).map_err(|e| Error::internal(e.to_string()))
        }
    }

    #[allow(dead_code)]
    pub async fn health(&self) -> Result<()> {
        self.send(self.req(reqwest::Method::GET, "/healthz"))
            .await
            .map(|_| ())
    }

    pub async fn create(&self, manifest: Value) -> Result<Sandbox> {
        self.post_as("/v1/sandboxes", json!({ "manifest": manifest }))
            .await
    }

    /// A sandbox started from a template (`name[:version]`); `manifest`
    /// replaces the template's.
    pub async fn create_from_template(
        &self,
        template: &str,
        manifest: Option<Value>,
    ) -> Result<Sandbox> {
        let mut body = json!({ "template": template });
        if let Some(m) = manifest {
            body["manifest"] = m;
        }
        self.post_as("/v1/sandboxes", body).await
    }

    /// Publish sandbox `from` as the next version of template `name`.
    pub async fn create_template(&self, name: &str, from: &str) -> Result<TemplateInfo> {
        self.post_as(
            "/v1/templates",
            json!({ "name": name, "from_sandbox": from }),
        )
        .await
    }

    /// Every live version of the tenant's templates.
    pub async fn templates(&self) -> Result<Vec<TemplateInfo>> {
        self.get_as("/v1/templates").await
    }

    /// Delete `name` (every version) or `name:version`; the versions deleted.
    pub async fn delete_template(&self, reference: &str) -> Result<Vec<TemplateInfo>> {
        let path = match reference.split_once(':') {
            Some((n, v)) => format!("/v1/templates/{n}/{v}"),
            None => format!("/v1/templates/{reference}"),
        };
        self.json(self.req(reqwest::Method::DELETE, &path)).await
    }

    pub async fn sandbox(&self, id: &str) -> Result<Sandbox> {
        self.get_as(&format!("/v1/sandboxes/{id}")).await
    }

    /// The live sandboxes; only those in `state` when given; every one
    /// (destroyed, image builds') with `all`.
    pub async fn list(&self, state: Option<&str>, all: bool) -> Result<Vec<Sandbox>> {
        let mut query = Vec::new();
        if let Some(s) = state {
            query.push(format!("state={s}"));
        }
        if all {
            query.push("all=true".to_string());
        }
        let path = match query.is_empty() {
            true => "/v1/sandboxes".to_string(),
            false => format!("/v1/sandboxes?{}", query.join("&")),
        };
        self.get_as(&path).await
    }

    pub async fn exec(&self, id: &str, argv: &[&str], timeout_ms: u64) -> Result<ExecResponse> {
        self.post_as(
            &format!("/v1/sandboxes/{id}/exec"),
            json!({ "argv": argv, "timeout_ms": timeout_ms }),
        )
        .await
    }

    pub async fn exec_body(&self, id: &str, body: Value) -> Result<ExecResponse> {
        self.post_as(&format!("/v1/sandboxes/{id}/exec"), body)
            .await
    }

    /// Streaming exec: calls `on_line` for every NDJSON line; returns the
    /// last one (none when the stream carried no line).
    pub async fn exec_stream(
        &self,
        id: &str,
        body: Value,
        mut on_line: impl FnMut(&ExecStreamLine),
    ) -> Result<Option<ExecStreamLine>> {
        use futures::StreamExt;
        let resp = self
            .send(
                self.req(
                    reqwest::Method::POST,
                    &format!("/v1/sandboxes/{id}/exec/stream"),
                )
                .json(&body),
            )
            .await?;
        let mut stream = resp.bytes_stream();
        let mut buf = Vec::new();
        let mut last = None;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Error::internal(format!("stream broke: {e}")))?;
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let v: ExecStreamLine =
                    serde_json::from_slice(&line).map_err(|e| Error::internal(e.to_string()))?;
                on_line(&v);
                last = Some(v);
            }
        }
        Ok(last)
    }

    pub async fn put_file(&self, id: &str, path: &str, data: Vec<u8>) -> Result<()> {
        self.send(
            self.req(reqwest::Method::PUT, &format!("/v1/sandboxes/{id}/files"))
                .query(&[("path", path)])
                .body(data),
        )
        .await
        .map(|_| ())
    }

    /// PUT a local file as a stream (never read into memory whole).
    pub async fn put_file_from(&self, id: &str, path: &str, file: &std::path::Path) -> Result<u64> {
        let f = tokio::fs::File::open(file)
            .await
            .map_err(|e| Error::invalid(format!("{}: {e}", file.display())))?;
        let len = f.metadata().await?.len();
        let body =
            reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::with_capacity(f, 1 << 20));
        self.send(
            self.req(reqwest::Method::PUT, &format!("/v1/sandboxes/{id}/files"))
                .query(&[("path", path)])
                .header("content-length", len)
                .body(body),
        )
        .await
        .map(|_| len)
    }

    pub async fn get_file(&self, id: &str, path: &str) -> Result<Vec<u8>> {
        let resp = self
            .send(
                self.req(reqwest::Method::GET, &format!("/v1/sandboxes/{id}/files"))
                    .query(&[("path", path)]),
            )
            .await?;
        resp.bytes()
            .await
            .map(|b| b.to_vec())
            .map_err(|e| Error::internal(e.to_string()))
    }

    pub async fn list_files(&self, id: &str, path: &str) -> Result<Vec<FileEntry>> {
        self.json(
            self.req(
                reqwest::Method::GET,
                &format!("/v1/sandboxes/{id}/files/list"),
            )
            .query(&[("path", path)]),
        )
        .await
    }

    pub async fn session_start(&self, id: &str, argv: &[&str]) -> Result<SessionInfo> {
        self.post_as(
            &format!("/v1/sandboxes/{id}/sessions"),
            json!({ "argv": argv }),
        )
        .await
    }

    /// The sandbox's sessions.
    pub async fn sessions(&self, id: &str) -> Result<Vec<SessionInfo>> {
        self.get_as(&format!("/v1/sandboxes/{id}/sessions")).await
    }

    pub async fn session_send(&self, id: &str, session: &str, data: &str) -> Result<()> {
        self.send(
            self.req(
                reqwest::Method::POST,
                &format!("/v1/sandboxes/{id}/sessions/{session}/input"),
            )
            .json(&json!({ "data": data })),
        )
        .await
        .map(|_| ())
    }

    pub async fn session_read(
        &self,
        id: &str,
        session: &str,
        offset: u64,
        wait_ms: u64,
    ) -> Result<SessionOutputResponse> {
        self.get_as(&format!(
            "/v1/sandboxes/{id}/sessions/{session}/output?offset={offset}&wait_ms={wait_ms}"
        ))
        .await
    }

    /// Read session output from `offset` until `needle` appears or `timeout` passes.
    pub async fn session_read_until(
        &self,
        id: &str,
        session: &str,
        mut offset: u64,
        needle: &str,
        timeout: Duration,
    ) -> Result<(String, u64)> {
        let deadline = std::time::Instant::now() + timeout;
        let mut text = String::new();
        loop {
            let v = self.session_read(id, session, offset, 1000).await?;
            text.push_str(&v.data);
            offset = v.next_offset;
            if text.contains(needle) {
                return Ok((text, offset));
            }
            if std::time::Instant::now() > deadline {
                return Err(Error::timeout(format!(
                    "waited for {needle:?}; session printed {text:?}"
                )));
            }
        }
    }

    /// Pause with a request body of one's own (`standby`, `keep_memory`).
    pub async fn pause_body(&self, id: &str, body: Value) -> Result<Sandbox> {
        self.post_as(&format!("/v1/sandboxes/{id}/pause"), body)
            .await
    }

    /// Drop this node's standby and local pause files of a paused sandbox.
    pub async fn evict(&self, id: &str) -> Result<Sandbox> {
        self.post_as(&format!("/v1/sandboxes/{id}/evict"), json!({}))
            .await
    }

    pub async fn resume(&self, id: &str) -> Result<Sandbox> {
        self.post_as(&format!("/v1/sandboxes/{id}/resume"), json!({}))
            .await
    }

    pub async fn destroy(&self, id: &str) -> Result<Sandbox> {
        self.json(self.req(reqwest::Method::DELETE, &format!("/v1/sandboxes/{id}")))
            .await
    }

    pub async fn usage(&self, id: &str) -> Result<Usage> {
        self.get_as(&format!("/v1/sandboxes/{id}/usage")).await
    }

    pub async fn snapshot(&self, id: &str, ttl_secs: Option<u64>) -> Result<SnapshotInfo> {
        let body = match ttl_secs {
            Some(t) => json!({ "ttl_secs": t }),
            None => json!({}),
        };
        self.post_as(&format!("/v1/sandboxes/{id}/snapshots"), body)
            .await
    }

    /// The tenant's snapshots.
    pub async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.get_as("/v1/snapshots").await
    }

    pub async fn snapshot_info(&self, snapshot: &str) -> Result<SnapshotInfo> {
        self.get_as(&format!("/v1/snapshots/{snapshot}")).await
    }

    /// Upload an exported snapshot file (see `upload`).
    pub async fn import_snapshot(
        &self,
        file: &std::path::Path,
        progress: bool,
    ) -> Result<SnapshotInfo> {
        self.upload("/v1/snapshots/import", file, progress).await
    }

    pub async fn restore(&self, snapshot: &str, manifest: Option<Value>) -> Result<Sandbox> {
        let body = match manifest {
            Some(m) => json!({ "manifest": m }),
            None => json!({}),
        };
        self.post_as(&format!("/v1/snapshots/{snapshot}/restore"), body)
            .await
    }

    pub async fn fork(&self, id: &str, count: u32) -> Result<ForkResponse> {
        self.post_as(
            &format!("/v1/sandboxes/{id}/fork"),
            json!({ "count": count }),
        )
        .await
    }

    /// Stream a GET response into `dest` (via a temp file), with a progress bar.
    pub async fn download(
        &self,
        path: &str,
        dest: &std::path::Path,
        progress: bool,
    ) -> Result<u64> {
        use futures::StreamExt;
        use std::io::Write;
        let resp = self.send(self.req(reqwest::Method::GET, path)).await?;
        let bar = progress_bar(progress, resp.content_length(), "download");
        let tmp = dest.with_extension("partial");
        let mut f = std::fs::File::create(&tmp)
            .map_err(|e| Error::invalid(format!("{}: {e}", tmp.display())))?;
        let mut stream = resp.bytes_stream();
        let mut n = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                Error::internal(format!("download broke: {e}"))
            })?;
            f.write_all(&chunk)?;
            n += chunk.len() as u64;
            bar.inc(chunk.len() as u64);
        }
        f.sync_all()?;
        std::fs::rename(&tmp, dest)?;
        bar.finish();
        Ok(n)
    }

    /// POST a local file as the body, with a progress bar; returns the JSON answer.
    pub async fn upload<T: DeserializeOwned>(
        &self,
        path: &str,
        file: &std::path::Path,
        progress: bool,
    ) -> Result<T> {
        use futures::StreamExt;
        let f = tokio::fs::File::open(file)
            .await
            .map_err(|e| Error::invalid(format!("{}: {e}", file.display())))?;
        let len = f.metadata().await?.len();
        let bar = progress_bar(progress, Some(len), "upload");
        let bar2 = bar.clone();
        let stream = tokio_util::io::ReaderStream::with_capacity(f, 1 << 20).inspect(move |c| {
            if let Ok(c) = c {
                bar2.inc(c.len() as u64);
            }
        });
        let body = reqwest::Body::wrap_stream(stream);
        let v = self
            .json(
                self.req(reqwest::Method::POST, path)
                    .header("content-type", "application/octet-stream")
                    .header("content-length", len)
                    .body(body),
            )
            .await;
        bar.finish();
        v
    }

    /// POST a local file as the body and hand each JSON line of the
    /// streamed answer to `on_line`.
    pub async fn post_file_lines(
        &self,
        path: &str,
        file: &std::path::Path,
        mut on_line: impl FnMut(Value),
    ) -> Result<()> {
        use futures::StreamExt;
        let f = tokio::fs::File::open(file)
            .await
            .map_err(|e| Error::invalid(format!("{}: {e}", file.display())))?;
        let len = f.metadata().await?.len();
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(f));
        let resp = self
            .send(
                self.req(reqwest::Method::POST, path)
                    .header("content-type", "application/x-tar")
                    .header("content-length", len)
                    .body(body),
            )
            .await?;
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| Error::internal(format!("stream broke: {e}")))?;
            buf.extend_from_slice(&chunk);
            while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                    on_line(v);
                }
            }
        }
        Ok(())
    }

    /// Poll until the sandbox reaches `state` (or `timeout`).
    pub async fn wait_state(&self, id: &str, state: &str, timeout: Duration) -> Result<Sandbox> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let v = self.sandbox(id).await?;
            if v.state == state {
                return Ok(v);
            }
            if std::time::Instant::now() > deadline {
                // Quoted as the JSON string it was printed as before.
                return Err(Error::timeout(format!(
                    "sandbox {id} did not become {state} within {timeout:?} (it is {})",
                    Value::from(v.state.as_str())
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn progress_bar(show: bool, len: Option<u64>, what: &str) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = match len {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar
}

/// A user-given id as one URL path segment (ids are `[A-Za-z0-9_-]`).
pub fn path_seg(s: &str) -> Result<&str> {
    stasis_core::id::validate_id("path", s)?;
    Ok(s)
}
