//! Brane 0.1.0a2's 57 upstream behaviours (test_primitives 7, test_decisions 4,
//! test_policy_engine 6, test_policy_registry 3, test_capability_registry 6, test_audit 7,
//! test_interception 9, test_runtime 15), one test each, numbered `bNN`, grouped by upstream
//! file. Uses only the public API.
//!
//! Changed on purpose (the test pins the new behaviour, named `..._changed`):
//! b07 (`agent_has_scope` checks granted scopes), b16 (`redact` works instead of
//! NotImplementedError), b23 (lowercase error message), b28 (ISO timestamps end in `Z`),
//! b34 (an `allowed` event precedes `executed`), b36 (after-only is an explicit mode; the
//! default runs before and after).
//!
//! Not applicable to Rust (no test): b46 (decorator metadata tag: there are no decorators;
//! `wrap` tags calls, b42), b48 (binding a Python signature's defaults into the input), b49
//! (varargs/kwargs binding), b50 (wrong arity raising TypeError: closures take one JSON
//! input, checked by the compiler), b57 (`__brane_capability__`/`__brane_original__`
//! attributes on the wrapper).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Mutex};

use crate::common::{governor, returns};
use capability_policy::audit::{AuditError, CompositeSink, JsonlSink, MemorySink, NoopSink};
use capability_policy::intercept::{InterceptError, InterceptMode};
use capability_policy::registry::CapabilityFilter;
use capability_policy::*;
use serde_json::{Value, json};

fn cap(name: &str) -> GovernedCapability {
    GovernedCapability::new(name, CapabilityKind::Tool)
}

fn action(name: &str) -> AgentAction {
    AgentAction::new(ActionType::ToolCall, Arc::new(cap(name)), "agent")
}

fn is_brane_id(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('_'))
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

// ---- test_primitives ----------------------------------------------------------------------

#[test]
fn b01_high_risk_is_high_or_critical() {
    for (risk, high) in [
        (RiskLevel::None, false),
        (RiskLevel::Low, false),
        (RiskLevel::Medium, false),
        (RiskLevel::High, true),
        (RiskLevel::Critical, true),
    ] {
        assert_eq!(cap("c").risk(risk).is_high_risk(), high, "{risk}");
    }
}

#[test]
fn b02_has_side_effects() {
    assert!(!cap("c").has_side_effects());
    assert!(
        cap("c")
            .side_effect(SideEffect::new(model::BraneEffect::SendMessage))
            .has_side_effects()
    );
}

#[test]
fn b03_disableable_side_effects_keep_order() {
    let mut off = serde_json::Map::new();
    off.insert("notify".into(), json!(false));
    let c = cap("c")
        .side_effect(SideEffect::new(model::BraneEffect::SendMessage).disabled_by(off.clone()))
        .side_effect(SideEffect::new(model::BraneEffect::Write))
        .side_effect(SideEffect::new(model::BraneEffect::HumanVisible).disabled_by(off));
    let kinds: Vec<String> = c
        .disableable_side_effects()
        .iter()
        .map(|s| s.kind.to_string())
        .collect();
    assert_eq!(kinds, ["send_message", "human_visible"]);
    assert_eq!(c.governance.side_effects[0].risk, RiskLevel::Medium);
}

#[test]
fn b04_action_defaults() {
    let a = action("c");
    assert!(is_brane_id(&a.action_id, "act"), "{}", a.action_id);
    assert!(is_brane_id(&a.trace_id, "tr"), "{}", a.trace_id);
    assert_eq!(a.environment, Environment::Dev);
    assert!(a.timestamp.ends_with('Z') && a.timestamp.len() == 24);
    assert_eq!(a.input, json!({}));
    assert_eq!(a.cost_so_far_usd, 0.0);
    assert!(a.output.is_none() && a.tenant_id.is_none() && a.labels.is_empty());
    assert_ne!(action("c").action_id, a.action_id);
}

#[test]
fn b05_with_output_keeps_ids_and_replaces_summary() {
    let mut a = action("c");
    a.output_summary = Some("old".into());
    let b = a.with_output(json!({"ok": true}), None);
    assert_eq!(b.output, Some(json!({"ok": true})));
    assert_eq!(b.output_summary, None);
    assert_eq!(
        (b.action_id.as_str(), b.trace_id.as_str()),
        (a.action_id.as_str(), a.trace_id.as_str())
    );
    assert_eq!(b.timestamp, a.timestamp);
    let c = a.with_output(json!(1), Some("one".into()));
    assert_eq!(c.output_summary.as_deref(), Some("one"));
}

