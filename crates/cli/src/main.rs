//! `stasis`: the daemon (`stasis serve`) and a client of its HTTP API.
//!
//! Errors print one line, `stasis: <code>: <message>`, and exit 1 (usage
//! errors exit 2, from clap).

mod bench;
mod client;
mod cost;
mod demo;
mod doctor;
mod runs;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

use client::Client;
use stasis_core::{Error, Result};

#[derive(Parser)]
#[command(name = "stasis", version, about = "Stateful sandboxes for AI agents")]
struct Cli {
    /// Daemon URL.
    #[arg(
        long,
        global = true,
        env = "STASIS_URL",
        default_value = "http://127.0.0.1:7070"
    )]
    url: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// API token (default: the file `<data dir>/token`, or `admin.token` for
    /// `stasis admin` and `stasis secret`; data dir from STASIS_DATA_DIR).
    #[arg(long, global = true, env = "STASIS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

/// The token a client command sends: `--token`/`STASIS_TOKEN`, else the
/// token file of the local data dir (absent: no header, and the daemon's
/// 401 says what to do).
fn client_token(explicit: Option<&str>, admin: bool) -> Option<String> {
    if let Some(t) = explicit {
        return Some(t.to_string());
    }
    let dir = match std::env::var_os("STASIS_DATA_DIR") {
        Some(d) => PathBuf::from(d),
        None => default_data_dir(),
    };
    let file = dir.join(if admin { "admin.token" } else { "token" });
    std::fs::read_to_string(file).ok()
}

