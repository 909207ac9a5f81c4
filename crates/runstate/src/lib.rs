//! Run state of an agent workflow, as stasis records it.
//!
//! A [`Run`] belongs to a tenant and optionally to a sandbox. It is an ordered
//! list of [`Step`]s (model step, tool call requested, tool call result,
//! handover, waiting for approval, approved, rejected, completed, failed),
//! the [`ToolCall`]s it made (each with an idempotency key and a state), and
//! the [`Approval`]s a human gave or still owes.
//!
//! This crate is pure logic: every operation on a run is checked against the
//! state machine here and produces a [`Change`], which the metadata layer
//! writes in one transaction (compare-and-set on the statuses it read) and
//! [`Run::apply`] replays in memory. Nothing here does I/O except
//! [`RunKey::load_or_create`].
//!
//! Tool call states:
//!
//! ```text
//! awaiting_approval --approve--> intent_recorded --> succeeded | failed
//!         \--reject--> rejected          \--(crash between intent and result)--> outcome_unknown_needs_review
//! ```
//!
//! A retry with the same idempotency key never runs the call again: it gets
//! the recorded result, or "outcome unknown, needs review" when the intent was
//! recorded and the result never was (see [`retry_outcome`]).
//!
//! The signed RunState document is in [`doc`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use stasis_core::{Error, ErrorCode, Result};

pub mod doc;
mod key;

pub use doc::{sign_state, verify_state, StateBody, StateDocument, FORMAT, STATE_VERSION};
pub use key::RunKey;

// ----- ids -----------------------------------------------------------------

fn gen_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// `run-` + 32 hex digits.
pub fn new_run_id() -> String {
    gen_id("run-")
}

/// `call-` + 32 hex digits.
pub fn new_call_id() -> String {
    gen_id("call-")
}

/// Validate an id from outside (run or call): a safe alphabet, the right prefix.
pub fn check_id(kind: &str, prefix: &str, s: &str) -> Result<()> {
    stasis_core::id::validate_id(kind, s)?;
    if !s.starts_with(prefix) {
        return Err(Error::invalid(format!(
            "invalid {kind} id {s:?}: expected {prefix}..."
        )));
    }
    Ok(())
}

/// Idempotency keys: 1-200 visible ASCII characters.
pub fn check_idempotency_key(k: &str) -> Result<()> {
    if k.is_empty() || k.len() > 200 || !k.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            Error::invalid("idempotency_key must be 1-200 visible ASCII characters")
                .with_field("idempotency_key"),
        );
    }
    Ok(())
}

// ----- statuses --------------------------------------------------------------

macro_rules! str_enum {
    ($(#[$m:meta])* $name:ident { $($v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($v),+ }

        // Serialized as `as_str` names, so the wire, the database and the
        // step data all use one spelling.
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(&s).map_err(|e| serde::de::Error::custom(e.message))
            }
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
            pub fn parse(s: &str) -> Result<Self> {
                match s {
                    $($s => Ok($name::$v),)+
                    _ => Err(Error::invalid(format!(
                        concat!("unknown ", stringify!($name), " {:?}"), s
                    ))),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

str_enum!(
    /// Where a run stands.
    RunStatus {
        Running = "running",
        WaitingApproval = "waiting_approval",
        Completed = "completed",
        Failed = "failed",
    }
);

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Completed | RunStatus::Failed)
    }

    /// Legal run status changes (staying put is always legal for a live run).
    pub fn check_transition(self, to: RunStatus) -> Result<()> {
        use RunStatus::*;
        let ok = match (self, to) {
            (Completed | Failed, _) => false,
            (a, b) if a == b => true,
            (Running, WaitingApproval | Completed | Failed) => true,
            (WaitingApproval, Running | Failed) => true,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::state(format!("run cannot go from {self} to {to}")))
        }
    }
}

str_enum!(
    /// Kinds of steps in a run's ordered history.
    StepKind {
        ModelStep = "model_step",
        ToolCallRequested = "tool_call_requested",
        ToolCallResult = "tool_call_result",
        Handover = "handover",
        WaitingForApproval = "waiting_for_approval",
        Approved = "approved",
        Rejected = "rejected",
        Completed = "completed",
        Failed = "failed",
    }
);

str_enum!(
    /// Where a tool call stands.
    CallState {
        AwaitingApproval = "awaiting_approval",
        IntentRecorded = "intent_recorded",
        Succeeded = "succeeded",
        Failed = "failed",
        Rejected = "rejected",
        OutcomeUnknown = "outcome_unknown_needs_review",
    }
);