#[test]
fn b06_is_prod() {
    assert!(!action("c").is_prod());
    assert!(action("c").environment(Environment::Prod).is_prod());
    assert!(!action("c").environment(Environment::Staging).is_prod());
}

#[test]
fn b07_context_arg_and_scope_checks_changed() {
    let a = action("c").input(json!({"x": 1, "t": null}));
    let mut args = serde_json::Map::new();
    args.insert("y".into(), Value::Null);
    let ctx = PolicyContext::new(a, Stage::BeforeCapability).with_args(args);
    // Key presence, not truthiness: a present null is returned, not the default.
    assert_eq!(ctx.arg("y"), Some(&Value::Null));
    assert_eq!(ctx.arg_or("y", &json!("d")), &Value::Null);
    assert_eq!(ctx.arg("x"), Some(&json!(1)));
    assert_eq!(ctx.arg("t"), Some(&Value::Null));
    assert_eq!(ctx.arg_or("missing", &json!("d")), &json!("d"));
    // Changed: agent_has_scope checks scopes granted to the agent, exactly.
    let c = Arc::new(cap("c").scope("customers:read"));
    let a = AgentAction::new(ActionType::ToolCall, c, "agent").scope("customers:read");
    let ctx = PolicyContext::new(a, Stage::BeforeCapability);
    assert!(ctx.agent_has_scope("customers:read"));
    assert!(!ctx.agent_has_scope("customers:write"));
    assert!(!ctx.agent_has_scope("Customers:read"));
    assert!(ctx.capability_requires_scope("customers:read"));
    assert!(!ctx.capability_requires_scope("customers:write"));
}

// ---- test_decisions -----------------------------------------------------------------------

#[test]
fn b08_allow_helper() {
    let d = Decision::allow().with_reason("fine");
    assert_eq!(d.kind, DecisionType::Allow);
    assert_eq!(d.reason.as_deref(), Some("fine"));
    assert!(is_brane_id(&d.decision_id, "dec"));
    assert!(d.allowed() && !d.denied() && !d.requires_approval());
}

#[test]
fn b09_deny_helper_keeps_code() {
    let d = Decision::deny("no").with_code("LIMIT");
    assert_eq!(d.kind, DecisionType::Deny);
    assert_eq!(d.reason.as_deref(), Some("no"));
    assert_eq!(d.code.as_deref(), Some("LIMIT"));
    assert!(d.denied() && !d.allowed());
}

#[test]
fn b10_allowed_denied_requires_approval() {
    for kind in DecisionType::ALL {
        let d = Decision::new(*kind);
        let expect_allowed = !matches!(kind, DecisionType::Deny | DecisionType::ApprovalRequired);
        assert_eq!(d.allowed(), expect_allowed, "{kind}");
        assert_eq!(d.denied(), *kind == DecisionType::Deny);
        assert_eq!(
            d.requires_approval(),
            *kind == DecisionType::ApprovalRequired
        );
    }
}

#[test]
fn b11_annotate_keeps_a_decisions_own_name_and_version() {
    let p = Policy::before("*", |_| Decision::allow())
        .named("policy_name")
        .version("2.0");
    let own = p.annotate(Decision::allow().with_policy("own", Some("9".into())));
    assert_eq!(own.policy_name.as_deref(), Some("own"));
    assert_eq!(own.policy_version.as_deref(), Some("9"));
    let empty = p.annotate(Decision::allow().with_policy("", Some(String::new())));
    assert_eq!(empty.policy_name.as_deref(), Some("policy_name"));
    assert_eq!(empty.policy_version.as_deref(), Some("2.0"));
    let plain = p.annotate(Decision::allow());
    assert_eq!(plain.policy_id.as_deref(), Some(p.id.as_str()));
}

// ---- test_policy_engine -------------------------------------------------------------------

#[test]
fn b12_exact_and_wildcard_match_unrelated_does_not() {
    let engine = PolicyEngine::new();
    engine.register(Policy::before("*", |_| Decision::allow()).named("any"));
    engine.register(Policy::before("c", |_| Decision::allow()).named("exact"));
    engine.register(Policy::before("other", |_| Decision::allow()).named("unrelated"));
    let ctx = PolicyContext::new(action("c"), Stage::BeforeCapability);
    let names: Vec<String> = engine
        .matching_policies(&ctx)
        .iter()
        .map(|p| p.display_name().to_string())
        .collect();
    assert_eq!(names, ["any", "exact"]);
}

