//! envd's `filesystem.Filesystem` service onto the control plane's file
//! API (which resolves every path beneath the sandbox's root and resumes a
//! paused sandbox first).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use stasis_access::scope::Scope;
use stasis_core::{Error, ErrorCode, FileKind, FileOp};

use super::connect::{self, Code, MessageReader, RpcError, RpcResult};
use super::fs_msg::*;
use super::owners::{self, Accounts};
use super::process_msg::user_of;
use super::process_msg::Empty;
use super::registry::Buffer;
use super::{caller, Caller};
use crate::E2b;

/// The deepest `ListDir` walks, and the most entries it answers.
const MAX_DEPTH: u32 = 32;
const MAX_ENTRIES: usize = 100_000;
/// A watch stream says it is alive this often when nothing changes.
const WATCH_KEEPALIVE: Duration = Duration::from_secs(30);

pub async fn call(State(st): State<E2b>, Path(method): Path<String>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    if method == "WatchDir" {
        if let Err(e) = connect::check_content_type(h, true) {
            return connect::stream_error(e);
        }
        let mut reader = MessageReader::new(body.into_data_stream());
        let r = match reader.next::<WatchRequest>().await {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => return connect::stream_error(e),
        };
        return match watch_stream(&st, h, r).await {
            Ok(r) => r,
            Err(e) => connect::stream_error(e),
        };
    }
    let r = async {
        connect::check_content_type(h, false)?;
        let body = axum::body::to_bytes(body, connect::MAX_MESSAGE)
            .await
            .map_err(|e| {
                RpcError::new(Code::InvalidArgument, format!("reading the request: {e}"))
            })?;
        unary(&st, h, &method, &body).await
    };
    match r.await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn who(st: &E2b, h: &HeaderMap, scope: Scope) -> RpcResult<Caller> {
    caller(st, h, scope).await.map_err(RpcError::from)
}

/// A path error as envd words it: a missing path is `not_found`.
fn path_err(e: Error) -> RpcError {
    RpcError::from(e)
}

/// A path's entry as envd reports it: a symlink has its target's type and
/// its target as an absolute path (a dangling one stays a symlink).
/// Owners are named from `names`, else from the accounts read after the
/// entry was found.
async fn stat(st: &E2b, c: &Caller, path: &str, names: Option<&Accounts>) -> RpcResult<EntryInfo> {
    let s = st
        .manager
        .stat(&c.ctx, &c.id, path)
        .await
        .map_err(path_err)?;
    let mut e = match names {
        Some(n) => entry_of_stat(&s, n),
        None => entry_of_stat(&s, &owners::names(st, c).await),
    };
    if let Some(target) = s
        .symlink_target
        .as_deref()
        .filter(|_| s.kind == FileKind::Symlink)
    {
        let abs = resolve_link(&s.path, target);
        if let Ok(t) = st.manager.stat(&c.ctx, &c.id, &abs).await {
            e.kind = file_type(t.kind);
        }
        e.symlink_target = Some(abs);
    }
    Ok(e)
}

async fn unary(st: &E2b, h: &HeaderMap, method: &str, body: &[u8]) -> RpcResult<Response> {
    let m = &st.manager;
    match method {
        "Stat" => {
            let r: PathRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Read).await?;
            let entry = stat(st, &c, &r.path, None).await?;
            Ok(connect::unary(&EntryResponse { entry }))
        }
        "ListDir" => {
            let r: ListDirRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Read).await?;
            let entries = list_dir(st, &c, &r.path, r.depth).await?;
            Ok(connect::unary(&ListDirResponse { entries }))
        }
        "MakeDir" => {
            let r: PathRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Exec).await?;
            if m.exists(&c.ctx, &c.id, &r.path).await? {
                return Err(RpcError::new(
                    Code::AlreadyExists,
                    format!("directory {} already exists", r.path),
                ));
            }
            // Made by (given to) the user the call names, as envd does.
            let user = user_of(h.get("authorization").and_then(|v| v.to_str().ok()))?;
            let t = owners::target(st, &c, user.as_deref(), "user").await?;
            owners::make_dirs(st, &c, &r.path, t.owner, &t.workdir)
                .await
                .map_err(path_err)?;
            let entry = stat(st, &c, &r.path, t.accounts.as_ref()).await?;
            Ok(connect::unary(&EntryResponse { entry }))
        }
        "Move" => {
            let r: MoveRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Exec).await?;
            let op = FileOp::Rename {
                from: r.source,
                to: r.destination.clone(),
            };
            m.file_op(&c.ctx, &c.id, op).await.map_err(path_err)?;
            let entry = stat(st, &c, &r.destination, None).await?;
            Ok(connect::unary(&EntryResponse { entry }))
        }
        "Remove" => {
            let r: PathRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Exec).await?;
            let op = FileOp::Remove {
                path: r.path,
                recursive: true,
            };
            match m.file_op(&c.ctx, &c.id, op).await {
                // As envd: removing what is not there is done.
                Err(e) if e.code == ErrorCode::NotFound && !e.message.starts_with("sandbox ") => {}
                r => r.map_err(path_err)?,
            }
            Ok(connect::unary(&Empty {}))
        }
        "CreateWatcher" => {
            let r: WatchRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Read).await?;
            let watcher_id = create_watcher(st, &c, r).await?;
            Ok(connect::unary(&CreateWatcherResponse { watcher_id }))
        }
        "GetWatcherEvents" => {
            let r: WatcherRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Read).await?;
            // Nothing yet: wait a moment for events in flight (a change made
            // just before this poll is still on its way from the sandbox's
            // watch), then answer what there is, maybe nothing.
            let mut events = st.envd.take_events(&c.id, &c.ctx.tenant, &r.watcher_id)?;
            for _ in 0..6 {
                if !events.is_empty() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                events = st.envd.take_events(&c.id, &c.ctx.tenant, &r.watcher_id)?;
            }
            Ok(connect::unary(&GetWatcherEventsResponse { events }))
        }
        "RemoveWatcher" => {
            let r: WatcherRequest = connect::decode(body)?;
            let c = who(st, h, Scope::Read).await?;
            st.envd
                .remove_watcher(&c.id, &c.ctx.tenant, &r.watcher_id)?;
            Ok(connect::unary(&Empty {}))
        }
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("filesystem.Filesystem/{other} is not a method of this envd"),
        )),
    }
}

