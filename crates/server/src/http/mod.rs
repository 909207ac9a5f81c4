//! The HTTP edge of the daemon: handlers only translate between HTTP and
//! domain calls (the [`crate::manager::Manager`], [`crate::runs`],
//! [`crate::tenancy`]); every error leaves as `{"error": {"code", "message",
//! "field"?}}` with the status its code maps to. Domain modules never import
//! this one.
//!
//! Each resource module declares its routes once, with their OpenAPI
//! description (utoipa-axum's `routes!`); [`router`] assembles them, the
//! OpenAPI document and the layers every request goes through: JSON errors,
//! the body limit, metrics, authentication, then forwarding to the node that
//! owns the sandbox.

pub mod attach;
pub mod audit;
pub mod auth;
pub mod console;
pub mod e2b_ports;
pub mod error;
pub mod exec;
pub mod files;
pub mod files_more;
pub mod forward;
pub mod governance;
pub mod images;
pub mod limit;
pub mod metrics;
pub mod network;
pub mod node;
pub mod ports;
pub mod ports_host;
pub mod runs;
pub mod sandboxes;
pub mod sessions;
pub mod snapshots;
pub mod state;
pub mod store;
pub mod system;
pub mod templates;
pub mod tenants;
pub mod tokens;
pub mod webhooks;

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

pub use error::{ApiError, ApiResult, ErrorBody, ErrorDetail};
pub use state::AppState;

/// Adds the bearer scheme to the document and requires it on every `/v1` route.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("stk_ token")
                    .description(Some(
                        "API token: `stk_` + 43 base64url characters. Tenant tokens use the sandbox, \
                         snapshot, run, token and audit routes within their scopes (read, exec, \
                         approve, manage; 403 outside them) and, if limited to one sandbox, only \
                         `/v1/sandboxes/{id}/...` of that sandbox; admin tokens only `/v1/admin/...`. \
                         An expired token is answered 401.",
                    ))
                    .build(),
            ),
        );
        doc.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
        // The public routes need no token.
        for (path, item) in doc.paths.paths.iter_mut() {
            if auth::PUBLIC_PATHS.contains(&path.as_str()) || path.starts_with(auth::SIGNED_PREFIX)
            {
                for op in [
                    &mut item.get,
                    &mut item.post,
                    &mut item.put,
                    &mut item.delete,
                    &mut item.patch,
                ]
                .into_iter()
                .flatten()
                {
                    op.security = Some(vec![SecurityRequirement::default()]);
                }
            }
        }
    }
}

/// The document's frame; the paths and their schemas come from the resources.
#[derive(OpenApi)]
#[openapi(info(
    title = "stasis",
    description = "Stateful sandboxes for AI agents: create, exec, pause, resume, snapshot, restore, fork."
))]
struct ApiDoc;

/// Every resource's routes, with the OpenAPI description of the documented ones.
fn resources() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(system::routes())
        .merge(sandboxes::routes())
        .merge(exec::routes())
        .merge(files::routes())
        .merge(sessions::routes())
        .merge(attach::routes())
        .merge(network::routes())
        .merge(snapshots::routes())
        .merge(templates::routes())
        .merge(audit::routes())
        .merge(console::routes())
        .merge(tenants::routes())
        .merge(tokens::routes())
        .merge(webhooks::routes())
        .merge(runs::routes())
        .merge(ports::routes())
        .merge(images::routes())
        .merge(governance::routes())
        .merge(store::routes())
        .merge(node::routes())
}

/// The OpenAPI document served at `/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, doc) = resources().split_for_parts();
    finish(doc)
}

/// The assembled document as served: the bearer scheme, and every operation
/// with a `tags` list (empty), as the document has always had.
fn finish(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    BearerAuth.modify(&mut doc);
    for item in doc.paths.paths.values_mut() {
        for op in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            op.tags.get_or_insert_with(Vec::new);
        }
    }
    doc
}

