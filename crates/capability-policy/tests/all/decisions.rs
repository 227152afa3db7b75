//! The nine decisions end to end, how they combine, shadow mode, and failing closed — as
//! closure policies and as Cedar annotations.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::{cedar_engine, echo, governor, returns};
use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::engine::SourceDecisions;
use capability_policy::intercept::{Execution, InterceptError, MAX_ROUTE_DEPTH};
use capability_policy::model::BraneEffect;
use capability_policy::pointer::Mutation;
use capability_policy::policy::PolicyFault;
use capability_policy::*;
use serde_json::{Map, Value, json};

fn send_email() -> GovernedCapability {
    let mut off = Map::new();
    off.insert("notify_customer".into(), json!(false));
    GovernedCapability::new("send_invoice", CapabilityKind::Tool)
        .risk(RiskLevel::Medium)
        .side_effect(SideEffect::new(BraneEffect::SendMessage).disabled_by(off))
        .side_effect(SideEffect::new(BraneEffect::Write))
}

fn req(name: &str, input: Value) -> InterceptRequest {
    InterceptRequest::new(name, ActionType::ToolCall, input)
}

#[test]
fn transform_input_disables_a_side_effect_before_execution() {
    let (g, sink) = governor("agent", Environment::Prod);
    g.register_capability(send_email());
    g.policies().register(
        Policy::before("send_invoice", |ctx| {
            let off = ctx.capability().disable_input_for(&["send_message"]);
            Decision::set_input(&off).with_reason("no customer email from agents")
        })
        .named("quiet"),
    );
    let r = g
        .intercept(
            req(
                "send_invoice",
                json!({"invoice": 7, "notify_customer": true}),
            ),
            echo,
        )
        .unwrap();
    assert_eq!(r.output, json!({"invoice": 7, "notify_customer": false}));
    assert_eq!(
        r.action.input,
        json!({"invoice": 7, "notify_customer": false})
    );
    let allowed = &sink.events()[0];
    assert_eq!(allowed.decision, DecisionType::TransformInput);
    assert_eq!(allowed.policy_name.as_deref(), Some("quiet"));
}

#[test]
fn a_transform_that_cannot_apply_refuses_the_action() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("t", CapabilityKind::Tool));
    g.policies().register(Policy::before("t", |_| {
        Decision::transform_input(vec![Mutation::remove("/missing")])
    }));
    let mut ran = false;
    let err = g
        .intercept(req("t", json!({})), |_| {
            ran = true;
            Ok::<_, String>(json!(1))
        })
        .unwrap_err();
    assert!(!ran);
    assert!(matches!(err, InterceptError::Transform(_)), "{err}");
    assert_eq!(
        sink.events().pop().unwrap().code.as_deref(),
        Some("transform_failed")
    );
}

#[test]
fn redact_and_transform_output_apply_in_order_and_reach_the_audit_masked() {
    let (g, sink) = governor("agent", Environment::Dev);
    let g = g.record_payloads(true);
    g.register_capability(GovernedCapability::new("lookup", CapabilityKind::Database));
    // A before-policy may schedule output redaction.
    g.policies().register(Policy::before("lookup", |_| {
        Decision::redact(["/rows/*/ssn"])
    }));
    g.policies().register(Policy::after("lookup", |_| {
        Decision::transform_output(vec![
            Mutation::set("/source", json!("crm")),
            Mutation::remove("/debug"),
        ])
    }));
    g.policies()
        .register(Policy::after("lookup", |_| Decision::redact(["/source"])).priority(5));
    let r = g
        .intercept(
            req("lookup", json!({"q": "x"})),
            returns(json!({"rows": [{"ssn": "123", "name": "a"}, {"ssn": "456"}], "debug": true})),
        )
        .unwrap();
    let expected = json!({"rows": [{"ssn": "[REDACTED]", "name": "a"}, {"ssn": "[REDACTED]"}], "source": "[REDACTED]"});
    assert_eq!(r.output, expected);
    let executed = sink.events().pop().unwrap();
    assert_eq!(executed.output, Some(expected));
    assert_eq!(executed.redacted, ["/rows/*/ssn", "/source"]);
    // The masked values appear nowhere in the record (as JSON strings: the random hex ids
    // may contain the digits).
    let record = executed.to_canonical();
    assert!(
        !record.contains("\"123\"") && !record.contains("\"456\""),
        "{record}"
    );
}

