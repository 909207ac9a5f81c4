//! The run-state service (issue 5): runs, idempotent tool calls, human
//! approvals, and the signed RunState document, over `Manager` and `Meta`.
//!
//! Crash safety: a tool call's intent is committed to the metadata database
//! *before* its exec starts and its result after it returns. A daemon killed
//! in between leaves the intent without a result; when the service starts
//! (first use after a restart) every such call becomes
//! `outcome_unknown_needs_review`, and a retry with its key reports that
//! instead of running it again.
//!
//! Operations that change a run hold that run's lock (in this process) for
//! their whole length, executions included, so a run's transitions are
//! serialized and a concurrent retry waits for the recorded result. The
//! metadata writes are compare-and-set besides.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex as StdMutex};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use stasis_core::{now_ms, Error, ErrorCode, ExecRequest, Result, SandboxId, SandboxState};
use stasis_meta::runs::RunSummary;
use stasis_meta::NewAuditEntry;
use stasis_runstate::doc::{SandboxBinding, BACKEND_ID};
use stasis_runstate::{
    check_id, new_call_id, new_run_id, retry_outcome, sign_state, verify_state, CallSpec,
    CallState, Change, RetryOutcome, Run, RunKey, StateBody, StateDocument, StepKind, ToolCall,
};

use crate::manager::{Ctx, Manager};

/// Largest stdout/stderr kept in a call's recorded result.
const MAX_RECORDED_OUTPUT: usize = 64 * 1024;

/// A tool call request (`POST /v1/runs/{id}/tool-calls`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    pub idempotency_key: String,
    #[serde(default = "exec_kind")]
    pub kind: String,
    pub argv: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Used for this exec only; values are never recorded (names are).
    /// Refused on calls that require approval: put credentials in the
    /// sandbox's manifest, which is read fresh when the call executes.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub side_effecting: bool,
    #[serde(default)]
    pub requires_approval: bool,
}

fn exec_kind() -> String {
    "exec".into()
}

/// What a tool call request or a decision returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallOutcome {
    pub run: Run,
    pub call: ToolCall,
    /// succeeded | failed | awaiting_approval | rejected | outcome_unknown
    pub outcome: String,
    /// True when nothing ran for this request: the recorded outcome was returned.
    pub replayed: bool,
}

impl CallOutcome {
    fn new(run: Run, call_id: &str, replayed: bool) -> Result<Self> {
        let call = run
            .call(call_id)
            .cloned()
            .ok_or_else(|| Error::internal(format!("tool call {call_id} vanished")))?;
        let outcome = match call.state {
            CallState::AwaitingApproval => "awaiting_approval",
            CallState::IntentRecorded => "in_progress",
            CallState::Succeeded => "succeeded",
            CallState::Failed => "failed",
            CallState::Rejected => "rejected",
            CallState::OutcomeUnknown => "outcome_unknown",
        }
        .to_string();
        Ok(CallOutcome {
            run,
            call,
            outcome,
            replayed,
        })
    }
}

/// The sandbox as found when a run is resumed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxCheck {
    pub id: String,
    pub state: String,
    /// Digest of the manifest in force now (the one every further call runs under).
    pub manifest_digest: String,
    /// Digest recorded in the document.
    pub manifest_digest_in_state: String,
    /// The manifest changed since the document was issued; the current one applies.
    pub manifest_changed: bool,
    /// The run was moved to this sandbox by this resume, from that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebound_from: Option<String>,
}

/// What `POST /v1/runs/resume` returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ResumeReport {
    pub run: Run,
    /// Approvals pending in the document and still pending now.
    pub still_pending: Vec<String>,
    /// Approvals pending in the document and decided since.
    pub decided_since: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxCheck>,
    /// A fresh document for the run as it is now.
    pub state: StateDocument,
}

pub struct Runs {
    manager: Arc<Manager>,
    key: RunKey,
    locks: StdMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    in_flight: StdMutex<HashSet<String>>,
}

/// Removes a call from the in-flight set however the execution ends.
struct InFlight<'a>(&'a Runs, String);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.lock().expect("in_flight").remove(&self.1);
    }
}

fn sandbox_of(run: &Run) -> Result<SandboxId> {
    let s = run.sandbox.as_deref().ok_or_else(|| {
        Error::state(format!(
            "run {} has no sandbox to run tool calls in",
            run.id
        ))
    })?;
    SandboxId::parse(s)
}

