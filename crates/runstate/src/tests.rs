use super::*;
use serde_json::json;

fn spec(argv: &[&str], approval: bool) -> CallSpec {
    CallSpec {
        kind: "exec".into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: None,
        timeout_ms: 1000,
        env_names: vec!["API_TOKEN".into()],
        side_effecting: true,
        requires_approval: approval,
    }
}

fn run() -> Run {
    Run::new(new_run_id(), "t-a".into(), Some("sb-x".into()), 1)
}

macro_rules! apply {
    ($r:ident, $e:expr $(,)?) => {{
        let c: Change = $e.unwrap();
        $r.apply(&c).unwrap();
        c
    }};
}

#[test]
fn ids_and_keys_are_checked() {
    assert!(check_id("run", "run-", &new_run_id()).is_ok());
    assert!(check_id("run", "run-", "call-1").is_err());
    assert!(check_id("run", "run-", "run-../x").is_err());
    assert!(check_idempotency_key("send-mail-1").is_ok());
    assert!(check_idempotency_key("").is_err());
    assert!(check_idempotency_key("has space").is_err());
}

#[test]
fn call_without_approval_intent_then_result() {
    let mut r = run();
    apply!(
        r,
        r.note(StepKind::ModelStep, "agent", json!({"text": "hi"}), 2)
    );
    let call = new_call_id();
    let c = apply!(
        r,
        r.request_call(call.clone(), "k1", spec(&["echo", "x"], false), "agent", 3),
    );
    assert_eq!(
        c.new_call.as_ref().unwrap().state,
        CallState::IntentRecorded
    );
    assert_eq!(r.status, RunStatus::Running);
    // A second call cannot start while one is executing.
    let e = r
        .request_call(new_call_id(), "k2", spec(&["true"], false), "agent", 4)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Busy);
    apply!(
        r,
        r.record_result(&call, Ok(json!({"exit_code": 0})), "agent", 5),
    );
    assert_eq!(r.call(&call).unwrap().state, CallState::Succeeded);
    // Results are recorded once.
    assert!(r.record_result(&call, Ok(json!({})), "agent", 6).is_err());
    let kinds: Vec<StepKind> = r.steps.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        vec![
            StepKind::ModelStep,
            StepKind::ToolCallRequested,
            StepKind::ToolCallResult
        ]
    );
    assert_eq!(
        r.steps.iter().map(|s| s.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    apply!(r, r.finish(true, "agent", json!(null), 7));
    assert_eq!(r.status, RunStatus::Completed);
    // Nothing happens to a finished run.
    assert!(r.note(StepKind::ModelStep, "a", json!(1), 8).is_err());
    assert!(r
        .request_call(new_call_id(), "k3", spec(&["true"], false), "a", 8)
        .is_err());
}

#[test]
fn only_model_steps_and_handovers_are_free_notes() {
    let r = run();
    assert!(r
        .note(StepKind::Handover, "a", json!({"to": "b"}), 2)
        .is_ok());
    assert!(r.note(StepKind::Approved, "a", json!(null), 2).is_err());
    assert!(r.note(StepKind::Completed, "a", json!(null), 2).is_err());
}

#[test]
fn approval_holds_the_run_then_approve_or_reject() {
    let mut r = run();
    let a = new_call_id();
    let b = new_call_id();
    apply!(
        r,
        r.request_call(a.clone(), "ka", spec(&["send"], true), "agent", 2)
    );
    assert_eq!(r.status, RunStatus::WaitingApproval);
    assert_eq!(r.call(&a).unwrap().state, CallState::AwaitingApproval);
    apply!(
        r,
        r.request_call(b.clone(), "kb", spec(&["send2"], true), "agent", 3)
    );
    assert_eq!(r.pending_approvals().len(), 2);
    // Cannot complete with pending approvals.
    assert!(r.finish(true, "agent", json!(null), 4).is_err());
    // Approve a: the run still waits for b.
    apply!(r, r.decide(&a, true, "alice", "looks fine", 5));
    assert_eq!(r.status, RunStatus::WaitingApproval);
    assert_eq!(r.call(&a).unwrap().state, CallState::IntentRecorded);
    // Twice: refused.
    let e = r.decide(&a, false, "bob", "no", 6).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    // Reject b: run continues.
    apply!(r, r.decide(&b, false, "bob", "too risky", 7));
    assert_eq!(r.status, RunStatus::Running);
    assert_eq!(r.call(&b).unwrap().state, CallState::Rejected);
    let rej = r
        .steps
        .iter()
        .find(|s| s.kind == StepKind::Rejected)
        .unwrap();
    assert_eq!(rej.actor, "bob");
    assert_eq!(rej.data["reason"], "too risky");
    assert_eq!(rej.at_ms, 7);
    let d = r.approvals[1].decision.as_ref().unwrap();
    assert!(!d.approved);
    assert_eq!(d.by, "bob");
    // The approved call executes and records its result.
    apply!(
        r,
        r.record_result(&a, Ok(json!({"exit_code": 0})), "alice", 8)
    );
    assert_eq!(r.call(&a).unwrap().state, CallState::Succeeded);
    // A call that needs no approval cannot be "approved".
    let c = new_call_id();
    apply!(
        r,
        r.request_call(c.clone(), "kc", spec(&["x"], false), "agent", 9)
    );
    assert!(r.decide(&c, true, "alice", "", 10).is_err());
}

#[test]
fn idempotency_rules() {
    let mut r = run();
    let call = new_call_id();
    let s = spec(&["sh", "-c", "echo sent >> outbox"], false);
    apply!(
        r,
        r.request_call(call.clone(), "send-1", s.clone(), "agent", 2)
    );
    let existing = r.call_by_key("send-1").unwrap().clone();
    // Same key, same request, while executing here: in progress.
    assert_eq!(
        retry_outcome(&existing, &s, true).unwrap(),
        RetryOutcome::InProgress
    );
    // Same key, nothing executing it (daemon restarted): outcome unknown.
    assert_eq!(
        retry_outcome(&existing, &s, false).unwrap(),
        RetryOutcome::MarkOutcomeUnknown
    );
    // Same key, different call: refused.
    let other = spec(&["sh", "-c", "rm -rf /"], false);
    let e = retry_outcome(&existing, &other, false).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("idempotency_key"));
    // A fresh request with a used key is refused at the state machine too.
    assert!(r
        .request_call(new_call_id(), "send-1", s.clone(), "agent", 3)
        .is_err());
    // Outcome unknown is final: no result can be recorded afterwards.
    apply!(r, r.mark_outcome_unknown(&call, "daemon restarted", 4));
    let c = r.call(&call).unwrap();
    assert_eq!(c.state, CallState::OutcomeUnknown);
    assert_eq!(c.state.as_str(), "outcome_unknown_needs_review");
    assert!(r.record_result(&call, Ok(json!({})), "x", 5).is_err());
    assert_eq!(retry_outcome(c, &s, false).unwrap(), RetryOutcome::Recorded);
    // Env values never enter the fingerprint or the record; names do.
    assert_eq!(
        r.env_names().into_iter().collect::<Vec<_>>(),
        vec!["API_TOKEN"]
    );
}

