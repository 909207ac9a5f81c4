//! The E2B edge: a second HTTP edge over stasis's control plane, speaking
//! what the E2B SDKs speak, so code written for E2B runs on stasis by
//! pointing `E2B_API_URL` and `E2B_SANDBOX_URL` at the daemon.
//!
//! - [`api`]: the control plane (`E2B_API_URL=$STASIS_URL/e2b`): create,
//!   connect, list, kill, pause, timeouts, info, metrics, snapshots.
//! - [`envd`]: the data plane, what runs inside an E2B sandbox as `envd`
//!   (`E2B_SANDBOX_URL=$STASIS_URL/e2b`, the sandbox named by the
//!   `E2b-Sandbox-Id` header; or the host `49983-<sandbox>.<ports domain>`):
//!   processes, the filesystem, file upload and download.
//! - [`auth`]: E2B API keys and envd access tokens onto stasis tokens.
//!
//! Like the `/v1` edge, handlers only translate: every decision (tenancy,
//! scopes, lifecycle, files) is the control plane's.

pub mod api;
pub mod auth;
pub mod envd;
pub mod state;

pub use state::E2b;

/// Where the edge is mounted in the daemon's router.
pub const PREFIX: &str = "/e2b";

/// The edge's routes, to be nested at [`PREFIX`]: the control plane's and
/// envd's paths never overlap (envd's are `/process.Process/...`,
/// `/filesystem.Filesystem/...`, `/files`, `/health`, ...).
/// Paths neither serves get E2B's error shape ([`api::error::fallback`]):
/// neither router sets a fallback of its own (a merge refuses two).
pub fn router(state: E2b) -> axum::Router {
    api::router(state.clone())
        .merge(envd::router(state))
        .fallback(api::error::fallback)
}
