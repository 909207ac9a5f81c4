//! A token bucket: `burst` tokens, refilled at `per_sec`. Used per sandbox
//! for DNS questions and for upstream queries (the tunnelling budget).

use std::time::Instant;

#[derive(Debug)]
pub struct Bucket {
    tokens: f64,
    burst: f64,
    per_sec: f64,
    last: Instant,
}

impl Bucket {
    pub fn new(burst: u32, per_sec: u32) -> Bucket {
        Bucket {
            tokens: burst as f64,
            burst: burst as f64,
            per_sec: per_sec as f64,
            last: Instant::now(),
        }
    }

    /// Take one token at time `now`; false when empty.
    pub fn take_at(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now.max(self.last);
        self.tokens = (self.tokens + dt * self.per_sec).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    pub fn take(&mut self) -> bool {
        self.take_at(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let mut b = Bucket::new(3, 2);
        let t0 = Instant::now();
        assert!((0..3).all(|_| b.take_at(t0)));
        assert!(!b.take_at(t0));
        assert!(b.take_at(t0 + Duration::from_millis(500)));
        assert!(!b.take_at(t0 + Duration::from_millis(600)));
        // Refill stops at the burst.
        let later = t0 + Duration::from_secs(100);
        assert_eq!((0..10).filter(|_| b.take_at(later)).count(), 3);
    }
}
