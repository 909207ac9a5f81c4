//! The stasis daemon as a library: the sandbox manager (lifecycle, idle and
//! TTL policies, reconcile after a crash) and the HTTP API over it.
//!
//! Domain modules (`manager`, `runs`, `tenancy`, `snapshots`, `templates`, `cluster`,
//! `metrics`, `inflight`, `mounts`, `auth`, `ports`, `tokens`, `webhooks`, `images`) never import the HTTP edge
//! (`http`); `daemon` wires both together; `api` keeps the edge's former
//! paths.

pub mod api;
pub mod attach;
pub mod auth;
pub mod cluster;
pub mod console;
pub mod daemon;
pub mod daemon_id;
pub mod daemon_key;
pub mod governance;
pub mod http;
pub mod image_runner;
pub mod images;
pub mod inflight;
pub mod manager;
pub mod metrics;
pub mod mounts;
pub mod ports;
pub mod region;
pub mod runs;
pub mod scope;
pub mod scrub;
pub mod snapshots;
pub mod templates;
pub mod tenancy;
pub mod tokens;
pub mod webhooks;

pub use manager::{Ctx, Manager, ManagerConfig, OpTiming, ReconcileReport};
pub use metrics::Metrics;
pub use snapshots::{SnapshotInfo, SnapshotKind, Snapshots};