#[test]
fn b13_priority_ascending_ties_in_registration_order() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let engine = PolicyEngine::new();
    for (name, prio) in [("p20", 20), ("p10", 10), ("p10b", 10)] {
        let calls = calls.clone();
        engine.register(
            Policy::before("*", move |_| {
                calls.lock().unwrap().push(name);
                Decision::allow()
            })
            .priority(prio),
        );
    }
    engine
        .evaluate(&PolicyContext::new(action("c"), Stage::BeforeCapability))
        .unwrap();
    assert_eq!(*calls.lock().unwrap(), ["p10", "p10b", "p20"]);
}

#[test]
fn b14_allow_wildcard_and_deny_exact_gives_the_exact_deny() {
    let engine = PolicyEngine::new();
    engine.register(Policy::before("*", |_| Decision::allow()).named("open"));
    engine.register(
        Policy::before("c", |_| Decision::deny("closed"))
            .named("exact")
            .version("1.0"),
    );
    let a = action("c");
    let v = engine
        .evaluate(&PolicyContext::new(a.clone(), Stage::BeforeCapability))
        .unwrap();
    assert_eq!(v.kind, DecisionType::Deny);
    assert_eq!(v.decision.policy_name.as_deref(), Some("exact"));
    assert_eq!(v.decision.policy_version.as_deref(), Some("1.0"));
    assert_eq!(v.decision.action_id.as_deref(), Some(a.action_id.as_str()));
}

#[test]
fn b15_no_policies_is_a_synthetic_allow() {
    let a = action("c");
    let v = PolicyEngine::new()
        .evaluate(&PolicyContext::new(a.clone(), Stage::BeforeCapability))
        .unwrap();
    assert_eq!(v.kind, DecisionType::Allow);
    assert_eq!(v.decision.action_id.as_deref(), Some(a.action_id.as_str()));
    assert!(v.decision.policy_name.is_none() && v.decisions.is_empty());
}

#[test]
fn b16_redact_from_an_after_policy_changed() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies()
        .register(Policy::after("c", |_| Decision::redact(["/secret"])).named("mask"));
    let r = g
        .intercept(
            InterceptRequest::new("c", ActionType::ToolCall, json!({})),
            returns(json!({"secret": "s3", "ok": 1})),
        )
        .unwrap();
    assert_eq!(r.output, json!({"secret": "[REDACTED]", "ok": 1}));
    let last = sink.events().pop().unwrap();
    assert_eq!(last.decision, DecisionType::Redact);
    assert_eq!(last.redacted, ["/secret"]);
}

#[test]
fn b17_disabled_policy_is_skipped() {
    let engine = PolicyEngine::new();
    engine.register(Policy::before("*", |_| Decision::deny("off")).enabled(false));
    let v = engine
        .evaluate(&PolicyContext::new(action("c"), Stage::BeforeCapability))
        .unwrap();
    assert_eq!(v.kind, DecisionType::Allow);
}

// ---- test_policy_registry -----------------------------------------------------------------

#[test]
fn b18_before_policy_registers_and_stays_callable() {
    let engine = PolicyEngine::new();
    let f = |ctx: &PolicyContext| {
        if ctx.arg("n").and_then(Value::as_i64) > Some(1) {
            Decision::deny("big")
        } else {
            Decision::allow()
        }
    };
    let id = engine.register(Policy::before("c", f).named("limit"));
    let registered = engine.policies();
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0].id, id);
    assert_eq!(registered[0].stage, Stage::BeforeCapability);
    // The original function is still callable directly.
    let ctx = PolicyContext::new(action("c").input(json!({"n": 5})), Stage::BeforeCapability);
    assert!(f(&ctx).denied());
    assert!(registered[0].call(&ctx).unwrap().denied());
}

#[test]
fn b19_after_policy_registers_at_after_stage() {
    let engine = PolicyEngine::new();
    engine.register(Policy::after("c", |_| Decision::deny("late")));
    let before = engine
        .evaluate(&PolicyContext::new(action("c"), Stage::BeforeCapability))
        .unwrap();
    assert_eq!(before.kind, DecisionType::Allow);
    let after = engine
        .evaluate(&PolicyContext::new(action("c"), Stage::AfterCapability))
        .unwrap();
    assert_eq!(after.kind, DecisionType::Deny);
}