#[test]
fn route_sends_the_action_to_another_capability_which_is_authorized_again() {
    let (g, sink) = governor("agent", Environment::Prod);
    g.register_capability(
        GovernedCapability::new("model.gpt_big", CapabilityKind::Model).risk(RiskLevel::Medium),
    );
    g.register_capability(GovernedCapability::new(
        "model.gpt_small",
        CapabilityKind::Model,
    ));
    g.register_capability(GovernedCapability::new(
        "model.blocked",
        CapabilityKind::Model,
    ));
    g.policies().register(
        Policy::before("model.gpt_big", |ctx| {
            if ctx.action.cost_so_far_usd > 1.0 {
                Decision::route("model.gpt_small").with_reason("budget exceeded")
            } else {
                Decision::allow()
            }
        })
        .named("budget_router"),
    );
    g.policies().register(Policy::before("model.blocked", |_| {
        Decision::deny("blocked target")
    }));
    let model_call = |name: &str, cost: f64| {
        InterceptRequest::new(name, ActionType::ModelCall, json!({"prompt": "hi"}))
            .cost_so_far(cost)
    };
    let run = |e: &Execution<'_>| Ok::<_, String>(json!({"model": e.capability.name}));
    assert_eq!(
        g.intercept(model_call("model.gpt_big", 0.5), run)
            .unwrap()
            .output,
        json!({"model": "model.gpt_big"})
    );
    let r = g.intercept(model_call("model.gpt_big", 2.0), run).unwrap();
    assert_eq!(r.output, json!({"model": "model.gpt_small"}));
    assert_eq!(r.routed_from, ["model.gpt_big"]);
    let routed = &r.action;
    assert_eq!(routed.capability.name, "model.gpt_small");
    let events = sink.events();
    let last_three: Vec<(String, AuditOutcome, DecisionType)> = events[events.len() - 3..]
        .iter()
        .map(|e| (e.capability_name.clone(), e.outcome, e.decision))
        .collect();
    assert_eq!(
        last_three,
        [
            (
                "model.gpt_big".to_string(),
                AuditOutcome::Allowed,
                DecisionType::Route
            ),
            (
                "model.gpt_small".to_string(),
                AuditOutcome::Allowed,
                DecisionType::Allow
            ),
            (
                "model.gpt_small".to_string(),
                AuditOutcome::Executed,
                DecisionType::Allow
            ),
        ]
    );
    assert_eq!(
        events.last().unwrap().parent_action_id.as_deref(),
        Some(events[events.len() - 3].action_id.as_str())
    );
    // The route target is authorized again: a denied target denies.
    g.policies()
        .register(Policy::before("model.gpt_small", |_| {
            Decision::route("model.blocked")
        }));
    let err = g
        .intercept(model_call("model.gpt_big", 2.0), run)
        .unwrap_err();
    assert_eq!(err.to_string(), "blocked target");
}

#[test]
fn route_loops_stop() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("a", CapabilityKind::Model));
    g.register_capability(GovernedCapability::new("b", CapabilityKind::Model));
    g.policies()
        .register(Policy::before("a", |_| Decision::route("b")));
    g.policies()
        .register(Policy::before("b", |_| Decision::route("a")));
    let mut ran = false;
    let err = g
        .intercept(
            InterceptRequest::new("a", ActionType::ModelCall, json!({})),
            |_| {
                ran = true;
                Ok::<_, String>(json!(1))
            },
        )
        .unwrap_err();
    assert!(!ran);
    assert_eq!(
        err.denial().unwrap().decision.code.as_deref(),
        Some("route_loop")
    );
    let events = sink.events();
    assert_eq!(events.len(), MAX_ROUTE_DEPTH + 2);
    assert_eq!(
        events.last().unwrap().outcome,
        AuditOutcome::DeniedBeforeExecution
    );
}