fn cap(b: &[u8]) -> (String, bool) {
    let cut = b.len() > MAX_RECORDED_OUTPUT;
    let b = &b[..b.len().min(MAX_RECORDED_OUTPUT)];
    (String::from_utf8_lossy(b).into_owned(), cut)
}

impl Runs {
    /// The service of this manager: one per daemon, built when it opens and
    /// kept in the HTTP state. Creates `<data-dir>/runstate.key` if needed
    /// and settles calls a previous daemon left between intent and result.
    pub async fn new(manager: &Arc<Manager>) -> Result<Arc<Runs>> {
        let key = RunKey::load_or_create(&manager.config().data_dir.join("runstate.key"))?;
        let runs = Arc::new(Runs {
            manager: manager.clone(),
            key,
            locks: StdMutex::new(HashMap::new()),
            in_flight: StdMutex::new(HashSet::new()),
        });
        runs.recover().await?;
        Ok(runs)
    }

    /// Calls with an intent and no result: nothing in this process runs them,
    /// so a previous daemon died in between. Their outcome is unknown.
    async fn recover(&self) -> Result<()> {
        let meta = self.manager.meta();
        for (run_id, call_id) in meta.calls_in_state(CallState::IntentRecorded).await? {
            let run = meta.run_get(&run_id).await?;
            let c = run.mark_outcome_unknown(
                &call_id,
                "the daemon stopped after recording the intent and before recording a result",
                now_ms(),
            )?;
            meta.run_apply(&c).await?;
            warn!(run = %run_id, call = %call_id, "tool call outcome unknown after restart; needs review");
            if let Ok(tenant) = stasis_core::TenantId::parse(&run.tenant) {
                let ctx = Ctx::system(tenant);
                self.audit(
                    &ctx,
                    "exec",
                    &run,
                    &call_id,
                    serde_json::json!({"phase": "outcome_unknown"}),
                )
                .await;
            }
        }
        Ok(())
    }

    fn lock_of(&self, run: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("locks")
            .entry(run.to_string())
            .or_default()
            .clone()
    }

    async fn audit(
        &self,
        ctx: &Ctx,
        action: &str,
        run: &Run,
        call: &str,
        mut detail: serde_json::Value,
    ) {
        detail["run"] = serde_json::json!(run.id);
        detail["call"] = serde_json::json!(call);
        if let Some(c) = run.call(call) {
            detail["idempotency_key"] = serde_json::json!(c.idempotency_key);
            detail["argv0"] = serde_json::json!(c.spec.argv.first());
        }
        if let Some(s) = &run.sandbox {
            detail["sandbox"] = serde_json::json!(s);
        }
        let entry = NewAuditEntry {
            tenant: ctx.tenant.clone(),
            actor: ctx.actor.clone(),
            action: action.to_string(),
            target: run.id.clone(),
            detail,
        };
        if let Err(e) = self.manager.meta().audit(entry).await {
            warn!(error = %e, action, run = %run.id, "audit append failed");
        }
    }

    /// Apply a change to the database, then return the run as stored.
    async fn commit(&self, c: &Change) -> Result<Run> {
        self.manager.meta().run_apply(c).await?;
        self.manager.meta().run_get(&c.run).await
    }

    async fn check_sandbox(&self, ctx: &Ctx, id: &str) -> Result<stasis_meta::SandboxRecord> {
        let rec = self.manager.get(ctx, &SandboxId::parse(id)?).await?;
        if matches!(rec.state, SandboxState::Destroyed | SandboxState::Failed) {
            return Err(Error::state(format!(
                "sandbox {id} is {}{}",
                rec.state,
                rec.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )));
        }
        Ok(rec)
    }

    /// Before an intent or an approval is recorded: the sandbox is usable
    /// and, in a cluster, runs on this node (taken over now if its node
    /// died). A sandbox another live node holds is answered busy with
    /// nothing recorded, so the same idempotency key can simply be retried;
    /// refused after the intent, the call would stay recorded as failed.
    async fn check_executable(&self, ctx: &Ctx, id: &str) -> Result<()> {
        let rec = self.check_sandbox(ctx, id).await?;
        self.manager.ensure_local(ctx, rec).await.map(|_| ())
    }

