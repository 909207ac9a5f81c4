//! What every handler of the E2B edge shares.

use std::sync::Arc;

use stasis_control::daemon_key::DaemonKey;
use stasis_control::Manager;

/// Name of the envd access-token key in `daemon_keys` (one key per purpose).
pub const ENVD_KEY: &str = "e2b-envd-token-key-v1";

#[derive(Clone)]
pub struct E2b {
    pub manager: Arc<Manager>,
    /// Signs envd access tokens (see [`crate::auth`]).
    pub envd_key: Arc<DaemonKey>,
    /// The domain sandboxes' ports are served under (`stasis serve
    /// --ports-domain`), returned to the SDK as the sandbox's `domain` so
    /// `get_host(port)` names `<port>-<sandbox>.<domain>`; None when the
    /// daemon serves no ports domain.
    pub ports_domain: Option<String>,
    /// What envd keeps between calls (process tags, polled watchers).
    pub envd: Arc<crate::envd::Registry>,
    /// The daemon's port proxy, for data-plane requests to ports other
    /// than envd's (None: such requests are refused).
    pub forward: Option<Arc<dyn crate::envd::PortForward>>,
}

impl E2b {
    pub fn new(manager: Arc<Manager>, ports_domain: Option<String>) -> Self {
        E2b {
            manager,
            envd_key: Arc::new(DaemonKey::new(ENVD_KEY)),
            ports_domain,
            envd: Arc::default(),
            forward: None,
        }
    }

    /// Relay data-plane requests for other ports through `forward`.
    pub fn with_forward(mut self, forward: Arc<dyn crate::envd::PortForward>) -> Self {
        self.forward = Some(forward);
        self
    }
}