/// The entries under `path`, `depth` levels down (1: the directory's own).
async fn list_dir(st: &E2b, c: &Caller, path: &str, depth: u32) -> RpcResult<Vec<EntryInfo>> {
    let depth = depth.max(1);
    if depth > MAX_DEPTH {
        return Err(RpcError::new(
            Code::InvalidArgument,
            format!("depth: at most {MAX_DEPTH}"),
        ));
    }
    let top = st
        .manager
        .stat(&c.ctx, &c.id, path)
        .await
        .map_err(path_err)?;
    if top.kind != FileKind::Dir {
        return Err(RpcError::new(
            Code::InvalidArgument,
            format!("path {path} is not a directory"),
        ));
    }
    let names = owners::names(st, c).await;
    let mut out = Vec::new();
    let mut level = vec![top.path];
    for _ in 0..depth {
        let mut next = Vec::new();
        for dir in level {
            let entries = match st.manager.list_files(&c.ctx, &c.id, &dir).await {
                Ok(e) => e,
                // A directory removed during the walk is skipped.
                Err(e) if e.code == ErrorCode::NotFound && !out.is_empty() => continue,
                Err(e) => return Err(path_err(e)),
            };
            for f in entries {
                let e = entry_of_listing(&dir, &f, &names);
                if f.kind == FileKind::Dir {
                    next.push(e.path.clone());
                }
                out.push(e);
                if out.len() > MAX_ENTRIES {
                    return Err(RpcError::new(
                        Code::ResourceExhausted,
                        format!("more than {MAX_ENTRIES} entries: list a smaller depth"),
                    ));
                }
            }
        }
        level = next;
    }
    // envd walks the tree depth first in name order.
    out.sort_by(|a, b| a.path.split('/').cmp(b.path.split('/')));
    Ok(out)
}

