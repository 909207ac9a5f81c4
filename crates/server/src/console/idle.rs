//! When the lifecycle policies will next act on a sandbox, for the
//! console's countdowns: the idle timeout (from its last activity), the
//! running-time limit, and a paused sandbox's TTL. The reaper decides the
//! same from the same facts (`crate::manager` reaper).

use serde::Serialize;

use stasis_core::manifest::OnIdle;
use stasis_core::SandboxState;
use stasis_meta::SandboxRecord;

/// The deadlines of one sandbox (milliseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deadlines {
    pub state: String,
    /// Its last activity, when this daemon tracks it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_active_ms: Option<i64>,
    /// What happens when it is idle that long: pause, pause_filesystem, destroy, nothing.
    pub on_idle: String,
    pub idle_timeout_secs: u64,
    /// When the idle timeout is reached if nothing happens before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_deadline_ms: Option<i64>,
    /// When its running time reaches `max_lifetime_secs`, if it keeps running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifetime_deadline_ms: Option<i64>,
    /// When a paused sandbox is destroyed (TTL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

pub fn deadlines(rec: &SandboxRecord, last_active_ms: Option<i64>, now: i64) -> Deadlines {
    let p = &rec.manifest.lifecycle;
    let running = rec.state == SandboxState::Running;
    let on_idle = serde_json::to_value(p.on_idle)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let idle_deadline_ms = match last_active_ms {
        Some(t) if running && p.on_idle != OnIdle::Nothing => {
            Some(t.saturating_add(p.idle_timeout_secs.saturating_mul(1000) as i64))
        }
        _ => None,
    };
    let lifetime_deadline_ms = (running && p.max_lifetime_secs > 0).then(|| {
        let left = (p.max_lifetime_secs.saturating_mul(1000) as i64) - rec.running_time_ms(now);
        now + left.max(0)
    });
    Deadlines {
        state: rec.state.to_string(),
        last_active_ms,
        on_idle,
        idle_timeout_secs: p.idle_timeout_secs,
        idle_deadline_ms,
        lifetime_deadline_ms,
        expires_at_ms: rec
            .expires_at_ms
            .filter(|_| rec.state == SandboxState::Paused),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::{BackendKind, Manifest, SandboxId, TenantId};

    fn rec(state: SandboxState) -> SandboxRecord {
        let mut manifest = Manifest::default();
        manifest.lifecycle.idle_timeout_secs = 60;
        manifest.lifecycle.max_lifetime_secs = 3600;
        SandboxRecord {
            id: SandboxId::parse("sb-a").unwrap(),
            tenant: TenantId::parse("t-a").unwrap(),
            backend: BackendKind::Process,
            state,
            reason: None,
            manifest,
            manifest_digest: String::new(),
            created_at_ms: 0,
            updated_at_ms: 0,
            running_ms: 1000,
            running_since_ms: Some(10_000),
            paused_at_ms: None,
            expires_at_ms: Some(99_000),
            pause_snapshot: None,
            pause_kind: None,
            source_snapshot: None,
            checkpoint_snapshot: None,
            checkpoint_at_ms: None,
            recovered_from_snapshot: None,
            recovered_at_ms: None,
            progress_lost_ms: None,
            owner: None,
        }
    }

    #[test]
    fn running_and_paused_deadlines() {
        let d = deadlines(&rec(SandboxState::Running), Some(20_000), 30_000);
        assert_eq!(d.idle_deadline_ms, Some(80_000));
        // 1 s before plus 20 s since it started running: 21 s of 3600 used.
        assert_eq!(d.lifetime_deadline_ms, Some(30_000 + 3_600_000 - 21_000));
        assert_eq!(d.expires_at_ms, None);
        assert_eq!(d.on_idle, "pause");
        // Not tracked here (another node runs it): no idle deadline.
        assert_eq!(
            deadlines(&rec(SandboxState::Running), None, 30_000).idle_deadline_ms,
            None
        );
        let mut never = rec(SandboxState::Running);
        never.manifest.lifecycle.on_idle = OnIdle::Nothing;
        assert_eq!(deadlines(&never, Some(1), 2).idle_deadline_ms, None);
        let p = deadlines(&rec(SandboxState::Paused), Some(20_000), 30_000);
        assert_eq!((p.idle_deadline_ms, p.lifetime_deadline_ms), (None, None));
        assert_eq!(p.expires_at_ms, Some(99_000));
    }
}
