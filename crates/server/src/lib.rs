//! The stasis daemon as a library: the HTTP edge (`http`: the `/v1` API and
//! its OpenAPI document, `console`: the web console, `ports`: signed port
//! URLs and the proxy into a sandbox) over the control plane
//! (`stasis-control`), and `daemon`, which wires them together.
//!
//! The control plane's modules are re-exported under their old names so
//! the edge reads `crate::manager`, `crate::runs`, ...; the compiler holds
//! the direction: nothing in `stasis-control` can reach this crate.

pub mod api;
pub mod console;
pub mod daemon;
pub mod daemon_id;
pub mod http;
pub mod ports;

pub use stasis_access::{auth, scope, tokens};
pub use stasis_control::{
    attach, cluster, daemon_key, governance, image_runner, images, inflight, manager, metrics,
    mounts, region, runs, snapshots, templates, tenancy,
};
pub use stasis_scrub as scrub;
pub use stasis_webhooks as webhooks;

pub use manager::{Ctx, Manager, ManagerConfig, OpTiming, ReconcileReport};
pub use metrics::Metrics;
pub use snapshots::{SnapshotInfo, SnapshotKind, Snapshots};
