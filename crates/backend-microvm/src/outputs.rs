//! Collecting a sandbox's output directories.
//!
//! The guest packs them (`find | tar`, run through the agent, streamed to
//! the host), but nothing it sends is trusted: the host reads the stream as
//! an archive and writes a fresh one holding only regular files,
//! directories and symlinks (as links) whose paths lie inside a declared
//! output directory, with no `..`. The raw stream is capped (a guest cannot
//! fill the host's disk through it).

use std::io::{Read, Write};
use std::path::{Component, Path};

use stasis_backend::{Backend, ExecChunk};
use stasis_core::{Error, ErrorCode, ExecRequest, Result, SandboxId};
use tokio::sync::mpsc;

use crate::qemu;
use crate::state::{self, MicrovmBackend};

/// The guest command that streams the outputs as a tar on stdout. Entries
/// are named by their sandbox path without the leading `/`.
pub fn guest_command(outputs: &[String]) -> String {
    let dirs: Vec<String> = outputs
        .iter()
        .map(|o| shell_quote(o.trim_start_matches('/')))
        .collect();
    format!(
        "cd / && for d in {}; do [ -d \"$d\" ] && [ ! -L \"$d\" ] && find \"$d\" \\( -type f -o -type d -o -type l \\) -print0; done | tar --null --no-recursion -cf - -T -",
        dirs.join(" ")
    )
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Is `name` (an archive entry path) inside one of `outputs`?
fn allowed(name: &Path, outputs: &[String]) -> bool {
    if !name.components().all(|c| matches!(c, Component::Normal(_))) {
        return false;
    }
    outputs.iter().any(|o| {
        let o = Path::new(o.trim_start_matches('/'));
        name.starts_with(o)
    })
}

/// Rewrite the guest's archive `raw` into `out` keeping only allowed
/// entries. Returns (bytes of `out`, entries kept, entries dropped).
pub fn filter_archive(raw: impl Read, out: &Path, outputs: &[String]) -> Result<(u64, u64, u64)> {
    let bad = |e: std::io::Error| Error::backend(format!("output archive from the guest: {e}"));
    let mut a = tar::Archive::new(raw);
    let f = std::fs::File::create(out)?;
    let mut b = tar::Builder::new(std::io::BufWriter::new(f));
    let (mut kept, mut dropped) = (0u64, 0u64);
    for e in a.entries().map_err(bad)? {
        let mut e = e.map_err(bad)?;
        let name = e.path().map_err(bad)?.into_owned();
        let ty = e.header().entry_type();
        let ok_type = ty.is_file() || ty.is_dir() || ty.is_symlink();
        if !ok_type || !allowed(&name, outputs) {
            dropped += 1;
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(ty);
        h.set_mode(e.header().mode().map_err(bad)? & 0o7777);
        h.set_mtime(e.header().mtime().unwrap_or(0));
        h.set_uid(e.header().uid().unwrap_or(0));
        h.set_gid(e.header().gid().unwrap_or(0));
        if ty.is_symlink() {
            let target = e
                .link_name()
                .map_err(bad)?
                .ok_or_else(|| Error::backend("symlink without a target in the output archive"))?
                .into_owned();
            h.set_size(0);
            b.append_link(&mut h, &name, &target).map_err(bad)?;
        } else if ty.is_dir() {
            h.set_size(0);
            b.append_data(&mut h, &name, std::io::empty())
                .map_err(bad)?;
        } else {
            h.set_size(e.size());
            b.append_data(&mut h, &name, &mut e).map_err(bad)?;
        }
        kept += 1;
    }
    let mut w = b.into_inner().map_err(bad)?;
    w.flush()?;
    drop(w);
    Ok((std::fs::metadata(out)?.len(), kept, dropped))
}

pub fn too_large(limit: u64) -> Error {
    Error::new(
        ErrorCode::PayloadTooLarge,
        format!(
            "the outputs exceed {} MiB (the sandbox's disk size)",
            limit >> 20
        ),
    )
}

pub(crate) async fn collect_tar(b: &MicrovmBackend, id: &SandboxId, out: &Path) -> Result<u64> {
    use tokio::io::AsyncWriteExt;
    let vm = state::vm(b, id)?;
    let outputs = vm.manifest.outputs.clone();
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "outputs".into());
    let raw = out.with_file_name(format!(".{name}.guest"));
    if outputs.is_empty() {
        return filter_archive(std::io::empty(), out, &outputs).map(|r| r.0);
    }
    // The guest cannot have more to send than its disk holds.
    let limit = crate::boundary::qcow2_virtual_size(&vm.dir.join(qemu::DISK)).unwrap_or(1 << 30)
        + (64 << 20);
    let (tx, mut rx) = mpsc::channel::<ExecChunk>(64);
    let mut file = tokio::fs::File::create(&raw).await?;
    let writer = tokio::spawn(async move {
        let (mut n, mut err, mut over) = (0u64, Vec::new(), false);
        while let Some(c) = rx.recv().await {
            match c.stream {
                stasis_core::Stream::Stdout => {
                    n += c.data.len() as u64;
                    if n > limit {
                        over = true;
                    } else {
                        file.write_all(&c.data).await?;
                    }
                }
                stasis_core::Stream::Stderr => {
                    if err.len() < 4096 {
                        err.extend_from_slice(&c.data);
                    }
                }
            }
        }
        file.flush().await?;
        Ok::<_, std::io::Error>((err, over))
    });
    let req = ExecRequest {
        argv: vec!["sh".into(), "-c".into(), guest_command(&outputs)],
        env: Default::default(),
        cwd: Some("/".into()),
        timeout_ms: 600_000,
        stdin: None,
        user: None,
    };
    let r = b.exec(id, req, Some(tx)).await;
    let w = writer.await.map_err(|e| Error::internal(e.to_string()));
    let result = async {
        let (err, over) = w??;
        let r = r?;
        if over {
            return Err(too_large(limit));
        }
        if r.exit_code != Some(0) {
            return Err(Error::backend(format!(
                "collecting outputs in the guest failed ({:?}): {}",
                r.exit_code,
                String::from_utf8_lossy(&err).trim()
            )));
        }
        let (raw2, out2) = (raw.clone(), out.to_path_buf());
        let (size, kept, dropped) = tokio::task::spawn_blocking(move || {
            filter_archive(std::fs::File::open(&raw2)?, &out2, &outputs)
        })
        .await
        .map_err(|e| Error::internal(e.to_string()))??;
        if dropped > 0 {
            tracing::warn!(sandbox = %id, kept, dropped, "output archive: entries outside the output dirs or of other types dropped");
        }
        Ok(size)
    }
    .await;
    let _ = std::fs::remove_file(&raw);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_output_entries_of_safe_types_survive() {
        let d = tempfile::tempdir().unwrap();
        let raw = d.path().join("raw.tar");
        {
            let mut b = tar::Builder::new(std::fs::File::create(&raw).unwrap());
            let add = |b: &mut tar::Builder<std::fs::File>,
                       name: &str,
                       ty: tar::EntryType,
                       data: &[u8]| {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(ty);
                h.set_size(data.len() as u64);
                h.set_mode(0o644);
                // Bypass the builder's path checks: a hostile guest would.
                let bytes = name.as_bytes();
                h.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
                h.set_cksum();
                b.append(&h, data).unwrap();
            };
            add(&mut b, "out/", tar::EntryType::Directory, b"");
            add(&mut b, "out/r.txt", tar::EntryType::Regular, b"result");
            add(&mut b, "etc/passwd", tar::EntryType::Regular, b"x");
            add(&mut b, "out/../etc/shadow", tar::EntryType::Regular, b"x");
            add(&mut b, "out/dev", tar::EntryType::Char, b"");
            add(&mut b, "outside/x", tar::EntryType::Regular, b"x");
            b.finish().unwrap();
        }
        let out = d.path().join("out.tar");
        let outputs = vec!["/out".to_string()];
        let (_, kept, dropped) =
            filter_archive(std::fs::File::open(&raw).unwrap(), &out, &outputs).unwrap();
        assert_eq!((kept, dropped), (2, 4));
        let mut a = tar::Archive::new(std::fs::File::open(&out).unwrap());
        let names: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, vec!["out/", "out/r.txt"]);
    }

    #[test]
    fn guest_command_quotes_paths() {
        let c = guest_command(&["/out".into(), "/it's".into()]);
        assert!(c.contains("'out' 'it'\\''s'"), "{c}");
    }
}
