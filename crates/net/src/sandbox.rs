//! What the egress service keeps for one attached sandbox: its policy
//! (swapped on a runtime change), its synthetic names, its resolution cache,
//! its DNS and upstream budgets, and its counters.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::limit::Bucket;
use crate::names::Names;
use crate::policy::Policy;
use crate::upstream::Upstream;
use crate::Limits;

/// How long a resolution (positive or negative) is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(60);
const CACHE_MAX: usize = 4096;

/// Counters of one sandbox (and, summed, of the service).
#[derive(Debug, Default)]
pub struct Counters {
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    pub dns_queries: AtomicU64,
    pub dns_refused: AtomicU64,
    pub dns_limited: AtomicU64,
    pub upstream_queries: AtomicU64,
}

/// A copy of [`Counters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterValues {
    /// Connections the proxy admitted.
    pub allowed: u64,
    /// Connections the proxy refused.
    pub denied: u64,
    /// DNS questions received.
    pub dns_queries: u64,
    /// DNS questions for names the policy does not admit.
    pub dns_refused: u64,
    /// DNS questions refused by the rate limit or the upstream budget.
    pub dns_limited: u64,
    /// Questions sent upstream (the hosts view costs none).
    pub upstream_queries: u64,
}

impl Counters {
    pub fn values(&self) -> CounterValues {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CounterValues {
            allowed: g(&self.allowed),
            denied: g(&self.denied),
            dns_queries: g(&self.dns_queries),
            dns_refused: g(&self.dns_refused),
            dns_limited: g(&self.dns_limited),
            upstream_queries: g(&self.upstream_queries),
        }
    }
}

pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Why a name could not be resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolveError {
    /// The upstream budget is spent.
    Budget,
    /// The upstream did not answer.
    Upstream,
}

pub struct SandboxNet {
    pub policy: RwLock<Arc<Policy>>,
    pub names: Mutex<Names>,
    cache: Mutex<HashMap<String, (Instant, Vec<Ipv4Addr>)>>,
    pub dns_bucket: Mutex<Bucket>,
    upstream_bucket: Mutex<Bucket>,
    pub counters: Counters,
    /// The service's totals, bumped beside this sandbox's counters.
    pub totals: Arc<Counters>,
    upstream: Arc<Upstream>,
    pub conns: Arc<tokio::sync::Semaphore>,
}

impl SandboxNet {
    pub fn new(
        policy: Policy,
        upstream: Arc<Upstream>,
        limits: &Limits,
        totals: Arc<Counters>,
    ) -> SandboxNet {
        SandboxNet {
            policy: RwLock::new(Arc::new(policy)),
            names: Mutex::new(Names::default()),
            cache: Mutex::new(HashMap::new()),
            dns_bucket: Mutex::new(Bucket::new(limits.dns_burst, limits.dns_per_sec)),
            upstream_bucket: Mutex::new(Bucket::new(
                limits.upstream_burst,
                limits.upstream_per_sec,
            )),
            counters: Counters::default(),
            totals,
            upstream,
            conns: Arc::new(tokio::sync::Semaphore::new(limits.max_connections)),
        }
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policy.read().unwrap().clone()
    }

    /// Count on this sandbox and on the service's totals.
    pub fn count(&self, f: impl Fn(&Counters) -> &AtomicU64) {
        bump(f(&self.counters));
        bump(f(&self.totals));
    }

    /// The real IPv4 addresses of `name`: the hosts view, else the cache,
    /// else one upstream query charged to the sandbox's budget.
    pub async fn resolve(&self, name: &str) -> Result<Vec<Ipv4Addr>, ResolveError> {
        if let Some(v) = self.upstream.from_hosts(name) {
            return Ok(v);
        }
        let now = Instant::now();
        if let Some((t, v)) = self.cache.lock().unwrap().get(name) {
            if now.duration_since(*t) < CACHE_TTL {
                return Ok(v.clone());
            }
        }
        if !self.upstream_bucket.lock().unwrap().take() {
            return Err(ResolveError::Budget);
        }
        self.count(|c| &c.upstream_queries);
        let v = self
            .upstream
            .query(name)
            .await
            .map_err(|_| ResolveError::Upstream)?;
        let mut cache = self.cache.lock().unwrap();
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (t, _)| now.duration_since(*t) < CACHE_TTL);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(name.to_string(), (now, v.clone()));
        Ok(v)
    }
}
