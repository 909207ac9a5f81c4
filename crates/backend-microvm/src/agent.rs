//! Host side of the guest agent channel: one connection to the chardev socket,
//! a reader task that routes frames by request id, many requests in flight.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};

use stasis_agent_proto::{
    asynch, encode_as, Body, Event, Frame, Reply, Request, FEATURE_BINARY, FEATURE_SESSION_SIGNAL,
    PROTOCOL_VERSION,
};
use stasis_backend::ExecChunk;
use stasis_core::{Error, ErrorCode, Result};

struct Pending {
    reply: oneshot::Sender<Result<Reply>>,
    /// Output events go into an unbounded queue drained by a forwarder task,
    /// so a slow consumer never stalls the reader (and with it every other
    /// request on this sandbox, including a pause's `sync`).
    events: Option<mpsc::UnboundedSender<ExecChunk>>,
}

type PendingMap = Arc<Mutex<HashMap<u64, Pending>>>;

pub struct AgentConn {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: PendingMap,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
    /// The agent's hello advertised binary frames: file data goes raw (an
    /// older agent, e.g. one resumed from an older snapshot, gets JSON).
    binary: AtomicBool,
    /// The agent's hello advertised `session_signal` (signals other than
    /// KILL, killed sessions kept readable).
    session_signal: AtomicBool,
}

/// Map an agent `Reply::Error` to a stasis error with the same code.
pub fn reply_error(code: &str, message: &str) -> Error {
    let code: ErrorCode = serde_json::from_value(serde_json::Value::String(code.to_string()))
        .unwrap_or(ErrorCode::BackendError);
    Error::new(code, message.to_string())
}

impl AgentConn {
    /// Connect to the agent socket (retrying until `connect_timeout`).
    pub async fn connect(path: &Path, connect_timeout: Duration) -> Result<Arc<AgentConn>> {
        let stream = crate::util::connect_unix_retry(path, connect_timeout)
            .await
            .map_err(|e| e.context("agent connect"))?;
        let (mut r, w) = stream.into_split();
        let pending: PendingMap = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let (p2, c2) = (pending.clone(), closed.clone());
        let reader = tokio::spawn(async move {
            let why = loop {
                let frame = match asynch::read_frame(&mut r).await {
                    Ok(f) => f,
                    Err(e) => break e.to_string(),
                };
                match frame.body {
                    Body::Event(Event::Output { stream, data }) => {
                        let tx = p2
                            .lock()
                            .unwrap()
                            .get(&frame.id)
                            .and_then(|p| p.events.clone());
                        if let Some(tx) = tx {
                            let _ = tx.send(ExecChunk { stream, data });
                        }
                    }
                    Body::Reply(reply) => {
                        if let Some(p) = p2.lock().unwrap().remove(&frame.id) {
                            let _ = p.reply.send(Ok(reply));
                        }
                    }
                    Body::Request(_) => {
                        tracing::warn!("agent sent a request frame; ignored");
                    }
                }
            };
            c2.store(true, Ordering::SeqCst);
            let drained: Vec<Pending> = p2.lock().unwrap().drain().map(|(_, p)| p).collect();
            for p in drained {
                let _ = p
                    .reply
                    .send(Err(Error::backend(format!("agent channel closed: {why}"))));
            }
        });
        Ok(Arc::new(AgentConn {
            writer: tokio::sync::Mutex::new(w),
            pending,
            // Random start per connection: a reply to a request cut off by a
            // pause can arrive on the next connection and must not match a
            // new request's id.
            next_id: AtomicU64::new((rand::random::<u64>() >> 16) | 1),
            closed,
            reader,
            binary: AtomicBool::new(false),
            session_signal: AtomicBool::new(false),
        }))
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether the agent delivers session signals (see `hello`).
    pub fn session_signal(&self) -> bool {
        self.session_signal.load(Ordering::SeqCst)
    }

    /// Whether file data travels in binary frames (see `hello`).
    pub fn binary(&self) -> bool {
        self.binary.load(Ordering::SeqCst)
    }

    /// Send a request and wait for its reply. `Reply::Error` becomes `Err`.
    /// A timeout is reported with code `timeout` and message starting
    /// "guest agent did not answer".
    pub async fn request(
        &self,
        req: Request,
        events: Option<mpsc::Sender<ExecChunk>>,
        timeout: Duration,
    ) -> Result<Reply> {
        if self.is_closed() {
            return Err(Error::backend("agent channel is closed"));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let op = request_name(&req);
        let (tx, rx) = oneshot::channel();
        let (events, forwarder) = match events {
            Some(out) => {
                let (utx, mut urx) = mpsc::unbounded_channel::<ExecChunk>();
                let h = tokio::spawn(async move {
                    while let Some(c) = urx.recv().await {
                        if out.send(c).await.is_err() {
                            break;
                        }
                    }
                });
                (Some(utx), Some(h))
            }
            None => (None, None),
        };
        self.pending
            .lock()
            .unwrap()
            .insert(id, Pending { reply: tx, events });
        // File data goes raw to an agent that reads binary frames (and
        // comes back raw: the agent answers in the frame kind it was asked in).
        let binary = self.binary() && is_bulk(&req);
        let frame = Frame {
            id,
            body: Body::Request(req),
        };
        let bytes = match encode_as(frame, binary) {
            Ok(b) => b,
            Err(e) => {
                self.pending.lock().unwrap().remove(&id);
                return Err(Error::backend(format!("agent write ({op}): {e}")));
            }
        };
        let sent = {
            let mut w = self.writer.lock().await;
            tokio::time::timeout(timeout, asynch::write_bytes(&mut *w, &bytes)).await
        };
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.pending.lock().unwrap().remove(&id);
                return Err(Error::backend(format!("agent write ({op}): {e}")));
            }
            Err(_) => {
                self.pending.lock().unwrap().remove(&id);
                return Err(Error::timeout(format!(
                    "guest agent did not answer {op} within {} ms (write blocked)",
                    timeout.as_millis()
                )));
            }
        }
        let reply = tokio::time::timeout(timeout, rx).await;
        // The reply removed the pending entry (dropping the queue's sender):
        // deliver every queued chunk before returning.
        if let Some(h) = forwarder {
            if reply.is_err() {
                self.pending.lock().unwrap().remove(&id);
            }
            // A consumer that never reads must not hang the request forever.
            let abort = h.abort_handle();
            if tokio::time::timeout(timeout, h).await.is_err() {
                abort.abort();
            }
        }
        let reply = match reply {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(Error::backend("agent channel closed")),
            Err(_) => {
                self.pending.lock().unwrap().remove(&id);
                return Err(Error::timeout(format!(
                    "guest agent did not answer {op} within {} ms",
                    timeout.as_millis()
                )));
            }
        };
        if let Reply::Error { code, message } = &reply {
            return Err(reply_error(code, message));
        }
        Ok(reply)
    }