impl CallState {
    /// The call has a final recorded outcome (nothing will run it again).
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            CallState::Succeeded
                | CallState::Failed
                | CallState::Rejected
                | CallState::OutcomeUnknown
        )
    }

    pub fn check_transition(self, to: CallState) -> Result<()> {
        use CallState::*;
        let ok = matches!(
            (self, to),
            (AwaitingApproval, IntentRecorded)
                | (AwaitingApproval, Rejected)
                | (IntentRecorded, Succeeded)
                | (IntentRecorded, Failed)
                | (IntentRecorded, OutcomeUnknown)
        );
        if ok {
            Ok(())
        } else {
            Err(Error::state(format!(
                "tool call cannot go from {self} to {to}"
            )))
        }
    }
}

// ----- records ---------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// 1, 2, 3, ... within the run.
    pub seq: i64,
    pub kind: StepKind,
    pub at_ms: i64,
    /// Who caused it (the API caller's actor, or "system").
    pub actor: String,
    /// The tool call it concerns, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// Free-form data (model step content, handover target, decision reason, result summary).
    #[serde(default)]
    pub data: serde_json::Value,
}

/// What a tool call asks for. Only `exec` exists for now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    pub kind: String,
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    pub timeout_ms: u64,
    /// Names of the environment variables the request set. Their values are
    /// used for an immediate exec only and never recorded.
    #[serde(default)]
    pub env_names: Vec<String>,
    pub side_effecting: bool,
    pub requires_approval: bool,
}

impl CallSpec {
    /// Stable digest of what the call does: a retry with the same key must
    /// ask for the same thing.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let canon = doc::canonical_json(&serde_json::to_value(self).expect("spec serializes"));
        hex::encode(sha2::Sha256::digest(canon.as_bytes()))
    }

    pub fn validate(&self) -> Result<()> {
        if self.kind != "exec" {
            return Err(Error::invalid(format!(
                "unknown tool call kind {:?} (only \"exec\")",
                self.kind
            ))
            .with_field("kind"));
        }
        stasis_core::exec::check_argv(&self.argv)?;
        stasis_core::exec::check_timeout_ms(self.timeout_ms)?;
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub id: String,
    pub idempotency_key: String,
    pub spec: CallSpec,
    pub fingerprint: String,
    pub state: CallState,
    /// The recorded result (exec: exit code and output) once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why it failed or why its outcome is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub approved: bool,
    pub by: String,
    pub at_ms: i64,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    pub call: String,
    pub requested_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Run {
    pub id: String,
    pub tenant: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    pub status: RunStatus,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default)]
    pub approvals: Vec<Approval>,
}

/// A call's state change inside a [`Change`]: compare-and-set on `from`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallUpdate {
    pub call: String,
    pub from: CallState,
    pub to: CallState,
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// One atomic transition of a run, to be persisted as a unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub run: String,
    pub at_ms: i64,
    /// Status the run must still be in (compare-and-set).
    pub from_status: RunStatus,
    pub to_status: RunStatus,
    pub steps: Vec<Step>,
    pub new_call: Option<ToolCall>,
    pub call_update: Option<CallUpdate>,
    pub new_approval: Option<Approval>,
    pub decision: Option<(String, Decision)>,
    /// Bind the run to another sandbox: (expected current, new).
    pub rebind: Option<(Option<String>, String)>,
}

/// What a request with an idempotency key that already exists gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// The call has a recorded outcome (or is held / rejected): return it, run nothing.
    Recorded,
    /// Intent recorded and the call is executing right now in this daemon.
    InProgress,
    /// Intent recorded, no result, nothing executing it: a crash happened in
    /// between. Mark it `outcome_unknown_needs_review`; never re-run it.
    MarkOutcomeUnknown,
}

/// Decide what a retry of `existing` gets. `spec` is the retry's request;
/// reusing a key for a different call is refused.
pub fn retry_outcome(
    existing: &ToolCall,
    spec: &CallSpec,
    in_flight: bool,
) -> Result<RetryOutcome> {
    if existing.fingerprint != spec.fingerprint() {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            format!(
                "idempotency key {:?} was already used for a different tool call ({})",
                existing.idempotency_key, existing.id
            ),
        )
        .with_field("idempotency_key"));
    }
    Ok(match existing.state {
        CallState::IntentRecorded if in_flight => RetryOutcome::InProgress,
        CallState::IntentRecorded => RetryOutcome::MarkOutcomeUnknown,
        _ => RetryOutcome::Recorded,
    })
}

