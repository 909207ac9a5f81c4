//! The E2B control plane (`E2B_API_URL`).

use crate::E2b;

pub fn router(state: E2b) -> axum::Router {
    axum::Router::new().with_state(state)
}
