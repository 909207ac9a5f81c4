//! The state every handler and middleware of the HTTP edge shares: the
//! manager, the doctor report, the per-token rate limiter and the run-state
//! service (one per daemon, built when the daemon opens).

use std::sync::Arc;

use super::limit::Limiter;
use crate::manager::Manager;
use crate::ports::Ports;
use crate::runs::Runs;

#[derive(Clone)]
pub struct AppState {
    pub manager: Arc<Manager>,
    pub doctor: Arc<serde_json::Value>,
    /// Per-token request rate limit.
    pub limiter: Arc<Limiter>,
    /// Runs, tool calls and approvals of this daemon.
    pub runs: Arc<Runs>,
    /// Lifecycle webhook endpoints (delivery runs beside the daemon).
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    /// The port proxy's signing key, configuration and counters.
    pub ports: Arc<Ports>,
    /// The web console's CSRF secret.
    pub console: Arc<crate::console::Console>,
}
