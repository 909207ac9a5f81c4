//! Sandboxes: create, connect, info, list, kill, timeout, pause, network,
//! metrics. Each handler authenticates, translates and calls the manager.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use stasis_control::manager::Ctx;
use stasis_core::{Error, ErrorCode, Manifest, SandboxId, SandboxState};
use stasis_meta::{Labels, ListFilter, SandboxRecord};

use super::error::{unsupported, E2bError, E2bResult};
use super::model::{Connect, Created, Metric, NetworkConfig, NewSandbox, Pause, Timeout};
use super::translate::{self, Source, CLIENT_ID, ENVD_VERSION};
use super::view::{self, ListQuery};
use super::{body, caller, sandbox_id};
use crate::E2b;

fn v1(id: &SandboxId, rest: &str) -> String {
    format!("/v1/sandboxes/{id}{rest}")
}

/// What create, connect and fork answer for `rec`.
pub(crate) async fn created(
    st: &E2b,
    ctx: &Ctx,
    headers: &HeaderMap,
    rec: &SandboxRecord,
    labels: &Labels,
) -> E2bResult<Created> {
    let who = crate::auth::api_identity(st.manager.meta(), headers).await?;
    let key = st
        .envd_key
        .get(st.manager.meta(), st.manager.snapshots().store())
        .await?;
    let token = crate::auth::envd_token(key, &who, &ctx.tenant, rec.id.as_str());
    Ok(Created {
        sandbox_id: rec.id.to_string(),
        template_id: view::detail(rec, labels, None).template_id,
        client_id: CLIENT_ID.into(),
        envd_version: ENVD_VERSION.into(),
        envd_access_token: token.clone(),
        traffic_access_token: token,
        domain: st.ports_domain.clone(),
        alias: None,
    })
}

/// A live sandbox of the caller's (destroyed ones are "not found" to E2B).
async fn live(st: &E2b, ctx: &Ctx, id: &SandboxId) -> E2bResult<SandboxRecord> {
    let rec = st.manager.get(ctx, id).await?;
    if view::state_of(rec.state).is_none() {
        return Err(Error::not_found(format!("sandbox {id} not found")).into());
    }
    Ok(rec)
}

/// The caller's live sandbox `id`, for a route that does what the `/v1`
/// route `method /v1/sandboxes/{id}<rest>` does (its scope is checked).
pub(crate) async fn sandbox_call(
    st: &E2b,
    headers: &HeaderMap,
    id: &str,
    method: Method,
    rest: &str,
) -> E2bResult<(SandboxId, Ctx, SandboxRecord)> {
    let sid = sandbox_id(id)?;
    let template = format!("/v1/sandboxes/{{id}}{rest}");
    let ctx = caller(st, headers, method, &template, &v1(&sid, rest)).await?;
    let rec = live(st, &ctx, &sid).await?;
    Ok((sid, ctx, rec))
}

pub(super) async fn create(
    State(st): State<E2b>,
    headers: HeaderMap,
    bytes: Bytes,
) -> E2bResult<(StatusCode, Json<Created>)> {
    let ctx = caller(
        &st,
        &headers,
        Method::POST,
        "/v1/sandboxes",
        "/v1/sandboxes",
    )
    .await?;
    let b: NewSandbox = serde_json::from_slice(&bytes).map_err(super::error::bad_body)?;
    let labels = translate::labels(&b)?;
    let m = st.manager.clone();
    // The start runs to its end even if the client goes away (as on /v1).
    let c = ctx.clone();
    let rec = tokio::spawn(async move { start(&m, &c, &b).await })
        .await
        .map_err(|e| Error::internal(format!("create task: {e}")))??;
    st.manager.set_labels(&rec.id, &labels).await?;
    let out = created(&st, &ctx, &headers, &rec, &labels).await?;
    Ok((StatusCode::CREATED, Json(out)))
}

