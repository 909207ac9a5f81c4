//! Memory migration: the outgoing migration of a stopped guest into
//! `memory.state` (plus `memory.ram` copied from the guest's memfd), the
//! `meta.json` of a pause/snapshot, pause and snapshot themselves (with the
//! disk export), cleaning up after a failed one and finishing a pause
//! interrupted by a daemon kill. (The incoming side is `vm`'s: a start.)
//! Every wait here is bounded by `migration_timeout`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stasis_agent_proto::Request;
use stasis_backend::{failpoint, Artifact, SandboxSpec};
use stasis_core::{Error, Result, SandboxId};

use crate::disk::{self, Export};
use crate::guest::{self, expect_ok};
use crate::image::Image;
use crate::local;
use crate::net::Nic;
use crate::qemu::{self, cleanup_dir_files, RamBacking};
use crate::qmp::MigrationStatus;
use crate::snapshot::{
    self, hash_file, SnapshotMeta, DISK_ARTIFACT, MEMORY_RAM, MEMORY_STATE, META, META_FORMAT,
};
use crate::standby;
use crate::state::{self, MicrovmBackend, Vm};
use crate::vm;

/// Flush the guest, stop it and migrate its state into `out/memory.state`.
/// Leaves the VM stopped on success; on error the VM is running again
/// (`Ok(false)` inside the error message tells whether it still runs).
/// With `ram_copy` (a snapshot: the VM runs on afterwards) the guest's own
/// RAM file is copied into `out`; without (a pause) it is linked there.
pub(crate) async fn save_memory(
    b: &MicrovmBackend,
    vm: &Vm,
    out: &Path,
    ram_copy: bool,
) -> Result<(u64, bool)> {
    let t = Instant::now();
    let state = out.join(MEMORY_STATE);
    let mut qmp = vm.qmp.lock().await;
    qmp.execute("stop", None).await?;
    failpoint::hit("save.stopped");
    let ram_file = vm.ram.is_shared();
    let r: Result<()> = async {
        // Always set it: a VM re-attached after a daemon restart may run
        // on a RAM file while recorded as anonymous, and QEMU keeps the
        // capability from its incoming migration. The stream skips RAM
        // exactly when it is saved as a file; a fork's private mapping
        // (share=off) is streamed normally.
        qmp.execute(
            "migrate-set-capabilities",
            Some(serde_json::json!({"capabilities": [
                {"capability": "x-ignore-shared", "state": ram_file}
            ]})),
        )
        .await?;
        qmp.execute(
            "migrate-set-parameters",
            Some(serde_json::json!({"max-bandwidth": 64u64 << 30, "downtime-limit": 100000})),
        )
        .await?;
        // The daemon opens the file; QEMU writes through the descriptor.
        let file = std::fs::File::create(&state)?;
        qmp.migrate_fd("migrate", &file).await?;
        drop(file);
        let deadline = Instant::now() + b.config.migration_timeout;
        loop {
            match qmp.query_migrate().await? {
                MigrationStatus::Completed => break,
                MigrationStatus::Failed(e) => {
                    return Err(Error::backend(format!("migration failed: {e}")))
                }
                MigrationStatus::Cancelled => {
                    return Err(Error::backend("migration was cancelled"))
                }
                MigrationStatus::None | MigrationStatus::Active(_) => {}
            }
            if Instant::now() >= deadline {
                let _ = qmp.execute("migrate_cancel", None).await;
                return Err(Error::timeout(format!(
                    "migration did not complete within {} s",
                    b.config.migration_timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        failpoint::hit("save.migrated");
        if ram_file {
            // The VM is stopped: its RAM is consistent.
            save_ram(vm, out, ram_copy).await?;
            failpoint::hit("save.ram-saved");
        }
        Ok(())
    }
    .await;
    if let Err(e) = r {
        let _ = std::fs::remove_file(&state);
        let _ = std::fs::remove_file(out.join(MEMORY_RAM));
        let running = qmp.execute("cont", None).await.is_ok();
        return Err(Error::new(
            e.code,
            format!(
                "{}; {}",
                e.message,
                if running {
                    "the sandbox still runs"
                } else {
                    "the sandbox's QEMU is not answering"
                }
            ),
        ));
    }
    let size = std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0);
    let ms = t.elapsed().as_millis() as u64;
    b.timings
        .lock()
        .unwrap()
        .entry(vm.id.clone())
        .or_default()
        .migrate_ms = ms;
    Ok((size, ram_file))
}

/// Put a stopped guest's RAM into `out/memory.ram`: its own RAM file
/// linked (a pause: nothing is copied or read) or copied (a snapshot: the
/// guest runs on and writes its file), only the allocated extents of it,
/// so the copy stays sparse; a memfd is always copied.
async fn save_ram(vm: &Vm, out: &Path, copy: bool) -> Result<()> {
    let dst = out.join(MEMORY_RAM);
    let src = match &vm.ram {
        RamBacking::SharedFile(p) if !copy => {
            // The name is in a directory QEMU may write: the file is opened
            // without following a planted link and must be the guest's own.
            let f = crate::trust::open_regular(&vm.dir.join(p))?;
            return crate::util::link_open_file(&f, &dst);
        }
        RamBacking::SharedFile(p) => vm.dir.join(p),
        _ => memfd_path(vm.pid)?,
    };
    tokio::task::spawn_blocking(move || copy_data_extents(&src, &dst))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}

/// Write `out/meta.json` (atomically: a crash leaves the old file or
/// none), with the blake3 and size of the memory files already in `out`.
/// Needs no disk: a pause writes it while QEMU still holds the state.
pub(crate) fn write_meta(
    b: &MicrovmBackend,
    vm: &Vm,
    out: &Path,
    memory: bool,
    ram_file: bool,
    ram_copied: bool,
) -> Result<()> {
    // A guest restored from a format 2 snapshot without a NIC still has
    // none: its artifacts stay format 2 (format 3 always has a NIC).
    let mut meta = SnapshotMeta {
        format: if vm.nic == Nic::None { 2 } else { META_FORMAT },
        image: vm.image.name.clone(),
        image_digest: vm.image.digest.clone(),
        memory_mb: vm.memory_mb,
        qemu_version: b.qemu_version.clone(),
        accelerator: vm.accel,
        boot_id: vm.boot_id.clone(),
        memory,
        ram_file,
        memory_state_blake3: None,
        memory_state_bytes: 0,
        memory_ram_blake3: None,
        workdir: vm.workdir.clone(),
        created_ms: stasis_core::now_ms(),
        network: vm.nic != Nic::None,
        inputs: vm.inputs.iter().map(|d| d.digest.clone()).collect(),
        vcpus: vm.vcpus,
    };
    if memory {
        let (hash, size) = hash_file(&out.join(MEMORY_STATE))?;
        meta.memory_state_blake3 = Some(hash);
        meta.memory_state_bytes = size;
        // The guest's own RAM file carries no hash (format 4, see
        // `snapshot`); a copy does, and format 2 always did.
        let own = matches!(vm.ram, RamBacking::SharedFile(_)) && !ram_copied;
        if ram_file && (!own || meta.format < 4) {
            meta.memory_ram_blake3 = Some(hash_file(&out.join(MEMORY_RAM))?.0);
        }
    }
    snapshot::write(out, &meta)
}

/// A pause/snapshot failed before QEMU was told to quit: remove partial
/// artifacts and say whether the sandbox still runs. A dead QEMU marks
/// the sandbox failed (earlier snapshots, elsewhere, are untouched).
pub(crate) async fn op_failed(vm: &Vm, out: &Path, e: Error, op: &str) -> Error {
    for f in [MEMORY_STATE, MEMORY_RAM, DISK_ARTIFACT, META] {
        let _ = std::fs::remove_file(out.join(f));
    }
    let alive = vm.proc.lock().await.alive();
    if alive && vm.failed.lock().unwrap().is_none() {
        let msg = if e.message.contains("still runs") || e.message.contains("not answering") {
            e.message
        } else {
            format!("{}; the sandbox still runs", e.message)
        };
        return Error::new(e.code, format!("{op}: {msg}"));
    }
    let why = format!("QEMU exited during {op}");
    if vm.failed.lock().unwrap().is_none() {
        *vm.failed.lock().unwrap() = Some(why.clone());
    }
    cleanup_dir_files(&vm.dir);
    Error::backend(format!(
        "{op}: {}; {why}: the sandbox is lost (earlier snapshots are untouched)",
        e.message
    ))
}

/// Finish a pause whose QEMU is gone (a daemon killed mid-pause) from
/// what it left: `out/meta.json` is written only once the memory state is
/// complete, and the state must match its blake3 (and a copied RAM file
/// its own); the guest's own RAM file is whole by construction (its QEMU
/// was stopped before the state was saved and never continued while the
/// stage exists). The disk is then in `out` (done) or still only in the
/// sandbox dir (exported now; a flatten interrupted half-way is redone from
/// the sandbox's own files, which it never changes; `out/.top.qcow2` left
/// by an older daemon that moved the top is put back first). `None` when
/// nothing in `out` is provably complete.
pub(crate) async fn finish_pause(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    out: &Path,
) -> Result<Option<Vec<Artifact>>> {
    if b.vms.lock().unwrap().contains_key(&spec.id) || !out.is_dir() {
        return Ok(None);
    }
    let meta = match snapshot::read_meta(out) {
        Ok(Some(m)) if snapshot::LOADABLE_FORMATS.contains(&m.format) => m,
        Ok(_) => return Ok(None),
        Err(e) => {
            tracing::warn!(sandbox = %spec.id, "interrupted pause: {e}");
            return Ok(None);
        }
    };
    if meta.memory {
        let want = meta.memory_state_blake3.clone().unwrap_or_default();
        let mut r = snapshot::verify(
            &b.verified,
            &out.join(MEMORY_STATE),
            &want,
            Some(meta.memory_state_bytes),
        )
        .await;
        if r.is_ok() && meta.ram_file {
            r = match meta.memory_ram_blake3.clone() {
                Some(want) => {
                    snapshot::verify(&b.verified, &out.join(MEMORY_RAM), &want, None).await
                }
                None if out.join(MEMORY_RAM).is_file() => Ok(()),
                None => Err(Error::integrity("memory.ram is missing")),
            };
        }
        if let Err(e) = r {
            tracing::warn!(sandbox = %spec.id, "interrupted pause left no usable memory state: {e}");
            return Ok(None);
        }
    }
    if !out.join(DISK_ARTIFACT).is_file() {
        let disk = spec.dir.join(qemu::DISK);
        let top = out.join(".top.qcow2");
        if !disk.is_file() && top.is_file() {
            std::fs::rename(&top, &disk)?;
        }
        if !disk.is_file() {
            tracing::warn!(sandbox = %spec.id, "interrupted pause: its disk is nowhere");
            return Ok(None);
        }
        for f in [".top.qcow2", ".base.qcow2"] {
            let _ = std::fs::remove_file(out.join(f));
        }
        let image = Image::resolve_with(
            &b.config.images_dir,
            b.config.image_store.as_deref(),
            spec.manifest.image.as_deref(),
        )?;
        disk::export_disk(
            &b.config.qemu_img,
            &spec.dir,
            out,
            Export::Link,
            &image.rootfs(),
        )
        .await?;
    }
    cleanup_dir_files(&spec.dir);
    let _ = std::fs::remove_file(spec.dir.join(standby::MARKER));
    standby::disown_own_files(&spec.dir, &RamBacking::SharedFile(qemu::RAM_FILE.into()));
    for f in [".top.qcow2", ".base.qcow2", ".meta.json.tmp"] {
        let _ = std::fs::remove_file(out.join(f));
    }
    if let Err(e) = local::keep_pause_files(&spec.dir, out) {
        tracing::warn!(sandbox = %spec.id, "interrupted pause: local files not kept: {e}");
    }
    snapshot::artifacts_of(out).map(Some)
}

/// The guest RAM memfd of a QEMU, as a path that can be opened.
pub(crate) fn memfd_path(pid: i32) -> Result<PathBuf> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?;
    for e in fds.flatten() {
        if let Ok(target) = std::fs::read_link(e.path()) {
            if target
                .to_string_lossy()
                .starts_with("/memfd:memory-backend-memfd")
            {
                return Ok(e.path());
            }
        }
    }
    Err(Error::backend(format!("QEMU {pid} has no guest RAM memfd")))
}

/// Copy only the allocated extents of `src` (SEEK_DATA/SEEK_HOLE) into a new
/// sparse `dst` of the same length.
pub(crate) fn copy_data_extents(src: &Path, dst: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let i = std::fs::File::open(src)?;
    let len = i.metadata()?.len();
    let o = std::fs::File::create(dst)?;
    o.set_len(len)?;
    let fd = i.as_raw_fd();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos: i64 = 0;
    while (pos as u64) < len {
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: no more data
        }
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let end = if hole < 0 { len as i64 } else { hole };
        let mut at = data;
        while at < end {
            let n = ((end - at) as usize).min(buf.len());
            i.read_exact_at(&mut buf[..n], at as u64)?;
            o.write_all_at(&buf[..n], at as u64)?;
            at += n as i64;
        }
        pos = end;
    }
    Ok(())
}

/// What a pause does with QEMU once the state is saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// QEMU quits: nothing of the sandbox runs or holds RAM.
    Quit,
    /// QEMU stays, stopped, for this long (see `standby`).
    Standby(Duration),
}

/// Pause: sync, stop, save the device state (and RAM: the guest's own RAM
/// file is linked, not copied), write meta.json, then quit QEMU or hold it
/// in standby, and put the disk in `out` (linked, or flattened from a
/// resumed chain). The sandbox directory keeps its RAM file, disk and
/// `local/` for a local resume (`local`), bound to the stored snapshot
/// later by `pause_stored`. On an error before QEMU quit, the sandbox runs
/// on (or the error says it is lost).
pub(crate) async fn pause(
    b: &MicrovmBackend,
    id: &SandboxId,
    out: &Path,
    keep_memory: bool,
    after: After,
) -> Result<Vec<Artifact>> {
    let vm = state::vm(b, id)?;
    let lock = state::op_lock(b, id);
    let _op = lock.lock().await;
    state::begin_op_timings(b, id);
    local::unbind(&vm.dir);
    std::fs::create_dir_all(out)?;
    let t = Instant::now();
    let saved: Result<()> = async {
        let r = guest::call(b, &vm, Request::Sync, None, Duration::ZERO).await;
        expect_ok(r?).map_err(|e| e.context("sync"))?;
        let ram_file = if keep_memory {
            save_memory(b, &vm, out, false).await?.1
        } else {
            false
        };
        // meta.json, with the blake3 of the memory state, is written
        // while QEMU still holds the state: once QEMU is gone, a
        // meta.json that verifies is the proof that the memory state is
        // complete (see `pause_leftovers`).
        if let Err(e) = write_meta(b, &vm, out, keep_memory, ram_file, false) {
            if keep_memory {
                let _ = vm.qmp.lock().await.execute("cont", None).await;
            }
            return Err(e);
        }
        failpoint::hit("pause.meta-written");
        Ok(())
    }
    .await;
    if let Err(e) = saved {
        return Err(op_failed(&vm, out, e, "pause").await);
    }
    let rootfs = vm.image.rootfs();
    if let (After::Standby(keep_for), true) = (after, keep_memory) {
        // QEMU stays, stopped; its block devices were flushed and let go
        // by the completed migration, so the disk is stable to link.
        let td = Instant::now();
        let r = async {
            disk::export_disk(&b.config.qemu_img, &vm.dir, out, Export::Link, &rootfs).await?;
            local::keep_pause_files(&vm.dir, out)?;
            snapshot::artifacts_of(out)
        }
        .await;
        let arts = match r {
            Ok(a) => a,
            Err(e) => {
                let e = e.context("pause: writing the disk");
                let _ = vm.qmp.lock().await.execute("cont", None).await;
                return Err(op_failed(&vm, out, e, "pause").await);
            }
        };
        note_disk_ms(b, id, td);
        standby::enter(b, vm, keep_for).await?;
        tracing::info!(sandbox = %id, ms = t.elapsed().as_millis() as u64, "paused into standby");
        return Ok(arts);
    }
    // From here the VM goes away; the artifacts are complete once the disk
    // is in `out`.
    b.vms.lock().unwrap().remove(id);
    vm::quit_vm(&vm).await;
    vm::detach(b, id);
    failpoint::hit("pause.quit");
    let td = Instant::now();
    let r = async {
        disk::export_disk(&b.config.qemu_img, &vm.dir, out, Export::Link, &rootfs).await?;
        failpoint::hit("pause.disk-exported");
        local::keep_pause_files(&vm.dir, out)?;
        snapshot::artifacts_of(out)
    }
    .await;
    cleanup_dir_files(&vm.dir);
    standby::disown_own_files(&vm.dir, &vm.ram);
    match r {
        Ok(arts) => {
            note_disk_ms(b, id, td);
            tracing::info!(sandbox = %id, ms = t.elapsed().as_millis() as u64, "paused");
            Ok(arts)
        }
        Err(e) => Err(e.context(
            "pause: QEMU has exited but the artifacts could not be written; the sandbox is not running",
        )),
    }
}

fn note_disk_ms(b: &MicrovmBackend, id: &SandboxId, since: Instant) {
    let mut tm = b.timings.lock().unwrap();
    tm.entry(id.clone()).or_default().disk_ms = since.elapsed().as_millis() as u64;
}

pub(crate) async fn snapshot(
    b: &MicrovmBackend,
    id: &SandboxId,
    out: &Path,
) -> Result<Vec<Artifact>> {
    let vm = state::vm(b, id)?;
    state::begin_op_timings(b, id);
    std::fs::create_dir_all(out)?;
    let saved: Result<bool> = async {
        let r = guest::call(b, &vm, Request::Sync, None, Duration::ZERO).await;
        expect_ok(r?).map_err(|e| e.context("sync"))?;
        Ok(save_memory(b, &vm, out, true).await?.1)
    }
    .await;
    let ram_file = match saved {
        Ok(rf) => rf,
        Err(e) => return Err(op_failed(&vm, out, e, "snapshot").await),
    };
    // The VM is stopped and its block devices flushed/inactivated by the
    // completed migration: copy the disk now, then continue.
    let td = Instant::now();
    let disk = disk::export_disk(
        &b.config.qemu_img,
        &vm.dir,
        out,
        Export::Copy,
        &vm.image.rootfs(),
    )
    .await;
    let cont = vm.qmp.lock().await.execute("cont", None).await;
    if let Err(e) = cont {
        guest::fail_vm(&vm, &format!("cont after snapshot: {}", e.message)).await;
        return Err(Error::backend(format!(
            "snapshot: the VM could not be continued ({}); it was killed",
            e.message
        )));
    }
    if let Err(e) = disk {
        let _ = std::fs::remove_file(out.join(MEMORY_STATE));
        let _ = std::fs::remove_file(out.join(MEMORY_RAM));
        return Err(e.context("snapshot: disk copy failed; the sandbox still runs"));
    }
    note_disk_ms(b, id, td);
    // Guest time jumped by the stop: put it right.
    let _ = guest::set_time(b, &vm).await;
    write_meta(b, &vm, out, true, ram_file, true)?;
    snapshot::artifacts_of(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_reports_its_own_phases_only() {
        let dir = tempfile::tempdir().unwrap();
        let b = MicrovmBackend::new(crate::MicrovmConfig::new(dir.path().to_path_buf()));
        let id = SandboxId::generate();
        // What a boot and a resume recorded before the pause.
        b.timings.lock().unwrap().insert(
            id.clone(),
            state::OpTimings {
                start_ms: 4153,
                hello_ms: 3744,
                migrate_ms: 900,
                resume_path: "local".into(),
                ..Default::default()
            },
        );
        state::begin_op_timings(&b, &id);
        note_disk_ms(&b, &id, Instant::now() - Duration::from_millis(5));
        let m = b.timings(&id).as_map();
        assert_eq!(m.keys().collect::<Vec<_>>(), vec!["disk_ms"], "{m:?}");
    }

    #[test]
    fn extent_copy_keeps_content_and_holes() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a");
        let f = std::fs::File::create(&src).unwrap();
        let len = 8u64 << 20;
        f.set_len(len).unwrap();
        f.write_all_at(&[7u8; 5000], 4096).unwrap();
        f.write_all_at(&[9u8; 10], 6 << 20).unwrap();
        drop(f);
        let dst = dir.path().join("b");
        copy_data_extents(&src, &dst).unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(&dst).unwrap().blocks();
        assert!(
            blocks * 512 < len / 2,
            "copy is not sparse: {blocks} blocks"
        );
    }
}