fn default_data_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib"));
    home.join(".local/share/stasis")
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the daemon.
    Serve(Box<ServeArgs>),
    /// Create a sandbox.
    Create(CreateArgs),
    /// List sandboxes.
    Ls {
        /// Only sandboxes in this state (running, paused, failed, destroyed, ...).
        #[arg(long)]
        state: Option<String>,
    },
    /// Show one sandbox.
    Get { id: String },
    /// Run a command in a sandbox (resumes it first if paused).
    Exec(ExecArgs),
    /// Files in a sandbox.
    #[command(subcommand)]
    Files(FilesCmd),
    /// Collect a sandbox's output directories (manifest `outputs`) into a
    /// local directory; reads a paused sandbox without resuming it where the
    /// backend can.
    Outputs {
        id: String,
        /// Directory to extract into (created if missing).
        #[arg(long)]
        to: Option<PathBuf>,
        /// Keep the tar itself at this path instead of extracting.
        #[arg(long)]
        tar: Option<PathBuf>,
    },
    /// Persistent processes (interpreters, shells) in a sandbox.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Pause a sandbox (memory + filesystem into a snapshot; compute freed).
    Pause {
        id: String,
        /// Keep only the filesystem.
        #[arg(long)]
        filesystem_only: bool,
    },
    /// Resume a paused sandbox (any request does this transparently too).
    Resume { id: String },
    /// Destroy a sandbox.
    Rm { id: String },
    /// Snapshot a sandbox's current state.
    Snapshot {
        id: String,
        #[arg(long)]
        ttl_secs: Option<u64>,
    },
    /// Snapshots of this tenant.
    #[command(subcommand)]
    Snapshots(SnapshotsCmd),
    /// Start a new sandbox from a snapshot.
    Restore {
        snapshot: String,
        /// Manifest for the new sandbox (JSON file, or - for stdin).
        #[arg(long)]
        manifest: Option<String>,
    },
    /// Fork N sandboxes from a fresh snapshot of a sandbox.
    Fork {
        id: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Host resource use of a sandbox (CPU, RSS, processes).
    Usage { id: String },
    /// The audit log.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Agent runs: ordered steps, idempotent tool calls, approvals, signed state.
    #[command(subcommand)]
    Runs(runs::RunsCmd),
    /// Approve a tool call waiting for approval (it runs, resuming the sandbox).
    Approve(runs::DecideArgs),
    /// Reject a tool call waiting for approval (the run continues without it).
    Reject(runs::DecideArgs),
    /// What this machine supports (run locally; adds the daemon's view when reachable).
    Doctor {
        /// Skip the timed KVM guest boot (up to 20 s on nested hosts).
        #[arg(long)]
        skip_kvm_probe: bool,
    },
    /// Run the end-to-end demo on a temporary daemon.
    Demo(demo::DemoArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Tenants and API tokens (needs an admin token).
    #[command(subcommand)]
    Admin(AdminCmd),
    /// Tenant secrets delivered to sandboxes whose manifest names them (admin token).
    #[command(subcommand)]
    Secret(SecretCmd),
    /// Cost of an always-running sandbox vs one paused on idle, from measured figures.
    Cost(cost::CostArgs),
}

#[derive(Subcommand)]
enum AdminCmd {
    /// Tenants.
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// API tokens of a tenant.
    #[command(subcommand)]
    Token(TokenCmd),
}

#[derive(Subcommand)]
enum TenantCmd {
    /// Create a tenant.
    Create {
        /// Display name.
        name: String,
        /// Tenant id (default: generated).
        #[arg(long)]
        id: Option<String>,
    },
    /// List tenants.
    Ls,
}

#[derive(Subcommand)]
enum TokenCmd {
    /// Create a token for a tenant; prints it once.
    Create {
        #[arg(long)]
        tenant: String,
        /// What the token is for.
        #[arg(long, default_value = "cli")]
        name: String,
    },
    /// Revoke a token by its id (tok-...).
    Revoke { id: String },
    /// List a tenant's tokens (ids and names, never the tokens).
    Ls {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Subcommand)]
enum SecretCmd {
    /// Register or replace a secret; the value is read from stdin when not given.
    Set {
        #[arg(long)]
        tenant: String,
        name: String,
        /// The value (prefer stdin: arguments show up in process lists).
        value: Option<String>,
    },
    /// Delete a secret.
    Rm {
        #[arg(long)]
        tenant: String,
        name: String,
    },
    /// List a tenant's secret names.
    Ls {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Args, Clone)]
pub struct ServeArgs {
    #[arg(long, env = "STASIS_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: std::net::SocketAddr,
    /// Backend used when a manifest names none.
    #[arg(long, default_value = "process")]
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
    /// Largest file upload/download in MiB.
    #[arg(long, default_value_t = 64)]
    max_file_mb: u64,
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
    /// A host directory whose contents manifests may mount read-only into
    /// sandboxes (`mounts[].source` must lie under one). Repeatable; none: no mounts.
    #[arg(long = "allow-mount", value_name = "DIR")]
    allow_mount: Vec<PathBuf>,
    /// Requests (exec, files, sessions) that may run in one sandbox at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_inflight: u32,
    /// Requests that may wait for one of those slots; beyond, 429 `overloaded`.
    #[arg(long, default_value_t = 64)]
    max_queued: u32,
    /// Seconds a queued request waits for a slot before it gets 429 `overloaded`.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    max_queue_wait_secs: u64,
}

#[derive(Args)]
struct CreateArgs {
    /// Manifest JSON file (- for stdin); flags below override its fields.
    #[arg(long)]
    manifest: Option<String>,
    #[arg(long)]
    backend: Option<String>,
    #[arg(long)]
    image: Option<String>,
    #[arg(long)]
    memory_mb: Option<u64>,
    #[arg(long)]
    cpus: Option<f64>,
    /// Idle seconds before the idle policy applies.
    #[arg(long)]
    idle_secs: Option<u64>,
    /// pause | pause_filesystem | destroy | nothing
    #[arg(long)]
    on_idle: Option<String>,
    /// Seconds a paused sandbox is kept.
    #[arg(long)]
    ttl_secs: Option<u64>,
}

#[derive(Args)]
struct ExecArgs {
    id: String,
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// KEY=VALUE, repeatable.
    #[arg(long = "env", short = 'e')]
    env: Vec<String>,
    #[arg(long)]
    cwd: Option<String>,
    /// Stream output as it is produced.
    #[arg(long)]
    stream: bool,
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    argv: Vec<String>,
}

#[derive(Subcommand)]
enum FilesCmd {
    /// Upload a local file (- for stdin).
    Put {
        id: String,
        local: String,
        remote: String,
    },
    /// Download a file (to stdout, or a local path).
    Get {
        id: String,
        remote: String,
        local: Option<PathBuf>,
    },
    /// List a directory.
    Ls {
        id: String,
        #[arg(default_value = ".")]
        path: String,
    },
}

#[derive(Subcommand)]
enum SessionCmd {
    /// Start a persistent process, e.g. `python3 -i -u -q` or `sh`.
    Start {
        id: String,
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
    /// Send input (a newline is appended unless --raw).
    Send {
        id: String,
        session: String,
        text: String,
        #[arg(long)]
        raw: bool,
    },
    /// Read output from an offset.
    Read {
        id: String,
        session: String,
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long, default_value_t = 500)]
        wait_ms: u64,
    },
    /// List sessions.
    Ls { id: String },
    /// Kill a session.
    Kill { id: String, session: String },
}

