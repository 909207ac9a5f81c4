//! Daemon bootstrap: open metadata and the snapshot store, build the
//! backends, reconcile what a previous run left, start the reaper and serve.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tracing::{info, warn};

use stasis_backend::Backend;
use stasis_backend_microvm::{AccelChoice, MicrovmBackend, MicrovmConfig};
use stasis_backend_process::{ProcessBackend, ProcessConfig};
use stasis_core::{BackendKind, Error, Result};
use stasis_meta::Meta;
use stasis_store::{MasterKey, Store};

use crate::cluster::{Cluster, ClusterConfig};
use crate::http::limit::Limiter;
use crate::http::{router, AppState};
use crate::manager::{Manager, ManagerConfig};
use crate::snapshots::Snapshots;

/// Where the master key of the snapshot store comes from.
#[derive(Debug, Clone)]
pub enum KeySource {
    File(PathBuf),
    Env(String),
    /// A fixed, publicly known key: for demos and tests only.
    InsecureDev,
}

/// How long a cluster node's stop drains by default (`--drain-on-stop-secs`):
/// a handful of pauses, within Kubernetes' default 30 s grace period.
pub const DEFAULT_DRAIN_ON_STOP_SECS: u64 = 25;

#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub default_backend: BackendKind,
    /// Operator-registered images, named by a manifest's `image`: microVM
    /// guest images `<images>/<name>/...`, process-backend root filesystems
    /// `<images>/<name>/rootfs/`.
    pub images_dir: PathBuf,
    pub accel: AccelChoice,
    /// Snapshot store URL; default `file://<data_dir>/store`.
    pub store_url: Option<String>,
    /// Metadata database URL: `sqlite:///path` (default `<data_dir>/meta.db`)
    /// or `postgres://...` (several daemons may share it).
    pub meta_url: Option<String>,
    /// This node's id among daemons sharing a PostgreSQL metadata database
    /// (default `<hostname>-<port>`).
    pub node_id: Option<String>,
    /// URL other nodes forward requests to (default `http://<listen address>`).
    pub advertise_url: Option<String>,
    /// Lease of a running sandbox; a node silent this long is taken as dead.
    pub lease: Duration,
    pub key: KeySource,
    pub max_file_bytes: u64,
    /// Image limits: the largest upload (`--max-upload-mb`) and what one
    /// tar may unpack to (`--max-layer-mb`).
    pub image_limits: crate::images::ImageLimits,
    /// Program + args of the process backend's shim (default: this executable).
    pub process_shim: Option<(PathBuf, Vec<String>)>,
    /// Cgroup parent name of the process backend (tests use unique ones).
    pub cgroup_parent: String,
    /// Written with the bound address once the daemon serves.
    pub ready_file: Option<PathBuf>,
    pub reaper_interval: Duration,
    /// Unreferenced store chunks younger than this survive GC.
    pub gc_grace: Duration,
    /// Per-token request rate limit.
    pub rate_limit: crate::auth::RateLimit,
    /// Host directories manifests may mount read-only (`--allow-mount`).
    pub allow_mounts: Vec<PathBuf>,
    /// Requests in flight and queued per sandbox (`--max-inflight`, `--max-queued`).
    pub inflight: crate::inflight::InflightLimits,
    /// Hosts (`host`, `host:port`, `*.domain`) webhook endpoints may name;
    /// empty: no webhooks.
    pub webhook_allow: Vec<String>,
    /// The egress service: operator deny list (`--egress-deny`), upstream
    /// resolver (`--egress-upstream`), hosts view (`--egress-hosts`).
    pub egress: stasis_net::EgressConfig,
    /// Standby window after an idle pause when a manifest sets none
    /// (`--standby-secs`; 0 = off).
    pub standby: Duration,
    /// Host RAM sandboxes in standby may hold together (`--standby-max-mb`).
    pub standby_max_bytes: u64,
    /// How long a memory-paused process sandbox keeps its processes frozen
    /// (`--frozen-secs`); past it they end and the pause is filesystem-only.
    pub frozen_window: Duration,
    /// Disk this node's paused sandboxes may keep beyond their stored
    /// snapshots before the least recently paused are evicted
    /// (`--local-pause-max-mb`; 0: evicted once stored). None: half the
    /// space free on the data dir's filesystem at start.
    pub local_pause_max_bytes: Option<u64>,
    /// TCG translation buffer (MiB) of a restored microVM
    /// (`--tcg-tb-mb-restore`; None: as a booted guest's).
    pub tcg_tb_mb_restore: Option<u32>,
    /// This node's region and its store's (`--region`, `--store-region`);
    /// tenants pinned to other regions are refused here.
    pub region: crate::governance::Region,
    /// Pace of the background store scrub in plaintext bytes per second
    /// (`--scrub-rate`; 0 = off).
    pub scrub_rate: u64,
    /// Exposed ports: the ports domain (`--ports-domain`) and how long a
    /// request waits for a listener (`--port-listen-wait-ms`).
    pub ports: crate::ports::PortsConfig,
    /// At a stop (SIGTERM), drain first for at most this long: start no
    /// sandbox, `/readyz` not ready, pause every running sandbox to the
    /// store (`--drain-on-stop-secs`; zero: stop without draining). Unset:
    /// [`DEFAULT_DRAIN_ON_STOP_SECS`] in a cluster, where another node
    /// takes the sandboxes over; none on a single node, whose sandboxes
    /// keep running across its restart.
    pub drain_on_stop: Option<Duration>,
    /// Benches only (`--bench-fake-backend`): the in-memory fake backend
    /// stands in for the process backend; nothing runs on the host, so the
    /// control plane can be measured at sizes no real backend reaches here.
    pub fake_backend: bool,
}