#[test]
fn b20_policy_metadata_flows_into_decisions() {
    let engine = PolicyEngine::new();
    engine.register(
        Policy::before("c", |_| Decision::deny("x"))
            .named("n")
            .version("3")
            .description("d")
            .source("tests")
            .priority(7),
    );
    let p = &engine.policies()[0];
    assert_eq!(
        (p.priority, p.description.as_deref(), p.source.as_deref()),
        (7, Some("d"), Some("tests"))
    );
    let v = engine
        .evaluate(&PolicyContext::new(action("c"), Stage::BeforeCapability))
        .unwrap();
    assert_eq!(v.decision.policy_name.as_deref(), Some("n"));
    assert_eq!(v.decision.policy_version.as_deref(), Some("3"));
}

// ---- test_capability_registry -------------------------------------------------------------

#[test]
fn b21_register_get_exists() {
    let r = CapabilityRegistry::new();
    let c = r.register(cap("a"));
    assert_eq!(c.name, "a");
    assert!(r.exists("a") && !r.exists("b"));
    assert_eq!(r.get("a").unwrap().id, c.id);
    assert!(r.get("b").is_none());
}

#[test]
fn b22_reregistering_replaces_in_place() {
    let r = CapabilityRegistry::new();
    r.register(cap("a"));
    r.register(cap("b"));
    r.register(cap("a").risk(RiskLevel::High));
    assert_eq!(r.names(), ["a", "b"]);
    assert_eq!(r.get("a").unwrap().risk_level(), RiskLevel::High);
}

#[test]
fn b23_require_missing_fails_with_lowercase_message_changed() {
    let err = CapabilityRegistry::new().require("ghost").unwrap_err();
    assert_eq!(err.to_string(), "capability `ghost` is not registered");
}

#[test]
fn b24_list_filters_are_anded_in_insertion_order() {
    let r = CapabilityRegistry::new();
    r.register(cap("t1").tenant("acme").environment(Environment::Prod));
    r.register(GovernedCapability::new("m1", CapabilityKind::Model).tenant("acme"));
    r.register(cap("t2").tenant("globex").environment(Environment::Prod));
    r.register(cap("t3").tenant("acme").environment(Environment::Prod));
    let names = |f: CapabilityFilter| {
        r.list(&f)
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(CapabilityFilter {
            kind: Some(CapabilityKind::Tool),
            tenant: Some("acme".into()),
            environment: Some(Environment::Prod),
        }),
        ["t1", "t3"]
    );
    assert_eq!(names(CapabilityFilter::default()), ["t1", "m1", "t2", "t3"]);
    assert_eq!(
        names(CapabilityFilter {
            kind: Some(CapabilityKind::Model),
            ..CapabilityFilter::default()
        }),
        ["m1"]
    );
}

#[test]
fn b25_unregister_returns_the_removed_capability() {
    let r = CapabilityRegistry::new();
    r.register(cap("a"));
    assert_eq!(r.unregister("a").unwrap().name, "a");
    assert!(r.unregister("a").is_none());
    assert!(!r.exists("a"));
}

#[test]
fn b26_registry_from_initial_capabilities() {
    let r = CapabilityRegistry::with_capabilities([cap("x"), cap("y")]);
    assert_eq!(r.names(), ["x", "y"]);
}

// ---- test_audit ---------------------------------------------------------------------------

#[test]
fn b27_event_fields_come_from_action_and_decision() {
    let a = action("c")
        .tenant("acme")
        .principal("user-1")
        .label("team", "ops")
        .input_summary("in");
    let d = Decision::deny("no")
        .with_policy("p", Some("1".into()))
        .with_code("X");
    let e = AuditEvent::new(
        &a,
        &d,
        Stage::BeforeCapability,
        AuditOutcome::DeniedBeforeExecution,
    );
    assert!(is_brane_id(&e.event_id, "evt"));
    assert_eq!(e.action_id, a.action_id);
    assert_eq!(e.trace_id, a.trace_id);
    assert_eq!(e.tenant_id.as_deref(), Some("acme"));
    assert_eq!(e.principal_id.as_deref(), Some("user-1"));
    assert_eq!(e.capability_name, "c");
    assert_eq!(e.capability_type, CapabilityKind::Tool);
    assert_eq!(e.capability_risk, RiskLevel::Low);
    assert_eq!(e.decision, DecisionType::Deny);
    assert_eq!(e.reason.as_deref(), Some("no"));
    assert_eq!(e.policy_name.as_deref(), Some("p"));
    assert_eq!(e.policy_version.as_deref(), Some("1"));
    assert_eq!(e.code.as_deref(), Some("X"));
    assert_eq!(e.decision_id, d.decision_id);
    assert_eq!(e.input_summary.as_deref(), Some("in"));
    assert_eq!(e.labels.get("team").map(String::as_str), Some("ops"));
}

