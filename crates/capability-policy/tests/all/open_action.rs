//! The lifecycle cut in two ([`Governor::open`], then [`OpenAction::complete`] or
//! [`OpenAction::fail`]) decides and audits as [`Governor::intercept`] does in one call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::{echo, governor};
use capability_policy::intercept::{InterceptError, Interrupted, OutputWithheld};
use capability_policy::*;
use serde_json::{Value, json};

fn req(name: &str, input: Value) -> InterceptRequest {
    InterceptRequest::new(name, ActionType::ModelCall, input).single_event(true)
}

fn setup() -> (Arc<Governor>, Arc<capability_policy::audit::MemorySink>) {
    let (g, sink) = governor("agent", Environment::Prod);
    for name in ["big", "small", "other"] {
        g.register_capability(GovernedCapability::new(name, CapabilityKind::Model));
    }
    g.policies().register(
        Policy::before("big", |ctx| {
            if ctx.action.input["cheap"] == json!(true) {
                Decision::route("small").with_reason("cheaper")
            } else {
                Decision::allow()
            }
        })
        .with_id("router"),
    );
    g.policies().register(
        Policy::before("*", |ctx| {
            if ctx.action.input["forbidden"] == json!(true) {
                Decision::deny("not that")
            } else {
                Decision::allow()
            }
        })
        .with_id("gate"),
    );
    g.policies().register(
        Policy::after("*", |ctx| {
            match ctx.output.as_ref().and_then(|o| o.get("secret")) {
                Some(_) => Decision::redact(["/secret"]),
                None => Decision::allow(),
            }
        })
        .with_id("mask"),
    );
    g.policies().register(
        Policy::after("other", |ctx| {
            if ctx.output == Some(json!("leak")) {
                Decision::deny("withheld")
            } else {
                Decision::allow()
            }
        })
        .with_id("after-gate"),
    );
    (Arc::new(g), sink)
}

#[test]
fn open_then_complete_is_intercept_in_two_steps() {
    let (g, sink) = setup();
    let one = g
        .intercept(req("big", json!({"q": 1})), |_: &Execution<'_>| {
            Ok::<_, String>(json!({"a": 1, "secret": "s"}))
        })
        .unwrap();
    let mut open = g.open(req("big", json!({"q": 1}))).unwrap();
    // Nothing is audited while the action is open.
    assert_eq!(sink.events().len(), 1);
    assert_eq!(open.action().capability.name, "big");
    assert!(open.before().unwrap().allows());
    open.note("latencyMs", json!(12));
    let two = open.complete(json!({"a": 1, "secret": "s"})).unwrap();
    assert_eq!(two.output, one.output);
    assert_eq!(two.output["secret"], pointer::REDACTED);
    assert_eq!(two.after.kind, one.after.kind);
    let events = sink.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].outcome, AuditOutcome::Executed);
    assert_eq!(events[1].outcome, events[0].outcome);
    assert_eq!(events[1].redacted, events[0].redacted);
    assert_eq!(events[1].metadata["latencyMs"], 12);
    assert_eq!(events[1].event_id, two.events[0]);
}

#[test]
fn an_open_action_knows_its_route_and_a_denial_opens_nothing() {
    let (g, sink) = setup();
    let open = g.open(req("big", json!({"cheap": true}))).unwrap();
    assert_eq!(open.action().capability.name, "small");
    assert_eq!(open.routed_from(), ["big"]);
    assert_eq!(open.routes().len(), 1);
    assert_eq!(open.routes()[0].decision.reason.as_deref(), Some("cheaper"));
    open.complete(json!("ok")).unwrap();
    let denied = g.open(req("big", json!({"forbidden": true})));
    assert!(matches!(denied, Err(InterceptError::Denied(_))));
    let outcomes: Vec<AuditOutcome> = sink.events().iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes,
        [AuditOutcome::Executed, AuditOutcome::DeniedBeforeExecution]
    );
    assert_eq!(sink.events()[0].metadata["routedFrom"], json!(["big"]));
}

