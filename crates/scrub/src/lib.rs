//! The store's scrub: every chunk of every live snapshot read back and
//! verified (the store's own restore check, [`Store::check_chunk`]) before
//! the day the store's copy is needed, damage audited, counted and marked on
//! the snapshot, and repaired from this node's intact local copy where one
//! exists.
//!
//! Two ways in: `stasis store verify` (the admin route
//! `POST /v1/admin/store/verify`, [`Scrubber::verify`]: everything, or one
//! tenant or snapshot, at full speed) and the background scrub
//! ([`Scrubber::spawn`], `stasis serve --scrub-rate`), paced to a number of
//! bytes per second so it never competes with the sandboxes for the store.
//!
//! The background scrub walks tenants and their snapshots in id order and
//! writes a cursor (`<data dir>/scrub-cursor.json`: the last snapshot it
//! finished) after each snapshot, so a restarted daemon goes on where the
//! last one stopped; a pass that ends removes it, and the next pass starts
//! [`ScrubConfig::pass_interval`] after the last one started.
//!
//! The scrub takes no sandbox slot: it reads the store, and repair reads a
//! paused sandbox's local pause files only while the backend reports them
//! bound to the snapshot; a byte is put back only when its keyed hash is the
//! damaged chunk's address, so a file that changes under the read (a resume
//! starting) can make a repair fail, never put anything wrong back.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use stasis_core::{now_ms, Error, Result, SnapshotId, TenantId};
use stasis_meta::{Meta, NewAuditEntry};
use stasis_store::{DamagedChunk, SnapshotChunks, SnapshotDamage, Store};
use utoipa::ToSchema;

use stasis_control::metrics::Metrics;

/// Default pace of the background scrub: 4 MiB of stored plaintext per second.
pub const DEFAULT_RATE: u64 = 4 << 20;

/// How often a background pass starts (at most).
pub const PASS_INTERVAL: Duration = Duration::from_secs(3600);

/// `(artifact name, file)` this node keeps of a tenant's stored snapshot.
pub type LocalCopies =
    Arc<dyn Fn(TenantId, SnapshotId) -> BoxFuture<'static, Vec<(String, PathBuf)>> + Send + Sync>;

/// The background scrub's settings.
#[derive(Debug, Clone)]
pub struct ScrubConfig {
    /// Plaintext bytes verified per second; 0 = no background scrub.
    pub rate: u64,
    /// Where the cursor is kept.
    pub cursor_file: PathBuf,
    /// A pass starts no sooner than this after the previous one started.
    pub pass_interval: Duration,
}

/// Parse `--scrub-rate`: bytes per second, with an optional `k`, `m`, `g`
/// (powers of 1024, an optional `i`/`iB`/`B`): `0`, `65536`, `4M`, `4MiB`.
pub fn parse_rate(s: &str) -> Result<u64> {
    let t = s.trim();
    let bad = || {
        Error::invalid(format!(
            "scrub rate {s:?}: expected bytes per second, e.g. 0 (off), 1048576, 512k, 4M"
        ))
    };
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..digits].parse().map_err(|_| bad())?;
    let unit = t[digits..].trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches('b').trim_end_matches('i');
    let mult: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// A damaged chunk as reports show it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChunkDamage {
    /// Chunk address (hex).
    pub addr: String,
    pub artifact: String,
    pub offset: u64,
    pub len: u32,
    pub reason: String,
    pub repaired: bool,
}

/// What verifying one snapshot found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SnapshotVerify {
    pub tenant: String,
    pub snapshot: String,
    pub chunks: u64,
    pub damaged: Vec<ChunkDamage>,
}

impl SnapshotVerify {
    /// Chunks still damaged after repair.
    pub fn still_damaged(&self) -> usize {
        self.damaged.iter().filter(|d| !d.repaired).count()
    }
}

