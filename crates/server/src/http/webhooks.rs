//! A tenant's lifecycle webhooks: register an endpoint (its signing secret
//! is shown once), list, delete, and read its dead letters. Handlers
//! translate HTTP to [`crate::webhooks`] calls.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::webhooks::{CreateWebhook, NewWebhook, WebhookInfo};

use super::auth::Authed;
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::state::AppState;

#[utoipa::path(post, path = "/v1/webhooks", request_body = CreateWebhook,
    responses((status = 201, body = NewWebhook, description = "the endpoint and its signing secret, shown only here"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody, description = "a host the operator does not allow"), (status = 409, body = ErrorBody)))]
async fn create_webhook(
    State(st): State<AppState>,
    Authed(ctx): Authed,
    ApiJson(body): ApiJson<CreateWebhook>,
) -> ApiResult<(StatusCode, axum::Json<NewWebhook>)> {
    let w = st.webhooks.create(&ctx.tenant, &ctx.actor, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(w)))
}

#[utoipa::path(get, path = "/v1/webhooks",
    responses((status = 200, body = Vec<WebhookInfo>, description = "this tenant's endpoints with delivery counts")))]
async fn list_webhooks(
    State(st): State<AppState>,
    Authed(ctx): Authed,
) -> ApiResult<axum::Json<Vec<WebhookInfo>>> {
    Ok(axum::Json(st.webhooks.list(&ctx.tenant).await?))
}

#[utoipa::path(delete, path = "/v1/webhooks/{id}",
    responses((status = 204, description = "deleted"), (status = 404, body = ErrorBody)))]
async fn delete_webhook(
    State(st): State<AppState>,
    Authed(ctx): Authed,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    st.webhooks.delete(&ctx.tenant, &ctx.actor, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/webhooks/{id}/dead-letters",
    responses((status = 200, description = "events the endpoint never acknowledged after every retry"), (status = 404, body = ErrorBody)))]
async fn dead_letters(
    State(st): State<AppState>,
    Authed(ctx): Authed,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Vec<stasis_meta::webhooks::DeadLetter>>> {
    Ok(axum::Json(
        st.webhooks.dead_letters(&ctx.tenant, &id).await?,
    ))
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_webhook, list_webhooks))
        .routes(routes!(delete_webhook))
        .routes(routes!(dead_letters))
}