#[test]
fn b28_timestamps_are_iso_utc_with_z_changed() {
    let e = AuditEvent::new(
        &action("c"),
        &Decision::allow(),
        Stage::BeforeCapability,
        AuditOutcome::Allowed,
    );
    let j = e.to_json();
    let ts = j["timestamp"].as_str().unwrap();
    assert_eq!(ts.len(), 24, "{ts}");
    assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T');
}

#[test]
fn b29_json_keys_are_sorted() {
    let e = AuditEvent::new(
        &action("c"),
        &Decision::allow(),
        Stage::BeforeCapability,
        AuditOutcome::Allowed,
    );
    let text = e.to_canonical();
    let v: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    let keys: Vec<&String> = v.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    // serde_json with preserve_order keeps the text's order: it must already be sorted.
    assert_eq!(keys, sorted);
    for k in [
        "action_id",
        "capability_name",
        "decision",
        "outcome",
        "stage",
        "timestamp",
        "trace_id",
    ] {
        assert!(v.contains_key(k), "{k}");
    }
}

#[test]
fn b30_memory_sink_collects() {
    let sink = MemorySink::new();
    let e = AuditEvent::new(
        &action("c"),
        &Decision::allow(),
        Stage::BeforeCapability,
        AuditOutcome::Allowed,
    );
    sink.emit(&e).unwrap();
    sink.emit(&e).unwrap();
    assert_eq!(sink.events().len(), 2);
}

#[test]
fn b31_jsonl_sink_creates_directories_and_appends_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/audit.jsonl");
    let sink = JsonlSink::new(&path);
    let e = AuditEvent::new(
        &action("c"),
        &Decision::allow(),
        Stage::BeforeCapability,
        AuditOutcome::Allowed,
    );
    sink.emit(&e).unwrap();
    sink.emit(&e).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    let v: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["event_id"], json!(e.event_id));
}

struct FailingSink;
impl AuditSink for FailingSink {
    fn emit(&self, _e: &AuditEvent) -> Result<(), AuditError> {
        Err(AuditError::Malformed {
            message: "sink down".into(),
        })
    }
}

#[test]
fn b32_composite_sink_emits_in_order_and_stops_at_failure() {
    let first = Arc::new(MemorySink::new());
    let last = Arc::new(MemorySink::new());
    let ok = CompositeSink {
        sinks: vec![first.clone(), last.clone()],
    };
    let e = AuditEvent::new(
        &action("c"),
        &Decision::allow(),
        Stage::BeforeCapability,
        AuditOutcome::Allowed,
    );
    ok.emit(&e).unwrap();
    assert_eq!((first.events().len(), last.events().len()), (1, 1));
    let failing = CompositeSink {
        sinks: vec![first.clone(), Arc::new(FailingSink), last.clone()],
    };
    let err = failing.emit(&e).unwrap_err();
    assert!(err.to_string().contains("sink down"));
    assert_eq!((first.events().len(), last.events().len()), (2, 1));
}

#[test]
fn b33_noop_sink_drops() {
    let e = AuditEvent::new(
        &action("c"),
        &Decision::allow(),
        Stage::BeforeCapability,
        AuditOutcome::Allowed,
    );
    assert!(NoopSink.emit(&e).is_ok());
}

// ---- test_interception --------------------------------------------------------------------

