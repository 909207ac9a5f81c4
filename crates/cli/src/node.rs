//! `stasis node drain | undrain | status` (admin token): this node's
//! lifecycle. A drained node starts no sandbox, answers `/readyz` not
//! ready, and has paused every sandbox it ran to the store, so other nodes
//! resume them on their next request. Exits non-zero, with one line, when
//! a drain left sandboxes running or a pause failed.

use clap::Subcommand;
use serde_json::{json, Value};

use stasis_core::{Error, Result};

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum NodeCmd {
    /// Start no sandbox here and pause every running one to the store.
    Drain {
        /// Longest wait for sandboxes busy with a request, seconds.
        #[arg(long, default_value_t = 60)]
        within_secs: u64,
    },
    /// Take sandboxes again.
    Undrain,
    /// Whether the node drains, and how many sandboxes run here.
    Status,
}

/// `stasis node ...`.
pub async fn node(c: &Client, cmd: NodeCmd, json: bool) -> Result<()> {
    match cmd {
        NodeCmd::Drain { within_secs } => {
            let v = c
                .post("/v1/admin/node/drain", json!({"within_secs": within_secs}))
                .await?;
            print_value(json, &v, drain_summary);
            drain_verdict(&v)
        }
        NodeCmd::Undrain => {
            let v = c.post("/v1/admin/node/undrain", json!({})).await?;
            print_value(json, &v, status_summary);
            Ok(())
        }
        NodeCmd::Status => {
            let v = c.get("/v1/admin/node").await?;
            print_value(json, &v, status_summary);
            Ok(())
        }
    }
}

fn count(v: &Value, k: &str) -> usize {
    v[k].as_array().map_or(0, Vec::len)
}

fn drain_summary(v: &Value) -> String {
    format!(
        "draining: {} paused, {} failed, {} still running ({} ms)",
        count(v, "paused"),
        count(v, "failed"),
        count(v, "left_running"),
        v["ms"]
    )
}

fn status_summary(v: &Value) -> String {
    format!(
        "{}, {} sandbox(es) running here",
        if v["draining"] == true {
            "draining"
        } else {
            "taking sandboxes"
        },
        v["running_here"]
    )
}

fn drain_verdict(v: &Value) -> Result<()> {
    let (failed, left) = (count(v, "failed"), count(v, "left_running"));
    if failed + left > 0 {
        return Err(Error::backend(format!(
            "drain incomplete: {failed} pause(s) failed, {left} sandbox(es) still running (run it again)"
        )));
    }
    Ok(())
}
