//! Which sandbox and port a data-plane request is for.
//!
//! In the SDKs' sandbox-URL mode (`E2B_SANDBOX_URL=$STASIS_URL/e2b`) every
//! data-plane call arrives at the edge with `E2b-Sandbox-Id` and
//! `E2b-Sandbox-Port`: port 49983 is envd (served by [`super::router`]),
//! any other port (49999, the code interpreter's server; a port the user's
//! program serves) is relayed into the sandbox by the daemon's port proxy,
//! reached through [`PortForward`] (the proxy is the server's; this crate
//! cannot depend on it). A request without those headers is the control
//! plane's. In host mode (`<port>-<sandbox>.<ports domain>`) the server
//! turns a request for port 49983 into the same headers.

use std::future::Future;
use std::pin::Pin;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;

use stasis_access::scope::Scope;
use stasis_control::Ctx;
use stasis_core::{Error, SandboxId};

use super::files::EnvdError;
use crate::E2b;

/// envd's port inside an E2B sandbox.
pub const ENVD_PORT: u16 = 49983;
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";
/// The headers that carry the envd access token: the SDKs send
/// `X-Access-Token`; the code interpreter's client sends only the traffic
/// token on some calls, which the control plane answers with the same
/// value.
pub const ACCESS_HEADERS: [&str; 2] = ["x-access-token", "e2b-traffic-access-token"];

pub type BoxResponse = Pin<Box<dyn Future<Output = Response> + Send>>;

/// Relays a request to a port a sandbox serves, as the tenant `ctx`: the
/// daemon's port proxy (its origin rules, cookie stripping, limits and
/// resume on traffic).
pub trait PortForward: Send + Sync {
    /// `req`'s URI holds the path and query to ask inside the sandbox.
    fn forward(&self, ctx: Ctx, id: SandboxId, port: u16, req: Request) -> BoxResponse;
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Dest {
    /// The control plane (no sandbox named).
    Api,
    /// envd.
    Envd,
    /// Another port of the sandbox.
    Port(u16),
}

/// Decide from the headers.
pub fn dest(headers: &HeaderMap) -> Result<Dest, Error> {
    let id = headers.contains_key(SANDBOX_ID_HEADER);
    let port = headers.get(SANDBOX_PORT_HEADER).map(|v| {
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u16>().ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| Error::invalid("E2b-Sandbox-Port: must be 1-65535"))
    });
    match (id, port) {
        (false, None) => Ok(Dest::Api),
        (_, Some(Err(e))) => Err(e),
        (true, None) => Ok(Dest::Envd),
        (_, Some(Ok(ENVD_PORT))) => Ok(Dest::Envd),
        (_, Some(Ok(p))) => Ok(Dest::Port(p)),
    }
}

/// Middleware over the whole edge: data-plane requests go to envd or the
/// port proxy, the rest on to the control plane.
pub async fn dispatch(
    State((st, envd)): State<(E2b, axum::Router)>,
    req: Request,
    next: Next,
) -> Response {
    match dest(req.headers()) {
        Ok(Dest::Api) => next.run(req).await,
        Ok(Dest::Envd) => match envd.oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        },
        Ok(Dest::Port(port)) => forward(&st, port, req).await,
        Err(e) => EnvdError(e).into_response(),
    }
}

async fn forward(st: &E2b, port: u16, mut req: Request) -> Response {
    let Some(fwd) = st.forward.clone() else {
        return EnvdError(Error::unsupported("this daemon relays no sandbox ports"))
            .into_response();
    };
    // The traffic token may stand in for the access token.
    let h = req.headers_mut();
    if !h.contains_key(ACCESS_HEADERS[0]) {
        if let Some(v) = h.get(ACCESS_HEADERS[1]).cloned() {
            h.insert(ACCESS_HEADERS[0], v);
        }
    }
    let c = match super::caller(st, req.headers(), Scope::Exec).await {
        Ok(c) => c,
        Err(e) => return EnvdError(e).into_response(),
    };
    strip(req.headers_mut());
    fwd.forward(c.ctx, c.id, port, req).await
}

/// What the sandbox's server must not see: the edge's routing headers and
/// the access token (a credential of the caller's API token).
pub fn strip(h: &mut HeaderMap) {
    for k in [SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER]
        .into_iter()
        .chain(ACCESS_HEADERS)
    {
        h.remove(k);
    }
}

/// A request that arrived on envd's own host (`49983-<sandbox>.<ports
/// domain>`) as the edge serves it: under [`crate::PREFIX`], naming the
/// host's sandbox and envd's port (whatever the client put in those
/// headers).
pub fn to_envd(mut req: Request, id: &SandboxId) -> Request {
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if let Ok(uri) = format!("{}{pq}", crate::PREFIX).parse() {
        *req.uri_mut() = uri;
    }
    let h = req.headers_mut();
    if let Ok(v) = id.as_str().parse() {
        h.insert(SANDBOX_ID_HEADER, v);
    }
    h.insert(SANDBOX_PORT_HEADER, ENVD_PORT.into());
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn requests_are_routed_by_their_headers() {
        assert_eq!(dest(&h(&[])).unwrap(), Dest::Api);
        assert_eq!(
            dest(&h(&[(SANDBOX_ID_HEADER, "sb-a")])).unwrap(),
            Dest::Envd
        );
        assert_eq!(
            dest(&h(&[
                (SANDBOX_ID_HEADER, "sb-a"),
                (SANDBOX_PORT_HEADER, "49983")
            ]))
            .unwrap(),
            Dest::Envd
        );
        assert_eq!(
            dest(&h(&[
                (SANDBOX_ID_HEADER, "sb-a"),
                (SANDBOX_PORT_HEADER, "49999")
            ]))
            .unwrap(),
            Dest::Port(49999)
        );
        assert!(dest(&h(&[(SANDBOX_PORT_HEADER, "0")])).is_err());
        assert!(dest(&h(&[(SANDBOX_PORT_HEADER, "http")])).is_err());
    }

    #[test]
    fn envd_hosts_become_edge_requests_for_their_sandbox() {
        let req = Request::builder()
            .uri("/files?path=/a")
            .header(SANDBOX_ID_HEADER, "sb-other")
            .body(axum::body::Body::empty())
            .unwrap();
        let r = to_envd(req, &SandboxId::parse("sb-a").unwrap());
        assert_eq!(r.uri().to_string(), "/e2b/files?path=/a");
        assert_eq!(r.headers()[SANDBOX_ID_HEADER], "sb-a");
        assert_eq!(dest(r.headers()).unwrap(), Dest::Envd);
    }

    #[test]
    fn the_sandbox_never_sees_routing_headers_or_tokens() {
        let mut x = h(&[
            (SANDBOX_ID_HEADER, "sb-a"),
            (SANDBOX_PORT_HEADER, "8080"),
            ("x-access-token", "t.ab"),
            ("e2b-traffic-access-token", "t.ab"),
            ("accept", "*/*"),
        ]);
        strip(&mut x);
        assert_eq!(x.len(), 1);
        assert!(x.contains_key("accept"));
    }
}
