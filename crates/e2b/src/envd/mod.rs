//! The E2B data plane (envd): what E2B runs inside each sandbox on port
//! 49983, served here by the daemon over stasis's control plane.
//!
//! - [`process`]: the `process.Process` Connect service onto stasis
//!   sessions (start, stream, connect, list, input, signals, terminals).
//! - [`filesystem`]: the `filesystem.Filesystem` Connect service onto the
//!   control plane's file API (stat, list, mkdir, move, remove, watches).
//! - [`files`]: envd's HTTP routes (`/files` up and down, `/health`, `/envs`).
//! - [`route`]: which sandbox and port a request is for (the
//!   `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers of the SDK's sandbox-URL
//!   mode), and the hand-over of other ports to the daemon's port proxy.
//!
//! Every call names its sandbox and carries the sandbox's envd access token
//! ([`crate::auth::envd_identity`]); the call then runs as the tenant of
//! the API token behind it, so a sandbox is used exactly as through `/v1`
//! (a paused one resumes, another tenant's is not found).

pub mod connect;
pub mod files;
pub mod filesystem;
mod fs_msg;
pub mod owners;
pub mod pbjson;
pub mod process;
mod process_msg;
pub mod registry;
pub mod route;

use axum::http::HeaderMap;
use axum::routing::{get, post};

use stasis_access::auth::Identity;
use stasis_access::scope::Scope;
use stasis_control::manager::Ctx;
use stasis_core::{Error, ErrorCode, Result, SandboxId, SandboxState};

pub use registry::Registry;
pub use route::{PortForward, ENVD_PORT};

use crate::E2b;

pub fn router(state: E2b) -> axum::Router {
    axum::Router::new()
        .route("/health", get(files::health))
        .route("/envs", get(files::envs))
        .route("/files", get(files::download).post(files::upload))
        .route("/process.Process/{method}", post(process::call))
        .route("/filesystem.Filesystem/{method}", post(filesystem::call))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

/// Who calls, on which sandbox.
#[derive(Clone)]
pub struct Caller {
    pub ctx: Ctx,
    pub id: SandboxId,
    pub who: Identity,
    /// The sandbox's state when the call was let in.
    pub state: SandboxState,
}

/// The sandbox a data-plane request is for.
pub fn sandbox_of(headers: &HeaderMap) -> Result<SandboxId> {
    let raw = headers
        .get(route::SANDBOX_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            Error::invalid(
                "missing E2b-Sandbox-Id: set E2B_SANDBOX_URL (see the E2B chapter of the manual)",
            )
        })?;
    SandboxId::parse(raw.trim()).map_err(|_| gone(raw))
}

/// The answer for a sandbox that is not there (killed, expired, never
/// was, another tenant's): what E2B's proxy says, so the SDKs raise their
/// "sandbox not running" error.
pub fn gone(id: &str) -> Error {
    Error::new(
        ErrorCode::PortUnreachable,
        format!("The sandbox {id} was not found"),
    )
}

/// The caller of a data-plane request, allowed `scope` on its sandbox, the
/// sandbox still there.
pub async fn caller(st: &E2b, headers: &HeaderMap, scope: Scope) -> Result<Caller> {
    let id = sandbox_of(headers)?;
    let m = &st.manager;
    let key = st.envd_key.get(m.meta(), m.snapshots().store()).await?;
    let who = crate::auth::envd_identity(m.meta(), key, headers, id.as_str()).await?;
    permit(&who, &id, scope)?;
    let tenant = who
        .tenant
        .clone()
        .ok_or_else(|| Error::new(ErrorCode::Forbidden, "a tenant token is needed"))?;
    let ctx = Ctx {
        tenant,
        actor: crate::auth::ACTOR.to_string(),
    };
    let state = match m.get(&ctx, &id).await {
        Ok(rec) if live(rec.state) => rec.state,
        Ok(_) => return Err(gone(id.as_str())),
        Err(e) if e.code == ErrorCode::NotFound => return Err(gone(id.as_str())),
        Err(e) => return Err(e),
    };
    // A paused sandbox resumes on traffic unless its create turned E2B's
    // auto-resume off: then it stays paused until a connect.
    if state == SandboxState::Paused
        && !crate::api::translate::auto_resume_of(&m.labels(&id).await?)
    {
        return Err(not_running(id.as_str()));
    }
    Ok(Caller {
        ctx,
        id,
        who,
        state,
    })
}

/// The answer for a sandbox that is there but not running (paused, and
/// not to be resumed by this request): the same "not running" answer the
/// SDKs' health probe reads as `is_running() == False`.
pub fn not_running(id: &str) -> Error {
    Error::new(
        ErrorCode::PortUnreachable,
        format!("The sandbox {id} is paused"),
    )
}

/// Whether a sandbox in `state` can still serve (a paused one resumes).
pub(crate) fn live(state: SandboxState) -> bool {
    !matches!(
        state,
        SandboxState::Destroying | SandboxState::Destroyed | SandboxState::Failed
    )
}

/// The token's scopes and sandbox limit, as `/v1` checks them.
fn permit(who: &Identity, id: &SandboxId, scope: Scope) -> Result<()> {
    if !who.scopes.allows(scope) {
        return Err(Error::new(
            ErrorCode::Forbidden,
            format!("this token lacks the {} scope", scope.as_str()),
        ));
    }
    if who.sandbox.as_deref().is_some_and(|s| s != id.as_str()) {
        return Err(Error::new(
            ErrorCode::Forbidden,
            "this token is limited to another sandbox",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_access::scope::Scopes;

    fn who(scopes: &[&str], sandbox: Option<&str>) -> Identity {
        let names: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        Identity {
            token_id: "t".into(),
            tenant: None,
            is_admin: false,
            actor: "e2b".into(),
            scopes: Scopes::from_stored(Some(&names)),
            sandbox: sandbox.map(str::to_string),
            expires_at_ms: None,
        }
    }

    #[test]
    fn scopes_and_sandbox_limits_hold_on_the_data_plane() {
        let id = SandboxId::parse("sb-abc").unwrap();
        assert!(permit(&who(&["exec"], None), &id, Scope::Exec).is_ok());
        assert!(permit(&who(&["read"], None), &id, Scope::Read).is_ok());
        assert_eq!(
            permit(&who(&["read"], None), &id, Scope::Exec)
                .unwrap_err()
                .code,
            ErrorCode::Forbidden
        );
        assert!(permit(&who(&["exec"], Some("sb-abc")), &id, Scope::Exec).is_ok());
        assert!(permit(&who(&["exec"], Some("sb-other")), &id, Scope::Exec).is_err());
    }

    #[test]
    fn the_sandbox_comes_from_its_header() {
        let mut h = HeaderMap::new();
        assert_eq!(sandbox_of(&h).unwrap_err().code, ErrorCode::InvalidArgument);
        h.insert(route::SANDBOX_ID_HEADER, "sb-abc".parse().unwrap());
        assert_eq!(sandbox_of(&h).unwrap().as_str(), "sb-abc");
        h.insert(route::SANDBOX_ID_HEADER, "../etc".parse().unwrap());
        let e = sandbox_of(&h).unwrap_err();
        assert!(e.message.contains("was not found"), "{}", e.message);
        assert!(!live(SandboxState::Destroyed));
        assert!(live(SandboxState::Paused));
    }
}
