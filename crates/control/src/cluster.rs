//! Several daemons sharing one PostgreSQL metadata database and one snapshot
//! store. Each node registers itself and heartbeats; a running sandbox is
//! owned by one node through its lease row (see `stasis_meta::lease`).
//!
//! Any node accepts any request. For a sandbox leased by another live node
//! the request is proxied there (headers, Authorization included, plus a hop
//! header so a forwarded request is never forwarded again). A paused
//! sandbox belongs to no node: whichever node gets a request resumes it from
//! its pause snapshot in the store. A running sandbox whose owner's lease
//! expired is taken over by the node that gets the next request: it wins
//! the lease (exactly one contender can), restores the newest snapshot
//! (periodic checkpoint or last pause) under the same sandbox id, and
//! records how much running time after that snapshot was lost.
//!
//! The node's in-memory map of held leases is only what it believes; every
//! state write carries the fencing token from it and the database refuses a
//! stale one. It also stops *serving* a sandbox (exec, files, sessions)
//! once its lease has gone unconfirmed for most of a lease
//! ([`Cluster::serves`]): a node cut off from the database cannot renew,
//! so another node may soon take the sandbox over, and from then on the
//! cut-off copy is no longer the sandbox. Serving resumes when the lease is
//! confirmed again (still this node's: nothing is restored), or the copy is
//! stopped when another node took it.
//!
//! This module decides where a sandbox is served ([`Cluster::route`]); the
//! proxying itself is the HTTP edge's (`stasis-server`'s `http::forward`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use stasis_core::{now_ms, Error, Result, SandboxId, SnapshotId};
use stasis_meta::{Fence, Meta};

/// Header marking a request another node forwarded (never forwarded again).
pub const HOP_HEADER: &str = "x-stasis-forwarded-by";

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub node_id: String,
    /// Base URL other nodes reach this one at.
    pub advertise_url: String,
    /// Lease (and liveness) duration; heartbeats run at a third of it.
    pub lease: Duration,
}

pub struct Cluster {
    cfg: ClusterConfig,
    meta: Meta,
    /// Leases this node believes it holds, each with the moment it was last
    /// confirmed (taken, or renewed by a heartbeat that began then).
    held: StdMutex<HashMap<SandboxId, Held>>,
    /// Sandboxes paused here whose state this node still holds live (e.g. a
    /// frozen cgroup), with the pause snapshot it belongs to.
    local_pauses: StdMutex<HashMap<SandboxId, SnapshotId>>,
    http: reqwest::Client,
}

#[derive(Debug, Clone)]
struct Held {
    fence: Fence,
    confirmed: Instant,
}

/// How long after its last confirmation this node still serves a sandbox
/// under a lease, as a share of the lease: the lease row expires one whole
/// lease after the heartbeat that renewed it was *written*, which is later
/// than when that heartbeat began (the confirmation instant), so stopping
/// at 80% leaves a fifth of the lease for clock skew between nodes before
/// another node may take the sandbox over.
const SERVE_SHARE: f64 = 0.8;

/// Whether a lease confirmed `since_confirmed` ago may still be served on.
pub fn lease_fresh(since_confirmed: Duration, lease: Duration) -> bool {
    since_confirmed < lease.mul_f64(SERVE_SHARE)
}

/// Where a request for a sandbox is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Local,
    Forward { node: String, url: String },
}

