//! `stasis audit`: reading the audit log and checking its hash chain.

use clap::Subcommand;

use stasis_core::{Error, Result};

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum AuditCmd {
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

/// `stasis audit ...`.
pub async fn audit(c: &Client, a: AuditCmd, json: bool) -> Result<()> {
    match a {
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
    }
    Ok(())
}
