//! The port proxy's HTTP side: one request from a client, relayed over a
//! TCP connection to the sandbox's port (HTTP/1.1, hyper's client), and its
//! response relayed back, both bodies streamed, never buffered.
//!
//! Headers: hop-by-hop headers (RFC 9110 section 7.6.1, plus any named in
//! `Connection`) are dropped both ways; `Authorization` (the tenant's API
//! token) never goes into the sandbox, nor do the daemon's own `x-stasis-*`
//! headers; `Host` becomes `localhost:<port>` (what a dev server expects)
//! and the original goes in `X-Forwarded-Host`, beside `X-Forwarded-For`,
//! `X-Forwarded-Proto` and `X-Forwarded-Prefix` (the path prefix the app
//! is served under, for links).
//!
//! Cookies: the daemon's own (every name starting `stasis_`, with or
//! without a `__Host-`/`__Secure-` prefix: the console's session, the port
//! origin's URL cookie) never cross the proxy. They are cut out of the
//! request's `Cookie` (so a sandbox never sees a viewer's session), and a
//! response's `Set-Cookie` naming one is dropped (so a sandbox cannot plant
//! or clear one in a browser). Other cookies pass both ways: they belong to
//! the app in the sandbox.
//!
//! WebSocket (any `Connection: upgrade`): the upgrade request is relayed;
//! when the sandbox answers 101, both connections are taken over from
//! hyper and bytes are copied both ways until either side closes.
//!
//! Every body frame and tunnelled read reports its size to an [`Activity`]
//! callback (metrics, and the sandbox's idle clock, so a long download or a
//! busy WebSocket counts as activity while an idle one does not).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tracing::debug;

use stasis_core::{Error, ErrorCode, Result};

/// Which way bytes flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    ToSandbox,
    FromSandbox,
}

/// Told about every chunk of bytes relayed.
pub type Activity = Arc<dyn Fn(Dir, u64) + Send + Sync>;

/// Where a request goes and how it arrived.
pub struct Target {
    /// The port inside the sandbox.
    pub port: u16,
    /// Path and query inside the sandbox (starts with `/`).
    pub path_and_query: String,
    /// The public path prefix the sandbox's server appears under.
    pub prefix: String,
    /// The client's address, when known.
    pub client: Option<SocketAddr>,
    /// Largest request body relayed.
    pub max_body: u64,
    /// Set on the relayed request after the rewriting (a local forwarder
    /// adds its own credentials for the daemon here).
    pub add_headers: HeaderMap,
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether the request asks to switch protocols (WebSocket).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Headers minus the hop-by-hop ones (and those `Connection` names).
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (k, v) in headers {
        let name = k.as_str();
        if HOP_BY_HOP.contains(&name) || named.iter().any(|n| n == name) {
            continue;
        }
        out.append(k.clone(), v.clone());
    }
    out
}

/// Whether a cookie name is one of the daemon's own (`stasis_*`, also
/// behind the `__Host-` / `__Secure-` prefixes browsers give meaning to).
pub fn is_daemon_cookie(name: &str) -> bool {
    let n = name.trim();
    let n = n
        .strip_prefix("__Host-")
        .or_else(|| n.strip_prefix("__Secure-"))
        .unwrap_or(n);
    n.len() >= 7 && n.as_bytes()[..7].eq_ignore_ascii_case(b"stasis_")
}

/// The request's `Cookie` headers without the daemon's cookies (none left:
/// no header).
fn strip_daemon_cookies(h: &mut HeaderMap) {
    let kept: Vec<String> = h
        .get_all(header::COOKIE)
        .iter()
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(';')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .filter(|c| !is_daemon_cookie(c.split('=').next().unwrap_or("")))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .filter(|v| !v.is_empty())
        .collect();
    h.remove(header::COOKIE);
    for v in kept {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.append(header::COOKIE, v);
        }
    }
}

