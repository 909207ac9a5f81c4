//! Bringing a paused sandbox back, and starting a new one from a snapshot.
//!
//! A resume takes the first of these that applies:
//! 1. **standby**: the sandbox's QEMU is still held, stopped, for the
//!    snapshot the server resumes: `cont` (`standby`);
//! 2. **local**: the files its pause left on this host are bound to that
//!    snapshot and unchanged (`local`): a new QEMU maps the guest's own RAM
//!    file in place and loads the device state from `local/`, on the disk
//!    chain as it was; nothing is fetched or hashed;
//! 3. **store**: the artifacts the server fetched from the store, verified;
//!    the guest's RAM file is moved (or, when shared, copied) into the
//!    sandbox directory and becomes its own, the disk becomes the base of
//!    a fresh overlay.
//!
//! A restore (a new sandbox from a snapshot) maps the snapshot's RAM file
//! copy-on-write (`base.ram`, shared with its other forks in the page cache)
//! and gets a new identity.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stasis_agent_proto::Request;
use stasis_backend::SandboxSpec;
use stasis_core::{Error, Result, SnapshotId};

use crate::applied;
use crate::disk;
use crate::guest::{self, expect_ok};
use crate::image::Image;
use crate::local;
use crate::migration::copy_data_extents;
use crate::qemu::{self, cleanup_dir_files, RamBacking};
use crate::shared_ram;
use crate::snapshot::{self, check_devices, same_qemu, SnapshotMeta, MEMORY_RAM, MEMORY_STATE};
use crate::standby;
use crate::state::{self, op_lock, MicrovmBackend, Vm};
use crate::vm::{abandon, fresh_ram, prepare_inputs, start_vm, StartKind};

/// Whether a resume of `snap` needs the store's artifacts: not when the
/// sandbox is held in standby for it, or its local files are bound to it.
/// What is accepted here is what the next `resume` with no artifacts uses.
pub(crate) async fn needs_artifacts(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    snap: &SnapshotId,
) -> bool {
    let lock = op_lock(b, &spec.id);
    let _op = lock.lock().await;
    let local = standby::holds(b, &spec.id, snap) || local::check(&spec.dir, snap).is_some();
    if local {
        b.accepted
            .lock()
            .unwrap()
            .insert(spec.id.clone(), snap.clone());
    }
    !local
}

/// Which way a resume went, for the timings.
fn note_path(b: &MicrovmBackend, spec: &SandboxSpec, path: &str) {
    tracing::info!(sandbox = %spec.id, path, "resume");
    b.timings
        .lock()
        .unwrap()
        .entry(spec.id.clone())
        .or_default()
        .resume_path = path.to_string();
}

pub(crate) async fn resume(b: &MicrovmBackend, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
    let lock = op_lock(b, &spec.id);
    let _op = lock.lock().await;
    if b.vms.lock().unwrap().contains_key(&spec.id) {
        return Err(Error::state(format!("sandbox {} already runs", spec.id)));
    }
    let accepted = b.accepted.lock().unwrap().remove(&spec.id);
    let from_store = std::fs::read_dir(artifacts)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if !from_store {
        let snap = accepted.ok_or_else(|| {
            Error::state(format!(
                "resume of {}: no artifacts given and no local state accepted for it",
                spec.id
            ))
        })?;
        if standby::holds(b, &spec.id, &snap) {
            let held = standby::take(b, &spec.id).expect("held");
            let t = Instant::now();
            standby::continue_held(b, spec, held)
                .await
                .map_err(|e| e.context("resume"))?;
            b.timings.lock().unwrap().insert(
                spec.id.clone(),
                state::OpTimings {
                    finish_ms: t.elapsed().as_millis() as u64,
                    resume_path: "standby".into(),
                    ..Default::default()
                },
            );
            return Ok(());
        }
        let meta = local::check(&spec.dir, &snap).ok_or_else(|| {
            Error::state(format!(
                "resume of {}: its local state is no longer that of {snap}",
                spec.id
            ))
        })?;
        local::unbind(&spec.dir);
        let r = resume_local(b, spec, &meta).await;
        note_path(b, spec, "local");
        return r.map_err(|e| e.context("resume"));
    }
    // From the store: whatever this host still holds is not what resumes.
    if let Some(held) = standby::take(b, &spec.id) {
        standby::end(b, held).await;
    }
    local::unbind(&spec.dir);
    let (vm, with_memory) = start_from_artifacts(b, spec, artifacts, true)
        .await
        .map_err(|e| e.context("resume"))?;
    let saved = snapshot::read_meta(artifacts)?;
    let r = finish_resume(b, spec, &vm, with_memory, saved.as_ref(), false).await;
    note_path(b, spec, "store");
    r
}

