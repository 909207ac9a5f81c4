//! The stasis control plane as a library: the sandbox manager (lifecycle,
//! idle and TTL policies, reconcile after a crash), runs and approvals,
//! tenancy, governance (master keys, erasure, regions), the snapshot
//! catalog, templates, the image service, cluster routing decisions,
//! metrics counters and the terminal attach loop.
//!
//! It has no HTTP dependency: `stasis-server` is one edge over it (the
//! `/v1` API, the console, the port proxy) and translates requests into
//! calls here; another edge adds routes there and touches no file here.

pub mod attach;
pub mod cluster;
pub mod daemon_key;
pub mod governance;
pub mod image_runner;
pub mod images;
pub mod manager;
pub mod metrics;
pub mod mounts;
pub mod region;
pub mod runs;
pub mod snapshots;
pub mod templates;

pub use manager::{Ctx, Manager, ManagerConfig, OpTiming, ReconcileReport};
pub use metrics::Metrics;
pub use snapshots::{SnapshotInfo, SnapshotKind, Snapshots};
/// The per-sandbox in-flight limit (its own crate, `stasis-admission`).
pub use stasis_admission as inflight;
/// Tenants and their secrets (its own crate, `stasis-tenancy`).
pub use stasis_tenancy as tenancy;