#[test]
fn sandbox_requirements_merge_to_the_strictest() {
    let (g, _) = governor("agent", Environment::Prod);
    g.register_capability(
        GovernedCapability::new("run_code", CapabilityKind::Sandbox).risk(RiskLevel::High),
    );
    g.policies().register(Policy::before("run_code", |_| {
        Decision::sandbox(SandboxRequirement::tier(IsolationTier::Process))
    }));
    g.policies().register(Policy::before("*", |ctx| {
        if ctx.is_high_risk() {
            Decision::sandbox(SandboxRequirement {
                min_tier: Some(IsolationTier::Wasm),
                deny_network: true,
                timeout_ms: Some(5000),
                memory_mb: None,
            })
        } else {
            Decision::allow()
        }
    }));
    g.policies().register(Policy::before("run_code", |_| {
        Decision::sandbox(SandboxRequirement {
            timeout_ms: Some(1000),
            memory_mb: Some(256),
            ..SandboxRequirement::default()
        })
    }));
    let r = g
        .intercept(
            req("run_code", json!({"code": "1+1"})),
            |e: &Execution<'_>| {
                let s = e.sandbox.unwrap();
                Ok::<_, String>(s.to_json())
            },
        )
        .unwrap();
    assert_eq!(
        r.output,
        json!({"minTier": "wasm", "denyNetwork": true, "timeoutMs": 1000, "memoryMb": 256})
    );
    assert_eq!(r.before.unwrap().kind, DecisionType::Sandbox);
}

#[test]
fn log_only_is_recorded_and_never_enforced() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("t", CapabilityKind::Tool));
    g.policies().register(
        Policy::before("t", |_| {
            Decision::log_only("would block").with_would_be(DecisionType::Deny)
        })
        .named("trial"),
    );
    let r = g.intercept(req("t", json!({})), returns(json!(1))).unwrap();
    let before = r.before.unwrap();
    assert_eq!(before.kind, DecisionType::Allow);
    assert_eq!(before.decisions.len(), 1);
    assert_eq!(before.decisions[0].would_be, Some(DecisionType::Deny));
    assert_eq!(
        sink.events()[0].policy_ids,
        [before.decisions[0].policy_id.clone().unwrap()]
    );
}

#[test]
fn shadow_mode_records_what_would_have_been_enforced() {
    let (g, sink) = governor("agent", Environment::Prod);
    g.register_capability(GovernedCapability::new("t", CapabilityKind::Tool));
    g.policies()
        .register(Policy::before("t", |_| Decision::deny("not yet")).named("new_rule"));
    g.policies()
        .register(Policy::after("t", |_| Decision::redact(["/secret"])));
    g.policies().set_shadow_mode(true);
    let r = g
        .intercept(req("t", json!({})), returns(json!({"secret": "s"})))
        .unwrap();
    assert_eq!(r.output, json!({"secret": "s"}), "nothing is enforced");
    let before = r.before.unwrap();
    assert_eq!(before.kind, DecisionType::Allow);
    let shadow = before.shadow.unwrap();
    assert_eq!(
        (shadow.kind, shadow.decision.reason.as_deref()),
        (DecisionType::Deny, Some("not yet"))
    );
    assert_eq!(r.after.shadow.unwrap().obligations.redact, ["/secret"]);
    let events = sink.events();
    assert_eq!(events[0].shadow, Some(DecisionType::Deny));
    assert_eq!(
        events[0].metadata["shadow"]["policyName"],
        json!("new_rule")
    );
    g.policies().set_shadow_mode(false);
    assert!(
        g.intercept(req("t", json!({})), returns(json!({})))
            .is_err()
    );
}

#[test]
fn failing_policies_and_misplaced_decisions_fail_closed() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("t", CapabilityKind::Tool));
    g.policies().register(
        Policy::fallible(Stage::BeforeCapability, "t", |_| {
            Err(PolicyFault::new("rate service unreachable"))
        })
        .named("rates"),
    );
    let err = g
        .intercept(req("t", json!({})), returns(json!(1)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy `rates` failed: rate service unreachable"
    );
    assert_eq!(
        sink.events().pop().unwrap().code.as_deref(),
        Some("policy_error")
    );

    let (g, _) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("t", CapabilityKind::Tool));
    g.policies()
        .register(Policy::after("t", |_| Decision::route("elsewhere")).named("late_route"));
    let err = g
        .intercept(req("t", json!({})), returns(json!(1)))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy `late_route` returned `route`, which is not valid at stage after_capability"
    );
    assert_eq!(
        err.denial().unwrap().decision.code.as_deref(),
        Some("invalid_decision")
    );
}

