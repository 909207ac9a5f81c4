//! envd's `process.Process` service onto stasis sessions.
//!
//! A process is a session: `Start` starts one (on a terminal when a PTY is
//! asked) and streams its output, `Connect` follows a running one from its
//! current end, `List` lists the running ones, `SendInput` / `StreamInput`
//! write to it, `SendSignal` sends it SIGTERM or SIGKILL (a SIGKILL ends
//! the session's whole process tree), `Update` resizes its terminal. Its pid is derived from
//! the session's id ([`pid_of`]). Output is stdout and stderr apart, in the
//! order produced, or terminal output for a PTY. `CloseStdin` closes a
//! session's input (its command reads end of file).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use stasis_access::scope::Scope;
use stasis_core::{PtySize, SessionInfo, SessionSignal};

use super::connect::{self, Code, MessageReader, RpcError, RpcResult};
use super::process_msg::*;
use super::{caller, Caller};
use crate::E2b;

/// The longest one read of a session's output waits (then a keepalive
/// goes out if nothing came).
const READ_WAIT: Duration = Duration::from_secs(30);

/// Answer one call of `process.Process/<method>`.
pub async fn call(State(st): State<E2b>, Path(method): Path<String>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    match method.as_str() {
        "Start" | "Connect" => {
            if let Err(e) = connect::check_content_type(h, true) {
                return connect::stream_error(e);
            }
            match open(&st, h, &method, body).await {
                Ok(r) => r,
                Err(e) => connect::stream_error(e),
            }
        }
        "StreamInput" => {
            if let Err(e) = connect::check_content_type(h, true) {
                return connect::stream_error(e);
            }
            match stream_input(&st, h, body).await {
                Ok(()) => connect::streaming(futures::stream::iter([Ok(Empty {})])),
                Err(e) => connect::stream_error(e),
            }
        }
        "List" | "SendInput" | "SendSignal" | "Update" | "CloseStdin" => {
            match unary(&st, h, &method, body).await {
                Ok(r) => r,
                Err(e) => e.into_response(),
            }
        }
        other => RpcError::new(
            Code::Unimplemented,
            format!("process.Process/{other} is not a method of this envd"),
        )
        .into_response(),
    }
}

async fn body_bytes(body: Body) -> RpcResult<axum::body::Bytes> {
    axum::body::to_bytes(body, connect::MAX_MESSAGE)
        .await
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("reading the request: {e}")))
}

async fn who(st: &E2b, h: &HeaderMap, scope: Scope) -> RpcResult<Caller> {
    caller(st, h, scope).await.map_err(RpcError::from)
}

