//! Exposed ports on their own origins: with a ports domain
//! (`--ports-domain`), a request whose `Host` is `<port>-<sandbox>.<domain>`
//! is relayed to that port, whatever its path: such a host never serves the
//! console or the API, so nothing a sandbox serves is same-origin with them
//! (and the console's cookie, host-only on the daemon's host, is never sent
//! there). Parsing the host is [`crate::ports::host`]'s; relaying is
//! [`super::ports`]'s; this authenticates and translates.
//!
//! Credentials on a port host, first found wins:
//! - `?stasis_port_token=<token>` (the URL the daemon issues): checked, and
//!   on a `GET`/`HEAD` exchanged for the `stasis_port` cookie (host-only on
//!   this origin, until the URL expires) by a redirect to the same path
//!   without the parameter, so the token leaves the address bar;
//! - `x-stasis-port-token: <token>` (clients that are not browsers);
//! - the `stasis_port` cookie;
//! - `Authorization: Bearer <tenant token>` with the `exec` scope.
//!
//! The token must open this very port of this very sandbox (403 otherwise).
//! In a cluster, a request for a sandbox another node runs is forwarded
//! there, its host in [`FORWARDED_HOST`].

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use stasis_core::{now_ms, Error, ErrorCode, Result, SandboxId};

use super::error::ApiError;
use super::ports::{relay, url_ctx, url_rate_limited, Dest};
use super::state::AppState;
use crate::cluster::{Route, HOP_HEADER};
use crate::manager::Ctx;
use crate::ports::{
    port_cookie, port_cookie_token, take_token_param, PortsDomain, PORT_TOKEN_HEADER,
};

/// The port host a request forwarded by another node arrived on (its own
/// `Host` then names this node).
pub const FORWARDED_HOST: &str = "x-stasis-port-host";

/// The route template a bearer token's scopes are checked against.
const PORT_TEMPLATE: &str = "/v1/sandboxes/{id}/ports/{port}/{*path}";

/// The host a request is for.
fn request_host(req: &Request) -> Option<String> {
    let h = req.headers();
    let forwarded = h
        .contains_key(HOP_HEADER)
        .then(|| h.get(FORWARDED_HOST))
        .flatten();
    forwarded
        .or_else(|| h.get(header::HOST))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
}

/// Middleware: requests for a port host are served here, never by the
/// console or the API; every other request goes on.
pub async fn host_layer(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(domain) = st.ports.config().domain.clone() else {
        return next.run(req).await;
    };
    let Some(host) = request_host(&req) else {
        return next.run(req).await;
    };
    let Some(route) = domain.route(&host) else {
        return next.run(req).await;
    };
    let port = route.port;
    let Ok(id) = SandboxId::parse(route.label) else {
        return ApiError(Error::not_found(format!("sandbox {}", route.label))).into_response();
    };
    if port == stasis_e2b::envd::ENVD_PORT {
        // E2B's envd on its own host: served by the E2B edge (which
        // authenticates it), as in the SDKs' sandbox-URL mode.
        return next.run(stasis_e2b::envd::route::to_envd(req, &id)).await;
    }
    match serve(&st, &domain, &host, id, port, req).await {
        Ok(r) => r,
        Err(e) => ApiError(e).into_response(),
    }
}

async fn serve(
    st: &AppState,
    domain: &PortsDomain,
    host: &str,
    id: SandboxId,
    port: u16,
    mut req: Request,
) -> Result<Response> {
    if let Some(cluster) = st.manager.cluster() {
        if !req.headers().contains_key(HOP_HEADER) {
            if let Route::Forward { url, .. } = cluster.route(&id).await? {
                if let Ok(v) = HeaderValue::from_str(host) {
                    req.headers_mut().insert(FORWARDED_HOST, v);
                }
                return Ok(super::forward::forward(cluster, &url, req).await);
            }
        }
    }
    let (query, param) = take_token_param(req.uri().query());
    let path = req.uri().path().to_string();
    let path_and_query = match &query {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };
    let header_token = req
        .headers()
        .get(PORT_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let token = param
        .clone()
        .or(header_token)
        .or_else(|| port_cookie_token(req.headers()));
    let (ctx, signed) = match token {
        Some(tok) => {
            let m = &st.manager;
            let claims = st
                .ports
                .check_for(m.meta(), m.snapshots().store(), &tok, &id, port)
                .await?;
            if let Some(r) = url_rate_limited(st, &claims.url_id) {
                return Ok(r);
            }
            if param.is_some() && matches!(*req.method(), Method::GET | Method::HEAD) {
                let secure =
                    domain.scheme() == "https" || crate::console::session::over_tls(req.headers());
                let max_age = (claims.expires_at_ms - now_ms()) / 1000;
                return Ok(to_cookie(
                    &path_and_query,
                    &port_cookie(&tok, max_age, secure),
                ));
            }
            (url_ctx(st, &claims).await?, true)
        }
        None => (
            bearer_ctx(st, req.headers(), req.method(), &id, port).await?,
            false,
        ),
    };
    let d = Dest {
        id,
        port,
        prefix: String::new(),
        path_and_query,
        signed,
        daemon_origin: false,
    };
    Ok(relay(st, &ctx, d, req).await)
}

/// A redirect to `location` setting `cookie`.
fn to_cookie(location: &str, cookie: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    let h = r.headers_mut();
    if let (Ok(l), Ok(c)) = (
        HeaderValue::from_str(location),
        HeaderValue::from_str(cookie),
    ) {
        h.insert(header::LOCATION, l);
        h.insert(header::SET_COOKIE, c);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

/// The tenant a bearer token on a port host acts as, with the scopes the
/// token route needs (`exec`, its sandbox limit) and its rate limit.
///
/// Takes the headers and method, not the request: a borrowed request (its
/// body is not `Sync`) would make the middleware's future not `Send`.
async fn bearer_ctx(
    st: &AppState,
    headers: &axum::http::HeaderMap,
    method: &axum::http::Method,
    id: &SandboxId,
    port: u16,
) -> Result<Ctx> {
    if !headers.contains_key(header::AUTHORIZATION) {
        return Err(crate::auth::unauthorized(
            "this port needs a signed URL (?stasis_port_token=, x-stasis-port-token) or a token",
        ));
    }
    let ident = super::auth::identify(st.manager.meta(), headers).await?;
    if let Err(secs) = st.limiter.check(&ident.token_id) {
        return Err(Error::new(
            ErrorCode::RateLimited,
            format!("rate limit of this token exceeded; retry in {secs} s"),
        ));
    }
    let Some(tenant) = ident.tenant.filter(|_| !ident.is_admin) else {
        return Err(Error::new(
            ErrorCode::Forbidden,
            "an admin token manages tenants and tokens; use a tenant token for sandboxes",
        ));
    };
    let path = format!("/v1/sandboxes/{id}/ports/{port}/");
    crate::scope::permit(
        ident.scopes,
        ident.sandbox.as_deref(),
        method,
        PORT_TEMPLATE,
        &path,
    )?;
    Ok(Ctx {
        tenant,
        actor: ident.actor,
    })
}
