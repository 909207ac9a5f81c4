//! Attaching a client to a session (a terminal): the loop that pumps the
//! session's output to the client and the client's keystrokes and resizes
//! to the session, independent of the transport (the HTTP edge carries it
//! over a WebSocket; see `http::attach`).
//!
//! - [`open`] goes through the manager like any request: a paused sandbox
//!   is resumed, an unknown sandbox or session is `not_found`.
//! - [`pump`] then sends [`ServerMsg::Attached`] with the offset the replay
//!   starts at (a client that reattaches with the offset it got to receives
//!   exactly what it missed, as far as the session's buffer still holds it),
//!   then output as it comes, and ends with [`ServerMsg::Exit`] when the
//!   session has ended and its output is drained, or [`ServerMsg::Detached`]
//!   when the sandbox stopped running (a pause: the client may reattach,
//!   which resumes it). Output reads do not resume the sandbox nor count as
//!   activity; keystrokes and resizes do (they go the normal request path).
//!   An input or resize the session refuses is reported as
//!   [`ServerMsg::Error`] and the loop goes on.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use stasis_core::{Error, PtySize, Result, SandboxId, SessionInfo};

use crate::manager::{Ctx, Manager};

/// One read of the output loop waits at most this long.
const READ_WAIT: Duration = Duration::from_secs(1);

/// What a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMsg {
    /// Bytes typed (to the session's terminal or stdin).
    Input(Vec<u8>),
    Resize(PtySize),
}

/// The control messages a client may send as JSON text
/// (`{"type":"resize","cols":..,"rows":..}`); input travels as binary.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Control {
    Resize { cols: u16, rows: u16 },
    Input { data: String },
}

impl ClientMsg {
    /// A text message of the client (JSON).
    pub fn from_text(text: &str) -> Result<Self> {
        let c: Control = serde_json::from_str(text).map_err(|e| {
            Error::invalid(format!(
                "control message: {e} (expected {{\"type\":\"resize\",\"cols\":N,\"rows\":N}})"
            ))
        })?;
        Ok(match c {
            Control::Resize { cols, rows } => ClientMsg::Resize(PtySize { cols, rows }),
            Control::Input { data } => ClientMsg::Input(data.into_bytes()),
        })
    }
}

/// What the server sends; everything but output travels as JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMsg {
    /// First message: the replay starts at `offset`.
    Attached {
        offset: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        pty: Option<PtySize>,
    },
    #[serde(skip)]
    Output(Vec<u8>),
    /// The session ended (its output all sent); last message.
    Exit { code: Option<i32> },
    /// The sandbox stopped running (paused); last message. Reattach with
    /// `offset` to continue where this left off.
    Detached { reason: String, offset: u64 },
    /// A request of the client was refused; the attachment goes on.
    Error { code: String, message: String },
}

impl ServerMsg {
    fn error(e: &Error) -> Self {
        ServerMsg::Error {
            code: e.code.as_str().to_string(),
            message: e.message.clone(),
        }
    }
}

/// Resolve the session to attach to (resuming a paused sandbox).
pub async fn open(mgr: &Manager, ctx: &Ctx, id: &SandboxId, session: &str) -> Result<SessionInfo> {
    mgr.session_list(ctx, id)
        .await?
        .into_iter()
        .find(|s| s.id == session)
        .ok_or_else(|| Error::not_found(format!("session {session}")))
}

