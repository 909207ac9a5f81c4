//! Who may do what: the token format and the caller's identity (`auth`),
//! minting, rotation and revocation (`tokens`), and the scope each route
//! needs (`scope`). The HTTP edge (`stasis-server`'s `http::auth`) reads
//! the `Authorization` header and asks this crate; the control plane
//! (`stasis-control`) takes the resulting `Identity`.

pub mod auth;
pub mod scope;
pub mod tokens;