/// A response's `Set-Cookie` headers without those naming a daemon cookie.
fn drop_daemon_set_cookies(h: &mut HeaderMap) {
    let kept: Vec<HeaderValue> = h
        .get_all(header::SET_COOKIE)
        .iter()
        .filter(|v| {
            let s = String::from_utf8_lossy(v.as_bytes());
            let name = s.split(';').next().unwrap_or("").split('=').next();
            !is_daemon_cookie(name.unwrap_or(""))
        })
        .cloned()
        .collect();
    h.remove(header::SET_COOKIE);
    for v in kept {
        h.append(header::SET_COOKIE, v);
    }
}

/// The headers of the request relayed into the sandbox.
pub fn request_headers(incoming: &HeaderMap, t: &Target, upgrade: bool) -> HeaderMap {
    let mut h = end_to_end(incoming);
    h.remove(header::AUTHORIZATION);
    strip_daemon_cookies(&mut h);
    let ours: Vec<HeaderName> = h
        .keys()
        .filter(|k| k.as_str().starts_with("x-stasis-"))
        .cloned()
        .collect();
    for k in ours {
        h.remove(k);
    }
    if let Some(host) = incoming.get(header::HOST) {
        h.insert("x-forwarded-host", host.clone());
    }
    if let Some(addr) = t.client {
        let ip = addr.ip().to_string();
        let v = match incoming
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
        {
            Some(prev) if !prev.trim().is_empty() => format!("{prev}, {ip}"),
            _ => ip,
        };
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert("x-forwarded-for", v);
        }
    }
    h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
    if !t.prefix.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&t.prefix) {
            h.insert("x-forwarded-prefix", v);
        }
    }
    h.insert(
        header::HOST,
        HeaderValue::from_str(&format!("localhost:{}", t.port)).expect("ascii"),
    );
    if upgrade {
        if let Some(u) = incoming.get(header::UPGRADE) {
            h.insert(header::UPGRADE, u.clone());
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
    }
    h
}

/// The headers of the response relayed back (a 101 keeps its upgrade).
pub fn response_headers(incoming: &HeaderMap, switching: bool) -> HeaderMap {
    let mut h = end_to_end(incoming);
    drop_daemon_set_cookies(&mut h);
    if switching {
        if let Some(u) = incoming.get(header::UPGRADE) {
            h.insert(header::UPGRADE, u.clone());
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        }
    }
    h
}

/// The policy of a sandbox's response served on the daemon's own origin
/// (`/p/{token}/...` and `/v1/sandboxes/{id}/ports/...`, for CLI and API
/// use): the page gets an opaque origin (no `allow-same-origin`), so its
/// scripts can neither read the daemon's cookies nor call `/ui` or `/v1`
/// as the viewer; it may not be framed. Browsers get a port's own origin
/// from the ports domain instead.
pub const DAEMON_ORIGIN_CSP: &str = "sandbox allow-scripts allow-forms allow-popups \
     allow-downloads allow-modals; frame-ancestors 'none'";

