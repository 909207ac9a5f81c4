//! `stasis serve`: the daemon's flags, their translation into a
//! `DaemonConfig` (every path made absolute), and running it until a signal.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use stasis_core::{Error, Result};

use crate::data_dir::default_data_dir;

#[derive(Args, Clone)]
pub struct ServeArgs {
    #[arg(long, env = "STASIS_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: std::net::SocketAddr,
    /// Backend used when a manifest names none.
    #[arg(long, default_value = "process", env = "STASIS_DEFAULT_BACKEND")]
    default_backend: String,
    /// Images directory (default: <data-dir>/images): microVM guest images
    /// <images>/<name>/, process-backend root filesystems <images>/<name>/rootfs/.
    #[arg(long, env = "STASIS_IMAGES")]
    images: Option<PathBuf>,
    /// microVM accelerator: auto (timed KVM boot probe), kvm or tcg.
    #[arg(long, default_value = "auto", env = "STASIS_ACCEL")]
    accel: String,
    /// Snapshot store URL: file:///dir (default <data-dir>/store) or s3://bucket/prefix.
    #[arg(long, env = "STASIS_STORE")]
    store: Option<String>,
    /// Metadata database URL: sqlite:///path (default <data-dir>/meta.db) or
    /// postgres://user[:password]@host[:port]/db (several daemons may share it).
    #[arg(long, env = "STASIS_META")]
    meta: Option<String>,
    /// This node's id among daemons sharing a PostgreSQL database (default <hostname>-<port>).
    #[arg(long, env = "STASIS_NODE_ID")]
    node_id: Option<String>,
    /// URL other nodes forward requests to (default http://<listen address>).
    #[arg(long, env = "STASIS_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// Seconds a node's lease on a running sandbox lasts without a heartbeat;
    /// a node silent this long is taken as dead and its sandboxes taken over.
    #[arg(long, default_value_t = 10)]
    lease_secs: u64,
    /// File holding the store's master key (64 hex digits).
    #[arg(long)]
    master_key_file: Option<PathBuf>,
    /// Environment variable holding the store's master key.
    #[arg(long)]
    master_key_env: Option<String>,
    /// Use a fixed, publicly known master key (demo/tests only).
    #[arg(long)]
    insecure_dev_key: bool,
    /// This node's region; tenants pinned to other regions are refused here.
    #[arg(long, env = "STASIS_REGION")]
    region: Option<String>,
    /// The region of this node's store (default: --region).
    #[arg(long, env = "STASIS_STORE_REGION")]
    store_region: Option<String>,
    /// Largest file the file API writes or reads whole, in MiB. Uploads
    /// are received to disk and copied into the sandbox a piece at a time,
    /// so this bounds disk use per upload, not memory.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    max_file_mb: u64,
    /// Largest image upload (`stasis image import` archive, `stasis image
    /// build` context) in MiB, as sent; a bigger one is refused with 413.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    max_upload_mb: u64,
    /// Most MiB one tar from a tenant may unpack to: each layer of an
    /// imported image and the import archive itself, a build context, an
    /// archive a Dockerfile ADDs, the changes of one RUN step. A
    /// decompression bomb past it is refused with 413 and leaves nothing.
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..))]
    max_layer_mb: u64,
    /// Write the bound address here once serving.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Seconds an unreferenced snapshot chunk is kept before GC may delete it.
    #[arg(long, default_value_t = 900)]
    gc_grace_secs: u64,
    /// Cgroup parent of the process backend.
    #[arg(long, default_value = "stasis")]
    cgroup_parent: String,
    /// Sustained requests per second allowed per API token (0: no limit).
    #[arg(long, default_value_t = 200)]
    rate_limit_per_sec: u32,
    /// Requests a token may send at once before the sustained rate applies.
    #[arg(long, default_value_t = 400)]
    rate_limit_burst: u32,
    /// A host webhook endpoints may name: `host`, `host:port` or
    /// `*.domain[:port]`. Repeatable; none: tenants cannot register webhooks.
    #[arg(long = "webhook-allow", value_name = "HOST")]
    webhook_allow: Vec<String>,
    /// A host directory whose contents manifests may mount read-only into
    /// sandboxes (`mounts[].source` must lie under one). Repeatable; none: no mounts.
    #[arg(long = "allow-mount", value_name = "DIR")]
    allow_mount: Vec<PathBuf>,
    /// After an idle pause, keep a microVM's stopped QEMU and its RAM this
    /// many seconds (standby) so the next request continues it at once; the
    /// pause is stored as always. A manifest's `lifecycle.standby_secs`
    /// overrides it; 0 = off.
    #[arg(long, default_value_t = stasis_server::manager::DEFAULT_STANDBY_SECS, value_parser = clap::value_parser!(u64).range(0..=86400))]
    standby_secs: u64,
    /// Host RAM (MiB) all sandboxes in standby may hold together; past it,
    /// the one that entered standby first is released.
    #[arg(long, default_value_t = 2048)]
    standby_max_mb: u64,
    /// Process backend: how long a memory-paused sandbox keeps its
    /// processes frozen on this node (or its standby window, if longer).
    /// Past it they end, freeing their RAM and host processes, and the
    /// pause becomes filesystem-only (`pause_kind: filesystem`, audited as
    /// `pause_downgraded`): its next resume starts afresh from its files. A
    /// manifest's `lifecycle.keep_frozen` keeps them for the whole pause.
    #[arg(long, default_value_t = stasis_backend_process::DEFAULT_FROZEN_SECS, value_parser = clap::value_parser!(u64).range(0..=7 * 86400))]
    frozen_secs: u64,
    /// Disk (MiB) this node's paused sandboxes may keep beyond their stored
    /// snapshots (a microVM's RAM file, disk chain, local pause files, also
    /// in standby); past it the least recently paused are evicted (their
    /// next resume comes from the store). 0: evict each pause once stored.
    /// Default: half the space free on the data dir's filesystem at start.
    #[arg(long, value_name = "MIB")]
    local_pause_max_mb: Option<u64>,
    /// TCG translation buffer (MiB) of a restored microVM (a fork): its
    /// largest memory not shared with its siblings. 0: as a booted guest's.
    #[arg(long, env = "STASIS_TCG_TB_MB_RESTORE", default_value_t = 0)]
    tcg_tb_mb_restore: u32,
    /// Pace of the background store scrub, which reads back and verifies
    /// every chunk of the live snapshots and repairs damage from this
    /// node's local copies: plaintext bytes per second (`512k`, `4M`); 0 = off.
    #[arg(long, default_value = "4M", value_parser = scrub_rate)]
    scrub_rate: u64,
    /// At SIGTERM/SIGINT, drain before stopping for at most this many
    /// seconds: start no sandbox, `/readyz` not ready, pause every running
    /// sandbox to the store (another node resumes it on its next request).
    /// 0 = stop without draining (sandboxes keep running across the
    /// restart). Default: 25 with `--meta postgres://...` (a cluster), 0 on
    /// a single node.
    #[arg(long, overrides_with = "drain_on_stop_secs", value_parser = clap::value_parser!(u64).range(0..=3600))]
    drain_on_stop_secs: Option<u64>,
    /// Benches only: the in-memory fake backend stands in for the process
    /// backend (nothing runs; `stasis bench scale --backend fake`).
    #[arg(long, hide = true)]
    bench_fake_backend: bool,
    /// Requests (exec, files, sessions) that may run in one sandbox at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_inflight: u32,
    /// Requests that may wait for one of those slots; beyond, 429 `overloaded`.
    #[arg(long, default_value_t = 64)]
    max_queued: u32,
    /// Seconds a queued request waits for a slot before it gets 429 `overloaded`.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    max_queue_wait_secs: u64,
    /// A destination no sandbox may reach, whatever its policy says: a name,
    /// `*.wildcard`, address or network (`10.0.0.0/8`), optional `:port`.
    /// Checked against the names sandboxes ask for and the real addresses
    /// the proxy dials. Repeatable. Always denied besides: the host
    /// (loopback, its addresses, the daemon's), link-local (cloud
    /// metadata), multicast, broadcast, and private ranges unless
    /// --egress-allow-private.
    #[arg(long = "egress-deny", value_name = "ENTRY")]
    egress_deny: Vec<String>,
    /// Let sandboxes reach private ranges (10/8, 172.16/12, 192.168/16,
    /// 100.64/10, fc00::/7) that their policy allows. Loopback, link-local
    /// and the host's own addresses stay closed.
    #[arg(long)]
    egress_allow_private: bool,
    /// Open one host destination to sandboxes whose policy lists it, e.g. a
    /// package mirror on `127.0.0.1:3141`: an address or network, optional
    /// `:port`. Repeatable. Never opens the daemon's own listen address.
    #[arg(long = "egress-expose", value_name = "ADDR")]
    egress_expose: Vec<String>,
    /// DNS server (ip:port) the daemon asks for the names sandboxes may
    /// reach (default: the system resolver).
    #[arg(long, value_name = "ADDR")]
    egress_upstream: Option<std::net::SocketAddr>,
    /// A hosts file consulted before the upstream for those names.
    #[arg(long, value_name = "FILE")]
    egress_hosts: Option<PathBuf>,
    /// Serve each exposed port on its own origin, `<port>-<sandbox>.<DOMAIN>`
    /// (wildcard DNS and certificate pointing at the daemon): `[https://]DOMAIN[:PORT]`
    /// as clients reach it. Without it, ports are only on the daemon's origin
    /// (`/p/...`), confined for CLI and API use.
    #[arg(long, env = "STASIS_PORTS_DOMAIN", value_name = "DOMAIN")]
    ports_domain: Option<String>,
    /// Milliseconds a port request waits for a server that does not listen
    /// yet before answering 502 (0: no wait).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(0..=120_000))]
    port_listen_wait_ms: u64,
}

