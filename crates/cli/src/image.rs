//! Images: `image import FILE.tar [-t NAME]` (an OCI layout or `docker
//! save` archive, uploaded with a progress bar), `image ls`, `image inspect
//! NAME`, `image rm NAME`; and the operator's `admin image register NAME DIR`.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::{json, Value};

use stasis_core::Result;

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Import an OCI image layout tar or a `docker save` tar.
    Import {
        file: PathBuf,
        /// name[:tag] (default: the name the archive carries).
        #[arg(short = 't', long = "tag")]
        tag: Option<String>,
    },
    /// Your images, then the public ones.
    Ls,
    /// One image's record: layers, sizes, digests, config, build log.
    Inspect { name: String },
    /// Remove your image's name (its content goes once nothing uses it).
    Rm { name: String },
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn summary(v: &Value) -> String {
    let r = &v["record"];
    format!(
        "{}  {}  {} layers, rootfs {} bytes",
        v["names"]
            .as_array()
            .and_then(|n| n.first())
            .and_then(|n| n.as_str())
            .unwrap_or("-"),
        v["id"].as_str().unwrap_or("?"),
        r["layers"].as_array().map_or(0, |l| l.len()),
        r["rootfs_bytes"].as_u64().unwrap_or(0)
    )
}

pub async fn image(c: &Client, cmd: ImageCmd, json: bool) -> Result<()> {
    match cmd {
        ImageCmd::Import { file, tag } => {
            let path = match &tag {
                Some(t) => format!("/v1/images/import?name={}", enc(t)),
                None => "/v1/images/import".to_string(),
            };
            let v: Value = c.upload(&path, &file, !json).await?;
            print_value(json, &v, summary);
        }
        ImageCmd::Ls => {
            let v = c.get("/v1/images").await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|i| {
                        format!(
                            "{}:{}  {}  {}",
                            i["name"].as_str().unwrap_or("?"),
                            i["tag"].as_str().unwrap_or("?"),
                            i["owner"].as_str().unwrap_or("?"),
                            i["id"].as_str().unwrap_or("?")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        ImageCmd::Inspect { name } => {
            let v = c.get(&format!("/v1/images/{}", enc(&name))).await?;
            print_value(true, &v, |_| String::new());
        }
        ImageCmd::Rm { name } => {
            c.delete(&format!("/v1/images/{}", enc(&name))).await?;
            print_value(json, &json!({"removed": name}), |_| {
                format!("removed {name}")
            });
        }
    }
    Ok(())
}

/// `stasis admin image register NAME DIR`.
pub async fn register(c: &Client, name: String, dir: PathBuf, json: bool) -> Result<()> {
    let dir = std::fs::canonicalize(&dir)
        .map_err(|e| stasis_core::Error::invalid(format!("{}: {e}", dir.display())))?;
    let v = c
        .post(
            "/v1/admin/images",
            json!({"name": name, "dir": dir.to_string_lossy()}),
        )
        .await?;
    print_value(json, &v, |v| {
        format!(
            "{}:{}  public  {}",
            v["name"].as_str().unwrap_or("?"),
            v["tag"].as_str().unwrap_or("?"),
            v["id"].as_str().unwrap_or("?")
        )
    });
    Ok(())
}
