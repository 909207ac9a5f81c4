//! `stasis shell ID [-- cmd...]`: an interactive terminal in a sandbox, like
//! `docker exec -it`. Starts a session on a PTY (the command given, else
//! `/bin/bash` when the sandbox has it, else `/bin/sh`), attaches to it over
//! the daemon's WebSocket, puts the local terminal in raw mode (so Ctrl-C,
//! Ctrl-D and arrows travel as bytes), forwards window size changes
//! (SIGWINCH) and exits with the shell's exit status. When the connection
//! drops (the daemon restarted, the network) it reattaches from the last
//! output offset it received. When the sandbox paused, it reattaches (which
//! resumes it) at the first keystroke, or as soon as something else resumed
//! it, so an idle open shell lets its sandbox stay paused. Without a
//! terminal on stdin it still works: no raw mode, and the end of stdin is
//! sent as Ctrl-D.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::Args;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use stasis_core::{Error, PtySize, Result, SandboxState};
use stasis_server::http::sandboxes::Sandbox;

use crate::client::Client;

#[derive(Args)]
pub struct ShellArgs {
    id: String,
    /// Working directory of the shell (default: the sandbox's workdir).
    #[arg(long)]
    cwd: Option<String>,
    /// The command to run on the terminal (default: /bin/bash, else /bin/sh).
    #[arg(last = true)]
    cmd: Vec<String>,
}

/// How long reattaching is retried after the connection dropped.
const RECONNECT_FOR: Duration = Duration::from_secs(60);

/// How often a paused sandbox's state is looked at (a read never resumes).
const PAUSED_POLL: Duration = Duration::from_secs(1);

/// Size used when stdout is not a terminal.
const DEFAULT_SIZE: PtySize = PtySize { cols: 80, rows: 24 };

/// `stasis shell`.
pub async fn shell(c: &Client, a: ShellArgs) -> Result<()> {
    let argv = match a.cmd.is_empty() {
        false => a.cmd.clone(),
        true => vec![default_shell(c, &a.id).await?],
    };
    let interactive = std::io::stdin().is_terminal();
    let size = terminal_size();
    let body = json!({
        "argv": argv,
        "cwd": a.cwd,
        "pty": {"cols": size.cols, "rows": size.rows},
    });
    let info = c
        .post(&format!("/v1/sandboxes/{}/sessions", a.id), body)
        .await?;
    let session = info["id"]
        .as_str()
        .ok_or_else(|| Error::backend("session start: no id in the answer"))?
        .to_string();
    let raw = RawMode::enter(interactive)?;
    let code = attach_loop(c, &a.id, &session, interactive).await;
    drop(raw);
    let code = code?;
    std::process::exit(code);
}

/// `/bin/bash` when the sandbox has it, else `/bin/sh` (one exec, which
/// also resumes a paused sandbox).
async fn default_shell(c: &Client, id: &str) -> Result<String> {
    let r = c
        .exec(id, &["/bin/sh", "-c", "test -x /bin/bash"], 30_000)
        .await?;
    Ok(if r.exit_code == Some(0) {
        "/bin/bash".into()
    } else {
        "/bin/sh".into()
    })
}

fn terminal_size() -> PtySize {
    match crossterm::terminal::size() {
        Ok((cols, rows)) if cols > 0 && rows > 0 => PtySize { cols, rows },
        _ => DEFAULT_SIZE,
    }
}

/// The local terminal in raw mode while alive (interactive use only).
struct RawMode(bool);