/// Resume from the local files (see the module docs), which the caller has
/// checked and unbound.
async fn resume_local(b: &MicrovmBackend, spec: &SandboxSpec, meta: &SnapshotMeta) -> Result<()> {
    let t0 = Instant::now();
    let image = checked_image(b, spec, meta)?;
    std::fs::create_dir_all(&spec.dir)?;
    let inputs = prepare_inputs(b, spec).await?;
    let with_memory = meta.memory;
    if with_memory {
        check_devices(meta, &spec.manifest)?;
    }
    let prepare_ms = t0.elapsed().as_millis() as u64;
    let r = if with_memory {
        let ram = if meta.ram_file {
            RamBacking::SharedFile(qemu::RAM_FILE.into())
        } else {
            fresh_ram(b, &spec.dir, meta.memory_mb)?
        };
        let local_dir = local::dir_of(&spec.dir);
        let kind = StartKind::Incoming {
            artifacts: &local_dir,
            meta,
            ram,
        };
        start_vm(
            b,
            spec,
            image,
            meta.accelerator,
            meta.memory_mb,
            kind,
            inputs,
        )
        .await
    } else {
        let accel = state::accelerator(b).await;
        let mb = spec.manifest.resources.memory_mb;
        start_vm(b, spec, image, accel, mb, StartKind::Cold, inputs).await
    };
    let vm = match r {
        Ok(vm) => vm,
        Err(e) => {
            cleanup_dir_files(&spec.dir);
            return Err(e);
        }
    };
    if let Some(t) = b.timings.lock().unwrap().get_mut(&spec.id) {
        t.prepare_ms = prepare_ms;
    }
    finish_resume(b, spec, &vm, with_memory, Some(meta), true).await
}

/// After a resumed guest's agent answered: its clock, the manifest's
/// boundaries again (the inputs that changed refreshed); a cold-booted one
/// (a filesystem pause) gets its first configuration. On error QEMU goes.
async fn finish_resume(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    vm: &Arc<Vm>,
    with_memory: bool,
    saved: Option<&SnapshotMeta>,
    reuse_config: bool,
) -> Result<()> {
    let tf = Instant::now();
    let r = if with_memory {
        after_memory_load(b, vm, saved, None, reuse_config).await
    } else {
        applied::cold_configure(b, vm).await
    };
    state::note_finish(b, &spec.id, tf);
    if let Err(e) = r {
        abandon(b, vm).await;
        return Err(e.context("resume"));
    }
    state::insert(b, vm.clone())?;
    if with_memory {
        warm_up(vm).await;
    }
    Ok(())
}

/// What a guest whose memory state was loaded needs before it serves:
/// its clock (it stood still), the manifest's boundaries again (the
/// inputs that changed refreshed) and, for a restore, a new identity.
/// These requests are independent of one another and the agent serves
/// each on a thread of its own, so they are sent together: one agent
/// round trip (the longest request's) instead of one per request. The
/// relay addresses of a format 2 guest go after its configuration.
///
/// `reuse_config` (a local resume: the guest that paused, as it was): the
/// configuration is not sent again when the guest is recorded to have it
/// (`applied`) and no input disk changed.
async fn after_memory_load(
    b: &MicrovmBackend,
    vm: &Arc<Vm>,
    saved: Option<&SnapshotMeta>,
    identity: Option<Request>,
    reuse_config: bool,
) -> Result<()> {
    let t = Instant::now();
    let ms = |t: Instant| t.elapsed().as_millis() as u64;
    let time = async { (guest::set_time(b, vm).await, ms(t)) };
    let ident = async {
        match identity {
            Some(req) => match guest::call(b, vm, req, None, Duration::ZERO).await {
                Ok(r) => (expect_ok(r), ms(t)),
                Err(e) => (Err(e), ms(t)),
            },
            None => (Ok(()), 0),
        }
    };
    let inputs = saved.map(|m| m.inputs.clone());
    let conf = async {
        let want = applied::wanted(vm);
        let same_inputs = inputs.as_ref().is_some_and(|old| {
            old.len() == vm.inputs.len() && old.iter().zip(&vm.inputs).all(|(o, d)| o == &d.digest)
        });
        if reuse_config && same_inputs && applied::has(&vm.dir, &want) {
            return (Ok(()), 0);
        }
        applied::forget(&vm.dir);
        let r = guest::configure(b, vm, false, inputs.as_deref()).await;
        if r.is_ok() {
            applied::record(&vm.dir, &want);
        }
        (r, ms(t))
    };
    let ((rt, time_ms), (ri, ident_ms), (rc, conf_ms)) = tokio::join!(time, ident, conf);
    if let Some(tm) = b.timings.lock().unwrap().get_mut(&vm.id) {
        tm.set_time_ms = time_ms;
        tm.identity_ms = ident_ms;
        tm.configure_ms = conf_ms;
    }
    rt?;
    ri?;
    rc?;
    if saved.is_some_and(legacy_relays) {
        guest::drop_relay_addresses(b, vm).await?;
    }
    Ok(())
}

