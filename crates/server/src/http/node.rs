//! This node's lifecycle: `GET /readyz` (no token: ready to take
//! sandboxes, false while draining) and, with an admin token,
//! `GET /v1/admin/node`, `POST /v1/admin/node/drain` and
//! `POST /v1/admin/node/undrain`. Handlers translate to the manager's
//! drain (`crate::manager::Manager::drain`).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{Error, ErrorCode};

use super::auth::AdminAuthed;
use super::error::{ApiError, ApiJson, ApiResult, ErrorBody};
use super::state::AppState;
use crate::manager::{DrainReport, DrainStatus};

/// Longest drain one request may ask for.
pub const MAX_DRAIN_SECS: u64 = 3600;
/// A drain's time when the request names none.
pub const DEFAULT_DRAIN_SECS: u64 = 60;

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct DrainBody {
    /// How long the drain may wait for sandboxes busy with a request
    /// (default 60, at most 3600). A pause once begun always finishes.
    #[serde(default)]
    pub within_secs: Option<u64>,
}

#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, description = "ready: this node takes sandboxes"),
    (status = 503, body = ErrorBody, description = "draining: send requests to another node")))]
async fn readyz(State(st): State<AppState>) -> Response {
    if st.manager.is_draining() {
        return ApiError(Error::new(ErrorCode::Unavailable, "this node is draining"))
            .into_response();
    }
    "ready".into_response()
}

#[utoipa::path(get, path = "/v1/admin/node", security(("bearer" = [])),
    responses((status = 200, body = DrainStatus), (status = 403, body = ErrorBody)))]
async fn node_status(
    State(st): State<AppState>,
    _: AdminAuthed,
) -> ApiResult<axum::Json<DrainStatus>> {
    Ok(axum::Json(st.manager.drain_status().await?))
}

#[utoipa::path(post, path = "/v1/admin/node/drain", request_body = DrainBody, security(("bearer" = [])),
    responses((status = 200, body = DrainReport), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn node_drain(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    ApiJson(body): ApiJson<DrainBody>,
) -> ApiResult<axum::Json<DrainReport>> {
    let secs = body.within_secs.unwrap_or(DEFAULT_DRAIN_SECS);
    if secs > MAX_DRAIN_SECS {
        return Err(
            Error::invalid(format!("within_secs: at most {MAX_DRAIN_SECS}"))
                .with_field("within_secs")
                .into(),
        );
    }
    let actor = format!("admin:{}", who.token_id);
    let rep = st.manager.drain(&actor, Duration::from_secs(secs)).await?;
    Ok(axum::Json(rep))
}

#[utoipa::path(post, path = "/v1/admin/node/undrain", security(("bearer" = [])),
    responses((status = 200, body = DrainStatus), (status = 403, body = ErrorBody)))]
async fn node_undrain(
    State(st): State<AppState>,
    _: AdminAuthed,
) -> ApiResult<axum::Json<DrainStatus>> {
    st.manager.undrain();
    Ok(axum::Json(st.manager.drain_status().await?))
}

/// The routes of this module (documented in the OpenAPI document).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(readyz))
        .routes(routes!(node_status))
        .routes(routes!(node_drain))
        .routes(routes!(node_undrain))
}
