//! Garbage collection and the put/GC handshake.
//!
//! ## Invariants
//! * I1: a snapshot record only references chunks that exist (records are
//!   written after all their chunks, and never modified).
//! * I2: a chunk is deleted only if no record that exists, or that will ever be
//!   written, references it.
//!
//! ## Design: per-tenant mark-and-sweep with a marker handshake
//! A put (or import) writes `locks/put-<expires>-<rand>` BEFORE it lists the
//! tenant's chunks to dedup against, then lists `locks/`; while a live
//! `gc-*` marker exists it waits (keeping its own marker). A GC sweep writes
//! `locks/gc-<expires>-<rand>` and THEN lists `locks/`; if a live `put-*`
//! marker exists it skips the tenant. With a linearizable store (local FS, S3
//! since 2020) these two write-then-list sequences cannot both miss each
//! other (Dekker): either the GC sees the put marker and sweeps nothing, or
//! the put sees the GC marker and does not list/reuse/upload chunks until the
//! sweep is over. The mark phase lists records only after the lock check, so
//! every put that finished before is in the mark set, and every put that has
//! not finished waits for us or made us skip. Hence I2 for concurrent puts.
//!
//! Leases: markers carry an expiry in their name. Holders renew at half-life
//! and stop (put: fail with `busy`; GC: stop sweeping) once less than a
//! quarter of the lease remains, so a stalled holder never acts on an expired
//! marker; clocks across nodes must agree within a quarter lease. A crashed
//! holder's marker just expires (a crashed GC delays puts of that tenant by at
//! most one GC lease; a crashed put delays that tenant's sweep by one put lease).
//!
//! Defence in depth: unreferenced chunks younger than `grace_ms` are not swept.
//!
//! ## Crash safety (kill -9 at any instant)
//! GC only ever (1) deletes expired records, (2) writes/deletes its own marker,
//! (3) deletes chunks absent from the mark set. Record deletion happens before
//! the mark phase, never the other way round, so a crash can leave orphaned
//! chunks (collected by the next run) but never a record without its chunks:
//! every chunk deleted was unreferenced by every record existing at mark time,
//! and no later record can reference it (handshake). Each step is idempotent,
//! so the next run simply continues. `delete_snapshot` deletes only the record.
//! A record that cannot be read (corrupt, wrong key) makes the sweep of its
//! tenant skip: we cannot know what it references.

use crate::{chunk_path, locks_prefix, os_err, record_path, ChunkAddr, GcReport, Store};
use futures::TryStreamExt;
use object_store::path::Path as OPath;
use object_store::PutPayload;
use stasis_core::{now_ms, Error, ErrorCode, Result, TenantId};
use std::collections::HashMap;
use std::sync::Arc;

pub type GcHook = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone)]
pub struct GcOptions {
    /// Unreferenced chunks younger than this (by object mtime) are kept.
    pub grace_ms: i64,
    /// GC marker lease.
    pub lease_ms: i64,
    /// Called before every mutating step (tests use it as a failpoint).
    pub hook: Option<GcHook>,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            grace_ms: 15 * 60 * 1000,
            lease_ms: 2 * 60 * 1000,
            hook: None,
        }
    }
}

impl std::fmt::Debug for GcOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcOptions")
            .field("grace_ms", &self.grace_ms)
            .field("lease_ms", &self.lease_ms)
            .finish()
    }
}

fn parse_marker(name: &str) -> Option<(&str, i64)> {
    let mut it = name.splitn(3, '-');
    let kind = it.next()?;
    let exp = it.next()?.parse().ok()?;
    Some((kind, exp))
}

/// A put or GC marker held by this process.
pub(crate) struct Lease {
    tenant: TenantId,
    kind: &'static str,
    lease_ms: i64,
    state: tokio::sync::Mutex<(OPath, i64)>,
}

impl Lease {
    async fn write(
        store: &Store,
        tenant: &TenantId,
        kind: &'static str,
        lease_ms: i64,
    ) -> Result<Lease> {
        let (path, exp) = Self::put_marker(store, tenant, kind, lease_ms).await?;
        Ok(Lease {
            tenant: tenant.clone(),
            kind,
            lease_ms,
            state: tokio::sync::Mutex::new((path, exp)),
        })
    }

    #[cfg(test)]
    pub(crate) async fn write_for_test(
        store: &Store,
        tenant: &TenantId,
        kind: &'static str,
        lease_ms: i64,
    ) -> Lease {
        Self::write(store, tenant, kind, lease_ms).await.unwrap()
    }

