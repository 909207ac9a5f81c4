//! Persistence of run state (issue 5): runs, ordered steps, tool calls with
//! idempotency keys (UNIQUE per run), approvals.
//!
//! The state machine lives in `stasis-runstate`; this module writes one
//! [`Change`] per transition in a single `BEGIN IMMEDIATE` transaction that
//! compare-and-sets the run's status and the call's state, so the recorded
//! history never has a step without its effect or the other way round.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use stasis_core::{Error, Result, TenantId};
use stasis_runstate::{
    Approval, CallSpec, CallState, Change, Decision, Run, RunStatus, Step, StepKind, ToolCall,
};

use crate::{db_err, Meta};

/// One line of `GET /v1/runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: String,
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    pub status: RunStatus,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub steps: i64,
    pub pending_approvals: i64,
}

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::internal(format!("stored {what} undecodable: {e}"))
}

impl Meta {
    /// Insert a new run (no steps yet).
    pub async fn run_insert(&self, run: &Run) -> Result<()> {
        sqlx::query(
            "INSERT INTO runs (id, tenant, sandbox, status, created_at_ms, updated_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&run.id)
        .bind(&run.tenant)
        .bind(&run.sandbox)
        .bind(run.status.as_str())
        .bind(run.created_at_ms)
        .bind(run.updated_at_ms)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// A run with its steps, calls and approvals.
    pub async fn run_get(&self, id: &str) -> Result<Run> {
        let row = sqlx::query("SELECT * FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?
            .ok_or_else(|| Error::not_found(format!("run {id}")))?;
        let status: String = row.get("status");
        let mut run = Run {
            id: row.get("id"),
            tenant: row.get("tenant"),
            sandbox: row.get("sandbox"),
            status: RunStatus::parse(&status).map_err(|e| bad("run status", e))?,
            created_at_ms: row.get("created_at_ms"),
            updated_at_ms: row.get("updated_at_ms"),
            steps: Vec::new(),
            tool_calls: Vec::new(),
            approvals: Vec::new(),
        };
        for r in sqlx::query("SELECT * FROM run_steps WHERE run = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?
        {
            let kind: String = r.get("kind");
            let data: String = r.get("data");
            run.steps.push(Step {
                seq: r.get("seq"),
                kind: StepKind::parse(&kind).map_err(|e| bad("step kind", e))?,
                at_ms: r.get("at_ms"),
                actor: r.get("actor"),
                call: r.get("call"),
                data: serde_json::from_str(&data).map_err(|e| bad("step data", e))?,
            });
        }
        for r in
            sqlx::query("SELECT * FROM tool_calls WHERE run = $1 ORDER BY created_at_ms, rowid")
                .bind(id)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?
        {
            let state: String = r.get("state");
            let spec: String = r.get("spec");
            let result: Option<String> = r.get("result");
            run.tool_calls.push(ToolCall {
                id: r.get("id"),
                idempotency_key: r.get("idempotency_key"),
                spec: serde_json::from_str::<CallSpec>(&spec).map_err(|e| bad("call spec", e))?,
                fingerprint: r.get("fingerprint"),
                state: CallState::parse(&state).map_err(|e| bad("call state", e))?,
                result: result
                    .map(|s| serde_json::from_str(&s))
                    .transpose()
                    .map_err(|e| bad("call result", e))?,
                error: r.get("error"),
                created_at_ms: r.get("created_at_ms"),
                updated_at_ms: r.get("updated_at_ms"),
            });
        }
        for r in
            sqlx::query("SELECT * FROM approvals WHERE run = $1 ORDER BY requested_at_ms, rowid")
                .bind(id)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?
        {
            let decision: Option<String> = r.get("decision");
            run.approvals.push(Approval {
                call: r.get("call"),
                requested_at_ms: r.get("requested_at_ms"),
                decision: decision.map(|d| Decision {
                    approved: d == "approved",
                    by: r.get::<Option<String>, _>("decided_by").unwrap_or_default(),
                    at_ms: r.get::<Option<i64>, _>("decided_at_ms").unwrap_or_default(),
                    reason: r.get::<Option<String>, _>("reason").unwrap_or_default(),
                }),
            });
        }
        Ok(run)
    }

    /// A tenant's view: another tenant's run is indistinguishable from a missing one.
    pub async fn run_get_for(&self, tenant: &TenantId, id: &str) -> Result<Run> {
        let run = self.run_get(id).await?;
        if run.tenant != tenant.as_str() {
            return Err(Error::not_found(format!("run {id}")));
        }
        Ok(run)
    }

    /// A tenant's runs, oldest first.
    pub async fn run_list(&self, tenant: &TenantId) -> Result<Vec<RunSummary>> {
        let rows = sqlx::query(
            "SELECT r.*,
               (SELECT COUNT(*) FROM run_steps s WHERE s.run = r.id) AS n_steps,
               (SELECT COUNT(*) FROM approvals a WHERE a.run = r.id AND a.decision IS NULL) AS n_pending
             FROM runs r WHERE tenant = $1 ORDER BY created_at_ms, id",
        )
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let status: String = r.get("status");
                Ok(RunSummary {
                    id: r.get("id"),
                    tenant: r.get("tenant"),
                    sandbox: r.get("sandbox"),
                    status: RunStatus::parse(&status).map_err(|e| bad("run status", e))?,
                    created_at_ms: r.get("created_at_ms"),
                    updated_at_ms: r.get("updated_at_ms"),
                    steps: r.get("n_steps"),
                    pending_approvals: r.get("n_pending"),
                })
            })
            .collect()
    }

    /// Tool calls in `state` across all runs, as (run, call).
    pub async fn calls_in_state(&self, state: CallState) -> Result<Vec<(String, String)>> {
        let rows =
            sqlx::query("SELECT run, id FROM tool_calls WHERE state = $1 ORDER BY created_at_ms")
                .bind(state.as_str())
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
        Ok(rows.iter().map(|r| (r.get("run"), r.get("id"))).collect())
    }

    /// Persist one transition atomically. Fails with `invalid_state` when the
    /// run or call is no longer where the change expects it.
    pub async fn run_apply(&self, c: &Change) -> Result<()> {
        let mut conn = self.begin().await?;
        let r = apply_in(&mut conn, c).await;
        Meta::end(&mut conn, r.is_ok()).await?;
        r
    }
}

async fn apply_in(conn: &mut crate::Tx, c: &Change) -> Result<()> {
    c.from_status.check_transition(c.to_status)?;
    let done = sqlx::query(
        "UPDATE runs SET status = $1, updated_at_ms = $2 WHERE id = $3 AND status = $4",
    )
    .bind(c.to_status.as_str())
    .bind(c.at_ms)
    .bind(&c.run)
    .bind(c.from_status.as_str())
    .execute(&mut **conn)
    .await
    .map_err(db_err)?;
    if done.rows_affected() != 1 {
        return Err(Error::state(format!(
            "run {} changed concurrently (expected it {})",
            c.run, c.from_status
        )));
    }
    if let Some((from, to)) = &c.rebind {
        let done = sqlx::query(
            "UPDATE runs SET sandbox = $1 WHERE id = $2 AND sandbox IS NOT DISTINCT FROM $3",
        )
        .bind(to)
        .bind(&c.run)
        .bind(from)
        .execute(&mut **conn)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!(
                "run {} was rebound concurrently",
                c.run
            )));
        }
    }
    if let Some(n) = &c.new_call {
        sqlx::query(
            "INSERT INTO tool_calls (id, run, idempotency_key, spec, fingerprint, state, result,
             error, created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&n.id)
        .bind(&c.run)
        .bind(&n.idempotency_key)
        .bind(serde_json::to_string(&n.spec)?)
        .bind(&n.fingerprint)
        .bind(n.state.as_str())
        .bind(n.result.as_ref().map(|v| v.to_string()))
        .bind(&n.error)
        .bind(n.created_at_ms)
        .bind(n.updated_at_ms)
        .execute(&mut **conn)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.is_unique_violation() => Error::state(format!(
                "idempotency key {:?} already exists in run {}",
                n.idempotency_key, c.run
            )),
            _ => db_err(e),
        })?;
    }
    if let Some(u) = &c.call_update {
        u.from.check_transition(u.to)?;
        let done = sqlx::query(
            "UPDATE tool_calls SET state = $1, result = COALESCE($2, result), error = COALESCE($3, error),
             updated_at_ms = $4 WHERE id = $5 AND run = $6 AND state = $7",
        )
        .bind(u.to.as_str())
        .bind(u.result.as_ref().map(|v| v.to_string()))
        .bind(&u.error)
        .bind(c.at_ms)
        .bind(&u.call)
        .bind(&c.run)
        .bind(u.from.as_str())
        .execute(&mut **conn)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!(
                "tool call {} changed concurrently (expected it {})",
                u.call, u.from
            )));
        }
    }
    if let Some(a) = &c.new_approval {
        sqlx::query("INSERT INTO approvals (call, run, requested_at_ms) VALUES ($1, $2, $3)")
            .bind(&a.call)
            .bind(&c.run)
            .bind(a.requested_at_ms)
            .execute(&mut **conn)
            .await
            .map_err(db_err)?;
    }
    if let Some((call, d)) = &c.decision {
        let done = sqlx::query(
            "UPDATE approvals SET decision = $1, decided_by = $2, decided_at_ms = $3, reason = $4
             WHERE call = $5 AND run = $6 AND decision IS NULL",
        )
        .bind(if d.approved { "approved" } else { "rejected" })
        .bind(&d.by)
        .bind(d.at_ms)
        .bind(&d.reason)
        .bind(call)
        .bind(&c.run)
        .execute(&mut **conn)
        .await
        .map_err(db_err)?;
        if done.rows_affected() != 1 {
            return Err(Error::state(format!(
                "tool call {call} was already decided"
            )));
        }
    }
    for s in &c.steps {
        sqlx::query(
            "INSERT INTO run_steps (run, seq, kind, at_ms, actor, call, data)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&c.run)
        .bind(s.seq)
        .bind(s.kind.as_str())
        .bind(s.at_ms)
        .bind(&s.actor)
        .bind(&s.call)
        .bind(s.data.to_string())
        .execute(&mut **conn)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.is_unique_violation() => Error::state(format!(
                "run {} changed concurrently (step {})",
                c.run, s.seq
            )),
            _ => db_err(e),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_runstate::{new_call_id, new_run_id};

    fn spec(approval: bool) -> CallSpec {
        CallSpec {
            kind: "exec".into(),
            argv: vec!["sh".into(), "-c".into(), "echo sent".into()],
            cwd: None,
            timeout_ms: 1000,
            env_names: vec![],
            side_effecting: true,
            requires_approval: approval,
        }
    }

    #[tokio::test]
    async fn transitions_round_trip_and_are_compare_and_set() {
        for db in crate::testdb::all().await {
            eprintln!("engine {}", db.name);
            round_trip_on(&db.meta).await;
        }
    }

    async fn round_trip_on(m: &Meta) {
        let t = TenantId::parse("t-a").unwrap();
        let run = Run::new(new_run_id(), t.as_str().into(), None, 1);
        m.run_insert(&run).await.unwrap();
        let mut mem = run.clone();
        let held = new_call_id();
        let c = mem
            .request_call(held.clone(), "k1", spec(true), "agent", 2)
            .unwrap();
        m.run_apply(&c).await.unwrap();
        mem.apply(&c).unwrap();
        assert_eq!(m.run_get(&run.id).await.unwrap(), mem);
        // A stale change (the run moved on) is refused and writes nothing.
        let stale = run
            .note(StepKind::ModelStep, "a", serde_json::json!(1), 3)
            .unwrap();
        assert!(m.run_apply(&stale).await.is_err());
        assert_eq!(m.run_get(&run.id).await.unwrap(), mem);
        // Decide, record the result.
        let c = mem.decide(&held, true, "alice", "ok", 4).unwrap();
        m.run_apply(&c).await.unwrap();
        mem.apply(&c).unwrap();
        assert_eq!(
            m.calls_in_state(CallState::IntentRecorded).await.unwrap(),
            vec![(run.id.clone(), held.clone())]
        );
        let c = mem
            .record_result(&held, Ok(serde_json::json!({"exit_code": 0})), "alice", 5)
            .unwrap();
        m.run_apply(&c).await.unwrap();
        mem.apply(&c).unwrap();
        assert_eq!(m.run_get(&run.id).await.unwrap(), mem);
        // The same key twice is refused by the UNIQUE constraint too.
        let mut dup = mem.clone();
        dup.tool_calls.clear();
        let c = dup
            .request_call(new_call_id(), "k1", spec(false), "a", 6)
            .unwrap();
        assert!(m.run_apply(&c).await.is_err());
        let l = m.run_list(&t).await.unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].steps, mem.steps.len() as i64);
        assert_eq!(l[0].pending_approvals, 0);
        let other = TenantId::parse("t-b").unwrap();
        assert!(m.run_get_for(&other, &run.id).await.is_err());
    }
}
