//! Which audit entries are webhook events, and what an event looks like.
//!
//! Events are derived from the tenant's audit log, the one ordered,
//! durable record of what happened: delivery can never block the operation
//! itself, and nothing that happened is missed across restarts. The event
//! id is the audit entry's sequence number (`evt-<seq>`), so a receiver
//! drops a redelivery by id.

use serde_json::{json, Value};
use stasis_meta::AuditEntry;

/// Every event type an endpoint may subscribe to.
pub const EVENT_TYPES: &[&str] = &[
    "sandbox.created",
    "sandbox.paused",
    "sandbox.resumed",
    "sandbox.destroyed",
    "sandbox.expired",
    "sandbox.failed",
    "sandbox.restored",
    "sandbox.forked",
    "sandbox.taken_over",
    "snapshot.taken",
    "snapshot.deleted",
    "approval.requested",
    "approval.approved",
    "approval.rejected",
    "run.resumed",
];

/// The event type of an audit entry, if it is one.
pub fn event_type(action: &str, target: &str) -> Option<&'static str> {
    Some(match action {
        "create" => "sandbox.created",
        "pause" => "sandbox.paused",
        // A run's checkpoint resumed after a restart is not a sandbox resume.
        "resume" if target.starts_with("run-") => "run.resumed",
        "resume" => "sandbox.resumed",
        "expire" => "sandbox.expired",
        "fail" => "sandbox.failed",
        "restore" => "sandbox.restored",
        "fork" => "sandbox.forked",
        "takeover" => "sandbox.taken_over",
        "snapshot" | "checkpoint" => "snapshot.taken",
        "delete" if target.starts_with("snap-") => "snapshot.deleted",
        "delete" => "sandbox.destroyed",
        "approval_request" => "approval.requested",
        "approve" => "approval.approved",
        "reject" => "approval.rejected",
        _ => return None,
    })
}

/// Whether an endpoint subscribed to `events` receives `ty`.
pub fn wants(events: &[String], ty: &str) -> bool {
    events.iter().any(|e| e == "*" || e == ty)
}

/// The JSON body of the event of `e`.
pub fn payload(e: &AuditEntry, ty: &str) -> Value {
    json!({
        "id": format!("evt-{}", e.seq),
        "type": ty,
        "created_at_ms": e.ts_ms,
        "tenant": e.tenant,
        "actor": e.actor,
        "target": e.target,
        "data": e.detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_actions_map_to_events() {
        assert_eq!(event_type("pause", "sb-1"), Some("sandbox.paused"));
        assert_eq!(event_type("resume", "sb-1"), Some("sandbox.resumed"));
        assert_eq!(event_type("resume", "run-1"), Some("run.resumed"));
        assert_eq!(event_type("delete", "sb-1"), Some("sandbox.destroyed"));
        assert_eq!(event_type("fail", "sb-1"), Some("sandbox.failed"));
        assert_eq!(event_type("delete", "snap-1"), Some("snapshot.deleted"));
        assert_eq!(
            event_type("approval_request", "run-1"),
            Some("approval.requested")
        );
        // Reads and internal steps are not events.
        for a in ["exec", "download", "reconcile", "refused", "token_create"] {
            assert_eq!(event_type(a, "x"), None, "{a}");
        }
        for a in [
            "create", "pause", "resume", "expire", "fail", "restore", "fork", "takeover",
            "snapshot", "delete", "approve", "reject",
        ] {
            let t = event_type(a, "sb-1").unwrap();
            assert!(EVENT_TYPES.contains(&t), "{t}");
        }
        assert!(wants(&["*".into()], "sandbox.paused"));
        assert!(wants(&["sandbox.paused".into()], "sandbox.paused"));
        assert!(!wants(&["sandbox.paused".into()], "sandbox.resumed"));
    }
}
