//! Starting and stopping a sandbox's QEMU: a cold boot or an incoming
//! migration from artifacts (checked first: format, QEMU version, image,
//! hashes, devices), the QMP connection, the guest's network (QEMU's
//! namespace prepared and handed to the egress service, port forwards
//! added again, all before the guest runs), the wait for the incoming load,
//! the agent's `hello`, quitting; on top of that `create`, `resume`,
//! `restore` and `recover`'s reattach. A QEMU that fails to come up is
//! killed and its namespace detached; every wait has a deadline.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stasis_agent_proto::Request;
use stasis_backend::SandboxSpec;
use stasis_core::{Error, Manifest, Result};

use crate::agent::connect_agent;
use crate::boundary;
use crate::disk::{self, qemu_img};
use crate::guest::{self, expect_ok};
use crate::image::{kernel_append, Image};
use crate::net::Nic;
use crate::ports;
use crate::qemu::{self, cleanup_dir_files, diagnostics, Accel, RamBacking};
use crate::qmp::{MigrationStatus, Qmp};
use crate::snapshot::{self, check_devices, same_qemu, SnapshotMeta, MEMORY_RAM, MEMORY_STATE};
use crate::state::{self, MicrovmBackend, OpTimings, Vm, VmRecord, VM_RECORD};
use crate::util;

/// How a VM starts: booting, or loading a saved memory state.
pub(crate) enum StartKind<'a> {
    Cold,
    Incoming {
        artifacts: &'a Path,
        meta: &'a SnapshotMeta,
    },
}

/// Start a QEMU in `spec.dir` (disk already in place) and bring it to a
/// running guest with an answering agent. On error QEMU is killed and its
/// namespace detached from the egress service.
pub(crate) async fn start_vm(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    image: Image,
    accel: Accel,
    memory_mb: u64,
    kind: StartKind<'_>,
    inputs: Vec<boundary::InputDisk>,
) -> Result<Arc<Vm>> {
    let r = start_vm_inner(b, spec, image, accel, memory_mb, kind, inputs).await;
    if r.is_err() {
        detach(b, &spec.id);
    }
    r
}

/// Hand QEMU's namespace to the egress service (blocking work, off the
/// runtime's threads).
async fn attach(b: &MicrovmBackend, spec: &SandboxSpec, ns: &std::fs::File) -> Result<()> {
    let Some(egress) = b.config.egress.clone() else {
        return Ok(());
    };
    let (id, policy, ns) = (
        spec.id.clone(),
        spec.manifest.network.clone(),
        ns.try_clone()?,
    );
    tokio::task::spawn_blocking(move || egress.attach(&id, &ns, &policy))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
        .map_err(|e| e.context("attaching the egress service to QEMU's network namespace"))
}

/// The egress service stops serving a sandbox whose QEMU is gone.
/// Idempotent.
pub(crate) fn detach(b: &MicrovmBackend, id: &stasis_core::SandboxId) {
    if let Some(e) = &b.config.egress {
        e.detach(id);
    }
}

/// Kill a VM that failed after it started, detach it, clean its files.
pub(crate) async fn abandon(b: &MicrovmBackend, vm: &Vm) {
    vm.proc.lock().await.kill().await;
    detach(b, &vm.id);
    cleanup_dir_files(&vm.dir);
}

