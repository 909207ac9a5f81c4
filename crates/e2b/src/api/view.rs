//! From stasis's records to what the E2B SDK parses: a sandbox's detail and
//! listing entry (times, state, lifecycle), the listing's filters, order and
//! pages, and a metrics sample from the sandbox's cgroup usage. Pure.

use std::collections::BTreeMap;

use serde::Deserialize;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use stasis_core::{Error, SandboxState};
use stasis_meta::{Labels, SandboxRecord};

use super::error::E2bResult;
use super::model::{Detail, Lifecycle, Metric};
use super::translate::{
    auto_resume_of, internet_of, metadata_of, CLIENT_ID, ENVD_VERSION, LABEL_TEMPLATE,
};

/// E2B's two states: a sandbox pausing or paused is `paused`; creating,
/// resuming or running is `running`; destroyed and failed ones are gone.
pub fn state_of(s: SandboxState) -> Option<&'static str> {
    match s {
        SandboxState::Paused | SandboxState::Pausing => Some("paused"),
        SandboxState::Destroyed | SandboxState::Failed => None,
        _ => Some("running"),
    }
}

pub fn rfc3339(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

fn parse_time(s: &str, field: &str) -> E2bResult<i64> {
    let t = OffsetDateTime::parse(s.trim(), &Rfc3339).map_err(|e| {
        Error::invalid(format!("{field}: not an RFC 3339 time ({e})")).with_field(field)
    })?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// When the sandbox's timeout ends: for a running one, the instant its
/// running time reaches its limit (stable while it runs); for a paused one,
/// when its pause expires. With no limit, a year after it started.
pub fn end_ms(r: &SandboxRecord) -> i64 {
    let l = &r.manifest.lifecycle;
    let far = r.created_at_ms + 365 * 24 * 3600 * 1000;
    match (r.state, r.running_since_ms) {
        (SandboxState::Paused, _) => r.expires_at_ms.unwrap_or(far),
        _ if l.max_lifetime_secs == 0 => far,
        (_, Some(since)) => since + stasis_core::secs_to_ms(l.max_lifetime_secs) - r.running_ms,
        _ => r.updated_at_ms + stasis_core::secs_to_ms(l.max_lifetime_secs) - r.running_ms,
    }
}

/// A sandbox as E2B describes it (`SandboxDetail`; a listing leaves out
/// `domain` and the network).
pub fn detail(r: &SandboxRecord, labels: &Labels, domain: Option<&str>) -> Detail {
    let res = &r.manifest.resources;
    let l = &r.manifest.lifecycle;
    Detail {
        sandbox_id: r.id.to_string(),
        template_id: labels
            .get(LABEL_TEMPLATE)
            .cloned()
            .unwrap_or_else(|| r.manifest.image.clone().unwrap_or_else(|| "base".into())),
        client_id: CLIENT_ID.into(),
        alias: None,
        started_at: rfc3339(r.created_at_ms),
        end_at: rfc3339(end_ms(r)),
        state: state_of(r.state).unwrap_or("paused"),
        cpu_count: res.cpus.ceil().max(1.0) as u32,
        memory_mb: res.memory_mb,
        disk_size_mb: res.disk_mb,
        envd_version: ENVD_VERSION.into(),
        metadata: metadata_of(labels),
        domain: domain.map(str::to_string),
        envd_access_token: None,
        allow_internet_access: Some(internet_of(&r.manifest.network)),
        lifecycle: Some(Lifecycle {
            on_timeout: if l.on_lifetime.pause().is_some() {
                "pause"
            } else {
                "kill"
            },
            auto_resume: auto_resume_of(labels),
        }),
    }
}

/// `GET /v2/sandboxes`' query, as the SDKs send it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    /// `k=v&k2=v2`, keys and values percent-encoded (the SDK's encoding).
    pub metadata: Option<String>,
    /// `running`, `paused` or both, comma-separated.
    pub state: Option<String>,
    pub order: Option<String>,
    pub started_after: Option<String>,
    pub template: Option<String>,
    pub next_token: Option<String>,
    pub limit: Option<u32>,
}

/// Most sandboxes on one page (E2B's own limit), and the default.
pub const MAX_PAGE: u32 = 100;

/// One listing request, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// Labels that must match (metadata, and the template).
    pub labels: Labels,
    pub states: Vec<&'static str>,
    pub newest_first: bool,
    pub started_after_ms: Option<i64>,
    pub after: Option<(i64, String)>,
    pub limit: usize,
}