    /// Hello: returns the guest's boot id, and learns what the agent can
    /// do (binary frames).
    pub async fn hello(&self, timeout: Duration) -> Result<String> {
        match self.request(Request::Hello, None, timeout).await? {
            Reply::Hello {
                protocol,
                boot_id,
                features,
                ..
            } => {
                if protocol != PROTOCOL_VERSION {
                    return Err(Error::backend(format!(
                        "guest agent speaks protocol {protocol}, host {PROTOCOL_VERSION}"
                    )));
                }
                let binary = features.iter().any(|f| f == FEATURE_BINARY);
                self.binary.store(binary, Ordering::SeqCst);
                let signal = features.iter().any(|f| f == FEATURE_SESSION_SIGNAL);
                self.session_signal.store(signal, Ordering::SeqCst);
                Ok(boot_id)
            }
            other => Err(Error::backend(format!(
                "unexpected reply to hello: {other:?}"
            ))),
        }
    }

    /// Liveness probe: the guest agent answers a `hello` within `timeout`
    /// with the boot id it had (`boot_id`). The channel multiplexes, so a
    /// probe never waits behind slow requests; it is what decides whether a
    /// guest is dead, never a slow request. `Err` says why it is not alive.
    pub async fn probe(&self, boot_id: &str, timeout: Duration) -> std::result::Result<(), String> {
        match self.hello(timeout).await {
            Ok(b) if b == boot_id => Ok(()),
            Ok(b) => Err(format!("guest rebooted (boot_id {b}, expected {boot_id})")),
            Err(e) => Err(format!("liveness probe failed: {}", e.message)),
        }
    }

    pub async fn expect_ok(&self, req: Request, timeout: Duration) -> Result<()> {
        match self.request(req, None, timeout).await? {
            Reply::Ok => Ok(()),
            other => Err(Error::backend(format!("unexpected agent reply: {other:?}"))),
        }
    }
}

