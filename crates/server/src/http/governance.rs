//! Key governance and regions (admin token): master-key rotation and
//! retirement, tenant data-key rotation, crypto-erasure, region pinning.
//! Handlers translate HTTP to [`crate::governance`] calls.

use axum::extract::{Path, State};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{Error, TenantId};
use stasis_store::MasterKey;

use super::auth::AdminAuthed;
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::state::AppState;
use crate::governance::{self as gov, EraseOutcome, RetireOutcome, RotateOutcome};

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateMasterBody {
    /// The new master key, 64 hex characters. Every node must hold it too
    /// (in its key file) before the old key is retired.
    pub key: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EraseBody {
    /// The tenant id again: erasure cannot be undone.
    pub confirm: String,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegionsBody {
    /// Regions the tenant's sandboxes and snapshots may live in; null or
    /// empty: any region.
    #[serde(default)]
    pub regions: Option<Vec<String>>,
}

fn tenant_id(s: &str) -> ApiResult<TenantId> {
    Ok(TenantId::parse(s)?)
}

#[utoipa::path(get, path = "/v1/admin/master-keys", security(("bearer" = [])),
    responses((status = 200, description = "master-key generations and which this node holds"), (status = 403, body = ErrorBody)))]
async fn master_keys(
    State(st): State<AppState>,
    AdminAuthed(_who): AdminAuthed,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let m = &st.manager;
    Ok(axum::Json(
        gov::master_key_status(m.meta(), m.snapshots().store()).await?,
    ))
}

#[utoipa::path(post, path = "/v1/admin/master-keys/rotate", request_body = RotateMasterBody, security(("bearer" = [])),
    responses((status = 200, body = RotateOutcome), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn rotate_master(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    ApiJson(body): ApiJson<RotateMasterBody>,
) -> ApiResult<axum::Json<RotateOutcome>> {
    let key = MasterKey::from_hex(&body.key).map_err(|e| e.with_field("key"))?;
    let m = &st.manager;
    Ok(axum::Json(
        gov::rotate_master_key(m.meta(), m.snapshots().store(), &who, key).await?,
    ))
}

#[utoipa::path(post, path = "/v1/admin/master-keys/{fingerprint}/retire", security(("bearer" = [])),
    responses((status = 200, body = RetireOutcome), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn retire_master(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(fp): Path<String>,
) -> ApiResult<axum::Json<RetireOutcome>> {
    if fp.len() != 16 || !fp.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::invalid("fingerprint: 16 hex characters").into());
    }
    let m = &st.manager;
    Ok(axum::Json(
        gov::retire_master_key(m.meta(), m.snapshots().store(), &who, &fp).await?,
    ))
}

#[utoipa::path(post, path = "/v1/admin/tenants/{tenant}/rotate-key", security(("bearer" = [])),
    responses((status = 200, description = "the tenant's new data-key generation"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn rotate_tenant_key(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(tenant): Path<String>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let t = tenant_id(&tenant)?;
    let m = &st.manager;
    let gen = gov::rotate_tenant_key(m.meta(), m.snapshots().store(), &who, &t).await?;
    Ok(axum::Json(
        serde_json::json!({"tenant": t, "generation": gen}),
    ))
}

#[utoipa::path(post, path = "/v1/admin/tenants/{tenant}/erase", request_body = EraseBody, security(("bearer" = [])),
    responses((status = 200, body = EraseOutcome), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn erase_tenant(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(tenant): Path<String>,
    ApiJson(body): ApiJson<EraseBody>,
) -> ApiResult<axum::Json<EraseOutcome>> {
    let t = tenant_id(&tenant)?;
    if body.confirm != t.as_str() {
        return Err(Error::invalid("confirm: must repeat the tenant id")
            .with_field("confirm")
            .into());
    }
    Ok(axum::Json(gov::erase_tenant(&st.manager, &who, &t).await?))
}

#[utoipa::path(put, path = "/v1/admin/tenants/{tenant}/regions", request_body = RegionsBody, security(("bearer" = [])),
    responses((status = 200, description = "the tenant's regions"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn set_regions(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    Path(tenant): Path<String>,
    ApiJson(body): ApiJson<RegionsBody>,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let t = tenant_id(&tenant)?;
    let r = gov::set_regions(st.manager.meta(), &who, &t, body.regions).await?;
    Ok(axum::Json(serde_json::json!({"tenant": t, "regions": r})))
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(master_keys))
        .routes(routes!(rotate_master))
        .routes(routes!(retire_master))
        .routes(routes!(rotate_tenant_key))
        .routes(routes!(erase_tenant))
        .routes(routes!(set_regions))
}
