//! The web console served by the daemon at `/ui`: its embedded assets
//! ([`assets`]), browser sessions exchanged for an API token with their
//! CSRF and origin rules ([`session`]), the tenant's live event feed
//! ([`events`]) and when the lifecycle policies next act on a sandbox ([`idle`]). The HTTP handlers are `crate::http::console`'s; the pages
//! themselves call the JSON API with the session cookie.

pub mod assets;
pub mod events;
pub mod idle;
pub mod session;

use stasis_core::Result;
use stasis_meta::Meta;
use stasis_store::Store;

use crate::daemon_key::DaemonKey;

/// The console's shared state: its CSRF secret (loaded once).
pub struct Console {
    csrf_key: DaemonKey,
}

impl Default for Console {
    fn default() -> Self {
        Console {
            csrf_key: DaemonKey::new(session::CSRF_KEY_NAME),
        }
    }
}

impl Console {
    /// The secret CSRF tokens are keyed with (the same on every node).
    pub async fn csrf_key(&self, meta: &Meta, store: &Store) -> Result<&[u8; 32]> {
        self.csrf_key.get(meta, store).await
    }
}

/// Paths under this prefix are the console's own (not the API's authentication).
pub const PREFIX: &str = "/ui";

/// Whether `path` is the console's own (authenticated by the handlers).
pub fn is_console_path(path: &str) -> bool {
    path == PREFIX || path.starts_with("/ui/")
}
