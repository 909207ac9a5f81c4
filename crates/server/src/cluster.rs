//! Several daemons sharing one PostgreSQL metadata database and one snapshot
//! store. Each node registers itself and heartbeats; a running sandbox is
//! owned by one node through its lease row (see `stasis_meta::lease`).
//!
//! Any node accepts any request. For a sandbox leased by another live node
//! the request is proxied there (headers, Authorization included, plus a hop
//! header so a forwarded request is never forwarded again). A paused
//! sandbox belongs to no node: whichever node gets a request resumes it from
//! its pause snapshot in the store. A running sandbox whose owner's lease
//! expired is taken over by the node that gets the next request: it wins
//! the lease (exactly one contender can), restores the newest snapshot
//! (periodic checkpoint or last pause) under the same sandbox id, and
//! records how much running time after that snapshot was lost.
//!
//! The node's in-memory map of held leases is only what it believes; every
//! state write carries the fencing token from it and the database refuses a
//! stale one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::{info, warn};

use stasis_core::{now_ms, Error, ErrorCode, Result, SandboxId, SnapshotId};
use stasis_meta::{Fence, Meta};

use crate::api::AppState;

/// Header marking a request another node forwarded (never forwarded again).
pub const HOP_HEADER: &str = "x-stasis-forwarded-by";

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub node_id: String,
    /// Base URL other nodes reach this one at.
    pub advertise_url: String,
    /// Lease (and liveness) duration; heartbeats run at a third of it.
    pub lease: Duration,
}

pub struct Cluster {
    cfg: ClusterConfig,
    meta: Meta,
    /// Leases this node believes it holds.
    held: StdMutex<HashMap<SandboxId, Fence>>,
    /// Sandboxes paused here whose state this node still holds live (e.g. a
    /// frozen cgroup), with the pause snapshot it belongs to.
    local_pauses: StdMutex<HashMap<SandboxId, SnapshotId>>,
    http: reqwest::Client,
}

/// Where a request for a sandbox is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Local,
    Forward { node: String, url: String },
}