async fn unary(st: &E2b, h: &HeaderMap, method: &str, body: Body) -> RpcResult<Response> {
    connect::check_content_type(h, false)?;
    let body = body_bytes(body).await?;
    let m = &st.manager;
    match method {
        "List" => {
            let c = who(st, h, Scope::Read).await?;
            let sessions = m.session_list(&c.ctx, &c.id).await?;
            let running: Vec<&SessionInfo> = sessions.iter().filter(|s| s.running).collect();
            let alive: Vec<String> = running.iter().map(|s| s.id.clone()).collect();
            st.envd.prune_tags(&c.id, &alive);
            let processes = running
                .into_iter()
                .map(|s| info_of(s, st.envd.tag_of_session(&c.id, &s.id)))
                .collect();
            Ok(connect::unary(&ListResponse { processes }))
        }
        "SendInput" => {
            let r: SendInputRequest = connect::decode(&body)?;
            let c = who(st, h, Scope::Exec).await?;
            let s = find(st, &c, r.process.as_ref()).await?;
            let data = r.input.map(ProcessInput::bytes).unwrap_or_default();
            m.session_write(&c.ctx, &c.id, &s.id, &data).await?;
            Ok(connect::unary(&Empty {}))
        }
        "SendSignal" => {
            let r: SendSignalRequest = connect::decode(&body)?;
            let signal = match r.signal {
                9 => SessionSignal::Kill,
                15 => SessionSignal::Term,
                _ => {
                    return Err(RpcError::new(
                        Code::InvalidArgument,
                        "signal: SIGNAL_SIGTERM or SIGNAL_SIGKILL",
                    ))
                }
            };
            let c = who(st, h, Scope::Exec).await?;
            let s = find(st, &c, r.process.as_ref()).await?;
            m.session_kill(&c.ctx, &c.id, &s.id, signal).await?;
            Ok(connect::unary(&Empty {}))
        }
        "Update" => {
            let r: UpdateRequest = connect::decode(&body)?;
            let c = who(st, h, Scope::Exec).await?;
            let s = find(st, &c, r.process.as_ref()).await?;
            if let Some(size) = r.pty.and_then(|p| p.size) {
                let side = |n: u32| u16::try_from(n).unwrap_or(u16::MAX);
                let size = PtySize {
                    cols: side(size.cols),
                    rows: side(size.rows),
                };
                m.session_resize(&c.ctx, &c.id, &s.id, size).await?;
            }
            Ok(connect::unary(&Empty {}))
        }
        // CloseStdin: the command reads end of file (not on a terminal:
        // the session answers `failed_precondition`; send ^D there).
        _ => {
            let r: SelectorOnly = connect::decode(&body)?;
            let c = who(st, h, Scope::Exec).await?;
            let s = find(st, &c, r.process.as_ref()).await?;
            m.session_close_input(&c.ctx, &c.id, &s.id).await?;
            Ok(connect::unary(&Empty {}))
        }
    }
}

/// The running session a selector names (`not_found` otherwise, which
/// the SDKs read as "no such process").
async fn find(st: &E2b, c: &Caller, sel: Option<&Selector>) -> RpcResult<SessionInfo> {
    let sel = sel.ok_or_else(|| RpcError::new(Code::InvalidArgument, "process: a pid or a tag"))?;
    let want = match (&sel.pid, &sel.tag) {
        (Some(pid), _) => Ok(*pid),
        (None, Some(tag)) => Err(st.envd.session_of_tag(&c.id, tag)),
        (None, None) => {
            return Err(RpcError::new(
                Code::InvalidArgument,
                "process: a pid or a tag",
            ))
        }
    };
    let sessions = st.manager.session_list(&c.ctx, &c.id).await?;
    let hit = sessions.into_iter().find(|s| {
        s.running
            && match &want {
                Ok(pid) => pid_of(&s.id) == *pid,
                Err(Some(id)) => &s.id == id,
                Err(None) => false,
            }
    });
    hit.ok_or_else(|| {
        let what = match (&sel.pid, &sel.tag) {
            (Some(p), _) => format!("process with pid {p} not found"),
            (_, Some(t)) => format!("process with tag {t} not found"),
            _ => "process not found".into(),
        };
        RpcError::new(Code::NotFound, what)
    })
}

/// `Start` and `Connect`: the first event, then the session's output.
async fn open(st: &E2b, h: &HeaderMap, method: &str, body: Body) -> RpcResult<Response> {
    let mut reader = MessageReader::new(body.into_data_stream());
    let c = who(st, h, Scope::Exec).await?;
    let (session, offset, pty) = if method == "Start" {
        let r: StartRequest = reader.next().await?.unwrap_or_default();
        let tag = r.tag.clone();
        let user = user_of(h.get("authorization").and_then(|v| v.to_str().ok()))?;
        let spec = spec_of(r, user)?;
        let pty = spec.pty.is_some();
        let info = st.manager.session_start(&c.ctx, &c.id, spec).await?;
        if let Some(t) = tag {
            st.envd.tag(&c.id, &t, &info.id);
        }
        (info.id, 0, pty)
    } else {
        let r: ConnectRequest = reader.next().await?.unwrap_or_default();
        let s = find(st, &c, r.process.as_ref()).await?;
        (s.id, s.output_end, s.pty.is_some())
    };
    let (tx, rx) = mpsc::channel::<RpcResult<EventResponse>>(16);
    let wait = keepalive(h);
    tokio::spawn(follow(st.clone(), c, session, offset, pty, wait, tx));
    let events =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    Ok(connect::streaming(connect::until(
        Box::pin(events),
        connect::timeout_of(h),
    )))
}