impl RawMode {
    fn enter(on: bool) -> Result<Self> {
        if on {
            crossterm::terminal::enable_raw_mode()
                .map_err(|e| Error::internal(format!("raw mode: {e}")))?;
        }
        Ok(RawMode(on))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if self.0 {
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }
}

/// What the local side produces: keystrokes, end of stdin, a new size.
enum Local {
    Input(Vec<u8>),
    Eof,
    Resize(PtySize),
}

fn spawn_local(interactive: bool) -> mpsc::Receiver<Local> {
    let (tx, rx) = mpsc::channel(64);
    let t = tx.clone();
    tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 4096];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = t.send(Local::Eof).await;
                    return;
                }
                Ok(n) => {
                    if t.send(Local::Input(buf[..n].to_vec())).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    if interactive {
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut winch) = signal(SignalKind::window_change()) else {
                return;
            };
            while winch.recv().await.is_some() {
                if tx.send(Local::Resize(terminal_size())).await.is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// How one attachment ended.
enum End {
    Exit(i32),
    /// Dropped or detached: reattach from the offset reached.
    Dropped(String),
}

async fn attach_loop(c: &Client, id: &str, session: &str, interactive: bool) -> Result<i32> {
    let mut local = spawn_local(interactive);
    let mut offset = 0u64;
    // Input typed while reconnecting is sent once attached again.
    let mut pending: Vec<Local> = Vec::new();
    let mut dropped_at: Option<Instant> = None;
    loop {
        let mut attached = false;
        let end = attach_once(
            c,
            id,
            session,
            &mut offset,
            &mut local,
            &mut pending,
            &mut attached,
        )
        .await?;
        match end {
            End::Exit(code) => return Ok(code),
            End::Dropped(why) => {
                if attached {
                    dropped_at = None;
                }
                if wait_while_paused(c, id, &mut local, &mut pending, interactive).await {
                    dropped_at = None;
                    continue;
                }
                let since = *dropped_at.get_or_insert_with(Instant::now);
                if since.elapsed() > RECONNECT_FOR {
                    return Err(Error::backend(format!(
                        "terminal connection lost ({why}); gave up reattaching after {} s",
                        RECONNECT_FOR.as_secs()
                    )));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// After a drop: if the sandbox is paused, do not reattach at once (that
/// would resume it, and an idle open shell would pause and resume every idle
/// window); wait until the user types (the keys are sent once attached) or
/// the sandbox runs again (resumed by another request). `false`: it is not
/// paused, reattach as usual.
async fn wait_while_paused(
    c: &Client,
    id: &str,
    local: &mut mpsc::Receiver<Local>,
    pending: &mut Vec<Local>,
    interactive: bool,
) -> bool {
    let paused = |s: &Result<Sandbox>| {
        let paused = [SandboxState::Pausing, SandboxState::Paused].map(|s| s.as_str());
        matches!(s, Ok(s) if paused.contains(&s.state.as_str()))
    };
    if !paused(&c.sandbox(id).await) {
        return false;
    }
    if interactive {
        eprint!("\r\n[stasis: the sandbox paused; type to resume it]\r\n");
    }
    let mut poll = tokio::time::interval(PAUSED_POLL);
    poll.tick().await;
    loop {
        tokio::select! {
            l = local.recv() => {
                match l.unwrap_or(Local::Eof) {
                    // A window change alone does not resume; the last size
                    // is sent on reattach anyway.
                    Local::Resize(_) => continue,
                    l => {
                        pending.push(l);
                        return true;
                    }
                }
            }
            _ = poll.tick() => {
                if !paused(&c.sandbox(id).await) {
                    return true;
                }
            }
        }
    }
}

async fn attach_once(
    c: &Client,
    id: &str,
    session: &str,
    offset: &mut u64,
    local: &mut mpsc::Receiver<Local>,
    pending: &mut Vec<Local>,
    attached: &mut bool,
) -> Result<End> {
    let ws_base = c
        .base()
        .replacen("http://", "ws://", 1)
        .replacen("https://", "wss://", 1);
    let url = format!("{ws_base}/v1/sandboxes/{id}/sessions/{session}/attach?offset={offset}");
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| Error::invalid(format!("attach url {url}: {e}")))?;
    if let Some(t) = c.token() {
        let v = format!("Bearer {t}")
            .parse()
            .map_err(|_| Error::invalid("token is not a valid header value"))?;
        req.headers_mut().insert("authorization", v);
    }
    let (ws, _) = match tokio_tungstenite::connect_async(req).await {
        Ok(x) => x,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let msg = v["error"]["message"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| format!("attach refused: HTTP {}", resp.status()));
            return Err(match resp.status().as_u16() {
                404 => Error::not_found(msg),
                400 => Error::invalid(msg),
                401 | 403 => Error::new(stasis_core::ErrorCode::Unauthorized, msg),
                409 => Error::state(msg),
                // The daemon or the sandbox is busy or restarting: retry.
                _ => return Ok(End::Dropped(msg)),
            });
        }
        Err(e) => return Ok(End::Dropped(format!("connection to {ws_base} failed: {e}"))),
    };
    *attached = true;
    let (mut tx, mut rx) = ws.split();
    let mut out = std::io::stdout();
    // The size may have changed while away; and send what was typed.
    pending.push(Local::Resize(terminal_size()));
    for m in pending.drain(..) {
        if let Some(msg) = to_message(m) {
            if tx.send(msg).await.is_err() {
                return Ok(End::Dropped("send failed".into()));
            }
        }
    }
    let mut stdin_open = true;
    loop {
        tokio::select! {
            m = rx.next() => {
                let m = match m {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => return Ok(End::Dropped(e.to_string())),
                    None => return Ok(End::Dropped("connection closed".into())),
                };
                match m {
                    Message::Binary(b) => {
                        *offset += b.len() as u64;
                        let _ = out.write_all(&b);
                        let _ = out.flush();
                    }
                    Message::Text(t) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                        match v["type"].as_str() {
                            Some("attached") => {
                                *offset = v["offset"].as_u64().unwrap_or(*offset);
                            }
                            Some("exit") => {
                                let code = v["code"].as_i64().unwrap_or(1);
                                return Ok(End::Exit(code.clamp(0, 255) as i32));
                            }
                            Some("detached") => {
                                let reason = v["reason"].as_str().unwrap_or("detached");
                                return Ok(End::Dropped(reason.to_string()));
                            }
                            Some("error") => {
                                let code = v["code"].as_str().unwrap_or("error");
                                let msg = v["message"].as_str().unwrap_or("");
                                // Input to an ended session: the exit follows.
                                if code != "invalid_state" {
                                    eprint!("\r\nstasis: {code}: {msg}\r\n");
                                }
                            }
                            _ => {}
                        }
                    }
                    Message::Close(f) => {
                        let why = f.map(|f| f.reason.to_string()).unwrap_or_default();
                        return Ok(End::Dropped(why));
                    }
                    _ => {}
                }
            }
            l = local.recv(), if stdin_open => {
                let l = l.unwrap_or(Local::Eof);
                if matches!(l, Local::Eof) {
                    stdin_open = false;
                }
                if let Some(msg) = to_message(l) {
                    if tx.send(msg).await.is_err() {
                        return Ok(End::Dropped("send failed".into()));
                    }
                }
            }
        }
    }
}

fn to_message(l: Local) -> Option<Message> {
    Some(match l {
        Local::Input(b) => Message::Binary(b.into()),
        // End of a non-terminal stdin: Ctrl-D, the terminal's end of input.
        Local::Eof => Message::Binary(vec![0x04].into()),
        Local::Resize(s) => Message::Text(
            json!({"type": "resize", "cols": s.cols, "rows": s.rows})
                .to_string()
                .into(),
        ),
    })
}