impl Run {
    pub fn new(id: String, tenant: String, sandbox: Option<String>, at_ms: i64) -> Run {
        Run {
            id,
            tenant,
            sandbox,
            status: RunStatus::Running,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
            steps: Vec::new(),
            tool_calls: Vec::new(),
            approvals: Vec::new(),
        }
    }

    pub fn call(&self, id: &str) -> Option<&ToolCall> {
        self.tool_calls.iter().find(|c| c.id == id)
    }

    pub fn call_by_key(&self, key: &str) -> Option<&ToolCall> {
        self.tool_calls.iter().find(|c| c.idempotency_key == key)
    }

    /// A call by id, or by idempotency key.
    pub fn find_call(&self, id_or_key: &str) -> Option<&ToolCall> {
        self.call(id_or_key).or_else(|| self.call_by_key(id_or_key))
    }

    /// Calls still waiting for a human decision.
    pub fn pending_approvals(&self) -> Vec<&Approval> {
        self.approvals
            .iter()
            .filter(|a| a.decision.is_none())
            .collect()
    }

    fn change(&self, at_ms: i64) -> Change {
        Change {
            run: self.id.clone(),
            at_ms,
            from_status: self.status,
            to_status: self.status,
            steps: Vec::new(),
            new_call: None,
            call_update: None,
            new_approval: None,
            decision: None,
            rebind: None,
        }
    }

    fn step(
        &self,
        c: &Change,
        kind: StepKind,
        actor: &str,
        call: Option<&str>,
        data: serde_json::Value,
    ) -> Step {
        Step {
            seq: self.steps.len() as i64 + c.steps.len() as i64 + 1,
            kind,
            at_ms: c.at_ms,
            actor: actor.to_string(),
            call: call.map(str::to_string),
            data,
        }
    }

    fn live(&self) -> Result<()> {
        if self.status.is_terminal() {
            return Err(Error::state(format!("run {} is {}", self.id, self.status)));
        }
        Ok(())
    }

    /// A model step or a handover: history only.
    pub fn note(
        &self,
        kind: StepKind,
        actor: &str,
        data: serde_json::Value,
        at_ms: i64,
    ) -> Result<Change> {
        if !matches!(kind, StepKind::ModelStep | StepKind::Handover) {
            return Err(Error::invalid(format!(
                "only model_step and handover can be appended directly, not {kind}"
            ))
            .with_field("kind"));
        }
        self.live()?;
        let mut c = self.change(at_ms);
        let s = self.step(&c, kind, actor, None, data);
        c.steps.push(s);
        Ok(c)
    }

    /// Record a new tool call. Without approval the intent is recorded (the
    /// caller executes it next and records the result); with approval the
    /// call is held and the run waits.
    pub fn request_call(
        &self,
        call_id: String,
        key: &str,
        spec: CallSpec,
        actor: &str,
        at_ms: i64,
    ) -> Result<Change> {
        self.live()?;
        check_idempotency_key(key)?;
        spec.validate()?;
        if self.call_by_key(key).is_some() {
            return Err(Error::state(format!(
                "idempotency key {key:?} already exists in run {}",
                self.id
            )));
        }
        if let Some(c) = self
            .tool_calls
            .iter()
            .find(|c| c.state == CallState::IntentRecorded)
        {
            return Err(Error::new(
                ErrorCode::Busy,
                format!("tool call {} of run {} is still executing", c.id, self.id),
            ));
        }
        let mut c = self.change(at_ms);
        let state = if spec.requires_approval {
            CallState::AwaitingApproval
        } else {
            CallState::IntentRecorded
        };
        let summary = serde_json::json!({
            "idempotency_key": key,
            "kind": spec.kind,
            "argv": spec.argv,
            "side_effecting": spec.side_effecting,
            "requires_approval": spec.requires_approval,
        });
        let s = self.step(
            &c,
            StepKind::ToolCallRequested,
            actor,
            Some(&call_id),
            summary,
        );
        c.steps.push(s);
        if spec.requires_approval {
            let s = self.step(
                &c,
                StepKind::WaitingForApproval,
                actor,
                Some(&call_id),
                serde_json::Value::Null,
            );
            c.steps.push(s);
            c.to_status = RunStatus::WaitingApproval;
            c.new_approval = Some(Approval {
                call: call_id.clone(),
                requested_at_ms: at_ms,
                decision: None,
            });
        }
        c.new_call = Some(ToolCall {
            id: call_id,
            idempotency_key: key.to_string(),
            fingerprint: spec.fingerprint(),
            spec,
            state,
            result: None,
            error: None,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
        });
        self.status.check_transition(c.to_status)?;
        Ok(c)
    }