impl DaemonConfig {
    pub fn new(data_dir: PathBuf) -> Self {
        DaemonConfig {
            images_dir: data_dir.join("images"),
            data_dir,
            listen: "127.0.0.1:7070".parse().expect("addr"),
            default_backend: BackendKind::Process,
            accel: AccelChoice::Auto,
            store_url: None,
            meta_url: None,
            node_id: None,
            advertise_url: None,
            lease: Duration::from_secs(10),
            key: KeySource::InsecureDev,
            max_file_bytes: 64 * 1024 * 1024,
            image_limits: Default::default(),
            process_shim: None,
            cgroup_parent: "stasis".into(),
            ready_file: None,
            reaper_interval: Duration::from_millis(250),
            gc_grace: Duration::from_secs(15 * 60),
            rate_limit: crate::auth::RateLimit::default(),
            allow_mounts: Vec::new(),
            inflight: Default::default(),
            webhook_allow: Vec::new(),
            egress: stasis_net::EgressConfig::default(),
            standby: Duration::from_secs(crate::manager::DEFAULT_STANDBY_SECS),
            standby_max_bytes: 2 << 30,
            frozen_window: Duration::from_secs(stasis_backend_process::DEFAULT_FROZEN_SECS),
            local_pause_max_bytes: None,
            tcg_tb_mb_restore: None,
            region: Default::default(),
            scrub_rate: crate::scrub::DEFAULT_RATE,
            ports: Default::default(),
            drain_on_stop: None,
            fake_backend: false,
        }
    }
}

/// The master keys this node holds: a key file or env var may list several
/// (key generations, see `crate::governance`).
fn master_keys(src: &KeySource) -> Result<Vec<MasterKey>> {
    match src {
        KeySource::File(p) => MasterKey::ring_from_file(p),
        KeySource::Env(v) => MasterKey::ring_from_env(v),
        KeySource::InsecureDev => {
            warn!("using the INSECURE development master key: snapshots are not protected at rest");
            Ok(vec![MasterKey::insecure_dev()])
        }
    }
}

pub struct Daemon {
    pub manager: Arc<Manager>,
    pub doctor: serde_json::Value,
    /// The run-state service (runs, tool calls, approvals) of this daemon.
    pub runs: Arc<crate::runs::Runs>,
    /// Lifecycle webhooks (delivery starts with [`run`]).
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    /// The name this daemon claims webhook endpoints under.
    pub node: String,
    /// The process backend, whose own empty cgroups go at the stop.
    pub process: Arc<ProcessBackend>,
}