/// What a verification run found.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct VerifyReport {
    pub tenants: u64,
    pub snapshots: u64,
    pub chunks_verified: u64,
    pub bytes_verified: u64,
    pub chunks_damaged: u64,
    pub chunks_repaired: u64,
    /// Snapshots with damage (repaired or not).
    pub damaged: Vec<SnapshotVerify>,
    /// What could not be read (the store unreachable, a record unreadable).
    pub errors: Vec<String>,
}

impl VerifyReport {
    /// Chunks found damaged and not repaired.
    pub fn unrepaired(&self) -> u64 {
        self.chunks_damaged - self.chunks_repaired
    }

    fn add(&mut self, v: SnapshotVerify, bytes: u64) {
        self.snapshots += 1;
        self.chunks_verified += v.chunks;
        self.bytes_verified += bytes;
        self.chunks_damaged += v.damaged.len() as u64;
        self.chunks_repaired += v.damaged.iter().filter(|d| d.repaired).count() as u64;
        if !v.damaged.is_empty() {
            self.damaged.push(v);
        }
    }
}

/// Spaces reads out to `rate` bytes per second.
struct Pace {
    rate: u64,
    start: Instant,
    done: u64,
}

impl Pace {
    fn new(rate: u64) -> Self {
        Pace {
            rate,
            start: Instant::now(),
            done: 0,
        }
    }

    /// How long to wait after `bytes` more were read.
    fn after(&mut self, bytes: u64) -> Duration {
        self.done += bytes;
        let due = Duration::from_secs_f64(self.done as f64 / self.rate.max(1) as f64);
        due.saturating_sub(self.start.elapsed())
    }
}

/// Which snapshots a verification covers.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub tenant: Option<TenantId>,
    pub snapshot: Option<SnapshotId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    tenant: TenantId,
    snapshot: SnapshotId,
}

/// Verifies and repairs the store's snapshots.
#[derive(Clone)]
pub struct Scrubber {
    store: Store,
    meta: Meta,
    metrics: Metrics,
    copies: LocalCopies,
}

impl Scrubber {
    pub fn new(store: Store, meta: Meta, metrics: Metrics, copies: LocalCopies) -> Self {
        Scrubber {
            store,
            meta,
            metrics,
            copies,
        }
    }

    /// The scrubber of a daemon: repairs from the manager's local copies.
    pub fn for_manager(m: &Arc<stasis_control::Manager>) -> Self {
        let mgr = m.clone();
        let copies: LocalCopies = Arc::new(move |t, s| {
            let mgr = mgr.clone();
            Box::pin(async move { mgr.local_copies(&t, &s).await })
        });
        Scrubber::new(
            m.snapshots().store().clone(),
            m.meta().clone(),
            m.metrics().clone(),
            copies,
        )
    }

    /// Verify (and repair what can be) every live snapshot `filter` names, at full speed.
    pub async fn verify(&self, filter: &Filter, actor: &str) -> Result<VerifyReport> {
        let mut rep = VerifyReport::default();
        let tenants = match &filter.tenant {
            Some(t) => vec![t.clone()],
            None => self.tenants().await?,
        };
        for t in tenants {
            rep.tenants += 1;
            let ids = match &filter.snapshot {
                Some(s) => {
                    self.store.get_snapshot(&t, s).await?;
                    vec![s.clone()]
                }
                None => match self.live_snapshots(&t).await {
                    Ok(ids) => ids,
                    Err(e) => {
                        rep.errors.push(format!("tenant {t}: {e}"));
                        continue;
                    }
                },
            };
            for id in ids {
                match self.snapshot(&t, &id, None, actor).await {
                    Ok((v, bytes)) => rep.add(v, bytes),
                    Err(e) => rep.errors.push(format!("snapshot {id} of tenant {t}: {e}")),
                }
            }
        }
        Ok(rep)
    }

    async fn tenants(&self) -> Result<Vec<TenantId>> {
        let mut ts = self.store.list_tenants().await?;
        ts.sort();
        Ok(ts)
    }