/// The events of a watch as envd sends them, with the entry when asked.
async fn translate(
    st: &E2b,
    c: &Caller,
    root: &str,
    r: &WatchRequest,
    ev: &stasis_core::FileEvent,
) -> Vec<FsEvent> {
    let mut out = events_of(ev, r.recursive);
    let wants = |e: &FsEvent| e.kind != "EVENT_TYPE_REMOVE" && e.kind != "EVENT_TYPE_RENAME";
    if r.include_entry && out.iter().any(wants) {
        let names = owners::names(st, c).await;
        for e in &mut out {
            if wants(e) {
                e.entry = stat(st, c, &join(root, &e.name), Some(&names)).await.ok();
            }
        }
    }
    out
}

async fn open_watch(
    st: &E2b,
    c: &Caller,
    r: &WatchRequest,
) -> RpcResult<(
    String,
    mpsc::Receiver<stasis_core::FileEvent>,
    stasis_control::inflight::Permit,
)> {
    let top = st
        .manager
        .stat(&c.ctx, &c.id, &r.path)
        .await
        .map_err(path_err)?;
    if top.kind != FileKind::Dir {
        return Err(RpcError::new(
            Code::InvalidArgument,
            format!("path {} is not a directory", r.path),
        ));
    }
    let (rx, permit) = st.manager.watch(&c.ctx, &c.id, &top.path).await?;
    Ok((top.path, rx, permit))
}

async fn watch_stream(st: &E2b, h: &HeaderMap, r: WatchRequest) -> RpcResult<Response> {
    let c = who(st, h, Scope::Read).await?;
    let (root, mut rx, permit) = open_watch(st, &c, &r).await?;
    let (tx, out) = mpsc::channel::<RpcResult<WatchEvent>>(64);
    let st = st.clone();
    tokio::spawn(async move {
        let _hold = permit;
        if tx.send(Ok(WatchEvent::Start {})).await.is_err() {
            return;
        }
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = tokio::time::sleep(WATCH_KEEPALIVE) => {
                    if tx.send(Ok(WatchEvent::Keepalive {})).await.is_err() {
                        return;
                    }
                    continue;
                }
                _ = tx.closed() => return,
            };
            let Some(ev) = ev else {
                // The sandbox stopped running (paused, killed).
                let _ = tx
                    .send(Err(RpcError::new(
                        Code::Unavailable,
                        "the watch ended: the sandbox is no longer running",
                    )))
                    .await;
                return;
            };
            for e in translate(&st, &c, &root, &r, &ev).await {
                if tx
                    .send(Ok(WatchEvent::Filesystem(Box::new(e))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    let events = futures::stream::unfold(
        out,
        |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
    );
    Ok(connect::streaming(connect::until(
        Box::pin(events),
        connect::timeout_of(h),
    )))
}

async fn create_watcher(st: &E2b, c: &Caller, r: WatchRequest) -> RpcResult<String> {
    let (root, mut rx, permit) = open_watch(st, c, &r).await?;
    let buf = Arc::new(Mutex::new(Buffer::default()));
    let (st2, c2, b2) = (st.clone(), c.clone(), buf.clone());
    let task = tokio::spawn(async move {
        let _hold = permit;
        while let Some(ev) = rx.recv().await {
            for e in translate(&st2, &c2, &root, &r, &ev).await {
                b2.lock().expect("buffer").push(e);
            }
        }
    });
    Ok(st
        .envd
        .add_watcher(&c.id, &c.ctx.tenant, buf, task.abort_handle())?)
}
