//! The file API's writes (chunked, optionally create-exclusive), ranged
//! reads and file operations, as guest agent requests. The guest is the
//! sandbox: paths resolve inside it, relative ones against the workdir.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use stasis_agent_proto::{Reply, Request};
use stasis_core::{Error, ErrorCode, FileEvent, FileOp, FileStat, Result, SandboxId, WriteMode};
use tokio::sync::mpsc;

use crate::guest::{self, expect_ok};
use crate::state::{self, MicrovmBackend, Vm};
use crate::FILE_CHUNK;

/// Chunk of file data per request with binary frames: small enough that
/// several are in flight (the guest writes one while the next arrives).
pub(crate) const BINARY_CHUNK: usize = 1 << 20;
/// Chunks in flight with binary frames.
pub(crate) const IN_FLIGHT: usize = 4;

/// How file data moves to and from one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub chunk: usize,
    pub in_flight: usize,
    /// Chunks after the first are written at their offset, in any order
    /// (else appended one after the other).
    pub offsets: bool,
}

impl Plan {
    /// For an agent that reads binary frames (it also writes at offsets), or
    /// one from before them (JSON, base64, one chunk at a time).
    pub fn for_agent(binary: bool) -> Plan {
        match binary {
            true => Plan {
                chunk: BINARY_CHUNK,
                in_flight: IN_FLIGHT,
                offsets: true,
            },
            false => Plan {
                chunk: FILE_CHUNK,
                in_flight: 1,
                offsets: false,
            },
        }
    }
}

async fn plan_of(b: &MicrovmBackend, vm: &Vm) -> Result<Plan> {
    Ok(Plan::for_agent(guest::agent_of(b, vm).await?.binary()))
}

/// The bytes a write sends, a chunk at a time: in memory, or a file of the
/// daemon's (an upload spooled to disk) read chunk by chunk, so a large
/// upload is never held whole.
pub(crate) trait Source: Sync {
    fn len(&self) -> usize;
    fn chunk(&self, at: usize, end: usize) -> Result<Vec<u8>>;
}

impl<T: AsRef<[u8]> + Sync + ?Sized> Source for T {
    fn len(&self) -> usize {
        self.as_ref().len()
    }
    fn chunk(&self, at: usize, end: usize) -> Result<Vec<u8>> {
        Ok(self.as_ref()[at..end].to_vec())
    }
}

/// A file read at offsets (its length taken once, when opened).
pub(crate) struct FileSource(std::fs::File, usize);

impl FileSource {
    pub fn open(p: &std::path::Path) -> Result<FileSource> {
        let f = std::fs::File::open(p)
            .map_err(|e| Error::internal(format!("opening the upload: {e}")))?;
        let n = f
            .metadata()
            .map_err(|e| Error::internal(format!("the upload: {e}")))?
            .len();
        Ok(FileSource(f, n as usize))
    }
}

impl Source for FileSource {
    fn len(&self) -> usize {
        self.1
    }
    fn chunk(&self, at: usize, end: usize) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; end - at];
        self.0
            .read_exact_at(&mut buf, at as u64)
            .map_err(|e| Error::internal(format!("reading the upload: {e}")))?;
        Ok(buf)
    }
}

pub(crate) async fn write(
    b: &MicrovmBackend,
    id: &SandboxId,
    path: &str,
    data: &(impl Source + ?Sized),
    mode: Option<u32>,
    how: WriteMode,
) -> Result<()> {
    let vm = state::vm(b, id)?;
    let path = guest::resolve_path(&vm, path)?;
    let plan = plan_of(b, &vm).await?;
    let call = |req| guest::call(b, &vm, req, None, Duration::ZERO);
    put(call, plan, &path, data, mode, how).await
}

