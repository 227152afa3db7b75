//! A request with `single_event` is audited with exactly one event, whatever happens to it,
//! and that event carries what the events it replaces said.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{echo, governor, returns};
use capability_policy::audit::MemorySink;
use capability_policy::intercept::InterceptError;
use capability_policy::*;
use serde_json::{Value, json};

fn req(name: &str, input: Value) -> InterceptRequest {
    InterceptRequest::new(name, ActionType::McpToolCall, input).single_event(true)
}

fn setup() -> (Governor, std::sync::Arc<MemorySink>) {
    let (g, sink) = governor("agent", Environment::Prod);
    for name in ["t", "other"] {
        g.register_capability(GovernedCapability::new(name, CapabilityKind::McpTool));
    }
    (g, sink)
}

#[test]
fn an_allowed_call_is_one_executed_event_with_its_before_decision() {
    let (g, sink) = setup();
    g.policies().register(
        Policy::before("t", |_| Decision::allow().with_reason("fine")).with_id("allow-t"),
    );
    let r = g.intercept(req("t", json!({"a": 1})), echo).unwrap();
    let events = sink.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(r.events, [events[0].event_id.clone()]);
    let e = &events[0];
    assert_eq!(e.outcome, AuditOutcome::Executed);
    assert_eq!(e.policy_ids, ["allow-t"]);
    assert_eq!(e.metadata["decisions"]["before"]["decision"], "allow");
    assert_eq!(e.metadata["decisions"]["before"]["reason"], "fine");
    assert!(e.metadata["decisions"].get("after").is_none());
    // Without the flag: allowed, then executed.
    g.intercept(req("t", json!({})).single_event(false), echo)
        .unwrap();
    let outcomes: Vec<AuditOutcome> = sink.events()[1..].iter().map(|e| e.outcome).collect();
    assert_eq!(outcomes, [AuditOutcome::Allowed, AuditOutcome::Executed]);
}

#[test]
fn refusals_and_failures_are_one_event_each() {
    let (g, sink) = setup();
    g.policies().register(
        Policy::before("t", |ctx| {
            if ctx.action.input["deny"] == json!(true) {
                Decision::deny("no")
            } else if ctx.action.input["ask"] == json!(true) {
                Decision::approval_required("ask a human")
            } else {
                Decision::allow()
            }
        })
        .with_id("gate"),
    );
    let denied = g.intercept(req("t", json!({"deny": true})), echo);
    assert!(matches!(denied, Err(InterceptError::Denied(_))));
    let ask = g.intercept(req("t", json!({"ask": true})), echo);
    assert!(matches!(ask, Err(InterceptError::ApprovalRequired { .. })));
    let failed: Result<_, InterceptError<String>> = g.intercept(req("t", json!({})), |e| {
        e.note("latencyUs", json!(7));
        Err("upstream exited".to_string())
    });
    assert!(matches!(failed, Err(InterceptError::Execution { .. })));
    let outcomes: Vec<AuditOutcome> = sink.events().iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes,
        [
            AuditOutcome::DeniedBeforeExecution,
            AuditOutcome::ApprovalRequired,
            AuditOutcome::ExecutionFailed,
        ]
    );
    let failed = &sink.events()[2];
    assert_eq!(failed.metadata["latencyUs"], 7);
    assert_eq!(failed.metadata["error_message"], "upstream exited");
    assert_eq!(
        failed.metadata["decisions"]["before"]["policyIds"],
        json!(["gate"])
    );
}

#[test]
fn shadow_redaction_after_stage_and_route_are_kept_in_the_one_event() {
    let (g, sink) = setup();
    g.policies()
        .register(Policy::before("t", |_| Decision::deny("not yet")).with_id("new-rule"));
    g.policies().set_shadow_mode(true);
    g.intercept(req("t", json!({})), returns(json!({"x": 1})))
        .unwrap();
    g.policies().set_shadow_mode(false);
    let events = sink.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].outcome, AuditOutcome::Executed);
    assert_eq!(events[0].shadow, Some(DecisionType::Deny));
    assert_eq!(events[0].metadata["shadow"]["reason"], "not yet");
    assert_eq!(events[0].metadata["decisions"]["before"]["shadow"], "deny");

    // Redaction at both stages: masked in the result and in the recorded input.
    let (g, sink) = setup();
    g.policies()
        .register(Policy::before("t", |_| Decision::redact(["/password"])).with_id("mask"));
    g.policies()
        .register(Policy::after("t", |_| Decision::redact(["/token"])).with_id("mask-out"));
    let mut r = req("t", json!({"password": "hunter2", "user": "al"}));
    r.record_input = true;
    let done = g
        .intercept(
            r,
            returns(json!({"password": "hunter2", "token": "tk", "ok": true})),
        )
        .unwrap();
    assert_eq!(done.output["password"], "[REDACTED]");
    assert_eq!(done.output["token"], "[REDACTED]");
    let events = sink.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e.input.as_ref().unwrap()["password"], "[REDACTED]");
    assert_eq!(e.input.as_ref().unwrap()["user"], "al");
    assert_eq!(e.policy_ids, ["mask", "mask-out"]);
    assert_eq!(e.metadata["decisions"]["before"]["decision"], "redact");
    assert_eq!(e.metadata["decisions"]["after"]["decision"], "redact");
    assert!(!serde_json::to_string(e).unwrap().contains("hunter2"));

    // An after-stage denial and a route: still one event each.
    let (g, sink) = setup();
    g.policies()
        .register(Policy::before("t", |_| Decision::route("other")).with_id("to-other"));
    g.policies()
        .register(Policy::after("other", |_| Decision::deny("withheld")).with_id("late"));
    let r = g.intercept(req("t", json!({})), returns(json!({})));
    assert!(matches!(r, Err(InterceptError::Denied(_))));
    let events = sink.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e.outcome, AuditOutcome::DeniedAfterExecution);
    assert_eq!(e.capability_name, "other");
    assert_eq!(e.metadata["routedFrom"], json!(["t"]));
    assert_eq!(e.metadata["decisions"]["after"]["decision"], "deny");
    assert_eq!(e.policy_ids, ["late"]);
}

#[test]
fn a_refused_request_is_audited_by_refuse() {
    let (g, sink) = setup();
    let mut r = req("t", json!({"k": "v"}));
    r.record_input = true;
    let id = g.refuse(&r, "quarantined", "quarantined").unwrap();
    let events = sink.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_id, id);
    assert_eq!(events[0].outcome, AuditOutcome::DeniedBeforeExecution);
    assert_eq!(events[0].code.as_deref(), Some("quarantined"));
    assert_eq!(events[0].input, None, "no policy said what to redact");
    assert!(g.refuse(&req("missing", json!({})), "x", "y").is_err());
}
