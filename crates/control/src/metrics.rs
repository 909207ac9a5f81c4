//! Prometheus metrics of one daemon, served unauthenticated at `GET /metrics`
//! in the text exposition format (version 0.0.4).
//!
//! The registry belongs to the manager ([`crate::Manager::metrics`]), so tests
//! and embedders can read it. Events are counted where they complete
//! (lifecycle operations, reaper actions, HTTP requests); what is a *state*
//! rather than an event is computed at scrape time from its source of truth:
//! sandboxes by state from the metadata, snapshot bytes per tenant from the
//! snapshot store (cached for a few seconds, and dropped from the cache when
//! a pause, snapshot or destroy changes the store).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `stasis_sandboxes` | gauge | `state`, `backend` (every state but `destroyed`) |
//! | `stasis_lifecycle_duration_seconds` | histogram | `op` (create, pause, resume, restore, snapshot, destroy), `backend`, `outcome` (ok, error) |
//! | `stasis_idle_window_hits_total` | counter | `action` (pause, pause_filesystem, destroy) |
//! | `stasis_ttl_expiries_total` | counter | paused sandboxes destroyed at the end of their TTL |
//! | `stasis_reaper_examined_total` | counter | sandboxes the reaper read from the deadline index (what its passes cost) |
//! | `stasis_reaper_pass_seconds` | gauge | how long the reaper's last pass took |
//! | `stasis_lifetime_expiries_total` | counter | running sandboxes destroyed or paused (`on_lifetime`) at `max_lifetime_secs` |
//! | `stasis_leases_taken_over_total` | counter | sandbox leases this node took over from another node |
//! | `stasis_snapshot_bytes` | gauge | `tenant`, `kind` (raw: sum of snapshot sizes; stored: chunk bytes after dedup, compression, encryption) |
//! | `stasis_snapshots` | gauge | `tenant` |
//! | `stasis_http_requests_total` | counter | `method`, `route` (the route template, `unmatched` for none), `status` |
//! | `stasis_http_request_duration_seconds` | histogram | `method`, `route` |
//! | `stasis_metrics_source_errors_total` | counter | `source` (meta, store): a part of a scrape that could not be read |
//! | `stasis_standby` | gauge | `what` (sandboxes, ram_bytes): paused sandboxes this node holds in standby, and the host RAM they hold |
//! | `stasis_standby_released_total` | counter | standbys ended by their window or the node's RAM cap |
//! | `stasis_pauses_downgraded_total` | counter | memory pauses that became filesystem-only: the node ended the frozen processes that held the memory (process backend, `--frozen-secs`) |
//! | `stasis_local_pause_bytes` | gauge | disk this node's paused sandboxes keep beyond their stored snapshots (local pause files, RAM files, disk chains; standby included) |
//! | `stasis_local_pause_cap_bytes` | gauge | the node's cap on it (`--local-pause-max-mb`) |
//! | `stasis_local_pause_evictions_total` | counter | paused sandboxes whose local state the cap evicted (least recently paused first) |
//! | `stasis_resumes_total` | counter | `path` (standby, local, store): which way resumes went |
//! | `stasis_store_scrub_chunks_total` | counter | `result` (verified: read back and checked; damaged: failed the check; repaired: put back from a local copy) |

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use tracing::warn;

use stasis_core::{BackendKind, Error, Result, SandboxState};
use stasis_meta::Meta;
use stasis_store::StoreStats;

use crate::snapshots::Snapshots;

/// Seconds; lifecycle operations take from milliseconds (process backend) to
/// tens of seconds (microVM under TCG).
const LIFECYCLE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
const HTTP_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// What the store's scrub counts of chunks.
pub const SCRUB_RESULTS: [&str; 3] = ["verified", "damaged", "repaired"];

/// How long per-tenant store figures are reused between scrapes.
pub const STORE_STATS_TTL: Duration = Duration::from_secs(10);

/// A lifecycle operation that is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Pause,
    Resume,
    Restore,
    Snapshot,
    Destroy,
}

