//! `stasis store verify` (admin token): read back and verify every chunk of
//! the store's live snapshots, repairing what the daemon's local copies can.
//! Exits non-zero, with one line, when damage remains or something could
//! not be read.

use clap::Subcommand;
use serde_json::{json, Value};

use stasis_core::{Error, Result};

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum StoreCmd {
    /// Verify the snapshots' chunks (all tenants, or one tenant, or one snapshot).
    Verify {
        /// Only this tenant's snapshots.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this snapshot (with --tenant).
        #[arg(long, requires = "tenant")]
        snapshot: Option<String>,
    },
}

/// `stasis store ...`.
pub async fn store(c: &Client, cmd: StoreCmd, json: bool) -> Result<()> {
    match cmd {
        StoreCmd::Verify { tenant, snapshot } => {
            let body = json!({"tenant": tenant, "snapshot": snapshot});
            let v = c.post("/v1/admin/store/verify", body).await?;
            print_value(json, &v, summary);
            verdict(&v)
        }
    }
}

fn summary(v: &Value) -> String {
    let mut out = format!(
        "{} snapshot(s), {} chunk(s), {} bytes verified; {} damaged, {} repaired",
        v["snapshots"],
        v["chunks_verified"],
        v["bytes_verified"],
        v["chunks_damaged"],
        v["chunks_repaired"]
    );
    for s in v["damaged"].as_array().into_iter().flatten() {
        for d in s["damaged"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "\n  {} {} {}@{} ({} bytes): {}{}",
                s["tenant"].as_str().unwrap_or("?"),
                s["snapshot"].as_str().unwrap_or("?"),
                d["artifact"].as_str().unwrap_or("?"),
                d["offset"],
                d["len"],
                d["reason"].as_str().unwrap_or(""),
                if d["repaired"] == true {
                    " [repaired]"
                } else {
                    ""
                }
            ));
        }
    }
    for e in v["errors"].as_array().into_iter().flatten() {
        out.push_str(&format!("\n  error: {}", e.as_str().unwrap_or("")));
    }
    out
}

/// Err (one line) when damage remains or something could not be verified.
fn verdict(v: &Value) -> Result<()> {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let left = n("chunks_damaged").saturating_sub(n("chunks_repaired"));
    let snaps = v["damaged"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| {
                    s["damaged"]
                        .as_array()
                        .is_some_and(|d| d.iter().any(|d| d["repaired"] != true))
                })
                .count()
        })
        .unwrap_or(0);
    if left > 0 {
        return Err(Error::integrity(format!(
            "{left} damaged chunk(s) in {snaps} snapshot(s) could not be repaired from a local copy"
        )));
    }
    let errors = v["errors"].as_array().map(Vec::len).unwrap_or(0);
    if errors > 0 {
        return Err(Error::internal(format!(
            "{errors} snapshot(s) or tenant(s) could not be verified"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_left_or_errors_fail_with_one_line() {
        let clean = json!({"chunks_damaged": 2, "chunks_repaired": 2, "damaged": [], "errors": []});
        assert!(verdict(&clean).is_ok());
        let bad = json!({"chunks_damaged": 2, "chunks_repaired": 1,
            "damaged": [{"damaged": [{"repaired": true}, {"repaired": false}]}], "errors": []});
        let e = verdict(&bad).unwrap_err();
        assert!(
            e.message.starts_with("1 damaged chunk(s) in 1 snapshot(s)"),
            "{}",
            e.message
        );
        assert!(!e.message.contains('\n'));
        let err =
            json!({"chunks_damaged": 0, "chunks_repaired": 0, "damaged": [], "errors": ["x"]});
        assert!(verdict(&err).is_err());
    }
}