/// Write `data` to `path` (resolved) through `call`, chunked by `plan`.
/// The first chunk creates (exclusively) or truncates the file; a failure
/// after it is an error, and a file this write created is removed.
pub(crate) async fn put<F, Fut>(
    call: F,
    plan: Plan,
    path: &str,
    data: &(impl Source + ?Sized),
    mode: Option<u32>,
    how: WriteMode,
) -> Result<()>
where
    F: Fn(Request) -> Fut,
    Fut: Future<Output = Result<Reply>>,
{
    let first = data.chunk(0, data.len().min(plan.chunk))?;
    let req = match how {
        WriteMode::CreateExclusive => Request::CreateFile {
            path: path.to_string(),
            data: first,
            mode,
        },
        WriteMode::Overwrite => Request::WriteFile {
            path: path.to_string(),
            data: first,
            append: false,
            mode,
            offset: None,
        },
    };
    expect_ok(call(req).await?)?;
    let rest = async {
        if !plan.offsets {
            for at in (plan.chunk..data.len()).step_by(plan.chunk) {
                let req = Request::WriteFile {
                    path: path.to_string(),
                    data: data.chunk(at, data.len().min(at + plan.chunk))?,
                    append: true,
                    mode,
                    offset: None,
                };
                expect_ok(call(req).await?)?;
            }
            return Ok(());
        }
        // Offsets, not slices, through the stream (a borrowed item does not
        // make a `Send` future here). After a failure no chunk is sent, and
        // those in flight are waited for: none lands after the cleanup.
        let failed = std::sync::atomic::AtomicBool::new(false);
        let mut replies = futures::stream::iter((plan.chunk..data.len()).step_by(plan.chunk))
            .map(|at| {
                let end = data.len().min(at + plan.chunk);
                let req = (!failed.load(Ordering::SeqCst)).then(|| {
                    data.chunk(at, end).map(|data| Request::WriteFile {
                        path: path.to_string(),
                        data,
                        append: false,
                        mode: None,
                        offset: Some(at as u64),
                    })
                });
                let r = req.map(|r| r.map(&call));
                async move {
                    match r {
                        Some(Ok(r)) => r.await,
                        Some(Err(e)) => Err(e),
                        None => Err(Error::internal("not sent after a failed chunk")),
                    }
                }
            })
            .buffer_unordered(plan.in_flight);
        let mut first_err = None;
        while let Some(r) = replies.next().await {
            if let Err(e) = r.and_then(expect_ok) {
                failed.store(true, Ordering::SeqCst);
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
    .await;
    if let Err(e) = rest {
        if how == WriteMode::CreateExclusive {
            // Not left behind half written: this write made it.
            let rm = FileOp::Remove {
                path: path.to_string(),
                recursive: false,
            };
            let _ = call(Request::FileOp { file_op: rm }).await;
        }
        return Err(e);
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
        FileOp::Chown { path, uid, gid } => FileOp::Chown {
            path: r(&path)?,
            uid,
            gid,
        },
        FileOp::SetMeta { path, meta } => FileOp::SetMeta {
            path: r(&path)?,
            meta,
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
    let plan = plan_of(b, &vm).await?;
    let call = |req| guest::call(b, &vm, req, None, Duration::ZERO);
    get(call, plan, &path, offset, len, false).await
}

/// The whole file, at most `limit` bytes (else `payload_too_large`).
pub(crate) async fn read_file(
    b: &MicrovmBackend,
    id: &SandboxId,
    path: &str,
    limit: u64,
) -> Result<Vec<u8>> {
    let vm = state::vm(b, id)?;
    let path = guest::resolve_path(&vm, path)?;
    let plan = plan_of(b, &vm).await?;
    let call = |req| guest::call(b, &vm, req, None, Duration::ZERO);
    Ok(get(call, plan, &path, 0, limit, true).await?.0)
}

/// Read `path` (resolved) through `call`, chunked by `plan`: `len` bytes
/// from `offset` (fewer at the end), or with `whole` all of it from
/// `offset`, `len` being the limit. Returns the data and the file's size.
/// The first chunk tells the size; the rest are in flight together.
pub(crate) async fn get<F, Fut>(
    call: F,
    plan: Plan,
    path: &str,
    offset: u64,
    len: u64,
    whole: bool,
) -> Result<(Vec<u8>, u64)>
where
    F: Fn(Request) -> Fut,
    Fut: Future<Output = Result<Reply>>,
{
    let chunk = plan.chunk as u64;
    // At most this many bytes (one more than the limit of a whole read, to see it is over).
    let cap = if whole { len.saturating_add(1) } else { len };
    let read = |at: u64, want: u64| {
        let req = Request::ReadFile {
            path: path.to_string(),
            offset: at,
            limit: want,
        };
        let r = call(req);
        async move {
            match r.await? {
                Reply::File { data, size } => {
                    if whole && size > len {
                        return Err(Error::new(
                            ErrorCode::PayloadTooLarge,
                            format!("{path} is {size} bytes, over the limit of {len}"),
                        ));
                    }
                    Ok((want, data, size))
                }
                other => Err(Error::backend(format!(
                    "unexpected reply to read_file: {other:?}"
                ))),
            }
        }
    };
    let want = cap.min(chunk);
    let (_, mut out, mut size) = read(offset, if whole { want.max(1) } else { want }).await?;
    let mut short = (out.len() as u64) < want;
    loop {
        let done = out.len() as u64;
        let target = cap.min(size.saturating_sub(offset));
        if short || done >= target {
            return Ok((out, size));
        }
        out.reserve((target - done) as usize);
        let mut replies = futures::stream::iter((done..target).step_by(plan.chunk))
            .map(|o| read(offset + o, chunk.min(target - o)))
            .buffered(plan.in_flight);
        while let Some(r) = replies.next().await {
            let (want, data, s) = r?;
            size = s;
            short = (data.len() as u64) < want;
            out.extend_from_slice(&data);
            if short {
                break;
            }
        }
    }
}

/// Changes under `path`, polled from the guest agent (which keeps the
/// watch's last view of the tree) until the receiver is dropped or the
/// agent connection ends (a pause): the watch ends with it.
pub(crate) async fn watch(
    b: &MicrovmBackend,
    id: &SandboxId,
    path: &str,
) -> Result<mpsc::Receiver<FileEvent>> {
    let vm = state::vm(b, id)?;
    let path = guest::resolve_path(&vm, path)?;
    let start = Request::WatchPoll {
        watch: None,
        path: path.clone(),
        wait_ms: 0,
    };
    let watch = match guest::call(b, &vm, start, None, Duration::ZERO).await? {
        Reply::Watch { watch, .. } => watch,
        other => {
            return Err(Error::backend(format!(
                "unexpected reply to watch_poll: {other:?}"
            )))
        }
    };
    let agent = guest::agent_of(b, &vm).await?;
    let timeout = b.config.agent_timeout + Duration::from_secs(2);
    let (tx, rx) = mpsc::channel(1024);
    tokio::spawn(async move {
        'poll: loop {
            let req = Request::WatchPoll {
                watch: Some(watch.clone()),
                path: path.clone(),
                wait_ms: 1000,
            };
            let r = tokio::select! {
                _ = tx.closed() => break 'poll,
                r = agent.request(req, None, timeout) => r,
            };
            let Ok(Reply::Watch { events, .. }) = r else {
                break 'poll;
            };
            for e in events {
                if tx.send(e).await.is_err() {
                    break 'poll;
                }
            }
        }
        let _ = agent
            .request(Request::WatchStop { watch }, None, timeout)
            .await;
    });
    Ok(rx)
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