#[test]
fn state_machine_tables() {
    use CallState::*;
    assert!(AwaitingApproval.check_transition(IntentRecorded).is_ok());
    assert!(AwaitingApproval.check_transition(Succeeded).is_err());
    assert!(IntentRecorded.check_transition(OutcomeUnknown).is_ok());
    assert!(OutcomeUnknown.check_transition(IntentRecorded).is_err());
    assert!(Succeeded.check_transition(Failed).is_err());
    assert!(Rejected.check_transition(IntentRecorded).is_err());
    use RunStatus as S;
    assert!(S::Running.check_transition(S::WaitingApproval).is_ok());
    assert!(S::WaitingApproval.check_transition(S::Completed).is_err());
    assert!(S::Completed.check_transition(S::Running).is_err());
    assert!(S::Failed.check_transition(S::Failed).is_err());
    // Stale changes are refused on apply (compare-and-set).
    let mut r = run();
    let c1 = r
        .request_call(new_call_id(), "k", spec(&["x"], true), "a", 2)
        .unwrap();
    let c2 = r.note(StepKind::ModelStep, "a", json!(1), 2).unwrap();
    r.apply(&c1).unwrap();
    assert!(r.apply(&c2).is_err());
}

fn signed(r: &Run, key: &RunKey) -> serde_json::Value {
    let body = StateBody {
        backend_id: doc::BACKEND_ID.into(),
        run: r.clone(),
        sandbox: Some(doc::SandboxBinding {
            id: "sb-x".into(),
            manifest_digest: "abc".into(),
        }),
        pending_approvals: r
            .pending_approvals()
            .iter()
            .map(|a| a.call.clone())
            .collect(),
        issued_at_ms: 9,
    };
    serde_json::to_value(sign_state(&body, key)).unwrap()
}

