//! The node's cap on local pause state (`ManagerConfig::local_pause_max_bytes`):
//! what this node's paused sandboxes keep on its disk beyond their stored
//! snapshots (a microVM's RAM file, disk chain and local pause files,
//! whether or not its compute is held in standby) stays under the cap; past
//! it, the least recently paused sandboxes are evicted first, the same way
//! an operator's `evict` does (audited as the system, the cluster's note of
//! the local pause cleared). The store keeps every evicted sandbox's
//! durable copy: its next resume fetches it from there.
//!
//! Cost: the size a sandbox holds is asked of its backend once, when its
//! pause is stored ([`Backend::local_bytes`], a few `lstat`s), and kept in
//! a table of this node's paused sandboxes with local state; any change of
//! state out of `Paused` (a resume, a destroy) drops the entry. A reaper
//! pass sums the table (memory only) and acts only when it is over the
//! cap. A daemon restart fills the table again from the paused sandboxes
//! reconcile finds.
//!
//! [`Backend::local_bytes`]: stasis_backend::Backend::local_bytes

use std::collections::HashMap;
use std::path::Path;

use tracing::{info, warn};

use stasis_core::{now_ms, BackendKind, SandboxId, SandboxState, SnapshotId};
use stasis_meta::SandboxRecord;

use super::{Ctx, Manager};

/// What one paused sandbox keeps on this node.
#[derive(Debug, Clone)]
pub(super) struct Held {
    /// Allocated bytes, as the backend reported them at the stored pause.
    bytes: u64,
    /// When it was paused: the oldest goes first.
    since_ms: i64,
    /// The stored pause the local state belongs to.
    snapshot: SnapshotId,
    backend: BackendKind,
}

/// The table of this node's paused sandboxes with local state.
#[derive(Debug, Default)]
pub(super) struct Table {
    held: HashMap<SandboxId, Held>,
    total: u64,
}

impl Table {
    fn insert(&mut self, id: SandboxId, h: Held) {
        let bytes = h.bytes;
        if let Some(old) = self.held.insert(id, h) {
            self.total = self.total.saturating_sub(old.bytes);
        }
        self.total = self.total.saturating_add(bytes);
    }

    fn remove(&mut self, id: &SandboxId) -> Option<Held> {
        let old = self.held.remove(id)?;
        self.total = self.total.saturating_sub(old.bytes);
        Some(old)
    }

    /// Sandboxes to evict to get under `cap`, oldest pause first (ties: by id).
    fn over(&self, cap: u64) -> Vec<(SandboxId, Held)> {
        if self.total <= cap {
            return Vec::new();
        }
        let mut all: Vec<_> = self
            .held
            .iter()
            .map(|(id, h)| (id.clone(), h.clone()))
            .collect();
        all.sort_by(|a, b| a.1.since_ms.cmp(&b.1.since_ms).then(a.0.cmp(&b.0)));
        all
    }
}

/// Half the space free to an unprivileged user on the filesystem of `dir`
/// (the default cap); None when it cannot be read.
pub fn half_free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs on a valid NUL-terminated path into a zeroed struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64) / 2)
}

impl Manager {
    /// The node's cap on local pause state, bytes.
    pub fn local_pause_cap(&self) -> u64 {
        self.local_cap
    }

    /// Local pause state this node's paused sandboxes hold now, bytes (as
    /// their backends reported it when each pause was stored).
    pub fn local_pause_bytes(&self) -> u64 {
        self.local.lock().expect("local table").total
    }

    /// What a paused sandbox keeps on this node, bytes (as recorded).
    pub fn local_pause_bytes_of(&self, id: &SandboxId) -> Option<u64> {
        let t = self.local.lock().expect("local table");
        t.held.get(id).map(|h| h.bytes)
    }

    /// Pause `snap` of `rec` is stored and the backend has bound what it
    /// keeps locally to it: record its size (none: nothing to track).
    pub(super) fn note_local(&self, rec: &SandboxRecord, snap: &SnapshotId) {
        let Ok(b) = self.backend(rec.backend) else {
            return;
        };
        let bytes = b.local_bytes(&self.spec(rec));
        let mut t = self.local.lock().expect("local table");
        if bytes == 0 {
            t.remove(&rec.id);
        } else {
            let h = Held {
                bytes,
                since_ms: rec.paused_at_ms.unwrap_or_else(now_ms),
                snapshot: snap.clone(),
                backend: rec.backend,
            };
            t.insert(rec.id.clone(), h);
        }
        self.metrics.set_local_pause(t.total, self.local_cap);
    }

