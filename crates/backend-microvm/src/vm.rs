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

use stasis_backend::SandboxSpec;
use stasis_core::{Error, Manifest, Result};

use crate::agent::connect_agent;
use crate::boundary;
use crate::disk::qemu_img;
use crate::image::{kernel_append, Image};
use crate::net::Nic;
use crate::ports;
use crate::qemu::{self, cleanup_dir_files, diagnostics, Accel, RamBacking};
use crate::qmp::{MigrationStatus, Qmp};
use crate::snapshot::{SnapshotMeta, MEMORY_STATE};
use crate::state::{self, MicrovmBackend, OpTimings, Vm, VmRecord, VM_RECORD};
use crate::util;

/// How a VM starts: booting, or loading a saved memory state.
pub(crate) enum StartKind<'a> {
    Cold,
    Incoming {
        /// Holds `memory.state` (the device state, and the RAM unless
        /// `meta.ram_file`).
        artifacts: &'a Path,
        meta: &'a SnapshotMeta,
        /// Where the guest's RAM lives: the saved RAM file itself (its own,
        /// shared; or a snapshot's, copy-on-write), or a fresh one the
        /// stream fills.
        ram: RamBacking,
    },
}

/// The RAM of a guest that owns it, when the backend gives guests RAM
/// files: a fresh, sparse `memory.ram` of `memory_mb` in `dir` (whatever
/// was under the name is unlinked, never followed or written).
pub(crate) fn fresh_ram(b: &MicrovmBackend, dir: &Path, memory_mb: u64) -> Result<RamBacking> {
    if !b.config.shared_ram {
        return Ok(RamBacking::Anonymous);
    }
    let p = dir.join(qemu::RAM_FILE);
    stasis_backend::fsafe::remove_nofollow(&p)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)?;
    f.set_len(memory_mb << 20)?;
    Ok(RamBacking::SharedFile(qemu::RAM_FILE.into()))
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
        StartKind::Cold => (None, fresh_ram(b, &dir, memory_mb)?, None),
        StartKind::Incoming {
            artifacts,
            meta,
            ram,
        } => {
            // QEMU reads the state through a descriptor we pass it.
            let state = std::fs::File::open(artifacts.join(MEMORY_STATE))?;
            (Some(state), ram.clone(), Some(meta.boot_id.clone()))
        }
    };
    // The saved RAM is a file of its own (not in the stream): QEMU maps it.
    let ram_in_file = matches!(&kind, StartKind::Incoming { meta, .. } if meta.ram_file);
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
        tcg_tb_mb: match &ram {
            RamBacking::PrivateFile(_) => b.config.tcg_tb_mb_restore.or(b.config.tcg_tb_mb),
            _ => b.config.tcg_tb_mb,
        },
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
    let jail_ms = t0.elapsed().as_millis() as u64;
    let mut proc = qemu::QemuProc::spawn(&launch, &dir, jail.as_ref().map(|j| &j.1))?;
    drop(jail);
    let spawned = Instant::now();
    let pid = proc.pid;
    let fail = |why: String, proc: &mut qemu::QemuProc| {
        let why = format!("{why}{}", diagnostics(&dir, proc.alive()));
        Error::backend(why)
    };
    // QMP, and meanwhile the network, while the guest is stopped: QEMU's
    // namespace (the jail's, made when the jail was cloned, before QEMU
    // runs) gets loopback and the egress service. Neither needs the other:
    // QEMU's init and the service's firewall proceed side by side.
    let jailed = b.config.jail.is_some();
    let net = async {
        let tn = Instant::now();
        let netns = match jailed {
            true => crate::net::qemu_netns(pid)?,
            false => None,
        };
        if let Some(ns) = &netns {
            let ns2 = ns.try_clone()?;
            tokio::task::spawn_blocking(move || crate::net::prepare_netns(&ns2))
                .await
                .map_err(|e| Error::internal(e.to_string()))??;
            if nic == Nic::Open {
                attach(b, spec, ns).await?;
            }
        }
        Ok::<_, Error>((netns, tn.elapsed()))
    };
    let (qmp, net) = tokio::join!(connect_qmp(&dir, &mut proc), net);
    let qmp_ms = spawned.elapsed().as_millis() as u64;
    let (mut qmp, netns, prep) = match (qmp, net) {
        (Ok(q), Ok(x)) => (q, x.0, x.1),
        (Err(e), _) | (_, Err(e)) => {
            let err = fail(e.message, &mut proc);
            proc.kill().await;
            return Err(err);
        }
    };
    // Forwards of a paused sandbox come back.
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
    let tf = Instant::now();
    let mut gone = Vec::new();
    if netns.is_some() {
        for p in &forwards {
            // Not worth failing a start over: connect_port adds it again.
            if let Err(e) = ports::add_forward(&mut qmp, *p).await {
                tracing::warn!(sandbox = %spec.id, port = p, "{e}");
                gone.push(*p);
            }
        }
    }
    // The namespace's preparation (overlapping QEMU's init) and the forwards.
    let net_ms = (prep + tf.elapsed()).as_millis() as u64;
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
            if ram_in_file {
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
    let ta = Instant::now();
    let (agent, boot_id) = match connect_agent(&agent_path, &mut proc, hello_timeout).await {
        Ok(x) => x,
        Err(e) => {
            let err = fail(e.message, &mut proc);
            proc.kill().await;
            return Err(Error::new(e.code, err.message));
        }
    };
    let hello_ms = ta.elapsed().as_millis() as u64;
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
            jail_ms,
            qmp_ms,
            hello_ms,
            ..Default::default()
        },
    );
    Ok(vm)
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
        ram: match (&rec.ram_file, rec.shared_ram) {
            (Some(p), _) => RamBacking::SharedFile(p.clone()),
            (None, true) => RamBacking::SharedMemfd,
            (None, false) => RamBacking::Anonymous,
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
    if let Err(e) = crate::applied::cold_configure(b, &vm).await {
        abandon(b, &vm).await;
        return Err(e.context("create"));
    }
    state::insert(b, vm)
}