#[test]
fn approval_required_without_a_manager_still_holds_and_is_audited() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("t", CapabilityKind::Tool));
    g.policies().register(Policy::before("t", |_| {
        Decision::approval_required("needs a human")
    }));
    let err = g
        .intercept(req("t", json!({})), returns(json!(1)))
        .unwrap_err();
    assert!(matches!(
        err,
        InterceptError::ApprovalRequired { approval: None, .. }
    ));
    assert_eq!(err.to_string(), "needs a human");
    assert_eq!(sink.events()[0].outcome, AuditOutcome::ApprovalRequired);
}

#[test]
fn combination_precedence() {
    let a = AgentAction::new(
        ActionType::ToolCall,
        Arc::new(GovernedCapability::new("t", CapabilityKind::Tool)),
        "a",
    );
    let ctx = PolicyContext::new(a, Stage::BeforeCapability);
    let verdict = |decisions: Vec<Decision>| {
        let engine = PolicyEngine::new();
        for (i, d) in decisions.into_iter().enumerate() {
            engine.register(
                Policy::before("*", move |_| d.clone())
                    .named(format!("p{i}"))
                    .priority(i as i64),
            );
        }
        engine.evaluate(&ctx).unwrap()
    };
    let v = verdict(vec![
        Decision::redact(["/a"]),
        Decision::approval_required("ask"),
        Decision::route("x"),
    ]);
    assert_eq!(
        (v.kind, v.decision.policy_name.as_deref()),
        (DecisionType::ApprovalRequired, Some("p1"))
    );
    assert!(v.obligations.is_empty(), "nothing applies while held");
    let v = verdict(vec![
        Decision::redact(["/a"]),
        Decision::transform_input(vec![Mutation::set("/x", json!(1))]),
        Decision::route("first"),
        Decision::route("second"),
        Decision::sandbox(SandboxRequirement::tier(IsolationTier::Oci)),
        Decision::allow(),
    ]);
    assert_eq!(
        (v.kind, v.decision.policy_name.as_deref()),
        (DecisionType::Route, Some("p2"))
    );
    assert_eq!(v.obligations.route_to.as_deref(), Some("first"));
    assert_eq!(v.obligations.redact, ["/a"]);
    assert_eq!(v.obligations.input_mutations.len(), 1);
    assert_eq!(
        v.obligations.sandbox.clone().unwrap().min_tier,
        Some(IsolationTier::Oci)
    );
    let v = verdict(vec![
        Decision::allow().with_reason("first"),
        Decision::allow().with_reason("last"),
    ]);
    assert_eq!(v.decision.reason.as_deref(), Some("last"));
    let v = verdict(vec![Decision::log_only("x"), Decision::log_only("y")]);
    assert_eq!(
        (v.kind, v.decision.policy_name.as_deref()),
        (DecisionType::Allow, None)
    );
}

