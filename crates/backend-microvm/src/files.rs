//! The file API's writes (chunked, optionally create-exclusive), ranged
//! reads and file operations, as guest agent requests. The guest is the
//! sandbox: paths resolve inside it, relative ones against the workdir.

use std::time::Duration;

use stasis_agent_proto::{Reply, Request};
use stasis_core::{Error, FileOp, FileStat, Result, SandboxId, WriteMode};

use crate::guest::{self, expect_ok};
use crate::state::{self, MicrovmBackend};
use crate::FILE_CHUNK;

pub(crate) async fn write(
    b: &MicrovmBackend,
    id: &SandboxId,
    path: &str,
    data: &[u8],
    mode: Option<u32>,
    how: WriteMode,
) -> Result<()> {
    let vm = state::vm(b, id)?;
    let path = guest::resolve_path(&vm, path)?;
    let mut chunks: Vec<&[u8]> = data.chunks(FILE_CHUNK).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for (i, c) in chunks.into_iter().enumerate() {
        let req = if i == 0 && how == WriteMode::CreateExclusive {
            Request::CreateFile {
                path: path.clone(),
                data: c.to_vec(),
                mode,
            }
        } else {
            Request::WriteFile {
                path: path.clone(),
                data: c.to_vec(),
                append: i > 0,
                mode,
            }
        };
        expect_ok(guest::call(b, &vm, req, None, Duration::ZERO).await?)?;
    }
    Ok(())
}

pub(crate) async fn op(b: &MicrovmBackend, id: &SandboxId, op: FileOp) -> Result<Option<FileStat>> {
    let vm = state::vm(b, id)?;
    let r = |p: &str| guest::resolve_path(&vm, p);
    let op = match op {
        FileOp::Stat { path } => FileOp::Stat { path: r(&path)? },
        FileOp::Remove { path, recursive } => FileOp::Remove {
            path: r(&path)?,
            recursive,
        },
        FileOp::Mkdir { path, parents } => FileOp::Mkdir {
            path: r(&path)?,
            parents,
        },
        FileOp::Rename { from, to } => FileOp::Rename {
            from: r(&from)?,
            to: r(&to)?,
        },
    };
    match guest::call(
        b,
        &vm,
        Request::FileOp { file_op: op },
        None,
        Duration::ZERO,
    )
    .await?
    {
        Reply::Stat { stat } => Ok(Some(stat)),
        Reply::Ok => Ok(None),
        other => Err(Error::backend(format!(
            "unexpected reply to file_op: {other:?}"
        ))),
    }
}

pub(crate) async fn read_range(
    b: &MicrovmBackend,
    id: &SandboxId,
    path: &str,
    offset: u64,
    len: u64,
) -> Result<(Vec<u8>, u64)> {
    let vm = state::vm(b, id)?;
    let path = guest::resolve_path(&vm, path)?;
    let mut out = Vec::new();
    loop {
        let want = (FILE_CHUNK as u64).min(len - out.len() as u64);
        let r = guest::call(
            b,
            &vm,
            Request::ReadFile {
                path: path.clone(),
                offset: offset + out.len() as u64,
                limit: want,
            },
            None,
            Duration::ZERO,
        )
        .await?;
        let Reply::File { data, size: s } = r else {
            return Err(Error::backend(format!(
                "unexpected reply to read_file: {r:?}"
            )));
        };
        let size = s;
        let got = data.len();
        out.extend_from_slice(&data);
        if got == 0 || out.len() as u64 >= len {
            return Ok((out, size));
        }
    }
}
