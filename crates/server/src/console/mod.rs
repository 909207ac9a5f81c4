//! The web console served by the daemon at `/ui`: its embedded assets
//! ([`assets`]), browser sessions exchanged for an API token with their
//! CSRF and origin rules ([`session`]), the tenant's live event feed
//! ([`events`]) and when the lifecycle policies next act on a sandbox ([`idle`]). The HTTP handlers are `crate::http::console`'s; the pages
//! themselves call the JSON API with the session cookie.

pub mod assets;
pub mod events;
pub mod idle;
pub mod session;