fn unquote(s: &str) -> String {
    form_urlencoded::parse(format!("v={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

impl ListQuery {
    pub fn parse(&self) -> E2bResult<Listing> {
        let mut labels = BTreeMap::new();
        if let Some(m) = &self.metadata {
            for (k, v) in form_urlencoded::parse(m.as_bytes()) {
                labels.insert(unquote(&k), unquote(&v));
            }
        }
        if let Some(t) = &self.template {
            labels.insert(LABEL_TEMPLATE.to_string(), t.clone());
        }
        let mut states = Vec::new();
        for s in self.state.iter().flat_map(|s| s.split(',')) {
            states.push(match s.trim() {
                "running" => "running",
                "paused" => "paused",
                other => {
                    return Err(Error::invalid(format!(
                        "state {other:?}: expected running or paused"
                    ))
                    .with_field("state")
                    .into())
                }
            });
        }
        if states.is_empty() {
            states = vec!["running", "paused"];
        }
        let newest_first = match self.order.as_deref() {
            None | Some("desc") => true,
            Some("asc") => false,
            Some(o) => {
                return Err(Error::invalid(format!("order {o:?}: expected asc or desc"))
                    .with_field("order")
                    .into())
            }
        };
        let started_after_ms = self
            .started_after
            .as_deref()
            .map(|s| parse_time(s, "startedAfter"))
            .transpose()?;
        let after = match &self.next_token {
            Some(t) => Some(
                t.split_once(':')
                    .and_then(|(ms, id)| Some((ms.parse().ok()?, id.to_string())))
                    .ok_or_else(|| {
                        Error::invalid("nextToken is not one this server gave")
                            .with_field("nextToken")
                    })?,
            ),
            None => None,
        };
        let limit = match self.limit {
            None => MAX_PAGE,
            Some(n) if (1..=MAX_PAGE).contains(&n) => n,
            Some(_) => {
                return Err(
                    Error::invalid(format!("limit must be between 1 and {MAX_PAGE}"))
                        .with_field("limit")
                        .into(),
                )
            }
        };
        Ok(Listing {
            labels,
            states,
            newest_first,
            started_after_ms,
            after,
            limit: limit as usize,
        })
    }
}

impl Listing {
    /// One page of `all` (the tenant's live sandboxes whose labels matched):
    /// those in the asked states started at or after `started_after`, in
    /// the asked order, after the token's place; and the next page's token
    /// when more remain.
    pub fn page(
        &self,
        mut all: Vec<(SandboxRecord, Labels)>,
    ) -> (Vec<(SandboxRecord, Labels)>, Option<String>) {
        all.retain(|(r, _)| {
            state_of(r.state).is_some_and(|s| self.states.contains(&s))
                && self.started_after_ms.is_none_or(|t| r.created_at_ms >= t)
        });
        let key = |r: &SandboxRecord| (r.created_at_ms, r.id.to_string());
        all.sort_by_key(|(r, _)| key(r));
        if self.newest_first {
            all.reverse();
        }
        if let Some(after) = &self.after {
            all.retain(|(r, _)| {
                if self.newest_first {
                    key(r) < *after
                } else {
                    key(r) > *after
                }
            });
        }
        let next = (all.len() > self.limit).then(|| {
            let (r, _) = &all[self.limit - 1];
            format!("{}:{}", r.created_at_ms, r.id)
        });
        all.truncate(self.limit);
        (all, next)
    }
}

/// The one sample stasis has: now, from the sandbox's cgroup (CPU time
/// since it last started running, resident memory), if `now` lies in the
/// asked range (`start`, `end`: whole seconds since the epoch, inclusive).
pub fn metric(
    r: &SandboxRecord,
    cpu_ns: u64,
    rss_bytes: u64,
    now_ms: i64,
    start: Option<i64>,
    end: Option<i64>,
) -> Option<Metric> {
    let secs = now_ms.div_euclid(1000);
    if start.is_some_and(|s| secs < s) || end.is_some_and(|e| secs > e) {
        return None;
    }
    let res = &r.manifest.resources;
    let ran_ns = (r.running_time_ms(now_ms).max(1) as f64) * 1e6;
    let pct = (cpu_ns as f64 / ran_ns / res.cpus.max(0.01) * 100.0).clamp(0.0, 100.0);
    Some(Metric {
        cpu_count: res.cpus.ceil().max(1.0) as u32,
        cpu_used_pct: (pct * 100.0).round() / 100.0,
        mem_used: rss_bytes,
        mem_total: res.memory_mb * 1024 * 1024,
        mem_cache: 0,
        disk_used: 0,
        disk_total: res.disk_mb * 1024 * 1024,
        timestamp: rfc3339(secs * 1000),
        timestamp_unix: secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::{BackendKind, Manifest, SandboxId, TenantId};

    fn rec(state: SandboxState, created: i64) -> SandboxRecord {
        let mut manifest = Manifest::default();
        manifest.lifecycle.max_lifetime_secs = 300;
        SandboxRecord {
            id: SandboxId::generate(),
            tenant: TenantId::generate(),
            backend: BackendKind::Process,
            state,
            reason: None,
            manifest,
            manifest_digest: String::new(),
            created_at_ms: created,
            updated_at_ms: created,
            running_ms: 10_000,
            running_since_ms: (state == SandboxState::Running).then_some(created + 50_000),
            paused_at_ms: None,
            expires_at_ms: (state == SandboxState::Paused).then_some(created + 99_000),
            pause_snapshot: None,
            pause_kind: None,
            source_snapshot: None,
            checkpoint_snapshot: None,
            checkpoint_at_ms: None,
            recovered_from_snapshot: None,
            recovered_at_ms: None,
            progress_lost_ms: None,
            owner: None,
        }
    }

    #[test]
    fn detail_speaks_e2b() {
        let r = rec(SandboxState::Running, 1_700_000_000_000);
        let labels: Labels = [
            ("e2b.template".to_string(), "base".to_string()),
            ("k".to_string(), "v".to_string()),
        ]
        .into();
        let d = detail(&r, &labels, Some("sb.test:8080"));
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["templateID"], "base");
        assert_eq!(v["state"], "running");
        assert_eq!(v["startedAt"], "2023-11-14T22:13:20Z");
        // Started running at created+50 s with 10 s already run: 290 s left.
        assert_eq!(end_ms(&r), 1_700_000_000_000 + 50_000 + 290_000);
        assert_eq!(v["metadata"], serde_json::json!({"k": "v"}));
        assert_eq!(
            v["lifecycle"],
            serde_json::json!({"onTimeout": "kill", "autoResume": true})
        );
        assert_eq!(v["domain"], "sb.test:8080");
        assert_eq!(v["envdVersion"], ENVD_VERSION);
        let p = rec(SandboxState::Paused, 0);
        assert_eq!(end_ms(&p), 99_000);
        assert_eq!(state_of(SandboxState::Pausing), Some("paused"));
        assert_eq!(state_of(SandboxState::Destroyed), None);
    }

    #[test]
    fn listing_query_filters_orders_and_pages() {
        let q = ListQuery {
            metadata: Some("sandbox_test_id=t%2520x&a=b".into()),
            state: Some("running,paused".into()),
            template: Some("base".into()),
            limit: Some(1),
            ..Default::default()
        };
        let l = q.parse().unwrap();
        assert_eq!(l.labels["sandbox_test_id"], "t x");
        assert_eq!(l.labels["a"], "b");
        assert_eq!(l.labels[LABEL_TEMPLATE], "base");
        assert!(l.newest_first);
        let old = rec(SandboxState::Running, 1000);
        let new = rec(SandboxState::Paused, 2000);
        let gone = rec(SandboxState::Destroyed, 3000);
        let all = vec![
            (old.clone(), Labels::new()),
            (new.clone(), Labels::new()),
            (gone, Labels::new()),
        ];
        let (p1, next) = l.page(all.clone());
        assert_eq!(p1[0].0.id, new.id);
        let l2 = ListQuery {
            next_token: next.clone(),
            limit: Some(1),
            ..Default::default()
        }
        .parse()
        .unwrap();
        let (p2, next2) = l2.page(all.clone());
        assert_eq!(p2[0].0.id, old.id);
        assert_eq!(next2, None);
        let asc = ListQuery {
            order: Some("asc".into()),
            state: Some("running".into()),
            started_after: Some(rfc3339(1000)),
            ..Default::default()
        }
        .parse()
        .unwrap();
        let (p, _) = asc.page(all.clone());
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0.id, old.id);
        let later = ListQuery {
            started_after: Some("1970-01-01T00:00:01.001+00:00".into()),
            ..Default::default()
        }
        .parse()
        .unwrap();
        assert_eq!(later.page(all).0.len(), 1);
        for bad in [
            ListQuery {
                state: Some("dead".into()),
                ..Default::default()
            },
            ListQuery {
                order: Some("up".into()),
                ..Default::default()
            },
            ListQuery {
                limit: Some(0),
                ..Default::default()
            },
            ListQuery {
                next_token: Some("x".into()),
                ..Default::default()
            },
            ListQuery {
                started_after: Some("yesterday".into()),
                ..Default::default()
            },
        ] {
            assert!(bad.parse().is_err());
        }
    }

    #[test]
    fn one_metric_sample_inside_the_asked_range() {
        let r = rec(SandboxState::Running, 0);
        let now = 100_000;
        let m = metric(&r, 5_000_000_000, 1 << 20, now, None, None).unwrap();
        assert_eq!(m.timestamp_unix, 100);
        assert_eq!(m.mem_used, 1 << 20);
        assert_eq!(m.mem_total, 256 << 20);
        assert!(m.cpu_used_pct > 0.0 && m.cpu_used_pct <= 100.0);
        assert!(metric(&r, 0, 0, now, Some(90), Some(100)).is_some());
        assert!(metric(&r, 0, 0, now, Some(101), None).is_none());
        assert!(metric(&r, 0, 0, now, None, Some(99)).is_none());
    }
}
