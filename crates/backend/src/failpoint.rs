//! Named crash points for crash-safety tests. When the environment variable
//! `STASIS_FAILPOINT` names a point, the process aborts there (no unwinding,
//! no destructors, no flushing: the same as a `kill -9` at that instant).
//! Unset (always, outside tests), `hit` is one comparison against a cached
//! empty value.

use std::sync::OnceLock;

/// The variable naming the point at which the process dies.
pub const ENV: &str = "STASIS_FAILPOINT";

fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| std::env::var(ENV).ok().filter(|s| !s.is_empty()))
        .as_deref()
}

/// Die here if this point is armed.
pub fn hit(point: &str) {
    if armed() == Some(point) {
        eprintln!("failpoint {point}: aborting");
        std::process::abort();
    }
}