/// Start the sandbox the template id names, under the request's settings.
async fn start(m: &stasis_control::Manager, ctx: &Ctx, b: &NewSandbox) -> E2bResult<SandboxRecord> {
    match translate::source_of(&b.template_id)? {
        Source::Image(Some(image)) => {
            // The code interpreter: its server (the image's command) starts
            // with the sandbox.
            let base = Manifest {
                image: Some(image),
                autostart: true,
                ..Default::default()
            };
            Ok(m.create(ctx, translate::manifest(base, b)?).await?)
        }
        Source::Image(None) => {
            let base = match base_image(m, ctx).await {
                Some(root) => e2b_user(
                    Manifest {
                        image: root.image,
                        ..Default::default()
                    },
                    root.has_user,
                ),
                None => Manifest::default(),
            };
            Ok(m.create(ctx, translate::manifest(base, b)?).await?)
        }
        Source::Snapshot(snap) => {
            let info = m.get_snapshot(ctx, &snap).await.map_err(not_a_template)?;
            let manifest = translate::manifest(info.manifest, b)?;
            Ok(m.restore(ctx, &snap, Some(manifest)).await?)
        }
        Source::Named(name) => {
            let (base, version) = match name.rsplit_once(':') {
                Some((n, v)) if v.parse::<i64>().is_ok() => (n, v.parse::<i64>().ok()),
                _ => (name.as_str(), None),
            };
            let versions = match m.template_versions(ctx, base).await {
                Ok(v) => v,
                Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::InvalidArgument) => {
                    Vec::new()
                }
                Err(e) => return Err(e.into()),
            };
            let t = versions
                .iter()
                .filter(|t| version.is_none_or(|v| t.version == v))
                .max_by_key(|t| t.version);
            match t {
                Some(t) => {
                    let info = m.get_snapshot(ctx, &t.snapshot).await?;
                    let manifest = translate::manifest(info.manifest, b)?;
                    let reference = format!("{}:{}", t.name, t.version);
                    Ok(m.create_from_template(ctx, &reference, Some(manifest))
                        .await?)
                }
                None => {
                    let base = Manifest {
                        image: Some(name.clone()),
                        ..Default::default()
                    };
                    Ok(m.create(ctx, translate::manifest(base, b)?)
                        .await
                        .map_err(not_a_template)?)
                }
            }
        }
    }
}

/// The root E2B's `base` runs on.
struct BaseRoot {
    /// The image to name in the manifest (None: the backend's default).
    image: Option<String>,
    /// Whether that root is stasis-base, which has E2B's user `user`.
    has_user: bool,
}

/// E2B's `base`: on the process backend the stasis base image
/// (`stasis-base:bookworm`, Debian with Python) when this daemon has it,
/// else the backend's default root (the host's, without E2B's user); a
/// microVM's default guest image is that same stasis-base root filesystem.
async fn base_image(m: &stasis_control::Manager, ctx: &Ctx) -> Option<BaseRoot> {
    if m.config().default_backend != stasis_core::BackendKind::Process {
        return Some(BaseRoot {
            image: None,
            has_user: true,
        });
    }
    let images = m.images().ok()?;
    let base = stasis_control::images::BASE_IMAGE;
    images.inspect(&ctx.tenant, base).await.ok()?;
    Some(BaseRoot {
        image: Some(base.to_string()),
        has_user: true,
    })
}

/// E2B's default user and directory: commands run as `user` in
/// `/home/user` (stasis-base has that account, with passwordless sudo, as
/// E2B's base template does).
fn e2b_user(mut m: Manifest, has_user: bool) -> Manifest {
    if has_user {
        m.user = Some(E2B_USER.to_string());
        m.workdir = E2B_HOME.to_string();
    }
    m
}

/// E2B's default user and its home.
pub const E2B_USER: &str = "user";
pub const E2B_HOME: &str = "/home/user";

/// An unknown snapshot or image is E2B's "template not found".
fn not_a_template(e: Error) -> E2bError {
    if e.code == ErrorCode::NotFound {
        E2bError(Error::not_found(format!(
            "template not found: {} (name a stasis template, an image, a snapshot id, or `base`)",
            e.message
        )))
    } else {
        E2bError(e)
    }
}

