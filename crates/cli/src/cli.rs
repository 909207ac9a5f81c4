//! The command line: global flags and the list of commands (clap
//! definitions); each command's own arguments live in its module.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::admin::{AdminCmd, SecretCmd};
use crate::audit::AuditCmd;
use crate::exec::{ExecArgs, SessionCmd};
use crate::files::FilesCmd;
use crate::network::NetworkCmd;
use crate::ports::PortCmd;
use crate::sandbox::CreateArgs;
use crate::serve::ServeArgs;
use crate::shell::ShellArgs;
use crate::snapshots::SnapshotsCmd;
use crate::template::TemplateCmd;
use crate::{bench, cost, demo, runs};

#[derive(Parser)]
#[command(name = "stasis", version, about = "Stateful sandboxes for AI agents")]
pub struct Cli {
    /// Daemon URL.
    #[arg(
        long,
        global = true,
        env = "STASIS_URL",
        default_value = "http://127.0.0.1:7070"
    )]
    pub url: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// API token (default: the file `<data dir>/token`, or `admin.token` for
    /// `stasis admin` and `stasis secret`; data dir from STASIS_DATA_DIR).
    #[arg(long, global = true, env = "STASIS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Run the daemon.
    Serve(Box<ServeArgs>),
    /// Create a sandbox.
    Create(CreateArgs),
    /// List sandboxes.
    Ls {
        /// Only sandboxes in this state (running, paused, failed, destroyed, ...).
        #[arg(long)]
        state: Option<String>,
        /// Every sandbox: destroyed ones and image builds' too (by default
        /// only live ones are listed).
        #[arg(long, short = 'a')]
        all: bool,
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
    /// An interactive terminal in a sandbox (like `docker exec -it`); exits
    /// with the shell's status.
    Shell(ShellArgs),
    /// Persistent processes (interpreters, shells) in a sandbox.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Pause a sandbox (memory + filesystem into a snapshot; compute freed).
    Pause {
        id: String,
        /// Keep only the filesystem.
        #[arg(long)]
        filesystem_only: bool,
        /// Keep the stopped compute and its RAM on the node for the sandbox's
        /// standby window, as an idle pause does (the pause is stored as always).
        #[arg(long)]
        standby: bool,
    },
    /// Drop this node's standby and local files of a paused sandbox (its
    /// next resume comes from the snapshot store).
    Evict { id: String },
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
    /// Images: import, list, inspect, remove.
    #[command(subcommand)]
    Image(crate::image::ImageCmd),
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
    /// Templates: named, versioned snapshots to create sandboxes from.
    #[command(subcommand)]
    Template(TemplateCmd),
    /// Fork N sandboxes from a fresh snapshot of a sandbox.
    Fork {
        id: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Reach a server inside a sandbox: signed URLs, their revocation, a local forward.
    #[command(subcommand)]
    Port(PortCmd),
    /// Host resource use of a sandbox (CPU, RSS, processes).
    Usage { id: String },
    /// The audit log.
    #[command(subcommand)]
    Audit(AuditCmd),
    /// A sandbox's network policy (names, wildcards, networks) and egress counters.
    #[command(subcommand)]
    Network(NetworkCmd),
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
    /// The snapshot store: verify every chunk, repair from local copies (needs an admin token).
    #[command(subcommand)]
    Store(crate::store::StoreCmd),
    /// This node: drain (start no sandbox, pause every running one to the store), undrain, status (admin token).
    #[command(subcommand)]
    Node(crate::node::NodeCmd),
    /// This tenant's API tokens: scoped, expiring, per-sandbox, rotated (needs the manage scope).
    #[command(subcommand)]
    Token(crate::token::TokenCmd),
    /// Lifecycle webhooks: signed events POSTed to your endpoints.
    #[command(subcommand)]
    Webhook(crate::webhook::WebhookCmd),
    /// Tenant secrets delivered to sandboxes whose manifest names them (admin token).
    #[command(subcommand)]
    Secret(SecretCmd),
    /// Cost of an always-running sandbox vs one paused on idle, from measured figures.
    Cost(cost::CostArgs),
}