/// Open everything and reconcile; does not serve yet.
pub async fn open(cfg: &DaemonConfig) -> Result<Daemon> {
    open_at(cfg, cfg.listen).await
}

/// [`open`] for a daemon bound to `bound` (a cluster node advertises it).
pub async fn open_at(cfg: &DaemonConfig, bound: SocketAddr) -> Result<Daemon> {
    std::fs::create_dir_all(cfg.data_dir.join("sandboxes")).map_err(|e| {
        Error::internal(format!(
            "cannot create data dir {}: {e}",
            cfg.data_dir.display()
        ))
    })?;
    let data_dir = cfg
        .data_dir
        .canonicalize()
        .map_err(|e| Error::internal(format!("data dir {}: {e}", cfg.data_dir.display())))?;
    let meta_url = cfg
        .meta_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("meta.db").display()));
    let meta = Meta::connect(&meta_url).await?;
    // Tenant t-default with <data>/token, and <data>/admin.token (both 0600).
    for t in crate::auth::bootstrap(&meta, &data_dir).await? {
        let file = if t.is_admin { "admin.token" } else { "token" };
        info!(token = %t.id, file, "created an API token");
    }
    let store_url = cfg
        .store_url
        .clone()
        .unwrap_or_else(|| format!("file://{}", data_dir.join("store").display()));
    if store_url.starts_with("file://") {
        std::fs::create_dir_all(store_url.trim_start_matches("file://"))?;
    }
    let store = Store::open_keyring(
        &store_url,
        master_keys(&cfg.key)?,
        stasis_store::StoreConfig::default(),
    )
    .await?;
    let generation = crate::governance::attach(&meta, &store).await?;
    info!(generation = generation.generation, fingerprint = %generation.fingerprint, "master key generation");

    // What this daemon owns on the host (cgroups, supervisors) is named by
    // the id of its data dir, never by the parent other daemons share.
    let daemon_id = crate::daemon_id::load_or_create(&data_dir)?;
    let mut pcfg = ProcessConfig {
        cgroup_parent: cfg.cgroup_parent.clone(),
        daemon_id: Some(daemon_id.clone()),
        ..ProcessConfig::default()
    };
    if let Some((prog, args)) = &cfg.process_shim {
        pcfg.shim_program = prog.clone();
        pcfg.shim_args = args.clone();
    }
    pcfg.frozen_window = cfg.frozen_window;
    pcfg.hide_paths.push(data_dir.clone());
    pcfg.state_dir = Some(data_dir.join("sandboxes"));
    if let Some(u) = pcfg.userns.as_mut() {
        // (not in `sandboxes/`, which holds sandbox dirs only)
        u.claims_dir = Some(data_dir.join("userns"));
    }
    pcfg.images_dir = Some(cfg.images_dir.clone());
    let image_store = data_dir.join("images-store");
    let images = crate::images::Images::open_with_guest(
        &image_store,
        Some(cfg.images_dir.join("default")),
        cfg.image_limits,
    )?;
    pcfg.image_store = Some(image_store);
    let mut egress_cfg = cfg.egress.clone();
    egress_cfg.listen.push(bound);
    let egress = Arc::new(stasis_net::EgressService::new(egress_cfg)?);
    pcfg.egress = Some(egress.clone() as Arc<dyn stasis_backend::Egress>);
    let own_cgroup = pcfg.own_cgroup();
    let process = Arc::new(ProcessBackend::new(pcfg));

    let mut mcfg = MicrovmConfig::new(cfg.images_dir.clone());
    mcfg.image_store = Some(data_dir.join("images-store"));
    mcfg.egress = Some(egress.clone() as Arc<dyn stasis_backend::Egress>);
    mcfg.accel = cfg.accel;
    mcfg.base_dir = Some(data_dir.join("sandboxes"));
    mcfg.mount_roots = crate::mounts::allowed_roots(&cfg.allow_mounts)?;
    mcfg.standby_max_bytes = cfg.standby_max_bytes;
    mcfg.tcg_tb_mb_restore = cfg.tcg_tb_mb_restore;
    let microvm = Arc::new(MicrovmBackend::new(mcfg));
    let accel = microvm.init().await;
    info!(accelerator = ?accel.accelerator, reason = %accel.reason, "microVM accelerator");

    let backends: Vec<Arc<dyn Backend>> = if cfg.fake_backend {
        warn!("bench mode: the in-memory fake backend stands in for the process backend");
        let fake = stasis_backend::fake::FakeBackend::new(BackendKind::Process);
        vec![Arc::new(fake), microvm.clone()]
    } else {
        vec![process.clone(), microvm.clone()]
    };
    let meta_engine = meta.engine();
    let mut mc = ManagerConfig::new(data_dir.clone());
    mc.default_backend = cfg.default_backend;
    mc.max_file_bytes = cfg.max_file_bytes;
    mc.reaper_interval = cfg.reaper_interval;
    mc.standby = cfg.standby;
    mc.local_pause_max_bytes = cfg.local_pause_max_bytes;
    cfg.inflight.validate()?;
    mc.inflight = cfg.inflight;
    mc.allow_mounts = crate::mounts::allowed_roots(&cfg.allow_mounts)?;
    let manager = Manager::new(
        mc,
        meta,
        Snapshots::new(store).with_gc_grace(cfg.gc_grace),
        backends,
    );
    info!(
        cap_bytes = manager.local_pause_cap(),
        "cap on the local disk paused sandboxes keep"
    );
    let base = cfg.images_dir.join(crate::images::BASE_ROOTFS);
    if base.is_dir() {
        match images.register(crate::images::BASE_IMAGE, &base).await {
            Ok(e) => {
                info!(image = crate::images::BASE_IMAGE, id = %e.id, "stasis base image registered")
            }
            Err(e) => warn!(error = %e, "the stasis base image was not registered"),
        }
    }
    let ci = crate::images::CODE_INTERPRETER_IMAGE;
    match images
        .register_built(
            ci,
            &cfg.images_dir.join(crate::images::CODE_INTERPRETER_DIR),
        )
        .await
    {
        Ok(Some(e)) => info!(image = ci, id = %e.id, "code interpreter image registered"),
        Ok(None) => {}
        Err(e) => warn!(error = %e, "the code interpreter image was not registered"),
    }
    manager.set_images(images);
    manager.set_region(cfg.region.clone());
    manager.set_egress(egress);
    let cluster = if meta_engine == stasis_meta::Engine::Postgres {
        let node_id = match &cfg.node_id {
            Some(n) => n.clone(),
            None => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|_| "node".into());
                format!("{host}-{}", bound.port())
            }
        };
        let url = cfg
            .advertise_url
            .clone()
            .unwrap_or_else(|| format!("http://{bound}"));
        let c = Cluster::start(
            ClusterConfig {
                node_id,
                advertise_url: url,
                lease: cfg.lease,
            },
            manager.meta().clone(),
        )
        .await?;
        manager.set_cluster(c.clone());
        Some(c)
    } else {
        None
    };
    let report = manager.reconcile().await?;
    for (id, from, to) in &report.changed {
        info!(sandbox = %id, %from, %to, "reconciled");
    }
    // Run state: creates <data-dir>/runstate.key on first start and settles
    // tool calls a killed daemon left between intent and result.
    let runs = crate::runs::Runs::new(&manager).await?;
    let webhooks = crate::webhooks::Webhooks::new(
        manager.meta().clone(),
        manager.snapshots().store().clone(),
        crate::webhooks::WebhookPolicy::new(&cfg.webhook_allow)?,
    );
    let node = cluster
        .as_ref()
        .map(|c| c.node_id().to_string())
        .unwrap_or_else(|| "local".into());
    let doctor = json!({
        "data_dir": data_dir,
        "daemon_id": daemon_id,
        "cgroup": own_cgroup,
        "store": redact_url(&store_url),
        "meta": {"engine": meta_engine, "url": stasis_meta::redact_url(&meta_url)},
        "insecure_dev_key": matches!(cfg.key, KeySource::InsecureDev),
        "master_key": {"generation": generation.generation, "fingerprint": generation.fingerprint},
        "region": {"node": cfg.region.node, "store": cfg.region.store},
        "default_backend": cfg.default_backend,
        "process": stasis_backend_process::probe(),
        "microvm": microvm.doctor().await,
        "reconcile": report,
        "cluster": cluster.as_ref().map(|c| json!({"node": c.node_id(), "lease_ms": c.lease_ms()})),
    });
    Ok(Daemon {
        manager,
        doctor,
        runs,
        webhooks,
        node,
        process,
    })
}