pub(super) async fn info(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> E2bResult<Json<super::model::Detail>> {
    let (sid, _, rec) = sandbox_call(&st, &headers, &id, Method::GET, "").await?;
    let labels = st.manager.labels(&sid).await?;
    Ok(Json(view::detail(
        &rec,
        &labels,
        st.ports_domain.as_deref(),
    )))
}

pub(super) async fn kill(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> E2bResult<StatusCode> {
    let (sid, ctx, _) = sandbox_call(&st, &headers, &id, Method::DELETE, "").await?;
    st.manager.destroy(&ctx, &sid).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn list(
    State(st): State<E2b>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> E2bResult<Response> {
    let ctx = caller(&st, &headers, Method::GET, "/v1/sandboxes", "/v1/sandboxes").await?;
    let Query(q) = q.map_err(|e| Error::invalid(e.body_text()))?;
    let listing = q.parse()?;
    // The label filters go to the control plane; state, order and pages
    // are E2B's and applied here over the tenant's matching sandboxes.
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let f = ListFilter {
            labels: listing.labels.clone(),
            created_after_ms: listing.started_after_ms.map(|t| t - 1),
            limit: Some(stasis_meta::labels::MAX_PAGE),
            cursor: cursor.take(),
            ..Default::default()
        };
        let (recs, next) = st.manager.list_view(&ctx, f, false).await?;
        all.extend(recs);
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let (page, next) = listing.page(all);
    let body: Vec<_> = page.iter().map(|(r, l)| view::detail(r, l, None)).collect();
    let mut resp = Json(body).into_response();
    if let Some(t) = next.and_then(|t| HeaderValue::from_str(&t).ok()) {
        resp.headers_mut().insert("x-next-token", t);
    }
    Ok(resp)
}

pub(super) async fn connect(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> E2bResult<(StatusCode, Json<Created>)> {
    let (sid, ctx, _) = sandbox_call(&st, &headers, &id, Method::POST, "/resume").await?;
    let b: Connect = body(&bytes)?;
    if b.memory == Some(false) {
        return Err(unsupported(
            "resuming by cold boot (on_resume=\"reboot\"); a filesystem-only pause always resumes so",
        ));
    }
    let (mut rec, resumed) = st.manager.ensure_running(&ctx, &sid).await?;
    if let Some(t) = b.timeout {
        rec = st.manager.set_timeout(&ctx, &sid, t, true).await?;
    }
    let labels = st.manager.labels(&sid).await?;
    let out = created(&st, &ctx, &headers, &rec, &labels).await?;
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(out)))
}

/// The older SDKs' resume: a connect that answers 201.
pub(super) async fn resume(
    st: State<E2b>,
    headers: HeaderMap,
    id: Path<String>,
    bytes: Bytes,
) -> E2bResult<(StatusCode, Json<Created>)> {
    let (_, out) = connect(st, headers, id, bytes).await?;
    Ok((StatusCode::CREATED, out))
}

pub(super) async fn timeout(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> E2bResult<StatusCode> {
    let (sid, ctx, _) = sandbox_call(&st, &headers, &id, Method::PATCH, "/lifecycle").await?;
    let b: Timeout = serde_json::from_slice(&bytes).map_err(super::error::bad_body)?;
    st.manager.set_timeout(&ctx, &sid, b.timeout, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn pause(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> E2bResult<StatusCode> {
    let (sid, ctx, rec) = sandbox_call(&st, &headers, &id, Method::POST, "/pause").await?;
    let b: Pause = body(&bytes)?;
    if rec.state != SandboxState::Running {
        return Err(Error::state(format!("sandbox {sid} is already {}", rec.state)).into());
    }
    let keep_memory = b.memory.or(Some(true));
    st.manager
        .pause_with(&ctx, &sid, keep_memory, false)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn network(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> E2bResult<StatusCode> {
    let (sid, ctx, _) = sandbox_call(&st, &headers, &id, Method::PATCH, "/network").await?;
    let n: NetworkConfig = body(&bytes)?;
    // E2B's update replaces the whole configuration: nothing given is no network.
    let policy = translate::egress(None, Some(&n))?.unwrap_or_default();
    st.manager.set_network(&ctx, &sid, policy).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Range {
    start: Option<i64>,
    end: Option<i64>,
}

async fn sample(st: &E2b, ctx: &Ctx, sid: &SandboxId, r: &Range) -> E2bResult<Vec<Metric>> {
    let rec = live(st, ctx, sid).await?;
    if rec.state != SandboxState::Running {
        return Ok(Vec::new());
    }
    let u = st.manager.usage(ctx, sid).await?;
    let now = stasis_core::now_ms();
    Ok(
        view::metric(&rec, u.cpu_ns, u.rss_bytes, now, r.start, r.end)
            .into_iter()
            .collect(),
    )
}

pub(super) async fn metrics(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<Range>, axum::extract::rejection::QueryRejection>,
) -> E2bResult<Json<Vec<Metric>>> {
    let (sid, ctx, _) = sandbox_call(&st, &headers, &id, Method::GET, "/usage").await?;
    let Query(r) = q.map_err(|e| Error::invalid(e.body_text()))?;
    Ok(Json(sample(&st, &ctx, &sid, &r).await?))
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Many {
    sandbox_ids: Option<String>,
}

/// `GET /sandboxes/metrics?sandbox_ids=a,b`: the latest sample of each
/// (sandboxes not found are left out, as E2B does).
pub(super) async fn metrics_many(
    State(st): State<E2b>,
    headers: HeaderMap,
    q: Result<Query<Many>, axum::extract::rejection::QueryRejection>,
) -> E2bResult<Json<serde_json::Value>> {
    let ctx = caller(&st, &headers, Method::GET, "/v1/sandboxes", "/v1/sandboxes").await?;
    let Query(q) = q.map_err(|e| Error::invalid(e.body_text()))?;
    let mut out = serde_json::Map::new();
    for id in q
        .sandbox_ids
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
    {
        let Ok(sid) = sandbox_id(id) else { continue };
        match sample(&st, &ctx, &sid, &Range::default()).await {
            Ok(m) => {
                if let Some(m) = m.into_iter().next() {
                    out.insert(id.to_string(), serde_json::to_value(m).unwrap_or_default());
                }
            }
            Err(E2bError(e)) if e.code == ErrorCode::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Json(serde_json::json!({ "sandboxes": out })))
}
