//! The HTTP API's former paths (`stasis_server::api::...`), kept for
//! embedders and the CLI: the edge itself lives in [`crate::http`].

pub use crate::auth::DEFAULT_TENANT;
pub use crate::http::audit::AuditQuery;
pub use crate::http::error::{
    ApiBytes, ApiError, ApiJson, ApiQuery, ApiResult, ErrorBody, ErrorDetail,
};
pub use crate::http::exec::{ExecBody, ExecResponse, ExecStreamLine};
pub use crate::http::files::PathQuery;
pub use crate::http::sandboxes::{
    CreateSandbox, ForkBody, ForkResponse, ListQuery, PauseBody, Sandbox,
};
pub use crate::http::sessions::{OutputQuery, SessionInput, SessionOutputResponse};
pub use crate::http::snapshots::{RestoreBody, SnapshotBody};
pub use crate::http::tenants::{CreateTenantBody, CreateTokenBody, SecretBody};
pub use crate::http::{openapi, router, AppState};
