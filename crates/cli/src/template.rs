//! `stasis template ...`: publish a sandbox as a template (`create NAME
//! --from SANDBOX`), build one warmed from an image (`create NAME --image IMG
//! --run CMD`), list and delete templates. `stasis create --template` starts
//! a sandbox from one (see `sandbox`).

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::json;

use stasis_core::{Error, Result};
use stasis_server::templates::{validate_name, TemplateInfo, TemplateRef};

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum TemplateCmd {
    /// Publish a sandbox's memory and disk as the next version of NAME, or
    /// build one: a fresh sandbox from --image runs --run in a session that
    /// stays alive (a warm interpreter), is templated, then destroyed.
    Create(CreateArgs),
    /// List templates (every live version).
    Ls,
    /// Delete a template (NAME: every version) or one version (NAME:VERSION).
    Rm { reference: String },
}

#[derive(Args)]
pub struct CreateArgs {
    /// 1-64 characters of [a-z0-9._-], starting with a letter or digit.
    pub name: String,
    /// The sandbox to publish.
    #[arg(long, conflicts_with_all = ["image", "run"])]
    pub from: Option<String>,
    /// Image of the builder sandbox (with --run).
    #[arg(long, requires = "run")]
    pub image: Option<String>,
    /// Shell command run as a persistent session in the builder, e.g.
    /// `python3 -i -c "import json; print('ready')"` (kept running so the
    /// interpreter is warm when the template is taken).
    #[arg(long)]
    pub run: Option<String>,
    /// Backend of the builder sandbox (default: the daemon's).
    #[arg(long, requires = "run")]
    pub backend: Option<String>,
    /// Template once the session printed this (default: once it ran
    /// --settle-secs without exiting, or exited with status 0).
    #[arg(long, requires = "run")]
    pub ready: Option<String>,
    /// With no --ready: seconds the session must run (or exit 0) first.
    #[arg(long, default_value_t = 2, requires = "run")]
    pub settle_secs: u64,
    /// Longest wait for --ready or the settle time, in seconds.
    #[arg(long, default_value_t = 600, requires = "run")]
    pub timeout_secs: u64,
}

fn line(t: &TemplateInfo) -> String {
    format!(
        "{:<24} {:<8} {}  from {}",
        t.reference,
        t.backend,
        t.snapshot,
        t.source_sandbox.as_deref().unwrap_or("-")
    )
}

/// `stasis template ...`.
pub async fn template(c: &Client, cmd: TemplateCmd, json: bool) -> Result<()> {
    match cmd {
        TemplateCmd::Create(a) => {
            validate_name(&a.name, "name")?;
            let t = match (&a.from, &a.run) {
                (Some(from), None) => c.create_template(&a.name, from).await?,
                (None, Some(run)) => build(c, &a, run).await?,
                _ => {
                    return Err(Error::invalid(
                        "give --from SANDBOX, or --run CMD (with --image IMG)",
                    ))
                }
            };
            print_value(json, &t, |t| t.reference.clone());
        }
        TemplateCmd::Ls => {
            let v = c.templates().await?;
            print_value(json, &v, |v| {
                v.iter().map(line).collect::<Vec<_>>().join("\n")
            });
        }
        TemplateCmd::Rm { reference } => {
            TemplateRef::parse(&reference, "reference")?;
            let v = c.delete_template(&reference).await?;
            print_value(json, &v, |v| {
                v.iter()
                    .map(|t| format!("{} deleted", t.reference))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}

/// Build a warmed template: a builder sandbox, the command in a session,
/// the template, and the builder destroyed whatever happened.
async fn build(c: &Client, a: &CreateArgs, run: &str) -> Result<TemplateInfo> {
    let mut manifest = json!({"lifecycle": {"on_idle": "nothing"}});
    if let Some(i) = &a.image {
        manifest["image"] = json!(i);
    }
    if let Some(b) = &a.backend {
        manifest["backend"] = json!(b);
    }
    let builder = c.create(manifest).await?;
    let r = async {
        let s = c.session_start(&builder.id, &["sh", "-c", run]).await?;
        wait_warm(c, &builder.id, &s.id, a).await?;
        c.create_template(&a.name, &builder.id).await
    }
    .await;
    if let Err(e) = c.destroy(&builder.id).await {
        eprintln!(
            "stasis: builder sandbox {} not destroyed: {}",
            builder.id, e.message
        );
    }
    r
}

/// Wait until the builder's session is warm: it printed `--ready`, or it
/// ran `--settle-secs` without exiting, or it exited 0. A session that
/// exits non-zero (or before printing `--ready`) fails with its output.
async fn wait_warm(c: &Client, id: &str, session: &str, a: &CreateArgs) -> Result<()> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(a.timeout_secs);
    let settle = Duration::from_secs(a.settle_secs);
    let (mut text, mut offset) = (String::new(), 0u64);
    loop {
        let out = c.session_read(id, session, offset, 500).await?;
        text.push_str(&out.data);
        offset = out.next_offset;
        if let Some(r) = &a.ready {
            if text.contains(r.as_str()) {
                return Ok(());
            }
        }
        let info = c
            .sessions(id)
            .await?
            .into_iter()
            .find(|s| s.id == session)
            .ok_or_else(|| Error::internal(format!("session {session} vanished")))?;
        if !info.running {
            let tail: String = text
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return match (info.exit_code, &a.ready) {
                (Some(0), None) => Ok(()),
                (code, _) => Err(Error::invalid(format!(
                    "--run exited ({}) before it was ready; output: {tail}",
                    code.map_or("killed".to_string(), |c| format!("status {c}"))
                ))),
            };
        }
        if a.ready.is_none() && start.elapsed() >= settle {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::timeout(format!(
                "--run not ready after {} s; output so far: {text}",
                a.timeout_secs
            )));
        }
    }
}
