//! Per-token rate limiting of the HTTP API: one token bucket per API token,
//! sized by [`RateLimit`]; an empty bucket is answered 429 with
//! `Retry-After` (see [`super::auth::authenticate`]).

use std::num::NonZeroU32;
use std::sync::Arc;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

pub use crate::auth::RateLimit;

/// Per-token token buckets.
pub struct Limiter {
    inner: Option<DefaultKeyedRateLimiter<String>>,
}

impl Limiter {
    pub fn new(cfg: RateLimit) -> Self {
        let inner = NonZeroU32::new(cfg.per_sec).map(|rate| {
            let burst = NonZeroU32::new(cfg.burst.max(1)).expect("nonzero");
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Limiter { inner }
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