impl Drop for AgentConn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Requests whose file data goes raw in a binary frame (and whose answer
/// comes back in one).
fn is_bulk(r: &Request) -> bool {
    matches!(
        r,
        Request::WriteFile { .. } | Request::CreateFile { .. } | Request::ReadFile { .. }
    )
}

fn request_name(r: &Request) -> &'static str {
    match r {
        Request::Hello => "hello",
        Request::SetTime { .. } => "set_time",
        Request::SetIdentity { .. } => "set_identity",
        Request::Exec { .. } => "exec",
        Request::WriteFile { .. } => "write_file",
        Request::ReadFile { .. } => "read_file",
        Request::ListDir { .. } => "list_dir",
        Request::CreateFile { .. } => "create_file",
        Request::FileOp { .. } => "file_op",
        Request::WatchPoll { .. } => "watch_poll",
        Request::WatchStop { .. } => "watch_stop",
        Request::SessionStart { .. } => "session_start",
        Request::SessionWrite { .. } => "session_write",
        Request::SessionRead { .. } => "session_read",
        Request::SessionList => "session_list",
        Request::SessionResize { .. } => "session_resize",
        Request::SessionCloseInput { .. } => "session_close_input",
        Request::SessionKill { .. } => "session_kill",
        Request::Sync => "sync",
        Request::Configure { .. } => "configure",
    }
}

