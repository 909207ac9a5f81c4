//! Exposed ports: the proxy to a server inside a sandbox
//! (`/v1/sandboxes/{id}/ports/{port}/...` with the tenant's token, or
//! `/p/{token}/...` with a signed URL and no token), and issuing and
//! revoking signed URLs. The work is [`crate::ports`]'s and the manager's
//! (`connect_port`: resume on traffic, the idle clock); this translates.
//!
//! On the token route the paths `urls` and `urls/{url_id}` answer `POST`
//! and `DELETE` themselves (signed URLs); every other method and path is
//! relayed to the sandbox. A signed URL has no such exception.
//!
//! Both forms are served on the daemon's own origin, so their responses are
//! confined to an opaque origin (`Content-Security-Policy: sandbox`, see
//! [`proxy::confine_to_opaque_origin`]); a browser gets each port on an
//! origin of its own from the ports domain ([`super::ports_host`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{now_ms, Error, ErrorCode, SandboxId};

use super::auth::Authed;
use super::error::{optional_json, ApiError, ApiResult};
use super::sandboxes::sandbox_id;
use super::state::AppState;
use crate::manager::Ctx;
use crate::ports::proxy::{self, Activity, Target};
use crate::ports::{check_ttl, parse_port, DenyReason, PortUrl, SIGNED_PREFIX};

/// Default lifetime of a signed URL.
const DEFAULT_TTL_SECS: u64 = 3600;

pub use super::error::Relayed;

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct NewPortUrl {
    /// Lifetime in seconds (5 to 604800; default 3600).
    #[serde(default)]
    pub ttl_secs: Option<u64>,
}

/// `/v1/sandboxes/{id}/ports/{port}` and the path inside the sandbox.
fn split_token_path(path: &str) -> Option<(&str, &str, &str, String)> {
    let rest = path.strip_prefix("/v1/sandboxes/")?;
    let (id, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("ports/")?;
    let (port, tail) = match rest.split_once('/') {
        Some((p, t)) => (p, t),
        None => (rest, ""),
    };
    let prefix_len = path.len() - tail.len() - usize::from(rest.len() > port.len());
    Some((id, port, &path[..prefix_len], format!("/{tail}")))
}

/// `/p/{token}` and the path inside the sandbox.
fn split_signed_path(path: &str) -> Option<(&str, &str, String)> {
    let rest = path.strip_prefix(SIGNED_PREFIX)?;
    let (token, tail) = match rest.split_once('/') {
        Some((t, tail)) => (t, tail),
        None => (rest, ""),
    };
    let prefix = &path[..SIGNED_PREFIX.len() + token.len()];
    Some((token, prefix, format!("/{tail}")))
}

fn with_query(path: String, req: &Request) -> String {
    match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    }
}