    pub async fn create(&self, ctx: &Ctx, sandbox: Option<String>) -> Result<Run> {
        if let Some(s) = &sandbox {
            self.check_sandbox(ctx, s).await?;
        }
        let run = Run::new(new_run_id(), ctx.tenant.to_string(), sandbox, now_ms());
        self.manager.meta().run_insert(&run).await?;
        let entry = NewAuditEntry {
            tenant: ctx.tenant.clone(),
            actor: ctx.actor.clone(),
            action: "create".into(),
            target: run.id.clone(),
            detail: serde_json::json!({"kind": "run", "sandbox": run.sandbox}),
        };
        if let Err(e) = self.manager.meta().audit(entry).await {
            warn!(error = %e, "audit append failed");
        }
        Ok(run)
    }

    pub async fn get(&self, ctx: &Ctx, id: &str) -> Result<Run> {
        check_id("run", "run-", id)?;
        self.manager.meta().run_get_for(&ctx.tenant, id).await
    }

    pub async fn list(&self, ctx: &Ctx) -> Result<Vec<RunSummary>> {
        self.manager.meta().run_list(&ctx.tenant).await
    }

    /// Append a model step or handover, or end the run (completed / failed).
    pub async fn step(
        &self,
        ctx: &Ctx,
        id: &str,
        kind: StepKind,
        data: serde_json::Value,
    ) -> Result<Run> {
        let lock = self.lock_of(id);
        let _g = lock.lock().await;
        let run = self.get(ctx, id).await?;
        let c = match kind {
            StepKind::Completed => run.finish(true, &ctx.actor, data, now_ms())?,
            StepKind::Failed => run.finish(false, &ctx.actor, data, now_ms())?,
            k => run.note(k, &ctx.actor, data, now_ms())?,
        };
        self.commit(&c).await
    }

    pub async fn request_call(
        &self,
        ctx: &Ctx,
        id: &str,
        req: ToolCallRequest,
    ) -> Result<CallOutcome> {
        stasis_core::exec::check_env(&req.env)?;
        let spec = CallSpec {
            kind: req.kind,
            argv: req.argv,
            cwd: req.cwd,
            timeout_ms: req.timeout_ms.unwrap_or(60_000),
            env_names: req.env.keys().cloned().collect(),
            side_effecting: req.side_effecting,
            requires_approval: req.requires_approval,
        };
        let lock = self.lock_of(id);
        let _g = lock.lock().await;
        let run = self.get(ctx, id).await?;
        if let Some(existing) = run.call_by_key(&req.idempotency_key).cloned() {
            let in_flight = self
                .in_flight
                .lock()
                .expect("in_flight")
                .contains(&existing.id);
            return match retry_outcome(&existing, &spec, in_flight)? {
                RetryOutcome::Recorded => CallOutcome::new(run, &existing.id, true),
                RetryOutcome::InProgress => Err(Error::new(
                    ErrorCode::Busy,
                    format!("tool call {} is executing; retry later", existing.id),
                )),
                RetryOutcome::MarkOutcomeUnknown => {
                    let c = run.mark_outcome_unknown(
                        &existing.id,
                        "intent recorded, result never recorded (the daemon stopped in between)",
                        now_ms(),
                    )?;
                    let run = self.commit(&c).await?;
                    self.audit(
                        ctx,
                        "exec",
                        &run,
                        &existing.id,
                        serde_json::json!({"phase": "outcome_unknown"}),
                    )
                    .await;
                    CallOutcome::new(run, &existing.id, true)
                }
            };
        }
        if spec.requires_approval && !req.env.is_empty() {
            return Err(Error::invalid(
                "a call that waits for approval cannot carry env values (they are never stored); \
                 put credentials in the sandbox manifest, read fresh when the call runs",
            )
            .with_field("env"));
        }
        let sandbox = sandbox_of(&run)?;
        self.check_executable(ctx, sandbox.as_str()).await?;
        let call_id = new_call_id();
        let c = run.request_call(
            call_id.clone(),
            &req.idempotency_key,
            spec,
            &ctx.actor,
            now_ms(),
        )?;
        // Intent (or the hold for approval) is durable before anything runs.
        let run = self.commit(&c).await?;
        if run.call(&call_id).map(|c| c.state) == Some(CallState::AwaitingApproval) {
            info!(run = %run.id, call = %call_id, "tool call waits for approval");
            self.audit(
                ctx,
                "approval_request",
                &run,
                &call_id,
                serde_json::json!({}),
            )
            .await;
            return CallOutcome::new(run, &call_id, false);
        }
        self.execute(ctx, run, &call_id, req.env).await
    }

