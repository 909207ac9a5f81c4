//! The reaper's deadline index (`sandboxes.due_at_ms`, migration 0012).
//!
//! A sandbox's `due_at_ms` is a lower bound of the earliest time one of its
//! lifecycle deadlines could fall: the minimum over [`DEADLINES`], each a
//! pure function of the stored record. Every state write recomputes it in
//! the same statement ([`crate::Meta::transition_fenced`]), as does a
//! runtime policy change. The reaper reads the rows due, oldest deadline
//! first ([`crate::Meta::due`]); for each it acts, or, when nothing was due
//! after all (the idle clock lives in the daemon's memory and only moves
//! forward), writes a later value ([`crate::Meta::set_due`]). A pass thus
//! costs the sandboxes due, not every live one.
//!
//! A new kind of deadline plugs in as one more entry of [`DEADLINES`] (when
//! it falls, from the record) and one more branch of the reaper's decision
//! (what happens then); a stored field it needs comes with a migration.

use sqlx::Row;

use stasis_core::{secs_to_ms, OnIdle, Result, SandboxId, SandboxState};

use crate::{db_err, decode, Meta, SandboxRecord, SELECT_SANDBOX};

/// When one kind of deadline falls for a record, given the sandbox's last
/// activity when the daemon knows it; `None`: never (or not in its state).
pub type Deadline = fn(&SandboxRecord, Option<i64>) -> Option<i64>;

/// Every kind of deadline, by name.
pub const DEADLINES: &[(&str, Deadline)] = &[
    ("idle", idle),
    ("lifetime", lifetime),
    ("checkpoint", checkpoint),
    ("paused_ttl", paused_ttl),
];

/// The earliest of a record's deadlines (`None`: none can fall), as a
/// state write stores it.
pub fn due_at(rec: &SandboxRecord) -> Option<i64> {
    due_after_activity(rec, None)
}

/// The earliest of a record's deadlines with the idle window counted from
/// `last_active_ms` (the daemon's activity clock), as the reaper stores it
/// after a pass found nothing to do.
pub fn due_after_activity(rec: &SandboxRecord, last_active_ms: Option<i64>) -> Option<i64> {
    DEADLINES
        .iter()
        .filter_map(|(_, f)| f(rec, last_active_ms))
        .min()
}

fn running(rec: &SandboxRecord) -> Option<i64> {
    (rec.state == SandboxState::Running).then(|| rec.running_since_ms.unwrap_or(rec.updated_at_ms))
}

/// The idle window counted from the last activity, else from when it last
/// started running (the activity clock lives in the daemon's memory).
fn idle(rec: &SandboxRecord, last_active_ms: Option<i64>) -> Option<i64> {
    let policy = &rec.manifest.lifecycle;
    if policy.on_idle == OnIdle::Nothing {
        return None;
    }
    let since = running(rec)?;
    let from = last_active_ms.unwrap_or(since);
    Some(from.saturating_add(secs_to_ms(policy.idle_timeout_secs)))
}

fn lifetime(rec: &SandboxRecord, _: Option<i64>) -> Option<i64> {
    let max = rec.manifest.lifecycle.max_lifetime_secs;
    if max == 0 {
        return None;
    }
    let since = running(rec)?;
    Some(since.saturating_add(secs_to_ms(max).saturating_sub(rec.running_ms)))
}

fn checkpoint(rec: &SandboxRecord, _: Option<i64>) -> Option<i64> {
    let every = rec.manifest.lifecycle.checkpoint_secs;
    if every == 0 {
        return None;
    }
    running(rec)?;
    let last = rec
        .checkpoint_at_ms
        .or(rec.running_since_ms)
        .unwrap_or(rec.created_at_ms);
    Some(last.saturating_add(secs_to_ms(every)))
}

fn paused_ttl(rec: &SandboxRecord, _: Option<i64>) -> Option<i64> {
    (rec.state == SandboxState::Paused)
        .then_some(rec.expires_at_ms)
        .flatten()
}

impl Meta {
    /// At most `limit` sandboxes due at `now`, earliest first. Running
    /// sandboxes whose lease another node holds are left to that node
    /// (`node`: this one; `None` on a single node).
    pub async fn due(
        &self,
        now: i64,
        node: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SandboxRecord>> {
        let rows = sqlx::query(&format!(
            "{SELECT_SANDBOX} WHERE s.due_at_ms IS NOT NULL AND s.due_at_ms <= $1
             AND ($2 IS NULL OR s.state != 'running' OR l.node IS NULL OR l.node = $2)
             ORDER BY s.due_at_ms LIMIT $3"
        ))
        .bind(now)
        .bind(node.map(str::to_string))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter().map(decode).collect()
    }

    /// Set the deadline of `rec` to `due` if its row is still as read (same
    /// state, same last write): a write that moved it meanwhile computed its
    /// own.
    pub async fn set_due(&self, rec: &SandboxRecord, due: Option<i64>) -> Result<()> {
        sqlx::query(
            "UPDATE sandboxes SET due_at_ms = $1 WHERE id = $2 AND state = $3 AND updated_at_ms = $4",
        )
        .bind(due)
        .bind(rec.id.as_str())
        .bind(rec.state.as_str())
        .bind(rec.updated_at_ms)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// The stored deadline of `id` (tests and diagnostics).
    pub async fn due_of(&self, id: &SandboxId) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT due_at_ms FROM sandboxes WHERE id = $1")
            .bind(id.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        row.try_get("due_at_ms").map_err(db_err)
    }

    /// Recompute the deadline of `id` from its stored record.
    pub(crate) async fn refresh_due(&self, id: &SandboxId) -> Result<SandboxRecord> {
        let rec = self.get(id).await?;
        sqlx::query("UPDATE sandboxes SET due_at_ms = $1 WHERE id = $2 AND updated_at_ms = $3")
            .bind(due_at(&rec))
            .bind(id.as_str())
            .bind(rec.updated_at_ms)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests;