fn client_addr(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

/// Where one proxied request goes.
pub(super) struct Dest {
    pub id: SandboxId,
    pub port: u16,
    /// The public path prefix the port is served under.
    pub prefix: String,
    /// Path and query inside the sandbox.
    pub path_and_query: String,
    /// Reached by a signed URL (else by an API token).
    pub signed: bool,
    /// Served on the daemon's own origin (else on the port's own).
    pub daemon_origin: bool,
}

/// The 429 of a signed URL past its request rate (its own bucket, the rate
/// of an API token), if it is.
pub(super) fn url_rate_limited(st: &AppState, url_id: &str) -> Option<Response> {
    let secs = st.limiter.check(&format!("port-url:{url_id}")).err()?;
    let mut r = ApiError(Error::new(
        ErrorCode::RateLimited,
        format!("rate limit of this port URL exceeded; retry in {secs} s"),
    ))
    .into_response();
    r.headers_mut()
        .insert("retry-after", axum::http::HeaderValue::from(secs.max(1)));
    Some(r)
}

/// Relay `req` to `d` as `ctx`, counting it.
pub(super) async fn relay(st: &AppState, ctx: &Ctx, d: Dest, req: Request) -> Response {
    let Dest {
        id,
        port,
        prefix,
        path_and_query,
        signed,
        daemon_origin,
    } = d;
    let metrics = st.ports.metrics().clone();
    let unreachable = |e: Error| {
        if e.code == ErrorCode::PortUnreachable {
            metrics.denied(DenyReason::Unreachable);
        }
        ApiError(e).into_response()
    };
    let max_body = st.manager.config().max_file_bytes;
    // Refused before any of the body is read: the client must not reuse
    // this connection (it may still be sending), so say it closes.
    if let Err(e) = proxy::check_length(req.headers(), max_body) {
        let mut r = ApiError(e).into_response();
        r.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return r;
    }
    // A server still starting (a booting microVM's) gets a moment to listen.
    let wait = st.ports.config().listen_wait;
    let connect = || st.manager.connect_port(ctx, &id, port);
    let stream = match crate::ports::connect_waiting(wait, connect).await {
        Ok(s) => s,
        Err(e) => return unreachable(e),
    };
    metrics.request(signed, proxy::is_upgrade(req.headers()));
    let target = Target {
        port,
        path_and_query,
        prefix,
        client: client_addr(&req),
        max_body,
        add_headers: HeaderMap::new(),
    };
    let manager = st.manager.clone();
    let last = Arc::new(AtomicI64::new(now_ms()));
    let counters = metrics.clone();
    let activity: Activity = Arc::new(move |dir, n| {
        counters.bytes(dir, n);
        // The idle clock needs no finer grain than a second.
        let now = now_ms();
        if now - last.load(Ordering::Relaxed) >= 1000 {
            last.store(now, Ordering::Relaxed);
            manager.port_activity(&id);
        }
    });
    match proxy::relay(stream, req, target, activity).await {
        Ok(mut r) => {
            if daemon_origin {
                proxy::confine_to_opaque_origin(r.headers_mut());
            }
            r.extensions_mut().insert(Relayed);
            r
        }
        Err(e) => unreachable(e),
    }
}

/// Any method: relayed to the sandbox's port with the tenant's token.
#[utoipa::path(method(get, post, put, delete, patch), path = "/v1/sandboxes/{id}/ports/{port}/{path}",
    params(("id" = String, Path), ("port" = u16, Path, description = "1-65535"), ("path" = String, Path, description = "path inside the sandbox (may be empty)")),
    responses((status = 200, description = "the sandbox server's response, relayed (any status; 101 for a WebSocket)"),
        (status = 400, body = super::ErrorBody, description = "bad port"),
        (status = 404, body = super::ErrorBody, description = "no such sandbox (or another tenant's)"),
        (status = 502, body = super::ErrorBody, description = "port_unreachable: nothing listening")))]
async fn proxy_token(State(st): State<AppState>, auth: Authed, req: Request) -> Response {
    let ctx = auth.ctx();
    let Some((id, port, prefix, tail)) = split_token_path(req.uri().path()) else {
        return ApiError(Error::not_found("endpoint")).into_response();
    };
    let (id, port) = match (sandbox_id(id), parse_port(port)) {
        (Ok(id), Ok(port)) => (id, port),
        (Err(e), _) => return e.into_response(),
        (_, Err(e)) => return ApiError(e).into_response(),
    };
    let d = Dest {
        id,
        port,
        prefix: prefix.to_string(),
        path_and_query: with_query(tail, &req),
        signed: false,
        daemon_origin: true,
    };
    relay(&st, &ctx, d, req).await
}

/// Any method: relayed to the port a signed URL opens; no API token.
#[utoipa::path(method(get, post, put, delete, patch), path = "/p/{token}/{path}",
    params(("token" = String, Path, description = "the signed URL token"), ("path" = String, Path)),
    responses((status = 200, description = "the sandbox server's response, relayed"),
        (status = 403, body = super::ErrorBody, description = "expired, revoked, tampered or malformed URL"),
        (status = 502, body = super::ErrorBody, description = "port_unreachable")))]
