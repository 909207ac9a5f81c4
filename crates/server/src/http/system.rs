//! The daemon itself: `GET /healthz` (no token) and `GET /v1/doctor` (what
//! this machine and daemon support).

use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::state::AppState;

#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "daemon is up")))]
async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(get, path = "/v1/doctor", responses((status = 200, description = "what this machine and daemon support")))]
async fn doctor(State(st): State<AppState>) -> axum::Json<serde_json::Value> {
    let mut v = (*st.doctor).clone();
    v["backends"] = serde_json::to_value(st.manager.capabilities()).unwrap_or_default();
    axum::Json(v)
}

/// The routes of this module (documented in the OpenAPI document).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(doctor))
}