    /// The sandbox left `Paused` here (resumed, destroyed, failed) or its
    /// local state was evicted: it no longer counts.
    pub(super) fn forget_local(&self, id: &SandboxId) {
        let mut t = self.local.lock().expect("local table");
        if t.remove(id).is_some() {
            self.metrics.set_local_pause(t.total, self.local_cap);
        }
    }

    /// A paused sandbox found at start: what its backend still keeps of its
    /// stored pause counts again.
    pub(super) fn seed_local(&self, rec: &SandboxRecord) {
        if let Some(snap) = &rec.pause_snapshot {
            self.note_local(rec, snap);
        }
    }

    /// Over the cap: evict local pause state, least recently paused first,
    /// until under it. A sandbox busy right now is left for the next pass;
    /// one that is no longer paused on the pause recorded (resumed on
    /// another node, paused again) only leaves the table. Returns the
    /// sandboxes evicted.
    pub(super) async fn enforce_local_cap(&self) -> Vec<SandboxId> {
        let cap = self.local_cap;
        let candidates = {
            let t = self.local.lock().expect("local table");
            self.metrics.set_local_pause(t.total, cap);
            t.over(cap)
        };
        let mut done = Vec::new();
        for (id, h) in candidates {
            if self.local_pause_bytes() <= cap {
                break;
            }
            let Ok(guard) = self.slot(&id).lock.clone().try_write_owned() else {
                continue;
            };
            let rec = match self.meta.get(&id).await {
                Ok(r) => r,
                Err(e) if e.code == stasis_core::ErrorCode::NotFound => {
                    self.forget_local(&id);
                    continue;
                }
                Err(e) => {
                    warn!(sandbox = %id, error = %e, "local cap: record not read");
                    continue;
                }
            };
            if rec.state != SandboxState::Paused
                || rec.pause_snapshot.as_ref() != Some(&h.snapshot)
                || rec.backend != h.backend
            {
                self.forget_local(&id);
                continue;
            }
            let ctx = Ctx::system(rec.tenant.clone());
            let detail = serde_json::json!({
                "reason": "local_cap",
                "bytes": h.bytes,
                "cap_bytes": cap,
            });
            match self.do_evict(&ctx, rec, detail, guard).await {
                Ok(_) => {
                    info!(sandbox = %id, bytes = h.bytes, cap, "local pause state evicted (node cap)");
                    self.metrics.local_pause_evicted();
                    done.push(id);
                }
                Err(e) => warn!(sandbox = %id, error = %e, "local cap: evict failed"),
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(bytes: u64, since_ms: i64) -> Held {
        Held {
            bytes,
            since_ms,
            snapshot: SnapshotId::generate(),
            backend: BackendKind::Microvm,
        }
    }

    #[test]
    fn the_table_keeps_its_total_and_orders_the_oldest_first() {
        let mut t = Table::default();
        let (a, b, c) = (
            SandboxId::generate(),
            SandboxId::generate(),
            SandboxId::generate(),
        );
        t.insert(a.clone(), held(10, 300));
        t.insert(b.clone(), held(20, 100));
        t.insert(c.clone(), held(30, 200));
        assert_eq!(t.total, 60);
        t.insert(c.clone(), held(5, 200));
        assert_eq!(t.total, 35, "a new pause replaces the old size");
        assert!(t.over(35).is_empty());
        let order: Vec<_> = t.over(34).into_iter().map(|(id, _)| id).collect();
        assert_eq!(order, vec![b.clone(), c.clone(), a.clone()]);
        assert_eq!(t.remove(&b).map(|h| h.bytes), Some(20));
        assert!(t.remove(&b).is_none());
        assert_eq!(t.total, 15);
        assert_eq!(t.over(0).len(), 2);
    }

    #[test]
    fn half_the_free_space_is_read() {
        let d = tempfile::tempdir().unwrap();
        assert!(half_free_bytes(d.path()).is_some());
        assert!(half_free_bytes(&d.path().join("missing")).is_none());
    }
}
