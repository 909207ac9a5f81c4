//! A sandbox's network policy: read it with its egress counters, or replace
//! it at runtime (`allow` and `deny`, validated as in the manifest).

use axum::extract::{Path, State};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::manifest::NetworkPolicy;

use super::auth::Authed;
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::sandboxes::sandbox_id;
use super::state::AppState;
use crate::manager::NetworkStatus;

/// The new policy; both lists are replaced (a missing one becomes empty).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetNetwork {
    /// Host names (`pypi.org`), one-label wildcards (`*.pythonhosted.org`),
    /// addresses and networks (`10.1.0.0/16`), each with an optional `:port`.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Entries refused even when `allow` admits them.
    #[serde(default)]
    pub deny: Vec<String>,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/network",
    responses((status = 200, body = NetworkStatus), (status = 404, body = ErrorBody)))]
async fn get_network(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<NetworkStatus>> {
    let ctx = auth.ctx();
    Ok(axum::Json(
        st.manager.network(&ctx, &sandbox_id(&id)?).await?,
    ))
}

#[utoipa::path(patch, path = "/v1/sandboxes/{id}/network", request_body = SetNetwork,
    responses((status = 200, body = NetworkStatus), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn set_network(
    State(st): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SetNetwork>,
) -> ApiResult<axum::Json<NetworkStatus>> {
    let ctx = auth.ctx();
    let policy = NetworkPolicy {
        allow: body.allow,
        deny: body.deny,
    };
    Ok(axum::Json(
        st.manager
            .set_network(&ctx, &sandbox_id(&id)?, policy)
            .await?,
    ))
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_network, set_network))
}