impl Op {
    pub const ALL: [Op; 6] = [
        Op::Create,
        Op::Pause,
        Op::Resume,
        Op::Restore,
        Op::Snapshot,
        Op::Destroy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Pause => "pause",
            Op::Resume => "resume",
            Op::Restore => "restore",
            Op::Snapshot => "snapshot",
            Op::Destroy => "destroy",
        }
    }

    /// Whether a completed operation of this kind changes what the store holds.
    fn changes_store(self) -> bool {
        matches!(self, Op::Pause | Op::Snapshot | Op::Destroy)
    }
}

/// Per-tenant store figures and when they were read.
type StoreCache = (Instant, Vec<(String, StoreStats)>);

struct Inner {
    registry: Registry,
    sandboxes: IntGaugeVec,
    lifecycle: HistogramVec,
    idle_hits: IntCounterVec,
    ttl_expiries: IntCounter,
    reaper_examined: IntCounter,
    reaper_pass: prometheus::Gauge,
    lifetime_expiries: IntCounter,
    leases_taken_over: IntCounter,
    snapshot_bytes: IntGaugeVec,
    snapshots: IntGaugeVec,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    source_errors: IntCounterVec,
    egress: IntCounterVec,
    standby: IntGaugeVec,
    standby_released: IntCounter,
    pauses_downgraded: IntCounter,
    local_pause_bytes: prometheus::IntGauge,
    local_pause_cap: prometheus::IntGauge,
    local_pause_evictions: IntCounter,
    resumes: IntCounterVec,
    scrub: IntCounterVec,
    store_cache: StdMutex<Option<StoreCache>>,
    /// One scrape at a time recomputes the scrape-time gauges.
    scrape: tokio::sync::Mutex<()>,
}

/// The daemon's metrics: cheap to clone, one registry behind it.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The `path` labels of `stasis_resumes_total`.
pub const RESUME_PATHS: [&str; 3] = ["standby", "local", "store"];

/// The `event` labels of `stasis_egress_total`.
const EGRESS_EVENTS: [&str; 5] = [
    "connection_allowed",
    "connection_denied",
    "dns_refused",
    "dns_limited",
    "upstream_query",
];

fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    r.register(Box::new(c.clone()))
        .expect("metric names are unique and valid");
    c
}

