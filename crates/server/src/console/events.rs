//! The live feed behind `GET /v1/events`: a tenant's audit entries as they
//! are appended (sandbox lifecycle, runs, tool calls, approvals), read from
//! the metadata database so every node of a cluster sees the same feed.
//! The console refreshes the page it shows when an event concerns it.

use std::time::Duration;

use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use stasis_core::{Result, TenantId};
use stasis_meta::{AuditEntry, Meta};

/// How often the feed looks for new entries.
pub const POLL: Duration = Duration::from_millis(700);
/// At most this many entries per look.
const BATCH: i64 = 200;

/// One event of the feed (an audit entry without its hashes and details).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub seq: i64,
    pub ts_ms: i64,
    pub action: String,
    pub target: String,
    pub actor: String,
}

impl From<AuditEntry> for Event {
    fn from(e: AuditEntry) -> Self {
        Event {
            seq: e.seq,
            ts_ms: e.ts_ms,
            action: e.action,
            target: e.target,
            actor: e.actor,
        }
    }
}

/// The newest sequence number of `tenant`'s entries (0 for none): the feed
/// starts after it.
pub async fn latest(meta: &Meta, tenant: &TenantId) -> Result<i64> {
    Ok(meta
        .audit_list(Some(tenant), None, 1)
        .await?
        .last()
        .map(|e| e.seq)
        .unwrap_or(0))
}

/// `tenant`'s entries after `seq`, as events, oldest first.
pub async fn after(meta: &Meta, tenant: &TenantId, seq: i64) -> Result<Vec<Event>> {
    Ok(meta
        .audit_after(tenant.as_str(), seq, BATCH)
        .await?
        .into_iter()
        .map(Event::from)
        .collect())
}

/// The feed of `tenant`'s events after `from`, until `stop` is cancelled
/// (the daemon stopping). A failed read is retried at the next poll.
pub fn feed(
    meta: Meta,
    tenant: TenantId,
    from: i64,
    stop: CancellationToken,
) -> impl Stream<Item = Event> + Send {
    let events = futures::stream::unfold(
        (
            meta,
            tenant,
            from,
            std::collections::VecDeque::<Event>::new(),
        ),
        |(meta, tenant, mut seq, mut queue)| async move {
            loop {
                if let Some(e) = queue.pop_front() {
                    return Some((e, (meta, tenant, seq, queue)));
                }
                tokio::time::sleep(POLL).await;
                match after(&meta, &tenant, seq).await {
                    Ok(v) => {
                        if let Some(last) = v.last() {
                            seq = last.seq;
                        }
                        queue.extend(v);
                    }
                    Err(e) => tracing::debug!(error = %e, "event feed read failed"),
                }
            }
        },
    );
    events.take_until(stop.cancelled_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_meta::NewAuditEntry;

    #[tokio::test]
    async fn the_feed_carries_one_tenants_new_entries() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        let a = TenantId::parse("t-a").unwrap();
        let b = TenantId::parse("t-b").unwrap();
        let entry = |t: &TenantId, target: &str| NewAuditEntry {
            tenant: t.clone(),
            actor: "x".into(),
            action: "create".into(),
            target: target.into(),
            detail: serde_json::json!({}),
        };
        meta.audit(entry(&a, "old")).await.unwrap();
        let from = latest(&meta, &a).await.unwrap();
        assert!(from > 0);
        let stop = CancellationToken::new();
        let mut feed = Box::pin(feed(meta.clone(), a.clone(), from, stop.clone()));
        meta.audit(entry(&b, "other")).await.unwrap();
        meta.audit(entry(&a, "new")).await.unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), feed.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.target, "new");
        // The daemon stopping ends the feed.
        stop.cancel();
        let end = tokio::time::timeout(Duration::from_secs(5), feed.next()).await;
        assert!(matches!(end, Ok(None)));
    }
}
