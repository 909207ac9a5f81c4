//! Per-token bookkeeping of the HTTP API: rate limiting (one token bucket
//! per API token, sized by [`RateLimit`]; an empty bucket is answered 429
//! with `Retry-After`, see [`super::auth::authenticate`]) and when a token's
//! `last_used_at` is next due for a write (at most once a minute per token,
//! so a busy token does not cost a database write per request).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

pub use crate::auth::RateLimit;

/// Per-token token buckets.
pub struct Limiter {
    inner: Option<DefaultKeyedRateLimiter<String>>,
    /// When each token's use was last written.
    used: Mutex<HashMap<String, Instant>>,
}

/// How often a token's `last_used_at` is written at most.
pub const LAST_USED_EVERY: Duration = Duration::from_secs(60);

impl Limiter {
    pub fn new(cfg: RateLimit) -> Self {
        let inner = NonZeroU32::new(cfg.per_sec).map(|rate| {
            let burst = NonZeroU32::new(cfg.burst.max(1)).expect("nonzero");
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Limiter {
            inner,
            used: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a use of `key` now should be written as its `last_used_at`
    /// (the first use, or the first after `every`); notes it if so.
    pub fn use_due(&self, key: &str, every: Duration) -> bool {
        let now = Instant::now();
        let mut used = self.used.lock().expect("used");
        if used.len() > 100_000 {
            used.retain(|_, t| now.duration_since(*t) < every);
        }
        match used.get(key) {
            Some(t) if now.duration_since(*t) < every => false,
            _ => {
                used.insert(key.to_string(), now);
                true
            }
        }
    }

    /// Take one request from `key`'s bucket; on refusal, the seconds to wait.
    pub fn check(&self, key: &str) -> std::result::Result<(), u64> {
        let Some(l) = &self.inner else {
            return Ok(());
        };
        match l.check_key(&key.to_string()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Err(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
            }
        }
    }
}

/// Shared auth state of the router.
pub type SharedLimiter = Arc<Limiter>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_use_is_due_once_per_window_per_token() {
        let l = Limiter::new(RateLimit::default());
        assert!(l.use_due("a", Duration::from_secs(60)));
        assert!(!l.use_due("a", Duration::from_secs(60)));
        assert!(l.use_due("b", Duration::from_secs(60)));
        assert!(l.use_due("a", Duration::ZERO), "window over");
    }

    #[test]
    fn limiter_buckets_are_per_token() {
        let l = Limiter::new(RateLimit {
            per_sec: 1,
            burst: 2,
        });
        assert!(l.check("a").is_ok());
        assert!(l.check("a").is_ok());
        let wait = l.check("a").unwrap_err();
        assert!(wait >= 1, "{wait}");
        assert!(l.check("b").is_ok(), "another token's bucket is separate");
        let off = Limiter::new(RateLimit {
            per_sec: 0,
            burst: 0,
        });
        assert!((0..1000).all(|_| off.check("a").is_ok()));
    }
}
