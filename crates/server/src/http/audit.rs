//! The audit log: a tenant reads its entries; verifying the hash chain,
//! which runs through every tenant's entries, needs an admin token.

use axum::extract::State;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{AdminAuthed, Authed};
use super::error::{ApiQuery, ApiResult};
use super::state::AppState;

#[derive(Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/v1/audit", params(AuditQuery), responses((status = 200, description = "audit entries, oldest first")))]
async fn audit_list(
    State(st): State<AppState>,
    auth: Authed,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<axum::Json<Vec<stasis_meta::AuditEntry>>> {
    let ctx = auth.ctx();
    let limit = q.limit.unwrap_or(1000).clamp(1, 100_000);
    Ok(axum::Json(
        st.manager
            .meta()
            .audit_list(Some(&ctx.tenant), q.target.as_deref(), limit)
            .await?,
    ))
}

/// The hash chain runs through every tenant's entries, so verifying it (and
/// the entry count it reports) is for the operator: admin token.
#[utoipa::path(get, path = "/v1/audit/verify", security(("bearer" = [])), responses((status = 200, description = "whether the hash chain is intact"), (status = 403, description = "not an admin token")))]
async fn audit_verify(
    State(st): State<AppState>,
    _admin: AdminAuthed,
) -> ApiResult<axum::Json<stasis_meta::AuditVerification>> {
    Ok(axum::Json(st.manager.meta().audit_verify().await?))
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(audit_list))
        .routes(routes!(audit_verify))
}
