//! Snapshots and forks. An E2B snapshot is a stasis snapshot (a named one
//! is published as a version of the stasis template of that name, so it is
//! found by name); `Sandbox.create(<snapshot id>)` restores it, and
//! `delete_snapshot` (`DELETE /templates/{id}`) deletes it.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use stasis_control::snapshots::SnapshotKind;
use stasis_core::{Error, ErrorCode, SnapshotId};

use super::error::E2bResult;
use super::model::{ForkRequest, ForkResult, SnapshotInfo, SnapshotRequest};
use super::sandboxes::{created, sandbox_call};
use super::{body, caller};
use crate::E2b;

pub(super) async fn create(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> E2bResult<(StatusCode, Json<SnapshotInfo>)> {
    let (sid, ctx, _) = sandbox_call(&st, &headers, &id, Method::POST, "/snapshots").await?;
    let b: SnapshotRequest = body(&bytes)?;
    let info = match b.name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => {
            caller(
                &st,
                &headers,
                Method::POST,
                "/v1/templates",
                "/v1/templates",
            )
            .await?;
            let t = st.manager.create_template(&ctx, name, &sid).await?;
            SnapshotInfo {
                snapshot_id: t.snapshot.to_string(),
                names: vec![format!("{}:{}", t.name, t.version)],
            }
        }
        None => {
            let s = st.manager.snapshot(&ctx, &sid, None).await?;
            SnapshotInfo {
                snapshot_id: s.id.to_string(),
                names: Vec::new(),
            }
        }
    };
    Ok((StatusCode::CREATED, Json(info)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListQuery {
    #[serde(rename = "sandboxID")]
    sandbox_id: Option<String>,
    name: Option<String>,
    limit: Option<u32>,
    next_token: Option<String>,
}

pub(super) async fn list(
    State(st): State<E2b>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> E2bResult<Response> {
    let ctx = caller(&st, &headers, Method::GET, "/v1/snapshots", "/v1/snapshots").await?;
    let Query(q) = q.map_err(|e| Error::invalid(e.body_text()))?;
    let limit = q.limit.unwrap_or(super::view::MAX_PAGE);
    if !(1..=super::view::MAX_PAGE).contains(&limit) {
        return Err(Error::invalid("limit must be between 1 and 100")
            .with_field("limit")
            .into());
    }
    let mut names: BTreeMap<SnapshotId, Vec<String>> = BTreeMap::new();
    for t in st.manager.list_templates(&ctx).await? {
        names
            .entry(t.snapshot.clone())
            .or_default()
            .push(format!("{}:{}", t.name, t.version));
    }
    let mut all: Vec<_> = st
        .manager
        .list_snapshots(&ctx)
        .await?
        .into_iter()
        .filter(|s| matches!(s.kind, SnapshotKind::User | SnapshotKind::Template))
        .filter(|s| {
            q.sandbox_id.as_deref().is_none_or(|want| {
                s.source_sandbox
                    .as_ref()
                    .is_some_and(|x| x.as_str() == want)
            })
        })
        .filter(|s| {
            q.name.as_deref().is_none_or(|want| {
                names.get(&s.id).is_some_and(|ns| {
                    ns.iter()
                        .any(|n| n == want || n.rsplit_once(':').is_some_and(|(b, _)| b == want))
                })
            })
        })
        .map(|s| (s.created_at_ms, s.id))
        .collect();
    all.sort();
    all.reverse();
    if let Some(t) = &q.next_token {
        let after = t
            .split_once(':')
            .and_then(|(ms, id)| Some((ms.parse::<i64>().ok()?, SnapshotId::parse(id).ok()?)))
            .ok_or_else(|| Error::invalid("nextToken is not one this server gave"))?;
        all.retain(|k| *k < after);
    }
    let next = (all.len() > limit as usize).then(|| {
        let (ms, id) = &all[limit as usize - 1];
        format!("{ms}:{id}")
    });
    all.truncate(limit as usize);
    let out: Vec<SnapshotInfo> = all
        .into_iter()
        .map(|(_, id)| SnapshotInfo {
            names: names.get(&id).cloned().unwrap_or_default(),
            snapshot_id: id.to_string(),
        })
        .collect();
    let mut resp = Json(out).into_response();
    if let Some(t) = next.and_then(|t| HeaderValue::from_str(&t).ok()) {
        resp.headers_mut().insert("x-next-token", t);
    }
    Ok(resp)
}

/// `DELETE /templates/{id}`: a snapshot id (and the template versions that
/// hold it), or a stasis template's name (every version).
pub(super) async fn delete(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> E2bResult<StatusCode> {
    if let Ok(snap) = SnapshotId::parse(&id).map_err(|_| ()).and_then(|s| {
        if id.starts_with("snap-") {
            Ok(s)
        } else {
            Err(())
        }
    }) {
        let path = format!("/v1/snapshots/{snap}");
        let ctx = caller(&st, &headers, Method::DELETE, "/v1/snapshots/{id}", &path).await?;
        let held: Vec<_> = st
            .manager
            .list_templates(&ctx)
            .await?
            .into_iter()
            .filter(|t| t.snapshot == snap)
            .collect();
        if held.is_empty() {
            st.manager.delete_snapshot(&ctx, &snap).await?;
        }
        for t in held {
            st.manager
                .delete_template(&ctx, &t.name, Some(t.version))
                .await?;
        }
        return Ok(StatusCode::NO_CONTENT);
    }
    let path = format!("/v1/templates/{id}");
    let ctx = caller(&st, &headers, Method::DELETE, "/v1/templates/{name}", &path).await?;
    match st.manager.delete_template(&ctx, &id, None).await {
        Ok(_) => Ok(StatusCode::NO_CONTENT),
        Err(e) if e.code == ErrorCode::InvalidArgument => {
            Err(Error::not_found(format!("template {id} not found")).into())
        }
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn fork(
    State(st): State<E2b>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> E2bResult<(StatusCode, Json<Vec<ForkResult>>)> {
    // The request's own shape is checked first, as E2B's API does: a count
    // below 1 is refused whoever asks (nothing about the sandbox is told).
    let b: ForkRequest = body(&bytes)?;
    if b.count == Some(0) {
        return Err(Error::invalid("count must be at least 1")
            .with_field("count")
            .into());
    }
    let (sid, ctx, _) = sandbox_call(&st, &headers, &id, Method::POST, "/fork").await?;
    let labels = st.manager.labels(&sid).await?;
    let (_, children) = st.manager.fork(&ctx, &sid, b.count.unwrap_or(1)).await?;
    let mut out = Vec::with_capacity(children.len());
    for c in children {
        // A fork is a sandbox like its parent: same metadata and template,
        // its own timeout when one was given.
        let r = async {
            st.manager.set_labels(&c.id, &labels).await?;
            let rec = match b.timeout {
                Some(t) => st.manager.set_timeout(&ctx, &c.id, t, false).await?,
                None => c,
            };
            created(&st, &ctx, &headers, &rec, &labels).await
        }
        .await;
        out.push(match r {
            Ok(s) => ForkResult {
                sandbox: Some(s),
                error: None,
            },
            Err(e) => ForkResult {
                sandbox: None,
                error: Some(super::error::body_of(&e.0)),
            },
        });
    }
    Ok((StatusCode::CREATED, Json(out)))
}