#[derive(Subcommand)]
enum SnapshotsCmd {
    Ls,
    Get {
        id: String,
    },
    Rm {
        id: String,
    },
    /// Download a snapshot as one encrypted file (to move it between deployments).
    Export {
        id: String,
        file: PathBuf,
    },
    /// Upload an exported snapshot file; it is verified before it is accepted.
    Import {
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Audit entries (oldest first).
    Ls {
        #[arg(long)]
        sandbox: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Check the hash chain: any edited or deleted entry is reported.
    Verify,
}

fn main() {
    // The process backend re-executes this binary as its sandbox shim. It
    // must run single-threaded (setns/unshare), so dispatch before anything
    // else starts; it reads its own argv and never returns.
    if std::env::args().nth(1).as_deref() == Some(stasis_backend_process::SHIM_SUBCOMMAND) {
        stasis_backend_process::shim_main();
    }
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let json = cli.json;
    match rt.block_on(run(cli)) {
        Ok(()) => {}
        Err(e) => {
            if json {
                println!(
                    "{}",
                    json!({"error": {"code": e.code, "message": e.message, "field": e.field}})
                );
            } else {
                eprintln!("stasis: {}: {}", e.code, e.message.replace('\n', " "));
            }
            std::process::exit(1);
        }
    }
}

pub fn print_value(json: bool, v: &Value, text: impl FnOnce(&Value) -> String) {
    if json {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    } else {
        println!("{}", text(v));
    }
}

fn fmt_ms(v: &Value) -> String {
    v.as_i64()
        .map(|ms| {
            let secs = ms / 1000;
            format!("{secs}s")
        })
        .unwrap_or_else(|| "-".into())
}

fn sandbox_line(v: &Value) -> String {
    let mut s = format!(
        "{}  {:<10} {:<8} running {}",
        v["id"].as_str().unwrap_or("?"),
        v["state"].as_str().unwrap_or("?"),
        v["backend"].as_str().unwrap_or("?"),
        fmt_ms(&v["running_ms"]),
    );
    if let Some(exp) = v["expires_at_ms"].as_i64() {
        let left = (exp - stasis_core::now_ms()) / 1000;
        s.push_str(&format!("  expires in {left}s"));
    }
    if let Some(r) = v["reason"].as_str() {
        s.push_str(&format!("  ({r})"));
    }
    s
}

/// The object `key` of a manifest, created when absent; a manifest file
/// whose `key` is not an object is refused, never silently replaced.
fn section<'a>(m: &'a mut Value, key: &str) -> Result<&'a mut Value, Error> {
    if m.get(key).is_none() {
        m[key] = json!({});
    }
    let v = &mut m[key];
    if !v.is_object() {
        return Err(Error::new(
            stasis_core::ErrorCode::InvalidManifest,
            format!("{key}: must be a JSON object"),
        )
        .with_field(key));
    }
    Ok(v)
}

fn read_manifest_arg(arg: &str) -> Result<Value> {
    let text = if arg == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(arg)
            .map_err(|e| Error::invalid(format!("manifest file {arg}: {e}")))?
    };
    serde_json::from_str(&text).map_err(|e| Error::invalid(format!("manifest is not JSON: {e}")))
}

