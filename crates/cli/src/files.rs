//! Files in a sandbox (`files put|get|ls`) and collecting its output
//! directories (`outputs`, a tar downloaded and safely extracted).

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;

use stasis_core::{Error, Result};

use crate::client::Client;
use crate::output::{as_text, print_value};

#[derive(Subcommand)]
pub enum FilesCmd {
    /// Upload a local file (- for stdin).
    Put {
        id: String,
        local: String,
        remote: String,
    },
    /// Download a file (to stdout, or a local path).
    Get {
        id: String,
        remote: String,
        local: Option<PathBuf>,
    },
    /// List a directory.
    Ls {
        id: String,
        #[arg(default_value = ".")]
        path: String,
    },
}

/// `stasis files ...`.
pub async fn files(c: &Client, f: FilesCmd, json: bool) -> Result<()> {
    match f {
        FilesCmd::Put { id, local, remote } => {
            let n = if local == "-" {
                let mut d = Vec::new();
                std::io::stdin().read_to_end(&mut d)?;
                let n = d.len() as u64;
                c.put_file(&id, &remote, d).await?;
                n
            } else {
                // Streamed from the file: a large upload is not read into memory.
                c.put_file_from(&id, &remote, std::path::Path::new(&local))
                    .await?
            };
            print_value(json, &json!({"path": remote, "bytes": n}), |_| {
                format!("wrote {n} bytes to {remote}")
            });
        }
        FilesCmd::Get { id, remote, local } => {
            let data = c.get_file(&id, &remote).await?;
            match local {
                Some(p) => {
                    std::fs::write(&p, &data)?;
                    print_value(json, &json!({"path": p, "bytes": data.len()}), |_| {
                        format!("read {} bytes into {}", data.len(), p.display())
                    });
                }
                None => std::io::stdout().write_all(&data)?,
            }
        }
        FilesCmd::Ls { id, path } => {
            let v = c.list_files(&id, &path).await?;
            print_value(json, &v, |v| {
                v.iter()
                    .map(|e| {
                        format!(
                            "{:<8} {:>10} {}",
                            as_text(&e.kind),
                            // A JSON number, as printed before: its Display
                            // ignores the width.
                            serde_json::Value::from(e.size),
                            e.name
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
    }
    Ok(())
}

/// `stasis outputs`.
pub async fn outputs(
    c: &Client,
    id: String,
    to: Option<PathBuf>,
    tar: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    let (file, keep) = match (&tar, &to) {
        (Some(t), None) => (t.clone(), true),
        (None, Some(d)) => {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::invalid(format!("{}: {e}", d.display())))?;
            (d.join(".stasis-outputs.tar"), false)
        }
        _ => return Err(Error::invalid("give exactly one of --to DIR or --tar FILE")),
    };
    let n = c
        .download(&format!("/v1/sandboxes/{id}/outputs"), &file, false)
        .await?;
    let mut entries = 0u64;
    if !keep {
        let dir = to.clone().unwrap_or_default();
        let r = (|| -> std::io::Result<()> {
            let mut a = ::tar::Archive::new(std::fs::File::open(&file)?);
            a.set_preserve_permissions(true);
            // `unpack` refuses entries that would land outside `dir`
            // (absolute paths, `..`, writes through planted symlinks).
            for e in a.entries()? {
                let mut e = e?;
                if e.unpack_in(&dir)? {
                    entries += 1;
                }
            }
            Ok(())
        })();
        let _ = std::fs::remove_file(&file);
        r.map_err(|e| Error::invalid(format!("extract outputs into {}: {e}", dir.display())))?;
    }
    let dest = to.as_ref().or(tar.as_ref()).cloned().unwrap_or_default();
    print_value(
        json,
        &json!({"sandbox": id, "to": dest, "bytes": n, "entries": entries, "extracted": !keep}),
        |_| {
            if keep {
                format!("outputs of {id}: {} ({n} bytes)", dest.display())
            } else {
                format!("outputs of {id}: {entries} entries into {}", dest.display())
            }
        },
    );
    Ok(())
}