    /// Run a call whose intent is recorded, and record its result. The
    /// caller holds the run's lock.
    async fn execute(
        &self,
        ctx: &Ctx,
        run: Run,
        call_id: &str,
        env: BTreeMap<String, String>,
    ) -> Result<CallOutcome> {
        let call = run
            .call(call_id)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("tool call {call_id}")))?;
        let sandbox = sandbox_of(&run)?;
        self.in_flight
            .lock()
            .expect("in_flight")
            .insert(call_id.to_string());
        let _flight = InFlight(self, call_id.to_string());
        self.audit(
            ctx,
            "exec",
            &run,
            call_id,
            serde_json::json!({"phase": "intent"}),
        )
        .await;
        let req = ExecRequest {
            argv: call.spec.argv.clone(),
            env,
            cwd: call.spec.cwd.clone(),
            timeout_ms: call.spec.timeout_ms,
            stdin: None,
            user: None,
        };
        // Manager::exec resumes a paused sandbox transparently and applies
        // the manifest in force now (its env included).
        let result = self.manager.exec(ctx, &sandbox, req, None).await;
        let run = self.manager.meta().run_get(&run.id).await?;
        let c = match result {
            Ok(r) => {
                let (stdout, out_cut) = cap(&r.stdout);
                let (stderr, err_cut) = cap(&r.stderr);
                let v = serde_json::json!({
                    "exit_code": r.exit_code,
                    "signal": r.signal,
                    "stdout": stdout,
                    "stderr": stderr,
                    "timed_out": r.timed_out,
                    "truncated": r.truncated || out_cut || err_cut,
                    "duration_ms": r.duration_ms,
                });
                run.record_result(call_id, Ok(v), &ctx.actor, now_ms())?
            }
            // Refused before anything started: the call did not happen.
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::NotFound
                        | ErrorCode::InvalidState
                        | ErrorCode::InvalidArgument
                        | ErrorCode::Unsupported
                        | ErrorCode::Busy
                ) =>
            {
                run.record_result(
                    call_id,
                    Err(format!("not started: {}: {}", e.code, e.message)),
                    &ctx.actor,
                    now_ms(),
                )?
            }
            // It may have run part-way: never guess.
            Err(e) => run.mark_outcome_unknown(
                call_id,
                &format!("exec ended without a result: {}: {}", e.code, e.message),
                now_ms(),
            )?,
        };
        let run = self.commit(&c).await?;
        let state = run.call(call_id).map(|c| c.state);
        let exit = run
            .call(call_id)
            .and_then(|c| c.result.as_ref())
            .and_then(|r| r.get("exit_code").cloned());
        self.audit(
            ctx,
            "exec",
            &run,
            call_id,
            serde_json::json!({"phase": "result", "state": state, "exit_code": exit}),
        )
        .await;
        CallOutcome::new(run, call_id, false)
    }

    /// A human decision on a held call (`call` is its id or idempotency key).
    /// Approve executes it (resuming the sandbox transparently); reject
    /// records it and the run continues.
    pub async fn decide(
        &self,
        ctx: &Ctx,
        id: &str,
        call: &str,
        approve: bool,
        reason: &str,
    ) -> Result<CallOutcome> {
        if reason.len() > 4096 {
            return Err(Error::invalid("reason is longer than 4096 bytes").with_field("reason"));
        }
        let lock = self.lock_of(id);
        let _g = lock.lock().await;
        let run = self.get(ctx, id).await?;
        let call_id = run
            .find_call(call)
            .map(|c| c.id.clone())
            .ok_or_else(|| Error::not_found(format!("tool call {call} in run {id}")))?;
        if approve {
            // Re-check the sandbox before recording an approval that will run.
            let sandbox = sandbox_of(&run)?;
            self.check_executable(ctx, sandbox.as_str()).await?;
        }
        let c = run.decide(&call_id, approve, &ctx.actor, reason, now_ms())?;
        let run = self.commit(&c).await?;
        self.audit(
            ctx,
            if approve { "approve" } else { "reject" },
            &run,
            &call_id,
            serde_json::json!({"reason": reason}),
        )
        .await;
        if !approve {
            return CallOutcome::new(run, &call_id, false);
        }
        self.execute(ctx, run, &call_id, BTreeMap::new()).await
    }

    async fn body(&self, ctx: &Ctx, run: Run) -> Result<StateBody> {
        let sandbox = match &run.sandbox {
            Some(s) => {
                let rec = self.manager.get(ctx, &SandboxId::parse(s)?).await?;
                Some(SandboxBinding {
                    id: s.clone(),
                    manifest_digest: rec.manifest_digest,
                })
            }
            None => None,
        };
        Ok(StateBody {
            backend_id: BACKEND_ID.into(),
            pending_approvals: run
                .pending_approvals()
                .iter()
                .map(|a| a.call.clone())
                .collect(),
            run,
            sandbox,
            issued_at_ms: now_ms(),
        })
    }

    /// The signed, versioned RunState document.
    pub async fn state(&self, ctx: &Ctx, id: &str) -> Result<StateDocument> {
        let run = self.get(ctx, id).await?;
        Ok(sign_state(&self.body(ctx, run).await?, &self.key))
    }

    /// Rehydrate from a document a client kept: verify its MAC and version,
    /// its tenant, that it matches the recorded run, which approvals still
    /// stand, and the sandbox as it is now (exists, same tenant, usable; the
    /// manifest in force now is the one that applies).
    ///
    /// With `rebind`, the run moves to that sandbox first (same tenant, alive;
    /// typically one restored from a snapshot, with the manifest given at
    /// restore): held calls then run there, under *its* manifest and env.
    pub async fn resume(
        &self,
        ctx: &Ctx,
        doc: &serde_json::Value,
        rebind: Option<String>,
    ) -> Result<ResumeReport> {
        let body = verify_state(doc, &self.key)?;
        if body.run.tenant != ctx.tenant.as_str() {
            // Another tenant's document is indistinguishable from an unknown run.
            return Err(Error::not_found(format!("run {}", body.run.id)));
        }
        let mut run = self.get(ctx, &body.run.id).await?;
        // The sandbox of a run changes only through a recorded step, so the
        // history check below also covers the sandbox binding.
        let diverged = body.run.steps.len() > run.steps.len()
            || body.run.steps.iter().zip(&run.steps).any(|(a, b)| {
                a.seq != b.seq || a.kind != b.kind || a.call != b.call || a.at_ms != b.at_ms
            });
        if diverged {
            return Err(Error::state(
                "run state document does not match the recorded history of the run",
            ));
        }
        let mut still_pending = Vec::new();
        let mut decided_since = Vec::new();
        for call in &body.pending_approvals {
            let now_pending = run
                .approvals
                .iter()
                .any(|a| &a.call == call && a.decision.is_none());
            if now_pending {
                still_pending.push(call.clone());
            } else {
                decided_since.push(call.clone());
            }
        }
        let mut rebound_from = None;
        if let Some(new_sb) = rebind {
            self.check_sandbox(ctx, &new_sb).await?;
            let lock = self.lock_of(&run.id);
            let _g = lock.lock().await;
            let cur = self.get(ctx, &run.id).await?;
            if cur.sandbox.as_deref() != Some(new_sb.as_str()) {
                rebound_from = cur.sandbox.clone();
                let c = cur.rebind(&new_sb, &ctx.actor, now_ms())?;
                run = self.commit(&c).await?;
            } else {
                run = cur;
            }
        }
        let sandbox = match (&run.sandbox, &body.sandbox) {
            (Some(s), bound) => {
                let rec = self.check_sandbox(ctx, s).await.map_err(|e| {
                    e.context(format!(
                        "the sandbox of run {} cannot continue it (restore a snapshot into a new sandbox and resume with {{document, sandbox}})",
                        run.id
                    ))
                })?;
                let in_state = bound
                    .as_ref()
                    .map(|b| b.manifest_digest.clone())
                    .unwrap_or_default();
                Some(SandboxCheck {
                    rebound_from: rebound_from.clone(),
                    id: s.clone(),
                    state: rec.state.to_string(),
                    manifest_changed: in_state != rec.manifest_digest,
                    manifest_digest: rec.manifest_digest,
                    manifest_digest_in_state: in_state,
                })
            }
            (None, _) => None,
        };
        let entry = NewAuditEntry {
            tenant: ctx.tenant.clone(),
            actor: ctx.actor.clone(),
            action: "resume".into(),
            target: run.id.clone(),
            detail: serde_json::json!({"kind": "run_state", "still_pending": still_pending,
                "decided_since": decided_since, "rebound_from": rebound_from, "sandbox": run.sandbox}),
        };
        if let Err(e) = self.manager.meta().audit(entry).await {
            warn!(error = %e, "audit append failed");
        }
        let state = sign_state(&self.body(ctx, run.clone()).await?, &self.key);
        Ok(ResumeReport {
            run,
            still_pending,
            decided_since,
            sandbox,
            state,
        })
    }
}
