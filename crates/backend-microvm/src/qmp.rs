//! A minimal QMP client: one command in flight at a time, asynchronous events
//! skipped (but remembered for diagnostics).

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use stasis_core::{Error, Result};

/// What one line from QEMU's QMP socket is.
#[derive(Debug, Clone, PartialEq)]
pub enum QmpMessage {
    Greeting(Value),
    Return(Value),
    Error { class: String, desc: String },
    Event { name: String, data: Value },
}

/// Parse one QMP line.
pub fn parse_line(line: &str) -> Result<QmpMessage> {
    let v: Value = serde_json::from_str(line.trim())
        .map_err(|e| Error::backend(format!("QMP: undecodable line {line:?}: {e}")))?;
    if let Some(g) = v.get("QMP") {
        return Ok(QmpMessage::Greeting(g.clone()));
    }
    if let Some(r) = v.get("return") {
        return Ok(QmpMessage::Return(r.clone()));
    }
    if let Some(e) = v.get("error") {
        return Ok(QmpMessage::Error {
            class: e
                .get("class")
                .and_then(Value::as_str)
                .unwrap_or("GenericError")
                .to_string(),
            desc: e
                .get("desc")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        });
    }
    if let Some(name) = v.get("event").and_then(Value::as_str) {
        return Ok(QmpMessage::Event {
            name: name.to_string(),
            data: v.get("data").cloned().unwrap_or(Value::Null),
        });
    }
    Err(Error::backend(format!("QMP: unexpected message {line:?}")))
}

/// Status of an outgoing or incoming migration, from `query-migrate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrationStatus {
    /// No migration has run (`{}` reply).
    None,
    /// setup / active / device / pre-switchover / ...: still running.
    Active(String),
    Completed,
    Failed(String),
    Cancelled,
}

pub fn parse_migration_status(v: &Value) -> MigrationStatus {
    match v.get("status").and_then(Value::as_str) {
        None => MigrationStatus::None,
        Some("completed") => MigrationStatus::Completed,
        Some("failed") => MigrationStatus::Failed(
            v.get("error-desc")
                .and_then(Value::as_str)
                .unwrap_or("migration failed")
                .to_string(),
        ),
        Some("cancelled") | Some("cancelling") => MigrationStatus::Cancelled,
        Some(other) => MigrationStatus::Active(other.to_string()),
    }
}

/// One `sendmsg` of `data` with `fd` attached (SCM_RIGHTS).
fn send_with_fd(
    sock: &tokio::net::UnixStream,
    data: &[u8],
    fd: std::os::fd::RawFd,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), fd);
        let n = libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

pub struct Qmp {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Events seen while waiting for replies (newest last, bounded).
    pub events: Vec<(String, Value)>,
    timeout: Duration,
}

impl Qmp {
    /// Connect to a QMP socket (retrying until `connect_timeout` while QEMU
    /// creates it), read the greeting and negotiate capabilities.
    pub async fn connect(path: &Path, connect_timeout: Duration, timeout: Duration) -> Result<Qmp> {
        let stream = crate::util::connect_unix_retry(path, connect_timeout)
            .await
            .map_err(|e| e.context("QMP connect"))?;
        let (r, w) = stream.into_split();
        let mut q = Qmp {
            reader: BufReader::new(r),
            writer: w,
            events: Vec::new(),
            timeout,
        };
        match q.read_message().await? {
            QmpMessage::Greeting(_) => {}
            other => {
                return Err(Error::backend(format!(
                    "QMP: expected greeting, got {other:?}"
                )))
            }
        }
        q.execute("qmp_capabilities", None).await?;
        Ok(q)
    }

    async fn read_message(&mut self) -> Result<QmpMessage> {
        let mut line = String::new();
        let n = tokio::time::timeout(self.timeout, self.reader.read_line(&mut line))
            .await
            .map_err(|_| Error::timeout("QMP: QEMU did not answer in time"))?
            .map_err(|e| Error::backend(format!("QMP read: {e}")))?;
        if n == 0 {
            return Err(Error::backend("QMP: QEMU closed the monitor socket"));
        }
        parse_line(&line)
    }

    /// Run one command; `Err` carries QEMU's error class and description.
    pub async fn execute(&mut self, cmd: &str, args: Option<Value>) -> Result<Value> {
        let mut msg = json!({ "execute": cmd });
        if let Some(a) = args {
            msg["arguments"] = a;
        }
        let mut line = serde_json::to_vec(&msg)?;
        line.push(b'\n');
        tokio::time::timeout(self.timeout, self.writer.write_all(&line))
            .await
            .map_err(|_| Error::timeout(format!("QMP write ({cmd}): QEMU did not read in time")))?
            .map_err(|e| Error::backend(format!("QMP write ({cmd}): {e}")))?;
        self.reply(cmd).await
    }