impl Cluster {
    pub async fn start(cfg: ClusterConfig, meta: Meta) -> Result<Arc<Self>> {
        if cfg.node_id.is_empty() || cfg.node_id.len() > 128 {
            return Err(Error::invalid("node id must be 1-128 characters"));
        }
        meta.node_register(&cfg.node_id, &cfg.advertise_url).await?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| Error::internal(format!("http client: {e}")))?;
        info!(node = %cfg.node_id, url = %cfg.advertise_url, "registered in the cluster");
        Ok(Arc::new(Cluster {
            cfg,
            meta,
            held: StdMutex::new(HashMap::new()),
            local_pauses: StdMutex::new(HashMap::new()),
            http,
        }))
    }

    pub fn node_id(&self) -> &str {
        &self.cfg.node_id
    }

    pub fn lease_ms(&self) -> i64 {
        self.cfg.lease.as_millis() as i64
    }

    /// The fence for writes about `id`, if this node holds its lease.
    pub fn fence(&self, id: &SandboxId) -> Option<Fence> {
        self.held.lock().expect("held").get(id).cloned()
    }

    pub(crate) fn hold(&self, id: &SandboxId, fence: Fence) {
        self.held.lock().expect("held").insert(id.clone(), fence);
    }

    /// Give up the lease of `id` (it paused, failed or was destroyed here).
    pub(crate) async fn release(&self, id: &SandboxId) {
        let f = self.held.lock().expect("held").remove(id);
        if let Some(f) = f {
            if let Err(e) = self.meta.lease_release(id, &f).await {
                warn!(sandbox = %id, error = %e, "lease not released (it will expire)");
            }
        }
    }

    pub(crate) fn note_local_pause(&self, id: &SandboxId, snap: Option<&SnapshotId>) {
        let mut m = self.local_pauses.lock().expect("local pauses");
        match snap {
            Some(s) => {
                m.insert(id.clone(), s.clone());
            }
            None => {
                m.remove(id);
            }
        }
    }

    /// Whether live paused state held here belongs to pause `snap` (if not,
    /// another node ran the sandbox since, and the local state is stale).
    pub(crate) fn local_pause_is(&self, id: &SandboxId, snap: Option<&SnapshotId>) -> bool {
        let m = self.local_pauses.lock().expect("local pauses");
        m.get(id) == snap && snap.is_some()
    }

    /// Where a request about `id` should be served: here, or at the live
    /// node that holds its lease.
    pub async fn route(&self, id: &SandboxId) -> Result<Route> {
        let now = now_ms();
        let Some(lease) = self.meta.lease_get(id).await? else {
            return Ok(Route::Local);
        };
        match &lease.node {
            Some(n) if n != &self.cfg.node_id && lease.live(now) => {
                let node = self.meta.node_get(n).await?;
                if node.alive(now, self.lease_ms()) {
                    return Ok(Route::Forward {
                        node: node.id,
                        url: node.url,
                    });
                }
                Ok(Route::Local)
            }
            _ => Ok(Route::Local),
        }
    }

    /// One heartbeat: renew this node's leases and forget (and report) the
    /// ones another node has taken.
    pub async fn heartbeat(&self) -> Result<Vec<SandboxId>> {
        let leases = self
            .meta
            .node_heartbeat(&self.cfg.node_id, self.lease_ms())
            .await?;
        let mut held = self.held.lock().expect("held");
        let lost: Vec<SandboxId> = held
            .iter()
            .filter(|(id, f)| {
                !leases
                    .iter()
                    .any(|l| l.sandbox == id.as_str() && l.token == f.token)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &lost {
            held.remove(id);
        }
        Ok(lost)
    }

    /// Proxy `req` to `url` (another node), adding the hop header.
    pub async fn forward(&self, url: &str, req: Request) -> Response {
        let (parts, body) = req.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let target = format!("{}{}", url.trim_end_matches('/'), path);
        let method = match reqwest::Method::from_bytes(parts.method.as_str().as_bytes()) {
            Ok(m) => m,
            Err(_) => return bad_gateway("bad method"),
        };
        let mut rb = self.http.request(method, &target);
        for (k, v) in parts.headers.iter() {
            let name = k.as_str();
            if matches!(
                name,
                "host" | "connection" | "content-length" | "transfer-encoding" | "keep-alive"
            ) {
                continue;
            }
            rb = rb.header(name, v.as_bytes());
        }
        rb = rb.header(HOP_HEADER, self.cfg.node_id.as_str());
        let stream = body.into_data_stream();
        let resp = match rb.body(reqwest::Body::wrap_stream(stream)).send().await {
            Ok(r) => r,
            Err(e) => {
                return crate::api::ApiError(Error::new(
                    ErrorCode::Busy,
                    format!(
                        "the node running this sandbox ({url}) does not answer ({e}); \
                         if it stopped, another node takes the sandbox over once its lease \
                         expires: retry"
                    ),
                ))
                .into_response()
            }
        };
        let mut out = Response::builder().status(resp.status().as_u16());
        for (k, v) in resp.headers().iter() {
            if matches!(
                k.as_str(),
                "connection" | "content-length" | "transfer-encoding" | "keep-alive"
            ) {
                continue;
            }
            out = out.header(k.as_str(), v.as_bytes());
        }
        out.body(Body::from_stream(resp.bytes_stream()))
            .unwrap_or_else(|e| bad_gateway(&e.to_string()))
    }
}

fn bad_gateway(msg: &str) -> Response {
    crate::api::ApiError(Error::new(ErrorCode::BackendError, msg.to_string())).into_response()
}

/// The sandbox a request path is about (`/v1/sandboxes/{id}/...`), except
/// reading the record itself, which any node serves from the database.
fn sandbox_in_path(method: &axum::http::Method, path: &str) -> Option<SandboxId> {
    let rest = path.strip_prefix("/v1/sandboxes/")?;
    let (id, tail) = match rest.split_once('/') {
        Some((id, tail)) => (id, tail),
        None => (rest, ""),
    };
    if tail.is_empty() && method == axum::http::Method::GET {
        return None;
    }
    SandboxId::parse(id).ok()
}

/// The run whose sandbox a request executes in: a tool call, or an approval
/// decision (approving runs the held call).
fn run_in_path<'a>(method: &axum::http::Method, path: &'a str) -> Option<&'a str> {
    if method != axum::http::Method::POST {
        return None;
    }
    let (id, tail) = path.strip_prefix("/v1/runs/")?.split_once('/')?;
    let decision = tail
        .strip_prefix("approvals/")
        .and_then(|t| t.split_once('/'))
        .is_some_and(|(_, verb)| verb == "approve" || verb == "reject");
    (tail == "tool-calls" || decision).then_some(id)
}

