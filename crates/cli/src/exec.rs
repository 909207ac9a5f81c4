//! Running commands in a sandbox: one-shot `exec` (buffered or streamed)
//! and persistent `session`s (interpreters, shells).

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::json;

use stasis_core::{Error, Result};
use stasis_server::http::exec::ExecStreamLine;

use crate::client::Client;
use crate::output::{compact, pretty, print_value};

#[derive(Args)]
pub struct ExecArgs {
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

/// `stasis exec`.
pub async fn exec(c: &Client, a: ExecArgs, json: bool) -> Result<()> {
    let mut env = serde_json::Map::new();
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("--env {kv:?}: expected KEY=VALUE")))?;
        env.insert(k.to_string(), json!(v));
    }
    let body = json!({"argv": a.argv, "env": env, "cwd": a.cwd, "timeout_ms": a.timeout_ms});
    let code = if a.stream {
        let last = c
            .exec_stream(&a.id, body, |line| match line {
                ExecStreamLine::Output {
                    stream, data_b64, ..
                } if !json => {
                    let data = stasis_core::b64::decode(data_b64).unwrap_or_default();
                    if stream == "stderr" {
                        let _ = std::io::stderr().write_all(&data);
                    } else {
                        let _ = std::io::stdout().write_all(&data);
                        let _ = std::io::stdout().flush();
                    }
                }
                _ if json => println!("{}", compact(line)),
                _ => {}
            })
            .await?;
        match last {
            Some(ExecStreamLine::Error { code, message }) => {
                return Err(Error::new(
                    serde_json::from_value(serde_json::Value::String(code))
                        .unwrap_or(stasis_core::ErrorCode::Internal),
                    message,
                ));
            }
            Some(ExecStreamLine::Exit {
                exit_code,
                timed_out,
                ..
            }) => {
                if timed_out {
                    eprintln!(
                        "stasis: timeout: command timed out after {} ms; its process tree was killed",
                        a.timeout_ms
                    );
                }
                exit_code.map(i64::from).unwrap_or(1)
            }
            // The stream ended without its exit line.
            Some(ExecStreamLine::Output { .. }) | None => 1,
        }
    } else {
        let v = c.exec_body(&a.id, body).await?;
        if json {
            println!("{}", pretty(&v));
        } else {
            let out = stasis_core::b64::decode(&v.stdout_b64).unwrap_or_default();
            let err = stasis_core::b64::decode(&v.stderr_b64).unwrap_or_default();
            std::io::stdout().write_all(&out)?;
            std::io::stderr().write_all(&err)?;
            if v.timed_out {
                eprintln!(
                    "stasis: timeout: command timed out after {} ms; its process tree was killed",
                    a.timeout_ms
                );
            }
        }
        v.exit_code
            .map(i64::from)
            .unwrap_or(if v.timed_out { 124 } else { 1 })
    };
    if code != 0 && !json {
        std::process::exit(code.clamp(1, 255) as i32);
    }
    Ok(())
}

#[derive(Subcommand)]
pub enum SessionCmd {
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

/// `stasis session ...`.
pub async fn session(c: &Client, s: SessionCmd, json: bool) -> Result<()> {
    match s {
        SessionCmd::Start { id, argv } => {
            let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
            let v = c.session_start(&id, &refs).await?;
            print_value(json, &v, |v| v.id.clone());
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
                println!("{}", pretty(&v));
            } else {
                print!("{}", v.data);
                eprintln!("[next offset {}]", v.next_offset);
            }
        }
        SessionCmd::Ls { id } => {
            let v = c.sessions(&id).await?;
            print_value(json, &v, |v| {
                v.iter()
                    .map(|s| format!("{}  running={}  {}", s.id, s.running, compact(&s.argv)))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        SessionCmd::Kill { id, session } => {
            c.delete(&format!("/v1/sandboxes/{id}/sessions/{session}"))
                .await?;
        }
    }
    Ok(())
}