/// The client's keepalive interval (`Keepalive-Ping-Interval`, seconds),
/// at most [`READ_WAIT`].
fn keepalive(h: &HeaderMap) -> Duration {
    h.get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.max(1)).min(READ_WAIT))
        .unwrap_or(READ_WAIT)
}

/// Send the start event, then the session's output from `offset` until it
/// ends (or the client goes away: the send fails and this returns).
async fn follow(
    st: E2b,
    c: Caller,
    session: String,
    mut offset: u64,
    pty: bool,
    wait: Duration,
    tx: mpsc::Sender<RpcResult<EventResponse>>,
) {
    let pid = pid_of(&session);
    if tx.send(Ok(Event::Start { pid }.into())).await.is_err() {
        return;
    }
    loop {
        // Following output neither resumes the sandbox nor keeps it awake:
        // once it is paused (or gone) the stream ends as the connection
        // ending, which the SDKs check against `/health`.
        let out = match st
            .manager
            .session_read_attached(&c.ctx, &c.id, &session, offset, wait)
            .await
        {
            Ok(Some(o)) => o,
            Ok(None) => {
                let _ = tx
                    .send(Err(RpcError::lost(format!(
                        "sandbox {} stopped running before the process ended",
                        c.id
                    ))))
                    .await;
                return;
            }
            Err(e) => {
                let _ = tx.send(Err(ended(&st, &c, e).await)).await;
                return;
            }
        };
        let idle = out.data.is_empty() && out.running;
        offset = out.next_offset;
        let events = if idle {
            vec![Event::Keepalive {}]
        } else {
            events_of(&out, pty)
        };
        for ev in events {
            if tx.send(Ok(ev.into())).await.is_err() {
                return;
            }
        }
        if !out.running {
            return;
        }
    }
}

/// The error that ends a process stream: when the sandbox itself went
/// away (killed, expired) it is the connection ending, which the SDKs
/// check against `/health` (answering "not found") and report as the
/// sandbox no longer running.
async fn ended(st: &E2b, c: &Caller, e: stasis_core::Error) -> RpcError {
    match st.manager.get(&c.ctx, &c.id).await {
        Ok(rec) if super::live(rec.state) => e.into(),
        _ => RpcError::lost(format!(
            "the connection to sandbox {} ended before the process did",
            c.id
        )),
    }
}

/// `StreamInput`: a start naming the process, then data, in order.
async fn stream_input(st: &E2b, h: &HeaderMap, body: Body) -> RpcResult<()> {
    let c = who(st, h, Scope::Exec).await?;
    let mut reader = MessageReader::new(body.into_data_stream());
    let mut session: Option<String> = None;
    while let Some(m) = reader.next::<StreamInputRequest>().await? {
        if let Some(start) = m.start {
            session = Some(find(st, &c, start.process.as_ref()).await?.id);
        } else if let Some(data) = m.data {
            let s = session.as_deref().ok_or_else(|| {
                RpcError::new(
                    Code::FailedPrecondition,
                    "the first message must be a start",
                )
            })?;
            let bytes = data.input.map(ProcessInput::bytes).unwrap_or_default();
            st.manager.session_write(&c.ctx, &c.id, s, &bytes).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_interval_from_the_header_is_bounded() {
        let mut h = HeaderMap::new();
        assert_eq!(keepalive(&h), READ_WAIT);
        h.insert("keepalive-ping-interval", "5".parse().unwrap());
        assert_eq!(keepalive(&h), Duration::from_secs(5));
        h.insert("keepalive-ping-interval", "500".parse().unwrap());
        assert_eq!(keepalive(&h), READ_WAIT);
        h.insert("keepalive-ping-interval", "0".parse().unwrap());
        assert_eq!(keepalive(&h), Duration::from_secs(1));
    }
}