/// Under TCG a QEMU that loaded a memory state starts with an empty code
/// cache: the guest's first process start (kernel fork/exec paths, the
/// shell, the agent's exec path) is translated again, ~200 ms here, more
/// than the resume itself. So the resumed guest starts one `true` on its
/// own, not waited for: its translation overlaps the rest of the resume
/// (the server's bookkeeping, the answer, the client's next request), and
/// the client's first exec finds that code translated. Nothing of it is
/// visible but a short-lived process; its outcome is ignored.
async fn warm_up(vm: &Vm) {
    if vm.accel != crate::qemu::Accel::Tcg {
        return;
    }
    let agent = vm.agent.read().await.clone();
    let req = Request::Exec {
        req: stasis_core::ExecRequest {
            argv: vec!["true".into()],
            env: Default::default(),
            cwd: Some("/".into()),
            timeout_ms: 10_000,
            stdin: None,
            user: None,
        },
        stream: false,
    };
    tokio::spawn(async move {
        let _ = agent.request(req, None, Duration::from_secs(20)).await;
    });
}

/// A format 2 guest with a NIC was saved with the relays of that time: the
/// agent had put every non-loopback destination's address on the guest's
/// `lo`, which would now catch the guest's connections to it.
fn legacy_relays(m: &SnapshotMeta) -> bool {
    m.format == 2 && m.network
}

/// The image a saved memory state loads on, checked: this QEMU version, the
/// same image build.
fn checked_image(b: &MicrovmBackend, spec: &SandboxSpec, m: &SnapshotMeta) -> Result<Image> {
    let image = Image::resolve_with(
        &b.config.images_dir,
        b.config.image_store.as_deref(),
        spec.manifest.image.as_deref(),
    )?;
    snapshot::check_format(m)?;
    // A memory image loads only into the QEMU version that saved it:
    // microvm is not a versioned machine type, so nothing promises that
    // another version reads the device state (a disk-only snapshot has
    // none and is portable). Refused before anything starts; the snapshot
    // is left as it is.
    if m.memory && !same_qemu(&m.qemu_version, &b.qemu_version) {
        return Err(Error::incompatible_snapshot(format!(
            "snapshot memory was saved by QEMU {} and this node runs QEMU {}: a memory image loads only into the QEMU version that saved it",
            m.qemu_version, b.qemu_version
        )));
    }
    if m.image_digest != image.digest {
        return Err(Error::backend(format!(
            "snapshot was taken on image {:?} (digest {}), but {:?} is now {}: refusing",
            m.image,
            &m.image_digest[..12.min(m.image_digest.len())],
            image.name,
            &image.digest[..12]
        )));
    }
    Ok(image)
}

