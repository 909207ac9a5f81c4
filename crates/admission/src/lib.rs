//! Per-sandbox limit on in-flight work.
//!
//! Every request that uses a running sandbox (exec, files, sessions) holds a
//! permit for as long as it runs. At most `max_inflight` run at once; up to
//! `max_queued` more wait (first come, first served) for at most `max_wait`;
//! anything beyond is refused at once with 429 `overloaded` and
//! `Retry-After`. So a burst of requests on one sandbox queues on the host
//! instead of being poured into the sandbox, and slowness under load is
//! answered as "busy, retry" rather than mistaken for a dead sandbox.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stasis_core::{Error, ErrorCode, Result};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// `Retry-After` (seconds) sent with a 429 `overloaded`.
pub const RETRY_AFTER_SECS: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightLimits {
    /// Requests running in one sandbox at once (>= 1).
    pub max_inflight: usize,
    /// Requests waiting for a slot (0: refuse at once when all slots are taken).
    pub max_queued: usize,
    /// Longest a queued request waits for a slot before it is refused.
    pub max_wait: Duration,
}

impl Default for InflightLimits {
    fn default() -> Self {
        InflightLimits {
            max_inflight: 16,
            max_queued: 64,
            max_wait: Duration::from_secs(30),
        }
    }
}

impl InflightLimits {
    pub fn validate(&self) -> Result<()> {
        if self.max_inflight == 0 || self.max_inflight > Semaphore::MAX_PERMITS {
            return Err(Error::invalid(
                "the in-flight limit per sandbox must be at least 1",
            ));
        }
        Ok(())
    }
}

/// The limiter of one sandbox.
pub struct Inflight {
    limits: InflightLimits,
    slots: Arc<Semaphore>,
    queued: AtomicUsize,
}

/// A slot held by one request; released on drop.
#[derive(Debug)]
pub struct Permit {
    _p: OwnedSemaphorePermit,
}