async fn proxy_signed(State(st): State<AppState>, req: Request) -> Response {
    let Some((token, prefix, tail)) = split_signed_path(req.uri().path()) else {
        return ApiError(Error::not_found("endpoint")).into_response();
    };
    let meta = st.manager.meta();
    let claims = match st
        .ports
        .check(meta, st.manager.snapshots().store(), token)
        .await
    {
        Ok(c) => c,
        Err(e) => return ApiError(e).into_response(),
    };
    if let Some(r) = url_rate_limited(&st, &claims.url_id) {
        return r;
    }
    // `/p/{token}` -> `/p/{token}/`, so a page's relative links resolve
    // under the URL (a browser opening the URL without its slash).
    if req.uri().path() == prefix && matches!(*req.method(), Method::GET | Method::HEAD) {
        let query = req
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        return (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, format!("{prefix}/{query}"))],
        )
            .into_response();
    }
    let ctx = match url_ctx(&st, &claims).await {
        Ok(c) => c,
        Err(e) => return ApiError(e).into_response(),
    };
    let d = Dest {
        id: claims.sandbox,
        port: claims.port,
        prefix: prefix.to_string(),
        path_and_query: with_query(tail, &req),
        signed: true,
        daemon_origin: true,
    };
    relay(&st, &ctx, d, req).await
}

/// Who a signed URL's request acts as: the sandbox's tenant, the URL.
pub(super) async fn url_ctx(
    st: &AppState,
    claims: &crate::ports::Claims,
) -> stasis_core::Result<Ctx> {
    let rec = st.manager.meta().get(&claims.sandbox).await?;
    Ok(Ctx {
        tenant: rec.tenant,
        actor: format!("port-url:{}", claims.url_id),
    })
}

fn public_url(headers: &HeaderMap, path: &str) -> String {
    match headers.get(header::HOST).and_then(|h| h.to_str().ok()) {
        Some(host) => format!("http://{host}{path}"),
        None => path.to_string(),
    }
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/ports/{port}/urls", request_body(content = NewPortUrl, description = "optional"),
    responses((status = 201, body = PortUrl), (status = 400, body = super::ErrorBody, description = "bad port or ttl_secs")))]
async fn issue_url(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, port)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, axum::Json<PortUrl>)> {
    let ctx = auth.ctx();
    let id = sandbox_id(&id)?;
    let port = parse_port(&port)?;
    let req: NewPortUrl = optional_json(&body)?;
    let ttl = check_ttl(req.ttl_secs.unwrap_or(DEFAULT_TTL_SECS))?;
    let m = &st.manager;
    let (token, claims) = st
        .ports
        .issue(m.meta(), m.snapshots().store(), &ctx, &id, port, ttl)
        .await?;
    let path = format!("{SIGNED_PREFIX}{token}/");
    // On the ports domain, the URL a browser opens is on the port's origin.
    let url = match &st.ports.config().domain {
        Some(d) => format!(
            "{}/?{}={token}",
            d.origin(port, id.as_str()),
            crate::ports::PORT_TOKEN_PARAM
        ),
        None => public_url(&headers, &path),
    };
    Ok((
        StatusCode::CREATED,
        axum::Json(PortUrl {
            id: claims.url_id,
            url,
            path,
            port,
            expires_at_ms: claims.expires_at_ms,
        }),
    ))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/ports/{port}/urls",
    responses((status = 204, description = "every URL of the port issued until now is revoked")))]
async fn revoke_urls(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, port)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let (id, port) = (sandbox_id(&id)?, parse_port(&port)?);
    st.ports
        .revoke(st.manager.meta(), &ctx, &id, port, None)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/ports/{port}/urls/{url_id}",
    responses((status = 204, description = "the URL is revoked")))]
