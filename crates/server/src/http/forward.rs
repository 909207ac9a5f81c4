//! Cluster forwarding: a request about a sandbox leased by another live node
//! is proxied there (headers, Authorization included, plus the hop header
//! [`HOP_HEADER`] so a forwarded request is never forwarded again). Where a
//! sandbox is served is [`crate::cluster`]'s decision; this is the HTTP side.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use stasis_core::{Error, ErrorCode, Result, SandboxId};

use super::error::ApiError;
use super::state::AppState;
use crate::cluster::{Cluster, Route, HOP_HEADER};

/// Proxy `req` to `url` (another node), adding the hop header.
pub async fn forward(cluster: &Cluster, url: &str, req: Request) -> Response {
    if crate::ports::proxy::is_upgrade(req.headers()) {
        return forward_upgrade(cluster, url, req).await;
    }
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
    let mut rb = cluster.http().request(method, &target);
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
    rb = rb.header(HOP_HEADER, cluster.node_id());
    let stream = body.into_data_stream();
    let resp = match rb.body(reqwest::Body::wrap_stream(stream)).send().await {
        Ok(r) => r,
        Err(e) => {
            return ApiError(Error::new(
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

/// A WebSocket to a sandbox port held by another node: relayed over a
/// plain HTTP/1.1 connection to that node (the same relay as into a
/// sandbox), its credentials and the hop header put back.
async fn forward_upgrade(cluster: &Cluster, url: &str, req: Request) -> Response {
    use crate::ports::proxy::{relay, Activity, Target};
    use axum::http::{HeaderMap, HeaderName, HeaderValue};
    let Some(host) = url.strip_prefix("http://").map(|h| h.trim_end_matches('/')) else {
        return bad_gateway(&format!("cannot relay a WebSocket to {url} (not http://)"));
    };
    let stream = match tokio::net::TcpStream::connect(host).await {
        Ok(s) => s,
        Err(e) => return bad_gateway(&format!("the node running this sandbox ({url}): {e}")),
    };
    let mut add = HeaderMap::new();
    // The credentials the relay keeps from a sandbox go to the other node:
    // the token, the console's cookie (a terminal attached from the
    // console), the daemon's own headers.
    for (k, v) in req.headers() {
        let keep = k == axum::http::header::AUTHORIZATION
            || k == axum::http::header::HOST
            || k == axum::http::header::COOKIE;
        if keep || k.as_str().starts_with("x-stasis-") {
            add.append(k.clone(), v.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(cluster.node_id()) {
        add.insert(HeaderName::from_static(HOP_HEADER), v);
    }
    let target = Target {
        port: 0,
        path_and_query: req
            .uri()
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string()),
        prefix: String::new(),
        client: None,
        max_body: 0,
        add_headers: add,
    };
    let activity: Activity = std::sync::Arc::new(|_, _| {});
    match relay(stream, req, target, activity).await {
        Ok(r) => r,
        Err(e) => ApiError(e).into_response(),
    }
}

fn bad_gateway(msg: &str) -> Response {
    ApiError(Error::new(ErrorCode::BackendError, msg.to_string())).into_response()
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
    // A signed port URL names its sandbox inside the token: read (not
    // verified here) to find the node; that node verifies it.
    if let Some(rest) = path.strip_prefix(crate::ports::SIGNED_PREFIX) {
        let token = rest.split('/').next().unwrap_or("");
        return Ok(crate::ports::token::peek(token).ok().map(|c| c.sandbox));
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
                Ok(Route::Forward { url, .. }) => return forward(cluster, &url, req).await,
                Ok(Route::Local) => {}
                Err(e) => return ApiError(e).into_response(),
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
