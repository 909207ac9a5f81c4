//! Standby: a paused sandbox whose stopped QEMU is kept on the host for a
//! while after its pause, so that a request in that window continues the
//! same VM (`cont`) instead of starting a new one from the artifacts.
//!
//! The pause itself is complete as always (the artifacts go to the store,
//! the store stays the source of truth): standby only keeps the compute,
//! stopped (no CPU), holding its RAM. A standby ends when the sandbox
//! resumes (continued), when its window passes or when the node's cap on
//! RAM held in standby (`MicrovmConfig::standby_max_bytes`) needs room for a
//! newer one (the oldest goes first): then QEMU quits and the sandbox is an
//! ordinary paused one, whose local files still serve a local resume
//! (`local`). A daemon that restarts finds a standby QEMU by the marker
//! file the standby left in its sandbox directory and ends it the same way
//! (`recover`), never continuing a VM it does not know to be current.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use stasis_backend::{SandboxSpec, Standby};
use stasis_core::{now_ms, Error, Result, SandboxId, SnapshotId};

use crate::agent::AgentConn;
use crate::guest;
use crate::local;
use crate::qemu::{cleanup_dir_files, RamBacking, DISK};
use crate::state::{self, op_lock, Held, MicrovmBackend, Vm};
use crate::trust;
use crate::util;
use crate::vm;

/// In the sandbox directory while its QEMU is held in standby.
pub(crate) const MARKER: &str = "standby.json";

/// Hold `vm` (stopped, its pause written) in standby for `keep_for`, then
/// make room under the node's cap. Its sandbox no longer runs.
pub(crate) async fn enter(b: &MicrovmBackend, vm: Arc<Vm>, keep_for: Duration) -> Result<()> {
    stasis_backend::fsafe::write_replace(
        &vm.dir.join(MARKER),
        serde_json::json!({"since_ms": now_ms()})
            .to_string()
            .as_bytes(),
        0o644,
    )?;
    let now = now_ms();
    let held = Held {
        ram_bytes: util::rss_bytes(vm.pid),
        since_ms: now,
        until_ms: now + keep_for.as_millis() as i64,
        snapshot: None,
        vm,
    };
    let id = held.vm.id.clone();
    b.vms.lock().unwrap().remove(&id);
    b.standby.lock().unwrap().insert(id.clone(), held);
    for other in over_cap(b, &id) {
        release_if_idle(b, &other).await;
    }
    Ok(())
}

/// Sandboxes to release so that the standby RAM fits the cap, oldest
/// first, never `keep` (the one just added, unless it alone is over).
fn over_cap(b: &MicrovmBackend, keep: &SandboxId) -> Vec<SandboxId> {
    let t = b.standby.lock().unwrap();
    let mut total: u64 = t.values().map(|h| h.ram_bytes).sum();
    let mut by_age: Vec<(&SandboxId, &Held)> = t.iter().collect();
    by_age.sort_by_key(|(_, h)| h.since_ms);
    let mut out = Vec::new();
    for (id, h) in by_age {
        if total <= b.config.standby_max_bytes {
            break;
        }
        if id == keep && t.len() > 1 {
            continue;
        }
        total = total.saturating_sub(h.ram_bytes);
        out.push(id.clone());
    }
    out
}

/// What a sandbox holds in standby.
pub(crate) fn info(b: &MicrovmBackend, id: &SandboxId) -> Option<Standby> {
    b.standby.lock().unwrap().get(id).map(Held::info)
}

/// Every sandbox held in standby.
pub(crate) fn all(b: &MicrovmBackend) -> Vec<(SandboxId, Standby)> {
    let t = b.standby.lock().unwrap();
    t.iter().map(|(id, h)| (id.clone(), h.info())).collect()
}

/// The pause that put the sandbox in standby is stored as `snap`.
pub(crate) fn note_stored(b: &MicrovmBackend, id: &SandboxId, snap: &SnapshotId) -> bool {
    match b.standby.lock().unwrap().get_mut(id) {
        Some(h) => {
            h.snapshot = Some(snap.clone());
            true
        }
        None => false,
    }
}

/// Whether the sandbox is held in standby for snapshot `snap`.
pub(crate) fn holds(b: &MicrovmBackend, id: &SandboxId, snap: &SnapshotId) -> bool {
    b.standby
        .lock()
        .unwrap()
        .get(id)
        .is_some_and(|h| h.snapshot.as_ref() == Some(snap))
}