/// Shared by resume (`own_ram`: the saved RAM becomes the guest's own file)
/// and restore (the snapshot's RAM file mapped copy-on-write): validate
/// artifacts, place the disk, start QEMU (incoming or cold).
pub(crate) async fn start_from_artifacts(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    artifacts: &Path,
    own_ram: bool,
) -> Result<(Arc<Vm>, bool)> {
    state::remember_parent(b, &spec.dir);
    let t0 = Instant::now();
    let meta = snapshot::read_meta(artifacts)?;
    let has_state = artifacts.join(MEMORY_STATE).is_file();
    if has_state && meta.is_none() {
        return Err(Error::integrity(
            "memory.state without meta.json: refusing to load an unverifiable memory state",
        ));
    }
    let with_memory = has_state && meta.as_ref().is_some_and(|m| m.memory);
    let mut ram_kept = false;
    let image = match &meta {
        Some(m) => checked_image(b, spec, m)?,
        None => Image::resolve_with(
            &b.config.images_dir,
            b.config.image_store.as_deref(),
            spec.manifest.image.as_deref(),
        )?,
    };
    if let (Some(m), true) = (&meta, with_memory) {
        let want = m.memory_state_blake3.clone().unwrap_or_default();
        snapshot::verify(
            &b.verified,
            &artifacts.join(MEMORY_STATE),
            &want,
            Some(m.memory_state_bytes),
        )
        .await?;
        // A RAM file without a hash is the guest's own (format 4): the
        // store verified it chunk by chunk. A restore whose RAM image this
        // node keeps already (`shared_ram`) maps that file, and its staged
        // copy is not even read.
        if let (true, Some(want)) = (m.ram_file, m.memory_ram_blake3.clone()) {
            std::fs::create_dir_all(&spec.dir)?;
            let base = spec.dir.join(qemu::BASE_RAM);
            ram_kept = !own_ram && shared_ram::link_kept(&spec.dir, &want, &base);
            if !ram_kept {
                snapshot::verify(&b.verified, &artifacts.join(MEMORY_RAM), &want, None).await?;
            }
        }
    }
    std::fs::create_dir_all(&spec.dir)?;
    let inputs = prepare_inputs(b, spec).await?;
    if let (Some(m), true) = (&meta, with_memory) {
        check_devices(m, &spec.manifest)?;
    }
    disk::import_disk(&b.config.qemu_img, artifacts, &spec.dir, &image.rootfs()).await?;
    let prepare_ms = t0.elapsed().as_millis() as u64;
    let r = match (&meta, with_memory) {
        (Some(m), true) => {
            let ram = if !m.ram_file {
                fresh_ram(b, &spec.dir, m.memory_mb)?
            } else if own_ram {
                take_ram_file(&artifacts.join(MEMORY_RAM), &spec.dir).await?
            } else {
                // Keep our own link so the server may delete the artifacts.
                let base = spec.dir.join(qemu::BASE_RAM);
                let staged = artifacts.join(MEMORY_RAM);
                match (ram_kept, m.memory_ram_blake3.as_deref()) {
                    (true, _) => {}
                    (false, Some(h)) => shared_ram::keep(&spec.dir, h, &staged, &base)?,
                    (false, None) => crate::util::link_or_copy(&staged, &base)?,
                }
                RamBacking::PrivateFile(base)
            };
            let kind = StartKind::Incoming {
                artifacts,
                meta: m,
                ram,
            };
            start_vm(b, spec, image, m.accelerator, m.memory_mb, kind, inputs).await
        }
        _ => {
            let accel = state::accelerator(b).await;
            let mb = spec.manifest.resources.memory_mb;
            start_vm(b, spec, image, accel, mb, StartKind::Cold, inputs).await
        }
    };
    match r {
        Ok(vm) => {
            if let Some(t) = b.timings.lock().unwrap().get_mut(&spec.id) {
                t.prepare_ms = prepare_ms;
            }
            Ok((vm, with_memory))
        }
        Err(e) => {
            cleanup_dir_files(&spec.dir);
            Err(e)
        }
    }
}

/// Make a fetched RAM file the guest's own `memory.ram`: moved when no one
/// else has it (a fresh download), else its allocated extents copied (the
/// artifacts are someone else's too and must stay as they are).
async fn take_ram_file(src: &Path, dir: &Path) -> Result<RamBacking> {
    use std::os::unix::fs::MetadataExt;
    let dst = dir.join(qemu::RAM_FILE);
    let md = std::fs::symlink_metadata(src)?;
    if !md.file_type().is_file() {
        return Err(Error::integrity("memory.ram is not a regular file"));
    }
    stasis_backend::fsafe::remove_nofollow(&dst)?;
    if md.nlink() == 1 && std::fs::rename(src, &dst).is_ok() {
        return Ok(RamBacking::SharedFile(qemu::RAM_FILE.into()));
    }
    let (s, d) = (src.to_path_buf(), dst.clone());
    tokio::task::spawn_blocking(move || copy_data_extents(&s, &d))
        .await
        .map_err(|e| Error::internal(e.to_string()))??;
    Ok(RamBacking::SharedFile(qemu::RAM_FILE.into()))
}

pub(crate) async fn restore(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    artifacts: &Path,
) -> Result<()> {
    if b.vms.lock().unwrap().contains_key(&spec.id) {
        return Err(Error::state(format!("sandbox {} already runs", spec.id)));
    }
    let (vm, with_memory) = start_from_artifacts(b, spec, artifacts, false)
        .await
        .map_err(|e| e.context("restore"))?;
    let tf = Instant::now();
    let r = async {
        // A restored guest must not share identity with its siblings: new
        // hostname (the sandbox id), machine-id and kernel entropy.
        use rand::RngCore;
        let mut entropy = vec![0u8; 64];
        rand::thread_rng().fill_bytes(&mut entropy);
        let mut mid = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut mid);
        let machine_id: String = mid.iter().map(|b| format!("{b:02x}")).collect();
        let hostname: String = spec.id.as_str().chars().take(63).collect();
        let identity = Request::SetIdentity {
            hostname,
            machine_id,
            entropy,
        };
        if with_memory {
            let saved = snapshot::read_meta(artifacts)?;
            after_memory_load(b, &vm, saved.as_ref(), Some(identity), false).await?;
        } else {
            applied::cold_configure(b, &vm).await?;
            expect_ok(guest::call(b, &vm, identity, None, Duration::ZERO).await?)?;
        }
        Ok::<(), Error>(())
    }
    .await;
    state::note_finish(b, &spec.id, tf);
    if let Err(e) = r {
        abandon(b, &vm).await;
        return Err(e.context("restore"));
    }
    state::insert(b, vm.clone())?;
    if with_memory {
        warm_up(&vm).await;
    }
    Ok(())
}