#[test]
fn b34_allowed_call_executes_and_is_audited_changed() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies()
        .register(Policy::before("c", |_| Decision::allow()).named("ok"));
    let r = g
        .intercept(
            InterceptRequest::new("c", ActionType::ToolCall, json!({"x": 1})),
            common::echo,
        )
        .unwrap();
    assert_eq!(r.output, json!({"x": 1}));
    assert!(r.allowed());
    let events = sink.events();
    let outcomes: Vec<AuditOutcome> = events.iter().map(|e| e.outcome).collect();
    assert_eq!(outcomes, [AuditOutcome::Allowed, AuditOutcome::Executed]);
    assert_eq!(events[1].policy_name.as_deref(), Some("ok"));
    assert_eq!(events[1].stage, Stage::BeforeCapability);
    assert_eq!(
        r.events,
        events
            .iter()
            .map(|e| e.event_id.clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn b35_denied_call_does_not_execute() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies().register(
        Policy::before("c", |_| Decision::deny("nope"))
            .named("gate")
            .version("2"),
    );
    let mut ran = false;
    let err = g
        .intercept(
            InterceptRequest::new("c", ActionType::ToolCall, json!({})),
            |_| {
                ran = true;
                Ok::<_, String>(json!(null))
            },
        )
        .unwrap_err();
    assert!(!ran);
    assert_eq!(err.to_string(), "nope");
    let d = err.denial().unwrap();
    assert_eq!(
        (d.reason(), d.policy_name(), d.policy_version()),
        (Some("nope"), Some("gate"), Some("2"))
    );
    assert!(d.action_id().starts_with("act_"));
    let events = sink.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].outcome, AuditOutcome::DeniedBeforeExecution);
    assert_eq!(events[0].decision, DecisionType::Deny);
}

#[test]
fn b36_after_only_requests_skip_before_policies_changed() {
    let (g, _sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies()
        .register(Policy::before("c", |_| Decision::deny("before")));
    let r = g
        .intercept(
            InterceptRequest::new("c", ActionType::ToolCall, json!({}))
                .mode(InterceptMode::AfterOnly),
            returns(json!(1)),
        )
        .unwrap();
    assert!(r.before.is_none());
    assert_eq!(r.output, json!(1));
    // The default lifecycle does run them.
    assert!(
        g.intercept(
            InterceptRequest::new("c", ActionType::ToolCall, json!({})),
            returns(json!(1))
        )
        .is_err()
    );
}

#[test]
fn b37_after_deny_happens_after_execution() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies()
        .register(Policy::after("c", |ctx| match &ctx.output {
            Some(o) if o["bad"] == json!(true) => Decision::deny("bad output"),
            _ => Decision::allow(),
        }));
    let mut ran = false;
    let err = g
        .intercept(
            InterceptRequest::new("c", ActionType::ToolCall, json!({})),
            |_| {
                ran = true;
                Ok::<_, String>(json!({"bad": true}))
            },
        )
        .unwrap_err();
    assert!(ran);
    let d = err.denial().unwrap();
    assert_eq!(d.stage, Stage::AfterCapability);
    assert_eq!(d.action.output, Some(json!({"bad": true})));
    let last = sink.events().pop().unwrap();
    assert_eq!(last.outcome, AuditOutcome::DeniedAfterExecution);
}

#[test]
fn b38_after_allow_reports_the_after_decision() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies()
        .register(Policy::after("c", |_| Decision::allow()).named("post"));
    g.intercept(
        InterceptRequest::new("c", ActionType::ToolCall, json!({})).mode(InterceptMode::AfterOnly),
        returns(json!(1)),
    )
    .unwrap();
    let events = sink.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].outcome, AuditOutcome::Executed);
    assert_eq!(events[0].stage, Stage::AfterCapability);
    assert_eq!(events[0].policy_name.as_deref(), Some("post"));
}

#[derive(Debug)]
struct RuntimeError(&'static str);
impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

#[test]
fn b39_execution_failure_is_audited_and_returned() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies()
        .register(Policy::before("c", |_| Decision::allow()).named("ok"));
    let err = g
        .intercept(
            InterceptRequest::new("c", ActionType::ToolCall, json!({})),
            |_| Err(RuntimeError("boom")),
        )
        .unwrap_err();
    let InterceptError::Execution { error, .. } = err else {
        panic!("expected the execution error")
    };
    assert_eq!(error.0, "boom");
    let last = sink.events().pop().unwrap();
    assert_eq!(last.outcome, AuditOutcome::ExecutionFailed);
    assert_eq!(last.decision, DecisionType::Allow);
    assert_eq!(last.policy_name.as_deref(), Some("ok"));
    assert_eq!(last.metadata["error_type"], json!("RuntimeError"));
    assert_eq!(last.metadata["error_message"], json!("boom"));
}

