//! `stasis network`: a sandbox's network policy and egress counters, and
//! replacing the policy of a running or paused sandbox.

use clap::Subcommand;
use serde_json::{json, Value};

use stasis_core::Result;

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum NetworkCmd {
    /// The policy in force and the egress counters.
    Show { id: String },
    /// Replace the policy (both lists; none given: no network).
    Set {
        id: String,
        /// A name (`pypi.org`), `*.wildcard`, address or network
        /// (`10.1.0.0/16`), optional `:port`. Repeatable.
        #[arg(long, value_name = "ENTRY")]
        allow: Vec<String>,
        /// An entry refused even when allowed. Repeatable.
        #[arg(long, value_name = "ENTRY")]
        deny: Vec<String>,
    },
}

fn render(v: &Value) -> String {
    let list = |k: &str| {
        v["policy"][k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    let mut out = format!("allow: {}\ndeny:  {}", list("allow"), list("deny"));
    let c = &v["counters"];
    if v["attached"] == true && c.is_object() {
        out.push_str(&format!(
            "\nconnections: {} allowed, {} denied\ndns: {} questions, {} refused, {} rate-limited, {} sent upstream",
            c["allowed"], c["denied"], c["dns_queries"], c["dns_refused"], c["dns_limited"], c["upstream_queries"]
        ));
    } else {
        out.push_str("\n(not running on this node: the policy applies at resume)");
    }
    out
}

/// `stasis network ...`.
pub async fn network(c: &Client, cmd: NetworkCmd, json: bool) -> Result<()> {
    let v = match cmd {
        NetworkCmd::Show { id } => c.get(&format!("/v1/sandboxes/{id}/network")).await?,
        NetworkCmd::Set { id, allow, deny } => {
            c.patch(
                &format!("/v1/sandboxes/{id}/network"),
                json!({"allow": allow, "deny": deny}),
            )
            .await?
        }
    };
    print_value(json, &v, render);
    Ok(())
}
