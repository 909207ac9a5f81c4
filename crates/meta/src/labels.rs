//! Labels (key/value metadata a sandbox is created with), listing a
//! tenant's sandboxes by filter and page, and changing a sandbox's
//! lifecycle policy at runtime.
//!
//! A page is ordered oldest first by `(created_at_ms, id)`; its cursor is
//! the last row's pair, so pages neither skip nor repeat rows while
//! sandboxes are created meanwhile. Filters are SQL conditions (a label
//! filter is an `EXISTS` on `sandbox_labels`).

use std::collections::{BTreeMap, HashMap};

use sqlx::Row;

use stasis_core::{now_ms, Error, LifecyclePolicy, Result, SandboxId, SandboxState, TenantId};

use crate::{db_err, decode, Meta, SandboxRecord, SELECT_SANDBOX};

pub type Labels = BTreeMap<String, String>;

/// Most labels on one sandbox.
pub const MAX_LABELS: usize = 32;
/// Longest label key and value, bytes.
pub const MAX_KEY: usize = 63;
pub const MAX_VALUE: usize = 256;
/// Largest page of a listing.
pub const MAX_PAGE: u32 = 1000;

/// Keys: 1..=63 of `[A-Za-z0-9._/-]`, starting with a letter or digit;
/// values: at most 256 bytes without control characters.
pub fn validate_labels(labels: &Labels) -> Result<()> {
    if labels.len() > MAX_LABELS {
        return Err(Error::invalid(format!("at most {MAX_LABELS} labels")).with_field("labels"));
    }
    for (k, v) in labels {
        let key_ok = !k.is_empty()
            && k.len() <= MAX_KEY
            && k.as_bytes()[0].is_ascii_alphanumeric()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b));
        if !key_ok {
            return Err(Error::invalid(format!(
                "label key {k:?}: 1 to {MAX_KEY} of letters, digits, '.', '_', '/', '-', starting with a letter or digit"
            ))
            .with_field("labels"));
        }
        if v.len() > MAX_VALUE || v.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "label {k:?}: the value must be at most {MAX_VALUE} bytes without control characters"
            ))
            .with_field(format!("labels.{k}")));
        }
    }
    Ok(())
}

/// What a listing selects.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub state: Option<SandboxState>,
    /// Leave destroyed sandboxes out.
    pub live_only: bool,
    /// Leave out sandboxes that carry a label with this key (whatever its
    /// value).
    pub without_label: Option<String>,
    /// Every one of these must match.
    pub labels: Labels,
    /// Created strictly after this (ms since the epoch).
    pub created_after_ms: Option<i64>,
    /// At most this many (the next page's cursor is returned when more remain).
    pub limit: Option<u32>,
    pub cursor: Option<String>,
}

enum Bind {
    S(String),
    I(i64),
}

fn parse_cursor(c: &str) -> Result<(i64, String)> {
    c.split_once(':')
        .and_then(|(ms, id)| Some((ms.parse().ok()?, id.to_string())))
        .filter(|(_, id)| !id.is_empty())
        .ok_or_else(|| Error::invalid("cursor is not one this daemon gave").with_field("cursor"))
}

impl Meta {
    /// Record the labels of a new sandbox (validated first).
    pub async fn set_labels(&self, id: &SandboxId, labels: &Labels) -> Result<()> {
        validate_labels(labels)?;
        for (k, v) in labels {
            sqlx::query("INSERT INTO sandbox_labels (sandbox, key, value) VALUES ($1, $2, $3)")
                .bind(id.as_str())
                .bind(k.as_str())
                .bind(v.as_str())
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
        }
        Ok(())
    }

