//! The web console's HTTP edge (logic in [`crate::console`]):
//!
//! - `GET  /ui` -> the page; `GET /ui/assets/{name}` -> its embedded files
//! - `POST /ui/login` `{token, actor?}` -> the session cookie (httpOnly,
//!   SameSite=Strict, Secure behind TLS) and `{csrf, tenant, admin, actor,
//!   expires_at_ms}`; the token travels only in this body
//! - `GET  /ui/session` -> the same for the current session (401 without)
//! - `POST /ui/logout` (CSRF) -> the session ends, the cookie is cleared
//! - `GET  /ui/audit-verify` -> the hash chain's verification: whole for an
//!   admin session, only whether it is intact for a tenant's
//! - `GET  /v1/events` -> the tenant's live feed as server-sent events
//! - `GET  /v1/sandboxes/{id}/idle` -> when the idle timeout, the running-time
//!   limit or the TTL next act on the sandbox (its countdowns)
//!
//! The `/ui` paths are outside the API's authentication (they do their own);
//! the pages call the API with the cookie, which `super::auth` accepts.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::Error;

use super::auth::Authed;
use super::error::{ApiError, ApiJson, ApiResult};
use super::state::AppState;
use crate::auth::unauthorized;
use crate::console::{assets, events, idle, session};

pub use crate::console::{is_console_path, PREFIX};

fn page(a: assets::Asset) -> Response {
    let mut r = (StatusCode::OK, a.body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(assets::CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

async fn index() -> Response {
    page(assets::INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match assets::get(&name) {
        Some(a) => page(a),
        None => ApiError(Error::not_found(format!("console asset {name}"))).into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    token: String,
    #[serde(default)]
    actor: Option<String>,
}

/// The console's CSRF secret.
async fn csrf_key(st: &AppState) -> Result<&[u8; 32], ApiError> {
    let m = &st.manager;
    Ok(st.console.csrf_key(m.meta(), m.snapshots().store()).await?)
}

fn with_cookie(mut r: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

async fn login(
    State(st): State<AppState>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<Login>,
) -> ApiResult<Response> {
    session::check_origin(&headers)?;
    let key = csrf_key(&st).await?;
    let s = session::sign_in(st.manager.meta(), key, &body.token, body.actor.as_deref()).await?;
    let max_age = (s.expires_at_ms - stasis_core::now_ms()) / 1000;
    let cookie = session::set_cookie(&s.id, max_age, session::over_tls(&headers));
    Ok(with_cookie(axum::Json(s).into_response(), &cookie))
}

fn current(headers: &HeaderMap) -> Result<String, ApiError> {
    session::cookie_id(headers).ok_or_else(|| ApiError(unauthorized("not signed in")))
}

async fn who(State(st): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    let id = current(&headers)?;
    session::check_origin(&headers)?;
    let (ident, s) = session::resolve(st.manager.meta(), &id).await?;
    let key = csrf_key(&st).await?;
    Ok(axum::Json(serde_json::json!({
        "csrf": session::csrf_of(key, &id),
        "tenant": ident.tenant.map(|t| t.as_str().to_string()),
        "admin": ident.is_admin,
        "actor": s.actor,
        "expires_at_ms": s.expires_at_ms,
    }))
    .into_response())
}

async fn logout(State(st): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    let id = current(&headers)?;
    session::check_origin(&headers)?;
    session::check_csrf(csrf_key(&st).await?, &Method::POST, &headers, &id)?;
    session::sign_out(st.manager.meta(), &id).await?;
    let cookie = session::set_cookie("", 0, session::over_tls(&headers));
    Ok(with_cookie(StatusCode::NO_CONTENT.into_response(), &cookie))
}

async fn audit_verify(State(st): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    let id = current(&headers)?;
    let ident = session::identify(
        st.manager.meta(),
        csrf_key(&st).await?,
        &Method::GET,
        "/ui/audit-verify",
        &headers,
        &id,
    )
    .await?;
    let v = st.manager.meta().audit_verify().await?;
    if ident.is_admin {
        return Ok(axum::Json(v).into_response());
    }
    // The chain runs through every tenant's entries: a tenant learns only
    // whether it is intact.
    Ok(axum::Json(serde_json::json!({ "ok": v.ok })).into_response())
}

#[utoipa::path(get, path = "/v1/events",
    responses((status = 200, description = "text/event-stream of this tenant's audit events as they happen: `event: audit`, data {seq, ts_ms, action, target, actor}; ids (and seq) count this tenant's entries only, and `Last-Event-ID` resumes after one")))]
async fn event_stream(
    State(st): State<AppState>,
    auth: Authed,
    stopping: Option<Extension<CancellationToken>>,
    headers: HeaderMap,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let ctx = auth.ctx();
    let meta = st.manager.meta().clone();
    // A reconnecting EventSource continues after the last event it got.
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|n| *n >= 0);
    let from = events::start(&meta, &ctx.tenant, resumed).await?;
    let ready_id = from.position.to_string();
    let stop = stopping.map(|Extension(t)| t).unwrap_or_default();
    let hello = futures::stream::once(async move {
        Ok::<_, Infallible>(
            SseEvent::default()
                .event("ready")
                .id(ready_id.clone())
                .data(ready_id),
        )
    });
    let feed = events::feed(meta, ctx.tenant, from, stop).map(|e| {
        Ok::<_, Infallible>(
            SseEvent::default()
                .event("audit")
                .id(e.seq.to_string())
                .json_data(&e)
                .unwrap_or_else(|_| SseEvent::default().comment("unencodable event")),
        )
    });
    Ok(Sse::new(hello.chain(feed)).keep_alive(KeepAlive::default()))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/idle",
    responses((status = 200, description = "when the lifecycle policies next act: {state, last_active_ms?, on_idle, idle_timeout_secs, idle_deadline_ms?, lifetime_deadline_ms?, expires_at_ms?}; reading it is not activity"),
        (status = 404, body = super::error::ErrorBody)))]
async fn sandbox_idle(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<idle::Deadlines>> {
    let ctx = auth.ctx();
    let sid = super::sandboxes::sandbox_id(&id)?;
    let rec = st.manager.get(&ctx, &sid).await?;
    let last = st.manager.last_active_ms(&sid);
    Ok(axum::Json(idle::deadlines(
        &rec,
        last,
        stasis_core::now_ms(),
    )))
}

/// The documented API routes of the console (the live feed, the countdowns).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(event_stream))
        .routes(routes!(sandbox_idle))
}

/// The console's own routes under [`PREFIX`].
pub fn pages() -> Router<AppState> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/assets/{name}", get(asset))
        .route("/ui/login", post(login))
        .route("/ui/session", get(who))
        .route("/ui/logout", post(logout))
        .route("/ui/audit-verify", get(audit_verify))
}
