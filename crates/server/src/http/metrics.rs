//! The HTTP side of the daemon's metrics ([`crate::metrics`]): the
//! unauthenticated `GET /metrics` scrape and the middleware counting every
//! request by method, route template and status.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;
use crate::metrics::Metrics;

/// `GET /metrics`.
pub async fn handler(State(st): State<AppState>) -> Response {
    if let Some(e) = st.manager.egress() {
        st.manager.metrics().egress(e.totals());
    }
    let held = st.manager.standby_all();
    let bytes = held.iter().map(|(_, s)| s.ram_bytes).sum();
    st.manager.metrics().set_standby(held.len(), bytes);
    match st
        .manager
        .metrics()
        .render(st.manager.meta(), st.manager.snapshots())
        .await
    {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
            text,
        )
            .into_response(),
        Err(e) => ApiError(e).into_response(),
    }
}

/// Middleware counting every request by method, route template and status.
pub async fn track(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method: &'static str = match req.method().as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    };
    let start = Instant::now();
    let resp = next.run(req).await;
    metrics.http_request(
        method,
        &route,
        resp.status().as_u16(),
        start.elapsed().as_secs_f64(),
    );
    resp
}