    /// The labels of each of `ids` (sandboxes without labels are absent).
    pub async fn labels_of(&self, ids: &[SandboxId]) -> Result<HashMap<SandboxId, Labels>> {
        let mut out: HashMap<SandboxId, Labels> = HashMap::new();
        for chunk in ids.chunks(200) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT sandbox, key, value FROM sandbox_labels WHERE sandbox IN ({})",
                marks.join(", ")
            );
            let mut q = sqlx::query(&sql);
            for id in chunk {
                q = q.bind(id.as_str());
            }
            for row in q.fetch_all(&self.pool).await.map_err(db_err)? {
                let sid: String = row.try_get("sandbox").map_err(db_err)?;
                let Ok(sid) = SandboxId::parse(&sid) else {
                    continue;
                };
                out.entry(sid).or_default().insert(
                    row.try_get("key").map_err(db_err)?,
                    row.try_get("value").map_err(db_err)?,
                );
            }
        }
        Ok(out)
    }

    /// A tenant's sandboxes matching `f`, oldest first, and the cursor of
    /// the next page when `f.limit` cut the list short.
    pub async fn list_filtered(
        &self,
        tenant: &TenantId,
        f: &ListFilter,
    ) -> Result<(Vec<SandboxRecord>, Option<String>)> {
        if f.limit == Some(0) || f.limit.is_some_and(|l| l > MAX_PAGE) {
            return Err(
                Error::invalid(format!("limit must be between 1 and {MAX_PAGE}"))
                    .with_field("limit"),
            );
        }
        validate_labels(&f.labels)?;
        let mut binds: Vec<Bind> = Vec::new();
        let mut arg = |b: Bind| {
            binds.push(b);
            format!("${}", binds.len())
        };
        let mut sql = format!(
            "{SELECT_SANDBOX} WHERE s.tenant = {}",
            arg(Bind::S(tenant.as_str().to_string()))
        );
        if let Some(st) = f.state {
            sql += &format!(" AND s.state = {}", arg(Bind::S(st.as_str().to_string())));
        }
        if f.live_only {
            sql += &format!(
                " AND s.state <> {}",
                arg(Bind::S(SandboxState::Destroyed.as_str().to_string()))
            );
        }
        if let Some(k) = &f.without_label {
            let k = arg(Bind::S(k.clone()));
            sql += &format!(
                " AND NOT EXISTS (SELECT 1 FROM sandbox_labels x WHERE x.sandbox = s.id AND x.key = {k})"
            );
        }
        for (k, v) in &f.labels {
            let (k, v) = (arg(Bind::S(k.clone())), arg(Bind::S(v.clone())));
            sql += &format!(
                " AND EXISTS (SELECT 1 FROM sandbox_labels x WHERE x.sandbox = s.id AND x.key = {k} AND x.value = {v})"
            );
        }
        if let Some(after) = f.created_after_ms {
            sql += &format!(" AND s.created_at_ms > {}", arg(Bind::I(after)));
        }
        if let Some(c) = &f.cursor {
            let (ms, id) = parse_cursor(c)?;
            let (a, b, i) = (arg(Bind::I(ms)), arg(Bind::I(ms)), arg(Bind::S(id)));
            sql +=
                &format!(" AND (s.created_at_ms > {a} OR (s.created_at_ms = {b} AND s.id > {i}))");
        }
        sql += " ORDER BY s.created_at_ms, s.id";
        if let Some(l) = f.limit {
            sql += &format!(" LIMIT {}", l as u64 + 1);
        }
        let mut q = sqlx::query(&sql);
        for b in binds {
            q = match b {
                Bind::S(s) => q.bind(s),
                Bind::I(i) => q.bind(i),
            };
        }
        let rows = q.fetch_all(&self.pool).await.map_err(db_err)?;
        let mut recs: Vec<SandboxRecord> = rows.iter().map(decode).collect::<Result<_>>()?;
        let next = match f.limit {
            Some(l) if recs.len() > l as usize => {
                recs.truncate(l as usize);
                recs.last()
                    .map(|r| format!("{}:{}", r.created_at_ms, r.id.as_str()))
            }
            _ => None,
        };
        Ok((recs, next))
    }

    /// Replace the lifecycle policy of `id` if its manifest is still the one
    /// with digest `expected` (else `busy`: somebody changed it meanwhile).
    /// A paused sandbox's expiry follows its new `paused_ttl_secs`. The
    /// manifest's digest is recomputed (the policy is part of it).
    pub async fn set_lifecycle(
        &self,
        id: &SandboxId,
        expected: &str,
        policy: &LifecyclePolicy,
    ) -> Result<SandboxRecord> {
        let rec = self.get(id).await?;
        let mut manifest = rec.manifest.clone();
        manifest.lifecycle = policy.clone();
        manifest.validate()?;
        let expires = rec
            .paused_at_ms
            .filter(|_| rec.state == SandboxState::Paused)
            .map(|at| policy.paused_expiry_ms(at));
        let done = sqlx::query(
            "UPDATE sandboxes SET manifest = $1, manifest_digest = $2, updated_at_ms = $3,
             expires_at_ms = CASE WHEN state = 'paused' THEN $4 ELSE expires_at_ms END
             WHERE id = $5 AND manifest_digest = $6 AND state != 'destroyed'",
        )
        .bind(serde_json::to_string(&manifest)?)
        .bind(manifest.digest())
        .bind(now_ms())
        .bind(expires)
        .bind(id.as_str())
        .bind(expected)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::new(
                stasis_core::ErrorCode::Busy,
                format!("sandbox {id} changed meanwhile (or was destroyed); try again"),
            ));
        }
        // Its deadlines follow the new policy.
        self.refresh_due(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::{BackendKind, Manifest};

    #[test]
    fn label_rules() {
        let ok: Labels = [("team".into(), "a".into()), ("x.y/z-1_2".into(), "".into())].into();
        validate_labels(&ok).unwrap();
        for bad in ["", "-a", "a b", &"k".repeat(64)] {
            let l: Labels = [(bad.to_string(), "v".to_string())].into();
            assert!(validate_labels(&l).is_err(), "{bad:?}");
        }
        let l: Labels = [("k".into(), "a\nb".into())].into();
        assert!(validate_labels(&l).is_err());
        assert!(parse_cursor("12:sb").is_ok());
        assert!(parse_cursor("x:sb").is_err());
        assert!(parse_cursor("12:").is_err());
    }

    #[tokio::test]
    async fn filters_pages_and_lifecycle() {
        for db in crate::testdb::all().await {
            let m = &db.meta;
            let t = TenantId::parse("t-labels").unwrap();
            let other = TenantId::parse("t-other").unwrap();
            let mut ids = Vec::new();
            for i in 0..5 {
                let id = SandboxId::generate();
                m.insert_sandbox(&id, &t, &Manifest::default(), BackendKind::Process, None)
                    .await
                    .unwrap();
                let team = if i % 2 == 0 { "a" } else { "b" };
                m.set_labels(&id, &[("team".to_string(), team.to_string())].into())
                    .await
                    .unwrap();
                ids.push(id);
            }
            let oid = SandboxId::generate();
            m.insert_sandbox(
                &oid,
                &other,
                &Manifest::default(),
                BackendKind::Process,
                None,
            )
            .await
            .unwrap();
            m.set_labels(&oid, &[("team".to_string(), "a".to_string())].into())
                .await
                .unwrap();

            let all = ListFilter::default();
            let (v, next) = m.list_filtered(&t, &all).await.unwrap();
            assert_eq!((v.len(), next), (5, None), "{}", db.name);
            let team_a = ListFilter {
                labels: [("team".to_string(), "a".to_string())].into(),
                ..Default::default()
            };
            let (v, _) = m.list_filtered(&t, &team_a).await.unwrap();
            assert_eq!(v.len(), 3, "{}", db.name);
            assert!(v.iter().all(|r| r.tenant == t));

            // Pages of two: 2 + 2 + 1, no repeats, in order.
            let mut seen = Vec::new();
            let mut cursor = None;
            loop {
                let f = ListFilter {
                    limit: Some(2),
                    cursor: cursor.clone(),
                    ..Default::default()
                };
                let (v, next) = m.list_filtered(&t, &f).await.unwrap();
                seen.extend(v.into_iter().map(|r| r.id));
                match next {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            assert_eq!(seen.len(), 5, "{}", db.name);
            let mut sorted = seen.clone();
            sorted.dedup();
            assert_eq!(sorted.len(), 5);

            let rec = m.get(&ids[2]).await.unwrap();
            let later = ListFilter {
                created_after_ms: Some(rec.created_at_ms - 1),
                state: Some(SandboxState::Creating),
                labels: [("team".to_string(), "a".to_string())].into(),
                limit: Some(10),
                ..Default::default()
            };
            let (v, _) = m.list_filtered(&t, &later).await.unwrap();
            assert!(v.iter().any(|r| r.id == ids[2]), "{}", db.name);
            assert!(v.iter().all(|r| r.created_at_ms >= rec.created_at_ms));
            let none = ListFilter {
                created_after_ms: Some(now_ms() + 60_000),
                ..Default::default()
            };
            assert!(m.list_filtered(&t, &none).await.unwrap().0.is_empty());
            assert!(m
                .list_filtered(
                    &t,
                    &ListFilter {
                        limit: Some(0),
                        ..Default::default()
                    }
                )
                .await
                .is_err());
            assert!(m
                .list_filtered(
                    &t,
                    &ListFilter {
                        cursor: Some("zz".into()),
                        ..Default::default()
                    }
                )
                .await
                .is_err());

            let labels = m.labels_of(&ids).await.unwrap();
            assert_eq!(labels[&ids[1]]["team"], "b");

            // Live only: a destroyed one goes; without a label key: the
            // sandboxes carrying it (any value) go.
            use crate::Patch;
            for to in [SandboxState::Destroying, SandboxState::Destroyed] {
                let from = m.get(&ids[0]).await.unwrap().state;
                m.transition(&ids[0], from, to, Patch::default())
                    .await
                    .unwrap();
            }
            let live = ListFilter {
                live_only: true,
                ..Default::default()
            };
            let (v, _) = m.list_filtered(&t, &live).await.unwrap();
            assert_eq!(v.len(), 4, "{}", db.name);
            assert!(v.iter().all(|r| r.id != ids[0]));
            let not_b = ListFilter {
                live_only: true,
                without_label: Some("team".into()),
                ..Default::default()
            };
            assert!(m.list_filtered(&t, &not_b).await.unwrap().0.is_empty());
            m.set_labels(&ids[1], &[("kind".to_string(), "x".to_string())].into())
                .await
                .unwrap();
            let unkind = ListFilter {
                without_label: Some("kind".into()),
                ..Default::default()
            };
            let (v, _) = m.list_filtered(&t, &unkind).await.unwrap();
            assert_eq!(v.len(), 4, "{}", db.name);
            assert!(v.iter().all(|r| r.id != ids[1]));

            // Lifecycle: compare-and-set on the digest.
            let mut p = rec.manifest.lifecycle.clone();
            p.idle_timeout_secs = 60;
            let r2 = m
                .set_lifecycle(&rec.id, &rec.manifest_digest, &p)
                .await
                .unwrap();
            assert_eq!(r2.manifest.lifecycle.idle_timeout_secs, 60);
            assert_ne!(r2.manifest_digest, rec.manifest_digest);
            let e = m
                .set_lifecycle(&rec.id, &rec.manifest_digest, &p)
                .await
                .unwrap_err();
            assert_eq!(e.code, stasis_core::ErrorCode::Busy);
            p.paused_ttl_secs = 0;
            assert!(m
                .set_lifecycle(&rec.id, &r2.manifest_digest, &p)
                .await
                .is_err());
        }
    }
}