/// Connect to the agent and wait for `hello`, failing early if QEMU exits.
pub(crate) async fn connect_agent(
    path: &Path,
    proc: &mut crate::qemu::QemuProc,
    timeout: Duration,
) -> Result<(Arc<AgentConn>, String)> {
    let agent = AgentConn::connect(path, Duration::from_secs(10)).await?;
    let a2 = agent.clone();
    let hello = a2.hello(timeout);
    tokio::pin!(hello);
    loop {
        tokio::select! {
            r = &mut hello => {
                let boot = r.map_err(|e| {
                    if e.code == ErrorCode::Timeout {
                        Error::timeout(format!("guest agent did not answer within {} s", timeout.as_secs()))
                    } else { e }
                })?;
                return Ok((agent, boot));
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                if !proc.alive() {
                    return Err(Error::backend("QEMU exited before the guest agent answered"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::{ExecRequest, ExecResult, Stream};

    /// A fake agent on a unix socket: answers hello, streams exec output,
    /// answers requests out of order, never answers `sync`.
    async fn fake_agent(listener: tokio::net::UnixListener) {
        let (s, _) = listener.accept().await.unwrap();
        let (mut r, w) = s.into_split();
        let w = Arc::new(tokio::sync::Mutex::new(w));
        loop {
            let Ok(f) = asynch::read_frame(&mut r).await else {
                return;
            };
            let w = w.clone();
            tokio::spawn(async move {
                let Body::Request(req) = f.body else { return };
                let send = |body| {
                    let w = w.clone();
                    async move {
                        asynch::write_frame(&mut *w.lock().await, &Frame { id: f.id, body })
                            .await
                            .unwrap()
                    }
                };
                match req {
                    Request::Hello => {
                        send(Body::Reply(Reply::Hello {
                            protocol: PROTOCOL_VERSION,
                            agent_version: "fake".into(),
                            boot_id: "b1".into(),
                            features: Vec::new(),
                        }))
                        .await
                    }
                    Request::Exec { req, .. } => {
                        let slow = req.argv[0] == "slow";
                        if slow {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        for part in ["a", "b"] {
                            send(Body::Event(Event::Output {
                                stream: Stream::Stdout,
                                data: format!("{}{part}", req.argv[0]).into_bytes(),
                            }))
                            .await;
                        }
                        send(Body::Reply(Reply::Exec {
                            result: ExecResult {
                                exit_code: Some(0),
                                signal: None,
                                stdout: vec![],
                                stderr: vec![],
                                timed_out: false,
                                truncated: false,
                                duration_ms: 1,
                            },
                        }))
                        .await
                    }
                    Request::ReadFile { .. } => {
                        send(Body::Reply(Reply::Error {
                            code: "not_found".into(),
                            message: "no such file".into(),
                        }))
                        .await
                    }
                    Request::Sync => {}
                    _ => send(Body::Reply(Reply::Ok)).await,
                }
            });
        }
    }

    fn exec(cmd: &str) -> Request {
        Request::Exec {
            req: ExecRequest {
                argv: vec![cmd.into()],
                env: Default::default(),
                cwd: None,
                timeout_ms: 1000,
                stdin: None,
                user: None,
            },
            stream: true,
        }
    }

    #[tokio::test]
    async fn demultiplexes_concurrent_requests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let l = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(fake_agent(l));
        let a = AgentConn::connect(&path, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(a.hello(Duration::from_secs(2)).await.unwrap(), "b1");
        let (tx1, mut rx1) = mpsc::channel(8);
        let (tx2, mut rx2) = mpsc::channel(8);
        let t = Duration::from_secs(2);
        let (r1, r2) = tokio::join!(
            a.request(exec("slow"), Some(tx1), t),
            a.request(exec("fast"), Some(tx2), t)
        );
        assert!(matches!(r1.unwrap(), Reply::Exec { .. }));
        assert!(matches!(r2.unwrap(), Reply::Exec { .. }));
        let mut got1 = Vec::new();
        while let Ok(c) = rx1.try_recv() {
            got1.extend(c.data);
        }
        let mut got2 = Vec::new();
        while let Ok(c) = rx2.try_recv() {
            got2.extend(c.data);
        }
        assert_eq!(got1, b"slowaslowb");
        assert_eq!(got2, b"fastafastb");
        // Error replies keep their code.
        let e = a
            .request(
                Request::ReadFile {
                    path: "/x".into(),
                    offset: 0,
                    limit: 1,
                },
                None,
                t,
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::NotFound);
        // A request the agent never answers times out with a clear message.
        let e = a
            .request(Request::Sync, None, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Timeout);
        assert!(e.message.contains("did not answer sync"), "{e}");
    }

    #[tokio::test]
    async fn slow_output_consumer_does_not_stall_other_requests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let l = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(fake_agent(l));
        let a = AgentConn::connect(&path, Duration::from_secs(2))
            .await
            .unwrap();
        let (tx, mut rx) = mpsc::channel(1);
        let a2 = a.clone();
        let exec = tokio::spawn(async move {
            a2.request(exec("fast"), Some(tx), Duration::from_secs(5))
                .await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Nobody reads `rx` yet: the other request still gets through.
        let t = std::time::Instant::now();
        assert_eq!(a.hello(Duration::from_secs(2)).await.unwrap(), "b1");
        assert!(t.elapsed() < Duration::from_secs(1));
        let mut got = Vec::new();
        while let Some(c) = rx.recv().await {
            got.extend(c.data);
        }
        assert_eq!(got, b"fastafastb");
        assert!(matches!(exec.await.unwrap().unwrap(), Reply::Exec { .. }));
    }

    /// Liveness is judged by a probe on the multiplexed channel, never by a
    /// request that is slow: requests that hang do not keep the probe from
    /// answering; an agent that answers nothing, or another boot, fails it.
    #[tokio::test]
    async fn liveness_probe_is_independent_of_hanging_requests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let l = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(fake_agent(l));
        let a = AgentConn::connect(&path, Duration::from_secs(2))
            .await
            .unwrap();
        // Many requests the agent never answers are in flight.
        let mut hanging = Vec::new();
        for _ in 0..64 {
            let a = a.clone();
            hanging.push(tokio::spawn(async move {
                a.request(Request::Sync, None, Duration::from_secs(120))
                    .await
            }));
        }
        let t = Duration::from_secs(10);
        assert_eq!(a.probe("b1", t).await, Ok(()));
        let e = a.probe("b2", t).await.unwrap_err();
        assert!(e.contains("rebooted"), "{e}");
        for h in &hanging {
            assert!(!h.is_finished());
        }
        for h in hanging {
            h.abort();
        }

        // An agent that reads but never answers fails the probe.
        let path = dir.path().join("silent.sock");
        let l = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut sink = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut s, &mut sink).await;
        });
        let a = AgentConn::connect(&path, Duration::from_secs(2))
            .await
            .unwrap();
        let e = a.probe("b1", Duration::from_millis(200)).await.unwrap_err();
        assert!(e.contains("liveness probe failed"), "{e}");
    }

    #[tokio::test]
    async fn closed_channel_fails_pending_requests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let l = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(s);
        });
        let a = AgentConn::connect(&path, Duration::from_secs(2))
            .await
            .unwrap();
        let e = a
            .request(Request::Sync, None, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.message.contains("closed"), "{e}");
        server.await.unwrap();
        assert!(a.is_closed());
    }
}