impl Metrics {
    pub fn new() -> Self {
        let r = Registry::new();
        let sandboxes = reg(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "stasis_sandboxes",
                    "Sandboxes by lifecycle state (not counting destroyed ones).",
                ),
                &["state", "backend"],
            )
            .expect("metric"),
        );
        let lifecycle = reg(
            &r,
            HistogramVec::new(
                HistogramOpts::new(
                    "stasis_lifecycle_duration_seconds",
                    "Duration of lifecycle operations, by operation, backend and outcome.",
                )
                .buckets(LIFECYCLE_BUCKETS.to_vec()),
                &["op", "backend", "outcome"],
            )
            .expect("metric"),
        );
        let idle_hits = reg(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_idle_window_hits_total",
                    "Running sandboxes the reaper acted on after their idle window, by action.",
                ),
                &["action"],
            )
            .expect("metric"),
        );
        let ttl_expiries = reg(
            &r,
            IntCounter::new(
                "stasis_ttl_expiries_total",
                "Paused sandboxes destroyed at the end of their paused TTL.",
            )
            .expect("metric"),
        );
        let reaper_examined = reg(
            &r,
            IntCounter::new(
                "stasis_reaper_examined_total",
                "Sandboxes the reaper read from the deadline index (due ones).",
            )
            .expect("metric"),
        );
        let reaper_pass = reg(
            &r,
            prometheus::Gauge::new(
                "stasis_reaper_pass_seconds",
                "How long the reaper's last pass took.",
            )
            .expect("metric"),
        );
        let lifetime_expiries = reg(
            &r,
            IntCounter::new(
                "stasis_lifetime_expiries_total",
                "Running sandboxes destroyed or paused (on_lifetime) when their running time reached max_lifetime_secs.",
            )
            .expect("metric"),
        );
        let leases_taken_over = reg(
            &r,
            IntCounter::new(
                "stasis_leases_taken_over_total",
                "Sandbox leases this node took over from another node.",
            )
            .expect("metric"),
        );
        let snapshot_bytes = reg(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "stasis_snapshot_bytes",
                    "Snapshot bytes per tenant: raw (sum of snapshot sizes) and stored (chunk bytes after deduplication, compression and encryption).",
                ),
                &["tenant", "kind"],
            )
            .expect("metric"),
        );
        let snapshots = reg(
            &r,
            IntGaugeVec::new(
                Opts::new("stasis_snapshots", "Snapshots in the store per tenant."),
                &["tenant"],
            )
            .expect("metric"),
        );
        let http_requests = reg(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_http_requests_total",
                    "HTTP requests by method, route template and status.",
                ),
                &["method", "route", "status"],
            )
            .expect("metric"),
        );
        let http_duration = reg(
            &r,
            HistogramVec::new(
                HistogramOpts::new(
                    "stasis_http_request_duration_seconds",
                    "Time to the response head of HTTP requests, by method and route template.",
                )
                .buckets(HTTP_BUCKETS.to_vec()),
                &["method", "route"],
            )
            .expect("metric"),
        );
        let source_errors = reg(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_metrics_source_errors_total",
                    "Scrapes in which a source of scrape-time metrics could not be read.",
                ),
                &["source"],
            )
            .expect("metric"),
        );
        // Series that exist from the start, so a rate over them is defined
        // before the first event.
        for op in Op::ALL {
            for b in [BackendKind::Process, BackendKind::Microvm] {
                for outcome in ["ok", "error"] {
                    lifecycle.with_label_values(&[op.as_str(), b.as_str(), outcome]);
                }
            }
        }
        for a in ["pause", "pause_filesystem", "destroy"] {
            idle_hits.with_label_values(&[a]);
        }
        for s in ["meta", "store"] {
            source_errors.with_label_values(&[s]);
        }
        let egress = reg(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_egress_total",
                    "Egress decisions of the daemon's per-sandbox proxy and resolver: \
                     connections allowed and denied, DNS questions refused by policy or \
                     by rate limit, questions sent upstream.",
                ),
                &["event"],
            )
            .expect("metric"),
        );
        for e in EGRESS_EVENTS {
            egress.with_label_values(&[e]);
        }
        let standby = reg(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "stasis_standby",
                    "Paused sandboxes this node holds in standby (stopped, no CPU) and the host RAM they hold.",
                ),
                &["what"],
            )
            .expect("metric"),
        );
        let standby_released = reg(
            &r,
            IntCounter::new(
                "stasis_standby_released_total",
                "Standbys ended by their window or by the node's cap on standby RAM.",
            )
            .expect("metric"),
        );
        let pauses_downgraded = reg(
            &r,
            IntCounter::new(
                "stasis_pauses_downgraded_total",
                "Memory pauses that became filesystem-only: the node ended the frozen processes that held the memory.",
            )
            .expect("metric"),
        );
        let local_pause_bytes = reg(
            &r,
            prometheus::IntGauge::new(
                "stasis_local_pause_bytes",
                "Disk this node's paused sandboxes keep beyond their stored snapshots (local pause files, RAM files, disk chains).",
            )
            .expect("metric"),
        );
        let local_pause_cap = reg(
            &r,
            prometheus::IntGauge::new(
                "stasis_local_pause_cap_bytes",
                "The node's cap on the local pause state of its paused sandboxes.",
            )
            .expect("metric"),
        );
        let local_pause_evictions = reg(
            &r,
            IntCounter::new(
                "stasis_local_pause_evictions_total",
                "Paused sandboxes whose local state was evicted by the node's cap (least recently paused first).",
            )
            .expect("metric"),
        );
        let resumes = reg(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_resumes_total",
                    "Resumes by the way they went: standby (the held VM continued), local (this node's files), store (fetched).",
                ),
                &["path"],
            )
            .expect("metric"),
        );
        let scrub = reg(
            &r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_store_scrub_chunks_total",
                    "Store chunks the scrub or `stasis store verify` read back and checked (verified), found damaged, and repaired from a local copy.",
                ),
                &["result"],
            )
            .expect("metric"),
        );
        for r in SCRUB_RESULTS {
            scrub.with_label_values(&[r]);
        }
        for w in ["sandboxes", "ram_bytes"] {
            standby.with_label_values(&[w]);
        }
        for p in RESUME_PATHS {
            resumes.with_label_values(&[p]);
        }
        Metrics {
            inner: Arc::new(Inner {
                registry: r,
                sandboxes,
                lifecycle,
                idle_hits,
                ttl_expiries,
                reaper_examined,
                reaper_pass,
                lifetime_expiries,
                leases_taken_over,
                snapshot_bytes,
                snapshots,
                http_requests,
                http_duration,
                source_errors,
                egress,
                standby,
                standby_released,
                pauses_downgraded,
                local_pause_bytes,
                local_pause_cap,
                local_pause_evictions,
                resumes,
                scrub,
                store_cache: StdMutex::new(None),
                scrape: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Bring the egress counters up to the service's totals (monotonic).
    pub fn egress(&self, t: stasis_net::CounterValues) {
        let vals = [
            t.allowed,
            t.denied,
            t.dns_refused,
            t.dns_limited,
            t.upstream_queries,
        ];
        for (e, v) in EGRESS_EVENTS.iter().zip(vals) {
            let c = self.inner.egress.with_label_values(&[e]);
            c.inc_by(v.saturating_sub(c.get()));
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Start timing an operation. Call [`OpTimer::ok`] when it succeeded; a
    /// timer dropped without it (an error returned early, a cancelled
    /// request) is recorded with outcome `error`.
    pub fn op(&self, op: Op, backend: BackendKind) -> OpTimer {
        OpTimer {
            metrics: self.clone(),
            op,
            backend,
            start: Instant::now(),
            done: false,
        }
    }

    fn observe(&self, op: Op, backend: BackendKind, outcome: &str, secs: f64) {
        self.inner
            .lifecycle
            .with_label_values(&[op.as_str(), backend.as_str(), outcome])
            .observe(secs);
        if op.changes_store() {
            self.store_changed();
        }
    }

    /// Record what the reaper did (the names `Manager::reap_once` returns).
    /// A reaper pass read `n` due sandboxes.
    pub fn reaper_examined(&self, n: usize) {
        self.inner.reaper_examined.inc_by(n as u64);
    }

    /// The reaper's last pass took `d`.
    pub fn reaper_pass(&self, d: Duration) {
        self.inner.reaper_pass.set(d.as_secs_f64());
    }

    /// Sandboxes reaper passes have read so far.
    pub fn reaper_examined_total(&self) -> u64 {
        self.inner.reaper_examined.get()
    }

    pub fn reaped(&self, what: &str) {
        match what {
            "idle_paused" => self.inner.idle_hits.with_label_values(&["pause"]).inc(),
            "idle_paused_filesystem" => self
                .inner
                .idle_hits
                .with_label_values(&["pause_filesystem"])
                .inc(),
            "idle_destroyed" => self.inner.idle_hits.with_label_values(&["destroy"]).inc(),
            "ttl_expired" => self.inner.ttl_expiries.inc(),
            "lifetime_expired" | "lifetime_paused" | "lifetime_paused_filesystem" => {
                self.inner.lifetime_expiries.inc()
            }
            "standby_released" => self.inner.standby_released.inc(),
            "pause_downgraded" => self.inner.pauses_downgraded.inc(),
            other => warn!(action = other, "reaper action without a metric"),
        }
    }

    /// A resume went `path` (one of [`RESUME_PATHS`]).
    pub fn resumed_by(&self, path: &str) {
        if RESUME_PATHS.contains(&path) {
            self.inner.resumes.with_label_values(&[path]).inc();
        }
    }

    /// `n` store chunks were `result` (one of [`SCRUB_RESULTS`]).
    pub fn scrub_chunks(&self, result: &str, n: u64) {
        if SCRUB_RESULTS.contains(&result) {
            self.inner.scrub.with_label_values(&[result]).inc_by(n);
        }
    }

    /// What this node holds in standby now (set before a scrape).
    pub fn set_standby(&self, sandboxes: usize, ram_bytes: u64) {
        let g = &self.inner.standby;
        g.with_label_values(&["sandboxes"]).set(sandboxes as i64);
        g.with_label_values(&["ram_bytes"]).set(ram_bytes as i64);
    }

    /// The local pause state this node holds and its cap, bytes.
    pub fn set_local_pause(&self, bytes: u64, cap: u64) {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.inner.local_pause_bytes.set(clamp(bytes));
        self.inner.local_pause_cap.set(clamp(cap));
    }

    /// The node's cap evicted a paused sandbox's local state.
    pub fn local_pause_evicted(&self) {
        self.inner.local_pause_evictions.inc();
    }

    /// This node took over a sandbox's lease from another node.
    pub fn lease_taken_over(&self) {
        self.inner.leases_taken_over.inc();
    }

    /// Forget cached store figures (something was written or deleted).
    pub fn store_changed(&self) {
        *self.inner.store_cache.lock().expect("store cache") = None;
    }

    pub fn http_request(&self, method: &str, route: &str, status: u16, secs: f64) {
        let status = status.to_string();
        self.inner
            .http_requests
            .with_label_values(&[method, route, status.as_str()])
            .inc();
        self.inner
            .http_duration
            .with_label_values(&[method, route])
            .observe(secs);
    }

    /// Recompute the scrape-time gauges from their sources (the sandboxes in
    /// `meta`, the snapshots in the store) and render everything in the
    /// Prometheus text format.
    pub async fn render(&self, meta: &Meta, snapshots: &Snapshots) -> Result<String> {
        let _one = self.inner.scrape.lock().await;
        self.update_sandboxes(meta).await;
        self.update_store(snapshots).await;
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.inner.registry.gather(), &mut buf)
            .map_err(|e| Error::internal(format!("encoding metrics: {e}")))?;
        String::from_utf8(buf).map_err(|e| Error::internal(format!("encoding metrics: {e}")))
    }

    async fn update_sandboxes(&self, meta: &Meta) {
        let live = match meta.count_live().await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "metrics: cannot list sandboxes");
                self.inner.source_errors.with_label_values(&["meta"]).inc();
                return;
            }
        };
        let g = &self.inner.sandboxes;
        for st in SandboxState::ALL {
            if st == SandboxState::Destroyed {
                continue;
            }
            for b in [BackendKind::Process, BackendKind::Microvm] {
                let n = live
                    .iter()
                    .find(|(s, k, _)| *s == st && *k == b)
                    .map_or(0, |(_, _, n)| *n);
                g.with_label_values(&[st.as_str(), b.as_str()]).set(n);
            }
        }
    }

    async fn update_store(&self, snapshots: &Snapshots) {
        let cached = self
            .inner
            .store_cache
            .lock()
            .expect("store cache")
            .as_ref()
            .filter(|(at, _)| at.elapsed() < STORE_STATS_TTL)
            .map(|(_, v)| v.clone());
        let stats = match cached {
            Some(s) => s,
            None => match store_stats(snapshots).await {
                Ok(s) => {
                    *self.inner.store_cache.lock().expect("store cache") =
                        Some((Instant::now(), s.clone()));
                    s
                }
                Err(e) => {
                    // Keep the last figures rather than reporting zero bytes.
                    warn!(error = %e, "metrics: cannot read store statistics");
                    self.inner.source_errors.with_label_values(&["store"]).inc();
                    return;
                }
            },
        };
        self.inner.snapshot_bytes.reset();
        self.inner.snapshots.reset();
        for (tenant, s) in &stats {
            let t = tenant.as_str();
            self.inner
                .snapshot_bytes
                .with_label_values(&[t, "raw"])
                .set(s.raw_bytes as i64);
            self.inner
                .snapshot_bytes
                .with_label_values(&[t, "stored"])
                .set(s.stored_bytes as i64);
            self.inner
                .snapshots
                .with_label_values(&[t])
                .set(s.snapshots as i64);
        }
    }
}