impl Cluster {
    pub async fn start(cfg: ClusterConfig, meta: Meta) -> Result<Arc<Self>> {
        if cfg.node_id.is_empty() || cfg.node_id.len() > 128 {
            return Err(Error::invalid("node id must be 1-128 characters"));
        }
        meta.node_register(&cfg.node_id, &cfg.advertise_url).await?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| Error::internal(format!("http client: {e}")))?;
        info!(node = %cfg.node_id, url = %cfg.advertise_url, "registered in the cluster");
        Ok(Arc::new(Cluster {
            cfg,
            meta,
            held: StdMutex::new(HashMap::new()),
            local_pauses: StdMutex::new(HashMap::new()),
            http,
        }))
    }

    pub fn node_id(&self) -> &str {
        &self.cfg.node_id
    }

    pub fn lease_ms(&self) -> i64 {
        self.cfg.lease.as_millis() as i64
    }

    /// The fence for writes about `id`, if this node believes it holds its
    /// lease (even one it may no longer serve on: a write under a stale
    /// fence is refused by meta, which is the point of the fence).
    pub fn fence(&self, id: &SandboxId) -> Option<Fence> {
        self.held
            .lock()
            .expect("held")
            .get(id)
            .map(|h| h.fence.clone())
    }

    /// Whether this node may serve `id` now: it holds the lease and has
    /// confirmed it recently enough that no other node can have taken it
    /// over yet (see [`lease_fresh`]). A node cut off from meta stops
    /// serving its sandboxes before another node may restore them, instead
    /// of answering from a copy that is no longer the sandbox.
    pub fn serves(&self, id: &SandboxId) -> bool {
        self.held
            .lock()
            .expect("held")
            .get(id)
            .is_some_and(|h| lease_fresh(h.confirmed.elapsed(), self.cfg.lease))
    }

    /// Record a lease just taken (confirmed now).
    pub(crate) fn hold(&self, id: &SandboxId, fence: Fence) {
        let held = Held {
            fence,
            confirmed: Instant::now(),
        };
        self.held.lock().expect("held").insert(id.clone(), held);
    }

    /// Give up the lease of `id` (it paused, failed or was destroyed here).
    pub(crate) async fn release(&self, id: &SandboxId) {
        let f = self.held.lock().expect("held").remove(id);
        if let Some(f) = f {
            if let Err(e) = self.meta.lease_release(id, &f.fence).await {
                warn!(sandbox = %id, error = %e, "lease not released (it will expire)");
            }
        }
    }

    pub(crate) fn note_local_pause(&self, id: &SandboxId, snap: Option<&SnapshotId>) {
        let mut m = self.local_pauses.lock().expect("local pauses");
        match snap {
            Some(s) => {
                m.insert(id.clone(), s.clone());
            }
            None => {
                m.remove(id);
            }
        }
    }

    /// Whether live paused state held here belongs to pause `snap` (if not,
    /// another node ran the sandbox since, and the local state is stale).
    pub(crate) fn local_pause_is(&self, id: &SandboxId, snap: Option<&SnapshotId>) -> bool {
        let m = self.local_pauses.lock().expect("local pauses");
        m.get(id) == snap && snap.is_some()
    }

    /// Where a request about `id` should be served: here, or at the live
    /// node that holds its lease.
    pub async fn route(&self, id: &SandboxId) -> Result<Route> {
        let now = now_ms();
        let Some(lease) = self.meta.lease_get(id).await? else {
            return Ok(Route::Local);
        };
        match &lease.node {
            Some(n) if n != &self.cfg.node_id && lease.live(now) => {
                let node = self.meta.node_get(n).await?;
                if node.alive(now, self.lease_ms()) {
                    return Ok(Route::Forward {
                        node: node.id,
                        url: node.url,
                    });
                }
                Ok(Route::Local)
            }
            _ => Ok(Route::Local),
        }
    }

    /// One heartbeat: renew this node's leases and forget (and report) the
    /// ones another node has taken.
    pub async fn heartbeat(&self) -> Result<Vec<SandboxId>> {
        let began = Instant::now();
        let leases = self
            .meta
            .node_heartbeat(&self.cfg.node_id, self.lease_ms())
            .await?;
        let mut held = self.held.lock().expect("held");
        let mut lost = Vec::new();
        for (id, h) in held.iter_mut() {
            // Taken while this heartbeat ran: its answer may predate it.
            if h.confirmed >= began {
                continue;
            }
            let renewed = leases
                .iter()
                .any(|l| l.sandbox == id.as_str() && l.token == h.fence.token);
            if renewed {
                // Renewed by this heartbeat: confirmed as of when it began.
                h.confirmed = began;
            } else {
                lost.push(id.clone());
            }
        }
        for id in &lost {
            held.remove(id);
        }
        Ok(lost)
    }

    /// The HTTP client requests are forwarded to other nodes with.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }
}
