//! `stasis webhook`: this tenant's lifecycle webhook endpoints.

use clap::Subcommand;
use serde_json::json;

use stasis_core::Result;

use crate::client::{path_seg, Client};
use crate::output::print_value;

#[derive(Subcommand)]
pub enum WebhookCmd {
    /// Register an endpoint; prints its signing secret once.
    Create {
        url: String,
        /// An event type to receive (repeat; default: all), e.g. sandbox.paused.
        #[arg(long = "event")]
        events: Vec<String>,
    },
    /// List endpoints with delivery counts.
    Ls,
    /// Delete an endpoint.
    Rm { id: String },
    /// Events an endpoint never acknowledged after every retry.
    Dead { id: String },
}

pub async fn webhook(c: &Client, cmd: WebhookCmd, json: bool) -> Result<()> {
    match cmd {
        WebhookCmd::Create { url, events } => {
            let mut body = json!({ "url": url });
            if !events.is_empty() {
                body["events"] = json!(events);
            }
            let v = c.post("/v1/webhooks", body).await?;
            print_value(json, &v, |v| {
                v["secret"].as_str().unwrap_or("?").to_string()
            });
            if !json {
                eprintln!(
                    "stasis: webhook {}: its signing secret is shown once, store it now",
                    v["id"].as_str().unwrap_or("?")
                );
            }
        }
        WebhookCmd::Ls => {
            let v = c.get("/v1/webhooks").await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|w| {
                        format!(
                            "{}  {}  delivered={} failed={}",
                            w["id"].as_str().unwrap_or("?"),
                            w["url"].as_str().unwrap_or(""),
                            w["delivered"],
                            w["failed"]
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        WebhookCmd::Rm { id } => {
            c.delete(&format!("/v1/webhooks/{}", path_seg(&id)?))
                .await?;
            print_value(json, &json!({"id": id}), |_| format!("deleted {id}"));
        }
        WebhookCmd::Dead { id } => {
            let v = c
                .get(&format!("/v1/webhooks/{}/dead-letters", path_seg(&id)?))
                .await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|d| {
                        format!(
                            "{}  {}  attempts={}  {}",
                            d["seq"],
                            d["event_type"].as_str().unwrap_or("?"),
                            d["attempts"],
                            d["last_error"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}