#[test]
fn b40_failure_without_policies_reports_a_synthetic_allow() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    let _ = g.intercept(
        InterceptRequest::new("c", ActionType::ToolCall, json!({})),
        |_| Err(RuntimeError("boom")),
    );
    let last = sink.events().pop().unwrap();
    assert_eq!(last.outcome, AuditOutcome::ExecutionFailed);
    assert_eq!(last.decision, DecisionType::Allow);
    assert!(last.policy_name.is_none());
}

#[test]
fn b41_request_labels_principal_and_metadata_reach_the_audit() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("c"));
    g.intercept(
        InterceptRequest::new("c", ActionType::ToolCall, json!({}))
            .label("ticket", "T-1")
            .principal("user-7")
            .meta("approved", json!(true)),
        returns(json!(1)),
    )
    .unwrap();
    for e in sink.events() {
        assert_eq!(e.labels.get("ticket").map(String::as_str), Some("T-1"));
        assert_eq!(e.principal_id.as_deref(), Some("user-7"));
        assert_eq!(e.metadata["approved"], json!(true));
    }
}

#[test]
fn b42_wrapped_functions_are_enforced_and_tagged() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(cap("add"));
    g.policies().register(Policy::before("add", |ctx| {
        if ctx.arg_f64("x") > Some(10.0) {
            Decision::deny("too big")
        } else {
            Decision::allow()
        }
    }));
    let g = Arc::new(g);
    let add = g.wrap("add", ActionType::ToolCall, |input: &Value| {
        Ok::<_, String>(json!(input["x"].as_i64().unwrap_or(0) + 1))
    });
    assert_eq!(add(json!({"x": 1})).unwrap(), json!(2));
    assert!(add(json!({"x": 11})).is_err());
    let e = &sink.events()[0];
    assert_eq!(e.metadata["interceptor"], json!("callable"));
    assert_eq!(e.metadata["declaration"], json!("wrapper"));
}

// ---- test_runtime -------------------------------------------------------------------------

#[test]
fn b43_agent_id_is_the_default_for_actions() {
    let g = Governor::new("support-agent");
    g.register_capability(cap("c"));
    let a = g
        .create_action(&InterceptRequest::new("c", ActionType::ToolCall, json!({})))
        .unwrap();
    assert_eq!(a.agent_id, "support-agent");
}

#[test]
fn b44_registered_capabilities_take_governor_defaults() {
    let g = Governor::new("a")
        .tenant("acme")
        .environment(Environment::Staging);
    let c = g.register_capability(cap("c"));
    assert_eq!(c.governance.tenant.as_deref(), Some("acme"));
    assert_eq!(c.governance.environment, Some(Environment::Staging));
    let own = g.register_capability(cap("d").tenant("globex").environment(Environment::Prod));
    assert_eq!(own.governance.tenant.as_deref(), Some("globex"));
    assert_eq!(own.governance.environment, Some(Environment::Prod));
}

#[test]
fn b45_wrapped_call_returns_the_function_result() {
    let g = Arc::new(Governor::new("a"));
    g.register_capability(cap("c"));
    let f = g.wrap("c", ActionType::ToolCall, |v: &Value| {
        Ok::<_, String>(json!([v.clone()]))
    });
    assert_eq!(f(json!({"k": "v"})).unwrap(), json!([{"k": "v"}]));
}

#[test]
fn b47_wrapped_unknown_capability_fails_before_audit() {
    let (g, sink) = governor("a", Environment::Dev);
    let g = Arc::new(g);
    let f = g.wrap("ghost", ActionType::ToolCall, |_: &Value| {
        Ok::<_, String>(json!(1))
    });
    assert!(matches!(f(json!({})), Err(InterceptError::NotFound(_))));
    assert!(sink.events().is_empty());
}

