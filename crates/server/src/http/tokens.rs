//! A tenant's own API tokens (a tenant token with the `manage` scope):
//! mint scoped, expiring or per-sandbox tokens, rotate with an overlap,
//! revoke, list. Handlers translate HTTP to [`crate::tokens`] calls.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::tokens::{NewToken, RotateRequest, TokenRequest};

use super::auth::TenantIdentity;
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::state::AppState;

#[utoipa::path(post, path = "/v1/tokens", request_body = TokenRequest,
    responses((status = 201, body = NewToken, description = "the token, shown only in this answer"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn create_token(
    State(st): State<AppState>,
    TenantIdentity(who): TenantIdentity,
    ApiJson(body): ApiJson<TokenRequest>,
) -> ApiResult<(StatusCode, axum::Json<NewToken>)> {
    let tenant = who.tenant.clone().expect("tenant token");
    let tok = crate::tokens::create(st.manager.meta(), &who, &tenant, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(tok)))
}

#[utoipa::path(get, path = "/v1/tokens",
    responses((status = 200, description = "this tenant's tokens (never their text)"), (status = 403, body = ErrorBody)))]
async fn list_tokens(
    State(st): State<AppState>,
    TenantIdentity(who): TenantIdentity,
) -> ApiResult<axum::Json<Vec<stasis_meta::TokenRecord>>> {
    let tenant = who.tenant.clone().expect("tenant token");
    Ok(axum::Json(
        crate::tokens::list(st.manager.meta(), &who, &tenant).await?,
    ))
}

#[utoipa::path(delete, path = "/v1/tokens/{token}",
    responses((status = 200, description = "the revoked token's record"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn revoke_token(
    State(st): State<AppState>,
    TenantIdentity(who): TenantIdentity,
    Path(token): Path<String>,
) -> ApiResult<axum::Json<stasis_meta::TokenRecord>> {
    Ok(axum::Json(
        crate::tokens::revoke(st.manager.meta(), &who, &token).await?,
    ))
}

#[utoipa::path(post, path = "/v1/tokens/{token}/rotate", request_body = RotateRequest,
    responses((status = 201, body = NewToken, description = "the new token; the old one stays valid for the overlap"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn rotate_token(
    State(st): State<AppState>,
    TenantIdentity(who): TenantIdentity,
    Path(token): Path<String>,
    ApiJson(body): ApiJson<RotateRequest>,
) -> ApiResult<(StatusCode, axum::Json<NewToken>)> {
    let tok = crate::tokens::rotate(st.manager.meta(), &who, &token, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(tok)))
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_token, list_tokens))
        .routes(routes!(revoke_token))
        .routes(routes!(rotate_token))
}
