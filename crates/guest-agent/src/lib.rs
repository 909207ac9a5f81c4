//! The stasis guest agent: serves the host over the virtio-serial port
//! `org.stasis.agent.0` with the framed protocol of `stasis-agent-proto`.
//!
//! Every request runs on its own thread; replies and events are tagged with
//! the request id and written under one writer lock. The host goes away at
//! every pause (and a new QEMU, restored from the memory snapshot, connects on
//! resume): the agent keeps all of its state — sessions keep running and
//! buffering output — and simply serves the next connection.

pub mod boundary;
pub mod exec;
pub mod files;
pub mod port;
pub mod pty;
pub mod reaper;
pub mod session;
pub mod system;
pub mod watch;

use stasis_agent_proto::{
    Event, Reply, Request, FEATURE_BINARY, FEATURE_SESSION_SIGNAL, PROTOCOL_VERSION,
};
use std::path::Path;

pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// An error reply: `code` is a stasis_core::ErrorCode name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentError {
    pub code: &'static str,
    pub message: String,
}

impl AgentError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        AgentError {
            code,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new("not_found", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new("internal", message)
    }
    pub fn io(path: &Path, e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let code = match e.kind() {
            K::NotFound => "not_found",
            K::PermissionDenied
            | K::AlreadyExists
            | K::InvalidInput
            | K::NotADirectory
            | K::IsADirectory
            | K::DirectoryNotEmpty
            | K::ReadOnlyFilesystem
            | K::InvalidFilename => "invalid_argument",
            K::StorageFull | K::QuotaExceeded | K::FileTooLarge => "payload_too_large",
            _ => "internal",
        };
        Self::new(code, format!("{}: {e}", path.display()))
    }
    pub fn reply(self) -> Reply {
        Reply::Error {
            code: self.code.to_string(),
            message: self.message,
        }
    }
}

/// Hex of `n` random bytes from the kernel.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    // SAFETY: valid buffer of n bytes.
    let got = unsafe { libc::getrandom(b.as_mut_ptr() as *mut _, n, 0) };
    if got != n as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (t >> ((i % 16) * 8)) as u8 ^ (std::process::id() as u8);
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// All state the agent holds; lives for the agent's lifetime, independent of
/// any host connection.
#[derive(Default)]
pub struct Agent {
    pub sessions: session::Sessions,
    pub watches: watch::Watches,
    /// Behave as an agent from before binary frames (to test the host's
    /// fallback): advertise no features, skip binary frames as garbage.
    pub legacy: bool,
}

impl Agent {
    pub fn new() -> Self {
        reaper::init();
        Agent::default()
    }

    /// An agent as it was before binary frames (see `legacy`).
    pub fn legacy() -> Self {
        Agent {
            legacy: true,
            ..Agent::new()
        }
    }

    /// What this agent advertises in its `Hello`.
    pub fn features(&self) -> Vec<String> {
        match self.legacy {
            true => Vec::new(),
            false => vec![
                FEATURE_BINARY.to_string(),
                FEATURE_SESSION_SIGNAL.to_string(),
            ],
        }
    }

    /// Handle one request. `emit` sends an event for this request (streaming exec).
    pub fn handle(&self, req: Request, emit: &mut dyn FnMut(Event)) -> Reply {
        self.try_handle(req, emit).unwrap_or_else(AgentError::reply)
    }

    fn try_handle(&self, req: Request, emit: &mut dyn FnMut(Event)) -> Result<Reply, AgentError> {
        Ok(match req {
            Request::Hello => Reply::Hello {
                protocol: PROTOCOL_VERSION,
                agent_version: AGENT_VERSION.to_string(),
                boot_id: system::boot_id(),
                features: self.features(),
            },
            Request::SetTime { unix_nanos } => {
                system::set_time(unix_nanos)?;
                Reply::Ok
            }
            Request::SetIdentity {
                hostname,
                machine_id,
                mut entropy,
            } => {
                let r = system::set_identity(&hostname, &machine_id, &entropy);
                entropy.fill(0);
                std::hint::black_box(&entropy);
                r?;
                Reply::Ok
            }
            Request::Exec { req, stream } => {
                let result = if stream {
                    let mut f = |s, d: &[u8]| {
                        emit(Event::Output {
                            stream: s,
                            data: d.to_vec(),
                        })
                    };
                    exec::run(req, Some(&mut f))?
                } else {
                    exec::run(req, None)?
                };
                Reply::Exec { result }
            }
            Request::WriteFile {
                path,
                data,
                mode,
                offset: Some(offset),
                ..
            } if !self.legacy => {
                files::write_at(&path, &data, offset, mode)?;
                Reply::Ok
            }
            Request::WriteFile {
                path,
                data,
                append,
                mode,
                ..
            } => {
                files::write(&path, &data, append, mode)?;
                Reply::Ok
            }
            Request::ReadFile {
                path,
                offset,
                limit,
            } => {
                let (data, size) = files::read(&path, offset, limit)?;
                Reply::File { data, size }
            }
            Request::ListDir { path } => Reply::Dir {
                entries: files::list(&path)?,
            },
            Request::CreateFile { path, data, mode } => {
                files::create(&path, &data, mode)?;
                Reply::Ok
            }
            Request::WatchPoll {
                watch,
                path,
                wait_ms,
            } => {
                let (watch, events) = self.watches.poll(watch, &path, wait_ms)?;
                Reply::Watch { watch, events }
            }
            Request::WatchStop { watch } => {
                self.watches.stop(&watch);
                Reply::Ok
            }
            Request::FileOp { file_op } => match files::op(file_op)? {
                Some(stat) => Reply::Stat { stat },
                None => Reply::Ok,
            },
            Request::SessionStart { spec } => Reply::Session {
                info: self.sessions.start(spec)?,
            },
            Request::SessionWrite { session, data } => {
                self.sessions.write(&session, &data)?;
                Reply::Ok
            }
            Request::SessionRead {
                session,
                offset,
                wait_ms,
            } => Reply::SessionOutput {
                output: self.sessions.read(&session, offset, wait_ms)?,
            },
            Request::SessionList => Reply::Sessions {
                sessions: self.sessions.list(),
            },
            Request::SessionCloseInput { session } => {
                self.sessions.close_input(&session)?;
                Reply::Ok
            }
            Request::SessionResize { session, size } => {
                self.sessions.resize(&session, size)?;
                Reply::Ok
            }
            Request::SessionKill { session, signal } => Reply::Session {
                info: self.sessions.kill(&session, signal)?,
            },
            Request::Sync => {
                system::sync();
                Reply::Ok
            }
            Request::Configure { config } => {
                boundary::apply(&config)?;
                Reply::Ok
            }
        })
    }
}