/// Take the sandbox out of the standby table (the caller holds its op lock).
pub(crate) fn take(b: &MicrovmBackend, id: &SandboxId) -> Option<Held> {
    b.standby.lock().unwrap().remove(id)
}

/// End a standby: QEMU (stopped since the pause) quits, its namespace is
/// detached, the files it wrote become the daemon's again. The local files
/// stay bound to the stored pause (quitting a stopped QEMU writes nothing).
pub(crate) async fn end(b: &MicrovmBackend, held: Held) {
    let vm = held.vm;
    vm::quit_vm(&vm).await;
    vm::detach(b, &vm.id);
    cleanup_dir_files(&vm.dir);
    let _ = std::fs::remove_file(vm.dir.join(MARKER));
    disown_own_files(&vm.dir, &vm.ram);
    tracing::info!(sandbox = %vm.id, "standby released");
}

/// The sandbox's own RAM file and disk, written by its (gone) QEMU, become
/// root's (through `O_NOFOLLOW`: a planted name is left alone): the disk
/// world-readable like every disk artifact (a pause's artifact is a link to
/// it), the RAM file root's alone. The next QEMU that runs on them gets them
/// again (`stasis_jail::JailSpec::prepare_dir`).
pub(crate) fn disown_own_files(dir: &Path, ram: &RamBacking) {
    let mut files = vec![(dir.join(DISK), 0o644)];
    if let RamBacking::SharedFile(p) = ram {
        files.push((dir.join(p), 0o600));
    }
    for (f, mode) in files {
        if f.exists() {
            if let Err(e) = trust::fix_mode(&f, Some((0, 0)), |_| mode) {
                tracing::warn!(file = %f.display(), "cannot take back: {e}");
            }
        }
    }
}

/// Release the sandbox's standby if nothing else works on it right now.
async fn release_if_idle(b: &MicrovmBackend, id: &SandboxId) -> bool {
    let lock = op_lock(b, id);
    let Ok(_g) = lock.try_lock() else {
        return false;
    };
    match take(b, id) {
        Some(h) => {
            end(b, h).await;
            true
        }
        None => false,
    }
}

/// Release a sandbox's standby (waits for an operation on it to finish).
pub(crate) async fn release(b: &MicrovmBackend, id: &SandboxId) -> Result<bool> {
    let lock = op_lock(b, id);
    let _g = lock.lock().await;
    Ok(match take(b, id) {
        Some(h) => {
            end(b, h).await;
            true
        }
        None => false,
    })
}

/// Standbys past their window, and the oldest over the cap, released;
/// unused kept RAM images removed.
pub(crate) async fn housekeeping(b: &MicrovmBackend) -> Vec<SandboxId> {
    // Kept restore RAM images no sandbox maps any more go too.
    let parents: Vec<_> = b.seen_parents.lock().unwrap().iter().cloned().collect();
    for p in parents {
        crate::shared_ram::sweep_dir(&p.join(crate::shared_ram::DIR));
    }
    let now = now_ms();
    let mut due: Vec<SandboxId> = b
        .standby
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, h)| h.until_ms <= now)
        .map(|(id, _)| id.clone())
        .collect();
    let none = SandboxId::generate();
    for id in over_cap(b, &none) {
        if !due.contains(&id) {
            due.push(id);
        }
    }
    let mut done = Vec::new();
    for id in due {
        if release_if_idle(b, &id).await {
            done.push(id);
        }
    }
    done
}