async fn store_stats(snaps: &Snapshots) -> Result<Vec<(String, StoreStats)>> {
    let mut out = Vec::new();
    for t in snaps.store().list_tenants().await? {
        let s = snaps.stats(&t).await?;
        out.push((t.as_str().to_string(), s));
    }
    Ok(out)
}

/// Times one lifecycle operation; see [`Metrics::op`].
pub struct OpTimer {
    metrics: Metrics,
    op: Op,
    backend: BackendKind,
    start: Instant,
    done: bool,
}

impl OpTimer {
    pub fn ok(mut self) {
        self.finish("ok");
    }

    fn finish(&mut self, outcome: &str) {
        if !self.done {
            self.done = true;
            let secs = self.start.elapsed().as_secs_f64();
            self.metrics.observe(self.op, self.backend, outcome, secs);
        }
    }
}

impl Drop for OpTimer {
    fn drop(&mut self) {
        self.finish("error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(m: &Metrics) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&m.registry().gather(), &mut buf)
            .unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn line<'a>(t: &'a str, prefix: &str) -> &'a str {
        t.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{t}"))
    }

    #[test]
    fn a_timer_dropped_without_ok_is_an_error() {
        let m = Metrics::new();
        m.op(Op::Pause, BackendKind::Microvm).ok();
        drop(m.op(Op::Pause, BackendKind::Microvm));
        drop(m.op(Op::Pause, BackendKind::Microvm));
        let t = text(&m);
        assert!(line(&t, "stasis_lifecycle_duration_seconds_count{backend=\"microvm\",op=\"pause\",outcome=\"ok\"}").ends_with(" 1"));
        assert!(line(&t, "stasis_lifecycle_duration_seconds_count{backend=\"microvm\",op=\"pause\",outcome=\"error\"}").ends_with(" 2"));
        assert!(line(&t, "stasis_lifecycle_duration_seconds_count{backend=\"process\",op=\"pause\",outcome=\"ok\"}").ends_with(" 0"));
    }

