//! The template resource: publish a sandbox's state as the next version of
//! a named template, list templates, read one's versions, delete a version
//! or a whole template. Creating a sandbox from one is `POST /v1/sandboxes`
//! with `template` (see `sandboxes`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::{Error, SandboxId};

use super::auth::Authed;
use super::error::{ApiJson, ApiResult, ErrorBody};
use super::state::AppState;
use crate::templates::TemplateInfo;

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTemplate {
    /// 1-64 characters of `[a-z0-9._-]`, starting with a letter or digit.
    pub name: String,
    /// The running (or paused) sandbox whose memory and disk become the template.
    pub from_sandbox: String,
}

/// A template's live versions, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TemplateVersions {
    pub name: String,
    /// The version `template: "name"` starts.
    pub latest: i64,
    pub versions: Vec<TemplateInfo>,
}

fn infos(v: Vec<stasis_meta::TemplateRecord>) -> Vec<TemplateInfo> {
    v.into_iter().map(TemplateInfo::from_record).collect()
}

#[utoipa::path(post, path = "/v1/templates", request_body = CreateTemplate,
    responses((status = 201, body = TemplateInfo), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, description = "the sandbox's state holds a secret value, or it is not running", body = ErrorBody)))]
async fn create_template(
    State(st): State<AppState>,
    auth: Authed,
    ApiJson(body): ApiJson<CreateTemplate>,
) -> ApiResult<(StatusCode, axum::Json<TemplateInfo>)> {
    let ctx = auth.ctx();
    crate::templates::validate_name(&body.name, "name")?;
    let from = SandboxId::parse(&body.from_sandbox).map_err(|e| e.with_field("from_sandbox"))?;
    // Runs to its end even if the client goes away, so its stage is removed
    // and a published version is never half-recorded.
    let manager = st.manager.clone();
    let t = tokio::spawn(async move { manager.create_template(&ctx, &body.name, &from).await })
        .await
        .map_err(|e| Error::internal(format!("template task: {e}")))??;
    Ok((
        StatusCode::CREATED,
        axum::Json(TemplateInfo::from_record(t)),
    ))
}

#[utoipa::path(get, path = "/v1/templates", responses((status = 200, body = [TemplateInfo], description = "every live version of the tenant's templates, by name then version")))]
async fn list_templates(
    State(st): State<AppState>,
    auth: Authed,
) -> ApiResult<axum::Json<Vec<TemplateInfo>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(infos(st.manager.list_templates(&ctx).await?)))
}

#[utoipa::path(get, path = "/v1/templates/{name}", responses((status = 200, body = TemplateVersions), (status = 404, body = ErrorBody)))]
async fn get_template(
    State(st): State<AppState>,
    auth: Authed,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<TemplateVersions>> {
    let ctx = auth.ctx();
    let versions = infos(st.manager.template_versions(&ctx, &name).await?);
    let latest = versions.last().map(|v| v.version).unwrap_or_default();
    Ok(axum::Json(TemplateVersions {
        name,
        latest,
        versions,
    }))
}

#[utoipa::path(delete, path = "/v1/templates/{name}", responses((status = 200, body = [TemplateInfo], description = "the versions deleted"), (status = 404, body = ErrorBody)))]
async fn delete_template(
    State(st): State<AppState>,
    auth: Authed,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<Vec<TemplateInfo>>> {
    let ctx = auth.ctx();
    Ok(axum::Json(infos(
        st.manager.delete_template(&ctx, &name, None).await?,
    )))
}

#[utoipa::path(delete, path = "/v1/templates/{name}/{version}", responses((status = 200, body = [TemplateInfo], description = "the version deleted"), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn delete_template_version(
    State(st): State<AppState>,
    auth: Authed,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<axum::Json<Vec<TemplateInfo>>> {
    let ctx = auth.ctx();
    let v = version
        .parse::<i64>()
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| {
            Error::invalid(format!("version {version:?} must be a positive integer"))
                .with_field("version")
        })?;
    Ok(axum::Json(infos(
        st.manager.delete_template(&ctx, &name, Some(v)).await?,
    )))
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_template, list_templates))
        .routes(routes!(get_template, delete_template))
        .routes(routes!(delete_template_version))
}