#[test]
fn hmac_detects_tampering() {
    let key = RunKey::generate();
    let mut r = run();
    let call = new_call_id();
    apply!(
        r,
        r.request_call(call.clone(), "k", spec(&["send"], true), "agent", 2)
    );
    let doc = signed(&r, &key);
    let body = verify_state(&doc, &key).unwrap();
    assert_eq!(body.run, r);
    assert_eq!(body.pending_approvals, vec![call.clone()]);

    // Key order does not matter (canonical JSON).
    let reordered: serde_json::Value = serde_json::from_str(&doc::canonical_json(&doc)).unwrap();
    assert!(verify_state(&reordered, &key).is_ok());

    // Any changed value is refused as an integrity error.
    for path in [
        "/state/run/status",
        "/state/run/tenant",
        "/state/run/tool_calls/0/spec/argv/0",
        "/state/pending_approvals/0",
        "/state/sandbox/manifest_digest",
    ] {
        let mut t = doc.clone();
        *t.pointer_mut(path).unwrap() = json!("running");
        let e = verify_state(&t, &key).unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError, "{path}");
    }
    // Removing a pending approval: refused.
    let mut t = doc.clone();
    t["state"]["pending_approvals"] = json!([]);
    assert_eq!(
        verify_state(&t, &key).unwrap_err().code,
        ErrorCode::IntegrityError
    );
    // A flipped mac, a missing mac.
    let mut t = doc.clone();
    let m = t["mac"].as_str().unwrap().to_string();
    let flipped = if m.starts_with('0') { "1" } else { "0" };
    t["mac"] = json!(format!("{flipped}{}", &m[1..]));
    assert_eq!(
        verify_state(&t, &key).unwrap_err().code,
        ErrorCode::IntegrityError
    );
    let mut t = doc.clone();
    t.as_object_mut().unwrap().remove("mac");
    assert!(verify_state(&t, &key).is_err());
    // Another key.
    let e = verify_state(&doc, &RunKey::generate()).unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError);
    // Unknown version / format: refused before the MAC, naming the field.
    let mut t = doc.clone();
    t["version"] = json!(2);
    let e = verify_state(&t, &key).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("version"));
    let mut t = doc.clone();
    t["format"] = json!("other");
    assert_eq!(
        verify_state(&t, &key).unwrap_err().field.as_deref(),
        Some("format")
    );
    // An extra field, even with a recomputed-looking structure, is refused.
    let mut t = doc.clone();
    t["state"]["extra"] = json!(1);
    assert!(verify_state(&t, &key).is_err());
}

#[test]
fn state_document_has_no_env_values() {
    // The spec records env names only; the type has no place for values.
    let key = RunKey::generate();
    let mut r = run();
    apply!(
        r,
        r.request_call(new_call_id(), "k", spec(&["x"], true), "a", 2)
    );
    let text = serde_json::to_string(&signed(&r, &key)).unwrap();
    assert!(text.contains("API_TOKEN"));
    assert!(!text.contains("env\":{"));
}

#[test]
fn key_file_is_created_0600_and_reused() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("runstate.key");
    let k1 = RunKey::load_or_create(&p).unwrap();
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let k2 = RunKey::load_or_create(&p).unwrap();
    assert_eq!(k1.id(), k2.id());
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(RunKey::load_or_create(&p).is_err());
}

#[test]
fn rebind_moves_the_run_and_is_recorded() {
    let mut r = run();
    let held = new_call_id();
    apply!(
        r,
        r.request_call(held.clone(), "k", spec(&["x"], true), "a", 2)
    );
    let c = apply!(r, r.rebind("sb-new", "agent", 3));
    assert_eq!(r.sandbox.as_deref(), Some("sb-new"));
    assert_eq!(c.rebind, Some((Some("sb-x".into()), "sb-new".into())));
    let last = r.steps.last().unwrap();
    assert_eq!(last.kind, StepKind::Handover);
    assert_eq!(last.data["sandbox_from"], "sb-x");
    // Still waiting for the same approval.
    assert_eq!(r.pending_approvals().len(), 1);
    // Not while a call is executing.
    apply!(r, r.decide(&held, true, "alice", "ok", 4));
    assert!(r.rebind("sb-other", "agent", 5).is_err());
}
