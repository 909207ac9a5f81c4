//! `stasis`: the daemon (`stasis serve`) and a client of its HTTP API.
//!
//! Errors print one line, `stasis: <code>: <message>`, and exit 1 (usage
//! errors exit 2, from clap).

mod admin;
mod audit;
mod bench;
mod bench_image;
mod bench_scale;
mod bench_template;
mod cli;
mod client;
mod cost;
mod data_dir;
mod demo;
mod doctor;
mod exec;
mod files;
mod governance;
mod image;
mod lifecycle;
mod measure;
mod network;
mod node;
mod output;
mod ports;
mod runs;
mod sandbox;
mod serve;
mod shell;
mod snapshots;
mod store;
mod temp_daemon;
mod template;
mod token;
mod webhook;

use clap::Parser;
use serde_json::json;

use audit::AuditCmd;
use cli::{Cli, Cmd};
use client::Client;
use data_dir::client_token;
use stasis_core::Result;

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

async fn run(cli: Cli) -> Result<()> {
    let is_admin = matches!(
        cli.cmd,
        Cmd::Admin(_)
            | Cmd::Secret(_)
            | Cmd::Store(_)
            | Cmd::Node(_)
            | Cmd::Audit(AuditCmd::Verify)
    );
    let c = Client::new(&cli.url).with_token(client_token(cli.token.as_deref(), is_admin));
    let json = cli.json;
    match cli.cmd {
        Cmd::Serve(a) => serve::run(a).await?,
        Cmd::Create(a) => sandbox::create(&c, a, json).await?,
        Cmd::Ls { state, all } => sandbox::ls(&c, state, all, json).await?,
        Cmd::Get { id } => sandbox::get(&c, id, json).await?,
        Cmd::Exec(a) => exec::exec(&c, a, json).await?,
        Cmd::Outputs { id, to, tar } => files::outputs(&c, id, to, tar, json).await?,
        Cmd::Files(f) => files::files(&c, f, json).await?,
        Cmd::Session(s) => exec::session(&c, s, json).await?,
        Cmd::Shell(a) => shell::shell(&c, a).await?,
        Cmd::Pause {
            id,
            filesystem_only,
            standby,
        } => sandbox::pause(&c, id, filesystem_only, standby, json).await?,
        Cmd::Evict { id } => sandbox::evict(&c, id, json).await?,
        Cmd::Resume { id } => sandbox::resume(&c, id, json).await?,
        Cmd::Rm { id } => sandbox::rm(&c, id, json).await?,
        Cmd::Snapshot { id, ttl_secs } => snapshots::snapshot(&c, id, ttl_secs, json).await?,
        Cmd::Snapshots(s) => snapshots::snapshots(&c, s, json).await?,
        Cmd::Image(i) => image::image(&c, i, json).await?,
        Cmd::Restore { snapshot, manifest } => {
            snapshots::restore(&c, snapshot, manifest, json).await?
        }
        Cmd::Template(t) => template::template(&c, t, json).await?,
        Cmd::Fork { id, count } => snapshots::fork(&c, id, count, json).await?,
        Cmd::Port(p) => ports::port(&c, p, json).await?,
        Cmd::Usage { id } => sandbox::usage(&c, id, json).await?,
        Cmd::Audit(a) => audit::audit(&c, a, json).await?,
        Cmd::Network(n) => network::network(&c, n, json).await?,
        Cmd::Runs(r) => runs::run(&c, r, json).await?,
        Cmd::Approve(a) => runs::decide(&c, a, true, json).await?,
        Cmd::Reject(a) => runs::decide(&c, a, false, json).await?,
        Cmd::Doctor { skip_kvm_probe } => doctor::run(&c, json, !skip_kvm_probe).await?,
        Cmd::Demo(a) => demo::run(a, json).await?,
        Cmd::Bench(b) => bench::run(b, json).await?,
        Cmd::Admin(a) => admin::admin(&c, a, json).await?,
        Cmd::Secret(s) => admin::secret(&c, s, json).await?,
        Cmd::Store(s) => store::store(&c, s, json).await?,
        Cmd::Node(n) => node::node(&c, n, json).await?,
        Cmd::Token(t) => token::token(&c, t, json).await?,
        Cmd::Webhook(w) => webhook::webhook(&c, w, json).await?,
        Cmd::Cost(a) => cost::run(a, json).await?,
    }
    Ok(())
}