async fn revoke_url(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, port, url_id)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    let ctx = auth.ctx();
    let (id, port) = (sandbox_id(&id)?, parse_port(&port)?);
    st.ports
        .revoke(st.manager.meta(), &ctx, &id, port, Some(&url_id))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    let (s, p, urls) = routes!(issue_url, revoke_urls);
    let urls = (s, p, urls.fallback(proxy_token));
    let (s, p, one) = routes!(revoke_url);
    let one = (s, p, one.fallback(proxy_token));
    // The proxies take any method and a path of any depth: routed by hand,
    // documented from their `utoipa::path`.
    let (_, token_doc, _) = routes!(proxy_token);
    let (_, signed_doc, _) = routes!(proxy_signed);
    let mut r = OpenApiRouter::new()
        .routes(urls)
        .routes(one)
        .route("/v1/sandboxes/{id}/ports/{port}", any(proxy_token))
        .route("/v1/sandboxes/{id}/ports/{port}/", any(proxy_token))
        .route("/v1/sandboxes/{id}/ports/{port}/{*path}", any(proxy_token))
        .route("/p/{token}", any(proxy_signed))
        .route("/p/{token}/", any(proxy_signed))
        .route("/p/{token}/{*path}", any(proxy_signed));
    let doc = r.get_openapi_mut();
    doc.paths.paths.extend(token_doc.paths);
    doc.paths.paths.extend(signed_doc.paths);
    for item in doc.paths.paths.values_mut() {
        per_method_operation_ids(item);
    }
    r
}

/// One handler documented under several methods shares its operationId
/// across them, which code generators refuse; each method's operation gets
/// its own (`proxy_token_get`, `proxy_token_post`, ...).
fn per_method_operation_ids(item: &mut utoipa::openapi::PathItem) {
    let ops = [
        ("get", &mut item.get),
        ("post", &mut item.post),
        ("put", &mut item.put),
        ("delete", &mut item.delete),
        ("patch", &mut item.patch),
    ];
    let mut count = std::collections::HashMap::<String, usize>::new();
    for (_, op) in &ops {
        let op: &Option<utoipa::openapi::path::Operation> = op;
        if let Some(id) = op.as_ref().and_then(|o| o.operation_id.clone()) {
            *count.entry(id).or_default() += 1;
        }
    }
    for (method, op) in ops {
        if let Some(op) = op.as_mut() {
            if let Some(id) = op.operation_id.clone() {
                if count.get(&id).copied().unwrap_or(0) > 1 {
                    op.operation_id = Some(format!("{id}_{method}"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_paths_split_into_sandbox_port_and_inner_path() {
        let (id, port, prefix, tail) =
            split_token_path("/v1/sandboxes/sb-1/ports/8000/a/b").unwrap();
        assert_eq!(
            (id, port, prefix, tail.as_str()),
            ("sb-1", "8000", "/v1/sandboxes/sb-1/ports/8000", "/a/b")
        );
        let (_, _, prefix, tail) = split_token_path("/v1/sandboxes/sb-1/ports/8000/").unwrap();
        assert_eq!(
            (prefix, tail.as_str()),
            ("/v1/sandboxes/sb-1/ports/8000", "/")
        );
        let (_, port, prefix, tail) = split_token_path("/v1/sandboxes/sb-1/ports/80").unwrap();
        assert_eq!(
            (port, prefix, tail.as_str()),
            ("80", "/v1/sandboxes/sb-1/ports/80", "/")
        );
        assert!(split_token_path("/v1/sandboxes/sb-1/exec").is_none());
    }

    #[test]
    fn signed_paths_split_into_token_and_inner_path() {
        let (t, prefix, tail) = split_signed_path("/p/abc/x/y").unwrap();
        assert_eq!((t, prefix, tail.as_str()), ("abc", "/p/abc", "/x/y"));
        let (t, prefix, tail) = split_signed_path("/p/abc").unwrap();
        assert_eq!((t, prefix, tail.as_str()), ("abc", "/p/abc", "/"));
        assert!(split_signed_path("/v1/p/abc").is_none());
    }
}