/// `p` as an absolute path: resolved (symlinks and `..`) where it exists,
/// else joined to the working directory.
fn absolute_path(flag: &str, p: &std::path::Path) -> Result<PathBuf> {
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
    cfg.max_file_bytes = a.max_file_mb * 1024 * 1024;
    cfg.ready_file = match &a.ready_file {
        Some(f) => Some(absolute_path("--ready-file", f)?),
        None => None,
    };
    cfg.cgroup_parent = a.cgroup_parent.clone();
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
    cfg.rate_limit = stasis_server::auth::RateLimit {
        per_sec: a.rate_limit_per_sec,
        burst: a.rate_limit_burst,
    };
    cfg.inflight = stasis_server::inflight::InflightLimits {
        max_inflight: a.max_inflight as usize,
        max_queued: a.max_queued as usize,
        max_wait: Duration::from_secs(a.max_queue_wait_secs),
    };
    Ok(cfg)
}

async fn run(cli: Cli) -> Result<()> {
    let is_admin = matches!(
        cli.cmd,
        Cmd::Admin(_) | Cmd::Secret(_) | Cmd::Audit(AuditCmd::Verify)
    );
    let c = Client::new(&cli.url).with_token(client_token(cli.token.as_deref(), is_admin));
    let json = cli.json;
    match cli.cmd {
        Cmd::Serve(a) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .with_writer(std::io::stderr)
                .init();
            let cfg = serve_config(&a)?;
            stasis_server::daemon::run(cfg, async {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .expect("signal handler");
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            })
            .await?;
        }
        Cmd::Create(a) => {
            let mut m = match &a.manifest {
                Some(f) => read_manifest_arg(f)?,
                None => json!({}),
            };
            if !m.is_object() {
                return Err(Error::new(
                    stasis_core::ErrorCode::InvalidManifest,
                    "manifest: must be a JSON object",
                )
                .with_field("manifest"));
            }
            if let Some(b) = a.backend {
                m["backend"] = json!(b);
            }
            if let Some(i) = a.image {
                m["image"] = json!(i);
            }
            for (key, val) in [
                ("memory_mb", a.memory_mb.map(|v| json!(v))),
                ("cpus", a.cpus.map(|v| json!(v))),
            ] {
                if let Some(v) = val {
                    section(&mut m, "resources")?[key] = v;
                }
            }
            for (key, val) in [
                ("idle_timeout_secs", a.idle_secs.map(|v| json!(v))),
                ("on_idle", a.on_idle.map(|v| json!(v))),
                ("paused_ttl_secs", a.ttl_secs.map(|v| json!(v))),
            ] {
                if let Some(v) = val {
                    section(&mut m, "lifecycle")?[key] = v;
                }
            }
            let v = c.create(m).await?;
            print_value(json, &v, |v| v["id"].as_str().unwrap_or("").to_string());
        }
        Cmd::Ls { state } => {
            let path = match state {
                Some(s) => format!("/v1/sandboxes?state={s}"),
                None => "/v1/sandboxes".into(),
            };
            let v = c.get(&path).await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .map(|a| a.iter().map(sandbox_line).collect::<Vec<_>>().join("\n"))
                    .unwrap_or_default()
            });
        }
        Cmd::Get { id } => {
            let v = c.sandbox(&id).await?;
            print_value(json, &v, sandbox_line);
        }
        Cmd::Exec(a) => {
            let mut env = serde_json::Map::new();
            for kv in &a.env {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| Error::invalid(format!("--env {kv:?}: expected KEY=VALUE")))?;
                env.insert(k.to_string(), json!(v));
            }
            let body =
                json!({"argv": a.argv, "env": env, "cwd": a.cwd, "timeout_ms": a.timeout_ms});
            let code = if a.stream {
                let last = c
                    .exec_stream(&a.id, body, |line| {
                        if line["type"] == "output" && !json {
                            let data =
                                stasis_core::b64::decode(line["data_b64"].as_str().unwrap_or(""))
                                    .unwrap_or_default();
                            if line["stream"] == "stderr" {
                                let _ = std::io::stderr().write_all(&data);
                            } else {
                                let _ = std::io::stdout().write_all(&data);
                                let _ = std::io::stdout().flush();
                            }
                        } else if json {
                            println!("{line}");
                        }
                    })
                    .await?;
                if last["type"] == "error" {
                    return Err(Error::new(
                        serde_json::from_value(last["code"].clone())
                            .unwrap_or(stasis_core::ErrorCode::Internal),
                        last["message"].as_str().unwrap_or("").to_string(),
                    ));
                }
                if last["timed_out"] == true {
                    eprintln!("stasis: timeout: command timed out after {} ms; its process tree was killed", a.timeout_ms);
                }
                last["exit_code"].as_i64().unwrap_or(1)
            } else {
                let v = c.exec_body(&a.id, body).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                } else {
                    let out = stasis_core::b64::decode(v["stdout_b64"].as_str().unwrap_or(""))
                        .unwrap_or_default();
                    let err = stasis_core::b64::decode(v["stderr_b64"].as_str().unwrap_or(""))
                        .unwrap_or_default();
                    std::io::stdout().write_all(&out)?;
                    std::io::stderr().write_all(&err)?;
                    if v["timed_out"] == true {
                        eprintln!("stasis: timeout: command timed out after {} ms; its process tree was killed", a.timeout_ms);
                    }
                }
                v["exit_code"]
                    .as_i64()
                    .unwrap_or(if v["timed_out"] == true { 124 } else { 1 })
            };
            if code != 0 && !json {
                std::process::exit(code.clamp(1, 255) as i32);
            }
        }
        Cmd::Outputs { id, to, tar } => {
            let (file, keep) = match (&tar, &to) {
                (Some(t), None) => (t.clone(), true),
                (None, Some(d)) => {
                    std::fs::create_dir_all(d)
                        .map_err(|e| Error::invalid(format!("{}: {e}", d.display())))?;
                    (d.join(".stasis-outputs.tar"), false)
                }
                _ => return Err(Error::invalid("give exactly one of --to DIR or --tar FILE")),
            };
            let n = c
                .download(&format!("/v1/sandboxes/{id}/outputs"), &file, false)
                .await?;
            let mut entries = 0u64;
            if !keep {
                let dir = to.clone().unwrap_or_default();
                let r = (|| -> std::io::Result<()> {
                    let mut a = ::tar::Archive::new(std::fs::File::open(&file)?);
                    a.set_preserve_permissions(true);
                    // `unpack` refuses entries that would land outside `dir`
                    // (absolute paths, `..`, writes through planted symlinks).
                    for e in a.entries()? {
                        let mut e = e?;
                        if e.unpack_in(&dir)? {
                            entries += 1;
                        }
                    }
                    Ok(())
                })();
                let _ = std::fs::remove_file(&file);
                r.map_err(|e| {
                    Error::invalid(format!("extract outputs into {}: {e}", dir.display()))
                })?;
            }
            let dest = to.as_ref().or(tar.as_ref()).cloned().unwrap_or_default();
            print_value(
                json,
                &json!({"sandbox": id, "to": dest, "bytes": n, "entries": entries, "extracted": !keep}),
                |_| {
                    if keep {
                        format!("outputs of {id}: {} ({n} bytes)", dest.display())
                    } else {
                        format!("outputs of {id}: {entries} entries into {}", dest.display())
                    }
                },
            );
        }
        Cmd::Files(f) => match f {
            FilesCmd::Put { id, local, remote } => {
                let data = if local == "-" {
                    let mut d = Vec::new();
                    std::io::stdin().read_to_end(&mut d)?;
                    d
                } else {
                    std::fs::read(&local).map_err(|e| Error::invalid(format!("{local}: {e}")))?
                };
                let n = data.len();
                c.put_file(&id, &remote, data).await?;
                print_value(json, &json!({"path": remote, "bytes": n}), |_| {
                    format!("wrote {n} bytes to {remote}")
                });
            }
            FilesCmd::Get { id, remote, local } => {
                let data = c.get_file(&id, &remote).await?;
                match local {
                    Some(p) => {
                        std::fs::write(&p, &data)?;
                        print_value(json, &json!({"path": p, "bytes": data.len()}), |_| {
                            format!("read {} bytes into {}", data.len(), p.display())
                        });
                    }
                    None => std::io::stdout().write_all(&data)?,
                }
            }
            FilesCmd::Ls { id, path } => {
                let v = c.list_files(&id, &path).await?;
                print_value(json, &v, |v| {
                    v.as_array()
                        .map(|a| {
                            a.iter()
                                .map(|e| {
                                    format!(
                                        "{:<8} {:>10} {}",
                                        e["kind"].as_str().unwrap_or(""),
                                        e["size"],
                                        e["name"].as_str().unwrap_or("")
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default()
                });
            }
        },
        Cmd::Session(s) => match s {
            SessionCmd::Start { id, argv } => {
                let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
                let v = c.session_start(&id, &refs).await?;
                print_value(json, &v, |v| v["id"].as_str().unwrap_or("").to_string());
            }
            SessionCmd::Send {
                id,
                session,
                text,
                raw,
            } => {
                let data = if raw { text } else { format!("{text}\n") };
                c.session_send(&id, &session, &data).await?;
                if json {
                    println!("{}", json!({"sent": data.len()}));
                }
            }
            SessionCmd::Read {
                id,
                session,
                offset,
                wait_ms,
            } => {
                let v = c.session_read(&id, &session, offset, wait_ms).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                } else {
                    print!("{}", v["data"].as_str().unwrap_or(""));
                    eprintln!("[next offset {}]", v["next_offset"]);
                }
            }
            SessionCmd::Ls { id } => {
                let v = c.get(&format!("/v1/sandboxes/{id}/sessions")).await?;
                print_value(json, &v, |v| {
                    v.as_array()
                        .map(|a| {
                            a.iter()
                                .map(|s| {
                                    format!(
                                        "{}  running={}  {}",
                                        s["id"].as_str().unwrap_or(""),
                                        s["running"],
                                        s["argv"]
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default()
                });
            }
            SessionCmd::Kill { id, session } => {
                c.delete(&format!("/v1/sandboxes/{id}/sessions/{session}"))
                    .await?;
            }
        },
        Cmd::Pause {
            id,
            filesystem_only,
        } => {
            let v = c
                .pause(&id, if filesystem_only { Some(false) } else { None })
                .await?;
            print_value(json, &v, |v| {
                format!(
                    "{} paused in {} ms",
                    v["id"].as_str().unwrap_or(""),
                    v["timing"]["total_ms"]
                )
            });
        }
        Cmd::Resume { id } => {
            let v = c.resume(&id).await?;
            print_value(json, &v, |v| {
                format!(
                    "{} resumed in {} ms",
                    v["id"].as_str().unwrap_or(""),
                    v["timing"]["total_ms"]
                )
            });
        }
        Cmd::Rm { id } => {
            let v = c.destroy(&id).await?;
            print_value(json, &v, |v| {
                format!("{} destroyed", v["id"].as_str().unwrap_or(""))
            });
        }
        Cmd::Snapshot { id, ttl_secs } => {
            let v = c.snapshot(&id, ttl_secs).await?;
            print_value(json, &v, |v| {
                format!(
                    "{}  raw {} bytes, stored {} bytes",
                    v["id"].as_str().unwrap_or(""),
                    v["raw_bytes"],
                    v["stored_bytes"]
                )
            });
        }
        Cmd::Snapshots(s) => match s {
            SnapshotsCmd::Ls => {
                let v = c.get("/v1/snapshots").await?;
                print_value(json, &v, |v| {
                    v.as_array()
                        .map(|a| {
                            a.iter()
                                .map(|s| {
                                    format!(
                                        "{}  {:<5} {:<8} from {}  raw {} stored {}",
                                        s["id"].as_str().unwrap_or(""),
                                        s["kind"].as_str().unwrap_or(""),
                                        s["backend"].as_str().unwrap_or(""),
                                        s["source_sandbox"].as_str().unwrap_or("-"),
                                        s["raw_bytes"],
                                        s["stored_bytes"]
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default()
                });
            }
            SnapshotsCmd::Get { id } => {
                let v = c.get(&format!("/v1/snapshots/{id}")).await?;
                print_value(true, &v, |_| String::new());
            }
            SnapshotsCmd::Export { id, file } => {
                let n = c
                    .download(&format!("/v1/snapshots/{id}/export"), &file, !json)
                    .await?;
                print_value(
                    json,
                    &json!({"snapshot": id, "file": file, "bytes": n}),
                    |_| format!("exported {id} to {} ({n} bytes)", file.display()),
                );
            }
            SnapshotsCmd::Import { file } => {
                let v = c.upload("/v1/snapshots/import", &file, !json).await?;
                print_value(json, &v, |v| {
                    format!(
                        "imported {} ({} bytes raw)",
                        v["id"].as_str().unwrap_or(""),
                        v["raw_bytes"]
                    )
                });
            }
            SnapshotsCmd::Rm { id } => {
                c.delete(&format!("/v1/snapshots/{id}")).await?;
                if !json {
                    println!("{id} deleted");
                }
            }
        },
        Cmd::Restore { snapshot, manifest } => {
            let m = manifest.map(|f| read_manifest_arg(&f)).transpose()?;
            let v = c.restore(&snapshot, m).await?;
            print_value(json, &v, |v| v["id"].as_str().unwrap_or("").to_string());
        }
        Cmd::Fork { id, count } => {
            let v = c.fork(&id, count).await?;
            print_value(json, &v, |v| {
                v["sandboxes"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|s| s["id"].as_str().unwrap_or("").to_string())
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default()
            });
        }
        Cmd::Usage { id } => {
            let v = c.usage(&id).await?;
            print_value(json, &v, |v| {
                format!(
                    "cpu {} ns, rss {} bytes, {} host processes",
                    v["cpu_ns"], v["rss_bytes"], v["host_processes"]
                )
            });
        }
        Cmd::Audit(a) => match a {
            AuditCmd::Ls { sandbox, limit } => {
                let path = match sandbox {
                    Some(s) => format!("/v1/audit?target={s}&limit={limit}"),
                    None => format!("/v1/audit?limit={limit}"),
                };
                let v = c.get(&path).await?;
                print_value(json, &v, |v| {
                    v.as_array()
                        .map(|a| {
                            a.iter()
                                .map(|e| {
                                    format!(
                                        "{:>5} {} {:<10} {:<14} {} {}",
                                        e["seq"],
                                        e["ts_ms"],
                                        e["actor"].as_str().unwrap_or(""),
                                        e["action"].as_str().unwrap_or(""),
                                        e["target"].as_str().unwrap_or(""),
                                        e["detail"]
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default()
                });
            }
            AuditCmd::Verify => {
                let v = c.get("/v1/audit/verify").await?;
                print_value(json, &v, |v| {
                    if v["ok"] == true {
                        format!("audit log intact: {} entries", v["entries"])
                    } else {
                        format!(
                            "audit log BROKEN at entry {}: {}",
                            v["broken_at"],
                            v["problem"].as_str().unwrap_or("")
                        )
                    }
                });
                if v["ok"] != true {
                    return Err(Error::integrity(format!(
                        "audit log broken at entry {}",
                        v["broken_at"]
                    )));
                }
            }
        },
        Cmd::Runs(r) => runs::run(&c, r, json).await?,
        Cmd::Approve(a) => runs::decide(&c, a, true, json).await?,
        Cmd::Reject(a) => runs::decide(&c, a, false, json).await?,
        Cmd::Doctor { skip_kvm_probe } => doctor::run(&c, json, !skip_kvm_probe).await?,
        Cmd::Demo(a) => demo::run(a, json).await?,
        Cmd::Bench(b) => bench::run(b, json).await?,
        Cmd::Admin(a) => admin(&c, a, json).await?,
        Cmd::Secret(s) => secret(&c, s, json).await?,
        Cmd::Cost(a) => cost::run(a, json).await?,
    }
    Ok(())
}

async fn admin(c: &Client, cmd: AdminCmd, json: bool) -> Result<()> {
    match cmd {
        AdminCmd::Tenant(TenantCmd::Create { name, id }) => {
            let v = c
                .post("/v1/admin/tenants", json!({"id": id, "name": name}))
                .await?;
            print_value(json, &v, |v| v["id"].as_str().unwrap_or("?").to_string());
        }
        AdminCmd::Tenant(TenantCmd::Ls) => {
            let v = c.get("/v1/admin/tenants").await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        format!(
                            "{}  {}",
                            t["id"].as_str().unwrap_or("?"),
                            t["name"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        AdminCmd::Token(TokenCmd::Create { tenant, name }) => {
            let v = c
                .post(
                    &format!("/v1/admin/tenants/{}/tokens", path_seg(&tenant)?),
                    json!({"name": name}),
                )
                .await?;
            print_value(json, &v, |v| v["token"].as_str().unwrap_or("?").to_string());
            if !json {
                eprintln!(
                    "stasis: token {} for {tenant}: shown once, store it now",
                    v["id"].as_str().unwrap_or("?")
                );
            }
        }
        AdminCmd::Token(TokenCmd::Revoke { id }) => {
            let v = c
                .delete(&format!("/v1/admin/tokens/{}", path_seg(&id)?))
                .await?;
            print_value(json, &v, |v| {
                format!("revoked {}", v["id"].as_str().unwrap_or("?"))
            });
        }
        AdminCmd::Token(TokenCmd::Ls { tenant }) => {
            let v = c
                .get(&format!("/v1/admin/tenants/{}/tokens", path_seg(&tenant)?))
                .await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        format!(
                            "{}  {}{}",
                            t["id"].as_str().unwrap_or("?"),
                            t["name"].as_str().unwrap_or(""),
                            if t["revoked_at_ms"].is_i64() {
                                "  (revoked)"
                            } else {
                                ""
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}

/// A user-given id as one URL path segment (ids are `[A-Za-z0-9_-]`).
fn path_seg(s: &str) -> Result<&str> {
    stasis_core::id::validate_id("path", s)?;
    Ok(s)
}

async fn secret(c: &Client, cmd: SecretCmd, json: bool) -> Result<()> {
    match cmd {
        SecretCmd::Set {
            tenant,
            name,
            value,
        } => {
            let value = match value {
                Some(v) => v,
                None => {
                    let mut s = String::new();
                    std::io::stdin().read_to_string(&mut s)?;
                    s.strip_suffix('\n').map(str::to_string).unwrap_or(s)
                }
            };
            c.put_json(
                &format!(
                    "/v1/admin/tenants/{}/secrets/{}",
                    path_seg(&tenant)?,
                    path_seg(&name)?
                ),
                json!({ "value": value }),
            )
            .await?;
            print_value(json, &json!({"tenant": tenant, "name": name}), |_| {
                format!("secret {name} set for {tenant}")
            });
        }
        SecretCmd::Rm { tenant, name } => {
            c.delete(&format!(
                "/v1/admin/tenants/{}/secrets/{}",
                path_seg(&tenant)?,
                path_seg(&name)?
            ))
            .await?;
            print_value(json, &json!({"tenant": tenant, "name": name}), |_| {
                format!("secret {name} removed from {tenant}")
            });
        }
        SecretCmd::Ls { tenant } => {
            let v = c
                .get(&format!("/v1/admin/tenants/{}/secrets", path_seg(&tenant)?))
                .await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}

/// Start `stasis serve` from this executable on a temporary data dir and
/// wait until it serves. The child is killed when the guard drops.
pub struct TempDaemon {
    pub child: std::process::Child,
    pub client: Client,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl TempDaemon {
    pub async fn start(extra: &[&str], data_dir: Option<PathBuf>) -> Result<TempDaemon> {
        let (tmp, dir) = match data_dir {
            Some(d) => (None, d),
            None => {
                let t = tempfile::Builder::new().prefix("stasis-").tempdir()?;
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let exe = std::env::current_exe()?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&dir)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--insecure-dev-key")
            .arg("--ready-file")
            .arg(&ready)
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let mut child = cmd.spawn()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(addr) = std::fs::read_to_string(&ready) {
                let token = std::fs::read_to_string(dir.join("token")).ok();
                let client = Client::new(&format!("http://{}", addr.trim())).with_token(token);
                return Ok(TempDaemon {
                    child,
                    client,
                    data_dir: dir,
                    _tmp: tmp,
                });
            }
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Err(Error::internal(format!(
                    "daemon exited ({status}): {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )));
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                return Err(Error::timeout("daemon did not start within 120 s"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for TempDaemon {
    fn drop(&mut self) {
        // SIGTERM first so the daemon exits cleanly; then make sure.
        let _ = nix_kill(self.child.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    // SAFETY: kill(2) with a pid we spawned and a valid signal number.
    let r = unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
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
}