    /// The tenant's snapshots that have not expired, in id order.
    async fn live_snapshots(&self, t: &TenantId) -> Result<Vec<SnapshotId>> {
        let now = now_ms();
        let mut ids: Vec<SnapshotId> = self
            .store
            .list_snapshots(t)
            .await?
            .into_iter()
            .filter(|r| !r.is_expired(now))
            .map(|r| r.id)
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Verify one snapshot (paced when `pace` is given), repair what this
    /// node's local copies can, then count, mark and audit what was found.
    ///
    /// Boxed: the future is `Send` for every lifetime of its borrows, which
    /// rustc cannot prove through the nested store futures of an `async fn`
    /// when the background pass is spawned.
    fn snapshot<'a>(
        &'a self,
        t: &'a TenantId,
        id: &'a SnapshotId,
        pace: Option<&'a mut Pace>,
        actor: &'a str,
    ) -> BoxFuture<'a, Result<(SnapshotVerify, u64)>> {
        Box::pin(async move {
            let sc = self.store.snapshot_chunks(t, id).await?;
            let bytes: u64 = sc.sites.iter().map(|s| s.len as u64).sum();
            let found = match pace {
                None => self.store.verify_snapshot(&sc).await?,
                Some(p) => self.paced(&sc, p).await?,
            };
            let m = &self.metrics;
            m.scrub_chunks("verified", sc.sites.len() as u64);
            m.scrub_chunks("damaged", found.len() as u64);
            let mut v = SnapshotVerify {
                tenant: t.to_string(),
                snapshot: id.to_string(),
                chunks: sc.sites.len() as u64,
                damaged: Vec::new(),
            };
            if found.is_empty() {
                self.store.clear_damage(t, id).await?;
                return Ok((v, bytes));
            }
            let copies = (self.copies)(t.clone(), id.clone()).await;
            let mut left = Vec::new();
            for d in found {
                let repaired = match self.store.repair_chunk(&sc, &d.site, &copies).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(tenant = %t, snapshot = %id, "repairing a chunk: {e}");
                        false
                    }
                };
                v.damaged.push(ChunkDamage {
                    addr: d.site.addr.to_hex(),
                    artifact: d.site.artifact.clone(),
                    offset: d.site.offset,
                    len: d.site.len,
                    reason: d.reason.clone(),
                    repaired,
                });
                if !repaired {
                    left.push(d);
                }
            }
            let repaired = (v.damaged.len() - left.len()) as u64;
            m.scrub_chunks("repaired", repaired);
            self.record(t, id, &v, left, actor).await?;
            Ok((v, bytes))
        })
    }

    async fn paced(&self, sc: &SnapshotChunks, pace: &mut Pace) -> Result<Vec<DamagedChunk>> {
        let mut out = Vec::new();
        for site in &sc.sites {
            if let Some(reason) = self.store.check_chunk(sc, site).await? {
                out.push(DamagedChunk {
                    site: site.clone(),
                    reason,
                });
            }
            tokio::time::sleep(pace.after(site.len as u64)).await;
        }
        Ok(out)
    }

    /// Mark the snapshot with what is still damaged (or clear its mark),
    /// and audit the finding once: a mark already naming the same chunks
    /// is not audited again by every pass.
    async fn record(
        &self,
        t: &TenantId,
        id: &SnapshotId,
        v: &SnapshotVerify,
        left: Vec<DamagedChunk>,
        actor: &str,
    ) -> Result<()> {
        let before = self.store.damage_of(t, id).await?;
        let same = before.as_ref().is_some_and(|b| {
            b.chunks.iter().map(|c| c.site.addr).collect::<Vec<_>>()
                == left.iter().map(|c| c.site.addr).collect::<Vec<_>>()
        });
        let repaired = v.damaged.len() - left.len();
        let detail = serde_json::json!({
            "damaged": v.damaged.len(),
            "repaired": repaired,
            "chunks": v.damaged,
        });
        if left.is_empty() {
            self.store.clear_damage(t, id).await?;
            tracing::warn!(tenant = %t, snapshot = %id, repaired, "store damage repaired from a local copy");
            self.audit(t, id, actor, "store.repair", detail).await;
            return Ok(());
        }
        let mark = SnapshotDamage {
            tenant: t.clone(),
            snapshot: id.clone(),
            found_at_ms: before
                .as_ref()
                .map(|b| b.found_at_ms)
                .unwrap_or_else(now_ms),
            chunks: left,
        };
        self.store.mark_damage(&mark).await?;
        tracing::error!(tenant = %t, snapshot = %id, "store damage: {}", mark.summary());
        if !same || repaired > 0 {
            self.audit(t, id, actor, "store.damage", detail).await;
        }
        Ok(())
    }

    async fn audit(
        &self,
        t: &TenantId,
        id: &SnapshotId,
        actor: &str,
        action: &str,
        detail: serde_json::Value,
    ) {
        let e = NewAuditEntry {
            tenant: t.clone(),
            actor: actor.into(),
            action: action.into(),
            target: id.to_string(),
            detail,
        };
        if let Err(e) = self.meta.audit(e).await {
            tracing::warn!(error = %e, action, "audit append failed");
        }
    }

    /// Start the background scrub (None when `cfg.rate` is 0).
    pub fn spawn(self, cfg: ScrubConfig) -> Option<tokio::task::JoinHandle<()>> {
        if cfg.rate == 0 {
            return None;
        }
        Some(tokio::spawn(async move {
            loop {
                let started = Instant::now();
                match self.pass(&cfg).await {
                    Ok(rep) => tracing::info!(
                        snapshots = rep.snapshots,
                        chunks = rep.chunks_verified,
                        damaged = rep.chunks_damaged,
                        repaired = rep.chunks_repaired,
                        "store scrub pass done"
                    ),
                    Err(e) => tracing::warn!("store scrub pass stopped: {e}"),
                }
                let wait = cfg.pass_interval.saturating_sub(started.elapsed());
                tokio::time::sleep(wait.max(Duration::from_secs(1))).await;
            }
        }))
    }

    /// One background pass from the cursor on: Ok when it reached the end
    /// (the cursor is removed), Err when the store could not be listed.
    pub async fn pass(&self, cfg: &ScrubConfig) -> Result<VerifyReport> {
        let cursor = read_cursor(&cfg.cursor_file);
        let mut pace = Pace::new(cfg.rate);
        let mut rep = VerifyReport::default();
        for t in self.tenants().await? {
            if cursor.as_ref().is_some_and(|c| t < c.tenant) {
                continue;
            }
            rep.tenants += 1;
            let ids = match self.live_snapshots(&t).await {
                Ok(ids) => ids,
                Err(e) => {
                    rep.errors.push(format!("tenant {t}: {e}"));
                    continue;
                }
            };
            for id in ids {
                if cursor
                    .as_ref()
                    .is_some_and(|c| c.tenant == t && id <= c.snapshot)
                {
                    continue;
                }
                match self
                    .snapshot(&t, &id, Some(&mut pace), "system:scrub")
                    .await
                {
                    Ok((v, bytes)) => rep.add(v, bytes),
                    Err(e) => rep.errors.push(format!("snapshot {id} of tenant {t}: {e}")),
                }
                let c = Cursor {
                    tenant: t.clone(),
                    snapshot: id,
                };
                if let Err(e) = write_cursor(&cfg.cursor_file, &c) {
                    tracing::warn!("scrub cursor: {e}");
                }
            }
        }
        let _ = std::fs::remove_file(&cfg.cursor_file);
        Ok(rep)
    }
}

fn read_cursor(p: &std::path::Path) -> Option<Cursor> {
    serde_json::from_slice(&std::fs::read(p).ok()?).ok()
}

fn write_cursor(p: &std::path::Path, c: &Cursor) -> Result<()> {
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(c)?)?;
    std::fs::rename(&tmp, p)?;
    Ok(())
}

#[cfg(test)]
#[path = "scrub_tests.rs"]
mod tests;