/// Run one attachment until the session ends, the sandbox stops running,
/// or the client goes away (`input` closed or `output` dropped).
pub async fn pump(
    mgr: Arc<Manager>,
    ctx: Ctx,
    id: SandboxId,
    session: String,
    offset: u64,
    mut input: mpsc::Receiver<ClientMsg>,
    output: mpsc::Sender<ServerMsg>,
) {
    let reader = {
        let (mgr, ctx, id, session, output) = (
            mgr.clone(),
            ctx.clone(),
            id.clone(),
            session.clone(),
            output.clone(),
        );
        tokio::spawn(async move { read_loop(&mgr, &ctx, &id, &session, offset, &output).await })
    };
    let abort = reader.abort_handle();
    let writer = async {
        while let Some(msg) = input.recv().await {
            let r = match msg {
                ClientMsg::Input(data) if data.is_empty() => Ok(()),
                ClientMsg::Input(data) => mgr.session_write(&ctx, &id, &session, &data).await,
                ClientMsg::Resize(size) => mgr.session_resize(&ctx, &id, &session, size).await,
            };
            if let Err(e) = r {
                if output.send(ServerMsg::error(&e)).await.is_err() {
                    break;
                }
            }
        }
    };
    tokio::select! {
        _ = reader => {}
        _ = writer => abort.abort(),
    }
}

async fn read_loop(
    mgr: &Manager,
    ctx: &Ctx,
    id: &SandboxId,
    session: &str,
    mut offset: u64,
    output: &mpsc::Sender<ServerMsg>,
) {
    let mut first = true;
    loop {
        let wait = if first { Duration::ZERO } else { READ_WAIT };
        let out = match mgr
            .session_read_attached(ctx, id, session, offset, wait)
            .await
        {
            Ok(Some(out)) => out,
            Ok(None) => {
                let reason = "the sandbox is no longer running (paused); reattach to resume it";
                let _ = output
                    .send(ServerMsg::Detached {
                        reason: reason.to_string(),
                        offset,
                    })
                    .await;
                return;
            }
            Err(e) => {
                let _ = output.send(ServerMsg::error(&e)).await;
                return;
            }
        };
        if first {
            first = false;
            let pty = match mgr.session_list(ctx, id).await {
                Ok(l) => l.into_iter().find(|s| s.id == session).and_then(|s| s.pty),
                Err(_) => None,
            };
            let msg = ServerMsg::Attached {
                offset: out.offset,
                pty,
            };
            if output.send(msg).await.is_err() {
                return;
            }
        }
        offset = out.next_offset;
        let drained = out.data.is_empty();
        if !drained && output.send(ServerMsg::Output(out.data)).await.is_err() {
            return;
        }
        if !out.running && drained {
            let _ = output
                .send(ServerMsg::Exit {
                    code: out.exit_code,
                })
                .await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_parse_or_are_refused() {
        assert_eq!(
            ClientMsg::from_text(r#"{"type":"resize","cols":100,"rows":30}"#).unwrap(),
            ClientMsg::Resize(PtySize {
                cols: 100,
                rows: 30
            })
        );
        assert_eq!(
            ClientMsg::from_text(r#"{"type":"input","data":"ls\n"}"#).unwrap(),
            ClientMsg::Input(b"ls\n".to_vec())
        );
        for bad in [
            "",
            "resize",
            r#"{"type":"resize","cols":-1,"rows":30}"#,
            r#"{"type":"resize","cols":100}"#,
            r#"{"type":"zoom"}"#,
            r#"{"type":"resize","cols":1,"rows":1,"x":1}"#,
        ] {
            let e = ClientMsg::from_text(bad).unwrap_err();
            assert_eq!(e.code, stasis_core::ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn server_messages_are_tagged_json() {
        let j = |m: &ServerMsg| serde_json::to_value(m).unwrap();
        assert_eq!(
            j(&ServerMsg::Attached {
                offset: 5,
                pty: None
            }),
            serde_json::json!({"type": "attached", "offset": 5})
        );
        assert_eq!(
            j(&ServerMsg::Exit { code: Some(3) }),
            serde_json::json!({"type": "exit", "code": 3})
        );
        assert_eq!(
            j(&ServerMsg::Detached {
                reason: "r".into(),
                offset: 9
            }),
            serde_json::json!({"type": "detached", "reason": "r", "offset": 9})
        );
    }
}