    /// Record the outcome of a call whose intent was recorded.
    pub fn record_result(
        &self,
        call_id: &str,
        outcome: std::result::Result<serde_json::Value, String>,
        actor: &str,
        at_ms: i64,
    ) -> Result<Change> {
        let call = self
            .call(call_id)
            .ok_or_else(|| Error::not_found(format!("tool call {call_id}")))?;
        let (to, result, error) = match outcome {
            Ok(v) => (CallState::Succeeded, Some(v), None),
            Err(e) => (CallState::Failed, None, Some(e)),
        };
        call.state.check_transition(to)?;
        let mut c = self.change(at_ms);
        let data = serde_json::json!({
            "state": to,
            "exit_code": result.as_ref().and_then(|r| r.get("exit_code")).cloned(),
            "error": error,
        });
        let s = self.step(&c, StepKind::ToolCallResult, actor, Some(call_id), data);
        c.steps.push(s);
        c.call_update = Some(CallUpdate {
            call: call_id.to_string(),
            from: call.state,
            to,
            result,
            error,
        });
        Ok(c)
    }

    /// A call whose intent was recorded and whose result never was: it may or
    /// may not have happened. It is never re-run; a human has to look.
    pub fn mark_outcome_unknown(&self, call_id: &str, why: &str, at_ms: i64) -> Result<Change> {
        let call = self
            .call(call_id)
            .ok_or_else(|| Error::not_found(format!("tool call {call_id}")))?;
        call.state.check_transition(CallState::OutcomeUnknown)?;
        let mut c = self.change(at_ms);
        let data = serde_json::json!({"state": CallState::OutcomeUnknown, "error": why});
        let s = self.step(&c, StepKind::ToolCallResult, "system", Some(call_id), data);
        c.steps.push(s);
        c.call_update = Some(CallUpdate {
            call: call_id.to_string(),
            from: call.state,
            to: CallState::OutcomeUnknown,
            result: None,
            error: Some(why.to_string()),
        });
        Ok(c)
    }

    /// A human decision on a held call. Approve records the decision *and*
    /// the intent (the caller executes next); reject settles the call. The
    /// run goes back to running once no approval is pending.
    pub fn decide(
        &self,
        call_id: &str,
        approved: bool,
        by: &str,
        reason: &str,
        at_ms: i64,
    ) -> Result<Change> {
        self.live()?;
        let call = self
            .call(call_id)
            .ok_or_else(|| Error::not_found(format!("tool call {call_id}")))?;
        let approval = self
            .approvals
            .iter()
            .find(|a| a.call == call_id)
            .ok_or_else(|| {
                Error::state(format!("tool call {call_id} does not require approval"))
            })?;
        if let Some(d) = &approval.decision {
            return Err(Error::state(format!(
                "tool call {call_id} was already {} by {}",
                if d.approved { "approved" } else { "rejected" },
                d.by
            )));
        }
        let to = if approved {
            CallState::IntentRecorded
        } else {
            CallState::Rejected
        };
        call.state.check_transition(to)?;
        let mut c = self.change(at_ms);
        let kind = if approved {
            StepKind::Approved
        } else {
            StepKind::Rejected
        };
        let s = self.step(
            &c,
            kind,
            by,
            Some(call_id),
            serde_json::json!({"by": by, "reason": reason}),
        );
        c.steps.push(s);
        c.decision = Some((
            call_id.to_string(),
            Decision {
                approved,
                by: by.to_string(),
                at_ms,
                reason: reason.to_string(),
            },
        ));
        c.call_update = Some(CallUpdate {
            call: call_id.to_string(),
            from: call.state,
            to,
            result: None,
            error: (!approved).then(|| format!("rejected by {by}: {reason}")),
        });
        let still_pending = self
            .pending_approvals()
            .iter()
            .filter(|a| a.call != call_id)
            .count();
        if still_pending == 0 {
            c.to_status = RunStatus::Running;
        }
        self.status.check_transition(c.to_status)?;
        Ok(c)
    }

