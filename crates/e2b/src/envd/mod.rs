//! The E2B data plane (envd): processes, filesystem, files.

use crate::E2b;

pub fn router(state: E2b) -> axum::Router {
    axum::Router::new().with_state(state)
}
