//! Errors with stable, machine-readable codes. The HTTP layer maps a code to a
//! status; the CLI prints `code: message`. Codes never change meaning.

use serde::{Deserialize, Serialize};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed request or value (400).
    InvalidArgument,
    /// Manifest field invalid (400); `field` names it.
    InvalidManifest,
    /// Missing or bad credentials (401).
    Unauthorized,
    /// Valid credentials that may not use this route, e.g. a tenant token on an admin route (403).
    Forbidden,
    /// Unknown object, or one that belongs to another tenant (404).
    NotFound,
    /// Operation illegal in the object's current state (409).
    InvalidState,
    /// Concurrent operation in progress (409).
    Busy,
    /// The object exists and the request asked to create it only if it did
    /// not (a create-exclusive file write) (409).
    AlreadyExists,
    /// Payload larger than the configured limit (413).
    PayloadTooLarge,
    /// Too many requests (429).
    RateLimited,
    /// The sandbox already has its limit of requests in flight and its wait
    /// queue is full (429, with `Retry-After`). Nothing was done; retry later.
    Overloaded,
    /// Command or guest did not answer in time (504 when it is the request's own timeout).
    Timeout,
    /// Snapshot data failed verification (422).
    IntegrityError,
    /// A snapshot this node cannot load, e.g. a memory image taken under
    /// another QEMU version (422). Nothing was changed; another node may load it.
    IncompatibleSnapshot,
    /// This machine or backend cannot do it (501).
    Unsupported,
    /// Nothing answers on the sandbox port a proxied request was for (502).
    /// The sandbox itself is fine.
    PortUnreachable,
    /// Backend failed (500); the sandbox may have gone to Failed.
    BackendError,
    /// The tenant is pinned to regions this node (or its store) is not in (409).
    /// Nothing was done and no data crossed regions; use a node of the tenant's regions.
    RegionMismatch,
    /// A file operation would remove, replace or move a mount point of the
    /// sandbox (its root, /proc, /dev, an input mount, ...) or move an entry
    /// from one mount to another (409). Nothing was changed.
    MountPoint,
    /// An image build's RUN step exited non-zero (422); the message holds
    /// the step's output tail as it was, line breaks kept.
    BuildFailed,
    /// This node is draining (leaving the cluster, stopping, upgrading):
    /// it starts no sandbox (503, with `Retry-After`). Nothing was done;
    /// retry, where another node serves it.
    Unavailable,
    /// Anything else (500).
    Internal,
}

impl ErrorCode {
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument | ErrorCode::InvalidManifest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::InvalidState
            | ErrorCode::Busy
            | ErrorCode::AlreadyExists
            | ErrorCode::RegionMismatch
            | ErrorCode::MountPoint => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::IntegrityError
            | ErrorCode::IncompatibleSnapshot
            | ErrorCode::BuildFailed => 422,
            ErrorCode::RateLimited | ErrorCode::Overloaded => 429,
            ErrorCode::Unsupported => 501,
            ErrorCode::Unavailable => 503,
            ErrorCode::PortUnreachable => 502,
            ErrorCode::Timeout => 504,
            ErrorCode::BackendError | ErrorCode::Internal => 500,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::InvalidManifest => "invalid_manifest",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::InvalidState => "invalid_state",
            ErrorCode::Busy => "busy",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Timeout => "timeout",
            ErrorCode::IntegrityError => "integrity_error",
            ErrorCode::IncompatibleSnapshot => "incompatible_snapshot",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::PortUnreachable => "port_unreachable",
            ErrorCode::BackendError => "backend_error",
            ErrorCode::RegionMismatch => "region_mismatch",
            ErrorCode::MountPoint => "mount_point",
            ErrorCode::BuildFailed => "build_failed",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    /// For `invalid_manifest` / `invalid_argument`: the offending field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            field: None,
        }
    }
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, format!("{} not found", what.into()))
    }
    pub fn state(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidState, message)
    }
    pub fn backend(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BackendError, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unsupported, message)
    }
    pub fn integrity(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::IntegrityError, message)
    }
    pub fn incompatible_snapshot(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::IncompatibleSnapshot, message)
    }
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Timeout, message)
    }
    /// Prefix context onto the message, keeping the code.
    pub fn context(mut self, ctx: impl std::fmt::Display) -> Self {
        self.message = format!("{ctx}: {}", self.message);
        self
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::NotFound => Error::new(ErrorCode::NotFound, e.to_string()),
            std::io::ErrorKind::TimedOut => Error::timeout(e.to_string()),
            _ => Error::internal(e.to_string()),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::invalid(e.to_string())
    }
}
