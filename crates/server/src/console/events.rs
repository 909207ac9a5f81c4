//! The live feed behind `GET /v1/events`: a tenant's audit entries as they
//! are appended (sandbox lifecycle, runs, tool calls, approvals), read from
//! the metadata database so every node of a cluster sees the same feed.
//! The console refreshes the page it shows when an event concerns it.
//!
//! Event ids are the tenant's own positions in the log (its first entry is
//! 1, its next 2, ...), never the log's global sequence numbers, whose gaps
//! would show how much other tenants did in between. A reconnecting client
//! sends its last id back (`Last-Event-ID`); [`start`] maps it to where the
//! feed continues.

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
    /// The tenant's position of the entry (the SSE id).
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

/// Where a feed continues: after the log's entry `seq`, which is the
/// tenant's entry at `position` (both 0 before its first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    seq: i64,
    /// The id of the last event the client has (the tenant's position).
    pub position: i64,
}

/// Where `tenant`'s feed starts: after the event the client last got
/// (`Last-Event-ID`), else after the tenant's newest entry. An id past the
/// tenant's newest entry (never issued) starts after the newest.
pub async fn start(meta: &Meta, tenant: &TenantId, last_id: Option<i64>) -> Result<Cursor> {
    if let Some(position) = last_id.filter(|p| *p >= 0) {
        if position == 0 {
            return Ok(Cursor {
                seq: 0,
                position: 0,
            });
        }
        if let Some(seq) = meta.audit_tenant_seq_at(tenant, position).await? {
            return Ok(Cursor { seq, position });
        }
    }
    let seq = meta
        .audit_list(Some(tenant), None, 1)
        .await?
        .last()
        .map(|e| e.seq)
        .unwrap_or(0);
    let position = meta.audit_tenant_position(tenant, seq).await?;
    Ok(Cursor { seq, position })
}

/// `tenant`'s entries after `at`, as events numbered by the tenant's
/// positions, oldest first, and the cursor after them.
pub async fn after(meta: &Meta, tenant: &TenantId, at: Cursor) -> Result<(Vec<Event>, Cursor)> {
    let mut cur = at;
    let events = meta
        .audit_after(tenant.as_str(), at.seq, BATCH)
        .await?
        .into_iter()
        .map(|e| {
            cur.seq = e.seq;
            cur.position += 1;
            Event {
                seq: cur.position,
                ..Event::from(e)
            }
        })
        .collect();
    Ok((events, cur))
}

/// The feed of `tenant`'s events after `from`, until `stop` is cancelled
/// (the daemon stopping). A failed read is retried at the next poll.
pub fn feed(
    meta: Meta,
    tenant: TenantId,
    from: Cursor,
    stop: CancellationToken,
) -> impl Stream<Item = Event> + Send {
    let events = futures::stream::unfold(
        (
            meta,
            tenant,
            from,
            std::collections::VecDeque::<Event>::new(),
        ),
        |(meta, tenant, mut cur, mut queue)| async move {
            loop {
                if let Some(e) = queue.pop_front() {
                    return Some((e, (meta, tenant, cur, queue)));
                }
                tokio::time::sleep(POLL).await;
                match after(&meta, &tenant, cur).await {
                    Ok((v, next)) => {
                        cur = next;
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

    /// A metadata store (kept alive by the returned dir) and two tenants.
    async fn two_tenants() -> (tempfile::TempDir, Meta, TenantId, TenantId) {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        let a = TenantId::parse("t-a").unwrap();
        let b = TenantId::parse("t-b").unwrap();
        (dir, meta, a, b)
    }

    fn entry(t: &TenantId, target: &str) -> NewAuditEntry {
        NewAuditEntry {
            tenant: t.clone(),
            actor: "x".into(),
            action: "create".into(),
            target: target.into(),
            detail: serde_json::json!({}),
        }
    }

    #[tokio::test]
    async fn the_feed_carries_one_tenants_new_entries() {
        let (_dir, meta, a, b) = two_tenants().await;
        meta.audit(entry(&a, "old")).await.unwrap();
        let from = start(&meta, &a, None).await.unwrap();
        assert_eq!(from.position, 1);
        let stop = CancellationToken::new();
        let mut feed = Box::pin(feed(meta.clone(), a.clone(), from, stop.clone()));
        meta.audit(entry(&b, "other")).await.unwrap();
        meta.audit(entry(&a, "new")).await.unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), feed.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.target, "new");
        // The id is the tenant's position: other tenants' entries leave no gap.
        assert_eq!(e.seq, 2);
        // The daemon stopping ends the feed.
        stop.cancel();
        let end = tokio::time::timeout(Duration::from_secs(5), feed.next()).await;
        assert!(matches!(end, Ok(None)));
    }

    #[tokio::test]
    async fn ids_are_per_tenant_and_resume_where_the_client_was() {
        let (_dir, meta, a, b) = two_tenants().await;
        // Interleaved: a1 b b a2 b a3.
        for (t, target) in [
            (&a, "a1"),
            (&b, "b"),
            (&b, "b"),
            (&a, "a2"),
            (&b, "b"),
            (&a, "a3"),
        ] {
            meta.audit(entry(t, target)).await.unwrap();
        }
        let (all, end) = after(&meta, &a, start(&meta, &a, Some(0)).await.unwrap())
            .await
            .unwrap();
        let ids: Vec<_> = all.iter().map(|e| (e.seq, e.target.as_str())).collect();
        assert_eq!(ids, [(1, "a1"), (2, "a2"), (3, "a3")]);
        assert_eq!(end, start(&meta, &a, None).await.unwrap());
        let (bs, _) = after(&meta, &b, start(&meta, &b, Some(0)).await.unwrap())
            .await
            .unwrap();
        assert_eq!(bs.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        // Last-Event-ID 1: the client continues with a2, a3.
        let (rest, _) = after(&meta, &a, start(&meta, &a, Some(1)).await.unwrap())
            .await
            .unwrap();
        let ids: Vec<_> = rest.iter().map(|e| (e.seq, e.target.as_str())).collect();
        assert_eq!(ids, [(2, "a2"), (3, "a3")]);
        // An id never issued: after the newest.
        let c = start(&meta, &a, Some(99)).await.unwrap();
        assert_eq!(c.position, 3);
        assert!(after(&meta, &a, c).await.unwrap().0.is_empty());
    }
}