/// The sandbox a request acts on, directly or through a run. The run is
/// looked up without its tenant: the node it is forwarded to authorizes, and
/// answers another tenant's run with the same 404 as a missing one.
async fn sandbox_of(
    state: &AppState,
    method: &axum::http::Method,
    path: &str,
) -> Result<Option<SandboxId>> {
    if let Some(id) = sandbox_in_path(method, path) {
        return Ok(Some(id));
    }
    let Some(run) = run_in_path(method, path) else {
        return Ok(None);
    };
    match state.manager.meta().run_get(run).await {
        Ok(r) => Ok(r.sandbox.and_then(|s| SandboxId::parse(&s).ok())),
        Err(e) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Middleware: forward a request about a sandbox leased by another live
/// node (run tool calls and decisions included: they execute in the run's
/// sandbox, and a node that does not own it could only answer busy).
pub async fn forward_layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(cluster) = state.manager.cluster() {
        if !req.headers().contains_key(HOP_HEADER) {
            // Owned: the request (its body is not Sync) stays out of the await.
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            let routed = match sandbox_of(&state, &method, &path).await {
                Ok(Some(id)) => cluster.route(&id).await,
                Ok(None) => Ok(Route::Local),
                Err(e) => Err(e),
            };
            match routed {
                Ok(Route::Forward { url, .. }) => return cluster.forward(&url, req).await,
                Ok(Route::Local) => {}
                Err(e) => return crate::api::ApiError(e).into_response(),
            }
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn requests_that_execute_in_a_sandbox_are_recognised() {
        let sb = "sb-0123456789abcdef0123456789abcdef";
        assert!(sandbox_in_path(&Method::POST, &format!("/v1/sandboxes/{sb}/exec")).is_some());
        assert!(sandbox_in_path(&Method::DELETE, &format!("/v1/sandboxes/{sb}")).is_some());
        // Reading the record is served from the database by any node.
        assert!(sandbox_in_path(&Method::GET, &format!("/v1/sandboxes/{sb}")).is_none());
        assert!(sandbox_in_path(&Method::POST, "/v1/sandboxes/../etc/exec").is_none());

        assert_eq!(
            run_in_path(&Method::POST, "/v1/runs/run-1/tool-calls"),
            Some("run-1")
        );
        assert_eq!(
            run_in_path(&Method::POST, "/v1/runs/run-1/approvals/call-2/approve"),
            Some("run-1")
        );
        assert_eq!(
            run_in_path(&Method::POST, "/v1/runs/run-1/approvals/call-2/reject"),
            Some("run-1")
        );
        for (m, p) in [
            (Method::GET, "/v1/runs/run-1/tool-calls"),
            (Method::POST, "/v1/runs/run-1/steps"),
            (Method::POST, "/v1/runs/resume"),
            (Method::POST, "/v1/runs"),
            (Method::POST, "/v1/runs/run-1/approvals/call-2/forget"),
            (Method::POST, "/v1/runs/run-1/approvals/approve"),
        ] {
            assert_eq!(run_in_path(&m, p), None, "{m} {p}");
        }
    }
}
