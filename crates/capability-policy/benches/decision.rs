//! One governance decision with 100 Cedar policies loaded.
//!
//! Prints p50/p99 of single decisions (measured one by one), then runs criterion.
//! `cargo bench -p capability-policy --bench decision`
//! (`PERCENTILES_ONLY=1` skips the criterion part).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;

use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::*;
use capability_test_support::governed::policies;
use capability_test_support::measure::measure;
use criterion::Criterion;
use serde_json::json;

fn setup() -> (PolicyEngine, Arc<CedarPolicies>, PolicyContext) {
    let cedar = Arc::new(
        CedarPolicies::from_sources(&[PolicyFile::new("bench.cedar", policies())]).unwrap(),
    );
    assert_eq!(cedar.len(), 100);
    let engine = PolicyEngine::new();
    engine.add_source(cedar.clone());
    let cap = Arc::new(
        GovernedCapability::new("svc/c7", CapabilityKind::Tool)
            .risk(RiskLevel::High)
            .scope("refunds:create")
            .owner("payments")
            .input_schema(json!({"type": "object", "properties": {
                "a": {"type": "integer"}, "tenant": {"type": "string"}, "note": {"type": "string"}
            }})),
    );
    let action = AgentAction::new(ActionType::ToolCall, cap, "support-agent")
        .input(json!({"a": 50, "tenant": "acme", "note": "refund for order 1234"}))
        .tenant("acme")
        .environment(Environment::Prod)
        .scope("refunds:create")
        .label("team", "billing")
        .cost_so_far(0.25);
    let ctx = PolicyContext::new(action, Stage::BeforeCapability);
    let v = engine.evaluate(&ctx).unwrap();
    assert_eq!(v.kind, DecisionType::Allow, "{:?}", v.decision.reason);
    (engine, cedar, ctx)
}

fn main() {
    let (engine, cedar, ctx) = setup();
    measure(
        "decision, 100 cedar policies (PolicyEngine::evaluate)",
        2_000,
        20_000,
        || {
            black_box(engine.evaluate(black_box(&ctx)).unwrap());
        },
    );
    measure(
        "cedar source only (CedarPolicies::evaluate)",
        2_000,
        20_000,
        || {
            black_box(cedar.evaluate(black_box(&ctx)).unwrap());
        },
    );

    if std::env::var_os("PERCENTILES_ONLY").is_some() {
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("decision_100_cedar_policies", |b| {
        b.iter(|| engine.evaluate(black_box(&ctx)).unwrap())
    });
    c.bench_function("load_100_cedar_policies", |b| {
        let text = policies();
        b.iter(|| {
            CedarPolicies::from_sources(&[PolicyFile::new("bench.cedar", text.as_str())]).unwrap()
        })
    });
    c.final_summary();
}