    async fn put_marker(
        store: &Store,
        tenant: &TenantId,
        kind: &str,
        lease_ms: i64,
    ) -> Result<(OPath, i64)> {
        let exp = now_ms() + lease_ms;
        let path = OPath::from(format!(
            "{}/{kind}-{exp}-{}",
            locks_prefix(tenant),
            hex::encode(crate::crypto::random_bytes::<8>())
        ));
        store
            .os()
            .put(&path, PutPayload::from_static(b""))
            .await
            .map_err(os_err)?;
        Ok((path, exp))
    }

    /// Live markers of another kind than ours, and expired markers (any kind but ours).
    async fn scan(&self, store: &Store, other: &str) -> Result<(bool, Vec<OPath>)> {
        let metas: Vec<_> = store
            .os()
            .list(Some(&locks_prefix(&self.tenant)))
            .try_collect()
            .await
            .map_err(os_err)?;
        let now = now_ms();
        let own = self.state.lock().await.0.clone();
        let mut live = false;
        let mut stale = Vec::new();
        for m in metas {
            if m.location == own {
                continue;
            }
            let Some((kind, exp)) = m.location.filename().and_then(parse_marker) else {
                continue;
            };
            if exp <= now {
                stale.push(m.location.clone());
            } else if kind == other {
                live = true;
            }
        }
        Ok((live, stale))
    }

    /// Write a put marker, then wait while a GC sweep of the tenant is running.
    pub(crate) async fn acquire_put(store: &Store, tenant: &TenantId) -> Result<Lease> {
        let cfg = store.config();
        let lease = Lease::write(store, tenant, "put", cfg.put_lease_ms).await?;
        let deadline = now_ms() + cfg.put_wait_max_ms;
        loop {
            match lease.scan(store, "gc").await {
                Ok((false, _)) => return Ok(lease),
                Ok((true, _)) if now_ms() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    if let Err(e) = lease.keep_alive(store).await {
                        lease.release(store).await;
                        return Err(e);
                    }
                }
                Ok((true, _)) => {
                    lease.release(store).await;
                    return Err(Error::new(
                        ErrorCode::Busy,
                        format!("garbage collection of tenant {tenant} is running; retry later"),
                    ));
                }
                Err(e) => {
                    lease.release(store).await;
                    return Err(e);
                }
            }
        }
    }

    /// Renew at half-life; refuse to go on once less than a quarter of the lease is left.
    pub(crate) async fn keep_alive(&self, store: &Store) -> Result<()> {
        let mut st = self.state.lock().await;
        let now = now_ms();
        if now >= st.1 - self.lease_ms / 4 {
            return Err(Error::new(
                ErrorCode::Busy,
                format!(
                    "{} lease of tenant {} expired (process stalled); retry",
                    self.kind, self.tenant
                ),
            ));
        }
        if now >= st.1 - self.lease_ms / 2 {
            let (path, exp) =
                Self::put_marker(store, &self.tenant, self.kind, self.lease_ms).await?;
            let old = std::mem::replace(&mut *st, (path, exp));
            let _ = store.os().delete(&old.0).await;
        }
        Ok(())
    }

    pub(crate) async fn release(&self, store: &Store) {
        let p = self.state.lock().await.0.clone();
        if let Err(e) = store.os().delete(&p).await {
            tracing::warn!(marker = %p, "could not delete lease marker: {e}");
        }
    }
}

impl Store {
    /// Expire records with `expires_at_ms <= now_ms`, then sweep chunks that no
    /// remaining record references. See the module docs for why this is crash-safe.
    pub async fn gc(&self, now_ms: i64) -> Result<GcReport> {
        self.gc_with(now_ms, &GcOptions::default()).await
    }

    pub async fn gc_with(&self, now_ms: i64, opts: &GcOptions) -> Result<GcReport> {
        let mut rep = GcReport::default();
        for t in self.list_tenants().await? {
            rep.tenants += 1;
            if let Err(e) = self.gc_tenant(&t, now_ms, opts, &mut rep).await {
                rep.errors.push(format!("tenant {t}: {e}"));
                rep.tenants_skipped.push(t.to_string());
            }
        }
        Ok(rep)
    }

