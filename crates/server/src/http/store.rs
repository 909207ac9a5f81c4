//! The snapshot store (admin token): `POST /v1/admin/store/verify` reads
//! back and verifies every chunk of the live snapshots (or one tenant's, or
//! one snapshot), repairs what this node's local copies can, and answers
//! what it found. Handlers translate HTTP to [`crate::scrub`] calls.

use axum::extract::State;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{Error, SnapshotId, TenantId};

use super::auth::AdminAuthed;
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::state::AppState;
use crate::scrub::{Filter, Scrubber, VerifyReport};

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct VerifyBody {
    /// Only this tenant's snapshots.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Only this snapshot (needs `tenant`).
    #[serde(default)]
    pub snapshot: Option<String>,
}

#[utoipa::path(post, path = "/v1/admin/store/verify", request_body = VerifyBody, security(("bearer" = [])),
    responses((status = 200, body = VerifyReport), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn verify(
    State(st): State<AppState>,
    AdminAuthed(who): AdminAuthed,
    ApiJson(body): ApiJson<VerifyBody>,
) -> ApiResult<axum::Json<VerifyReport>> {
    let tenant = body
        .tenant
        .as_deref()
        .map(TenantId::parse)
        .transpose()
        .map_err(|e| e.with_field("tenant"))?;
    let snapshot = body
        .snapshot
        .as_deref()
        .map(SnapshotId::parse)
        .transpose()
        .map_err(|e| e.with_field("snapshot"))?;
    if snapshot.is_some() && tenant.is_none() {
        return Err(Error::invalid("snapshot: name its tenant too")
            .with_field("tenant")
            .into());
    }
    let filter = Filter { tenant, snapshot };
    let actor = format!("admin:{}", who.token_id);
    let rep = Scrubber::for_manager(&st.manager)
        .verify(&filter, &actor)
        .await?;
    Ok(axum::Json(rep))
}

/// The routes of this module (documented in the OpenAPI document).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(verify))
}