async fn start_vm_inner(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    image: Image,
    accel: Accel,
    memory_mb: u64,
    kind: StartKind<'_>,
    inputs: Vec<boundary::InputDisk>,
) -> Result<Arc<Vm>> {
    let t0 = Instant::now();
    let had_nic = match &kind {
        StartKind::Cold => !b.config.test_guests_without_nic,
        StartKind::Incoming { meta, .. } => meta.network,
    };
    let nic = Nic::choose(had_nic, b.config.egress.is_some(), b.config.jail.is_some());
    let dir = spec.dir.clone();
    let vcpus = match &kind {
        StartKind::Cold => vcpus_for(&spec.manifest),
        StartKind::Incoming { meta, .. } => meta.vcpus.max(1),
    };
    let (incoming, ram, expect_boot) = match &kind {
        StartKind::Cold => {
            let ram = if b.config.shared_ram {
                RamBacking::SharedMemfd
            } else {
                RamBacking::Anonymous
            };
            (None, ram, None)
        }
        StartKind::Incoming { artifacts, meta } => {
            // QEMU reads the state through a descriptor we pass it.
            let state = std::fs::File::open(artifacts.join(MEMORY_STATE))?;
            let ram = if meta.ram_file {
                // Keep our own link so the server may delete the artifacts.
                let local = dir.join(MEMORY_RAM);
                util::link_or_copy(&artifacts.join(MEMORY_RAM), &local)?;
                RamBacking::PrivateFile(local)
            } else {
                RamBacking::Anonymous
            };
            (Some(state), ram, Some(meta.boot_id.clone()))
        }
    };
    let launch = qemu::Launch {
        qemu: b.config.qemu.clone(),
        name: spec.id.to_string(),
        accel,
        memory_mb,
        vcpus,
        kernel: image.vmlinux(),
        initrd: image.initrd(),
        append: kernel_append(accel, &image),
        // Deferred: the capabilities are set and the state's descriptor
        // is passed over QMP first.
        incoming: incoming.as_ref().map(|_| "defer".into()),
        paused: true,
        ram: ram.clone(),
        tcg_tb_mb: b.config.tcg_tb_mb,
        nic,
        inputs: inputs
            .iter()
            .map(|d| (d.image.clone(), d.serial.clone()))
            .collect(),
        seccomp: b.config.jail.is_some(),
    };
    let _ = std::fs::remove_file(dir.join(qemu::CONSOLE_LOG));
    let jail = match &b.config.jail {
        Some(cfg) => Some(qemu::prepare_jail(cfg, &launch, &dir, &image.dir)?),
        None => None,
    };
    let mut proc = qemu::QemuProc::spawn(&launch, &dir, jail.as_ref().map(|j| &j.1))?;
    drop(jail);
    let pid = proc.pid;
    let fail = |why: String, proc: &mut qemu::QemuProc| {
        let why = format!("{why}{}", diagnostics(&dir, proc.alive()));
        Error::backend(why)
    };
    // QMP.
    let qmp = match connect_qmp(&dir, &mut proc).await {
        Ok(q) => q,
        Err(e) => {
            let err = fail(e.message, &mut proc);
            proc.kill().await;
            return Err(err);
        }
    };
    let mut qmp = qmp;
    // The network, while the guest is stopped: QEMU's namespace (the
    // jail's) gets loopback and the egress service; forwards of a paused
    // sandbox come back.
    let forwards = if nic == Nic::None {
        BTreeSet::new()
    } else {
        b.ports
            .lock()
            .unwrap()
            .get(&spec.id)
            .cloned()
            .unwrap_or_default()
    };
    let netns = match b.config.jail.is_some() {
        true => match crate::net::qemu_netns(pid) {
            Ok(ns) => ns,
            Err(e) => {
                let err = fail(e.message, &mut proc);
                proc.kill().await;
                return Err(err);
            }
        },
        false => None,
    };
    let tn = Instant::now();
    let r = async {
        if let Some(ns) = &netns {
            crate::net::prepare_netns(ns)?;
            if nic == Nic::Open {
                attach(b, spec, ns).await?;
            }
            let mut gone = Vec::new();
            for p in &forwards {
                // Not worth failing a start over: connect_port adds it again.
                if let Err(e) = ports::add_forward(&mut qmp, *p).await {
                    tracing::warn!(sandbox = %spec.id, port = p, "{e}");
                    gone.push(*p);
                }
            }
            Ok::<Vec<u16>, Error>(gone)
        } else {
            Ok(Vec::new())
        }
    }
    .await;
    let net_ms = tn.elapsed().as_millis() as u64;
    let gone = match r {
        Ok(gone) => gone,
        Err(e) => {
            let err = fail(e.message, &mut proc);
            proc.kill().await;
            return Err(err);
        }
    };
    let forwards: BTreeSet<u16> = match netns.is_some() {
        true => forwards.into_iter().filter(|p| !gone.contains(p)).collect(),
        false => BTreeSet::new(),
    };
    if incoming.is_none() {
        if let Err(e) = qmp.execute("cont", None).await {
            let err = fail(format!("cont of a cold boot: {}", e.message), &mut proc);
            proc.kill().await;
            return Err(err);
        }
    }
    let mut incoming_ms = 0;
    if let Some(state) = &incoming {
        let r = async {
            if let RamBacking::PrivateFile(_) = &ram {
                qmp.execute(
                    "migrate-set-capabilities",
                    Some(serde_json::json!({"capabilities": [
                        {"capability": "x-ignore-shared", "state": true}
                    ]})),
                )
                .await?;
            }
            qmp.migrate_fd("migrate-incoming", state).await
        }
        .await;
        if let Err(e) = r {
            let err = fail(
                format!("deferred incoming migration: {}", e.message),
                &mut proc,
            );
            proc.kill().await;
            return Err(err);
        }
    }
    if incoming.is_some() {
        let t = Instant::now();
        let r = wait_incoming(&mut qmp, &mut proc, b.config.migration_timeout).await;
        if let Err(e) = r {
            let err = fail(format!("memory state refused: {}", e.message), &mut proc);
            proc.kill().await;
            return Err(Error::new(e.code, err.message));
        }
        incoming_ms = t.elapsed().as_millis() as u64;
        if let Err(e) = qmp.execute("cont", None).await {
            let err = fail(
                format!("cont after incoming migration: {}", e.message),
                &mut proc,
            );
            proc.kill().await;
            return Err(err);
        }
    }
    // Agent.
    let hello_timeout = match kind {
        StartKind::Cold => b.config.boot_timeout,
        StartKind::Incoming { .. } => b.config.agent_timeout,
    };
    let agent_path = dir.join(qemu::AGENT_SOCK);
    let (agent, boot_id) = match connect_agent(&agent_path, &mut proc, hello_timeout).await {
        Ok(x) => x,
        Err(e) => {
            let err = fail(e.message, &mut proc);
            proc.kill().await;
            return Err(Error::new(e.code, err.message));
        }
    };
    if let Some(want) = expect_boot {
        if want != boot_id {
            proc.kill().await;
            return Err(Error::backend(format!(
                "guest rebooted instead of continuing: boot_id {boot_id} != saved {want}"
            )));
        }
    }
    let vm = Arc::new(Vm {
        id: spec.id.clone(),
        dir: dir.clone(),
        image,
        memory_mb,
        accel,
        workdir: spec.manifest.workdir.clone(),
        env: spec.manifest.env.clone(),
        manifest: spec.manifest.clone(),
        inputs,
        vcpus,
        ram,
        boot_id,
        nic,
        netns,
        ports: Mutex::new(forwards),
        proc: tokio::sync::Mutex::new(proc),
        pid,
        qmp: tokio::sync::Mutex::new(qmp),
        agent: tokio::sync::RwLock::new(agent),
        failed: Mutex::new(None),
    });
    b.timings.lock().unwrap().insert(
        spec.id.clone(),
        OpTimings {
            start_ms: t0.elapsed().as_millis() as u64,
            incoming_ms,
            net_ms,
            ..Default::default()
        },
    );
    Ok(vm)
}