/// `p` as an absolute path: resolved (symlinks and `..`) where it exists,
/// else joined to the working directory.
pub fn absolute_path(flag: &str, p: &std::path::Path) -> Result<PathBuf> {
    if p.as_os_str().is_empty() {
        return Err(Error::invalid(format!("{flag}: empty path")));
    }
    match std::fs::canonicalize(p) {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::path::absolute(p)
            .map_err(|e| Error::invalid(format!("{flag} {}: {e}", p.display()))),
        Err(e) => Err(Error::invalid(format!("{flag} {}: {e}", p.display()))),
    }
}

fn serve_config(a: &ServeArgs) -> Result<stasis_server::daemon::DaemonConfig> {
    use stasis_server::daemon::{DaemonConfig, KeySource};
    // Every path is made absolute here, once: the daemon hands them to
    // QEMU, qemu-img and sandbox shims whose working directories differ.
    let data_dir = absolute_path(
        "--data-dir",
        &a.data_dir.clone().unwrap_or_else(default_data_dir),
    )?;
    let mut cfg = DaemonConfig::new(data_dir.clone());
    cfg.listen = a.listen;
    cfg.default_backend = stasis_core::BackendKind::parse(&a.default_backend)?;
    if let Some(i) = &a.images {
        cfg.images_dir = absolute_path("--images", i)?;
    }
    cfg.accel = a.accel.parse()?;
    cfg.store_url = a.store.clone();
    cfg.meta_url = a.meta.clone();
    cfg.node_id = a.node_id.clone();
    cfg.advertise_url = a.advertise_url.clone();
    if a.lease_secs == 0 || a.lease_secs > 3600 {
        return Err(Error::invalid("--lease-secs must be between 1 and 3600"));
    }
    cfg.lease = Duration::from_secs(a.lease_secs);
    cfg.key = match (&a.master_key_file, &a.master_key_env, a.insecure_dev_key) {
        (Some(f), None, false) => KeySource::File(absolute_path("--master-key-file", f)?),
        (None, Some(v), false) => KeySource::Env(v.clone()),
        (None, None, true) => {
            eprintln!("stasis: WARNING: --insecure-dev-key: snapshots are encrypted with a publicly known key; never use this in production");
            KeySource::InsecureDev
        }
        (None, None, false) => {
            return Err(Error::invalid(
                "no master key for the snapshot store: give --master-key-file FILE or --master-key-env VAR (or --insecure-dev-key for a demo)",
            ))
        }
        _ => return Err(Error::invalid("give only one of --master-key-file, --master-key-env, --insecure-dev-key")),
    };
    for r in a.region.iter().chain(a.store_region.iter()) {
        stasis_server::governance::validate_region(r)?;
    }
    cfg.region = stasis_server::governance::Region {
        node: a.region.clone(),
        store: a.store_region.clone().or_else(|| a.region.clone()),
    };
    cfg.max_file_bytes = a.max_file_mb.saturating_mul(1024 * 1024);
    cfg.image_limits = stasis_server::images::ImageLimits {
        upload_bytes: a.max_upload_mb.saturating_mul(1024 * 1024),
        layer_bytes: a.max_layer_mb.saturating_mul(1024 * 1024),
    };
    cfg.ready_file = match &a.ready_file {
        Some(f) => Some(absolute_path("--ready-file", f)?),
        None => None,
    };
    cfg.cgroup_parent = a.cgroup_parent.clone();
    cfg.ports = stasis_server::ports::PortsConfig {
        domain: a
            .ports_domain
            .as_deref()
            .map(stasis_server::ports::PortsDomain::parse)
            .transpose()?,
        listen_wait: Duration::from_millis(a.port_listen_wait_ms),
    };
    cfg.allow_mounts = a
        .allow_mount
        .iter()
        .map(|d| {
            let p = absolute_path("--allow-mount", d)?;
            if p.is_dir() {
                Ok(p)
            } else {
                Err(Error::invalid(format!(
                    "--allow-mount {}: not a directory",
                    d.display()
                )))
            }
        })
        .collect::<Result<_>>()?;
    cfg.gc_grace = Duration::from_secs(a.gc_grace_secs);
    cfg.webhook_allow = a.webhook_allow.clone();
    cfg.rate_limit = stasis_server::auth::RateLimit {
        per_sec: a.rate_limit_per_sec,
        burst: a.rate_limit_burst,
    };
    cfg.standby = Duration::from_secs(a.standby_secs);
    cfg.standby_max_bytes = a.standby_max_mb.saturating_mul(1 << 20);
    cfg.frozen_window = Duration::from_secs(a.frozen_secs);
    cfg.local_pause_max_bytes = a.local_pause_max_mb.map(|mb| mb.saturating_mul(1 << 20));
    cfg.tcg_tb_mb_restore = (a.tcg_tb_mb_restore > 0).then_some(a.tcg_tb_mb_restore);
    cfg.scrub_rate = a.scrub_rate;
    cfg.drain_on_stop = a.drain_on_stop_secs.map(Duration::from_secs);
    cfg.fake_backend = a.bench_fake_backend;
    cfg.inflight = stasis_server::inflight::InflightLimits {
        max_inflight: a.max_inflight as usize,
        max_queued: a.max_queued as usize,
        max_wait: Duration::from_secs(a.max_queue_wait_secs),
    };
    cfg.egress = stasis_net::EgressConfig {
        deny: a.egress_deny.clone(),
        allow_private: a.egress_allow_private,
        expose: a.egress_expose.clone(),
        listen: Vec::new(),
        upstream: a.egress_upstream,
        hosts: match &a.egress_hosts {
            Some(f) => Some(absolute_path("--egress-hosts", f)?),
            None => None,
        },
        limits: Default::default(),
    };
    Ok(cfg)
}