    async fn gc_tenant(
        &self,
        t: &TenantId,
        now: i64,
        opts: &GcOptions,
        rep: &mut GcReport,
    ) -> Result<()> {
        let step = |s: &str| {
            if let Some(h) = &opts.hook {
                h(s)
            }
        };
        if self.is_erased(t).await? {
            // Crypto-erased: nobody can read these bytes any more; remove them.
            step("purge-erased");
            rep.objects_purged += self.purge_tenant(t).await?;
            return Ok(());
        }
        if self.tenant_keys(t, false).await?.is_none() {
            // No key: nothing of this tenant can be read, so nothing is known to be unreferenced.
            return Ok(());
        }
        // Phase 1: expire records. Records go before any chunk.
        let mut unreadable = false;
        for id in self.list_record_ids(t).await? {
            match self.get_snapshot(t, &id).await {
                Ok(r) if r.is_expired(now) => {
                    step("expire-record");
                    match self.os().delete(&record_path(t, &id)).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                            rep.snapshots_expired += 1
                        }
                        Err(e) => return Err(os_err(e)),
                    }
                    // Its damage mark, if any, goes with it (best effort).
                    let _ = self.clear_damage(t, &id).await;
                }
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => {
                    unreadable = true;
                    rep.errors.push(format!("tenant {t}: {e}"));
                }
            }
        }
        if unreadable {
            rep.tenants_skipped.push(t.to_string());
            return Ok(());
        }
        // Phase 2: handshake. Our marker first, then look for puts.
        step("gc-marker");
        let lease = Lease::write(self, t, "gc", opts.lease_ms).await?;
        let res = self.mark_and_sweep(t, opts, rep, &lease, &step).await;
        step("gc-marker-release");
        lease.release(self).await;
        res
    }

    async fn mark_and_sweep(
        &self,
        t: &TenantId,
        opts: &GcOptions,
        rep: &mut GcReport,
        lease: &Lease,
        step: &(dyn Fn(&str) + Sync),
    ) -> Result<()> {
        let (put_running, stale) = lease.scan(self, "put").await?;
        for s in stale {
            step("stale-marker");
            if self.os().delete(&s).await.is_ok() {
                rep.stale_markers_removed += 1;
            }
        }
        if put_running {
            rep.tenants_skipped.push(t.to_string());
            return Ok(());
        }
        // Phase 3: mark. Every record existing now; refcounts.
        let mut refs: HashMap<ChunkAddr, u64> = HashMap::new();
        for id in self.list_record_ids(t).await? {
            match self.get_snapshot(t, &id).await {
                Ok(r) => {
                    rep.snapshots_live += 1;
                    for a in &r.artifacts {
                        for c in &a.chunks {
                            *refs.entry(c.addr).or_default() += 1;
                        }
                    }
                }
                Err(e) if e.code == ErrorCode::NotFound => {} // deleted meanwhile: not live
                Err(e) => {
                    rep.errors.push(format!("tenant {t}: {e}"));
                    rep.tenants_skipped.push(t.to_string());
                    return Ok(());
                }
            }
        }
        rep.chunks_live += refs.len() as u64;
        for n in refs.values() {
            rep.chunk_refs += n;
            *rep.refcount_histogram.entry(*n).or_default() += 1;
        }
        // Phase 4: sweep unreferenced chunks older than the grace period.
        let chunks = self.list_chunks(t).await?;
        let cutoff = now_ms() - opts.grace_ms;
        for (a, size, mtime) in chunks {
            if refs.contains_key(&a) {
                continue;
            }
            if mtime > cutoff {
                rep.chunks_in_grace += 1;
                continue;
            }
            if let Err(e) = lease.keep_alive(self).await {
                rep.errors.push(format!("tenant {t}: sweep stopped: {e}"));
                return Ok(());
            }
            step("sweep-chunk");
            match self.os().delete(&chunk_path(t, &a)).await {
                Ok(()) => {
                    rep.chunks_deleted += 1;
                    rep.bytes_freed += size;
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(os_err(e)),
            }
        }
        // Local dir only: staging files (`<name>#<n>`) of writes killed mid-way.
        // Safe for the same reason as the sweep: no put of this tenant is running.
        if let Some(root) = self.local_root() {
            let cutoff = std::time::SystemTime::now()
                - std::time::Duration::from_millis(opts.grace_ms.max(0) as u64);
            let troot = root.join("tenants").join(t.as_str());
            let mut dirs = vec![troot.join("chunks"), troot.join("snapshots")];
            while let Some(d) = dirs.pop() {
                let Ok(rd) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in rd.flatten() {
                    let Ok(ft) = e.file_type() else { continue };
                    if ft.is_dir() {
                        dirs.push(e.path());
                        continue;
                    }
                    let staging = e.file_name().to_string_lossy().contains('#');
                    let old = e
                        .metadata()
                        .and_then(|m| m.modified())
                        .map(|m| m <= cutoff)
                        .unwrap_or(false);
                    if staging && old {
                        step("sweep-staging");
                        if std::fs::remove_file(e.path()).is_ok() {
                            rep.staging_files_removed += 1;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
