//! Administration (admin token): tenants, their tokens and their secrets.
//! Handlers translate HTTP to [`crate::tenancy`] calls.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::TenantId;

use super::auth::AdminAuthed;
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::state::AppState;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    /// Tenant id (`[A-Za-z0-9_-]`, up to 64); default: a generated `t-...`.
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
}

/// A token an admin mints for a tenant (same fields as a tenant's own mint).
pub use crate::tokens::TokenRequest as CreateTokenBody;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretBody {
    /// The secret's value; stored sealed, never shown again.
    pub value: String,
}

fn tenant_id(s: &str) -> ApiResult<TenantId> {
    Ok(TenantId::parse(s)?)
}

#[utoipa::path(post, path = "/v1/admin/tenants", request_body = CreateTenantBody, security(("bearer" = [])),
    responses((status = 201, description = "tenant created"), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn admin_create_tenant(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    ApiJson(body): ApiJson<CreateTenantBody>,
) -> ApiResult<(StatusCode, axum::Json<stasis_meta::Tenant>)> {
    let t = crate::tenancy::create_tenant(st.manager.meta(), &who, body.id.as_deref(), &body.name)
        .await?;
    Ok((StatusCode::CREATED, axum::Json(t)))
}

#[utoipa::path(get, path = "/v1/admin/tenants", security(("bearer" = [])),
    responses((status = 200, description = "all tenants"), (status = 403, body = ErrorBody)))]
async fn admin_list_tenants(
    State(st): State<AppState>,
    AdminAuthed(_who): AdminAuthed,
) -> ApiResult<axum::Json<Vec<stasis_meta::Tenant>>> {
    Ok(axum::Json(st.manager.meta().list_tenants().await?))
}

#[utoipa::path(post, path = "/v1/admin/tenants/{tenant}/tokens", request_body = CreateTokenBody, security(("bearer" = [])),
    responses((status = 201, body = crate::tokens::NewToken, description = "the token, shown only in this answer"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_create_token(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(tenant): Path<String>,
    ApiJson(body): ApiJson<CreateTokenBody>,
) -> ApiResult<(StatusCode, axum::Json<crate::tokens::NewToken>)> {
    let t = tenant_id(&tenant)?;
    let tok = crate::tokens::create(st.manager.meta(), &who, &t, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(tok)))
}

#[utoipa::path(get, path = "/v1/admin/tenants/{tenant}/tokens", security(("bearer" = [])),
    responses((status = 200, description = "the tenant's tokens (never their text)"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_list_tokens(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(tenant): Path<String>,
) -> ApiResult<axum::Json<Vec<stasis_meta::TokenRecord>>> {
    let t = tenant_id(&tenant)?;
    Ok(axum::Json(
        crate::tokens::list(st.manager.meta(), &who, &t).await?,
    ))
}

#[utoipa::path(delete, path = "/v1/admin/tokens/{token}", security(("bearer" = [])),
    responses((status = 200, description = "the revoked token's record"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn admin_revoke_token(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(token): Path<String>,
) -> ApiResult<axum::Json<stasis_meta::TokenRecord>> {
    Ok(axum::Json(
        crate::tokens::revoke(st.manager.meta(), &who, &token).await?,
    ))
}

#[utoipa::path(post, path = "/v1/admin/tokens/{token}/rotate", request_body = crate::tokens::RotateRequest, security(("bearer" = [])),
    responses((status = 201, body = crate::tokens::NewToken, description = "the new token; the old one stays valid for the overlap"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn admin_rotate_token(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(token): Path<String>,
    ApiJson(body): ApiJson<crate::tokens::RotateRequest>,
) -> ApiResult<(StatusCode, axum::Json<crate::tokens::NewToken>)> {
    let tok = crate::tokens::rotate(st.manager.meta(), &who, &token, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(tok)))
}

#[utoipa::path(get, path = "/v1/admin/tenants/{tenant}/secrets", security(("bearer" = [])),
    responses((status = 200, description = "names of the tenant's secrets (never values)"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_list_secrets(
    State(st): State<AppState>,
    AdminAuthed(_who): AdminAuthed,
    Path(tenant): Path<String>,
) -> ApiResult<axum::Json<Vec<String>>> {
    let t = tenant_id(&tenant)?;
    Ok(axum::Json(
        crate::tenancy::secret_names(st.manager.meta(), &t).await?,
    ))
}

#[utoipa::path(put, path = "/v1/admin/tenants/{tenant}/secrets/{name}", request_body = SecretBody, security(("bearer" = [])),
    responses((status = 204, description = "secret stored (sealed)"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_set_secret(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path((tenant, name)): Path<(String, String)>,
    ApiJson(body): ApiJson<SecretBody>,
) -> ApiResult<StatusCode> {
    let t = tenant_id(&tenant)?;
    crate::tenancy::set_secret(
        st.manager.meta(),
        st.manager.snapshots().store(),
        &who,
        &t,
        &name,
        &body.value,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/admin/tenants/{tenant}/secrets/{name}", security(("bearer" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn admin_delete_secret(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path((tenant, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let t = tenant_id(&tenant)?;
    crate::tenancy::delete_secret(st.manager.meta(), &who, &t, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(admin_create_tenant, admin_list_tenants))
        .routes(routes!(admin_create_token, admin_list_tokens))
        .routes(routes!(admin_revoke_token))
        .routes(routes!(admin_rotate_token))
        .routes(routes!(admin_list_secrets))
        .routes(routes!(admin_set_secret, admin_delete_secret))
}
