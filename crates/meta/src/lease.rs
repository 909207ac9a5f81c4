//! Nodes and leases: several daemons sharing one database.
//!
//! Every daemon registers a row in `nodes` and heartbeats it. A running
//! sandbox is owned by exactly one node through its row in `leases`: the
//! holder renews it with its heartbeat; when the holder stops renewing, the
//! lease expires and another node may take it. Ownership is decided here,
//! never by a daemon's memory.
//!
//! Every change of holder increments the lease's fencing token (a monotonic
//! integer per sandbox that never goes back, even across release and
//! re-acquire). Takeover is a conditional UPDATE on the token a contender
//! read, so of two nodes racing for one expired lease exactly one moves the
//! token (the other's UPDATE matches no row: on PostgreSQL it waits on the
//! row lock and then re-checks its WHERE against the winner's row). State
//! writes then carry a [`Fence`] checked in the same statement
//! ([`Meta::transition_fenced`]), so a node that lost its lease, however
//! late it notices, cannot write.

use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::Row;

use stasis_core::{now_ms, Error, Result, SandboxId, SnapshotId};

use crate::{db_err, Fence, Meta};

/// A registered daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: String,
    /// Base URL other nodes forward requests to.
    pub url: String,
    pub started_at_ms: i64,
    pub heartbeat_at_ms: i64,
}

impl NodeInfo {
    /// Alive: heartbeat seen within `ttl_ms` of `now`.
    pub fn alive(&self, now: i64, ttl_ms: i64) -> bool {
        now - self.heartbeat_at_ms <= ttl_ms
    }
}

/// A sandbox's lease row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub sandbox: String,
    /// Holder; None once released (the sandbox paused).
    pub node: Option<String>,
    pub token: i64,
    pub expires_at_ms: i64,
    pub acquired_at_ms: i64,
}

impl Lease {
    /// Held by somebody and not expired at `now`.
    pub fn live(&self, now: i64) -> bool {
        self.node.is_some() && self.expires_at_ms > now
    }

    pub fn fence(&self) -> Option<Fence> {
        self.node.as_ref().map(|n| Fence {
            node: n.clone(),
            token: self.token,
        })
    }
}

/// Outcome of [`Meta::lease_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The caller holds the lease now. `previous` is the row it replaced
    /// (None for a sandbox never leased before): an expired holder there
    /// means the caller took the sandbox over from a node that stopped.
    Acquired {
        fence: Fence,
        previous: Option<Lease>,
    },
    /// Another node holds a live lease.
    Held(Lease),
}

fn decode_lease(r: &AnyRow) -> Result<Lease> {
    Ok(Lease {
        sandbox: r.try_get("sandbox").map_err(db_err)?,
        node: r.try_get("node").map_err(db_err)?,
        token: r.try_get("token").map_err(db_err)?,
        expires_at_ms: r.try_get("expires_at_ms").map_err(db_err)?,
        acquired_at_ms: r.try_get("acquired_at_ms").map_err(db_err)?,
    })
}

fn decode_node(r: &AnyRow) -> Result<NodeInfo> {
    Ok(NodeInfo {
        id: r.try_get("id").map_err(db_err)?,
        url: r.try_get("url").map_err(db_err)?,
        started_at_ms: r.try_get("started_at_ms").map_err(db_err)?,
        heartbeat_at_ms: r.try_get("heartbeat_at_ms").map_err(db_err)?,
    })
}