#[test]
fn cedar_annotations_yield_every_decision() {
    let text = r#"
permit(principal, action, resource);

@id("quiet_invoices") @decision("transform_input") @disableSideEffects("send_message")
permit(principal, action, resource == Capability::"send_invoice");

@id("stamp") @decision("transform_input") @mutations("[{\"op\": \"add\", \"path\": \"/source\", \"value\": \"agent\"}]")
permit(principal, action, resource == Capability::"send_invoice");

@id("cheap_model") @decision("route") @route("model.small") @reason("over budget")
permit(principal, action == Action::"model_call", resource == Capability::"model.big")
when { context.costSoFarUsd.greaterThan(decimal("1.0")) };

@id("jail") @decision("sandbox") @sandbox("wasm") @network("off") @timeoutMs("2000")
permit(principal, action, resource) when { resource.kind == "sandbox" };

@id("trim_output") @decision("transform_output") @mutations("[{\"op\": \"remove\", \"path\": \"/internal\"}]")
permit(principal, action, resource == Capability::"send_invoice");

@id("mask") @decision("redact") @redact("/card, /customer/email")
permit(principal, action, resource == Capability::"send_invoice");

@id("watch") @decision("log_only") @reason("watching sandboxes")
forbid(principal, action, resource) when { resource.kind == "sandbox" };
"#;
    let (g, sink) = governor("agent", Environment::Prod);
    let g = g.engine(cedar_engine("annotations.cedar", text));
    g.register_capability(send_email());
    g.register_capability(GovernedCapability::new("model.big", CapabilityKind::Model));
    g.register_capability(GovernedCapability::new(
        "model.small",
        CapabilityKind::Model,
    ));
    g.register_capability(GovernedCapability::new("py", CapabilityKind::Sandbox));

    let r = g
        .intercept(req("send_invoice", json!({"invoice": 1, "notify_customer": true})), |e: &Execution<'_>| {
            Ok::<_, String>(json!({
                "sent_with": e.input, "card": "4242", "customer": {"email": "a@b.c", "id": 3}, "internal": 1
            }))
        })
        .unwrap();
    assert_eq!(
        r.output,
        json!({
            "sent_with": {"invoice": 1, "notify_customer": false, "source": "agent"},
            "card": "[REDACTED]",
            "customer": {"email": "[REDACTED]", "id": 3}
        })
    );
    assert_eq!(r.after.kind, DecisionType::TransformOutput);

    let model = |cost: f64| {
        InterceptRequest::new("model.big", ActionType::ModelCall, json!({})).cost_so_far(cost)
    };
    let run = |e: &Execution<'_>| Ok::<_, String>(json!(e.capability.name));
    assert_eq!(
        g.intercept(model(0.5), run).unwrap().output,
        json!("model.big")
    );
    assert_eq!(
        g.intercept(model(1.5), run).unwrap().output,
        json!("model.small")
    );

    let r = g
        .intercept(
            InterceptRequest::new("py", ActionType::SandboxExecution, json!({})),
            |e: &Execution<'_>| Ok::<_, String>(e.sandbox.unwrap().to_json()),
        )
        .unwrap();
    assert_eq!(
        r.output,
        json!({"minTier": "wasm", "denyNetwork": true, "timeoutMs": 2000})
    );
    let before = r.before.unwrap();
    let watch = before
        .decisions
        .iter()
        .find(|d| d.policy_id.as_deref() == Some("watch"))
        .unwrap();
    assert_eq!(
        (watch.kind, watch.would_be),
        (DecisionType::LogOnly, Some(DecisionType::Deny))
    );
    assert!(
        sink.events()
            .iter()
            .any(|e| e.policy_ids.contains(&"watch".to_string()))
    );
}

/// A struct source whose decisions depend on more than the context (a counter).
struct Counting;

impl PolicySource for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn decide(&self, _: &PolicyContext) -> Result<SourceDecisions, PolicyFault> {
        Ok(SourceDecisions::default())
    }
}

/// The engine's generation (what lets a caller keep decisions) changes with every change
/// to what decides, and is absent while anything but deterministic sources decides.
#[test]
fn the_generation_moves_with_every_change_and_only_pure_engines_have_one() {
    let engine = PolicyEngine::new();
    let empty = engine.generation().unwrap();
    let cedar = |text: &str| {
        Arc::new(CedarPolicies::from_sources(&[PolicyFile::new("t.cedar", text)]).unwrap())
    };
    engine.add_source(cedar("permit(principal, action, resource);"));
    let one = engine.generation().unwrap();
    assert_ne!(one, empty);
    assert_eq!(engine.generation(), Some(one), "nothing changed");
    engine.set_shadow_mode(true);
    let shadow = engine.generation().unwrap();
    assert_ne!(shadow, one);
    engine.set_shadow_mode(true);
    assert_eq!(engine.generation(), Some(shadow), "the same mode again");
    engine.add_source(Arc::new(ForTenant::new(
        "acme",
        cedar("forbid(principal, action, resource);"),
    )));
    let tenant = engine.generation().unwrap();
    assert_ne!(tenant, shadow);

    // A closure policy may decide on anything: no generation while it is there.
    let id = engine.register(Policy::before("x", |_| Decision::allow()));
    assert_eq!(engine.generation(), None);
    assert!(engine.unregister(&id));
    let after = engine.generation().unwrap();
    assert_ne!(after, tenant);
    assert!(!engine.unregister(&id));
    assert_eq!(engine.generation(), Some(after), "nothing was removed");

    // Nor while a source that does not say it is deterministic is there.
    engine.add_source(Arc::new(Counting));
    assert_eq!(engine.generation(), None);
    engine.clear_sources();
    let cleared = engine.generation().unwrap();
    assert_ne!(cleared, after);
}