    #[test]
    fn reaper_actions_and_lease_takeovers_have_their_counters() {
        let m = Metrics::new();
        for what in [
            "idle_paused",
            "idle_paused",
            "idle_paused_filesystem",
            "idle_destroyed",
            "ttl_expired",
            "lifetime_expired",
            "something_new",
        ] {
            m.reaped(what);
        }
        m.lease_taken_over();
        let t = text(&m);
        assert!(line(&t, "stasis_idle_window_hits_total{action=\"pause\"}").ends_with(" 2"));
        assert!(line(
            &t,
            "stasis_idle_window_hits_total{action=\"pause_filesystem\"}"
        )
        .ends_with(" 1"));
        assert!(line(&t, "stasis_idle_window_hits_total{action=\"destroy\"}").ends_with(" 1"));
        assert!(line(&t, "stasis_ttl_expiries_total ").ends_with(" 1"));
        assert!(line(&t, "stasis_lifetime_expiries_total ").ends_with(" 1"));
        assert!(line(&t, "stasis_leases_taken_over_total ").ends_with(" 1"));
    }

    #[test]
    fn store_changing_operations_drop_the_cached_store_figures() {
        let m = Metrics::new();
        for (op, drops) in [
            (Op::Create, false),
            (Op::Resume, false),
            (Op::Restore, false),
            (Op::Pause, true),
            (Op::Snapshot, true),
            (Op::Destroy, true),
        ] {
            *m.inner.store_cache.lock().unwrap() = Some((Instant::now(), Vec::new()));
            m.op(op, BackendKind::Process).ok();
            assert_eq!(
                m.inner.store_cache.lock().unwrap().is_none(),
                drops,
                "{op:?}"
            );
        }
    }
}