/// Shared by resume and restore: validate artifacts, place the disk,
/// start QEMU (incoming or cold).
pub(crate) async fn start_from_artifacts(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    artifacts: &Path,
) -> Result<(Arc<Vm>, bool)> {
    state::remember_parent(b, &spec.dir);
    let t0 = Instant::now();
    let meta = snapshot::read_meta(artifacts)?;
    let image = Image::resolve_with(
        &b.config.images_dir,
        b.config.image_store.as_deref(),
        spec.manifest.image.as_deref(),
    )?;
    let has_state = artifacts.join(MEMORY_STATE).is_file();
    if has_state && meta.is_none() {
        return Err(Error::integrity(
            "memory.state without meta.json: refusing to load an unverifiable memory state",
        ));
    }
    let with_memory = has_state && meta.as_ref().is_some_and(|m| m.memory);
    if let Some(m) = &meta {
        snapshot::check_format(m)?;
        // A memory image loads only into the QEMU version that saved it:
        // microvm is not a versioned machine type, so nothing promises
        // that another version reads the device state (a disk-only
        // snapshot has none and is portable). Refused before anything
        // starts; the snapshot is left as it is.
        if with_memory && !same_qemu(&m.qemu_version, &b.qemu_version) {
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
        if with_memory {
            let want = m.memory_state_blake3.clone().unwrap_or_default();
            snapshot::verify(
                &b.verified,
                &artifacts.join(MEMORY_STATE),
                &want,
                Some(m.memory_state_bytes),
            )
            .await?;
            if m.ram_file {
                let want = m.memory_ram_blake3.clone().unwrap_or_default();
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
    let accel = match &meta {
        Some(m) if with_memory => m.accelerator,
        _ => state::accelerator(b).await,
    };
    let memory_mb = match &meta {
        Some(m) if with_memory => m.memory_mb,
        _ => spec.manifest.resources.memory_mb,
    };
    let r = if with_memory {
        let meta = meta.as_ref().unwrap();
        start_vm(
            b,
            spec,
            image,
            accel,
            memory_mb,
            StartKind::Incoming { artifacts, meta },
            inputs,
        )
        .await
    } else {
        start_vm(b, spec, image, accel, memory_mb, StartKind::Cold, inputs).await
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

/// Validate the mount sources and build (or reuse) their input disks.
pub(crate) async fn prepare_inputs(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
) -> Result<Vec<boundary::InputDisk>> {
    if spec.manifest.mounts.is_empty() {
        return Ok(Vec::new());
    }
    let (m, dir) = (spec.manifest.clone(), spec.dir.clone());
    let (roots, mkfs) = (b.config.mount_roots.clone(), b.config.mkfs_ext4.clone());
    tokio::task::spawn_blocking(move || boundary::prepare_inputs(&m, &dir, &roots, &mkfs))
        .await
        .map_err(|e| Error::internal(e.to_string()))?
}

/// Wait for an incoming migration (the VM was started with `-S -incoming`).
pub(crate) async fn wait_incoming(
    qmp: &mut Qmp,
    proc: &mut qemu::QemuProc,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if !proc.alive() {
            return Err(Error::backend("QEMU exited while loading the memory state"));
        }
        let st = match qmp.query_migrate().await {
            Ok(s) => s,
            Err(e) => {
                if !proc.alive() {
                    return Err(Error::backend("QEMU exited while loading the memory state"));
                }
                return Err(e);
            }
        };
        match st {
            MigrationStatus::Completed => {
                // Completed incoming: the run state leaves "inmigrate".
                let rs = qmp.run_state().await?;
                if rs != "inmigrate" {
                    return Ok(());
                }
            }
            MigrationStatus::Failed(e) => return Err(Error::backend(e)),
            MigrationStatus::Cancelled => return Err(Error::backend("migration cancelled")),
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(Error::timeout(format!(
                "incoming migration did not complete within {} s",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Stop a VM's QEMU (quit, then kill).
pub(crate) async fn quit_vm(vm: &Vm) {
    {
        let mut q = vm.qmp.lock().await;
        let _ = tokio::time::timeout(Duration::from_secs(2), q.execute("quit", None)).await;
    }
    let mut p = vm.proc.lock().await;
    if !p.wait_exit(Duration::from_secs(10)).await {
        p.kill().await;
    }
}

/// Connect QMP while watching the process (it may exit on a bad command line).
pub(crate) async fn connect_qmp(dir: &Path, proc: &mut qemu::QemuProc) -> Result<Qmp> {
    let path = dir.join(qemu::QMP_SOCK);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if !proc.alive() {
            return Err(Error::backend("QEMU exited during start"));
        }
        let probe = tokio::time::timeout(Duration::from_secs(1), util::connect_unix(&path)).await;
        if matches!(probe, Ok(Ok(_))) {
            // QEMU accepts one QMP client at a time; the probe connection is
            // closed, now connect for real.
            break;
        }
        if Instant::now() >= deadline {
            return Err(Error::timeout("QEMU's QMP socket did not appear"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Qmp::connect(&path, Duration::from_secs(5), Duration::from_secs(30)).await
}

/// vCPUs for a manifest: `resources.cpus` rounded up, at most the host's
/// CPUs. (No finer CPU quota is applied to QEMU: a fraction of a core
/// becomes a whole vCPU.)
pub fn vcpus_for(m: &Manifest) -> u32 {
    let host = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    (m.resources.cpus.ceil() as u32).clamp(1, host.max(1))
}

/// Reattach to a QEMU that survived its daemon (`recover`): QMP, a stopped
/// guest continued, the agent's `hello` with the recorded boot id, and the
/// handle rebuilt from `vm.json`.
pub(crate) async fn reattach(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    mut proc: qemu::QemuProc,
) -> Result<Arc<Vm>> {
    let rec: VmRecord = serde_json::from_slice(&std::fs::read(spec.dir.join(VM_RECORD))?)?;
    let mut qmp = Qmp::connect(
        &spec.dir.join(qemu::QMP_SOCK),
        Duration::from_secs(5),
        Duration::from_secs(10),
    )
    .await?;
    let st = qmp.run_state().await?;
    match st.as_str() {
        "running" => {}
        // A daemon killed mid-pause/snapshot left it stopped.
        "paused" | "postmigrate" => {
            let _ = qmp.execute("migrate_cancel", None).await;
            qmp.execute("cont", None).await?;
        }
        other => return Err(Error::backend(format!("QEMU is in state {other}"))),
    }
    let (agent, boot) = connect_agent(
        &spec.dir.join(qemu::AGENT_SOCK),
        &mut proc,
        b.config.agent_timeout,
    )
    .await?;
    if boot != rec.boot_id {
        return Err(Error::backend("guest rebooted while the daemon was away"));
    }
    let pid = proc.pid;
    // A record from before every guest had a NIC: it had one exactly when
    // its allowlist was non-empty (restricted, with relays of its own).
    let nic = rec
        .nic
        .unwrap_or(if spec.manifest.network.allow.is_empty() {
            Nic::None
        } else {
            Nic::Restricted
        });
    // (A QEMU of an older backend with a NIC may run in our namespace: it
    // gets no attachment and no port forwards.)
    let netns = crate::net::qemu_netns(pid)?;
    // The guest has been running all along. Its namespace keeps whatever
    // firewall the egress service left there; this daemon's service
    // serves it again from now.
    if let (Some(ns), Nic::Open) = (&netns, nic) {
        attach(b, spec, ns).await?;
    }
    Ok(Arc::new(Vm {
        id: spec.id.clone(),
        dir: spec.dir.clone(),
        image: Image {
            name: rec.image,
            dir: rec.image_dir,
            digest: rec.image_digest,
            cmdline: None,
            cmdline_tcg: None,
        },
        memory_mb: rec.memory_mb,
        accel: rec.accelerator,
        workdir: rec.workdir,
        env: spec.manifest.env.clone(),
        manifest: spec.manifest.clone(),
        inputs: rec.inputs,
        vcpus: rec.vcpus,
        ram: if rec.shared_ram {
            RamBacking::SharedMemfd
        } else {
            RamBacking::Anonymous
        },
        boot_id: boot,
        nic,
        netns,
        ports: Mutex::new(rec.ports.iter().copied().collect()),
        proc: tokio::sync::Mutex::new(proc),
        pid,
        qmp: tokio::sync::Mutex::new(qmp),
        agent: tokio::sync::RwLock::new(agent),
        failed: Mutex::new(None),
    }))
}

pub(crate) async fn create(b: &MicrovmBackend, spec: &SandboxSpec) -> Result<()> {
    state::remember_parent(b, &spec.dir);
    if b.vms.lock().unwrap().contains_key(&spec.id) {
        return Err(Error::state(format!("sandbox {} already runs", spec.id)));
    }
    let image = Image::resolve_with(
        &b.config.images_dir,
        b.config.image_store.as_deref(),
        spec.manifest.image.as_deref(),
    )?;
    std::fs::create_dir_all(&spec.dir)?;
    let inputs = prepare_inputs(b, spec).await?;
    let backing = image.rootfs().display().to_string();
    // The disk quota: the root filesystem may grow to the image's plus
    // disk_mb (the agent grows it), never beyond.
    let size = boundary::disk_bytes(
        boundary::qcow2_virtual_size(&image.rootfs())?,
        &spec.manifest,
    )
    .to_string();
    let _ = std::fs::remove_file(spec.dir.join(qemu::DISK));
    let _ = std::fs::remove_file(spec.dir.join(qemu::BASE_DISK));
    qemu_img(
        &b.config.qemu_img,
        &spec.dir,
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            &backing,
            "-F",
            "qcow2",
            qemu::DISK,
            &size,
        ],
    )
    .await?;
    let accel = b.accelerator().await;
    let vm = match start_vm(
        b,
        spec,
        image,
        accel,
        spec.manifest.resources.memory_mb,
        StartKind::Cold,
        inputs,
    )
    .await
    {
        Ok(vm) => vm,
        Err(e) => {
            cleanup_dir_files(&spec.dir);
            let _ = std::fs::remove_file(spec.dir.join(qemu::DISK));
            return Err(e.context("create"));
        }
    };
    if let Err(e) = guest::after_cold_boot(b, &vm).await {
        abandon(b, &vm).await;
        return Err(e.context("create"));
    }
    state::insert(b, vm)
}

pub(crate) async fn resume(b: &MicrovmBackend, spec: &SandboxSpec, artifacts: &Path) -> Result<()> {
    if b.vms.lock().unwrap().contains_key(&spec.id) {
        return Err(Error::state(format!("sandbox {} already runs", spec.id)));
    }
    let (vm, with_memory) = start_from_artifacts(b, spec, artifacts)
        .await
        .map_err(|e| e.context("resume"))?;
    let tf = Instant::now();
    let r = if with_memory {
        let saved = snapshot::read_meta(artifacts)?;
        async {
            guest::set_time(b, &vm).await?;
            let inputs = saved.as_ref().map(|m| m.inputs.clone());
            guest::configure(b, &vm, false, inputs.as_deref()).await?;
            if saved.as_ref().is_some_and(legacy_relays) {
                guest::drop_relay_addresses(b, &vm).await?;
            }
            Ok(())
        }
        .await
    } else {
        guest::after_cold_boot(b, &vm).await
    };
    state::note_finish(b, &spec.id, tf);
    if let Err(e) = r {
        abandon(b, &vm).await;
        return Err(e.context("resume"));
    }
    state::insert(b, vm)
}

/// A format 2 guest with a NIC was saved with the relays of that time: the
/// agent had put every non-loopback destination's address on the guest's
/// `lo`, which would now catch the guest's connections to it.
fn legacy_relays(m: &SnapshotMeta) -> bool {
    m.format == 2 && m.network
}

pub(crate) async fn restore(
    b: &MicrovmBackend,
    spec: &SandboxSpec,
    artifacts: &Path,
) -> Result<()> {
    if b.vms.lock().unwrap().contains_key(&spec.id) {
        return Err(Error::state(format!("sandbox {} already runs", spec.id)));
    }
    let (vm, with_memory) = start_from_artifacts(b, spec, artifacts)
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
        if !with_memory {
            guest::after_cold_boot(b, &vm).await?;
        }
        let r = guest::call(
            b,
            &vm,
            Request::SetIdentity {
                hostname,
                machine_id,
                entropy,
            },
            None,
            Duration::ZERO,
        )
        .await?;
        expect_ok(r)?;
        if with_memory {
            guest::set_time(b, &vm).await?;
            let saved = snapshot::read_meta(artifacts)?;
            let inputs = saved.as_ref().map(|m| m.inputs.clone());
            guest::configure(b, &vm, false, inputs.as_deref()).await?;
            if saved.as_ref().is_some_and(legacy_relays) {
                guest::drop_relay_addresses(b, &vm).await?;
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    state::note_finish(b, &spec.id, tf);
    if let Err(e) = r {
        abandon(b, &vm).await;
        return Err(e.context("restore"));
    }
    state::insert(b, vm)
}