/// Leaves the queue on drop (also when the waiting request is cancelled).
struct InQueue<'a>(&'a AtomicUsize);

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Inflight {
    pub fn new(limits: InflightLimits) -> Self {
        let n = limits.max_inflight.clamp(1, Semaphore::MAX_PERMITS);
        Inflight {
            limits,
            slots: Arc::new(Semaphore::new(n)),
            queued: AtomicUsize::new(0),
        }
    }

    /// Requests holding a slot now.
    pub fn in_flight(&self) -> usize {
        self.limits.max_inflight.max(1) - self.slots.available_permits()
    }

    /// Requests waiting for a slot now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    fn refuse(&self, what: &str, why: &str) -> Error {
        Error::new(
            ErrorCode::Overloaded,
            format!(
                "{what} {why} (limit: {} in flight, {} queued); retry after {RETRY_AFTER_SECS} s",
                self.limits.max_inflight, self.limits.max_queued
            ),
        )
    }

    /// A slot: at once if one is free, else after waiting in the queue;
    /// `overloaded` when the queue is full or the wait exceeds `max_wait`.
    /// `what` names the sandbox in the error.
    pub async fn acquire(&self, what: &str) -> Result<Permit> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Ok(Permit { _p: p });
        }
        let joined = self
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                (q < self.limits.max_queued).then_some(q + 1)
            });
        if joined.is_err() {
            return Err(self.refuse(what, "has all its request slots taken and its queue full"));
        }
        let _in_queue = InQueue(&self.queued);
        match tokio::time::timeout(self.limits.max_wait, self.slots.clone().acquire_owned()).await {
            Ok(Ok(p)) => Ok(Permit { _p: p }),
            Ok(Err(_)) => Err(Error::internal("in-flight limiter closed")),
            Err(_) => Err(self.refuse(
                what,
                &format!(
                    "had no free request slot within {} ms",
                    self.limits.max_wait.as_millis()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(inflight: usize, queued: usize, wait_ms: u64) -> InflightLimits {
        InflightLimits {
            max_inflight: inflight,
            max_queued: queued,
            max_wait: Duration::from_millis(wait_ms),
        }
    }

    #[tokio::test]
    async fn free_slots_are_granted_at_once_and_released_on_drop() {
        let l = Inflight::new(limits(3, 0, 10));
        let a = l.acquire("sb").await.unwrap();
        let b = l.acquire("sb").await.unwrap();
        let c = l.acquire("sb").await.unwrap();
        assert_eq!(l.in_flight(), 3);
        // No queue: the fourth is refused with the stable code.
        let e = l.acquire("sb-x").await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Overloaded);
        assert_eq!(e.code.http_status(), 429);
        assert!(
            e.message.contains("sb-x") && e.message.contains("retry"),
            "{e}"
        );
        drop(b);
        assert_eq!(l.in_flight(), 2);
        let _d = l.acquire("sb").await.unwrap();
        drop((a, c));
        assert_eq!(l.in_flight(), 1);
    }

    /// Every request of a burst of any size is either run (never more than
    /// the limit at once) or refused; none is lost and none hangs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_is_run_within_the_limit_or_refused() {
        for (inflight, queued, burst) in [(1, 0, 50), (4, 8, 200), (16, 64, 500), (8, 1000, 300)] {
            let l = Arc::new(Inflight::new(limits(inflight, queued, 60_000)));
            let running = Arc::new(AtomicUsize::new(0));
            let peak = Arc::new(AtomicUsize::new(0));
            let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
            let mut tasks = Vec::new();
            for _ in 0..burst {
                let (l, running, peak, mut gate) =
                    (l.clone(), running.clone(), peak.clone(), gate_rx.clone());
                tasks.push(tokio::spawn(async move {
                    let p = l.acquire("sb").await?;
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    // Hold the slot until the whole burst has been submitted.
                    let _ = gate.wait_for(|open| *open).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    drop(p);
                    Ok::<(), Error>(())
                }));
            }
            // Wait until every request either holds a slot, waits, or was refused.
            loop {
                let settled =
                    tasks.iter().filter(|t| t.is_finished()).count() + l.in_flight() + l.queued();
                if settled == burst {
                    break;
                }
                tokio::task::yield_now().await;
            }
            gate_tx.send(true).unwrap();
            let (mut ok, mut refused) = (0, 0);
            for t in tasks {
                match t.await.unwrap() {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        assert_eq!(e.code, ErrorCode::Overloaded, "{e}");
                        refused += 1
                    }
                }
            }
            let admitted = (inflight + queued).min(burst);
            assert_eq!(ok, admitted, "limits {inflight}/{queued}, burst {burst}");
            assert_eq!(refused, burst - admitted);
            assert!(peak.load(Ordering::SeqCst) <= inflight);
            assert_eq!((l.in_flight(), l.queued()), (0, 0));
        }
    }

    #[tokio::test]
    async fn a_queued_request_gets_the_next_free_slot() {
        let l = Arc::new(Inflight::new(limits(1, 1, 60_000)));
        let first = l.acquire("sb").await.unwrap();
        let l2 = l.clone();
        let waiter = tokio::spawn(async move { l2.acquire("sb").await });
        while l.queued() == 0 {
            tokio::task::yield_now().await;
        }
        // The queue (1) is full: a third is refused without waiting.
        assert_eq!(
            l.acquire("sb").await.unwrap_err().code,
            ErrorCode::Overloaded
        );
        drop(first);
        let p = waiter.await.unwrap().unwrap();
        assert_eq!((l.in_flight(), l.queued()), (1, 0));
        drop(p);
    }

    #[tokio::test]
    async fn a_wait_beyond_max_wait_is_refused_and_leaves_the_queue() {
        let l = Inflight::new(limits(1, 4, 50));
        let _held = l.acquire("sb").await.unwrap();
        let e = l.acquire("sb").await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Overloaded);
        assert!(e.message.contains("within 50 ms"), "{e}");
        assert_eq!(l.queued(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_the_queue() {
        let l = Arc::new(Inflight::new(limits(1, 1, 60_000)));
        let _held = l.acquire("sb").await.unwrap();
        let l2 = l.clone();
        let waiter = tokio::spawn(async move { l2.acquire("sb").await.map(|_| ()) });
        while l.queued() == 0 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(l.queued(), 0);
        // The queue place is free again.
        let l3 = l.clone();
        let again = tokio::spawn(async move { l3.acquire("sb").await.map(|_| ()) });
        while l.queued() == 0 {
            tokio::task::yield_now().await;
        }
        again.abort();
    }

    #[test]
    fn limits_are_checked() {
        assert!(limits(0, 1, 1).validate().is_err());
        assert!(limits(1, 0, 1).validate().is_ok());
        assert!(InflightLimits::default().validate().is_ok());
    }
}