fn redact_url(u: &str) -> String {
    match u.split_once('@') {
        Some((scheme_user, host)) if scheme_user.contains("://") => {
            let scheme = scheme_user.split("://").next().unwrap_or("");
            format!("{scheme}://***@{host}")
        }
        _ => u.to_string(),
    }
}

/// Run the daemon until `shutdown` resolves.
pub async fn run(
    cfg: DaemonConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| Error::internal(format!("cannot listen on {}: {e}", cfg.listen)))?;
    let addr = listener.local_addr()?;
    let daemon = open_at(&cfg, addr).await?;
    let reaper = daemon.manager.spawn_reaper();
    let heartbeat = daemon.manager.spawn_heartbeat();
    let scrub =
        crate::scrub::Scrubber::for_manager(&daemon.manager).spawn(crate::scrub::ScrubConfig {
            rate: cfg.scrub_rate,
            cursor_file: cfg.data_dir.join("scrub-cursor.json"),
            pass_interval: crate::scrub::PASS_INTERVAL,
        });
    let deliveries = daemon.webhooks.spawn(
        daemon.node.clone(),
        crate::webhooks::DeliveryConfig::default(),
    );
    let state = AppState {
        manager: daemon.manager.clone(),
        doctor: Arc::new(daemon.doctor),
        limiter: Arc::new(Limiter::new(cfg.rate_limit)),
        runs: daemon.runs.clone(),
        webhooks: daemon.webhooks.clone(),
        ports: Arc::new(crate::ports::Ports::new(
            daemon.manager.metrics().registry(),
            cfg.ports.clone(),
        )),
        console: Arc::new(crate::console::Console::default()),
    };
    info!(%addr, "stasis daemon listening");
    if let Some(f) = &cfg.ready_file {
        let tmp = f.with_extension("tmp");
        std::fs::write(&tmp, addr.to_string())?;
        std::fs::rename(&tmp, f)?;
    }
    // The client's address, for the port proxy's X-Forwarded-For.
    // Long-lived responses (the console's event feed) end when the daemon
    // stops, so the graceful shutdown does not wait for them.
    let stopping = tokio_util::sync::CancellationToken::new();
    let in_cluster = daemon.manager.cluster().is_some();
    let drain = cfg
        .drain_on_stop
        .unwrap_or(Duration::from_secs(if in_cluster {
            DEFAULT_DRAIN_ON_STOP_SECS
        } else {
            0
        }))
        .min(Duration::from_secs(3600));
    let drain = (!drain.is_zero()).then_some(drain);
    let manager = daemon.manager.clone();
    let app = router(state)
        .layer(axum::Extension(stopping.clone()))
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    let r = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            // Drained while still serving: /readyz says not ready, and
            // requests in flight finish before their sandbox is paused.
            if let Some(within) = drain {
                if let Err(e) = manager.drain("system:stop", within).await {
                    warn!(error = %e, "drain at stop failed");
                }
            }
            stopping.cancel();
        })
        .await
        .map_err(|e| Error::internal(format!("server: {e}")));
    reaper.abort();
    deliveries.abort();
    if let Some(h) = scrub {
        h.abort();
    }
    if let Some(h) = heartbeat {
        h.abort();
    }
    // Sandboxes outlive the daemon; the empty groups of its own do not.
    let process = daemon.process.clone();
    let _ = tokio::task::spawn_blocking(move || process.release_cgroups()).await;
    r
}