/// `stasis serve`: log to stderr, run the daemon until SIGINT or SIGTERM.
pub async fn run(a: Box<ServeArgs>) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cfg = serve_config(&a)?;
    stasis_server::daemon::run(cfg, async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    })
    .await?;
    Ok(())
}

fn scrub_rate(s: &str) -> std::result::Result<u64, String> {
    stasis_server::scrub::parse_rate(s).map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_paths_are_made_absolute() {
        let cwd = std::env::current_dir().unwrap();
        let p = absolute_path("--images", std::path::Path::new("no-such-dir/images")).unwrap();
        assert_eq!(p, cwd.join("no-such-dir/images"));
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("a")).unwrap();
        let p = absolute_path("--images", &d.path().join("a/../a")).unwrap();
        assert_eq!(p, d.path().canonicalize().unwrap().join("a"));
        let e = absolute_path("--images", std::path::Path::new("")).unwrap_err();
        assert!(e.message.contains("--images"), "{e}");
    }

    #[test]
    fn the_local_pause_cap_is_given_in_mib_and_defaults_to_the_free_disk() {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: ServeArgs,
        }
        let cfg = |extra: &[&str]| {
            let d = tempfile::tempdir().unwrap();
            let dir = d.path().to_str().unwrap().to_string();
            let mut argv = vec!["stasis", "--insecure-dev-key", "--data-dir", &dir];
            argv.extend_from_slice(extra);
            let t = <T as clap::Parser>::try_parse_from(argv).unwrap();
            serve_config(&t.a).unwrap().local_pause_max_bytes
        };
        assert_eq!(cfg(&[]), None, "unset: half the free disk, at start");
        assert_eq!(cfg(&["--local-pause-max-mb", "0"]), Some(0));
        assert_eq!(cfg(&["--local-pause-max-mb", "3"]), Some(3 << 20));
    }
}