#[test]
fn an_after_denial_withholds_and_a_failure_is_audited_with_its_notes() {
    let (g, sink) = setup();
    let open = g.open(req("other", json!({}))).unwrap();
    match open.complete(json!("leak")) {
        Err(OutputWithheld::Denied(d)) => assert_eq!(d.reason(), Some("withheld")),
        other => panic!("{other:?}"),
    }
    let mut open = g.open(req("other", json!({}))).unwrap();
    open.note("abandoned", json!(true));
    match open.fail("no result in time") {
        Interrupted::Failed {
            error, governance, ..
        } => {
            assert_eq!(error, "no result in time");
            assert!(governance.is_none());
        }
        other => panic!("{other:?}"),
    }
    let events = sink.events();
    let outcomes: Vec<AuditOutcome> = events.iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes,
        [
            AuditOutcome::DeniedAfterExecution,
            AuditOutcome::ExecutionFailed
        ]
    );
    assert_eq!(events[1].metadata["abandoned"], true);
    assert_eq!(events[1].metadata["error_message"], "no result in time");
    // The same as an intercept whose execution fails.
    let failed: Result<_, InterceptError<String>> =
        g.intercept(req("other", json!({})), |_| Err("boom".to_string()));
    assert!(failed.is_err());
    assert_eq!(sink.events()[2].outcome, AuditOutcome::ExecutionFailed);
    let _ = echo;
}

#[test]
fn a_token_is_redeemed_when_the_action_opens() {
    let (g, _sink) = governor("agent", Environment::Prod);
    let store = Arc::new(MemoryStore::new());
    let manager = Arc::new(ApprovalManager::new(
        store,
        capability_policy::approvals::HostKey::from_seed([3; 32]),
    ));
    let g = Arc::new(g.approvals(Arc::clone(&manager)));
    g.register_capability(GovernedCapability::new("mem", CapabilityKind::Memory));
    g.policies()
        .register(Policy::before("mem", |_| Decision::approval_required("ask")).with_id("ask"));
    let pending = match g.open(req("mem", json!({"k": "v"}))) {
        Err(InterceptError::ApprovalRequired { approval, .. }) => approval.unwrap(),
        other => panic!("{other:?}"),
    };
    let token = manager
        .approve(&pending.approval_id, "human", None)
        .unwrap()
        .0;
    let open = g
        .open(req("mem", json!({"k": "v"})).approval_token(token.clone()))
        .unwrap();
    assert!(open.approval().is_some());
    // Redeemed at open, not at complete: a second open with the token is refused.
    let again = g.open(req("mem", json!({"k": "v"})).approval_token(token));
    assert!(
        matches!(again, Err(InterceptError::Approval(_))),
        "{again:?}"
    );
    open.complete(json!({"ok": true})).unwrap();
}

#[test]
fn a_brane_shaped_capability_is_read_with_its_snake_case_members() {
    let cap = GovernedCapability::from_brane_json(&json!({
        "name": "memory.store", "id": "cap_from_brane", "type": "memory", "risk": "high",
        "tenant_id": "acme", "data_namespace": "users", "owner": "team-a",
        "side_effects": [{"type": "write", "can_disable": true, "disable_input": {"dry_run": true},
                          "requires_approval": true}],
        "scopes": [{"name": "memory:write", "data_namespace": "users"}],
        "input_schema": {"type": "object", "properties": {"snake_case": {"type": "string"}}},
        "metadata": {"keep_me": 1}
    }))
    .unwrap();
    assert_eq!(cap.name, "memory.store");
    assert_ne!(cap.id, "cap_from_brane");
    let g = &cap.governance;
    assert_eq!(g.kind, CapabilityKind::Memory);
    assert_eq!(g.risk, RiskLevel::High);
    assert_eq!(g.tenant.as_deref(), Some("acme"));
    assert_eq!(g.data_namespace.as_deref(), Some("users"));
    assert!(g.side_effects[0].can_disable && g.side_effects[0].requires_approval);
    assert_eq!(
        g.side_effects[0].disable_input.as_ref().unwrap()["dry_run"],
        true
    );
    assert_eq!(g.scopes[0].data_namespace.as_deref(), Some("users"));
    // Schemas and metadata are kept as they are.
    assert!(g.input_schema.as_ref().unwrap()["properties"]["snake_case"].is_object());
    assert_eq!(g.metadata["keep_me"], 1);
    for (bad, why) in [
        (json!({"type": "model"}), "name"),
        (json!({"name": "", "type": "model"}), "empty"),
        (json!({"name": "x", "type": "spaceship"}), "spaceship"),
        (json!({"name": "x", "risk": "extreme"}), "extreme"),
        (json!({"name": "x", "colour": "red"}), "colour"),
        (json!("x"), "object"),
    ] {
        let e = GovernedCapability::from_brane_json(&bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}
