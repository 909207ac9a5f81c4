//! The E2B control plane (`E2B_API_URL=$STASIS_URL/e2b`): the routes the
//! pinned SDKs call (`spec/openapi.yml` of e2b-dev/E2B, and what the
//! released SDKs actually send), translated onto stasis's control plane.
//!
//! Every route authenticates its caller from the E2B API key
//! ([`crate::auth::api_identity`]) and checks the token's scopes as the
//! `/v1` route doing the same would ([`caller`]); the work is the
//! [`stasis_control::Manager`]'s (tenancy, audit, lifecycle); what E2B
//! names differently is [`translate`] and [`view`]; refusals are
//! [`error`]'s E2B shape.

use axum::http::{HeaderMap, Method};
use axum::routing::{delete, get, post};
use serde::de::DeserializeOwned;

use stasis_control::manager::Ctx;
use stasis_core::{Error, ErrorCode, SandboxId};

use crate::E2b;

pub mod error;
pub mod model;
mod sandboxes;
mod snapshots;
pub mod translate;
pub mod view;

use error::{bad_body, E2bResult};

pub fn router(state: E2b) -> axum::Router {
    use sandboxes as s;
    axum::Router::new()
        .route("/sandboxes", post(s::create).get(s::list))
        .route("/v2/sandboxes", post(s::create).get(s::list))
        .route("/sandboxes/metrics", get(s::metrics_many))
        .route("/sandboxes/{id}", get(s::info).delete(s::kill))
        .route("/sandboxes/{id}/connect", post(s::connect))
        .route("/v2/sandboxes/{id}/connect", post(s::connect))
        .route("/sandboxes/{id}/resume", post(s::resume))
        .route("/sandboxes/{id}/timeout", post(s::timeout))
        .route("/sandboxes/{id}/pause", post(s::pause))
        .route("/sandboxes/{id}/metrics", get(s::metrics))
        .route("/sandboxes/{id}/network", axum::routing::put(s::network))
        .route("/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/sandboxes/{id}/fork", post(snapshots::fork))
        .route("/snapshots", get(snapshots::list))
        .route("/templates/{id}", delete(snapshots::delete))
        .with_state(state)
}

/// The caller as a control-plane context, after the scope check the `/v1`
/// route `v1_template` (at `v1_path`) would make: an E2B call may do no
/// more than its token may do on `/v1`.
pub(crate) async fn caller(
    st: &E2b,
    headers: &HeaderMap,
    method: Method,
    v1_template: &str,
    v1_path: &str,
) -> E2bResult<Ctx> {
    let id = crate::auth::api_identity(st.manager.meta(), headers).await?;
    let tenant = match (&id.tenant, id.is_admin) {
        (Some(t), false) => t.clone(),
        _ => {
            return Err(Error::new(
                ErrorCode::Forbidden,
                "an admin token manages tenants and tokens; use a tenant token for sandboxes",
            )
            .into())
        }
    };
    stasis_access::scope::permit(
        id.scopes,
        id.sandbox.as_deref(),
        &method,
        v1_template,
        v1_path,
    )?;
    Ok(Ctx {
        tenant,
        actor: id.actor,
    })
}

/// A sandbox id from the path: one that cannot be a stasis id is simply
/// not found (the SDK's `kill("nonexistent")` expects `false`).
pub(crate) fn sandbox_id(s: &str) -> E2bResult<SandboxId> {
    SandboxId::parse(s).map_err(|_| Error::not_found(format!("sandbox {s} not found")).into())
}

/// A JSON object body (empty: the type's default).
pub(crate) fn body<T: DeserializeOwned + Default>(bytes: &[u8]) -> E2bResult<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(bad_body("expected a JSON object"));
    }
    serde_json::from_slice(bytes).map_err(bad_body)
}