impl Meta {
    /// Register node `id` (or update its URL) as started now.
    pub async fn node_register(&self, id: &str, url: &str) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO nodes (id, url, started_at_ms, heartbeat_at_ms) VALUES ($1, $2, $3, $3)
             ON CONFLICT (id) DO UPDATE SET url = $2, started_at_ms = $3, heartbeat_at_ms = $3",
        )
        .bind(id)
        .bind(url)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// Heartbeat of node `id`: note it alive and push the expiry of every
    /// lease it holds to `now + lease_ms`. Returns the leases it still holds
    /// (a lease taken over by another node is not among them).
    pub async fn node_heartbeat(&self, id: &str, lease_ms: i64) -> Result<Vec<Lease>> {
        let now = now_ms();
        let mut conn = self.begin().await?;
        let r = async {
            let done = sqlx::query("UPDATE nodes SET heartbeat_at_ms = $1 WHERE id = $2")
                .bind(now)
                .bind(id)
                .execute(&mut *conn)
                .await
                .map_err(db_err)?;
            if done.rows_affected() != 1 {
                return Err(Error::state(format!("node {id} is not registered")));
            }
            sqlx::query("UPDATE leases SET expires_at_ms = $1 WHERE node = $2")
                .bind(now + lease_ms)
                .bind(id)
                .execute(&mut *conn)
                .await
                .map_err(db_err)?;
            let rows = sqlx::query("SELECT * FROM leases WHERE node = $1 ORDER BY sandbox")
                .bind(id)
                .fetch_all(&mut *conn)
                .await
                .map_err(db_err)?;
            rows.iter().map(decode_lease).collect::<Result<Vec<_>>>()
        }
        .await;
        Meta::end(&mut conn, r.is_ok()).await?;
        r
    }

    pub async fn node_get(&self, id: &str) -> Result<NodeInfo> {
        let row = sqlx::query("SELECT * FROM nodes WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found(format!("node {id}")))?;
        decode_node(&row)
    }

    pub async fn nodes(&self) -> Result<Vec<NodeInfo>> {
        let rows = sqlx::query("SELECT * FROM nodes ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter().map(decode_node).collect()
    }

    pub async fn lease_get(&self, sandbox: &SandboxId) -> Result<Option<Lease>> {
        let row = sqlx::query("SELECT * FROM leases WHERE sandbox = $1")
            .bind(sandbox.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        row.as_ref().map(decode_lease).transpose()
    }

    /// Take the lease of `sandbox` for `node` until `now + lease_ms`, if
    /// nobody else holds a live one. Taking it from an expired or released
    /// holder (or from this node's own previous incarnation) moves the
    /// fencing token on by one; exactly one of several contenders succeeds.
    pub async fn lease_acquire(
        &self,
        sandbox: &SandboxId,
        node: &str,
        lease_ms: i64,
    ) -> Result<Acquire> {
        let now = now_ms();
        let fresh = sqlx::query(
            "INSERT INTO leases (sandbox, node, token, expires_at_ms, acquired_at_ms)
             VALUES ($1, $2, 1, $3, $4) ON CONFLICT (sandbox) DO NOTHING",
        )
        .bind(sandbox.as_str())
        .bind(node)
        .bind(now + lease_ms)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if fresh.rows_affected() == 1 {
            return Ok(Acquire::Acquired {
                fence: Fence {
                    node: node.to_string(),
                    token: 1,
                },
                previous: None,
            });
        }
        let cur = self
            .lease_get(sandbox)
            .await?
            .ok_or_else(|| Error::internal(format!("lease of {sandbox} vanished")))?;
        if cur.live(now) && cur.node.as_deref() != Some(node) {
            return Ok(Acquire::Held(cur));
        }
        // Compare-and-set on the token we read: a contender that moved it
        // first makes this match nothing.
        let done = sqlx::query(
            "UPDATE leases SET node = $1, token = token + 1, expires_at_ms = $2, acquired_at_ms = $3
             WHERE sandbox = $4 AND token = $5",
        )
        .bind(node)
        .bind(now + lease_ms)
        .bind(now)
        .bind(sandbox.as_str())
        .bind(cur.token)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() == 1 {
            return Ok(Acquire::Acquired {
                fence: Fence {
                    node: node.to_string(),
                    token: cur.token + 1,
                },
                previous: Some(cur),
            });
        }
        let now_row = self
            .lease_get(sandbox)
            .await?
            .ok_or_else(|| Error::internal(format!("lease of {sandbox} vanished")))?;
        Ok(Acquire::Held(now_row))
    }

    /// Give the lease up (the sandbox paused or was destroyed): the row stays,
    /// without a holder, so the token keeps growing. False when `fence` no
    /// longer held it.
    pub async fn lease_release(&self, sandbox: &SandboxId, fence: &Fence) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE leases SET node = NULL, expires_at_ms = 0
             WHERE sandbox = $1 AND node = $2 AND token = $3",
        )
        .bind(sandbox.as_str())
        .bind(&fence.node)
        .bind(fence.token)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether `fence` still holds the lease of `sandbox`.
    pub async fn fence_holds(&self, sandbox: &SandboxId, fence: &Fence) -> Result<bool> {
        Ok(self
            .lease_get(sandbox)
            .await?
            .is_some_and(|l| l.node.as_deref() == Some(&fence.node) && l.token == fence.token))
    }

    /// Record a periodic checkpoint of a running sandbox, fenced. Returns the
    /// checkpoint it replaces (for the caller to delete).
    pub async fn set_checkpoint(
        &self,
        id: &SandboxId,
        snapshot: &SnapshotId,
        at_ms: i64,
        fence: Option<&Fence>,
    ) -> Result<Option<SnapshotId>> {
        let old = self.get(id).await?.checkpoint_snapshot;
        let done = sqlx::query(
            "UPDATE sandboxes SET checkpoint_snapshot = $1, checkpoint_at_ms = $2, updated_at_ms = $3
             WHERE id = $4 AND state = 'running'
             AND ($5 IS NULL OR EXISTS (SELECT 1 FROM leases l
                  WHERE l.sandbox = $4 AND l.node = $5 AND l.token = $6))",
        )
        .bind(snapshot.as_str())
        .bind(at_ms)
        .bind(now_ms())
        .bind(id.as_str())
        .bind(fence.map(|f| f.node.clone()))
        .bind(fence.map(|f| f.token))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!(
                "sandbox {id}: checkpoint not recorded (not running, or its lease was lost)"
            )));
        }
        Ok(old.filter(|o| o != snapshot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::TestDb;
    use stasis_core::{BackendKind, ErrorCode, Manifest, SandboxState, TenantId};

    /// Two independent connections (pools) to one database, as two daemons have.
    async fn two_nodes(db: &TestDb, url: Option<&str>) -> (Meta, Meta) {
        match url {
            Some(u) => (
                Meta::connect(u).await.unwrap(),
                Meta::connect(u).await.unwrap(),
            ),
            None => (db.meta.clone(), db.meta.clone()),
        }
    }

    async fn dbs() -> Vec<(TestDb, Option<String>)> {
        let mut v = vec![(crate::testdb::sqlite().await, None)];
        if let Some(url) = crate::testing::pg_fresh_database_from_env().await.unwrap() {
            v.push((
                TestDb {
                    name: "postgres",
                    meta: Meta::connect(&url).await.unwrap(),
                    _dir: None,
                },
                Some(url),
            ));
        }
        v
    }

    async fn running_sandbox(m: &Meta) -> SandboxId {
        let id = SandboxId::generate();
        m.insert_sandbox(
            &id,
            &TenantId::parse("t-a").unwrap(),
            &Manifest::default(),
            BackendKind::Process,
            None,
        )
        .await
        .unwrap();
        m.transition(
            &id,
            SandboxState::Creating,
            SandboxState::Running,
            Default::default(),
        )
        .await
        .unwrap();
        id
    }

    #[tokio::test]
    async fn racing_for_one_expired_lease_exactly_one_wins() {
        for (db, url) in dbs().await {
            eprintln!("engine {}", db.name);
            let (a, b) = two_nodes(&db, url.as_deref()).await;
            let id = running_sandbox(&a).await;
            let mut token = match a.lease_acquire(&id, "n0", 60_000).await.unwrap() {
                Acquire::Acquired { fence, previous } => {
                    assert!(previous.is_none());
                    fence.token
                }
                other => panic!("{other:?}"),
            };
            for round in 0..25 {
                // The holder died: its lease expires. Two nodes race for it.
                sqlx::query("UPDATE leases SET expires_at_ms = 0 WHERE sandbox = $1")
                    .bind(id.as_str())
                    .execute(a.pool())
                    .await
                    .unwrap();
                let (ra, rb) = tokio::join!(
                    a.lease_acquire(&id, "n1", 60_000),
                    b.lease_acquire(&id, "n2", 60_000)
                );
                let results = [ra.unwrap(), rb.unwrap()];
                let wins: Vec<&Fence> = results
                    .iter()
                    .filter_map(|r| match r {
                        Acquire::Acquired { fence, .. } => Some(fence),
                        Acquire::Held(_) => None,
                    })
                    .collect();
                assert_eq!(wins.len(), 1, "round {round}: {results:?}");
                let lease = a.lease_get(&id).await.unwrap().unwrap();
                assert_eq!(wins[0].token, token + 1, "round {round}");
                assert_eq!(lease.token, wins[0].token);
                assert_eq!(lease.node.as_deref(), Some(wins[0].node.as_str()));
                // The loser was told who holds it now.
                for r in &results {
                    if let Acquire::Held(l) = r {
                        assert_eq!(l.node, lease.node);
                    }
                }
                token = wins[0].token;
            }
        }
    }

    #[tokio::test]
    async fn a_live_lease_is_not_taken_and_a_stale_token_cannot_write() {
        for (db, url) in dbs().await {
            eprintln!("engine {}", db.name);
            let (a, b) = two_nodes(&db, url.as_deref()).await;
            a.node_register("n1", "http://127.0.0.1:1").await.unwrap();
            b.node_register("n2", "http://127.0.0.1:2").await.unwrap();
            let id = running_sandbox(&a).await;
            let f1 = match a.lease_acquire(&id, "n1", 60_000).await.unwrap() {
                Acquire::Acquired { fence, .. } => fence,
                other => panic!("{other:?}"),
            };
            // Live: n2 is refused and told who holds it.
            match b.lease_acquire(&id, "n2", 60_000).await.unwrap() {
                Acquire::Held(l) => assert_eq!(l.node.as_deref(), Some("n1")),
                other => panic!("{other:?}"),
            }
            assert_eq!(a.get(&id).await.unwrap().owner.as_deref(), Some("n1"));
            // n1 stops renewing: make its lease expire, n2 takes over.
            sqlx::query("UPDATE leases SET expires_at_ms = 0 WHERE sandbox = $1")
                .bind(id.as_str())
                .execute(a.pool())
                .await
                .unwrap();
            let f2 = match b.lease_acquire(&id, "n2", 60_000).await.unwrap() {
                Acquire::Acquired { fence, previous } => {
                    assert_eq!(previous.unwrap().node.as_deref(), Some("n1"));
                    fence
                }
                other => panic!("{other:?}"),
            };
            assert_eq!(f2.token, f1.token + 1);
            // The old holder's heartbeat no longer lists (nor renews) it.
            assert!(a.node_heartbeat("n1", 60_000).await.unwrap().is_empty());
            assert_eq!(b.node_heartbeat("n2", 60_000).await.unwrap().len(), 1);
            // Its writes are refused, in the same statement, and change nothing.
            let e = a
                .transition_fenced(
                    &id,
                    SandboxState::Running,
                    SandboxState::Pausing,
                    Default::default(),
                    Some(&f1),
                )
                .await
                .unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidState);
            assert!(e.message.contains("stale"), "{}", e.message);
            let snap = SnapshotId::generate();
            assert!(a.set_checkpoint(&id, &snap, 1, Some(&f1)).await.is_err());
            assert!(!a.lease_release(&id, &f1).await.unwrap());
            let rec = a.get(&id).await.unwrap();
            assert_eq!(rec.state, SandboxState::Running);
            assert_eq!(rec.checkpoint_snapshot, None);
            // The new holder's writes go through.
            assert_eq!(
                b.set_checkpoint(&id, &snap, 7, Some(&f2)).await.unwrap(),
                None
            );
            let rec = b
                .transition_fenced(
                    &id,
                    SandboxState::Running,
                    SandboxState::Pausing,
                    Default::default(),
                    Some(&f2),
                )
                .await
                .unwrap();
            assert_eq!(rec.checkpoint_snapshot, Some(snap));
            assert_eq!(rec.checkpoint_at_ms, Some(7));
            // Released, the lease keeps its token; the next holder gets token + 1.
            assert!(b.lease_release(&id, &f2).await.unwrap());
            assert_eq!(b.get(&id).await.unwrap().owner, None);
            match a.lease_acquire(&id, "n1", 60_000).await.unwrap() {
                Acquire::Acquired { fence, .. } => assert_eq!(fence.token, f2.token + 1),
                other => panic!("{other:?}"),
            }
            let nodes = a.nodes().await.unwrap();
            assert_eq!(nodes.len(), 2);
            assert!(nodes[0].alive(now_ms(), 60_000));
        }
    }
}
