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
    /// Re-wrap every tenant's data keys under a new master key (online,
    /// resumable); every node's key file must hold the new key too.
    RotateMasterKey {
        /// File with the new key (64 hex characters, e.g. `openssl rand -hex 32`).
        #[arg(long)]
        new_key_file: std::path::PathBuf,
    },
    /// Delete the wraps of an older master key (refused while anything is
    /// still wrapped only under it).
    RetireMasterKey {
        /// The key's fingerprint (`stasis admin master-keys`).
        fingerprint: String,
    },
    /// Master-key generations, and which of them this node holds.
    MasterKeys,
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
    /// A new data key for the tenant: new snapshots use it, older ones stay readable.
    RotateKey { tenant: String },
    /// Crypto-erase a tenant: destroy its sandboxes, tokens and data keys.
    /// Every snapshot of it becomes unreadable at once, backups included.
    Erase {
        tenant: String,
        /// Confirm: this cannot be undone.
        #[arg(long)]
        yes: bool,
    },
    /// Pin a tenant to regions (its sandboxes and snapshots stay there).
    Pin {
        tenant: String,
        /// A region (repeatable).
        #[arg(long = "region", required_unless_present = "any")]
        regions: Vec<String>,
        /// Unpin: any region.
        #[arg(long, conflicts_with = "regions")]
        any: bool,
    },
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
        AdminCmd::RotateMasterKey { new_key_file } => {
            crate::governance::rotate_master_key(c, &new_key_file, json).await?
        }
        AdminCmd::RetireMasterKey { fingerprint } => {
            crate::governance::retire_master_key(c, &fingerprint, json).await?
        }
        AdminCmd::MasterKeys => crate::governance::master_keys(c, json).await?,
        AdminCmd::Tenant(TenantCmd::RotateKey { tenant }) => {
            crate::governance::rotate_tenant_key(c, &tenant, json).await?
        }
        AdminCmd::Tenant(TenantCmd::Erase { tenant, yes }) => {
            crate::governance::erase_tenant(c, &tenant, yes, json).await?
        }
        AdminCmd::Tenant(TenantCmd::Pin {
            tenant,
            regions,
            any,
        }) => crate::governance::pin_tenant(c, &tenant, regions, any, json).await?,
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
