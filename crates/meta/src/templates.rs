//! Templates: a tenant's named, versioned snapshots that new sandboxes start
//! from instead of a cold boot.
//!
//! A version number is given by the database (one more than the highest the
//! name ever had, deleted versions included), so `name:3` always means the
//! same snapshot: deleting a version marks its row and never frees its
//! number. Another tenant's template is simply not found.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use stasis_core::{now_ms, BackendKind, Error, Result, SandboxId, SnapshotId, TenantId};

use crate::Meta;

fn db_err(e: sqlx::Error) -> Error {
    Error::internal(format!("template metadata: {e}"))
}

/// One published version of a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateRecord {
    pub tenant: TenantId,
    pub name: String,
    pub version: i64,
    /// The snapshot it restores (kept, unexpired, while this version exists).
    pub snapshot: SnapshotId,
    pub backend: BackendKind,
    /// Digest of the manifest the snapshot was taken under.
    pub manifest_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_sandbox: Option<SandboxId>,
    pub created_by: String,
    pub created_at_ms: i64,
}

/// What a new version records.
#[derive(Debug, Clone)]
pub struct NewTemplate<'a> {
    pub tenant: &'a TenantId,
    pub name: &'a str,
    pub snapshot: &'a SnapshotId,
    pub backend: BackendKind,
    pub manifest_digest: &'a str,
    pub source_sandbox: Option<&'a SandboxId>,
    pub created_by: &'a str,
}

const COLUMNS: &str = "tenant, name, version, snapshot, backend, manifest_digest, source_sandbox,
     created_by, created_at_ms";

fn decode(row: &sqlx::any::AnyRow) -> Result<TemplateRecord> {
    let s = |c: &str| -> Result<String> { row.try_get::<String, _>(c).map_err(db_err) };
    let source: Option<String> = row.try_get("source_sandbox").map_err(db_err)?;
    Ok(TemplateRecord {
        tenant: TenantId::parse(&s("tenant")?)?,
        name: s("name")?,
        version: row.try_get("version").map_err(db_err)?,
        snapshot: SnapshotId::parse(&s("snapshot")?)?,
        backend: BackendKind::parse(&s("backend")?)?,
        manifest_digest: s("manifest_digest")?,
        source_sandbox: source.as_deref().map(SandboxId::parse).transpose()?,
        created_by: s("created_by")?,
        created_at_ms: row.try_get("created_at_ms").map_err(db_err)?,
    })
}

