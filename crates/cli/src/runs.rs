//! `stasis runs ...`, `stasis approve`, `stasis reject`: agent runs with
//! ordered steps, idempotent tool calls and human approvals (issue 5).

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::client::Client;
use crate::output::print_value;
use stasis_core::{Error, Result};

#[derive(Subcommand)]
pub enum RunsCmd {
    /// Start a run, optionally bound to a sandbox (tool calls run there).
    Create {
        #[arg(long)]
        sandbox: Option<String>,
    },
    /// Show a run: status, steps, tool calls, approvals.
    Get { id: String },
    /// List runs.
    Ls,
    /// Print the signed, versioned RunState document (store it; post it back with `runs resume`).
    State { id: String },
    /// Resume from a stored RunState document (file, or - for stdin).
    Resume {
        file: String,
        /// Continue the run in this sandbox (e.g. one restored from a snapshot).
        #[arg(long)]
        sandbox: Option<String>,
    },
    /// Append a step: model_step, handover, completed or failed.
    Step {
        id: String,
        #[arg(long, default_value = "model_step")]
        kind: String,
        /// JSON data of the step (default null).
        #[arg(long)]
        data: Option<String>,
    },
    /// Request a tool call (an exec in the run's sandbox) with an idempotency key.
    Call {
        id: String,
        #[arg(long)]
        key: String,
        /// The call has effects outside the sandbox's own state.
        #[arg(long)]
        side_effecting: bool,
        /// Hold the call until someone runs `stasis approve`.
        #[arg(long)]
        requires_approval: bool,
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
}

#[derive(Args)]
pub struct DecideArgs {
    pub run: String,
    /// The tool call's id (call-...) or its idempotency key.
    pub call: String,
    #[arg(long, default_value = "")]
    pub reason: String,
}

fn run_line(v: &Value) -> String {
    format!(
        "{}  {:<16} sandbox {}  steps {}  pending approvals {}",
        v["id"].as_str().unwrap_or("?"),
        v["status"].as_str().unwrap_or("?"),
        v["sandbox"].as_str().unwrap_or("-"),
        v["steps"]
            .as_array()
            .map(|a| a.len() as i64)
            .or_else(|| v["steps"].as_i64())
            .unwrap_or(0),
        v["approvals"]
            .as_array()
            .map(|a| a.iter().filter(|x| x["decision"].is_null()).count() as i64)
            .or_else(|| v["pending_approvals"].as_i64())
            .unwrap_or(0),
    )
}

fn run_text(v: &Value) -> String {
    let mut out = run_line(v);
    for s in v["steps"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {:>3} {:<22} {:<10} {} {}",
            s["seq"],
            s["kind"].as_str().unwrap_or(""),
            s["actor"].as_str().unwrap_or(""),
            s["call"].as_str().unwrap_or(""),
            if s["data"].is_null() {
                String::new()
            } else {
                s["data"].to_string()
            }
        ));
    }
    for c in v["tool_calls"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  call {} key {:?} {} exit {}",
            c["id"].as_str().unwrap_or(""),
            c["idempotency_key"].as_str().unwrap_or(""),
            c["state"].as_str().unwrap_or(""),
            c["result"]["exit_code"]
        ));
    }
    out
}

fn outcome_text(v: &Value) -> String {
    let c = &v["call"];
    let mut s = format!(
        "{} {} ({}{})",
        c["id"].as_str().unwrap_or(""),
        v["outcome"].as_str().unwrap_or(""),
        c["state"].as_str().unwrap_or(""),
        if v["replayed"] == true {
            ", recorded result, not run again"
        } else {
            ""
        }
    );
    if let Some(out) = c["result"]["stdout"].as_str() {
        s.push('\n');
        s.push_str(out.trim_end());
    }
    if let Some(e) = c["error"].as_str() {
        s.push_str(&format!("\n{e}"));
    }
    s
}

pub async fn run(c: &Client, cmd: RunsCmd, json: bool) -> Result<()> {
    match cmd {
        RunsCmd::Create { sandbox } => {
            let v = c.post("/v1/runs", json!({ "sandbox": sandbox })).await?;
            print_value(json, &v, |v| v["id"].as_str().unwrap_or("").to_string());
        }
        RunsCmd::Get { id } => {
            let v = c.get(&format!("/v1/runs/{id}")).await?;
            print_value(json, &v, run_text);
        }
        RunsCmd::Ls => {
            let v = c.get("/v1/runs").await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .map(|a| a.iter().map(run_line).collect::<Vec<_>>().join("\n"))
                    .unwrap_or_default()
            });
        }
        RunsCmd::State { id } => {
            let v = c.get(&format!("/v1/runs/{id}/state")).await?;
            // The document is JSON either way.
            println!("{}", serde_json::to_string(&v).unwrap_or_default());
        }
        RunsCmd::Resume { file, sandbox } => {
            let text = if file == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
                s
            } else {
                std::fs::read_to_string(&file)
                    .map_err(|e| Error::invalid(format!("{file}: {e}")))?
            };
            let doc: Value = serde_json::from_str(&text)
                .map_err(|e| Error::invalid(format!("state document is not JSON: {e}")))?;
            let body = match sandbox {
                Some(s) => json!({"document": doc, "sandbox": s}),
                None => doc,
            };
            let v = c.post("/v1/runs/resume", body).await?;
            print_value(json, &v, |v| {
                format!(
                    "{}\nstill pending: {}\ndecided since: {}\nsandbox: {}",
                    run_line(&v["run"]),
                    v["still_pending"],
                    v["decided_since"],
                    v["sandbox"]
                )
            });
        }
        RunsCmd::Step { id, kind, data } => {
            let data: Value = match data {
                Some(d) => serde_json::from_str(&d)
                    .map_err(|e| Error::invalid(format!("--data is not JSON: {e}")))?,
                None => Value::Null,
            };
            let v = c
                .post(
                    &format!("/v1/runs/{id}/steps"),
                    json!({"kind": kind, "data": data}),
                )
                .await?;
            print_value(json, &v, run_line);
        }
        RunsCmd::Call {
            id,
            key,
            side_effecting,
            requires_approval,
            timeout_ms,
            argv,
        } => {
            let v = c
                .post(
                    &format!("/v1/runs/{id}/tool-calls"),
                    json!({
                        "idempotency_key": key,
                        "kind": "exec",
                        "argv": argv,
                        "timeout_ms": timeout_ms,
                        "side_effecting": side_effecting,
                        "requires_approval": requires_approval,
                    }),
                )
                .await?;
            print_value(json, &v, outcome_text);
        }
    }
    Ok(())
}

pub async fn decide(c: &Client, a: DecideArgs, approve: bool, json: bool) -> Result<()> {
    let verb = if approve { "approve" } else { "reject" };
    let v = c
        .post(
            &format!("/v1/runs/{}/approvals/{}/{verb}", a.run, a.call),
            json!({"reason": a.reason}),
        )
        .await?;
    print_value(json, &v, outcome_text);
    Ok(())
}