/// Confine a relayed response served on the daemon's origin: the sandbox
/// policy (added beside any policy of the app's: every one applies), no
/// MIME sniffing, no framing, no referrer (the URL may carry a token).
pub fn confine_to_opaque_origin(h: &mut HeaderMap) {
    h.append(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(DAEMON_ORIGIN_CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// The body size the request declares, checked against the limit.
pub fn check_length(headers: &HeaderMap, max: u64) -> Result<()> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > max => Err(too_large(max)),
        _ => Ok(()),
    }
}

fn too_large(max: u64) -> Error {
    Error::new(
        ErrorCode::PayloadTooLarge,
        format!("request body exceeds the limit of {max} bytes"),
    )
}

/// Relay `req` to the sandbox over `stream` and return its response.
pub async fn relay(
    stream: tokio::net::TcpStream,
    mut req: Request<Body>,
    t: Target,
    activity: Activity,
) -> Result<Response<Body>> {
    check_length(req.headers(), t.max_body)?;
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let body = Metered::new(
        http_body_util::Limited::new(body, t.max_body as usize),
        Dir::ToSandbox,
        activity.clone(),
    );
    let mut out = Request::builder()
        .method(parts.method.clone())
        .uri(t.path_and_query.as_str())
        .version(axum::http::Version::HTTP_11)
        .body(body)
        .map_err(|e| Error::invalid(format!("request: {e}")))?;
    let mut headers = request_headers(&parts.headers, &t, upgrade);
    for k in t.add_headers.keys() {
        headers.remove(k);
    }
    for (k, v) in &t.add_headers {
        headers.append(k.clone(), v.clone());
    }
    *out.headers_mut() = headers;

    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable_err(t.port, &e))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "port proxy connection ended");
        }
    });
    let mut resp = sender.send_request(out).await.map_err(|e| {
        if is_length_limit(&e) {
            too_large(t.max_body)
        } else {
            unreachable_err(t.port, &e)
        }
    })?;
    let status = resp.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            return Err(Error::new(
                ErrorCode::PortUnreachable,
                "the sandbox's server switched protocols unasked",
            ));
        };
        let sandbox_upgrade = hyper::upgrade::on(&mut resp);
        let headers = response_headers(resp.headers(), true);
        tokio::spawn(tunnel(client_upgrade, sandbox_upgrade, activity));
        let mut r = Response::new(Body::empty());
        *r.status_mut() = status;
        *r.headers_mut() = headers;
        return Ok(r);
    }
    let headers = response_headers(resp.headers(), false);
    let body = Metered::new(resp.into_body(), Dir::FromSandbox, activity);
    let mut r = Response::new(Body::new(body));
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    Ok(r)
}

fn is_length_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

fn unreachable_err(port: u16, e: &hyper::Error) -> Error {
    Error::new(
        ErrorCode::PortUnreachable,
        format!("the server on port {port} in the sandbox did not answer over HTTP/1.1 ({e})"),
    )
}

/// Copy bytes both ways between the upgraded client and sandbox connections.
async fn tunnel(
    client: hyper::upgrade::OnUpgrade,
    sandbox: hyper::upgrade::OnUpgrade,
    activity: Activity,
) {
    let (c, s) = match tokio::try_join!(client, sandbox) {
        Ok(both) => both,
        Err(e) => {
            debug!(error = %e, "port proxy upgrade failed");
            return;
        }
    };
    let mut c = Counted {
        io: TokioIo::new(c),
        dir: Dir::ToSandbox,
        activity: activity.clone(),
    };
    let mut s = Counted {
        io: TokioIo::new(s),
        dir: Dir::FromSandbox,
        activity,
    };
    if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut s).await {
        debug!(error = %e, "port proxy tunnel ended");
    }
}