    /// Run `cmd` with an open descriptor attached (SCM_RIGHTS), as
    /// `add-fd` and `getfd` take them.
    pub async fn execute_with_fd(
        &mut self,
        cmd: &str,
        args: Value,
        fd: std::os::fd::RawFd,
    ) -> Result<Value> {
        let msg = json!({ "execute": cmd, "arguments": args });
        let mut line = serde_json::to_vec(&msg)?;
        line.push(b'\n');
        let werr = |e: std::io::Error| Error::backend(format!("QMP write ({cmd}): {e}"));
        let sock: &tokio::net::UnixStream = self.writer.as_ref();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let sent = loop {
            tokio::time::timeout_at(deadline, sock.writable())
                .await
                .map_err(|_| {
                    Error::timeout(format!("QMP write ({cmd}): QEMU did not read in time"))
                })?
                .map_err(werr)?;
            match sock.try_io(tokio::io::Interest::WRITABLE, || {
                send_with_fd(sock, &line, fd)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(werr(e)),
            }
        };
        if sent < line.len() {
            tokio::time::timeout_at(deadline, self.writer.write_all(&line[sent..]))
                .await
                .map_err(|_| {
                    Error::timeout(format!("QMP write ({cmd}): QEMU did not read in time"))
                })?
                .map_err(werr)?;
        }
        self.reply(cmd).await
    }

    /// The reply to `cmd`, events before it kept. Bounded as a whole (not
    /// only per line): a monitor that keeps sending events but never the
    /// reply fails after the timeout too.
    async fn reply(&mut self, cmd: &str) -> Result<Value> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.reply_unbounded(cmd))
            .await
            .map_err(|_| Error::timeout(format!("QMP {cmd}: QEMU did not answer in time")))?
    }

    async fn reply_unbounded(&mut self, cmd: &str) -> Result<Value> {
        loop {
            match self.read_message().await.map_err(|e| e.context(cmd))? {
                QmpMessage::Return(v) => return Ok(v),
                QmpMessage::Error { class, desc } => {
                    return Err(Error::backend(format!("QMP {cmd}: {class}: {desc}")))
                }
                QmpMessage::Event { name, data } => {
                    if self.events.len() >= 64 {
                        self.events.remove(0);
                    }
                    self.events.push((name, data));
                }
                QmpMessage::Greeting(_) => {}
            }
        }
    }

    /// Run a migration command on an open file: `migrate` (out, the file
    /// open for writing) or `migrate-incoming` (in, open for reading). The
    /// descriptor goes into an fd set (`add-fd`) and the URI names it
    /// (`file:/dev/fdset/<id>`): QEMU needs no access to the file's path.
    pub async fn migrate_fd(&mut self, cmd: &str, file: &std::fs::File) -> Result<()> {
        use std::os::fd::AsRawFd;
        let v = self
            .execute_with_fd("add-fd", json!({}), file.as_raw_fd())
            .await?;
        let set = v
            .get("fdset-id")
            .and_then(Value::as_u64)
            .ok_or_else(|| Error::backend(format!("QMP add-fd: unexpected reply {v}")))?;
        let r = self
            .execute(
                cmd,
                Some(json!({ "uri": format!("file:/dev/fdset/{set}") })),
            )
            .await;
        // The migration has opened its own duplicate by now (or failed).
        let _ = self
            .execute("remove-fd", Some(json!({ "fdset-id": set })))
            .await;
        r.map(|_| ())
    }

    pub async fn query_migrate(&mut self) -> Result<MigrationStatus> {
        let v = self.execute("query-migrate", None).await?;
        Ok(parse_migration_status(&v))
    }

    /// `query-status`'s `status` field ("running", "paused", "inmigrate", "postmigrate", ...).
    pub async fn run_state(&mut self) -> Result<String> {
        let v = self.execute("query-status", None).await?;
        Ok(v.get("status")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_qmp_messages() {
        let g = r#"{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian"}, "capabilities": ["oob"]}}"#;
        assert!(matches!(parse_line(g).unwrap(), QmpMessage::Greeting(_)));
        assert_eq!(
            parse_line(r#"{"return": {}}"#).unwrap(),
            QmpMessage::Return(json!({}))
        );
        assert_eq!(
            parse_line(r#"{"error": {"class": "GenericError", "desc": "no"}}"#).unwrap(),
            QmpMessage::Error {
                class: "GenericError".into(),
                desc: "no".into()
            }
        );
        let ev = r#"{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "STOP"}"#;
        assert_eq!(
            parse_line(ev).unwrap(),
            QmpMessage::Event {
                name: "STOP".into(),
                data: Value::Null
            }
        );
        assert!(parse_line("not json").is_err());
        assert!(parse_line(r#"{"what": 1}"#).is_err());
    }

    #[test]
    fn parses_migration_status() {
        assert_eq!(parse_migration_status(&json!({})), MigrationStatus::None);
        assert_eq!(
            parse_migration_status(&json!({"status": "active", "ram": {}})),
            MigrationStatus::Active("active".into())
        );
        assert_eq!(
            parse_migration_status(&json!({"status": "completed"})),
            MigrationStatus::Completed
        );
        assert_eq!(
            parse_migration_status(&json!({"status": "failed", "error-desc": "boom"})),
            MigrationStatus::Failed("boom".into())
        );
        assert_eq!(
            parse_migration_status(&json!({"status": "cancelled"})),
            MigrationStatus::Cancelled
        );
    }

    #[tokio::test]
    async fn talks_to_a_fake_qmp_server() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            s.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n")
                .await
                .unwrap();
            let mut buf = vec![0u8; 4096];
            let mut seen = String::new();
            // qmp_capabilities
            let n = s.read(&mut buf).await.unwrap();
            seen.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            s.write_all(b"{\"return\": {}}\r\n").await.unwrap();
            // query-migrate: an event first, then the reply
            let n = s.read(&mut buf).await.unwrap();
            seen.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            s.write_all(b"{\"event\": \"STOP\", \"timestamp\": {}}\r\n{\"return\": {\"status\": \"completed\"}}\r\n")
                .await
                .unwrap();
            // bad command
            let n = s.read(&mut buf).await.unwrap();
            seen.push_str(std::str::from_utf8(&buf[..n]).unwrap());
            s.write_all(b"{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command nope has not been found\"}}\r\n")
                .await
                .unwrap();
            seen
        });
        let mut q = Qmp::connect(&path, Duration::from_secs(2), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(q.query_migrate().await.unwrap(), MigrationStatus::Completed);
        assert_eq!(q.events.len(), 1);
        let e = q.execute("nope", None).await.unwrap_err();
        assert!(e.message.contains("CommandNotFound"), "{e}");
        let seen = server.await.unwrap();
        assert!(seen.contains("\"execute\":\"qmp_capabilities\""), "{seen}");
        assert!(seen.contains("\"execute\":\"query-migrate\""), "{seen}");
    }

    /// Receive one message with a descriptor (SCM_RIGHTS) on a std socket.
    fn recv_with_fd(s: &std::os::unix::net::UnixStream) -> (String, Option<std::fs::File>) {
        use std::os::fd::{AsRawFd, FromRawFd};
        let mut buf = vec![0u8; 4096];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut cbuf = [0u64; 8];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, 0) };
        assert!(n > 0);
        let mut file = None;
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            if !c.is_null() && (*c).cmsg_type == libc::SCM_RIGHTS {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                file = Some(std::fs::File::from_raw_fd(fd));
            }
        }
        (
            String::from_utf8_lossy(&buf[..n as usize]).into_owned(),
            file,
        )
    }

    /// A migration on a file passes the open descriptor itself (QEMU never
    /// opens the path): add-fd carries it, the URI names its fd set, and the
    /// set is removed afterwards, also when the migration command fails.
    #[tokio::test]
    async fn migrations_pass_the_file_descriptor() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n")
                .unwrap();
            let mut log = Vec::new();
            let mut contents = Vec::new();
            let (l, _) = recv_with_fd(&s); // qmp_capabilities
            log.push(l);
            s.write_all(b"{\"return\": {}}\r\n").unwrap();
            for fail in [false, true] {
                let (l, f) = recv_with_fd(&s); // add-fd
                log.push(l);
                let mut f = f.expect("add-fd came without a descriptor");
                let mut got = String::new();
                f.read_to_string(&mut got).unwrap();
                contents.push(got);
                s.write_all(b"{\"return\": {\"fdset-id\": 7, \"fd\": 33}}\r\n")
                    .unwrap();
                let (l, _) = recv_with_fd(&s); // migrate-incoming
                log.push(l);
                if fail {
                    s.write_all(
                        b"{\"error\": {\"class\": \"GenericError\", \"desc\": \"bad state\"}}\r\n",
                    )
                    .unwrap();
                } else {
                    s.write_all(b"{\"return\": {}}\r\n").unwrap();
                }
                let (l, _) = recv_with_fd(&s); // remove-fd
                log.push(l);
                s.write_all(b"{\"return\": {}}\r\n").unwrap();
            }
            (log, contents)
        });
        let mut q = Qmp::connect(&path, Duration::from_secs(2), Duration::from_secs(2))
            .await
            .unwrap();
        let state = dir.path().join("memory.state");
        std::fs::write(&state, "saved state").unwrap();
        let f = std::fs::File::open(&state).unwrap();
        // The path is unreachable for the peer: only the descriptor counts.
        std::fs::remove_file(&state).unwrap();
        q.migrate_fd("migrate-incoming", &f).await.unwrap();
        let e = q.migrate_fd("migrate-incoming", &f).await.unwrap_err();
        assert!(e.message.contains("bad state"), "{e}");
        let (log, contents) = server.join().unwrap();
        assert_eq!(contents, vec!["saved state".to_string(), String::new()]);
        let log = log.join("");
        assert_eq!(log.matches("\"execute\":\"add-fd\"").count(), 2, "{log}");
        assert!(log.contains("\"uri\":\"file:/dev/fdset/7\""), "{log}");
        assert_eq!(log.matches("\"execute\":\"remove-fd\"").count(), 2, "{log}");
    }
}