#[test]
fn b51_create_action_resolves_overrides_and_defaults() {
    let g = Governor::new("a")
        .tenant("acme")
        .principal("p0")
        .environment(Environment::Prod);
    g.register_capability(cap("c"));
    let d = g
        .create_action(&InterceptRequest::new(
            "c",
            ActionType::ToolCall,
            json!({"q": 1}),
        ))
        .unwrap();
    assert_eq!(
        (
            d.agent_id.as_str(),
            d.tenant_id.as_deref(),
            d.principal_id.as_deref(),
            d.environment
        ),
        ("a", Some("acme"), Some("p0"), Environment::Prod)
    );
    let o = g
        .create_action(
            &InterceptRequest::new("c", ActionType::ModelCall, json!({}))
                .agent("b")
                .tenant("globex")
                .principal("p1")
                .environment(Environment::Dev)
                .parent("act_parent")
                .trace("tr_given")
                .cost_so_far(1.5)
                .estimated_cost(0.25),
        )
        .unwrap();
    assert_eq!(
        (
            o.agent_id.as_str(),
            o.tenant_id.as_deref(),
            o.principal_id.as_deref(),
            o.environment
        ),
        ("b", Some("globex"), Some("p1"), Environment::Dev)
    );
    assert_eq!(o.parent_action_id.as_deref(), Some("act_parent"));
    assert_eq!(o.trace_id, "tr_given");
    assert_eq!((o.cost_so_far_usd, o.estimated_cost_usd), (1.5, Some(0.25)));
    assert_eq!(o.action_type, ActionType::ModelCall);
    // The action's tenant is the runtime's, not the capability's.
    g.register_capability(cap("t").tenant("other"));
    let t = g
        .create_action(&InterceptRequest::new("t", ActionType::ToolCall, json!({})))
        .unwrap();
    assert_eq!(t.tenant_id.as_deref(), Some("acme"));
}

#[test]
fn b52_create_action_for_unknown_capability_fails_without_audit() {
    let (g, sink) = governor("a", Environment::Dev);
    let req = InterceptRequest::new("ghost", ActionType::ToolCall, json!({}));
    assert!(g.create_action(&req).is_err());
    assert!(matches!(
        g.intercept(req, returns(json!(1))),
        Err(InterceptError::NotFound(_))
    ));
    assert!(sink.events().is_empty());
}

#[test]
fn b53_evaluate_action_neither_audits_nor_executes() {
    let (g, sink) = governor("a", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies()
        .register(Policy::after("c", |_| Decision::deny("after")));
    let a = g
        .create_action(&InterceptRequest::new("c", ActionType::ToolCall, json!({})))
        .unwrap();
    assert_eq!(
        g.evaluate_action(&a, Stage::BeforeCapability, None)
            .unwrap()
            .kind,
        DecisionType::Allow
    );
    assert_eq!(
        g.evaluate_action(&a, Stage::AfterCapability, Some(json!(1)))
            .unwrap()
            .kind,
        DecisionType::Deny
    );
    assert!(sink.events().is_empty());
}

#[test]
fn b54_evaluate_creates_the_action_and_evaluates() {
    let (g, sink) = governor("a", Environment::Dev);
    g.register_capability(cap("c"));
    g.policies().register(Policy::before("c", |ctx| {
        if ctx.arg_str("mode") == Some("write") {
            Decision::deny("read only")
        } else {
            Decision::allow()
        }
    }));
    let v = g
        .evaluate(
            &InterceptRequest::new("c", ActionType::ToolCall, json!({"mode": "write"})),
            Stage::BeforeCapability,
        )
        .unwrap();
    assert_eq!(v.kind, DecisionType::Deny);
    assert!(sink.events().is_empty());
}

#[test]
fn b55_a_jsonl_audit_path_receives_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("logs/audit.jsonl");
    let g = Governor::new("a").audit(Arc::new(JsonlSink::new(&path)));
    g.register_capability(cap("c"));
    g.intercept(
        InterceptRequest::new("c", ActionType::ToolCall, json!({})),
        returns(json!(1)),
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
}

#[test]
fn b56_capabilities_are_looked_up_by_name_at_call_time() {
    let (g, sink) = governor("a", Environment::Prod);
    g.register_capability(cap("c").risk(RiskLevel::Low));
    g.policies().register(Policy::before("*", |ctx| {
        if ctx.is_prod() && ctx.is_high_risk() {
            Decision::deny("high risk in prod")
        } else {
            Decision::allow()
        }
    }));
    let g = Arc::new(g);
    let f = g.wrap("c", ActionType::ToolCall, |_: &Value| {
        Ok::<_, String>(json!(1))
    });
    assert!(f(json!({})).is_ok());
    g.register_capability(cap("c").risk(RiskLevel::Critical));
    assert!(f(json!({})).is_err());
    assert_eq!(
        sink.events().last().unwrap().capability_risk,
        RiskLevel::Critical
    );
}
