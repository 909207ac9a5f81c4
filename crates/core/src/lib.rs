//! Domain types shared by every stasis crate (and by the guest agent, so keep
//! this crate free of heavy or platform-specific dependencies).

pub mod b64;
pub mod error;
pub mod exec;
pub mod id;
pub mod lifecycle;
pub mod manifest;
pub mod mounts;
pub mod strict;
pub mod user;

pub use error::{Error, ErrorCode, Result};
pub use exec::{
    ExecRequest, ExecResult, FileEntry, FileEvent, FileEventKind, FileKind, FileOp, FileStat,
    PtySize, SessionInfo, SessionOutput, SessionSpec, Stream, WriteMode,
};
pub use id::{SandboxId, SnapshotId, TenantId};
pub use lifecycle::SandboxState;
pub use manifest::{BackendKind, LifecyclePolicy, Manifest, OnIdle, OnLifetime, Resources};

/// Milliseconds since the Unix epoch, the one timestamp unit used in stored records.
pub fn now_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `secs` in milliseconds for deadline arithmetic on `now_ms()` values,
/// saturating at `i64::MAX` (a deadline that far is never reached) instead
/// of wrapping into the past.
pub fn secs_to_ms(secs: u64) -> i64 {
    i64::try_from(secs)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .unwrap_or(i64::MAX)
}
