//! Snapshots: taking one (`snapshot`), listing, export/import and deleting
//! them (`snapshots ...`), and starting sandboxes from them (`restore`, `fork`).

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;

use stasis_core::Result;

use crate::client::Client;
use crate::output::{as_text, print_value};
use crate::sandbox::read_manifest_arg;

#[derive(Subcommand)]
pub enum SnapshotsCmd {
    Ls,
    Get {
        id: String,
    },
    Rm {
        id: String,
    },
    /// Download a snapshot as one encrypted file (to move it between deployments).
    Export {
        id: String,
        file: PathBuf,
    },
    /// Upload an exported snapshot file; it is verified before it is accepted.
    Import {
        file: PathBuf,
    },
}

/// `stasis snapshot`.
pub async fn snapshot(c: &Client, id: String, ttl_secs: Option<u64>, json: bool) -> Result<()> {
    let v = c.snapshot(&id, ttl_secs).await?;
    print_value(json, &v, |v| {
        format!(
            "{}  raw {} bytes, stored {} bytes",
            v.id, v.raw_bytes, v.stored_bytes
        )
    });
    Ok(())
}

/// `stasis snapshots ...`.
pub async fn snapshots(c: &Client, s: SnapshotsCmd, json: bool) -> Result<()> {
    match s {
        SnapshotsCmd::Ls => {
            let v = c.snapshots().await?;
            print_value(json, &v, |v| {
                v.iter()
                    .map(|s| {
                        format!(
                            "{}  {:<5} {:<8} from {}  raw {} stored {}",
                            s.id,
                            as_text(&s.kind),
                            as_text(&s.backend),
                            s.source_sandbox.as_ref().map_or("-", |id| id.as_str()),
                            s.raw_bytes,
                            s.stored_bytes
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        SnapshotsCmd::Get { id } => {
            let v = c.snapshot_info(&id).await?;
            print_value(true, &v, |_| String::new());
        }
        SnapshotsCmd::Export { id, file } => {
            let n = c
                .download(&format!("/v1/snapshots/{id}/export"), &file, !json)
                .await?;
            print_value(
                json,
                &json!({"snapshot": id, "file": file, "bytes": n}),
                |_| format!("exported {id} to {} ({n} bytes)", file.display()),
            );
        }
        SnapshotsCmd::Import { file } => {
            let v = c.import_snapshot(&file, !json).await?;
            print_value(json, &v, |v| {
                format!("imported {} ({} bytes raw)", v.id, v.raw_bytes)
            });
        }
        SnapshotsCmd::Rm { id } => {
            c.delete(&format!("/v1/snapshots/{id}")).await?;
            if !json {
                println!("{id} deleted");
            }
        }
    }
    Ok(())
}

/// `stasis restore`.
pub async fn restore(
    c: &Client,
    snapshot: String,
    manifest: Option<String>,
    json: bool,
) -> Result<()> {
    let m = manifest.map(|f| read_manifest_arg(&f)).transpose()?;
    let v = c.restore(&snapshot, m).await?;
    print_value(json, &v, |v| v.id.clone());
    Ok(())
}

/// `stasis fork`.
pub async fn fork(c: &Client, id: String, count: u32, json: bool) -> Result<()> {
    let v = c.fork(&id, count).await?;
    print_value(json, &v, |v| {
        v.sandboxes
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}