/// Continue a sandbox held in standby: the same QEMU, the same RAM. The
/// local files are unbound first (the guest writes them again). On error
/// the QEMU is gone and the sandbox stays paused (its stored pause intact).
///
/// The guest's clock stood still while it was stopped; it is set before
/// the guest serves anything else, but without making the resume wait for
/// that round trip: the agent channel is taken (its write lock) before
/// `cont` and given back only once the guest answered `SetTime`, so every
/// request that follows the resume waits for it while the resume's answer
/// is on its way. Should the guest not answer it, the sandbox fails (its
/// QEMU is killed; later calls say why), as a guest dead at its first
/// request would.
pub(crate) async fn continue_held(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    held: Held,
) -> Result<()> {
    let vm = held.vm;
    local::unbind(&spec.dir);
    let _ = std::fs::remove_file(spec.dir.join(MARKER));
    let (locked_tx, locked) = tokio::sync::oneshot::channel::<()>();
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    let timeout = b.config.agent_timeout;
    let v = vm.clone();
    tokio::spawn(async move {
        let mut agent = v.agent.write().await;
        let _ = locked_tx.send(());
        if go_rx.await.is_err() {
            return; // `cont` failed: the resume fails, nothing to set.
        }
        let r = async {
            if agent.is_closed() {
                // The channel dropped while held: connect again (as every
                // request would), checking it is the same boot.
                let path = v.dir.join(crate::qemu::AGENT_SOCK);
                let fresh = AgentConn::connect(&path, Duration::from_secs(5)).await?;
                let boot = fresh.hello(timeout).await?;
                if boot != v.boot_id {
                    return Err(Error::backend(format!(
                        "guest rebooted (boot_id {boot}, expected {})",
                        v.boot_id
                    )));
                }
                *agent = fresh;
            }
            let req = stasis_agent_proto::Request::SetTime {
                unix_nanos: util::now_unix_nanos(),
            };
            guest::expect_ok(agent.request(req, None, timeout).await?)
        }
        .await;
        drop(agent);
        if let Err(e) = r {
            guest::fail_vm(
                &v,
                &format!("setting the clock after standby: {}", e.message),
            )
            .await;
        }
    });
    let r = async {
        locked
            .await
            .map_err(|_| Error::internal("clock task ended early"))?;
        if !vm.proc.lock().await.alive() {
            return Err(Error::backend("the QEMU held in standby has exited"));
        }
        vm.qmp.lock().await.execute("cont", None).await?;
        Ok(())
    }
    .await;
    if let Err(e) = r {
        drop(go);
        vm::abandon(b, &vm).await;
        return Err(e.context("continuing the sandbox held in standby"));
    }
    let _ = go.send(());
    state::insert(b, vm)
}

/// Drop what this host holds of a paused sandbox: its standby ends, its
/// local pause files go (the next resume comes from the store).
pub(crate) async fn evict(b: &MicrovmBackend, spec: &SandboxSpec) -> Result<()> {
    let lock = op_lock(b, &spec.id);
    let _g = lock.lock().await;
    if b.vms.lock().unwrap().contains_key(&spec.id) {
        return Err(Error::state(format!(
            "sandbox {} runs: only a paused sandbox's local state can be dropped",
            spec.id
        )));
    }
    if let Some(h) = take(b, &spec.id) {
        end(b, h).await;
    }
    local::unbind(&spec.dir);
    b.accepted.lock().unwrap().remove(&spec.id);
    for f in EVICTED {
        stasis_backend::fsafe::remove_nofollow(&spec.dir.join(f))?;
    }
    Ok(())
}

/// What [`evict`] removes from the sandbox directory: the guest's RAM file,
/// the RAM beneath it, the disk chain and the local pause files. What stays
/// (logs, `vm.json`, the guest config record) is a few KiB.
const EVICTED: [&str; 5] = [
    crate::qemu::RAM_FILE,
    crate::qemu::BASE_RAM,
    DISK,
    crate::qemu::BASE_DISK,
    local::LOCAL_DIR,
];

/// Disk space a paused sandbox holds that [`evict`] would free (allocated
/// blocks, hard links counted once, nothing followed); 0 while it runs.
/// The RAM image a restored guest maps (`base.ram`, one file for every
/// restore of its snapshot on this node, see `shared_ram`) counts as this
/// sandbox's share of it: its size over its link count. (The pause's own
/// files may still be linked into the upload stage when this is asked: they
/// count in full.)
pub(crate) fn local_bytes(b: &MicrovmBackend, spec: &SandboxSpec) -> u64 {
    if b.vms.lock().unwrap().contains_key(&spec.id) {
        return 0;
    }
    let base_ram = crate::qemu::BASE_RAM;
    let own: Vec<_> = EVICTED
        .iter()
        .filter(|f| **f != base_ram)
        .map(|f| spec.dir.join(f))
        .collect();
    stasis_backend::fsafe::allocated_nofollow(&own)
        + stasis_backend::fsafe::allocated_share_nofollow(&spec.dir.join(base_ram))
}