    /// End the run. Completing is refused while approvals are pending or a
    /// call is executing; failing is always possible for a live run.
    pub fn finish(
        &self,
        ok: bool,
        actor: &str,
        data: serde_json::Value,
        at_ms: i64,
    ) -> Result<Change> {
        self.live()?;
        if ok {
            if !self.pending_approvals().is_empty() {
                return Err(Error::state(format!(
                    "run {} has pending approvals; decide them first",
                    self.id
                )));
            }
            if let Some(c) = self
                .tool_calls
                .iter()
                .find(|c| c.state == CallState::IntentRecorded)
            {
                return Err(Error::state(format!(
                    "tool call {} is still executing",
                    c.id
                )));
            }
        }
        let mut c = self.change(at_ms);
        let (kind, to) = if ok {
            (StepKind::Completed, RunStatus::Completed)
        } else {
            (StepKind::Failed, RunStatus::Failed)
        };
        let s = self.step(&c, kind, actor, None, data);
        c.steps.push(s);
        c.to_status = to;
        self.status.check_transition(to)?;
        Ok(c)
    }

    /// Move the run to another sandbox (e.g. one restored from a snapshot
    /// after the original was lost). Recorded as a handover step; held calls
    /// will run in the new sandbox, under its manifest.
    pub fn rebind(&self, sandbox: &str, actor: &str, at_ms: i64) -> Result<Change> {
        self.live()?;
        if let Some(c) = self
            .tool_calls
            .iter()
            .find(|c| c.state == CallState::IntentRecorded)
        {
            return Err(Error::state(format!(
                "tool call {} is still executing",
                c.id
            )));
        }
        let mut c = self.change(at_ms);
        let s = self.step(
            &c,
            StepKind::Handover,
            actor,
            None,
            serde_json::json!({"sandbox_from": self.sandbox, "sandbox_to": sandbox}),
        );
        c.steps.push(s);
        c.rebind = Some((self.sandbox.clone(), sandbox.to_string()));
        Ok(c)
    }

    /// Replay a change in memory (what the metadata layer persists).
    pub fn apply(&mut self, c: &Change) -> Result<()> {
        if c.run != self.id {
            return Err(Error::internal("change for another run"));
        }
        if c.from_status != self.status {
            return Err(Error::state(format!(
                "run {} is {}, expected {}",
                self.id, self.status, c.from_status
            )));
        }
        self.status.check_transition(c.to_status)?;
        for (i, s) in c.steps.iter().enumerate() {
            if s.seq != self.steps.len() as i64 + 1 + i as i64 {
                return Err(Error::state("steps out of sequence"));
            }
        }
        if let Some(u) = &c.call_update {
            let call = self
                .tool_calls
                .iter_mut()
                .find(|x| x.id == u.call)
                .ok_or_else(|| Error::not_found(format!("tool call {}", u.call)))?;
            if call.state != u.from {
                return Err(Error::state(format!(
                    "tool call {} is {}, expected {}",
                    u.call, call.state, u.from
                )));
            }
            u.from.check_transition(u.to)?;
            call.state = u.to;
            if u.result.is_some() {
                call.result = u.result.clone();
            }
            if u.error.is_some() {
                call.error = u.error.clone();
            }
            call.updated_at_ms = c.at_ms;
        }
        if let Some(n) = &c.new_call {
            self.tool_calls.push(n.clone());
        }
        if let Some(a) = &c.new_approval {
            self.approvals.push(a.clone());
        }
        if let Some((call, d)) = &c.decision {
            let a = self
                .approvals
                .iter_mut()
                .find(|a| &a.call == call)
                .ok_or_else(|| Error::not_found(format!("approval for {call}")))?;
            a.decision = Some(d.clone());
        }
        if let Some((from, to)) = &c.rebind {
            if &self.sandbox != from {
                return Err(Error::state("run was rebound concurrently"));
            }
            self.sandbox = Some(to.clone());
        }
        self.steps.extend(c.steps.iter().cloned());
        self.status = c.to_status;
        self.updated_at_ms = c.at_ms;
        Ok(())
    }

    /// Names of every environment variable any call set (values are never kept).
    pub fn env_names(&self) -> BTreeSet<&str> {
        self.tool_calls
            .iter()
            .flat_map(|c| c.spec.env_names.iter().map(String::as_str))
            .collect()
    }
}

#[cfg(test)]
mod tests;