impl Meta {
    /// Publish the next version of `t.name`. Two publishers racing for the
    /// same number: one wins, the other retries with the next number.
    pub async fn insert_template(&self, t: NewTemplate<'_>) -> Result<TemplateRecord> {
        for _ in 0..32 {
            let r = sqlx::query(
                "INSERT INTO templates (tenant, name, version, snapshot, backend, manifest_digest,
                 source_sandbox, created_by, created_at_ms)
                 SELECT $1, $2, COALESCE(MAX(version), 0) + 1, $3, $4, $5, $6, $7, $8
                 FROM templates WHERE tenant = $1 AND name = $2",
            )
            .bind(t.tenant.as_str())
            .bind(t.name)
            .bind(t.snapshot.as_str())
            .bind(t.backend.as_str())
            .bind(t.manifest_digest)
            .bind(t.source_sandbox.map(|s| s.as_str().to_string()))
            .bind(t.created_by)
            .bind(now_ms())
            .execute(self.pool())
            .await;
            match r {
                Ok(_) => {
                    return self
                        .template_by_snapshot(t.tenant, t.snapshot)
                        .await?
                        .ok_or_else(|| Error::internal("template inserted but not found"))
                }
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => continue,
                Err(e) => return Err(db_err(e)),
            }
        }
        Err(Error::new(
            stasis_core::ErrorCode::Busy,
            format!("template {}: too many concurrent publishers; retry", t.name),
        ))
    }

    /// The live versions of one template, oldest first (empty: no such template).
    pub async fn template_versions(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Vec<TemplateRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM templates
             WHERE tenant = $1 AND name = $2 AND deleted_at_ms IS NULL ORDER BY version"
        ))
        .bind(tenant.as_str())
        .bind(name)
        .fetch_all(self.pool())
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
    }

    /// Every live version of every template of the tenant, by name then version.
    pub async fn list_templates(&self, tenant: &TenantId) -> Result<Vec<TemplateRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM templates
             WHERE tenant = $1 AND deleted_at_ms IS NULL ORDER BY name, version"
        ))
        .bind(tenant.as_str())
        .fetch_all(self.pool())
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
    }

    /// One version (`None`: the latest live one); `not_found` otherwise.
    pub async fn get_template(
        &self,
        tenant: &TenantId,
        name: &str,
        version: Option<i64>,
    ) -> Result<TemplateRecord> {
        let versions = self.template_versions(tenant, name).await?;
        let found = match version {
            Some(v) => versions.into_iter().find(|t| t.version == v),
            None => versions.into_iter().last(),
        };
        found.ok_or_else(|| match version {
            Some(v) => Error::not_found(format!("template {name}:{v}")),
            None => Error::not_found(format!("template {name}")),
        })
    }

    /// The live version that holds `snapshot`, if any.
    pub async fn template_by_snapshot(
        &self,
        tenant: &TenantId,
        snapshot: &SnapshotId,
    ) -> Result<Option<TemplateRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM templates
             WHERE tenant = $1 AND snapshot = $2 AND deleted_at_ms IS NULL"
        ))
        .bind(tenant.as_str())
        .bind(snapshot.as_str())
        .fetch_optional(self.pool())
        .await
        .map_err(db_err)?;
        row.as_ref().map(decode).transpose()
    }

    /// Delete one version (or, with `None`, every live version) and return
    /// what was deleted; `not_found` when there was nothing to delete. The
    /// caller deletes the snapshots afterwards.
    pub async fn delete_template(
        &self,
        tenant: &TenantId,
        name: &str,
        version: Option<i64>,
    ) -> Result<Vec<TemplateRecord>> {
        let doomed: Vec<TemplateRecord> = match version {
            Some(v) => vec![self.get_template(tenant, name, Some(v)).await?],
            None => self.template_versions(tenant, name).await?,
        };
        if doomed.is_empty() {
            return Err(Error::not_found(format!("template {name}")));
        }
        let mut deleted = Vec::with_capacity(doomed.len());
        for t in doomed {
            // Compare-and-set: a concurrent delete of the same version wins once.
            let done = sqlx::query(
                "UPDATE templates SET deleted_at_ms = $1
                 WHERE tenant = $2 AND name = $3 AND version = $4 AND deleted_at_ms IS NULL",
            )
            .bind(now_ms())
            .bind(tenant.as_str())
            .bind(name)
            .bind(t.version)
            .execute(self.pool())
            .await
            .map_err(db_err)?;
            if done.rows_affected() == 1 {
                deleted.push(t);
            }
        }
        if deleted.is_empty() {
            return Err(Error::not_found(format!("template {name}")));
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::ErrorCode;

    fn new<'a>(tenant: &'a TenantId, name: &'a str, snap: &'a SnapshotId) -> NewTemplate<'a> {
        NewTemplate {
            tenant,
            name,
            snapshot: snap,
            backend: BackendKind::Process,
            manifest_digest: "d",
            source_sandbox: None,
            created_by: "test",
        }
    }

    #[tokio::test]
    async fn versions_count_up_are_never_reused_and_stay_in_their_tenant() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            let m = &db.meta;
            let a = TenantId::parse("t-a").unwrap();
            let b = TenantId::parse("t-b").unwrap();
            let snaps: Vec<SnapshotId> = (0..4).map(|_| SnapshotId::generate()).collect();
            let v1 = m.insert_template(new(&a, "py", &snaps[0])).await.unwrap();
            let v2 = m.insert_template(new(&a, "py", &snaps[1])).await.unwrap();
            assert_eq!((v1.version, v2.version), (1, 2));
            // Another tenant's name space is its own.
            let other = m.insert_template(new(&b, "py", &snaps[2])).await.unwrap();
            assert_eq!(other.version, 1);
            assert_eq!(m.get_template(&a, "py", None).await.unwrap(), v2);
            assert_eq!(m.get_template(&a, "py", Some(1)).await.unwrap(), v1);
            assert_eq!(m.list_templates(&a).await.unwrap(), vec![v1.clone(), v2]);
            // Deleting the latest never frees its number.
            let gone = m.delete_template(&a, "py", Some(2)).await.unwrap();
            assert_eq!(gone.len(), 1);
            assert_eq!(m.get_template(&a, "py", None).await.unwrap(), v1);
            let v3 = m.insert_template(new(&a, "py", &snaps[3])).await.unwrap();
            assert_eq!(v3.version, 3);
            let e = m.get_template(&a, "py", Some(2)).await.unwrap_err();
            assert_eq!(e.code, ErrorCode::NotFound);
            assert_eq!(
                m.template_by_snapshot(&a, &snaps[3]).await.unwrap(),
                Some(v3)
            );
            assert_eq!(m.template_by_snapshot(&b, &snaps[3]).await.unwrap(), None);
            // Deleting the name takes every live version; then nothing is left.
            assert_eq!(m.delete_template(&a, "py", None).await.unwrap().len(), 2);
            for v in [None, Some(1)] {
                let e = m.delete_template(&a, "py", v).await.unwrap_err();
                assert_eq!(e.code, ErrorCode::NotFound);
            }
            assert!(m.list_templates(&a).await.unwrap().is_empty());
            assert_eq!(m.list_templates(&b).await.unwrap(), vec![other]);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_publishers_get_distinct_versions() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            let t = TenantId::parse("t-a").unwrap();
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (m, t) = (db.meta.clone(), t.clone());
                    tokio::spawn(async move {
                        let snap = SnapshotId::generate();
                        m.insert_template(new(&t, "race", &snap))
                            .await
                            .unwrap()
                            .version
                    })
                })
                .collect();
            let mut got = Vec::new();
            for task in tasks {
                got.push(task.await.unwrap());
            }
            got.sort();
            assert_eq!(got, (1..=8).collect::<Vec<i64>>());
        }
    }
}