pub fn router(state: AppState) -> Router {
    // JSON and other buffered bodies; file uploads stream past it (their
    // own limit is the file limit), so a generous file limit does not let
    // every body be that large.
    let body_limit =
        state.manager.config().max_file_bytes.min(64 * 1024 * 1024) as usize + 64 * 1024;
    let counters = state.manager.metrics().clone();
    let (routes, doc) = resources().split_for_parts();
    let doc = axum::Json(finish(doc));
    // The E2B edge authenticates its own callers (E2B API keys, envd
    // access tokens): `auth::authenticate` lets its prefix through.
    let e2b = stasis_e2b::E2b::new(
        state.manager.clone(),
        state
            .ports
            .config()
            .domain
            .as_ref()
            .map(|d| d.name().to_string()),
    )
    .with_forward(std::sync::Arc::new(e2b_ports::Forward(state.clone())));
    routes
        .nest_service(stasis_e2b::PREFIX, stasis_e2b::router(e2b))
        .route("/metrics", get(metrics::handler))
        .merge(console::pages())
        .route(
            "/openapi.json",
            get(move || std::future::ready(doc.clone())),
        )
        .fallback(error::fallback)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::forward_layer,
        ))
        // Outermost: authenticate before anything, forwarding included.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        // A port host (ports domain) is served by the port proxy alone: it
        // never reaches the console or the API.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ports_host::host_layer,
        ))
        // Outside authentication, so refused requests are counted too.
        .layer(axum::middleware::from_fn_with_state(
            counters,
            metrics::track,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::map_response(error::json_errors))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation has an operationId of its own: client generators
    /// (openapi-typescript, openapi-generator) refuse duplicates.
    #[test]
    fn openapi_operation_ids_are_unique() {
        let doc = openapi();
        let mut seen = std::collections::BTreeMap::new();
        for (path, item) in &doc.paths.paths {
            for (method, op) in [
                ("get", &item.get),
                ("put", &item.put),
                ("post", &item.post),
                ("delete", &item.delete),
                ("patch", &item.patch),
            ] {
                let Some(op) = op else { continue };
                let id = op
                    .operation_id
                    .clone()
                    .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
                if let Some(other) = seen.insert(id.clone(), format!("{method} {path}")) {
                    panic!("operationId {id} is used by {other} and {method} {path}");
                }
            }
        }
        assert!(seen.contains_key("proxy_token_get"));
        assert!(seen.contains_key("proxy_signed_patch"));
    }

    /// The documented operations, exactly: every route the daemon serves.
    #[test]
    fn openapi_documents_every_listed_operation_once() {
        let doc = openapi();
        let mut ops = Vec::new();
        for (path, item) in &doc.paths.paths {
            for (method, op) in [
                ("get", &item.get),
                ("put", &item.put),
                ("post", &item.post),
                ("delete", &item.delete),
                ("patch", &item.patch),
            ] {
                if let Some(op) = op {
                    assert_eq!(op.tags, Some(vec![]), "{method} {path}");
                    ops.push(format!("{method} {path}"));
                }
            }
        }
        ops.sort();
        let mut want = vec![
            "get /healthz",
            "get /readyz",
            "get /v1/admin/node",
            "post /v1/admin/node/drain",
            "post /v1/admin/node/undrain",
            "get /v1/doctor",
            "post /v1/sandboxes",
            "get /v1/sandboxes",
            "get /v1/sandboxes/{id}",
            "delete /v1/sandboxes/{id}",
            "post /v1/sandboxes/{id}/exec",
            "post /v1/sandboxes/{id}/exec/stream",
            "put /v1/sandboxes/{id}/files",
            "get /v1/sandboxes/{id}/files",
            "get /v1/sandboxes/{id}/files/list",
            "delete /v1/sandboxes/{id}/files",
            "get /v1/sandboxes/{id}/files/stat",
            "get /v1/sandboxes/{id}/files/exists",
            "post /v1/sandboxes/{id}/files/mkdir",
            "post /v1/sandboxes/{id}/files/rename",
            "get /v1/sandboxes/{id}/files/watch",
            "patch /v1/sandboxes/{id}/lifecycle",
            "post /v1/sandboxes/{id}/sessions",
            "get /v1/sandboxes/{id}/sessions",
            "post /v1/sandboxes/{id}/sessions/{session}/input",
            "get /v1/sandboxes/{id}/sessions/{session}/output",
            "delete /v1/sandboxes/{id}/sessions/{session}",
            "post /v1/sandboxes/{id}/sessions/{session}/resize",
            "get /v1/sandboxes/{id}/sessions/{session}/attach",
            "post /v1/sandboxes/{id}/pause",
            "post /v1/sandboxes/{id}/resume",
            "post /v1/sandboxes/{id}/evict",
            "get /v1/sandboxes/{id}/usage",
            "post /v1/sandboxes/{id}/snapshots",
            "post /v1/sandboxes/{id}/fork",
            "get /v1/images",
            "get /v1/images/{name}",
            "delete /v1/images/{name}",
            "post /v1/images/import",
            "post /v1/images/build",
            "post /v1/admin/images",
            "post /v1/admin/images/gc",
            "get /v1/sandboxes/{id}/outputs",
            "get /v1/sandboxes/{id}/network",
            "patch /v1/sandboxes/{id}/network",
            "get /v1/snapshots",
            "get /v1/snapshots/{id}",
            "delete /v1/snapshots/{id}",
            "post /v1/snapshots/{id}/restore",
            "get /v1/snapshots/{id}/export",
            "post /v1/snapshots/import",
            "post /v1/store/gc",
            "get /v1/store/stats",
            "post /v1/templates",
            "get /v1/templates",
            "get /v1/templates/{name}",
            "delete /v1/templates/{name}",
            "delete /v1/templates/{name}/{version}",
            "get /v1/audit",
            "get /v1/audit/verify",
            "post /v1/admin/tenants",
            "get /v1/admin/tenants",
            "post /v1/admin/tenants/{tenant}/tokens",
            "get /v1/admin/tenants/{tenant}/tokens",
            "delete /v1/admin/tokens/{token}",
            "post /v1/admin/tokens/{token}/rotate",
            "post /v1/tokens",
            "get /v1/tokens",
            "delete /v1/tokens/{token}",
            "post /v1/tokens/{token}/rotate",
            "post /v1/webhooks",
            "get /v1/webhooks",
            "delete /v1/webhooks/{id}",
            "get /v1/webhooks/{id}/dead-letters",
            "get /v1/admin/tenants/{tenant}/secrets",
            "put /v1/admin/tenants/{tenant}/secrets/{name}",
            "delete /v1/admin/tenants/{tenant}/secrets/{name}",
            "get /v1/admin/master-keys",
            "post /v1/admin/master-keys/rotate",
            "post /v1/admin/master-keys/{fingerprint}/retire",
            "post /v1/admin/store/verify",
            "post /v1/admin/tenants/{tenant}/rotate-key",
            "post /v1/admin/tenants/{tenant}/erase",
            "put /v1/admin/tenants/{tenant}/regions",
            "post /v1/runs",
            "get /v1/runs",
            "get /v1/runs/{id}",
            "post /v1/runs/{id}/steps",
            "post /v1/runs/{id}/tool-calls",
            "post /v1/runs/{id}/approvals/{call}/approve",
            "post /v1/runs/{id}/approvals/{call}/reject",
            "get /v1/runs/{id}/state",
            "post /v1/runs/resume",
            "post /v1/sandboxes/{id}/ports/{port}/urls",
            "delete /v1/sandboxes/{id}/ports/{port}/urls",
            "delete /v1/sandboxes/{id}/ports/{port}/urls/{url_id}",
            "get /v1/sandboxes/{id}/ports/{port}/{path}",
            "post /v1/sandboxes/{id}/ports/{port}/{path}",
            "put /v1/sandboxes/{id}/ports/{port}/{path}",
            "delete /v1/sandboxes/{id}/ports/{port}/{path}",
            "patch /v1/sandboxes/{id}/ports/{port}/{path}",
            "get /v1/events",
            "get /v1/sandboxes/{id}/idle",
            "get /p/{token}/{path}",
            "post /p/{token}/{path}",
            "put /p/{token}/{path}",
            "delete /p/{token}/{path}",
            "patch /p/{token}/{path}",
        ];
        want.sort();
        assert_eq!(ops, want);
        // Public routes need no token; every other operation inherits it.
        let healthz = doc.paths.paths["/healthz"].get.as_ref().unwrap();
        assert!(
            healthz.security
                == Some(vec![
                    utoipa::openapi::security::SecurityRequirement::default()
                ])
        );
        assert!(doc.security.is_some());
        let signed = doc.paths.paths["/p/{token}/{path}"].get.as_ref().unwrap();
        assert!(
            signed.security
                == Some(vec![
                    utoipa::openapi::security::SecurityRequirement::default()
                ])
        );
        let schemas = &doc.components.as_ref().unwrap().schemas;
        for s in [
            "ErrorBody",
            "Sandbox",
            "ExecStreamLine",
            "NewToken",
            "TemplateInfo",
            "PortUrl",
        ] {
            assert!(schemas.contains_key(s), "{s}");
        }
    }
}