/// A connection whose reads are reported to an [`Activity`].
struct Counted<T> {
    io: T,
    dir: Dir,
    activity: Activity,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            (self.activity)(self.dir, n as u64);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A body whose data frames are reported to an [`Activity`].
struct Metered<B> {
    inner: B,
    dir: Dir,
    activity: Activity,
}

impl<B> Metered<B> {
    fn new(inner: B, dir: Dir, activity: Activity) -> Self {
        Metered {
            inner,
            dir,
            activity,
        }
    }
}

impl<B> HttpBody for Metered<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    if !d.is_empty() {
                        (self.activity)(self.dir, d.len() as u64);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            port: 8000,
            path_and_query: "/x?y=1".into(),
            prefix: "/v1/sandboxes/sb-1/ports/8000".into(),
            client: Some("10.0.0.9:5555".parse().unwrap()),
            max_body: 10,
            add_headers: HeaderMap::new(),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn request_headers_drop_credentials_and_hops() {
        let inc = map(&[
            ("host", "daemon:7070"),
            ("authorization", "Bearer stk_secret"),
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic abc"),
            ("x-stasis-actor", "me"),
            ("x-stasis-hop", "node-1"),
            ("x-forwarded-for", "1.2.3.4"),
            ("accept", "text/html"),
            ("cookie", "a=b"),
        ]);
        let h = request_headers(&inc, &target(), false);
        for gone in [
            "authorization",
            "connection",
            "keep-alive",
            "x-private",
            "transfer-encoding",
            "proxy-authorization",
            "x-stasis-actor",
            "x-stasis-hop",
            "upgrade",
        ] {
            assert!(!h.contains_key(gone), "{gone}");
        }
        assert_eq!(h["host"], "localhost:8000");
        assert_eq!(h["x-forwarded-host"], "daemon:7070");
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 10.0.0.9");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-prefix"], "/v1/sandboxes/sb-1/ports/8000");
        assert_eq!(h["accept"], "text/html");
        assert_eq!(h["cookie"], "a=b");
    }

    #[test]
    fn the_daemons_cookies_never_cross_either_way() {
        let inc = map(&[
            ("cookie", "a=b; stasis_session=scs_x; c=d"),
            ("cookie", "__Host-stasis_session=scs_y"),
            ("cookie", "Stasis_Port=tok; stasisfan=1"),
        ]);
        for upgrade in [false, true] {
            let h = request_headers(&inc, &target(), upgrade);
            let all: Vec<_> = h.get_all("cookie").iter().collect();
            assert_eq!(all, ["a=b; c=d", "stasisfan=1"], "upgrade {upgrade}");
        }
        // Only the daemon's cookies: no Cookie header at all.
        let h = request_headers(
            &map(&[("cookie", "stasis_session=scs_x")]),
            &target(),
            false,
        );
        assert!(!h.contains_key("cookie"));
        let back = map(&[
            ("set-cookie", "stasis_session=evil; Path=/"),
            ("set-cookie", "__Secure-stasis_port=x; Path=/; Secure"),
            ("set-cookie", " STASIS_SESSION=evil"),
            ("set-cookie", "app=1; Path=/"),
        ]);
        for switching in [false, true] {
            let r = response_headers(&back, switching);
            let all: Vec<_> = r.get_all("set-cookie").iter().collect();
            assert_eq!(all, ["app=1; Path=/"], "switching {switching}");
        }
        assert!(is_daemon_cookie("stasis_session") && !is_daemon_cookie("stasis"));
    }

    #[test]
    fn upgrades_keep_their_headers_both_ways() {
        let inc = map(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
        ]);
        assert!(is_upgrade(&inc));
        let h = request_headers(&inc, &target(), true);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "upgrade");
        assert_eq!(h["sec-websocket-key"], "dGhlIHNhbXBsZSBub25jZQ==");
        let back = map(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        ]);
        let r = response_headers(&back, true);
        assert_eq!(r["upgrade"], "websocket");
        assert_eq!(r["connection"], "upgrade");
        assert_eq!(r["sec-websocket-accept"], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        // Not an upgrade: neither header survives.
        let r = response_headers(&back, false);
        assert!(!r.contains_key("upgrade") && !r.contains_key("connection"));
        assert!(!is_upgrade(&map(&[("upgrade", "websocket")])));
        assert!(!is_upgrade(&map(&[("connection", "upgrade")])));
    }

    #[test]
    fn responses_on_the_daemons_origin_are_confined() {
        let mut h = map(&[
            ("content-security-policy", "default-src 'self'"),
            ("x-frame-options", "SAMEORIGIN"),
        ]);
        confine_to_opaque_origin(&mut h);
        let csp: Vec<_> = h.get_all("content-security-policy").iter().collect();
        assert_eq!(csp.len(), 2, "the app's policy and ours both apply");
        assert!(csp[1].to_str().unwrap().starts_with("sandbox "));
        assert!(!DAEMON_ORIGIN_CSP.contains("allow-same-origin"));
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["x-content-type-options"], "nosniff");
        assert_eq!(h["referrer-policy"], "no-referrer");
    }

    #[test]
    fn declared_length_over_the_limit_is_refused() {
        assert!(check_length(&map(&[("content-length", "10")]), 10).is_ok());
        let e = check_length(&map(&[("content-length", "11")]), 10).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        assert!(check_length(&HeaderMap::new(), 10).is_ok());
    }
}
