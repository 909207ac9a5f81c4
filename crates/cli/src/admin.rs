//! Admin commands (admin token): tenants, their API tokens (`admin ...`) and
//! their secrets (`secret ...`).

use std::io::Read;

use clap::Subcommand;
use serde_json::json;

use stasis_core::Result;

use crate::client::{path_seg, Client};
use crate::output::print_value;

#[derive(Subcommand)]
pub enum AdminCmd {
    /// Tenants.
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// API tokens of a tenant.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Public images.
    #[command(subcommand)]
    Image(AdminImageCmd),
}

#[derive(Subcommand)]
pub enum AdminImageCmd {
    /// Register a host directory as a public image (used in place, read-only).
    Register {
        /// name[:tag].
        name: String,
        dir: std::path::PathBuf,
    },
    /// Remove images no name, live sandbox or snapshot uses, then unneeded layers.
    Gc,
}

#[derive(Subcommand)]
pub enum TenantCmd {
    /// Create a tenant.
    Create {
        /// Display name.
        name: String,
        /// Tenant id (default: generated).
        #[arg(long)]
        id: Option<String>,
    },
    /// List tenants.
    Ls,
}

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Create a token for a tenant; prints it once.
    Create {
        #[arg(long)]
        tenant: String,
        /// What the token is for.
        #[arg(long, default_value = "cli")]
        name: String,
        #[command(flatten)]
        mint: crate::token::MintArgs,
    },
    /// Replace a token by a new one; the old one keeps working for the overlap.
    Rotate {
        id: String,
        /// How long the old token stays valid, e.g. 10m (default 10m).
        #[arg(long)]
        overlap: Option<String>,
    },
    /// Revoke a token by its id (tok-...).
    Revoke { id: String },
    /// List a tenant's tokens (ids and names, never the tokens).
    Ls {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Subcommand)]
pub enum SecretCmd {
    /// Register or replace a secret; the value is read from stdin when not given.
    Set {
        #[arg(long)]
        tenant: String,
        name: String,
        /// The value (prefer stdin: arguments show up in process lists).
        value: Option<String>,
    },
    /// Delete a secret.
    Rm {
        #[arg(long)]
        tenant: String,
        name: String,
    },
    /// List a tenant's secret names.
    Ls {
        #[arg(long)]
        tenant: String,
    },
}

/// `stasis admin`.
pub async fn admin(c: &Client, cmd: AdminCmd, json: bool) -> Result<()> {
    match cmd {
        AdminCmd::Image(AdminImageCmd::Register { name, dir }) => {
            crate::image::register(c, name, dir, json).await?
        }
        AdminCmd::Image(AdminImageCmd::Gc) => {
            let v = c.post("/v1/admin/images/gc", json!({})).await?;
            print_value(json, &v, |v| {
                format!(
                    "removed {} images, {} layers, {} bytes",
                    v["images_removed"], v["layers_removed"], v["bytes_freed"]
                )
            });
        }
        AdminCmd::Tenant(TenantCmd::Create { name, id }) => {
            let v = c
                .post("/v1/admin/tenants", json!({"id": id, "name": name}))
                .await?;
            print_value(json, &v, |v| v["id"].as_str().unwrap_or("?").to_string());
        }
        AdminCmd::Tenant(TenantCmd::Ls) => {
            let v = c.get("/v1/admin/tenants").await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| {
                        format!(
                            "{}  {}",
                            t["id"].as_str().unwrap_or("?"),
                            t["name"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        AdminCmd::Token(TokenCmd::Create { tenant, name, mint }) => {
            let body = crate::token::mint_body(&name, &mint)?;
            let v = c
                .post(
                    &format!("/v1/admin/tenants/{}/tokens", path_seg(&tenant)?),
                    body,
                )
                .await?;
            crate::token::print_minted(json, &v);
        }
        AdminCmd::Token(TokenCmd::Rotate { id, overlap }) => {
            let mut body = json!({});
            if let Some(o) = overlap {
                body["overlap_secs"] = json!(crate::token::secs("--overlap", &o)?);
            }
            let v = c
                .post(&format!("/v1/admin/tokens/{}/rotate", path_seg(&id)?), body)
                .await?;
            crate::token::print_minted(json, &v);
        }
        AdminCmd::Token(TokenCmd::Revoke { id }) => {
            let v = c
                .delete(&format!("/v1/admin/tokens/{}", path_seg(&id)?))
                .await?;
            print_value(json, &v, |v| {
                format!("revoked {}", v["id"].as_str().unwrap_or("?"))
            });
        }
        AdminCmd::Token(TokenCmd::Ls { tenant }) => {
            let v = c
                .get(&format!("/v1/admin/tenants/{}/tokens", path_seg(&tenant)?))
                .await?;
            print_value(json, &v, crate::token::token_lines);
        }
    }
    Ok(())
}

/// `stasis secret`.
pub async fn secret(c: &Client, cmd: SecretCmd, json: bool) -> Result<()> {
    match cmd {
        SecretCmd::Set {
            tenant,
            name,
            value,
        } => {
            let value = match value {
                Some(v) => v,
                None => {
                    let mut s = String::new();
                    std::io::stdin().read_to_string(&mut s)?;
                    s.strip_suffix('\n').map(str::to_string).unwrap_or(s)
                }
            };
            c.put_json(
                &format!(
                    "/v1/admin/tenants/{}/secrets/{}",
                    path_seg(&tenant)?,
                    path_seg(&name)?
                ),
                json!({ "value": value }),
            )
            .await?;
            print_value(json, &json!({"tenant": tenant, "name": name}), |_| {
                format!("secret {name} set for {tenant}")
            });
        }
        SecretCmd::Rm { tenant, name } => {
            c.delete(&format!(
                "/v1/admin/tenants/{}/secrets/{}",
                path_seg(&tenant)?,
                path_seg(&name)?
            ))
            .await?;
            print_value(json, &json!({"tenant": tenant, "name": name}), |_| {
                format!("secret {name} removed from {tenant}")
            });
        }
        SecretCmd::Ls { tenant } => {
            let v = c
                .get(&format!("/v1/admin/tenants/{}/secrets", path_seg(&tenant)?))
                .await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}
