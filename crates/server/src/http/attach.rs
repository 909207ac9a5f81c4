//! `GET /v1/sandboxes/{id}/sessions/{session}/attach?offset=N`: a
//! WebSocket onto a session (a terminal). Client -> server: binary frames
//! are input bytes, text frames JSON control messages
//! (`{"type":"resize","cols":..,"rows":..}`, or `{"type":"input","data":".."}`
//! for text input). Server -> client: a text
//! `{"type":"attached","offset":..}` first, output as binary frames, and at
//! the end `{"type":"exit","code":..}` (close 1000) or, when the sandbox
//! pauses, `{"type":"detached","reason":..,"offset":..}` (close 4000 with
//! the reason): reattach with that offset. Refused input or resizes come
//! as `{"type":"error","code":..,"message":..}`. The loop itself is
//! [`crate::attach`]; this module only carries it over the socket.

use axum::extract::ws::{rejection::WebSocketUpgradeRejection, CloseFrame, Message, WebSocket};
use axum::extract::{Path, State, WebSocketUpgrade};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::sync::mpsc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use stasis_core::Error;

use super::auth::Authed;
use super::error::{ApiQuery, ApiResult};
use super::sandboxes::sandbox_id;
use super::state::AppState;
use crate::attach::{self, ClientMsg, ServerMsg};

/// Close code of a socket whose sandbox paused (reattach to resume it).
pub const CLOSE_DETACHED: u16 = 4000;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AttachQuery {
    /// Replay output from this offset (what a reattaching client got to);
    /// default 0: all the session's buffer still holds.
    #[serde(default)]
    pub offset: u64,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/sessions/{session}/attach", params(AttachQuery),
    responses((status = 101, description = "WebSocket attached to the session"),
              (status = 400, description = "not a WebSocket request"),
              (status = 404, description = "no such sandbox or session")))]
async fn attach_session(
    State(st): State<AppState>,
    auth: Authed,
    Path((id, session)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<AttachQuery>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let ctx = auth.ctx();
    let sid = sandbox_id(&id)?;
    stasis_core::id::validate_id("session", &session)?;
    let ws = ws.map_err(|e| {
        Error::invalid(format!(
            "attach needs a WebSocket upgrade request: {}",
            e.body_text()
        ))
    })?;
    attach::open(&st.manager, &ctx, &sid, &session).await?;
    let mgr = st.manager.clone();
    Ok(ws.on_upgrade(move |socket| serve(socket, mgr, ctx, sid, session, q.offset)))
}

async fn serve(
    socket: WebSocket,
    mgr: std::sync::Arc<crate::manager::Manager>,
    ctx: crate::manager::Ctx,
    id: stasis_core::SandboxId,
    session: String,
    offset: u64,
) {
    let (mut sink, mut stream) = socket.split();
    let (in_tx, in_rx) = mpsc::channel::<ClientMsg>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<ServerMsg>(64);
    let mut pump_done = false;
    let mut pump = tokio::spawn(attach::pump(
        mgr,
        ctx,
        id,
        session,
        offset,
        in_rx,
        out_tx.clone(),
    ));
    // Socket -> pump; a bad control message is answered, not fatal.
    let errors = out_tx;
    let recv = tokio::spawn(async move {
        while let Some(Ok(msg)) = stream.next().await {
            let m = match msg {
                Message::Binary(b) => Ok(ClientMsg::Input(b.to_vec())),
                Message::Text(t) => ClientMsg::from_text(t.as_str()),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            let sent = match m {
                Ok(m) => in_tx.send(m).await.is_ok(),
                Err(e) => errors
                    .send(ServerMsg::Error {
                        code: e.code.as_str().to_string(),
                        message: e.message,
                    })
                    .await
                    .is_ok(),
            };
            if !sent {
                break;
            }
        }
    });
    // Pump -> socket, until its last message (or, should the loop end
    // otherwise, e.g. the session was killed, close 1011 once drained).
    loop {
        let msg = if pump_done {
            out_rx.try_recv().ok()
        } else {
            tokio::select! {
                biased;
                m = out_rx.recv() => m,
                _ = &mut pump => {
                    pump_done = true;
                    continue;
                }
            }
        };
        let Some(msg) = msg else {
            let _ = sink
                .send(Message::Close(Some(CloseFrame {
                    code: 1011,
                    reason: "the attachment ended".into(),
                })))
                .await;
            break;
        };
        let (frame, close) = match &msg {
            ServerMsg::Output(data) => (Message::Binary(data.clone().into()), None),
            other => {
                let text = serde_json::to_string(other).unwrap_or_default();
                let close = match other {
                    ServerMsg::Exit { .. } => Some((1000, "session exited".to_string())),
                    ServerMsg::Detached { reason, .. } => Some((CLOSE_DETACHED, reason.clone())),
                    _ => None,
                };
                (Message::Text(text.into()), close)
            }
        };
        if sink.send(frame).await.is_err() {
            break;
        }
        if let Some((code, reason)) = close {
            let _ = sink
                .send(Message::Close(Some(CloseFrame {
                    code,
                    reason: reason.into(),
                })))
                .await;
            break;
        }
    }
    recv.abort();
    pump.abort();
}

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(attach_session))
}
