//! Key governance and regions (admin token): `admin rotate-master-key`,
//! `admin retire-master-key`, `admin master-keys`, `admin tenant
//! rotate-key|erase|pin`.

use std::path::Path;

use serde_json::json;

use stasis_core::{Error, Result};
use stasis_store::MasterKey;

use crate::client::{path_seg, Client};
use crate::output::print_value;

pub async fn rotate_master_key(c: &Client, file: &Path, json: bool) -> Result<()> {
    // Parsed here, so a bad file fails before anything is sent.
    let key = MasterKey::from_file(file)?;
    let v = c
        .post("/v1/admin/master-keys/rotate", json!({"key": key.to_hex()}))
        .await?;
    print_value(json, &v, |v| {
        format!(
            "master key {} is generation {}: {} data keys of {} tenants rewrapped ({} already), \
             {} secrets resealed, in {} ms\nput the key in every node's key file, then retire the old one",
            v["fingerprint"].as_str().unwrap_or("?"),
            v["generation"],
            v["keys_rewrapped"],
            v["tenants"],
            v["keys_already"],
            v["secrets_resealed"],
            v["ms"]
        )
    });
    Ok(())
}

pub async fn retire_master_key(c: &Client, fp: &str, json: bool) -> Result<()> {
    let v = c
        .post(
            &format!("/v1/admin/master-keys/{}/retire", path_seg(fp)?),
            json!({}),
        )
        .await?;
    print_value(json, &v, |v| {
        format!(
            "master key {} retired: {} wraps removed in {} tenants",
            v["fingerprint"].as_str().unwrap_or("?"),
            v["wraps_removed"],
            v["tenants"]
        )
    });
    Ok(())
}

pub async fn master_keys(c: &Client, json: bool) -> Result<()> {
    let v = c.get("/v1/admin/master-keys").await?;
    print_value(json, &v, |v| {
        v["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| {
                format!(
                    "{}  generation {}  {}{}",
                    k["fingerprint"].as_str().unwrap_or("?"),
                    k["generation"],
                    k["state"].as_str().unwrap_or("?"),
                    if k["held_here"].as_bool() == Some(true) {
                        "  (held here)"
                    } else {
                        ""
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

pub async fn rotate_tenant_key(c: &Client, tenant: &str, json: bool) -> Result<()> {
    let v = c
        .post(
            &format!("/v1/admin/tenants/{}/rotate-key", path_seg(tenant)?),
            json!({}),
        )
        .await?;
    print_value(json, &v, |v| {
        format!(
            "tenant {tenant}: new snapshots use data key generation {}",
            v["generation"]
        )
    });
    Ok(())
}

pub async fn erase_tenant(c: &Client, tenant: &str, yes: bool, json: bool) -> Result<()> {
    if !yes {
        return Err(Error::invalid(format!(
            "erasing tenant {tenant} destroys every snapshot of it for good: add --yes"
        )));
    }
    let v = c
        .post(
            &format!("/v1/admin/tenants/{}/erase", path_seg(tenant)?),
            json!({"confirm": tenant}),
        )
        .await?;
    print_value(json, &v, |v| {
        format!(
            "tenant {tenant} erased: {} sandboxes destroyed, {} key wraps destroyed, {} objects removed",
            v["sandboxes_destroyed"], v["key_wraps_destroyed"], v["objects_removed"]
        )
    });
    Ok(())
}

pub async fn pin_tenant(
    c: &Client,
    tenant: &str,
    regions: Vec<String>,
    any: bool,
    json: bool,
) -> Result<()> {
    let body = if any {
        json!({"regions": null})
    } else {
        json!({ "regions": regions })
    };
    let v = c
        .put_json(
            &format!("/v1/admin/tenants/{}/regions", path_seg(tenant)?),
            body,
        )
        .await?;
    print_value(json, &v, |v| match v["regions"].as_array() {
        Some(r) => format!(
            "tenant {tenant} pinned to {}",
            r.iter()
                .filter_map(|x| x.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => format!("tenant {tenant}: any region"),
    });
    Ok(())
}
