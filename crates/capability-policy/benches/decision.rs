//! One governance decision with 100 Cedar policies loaded.
//!
//! Prints p50/p99 of single decisions (measured one by one), then runs criterion.
//! `cargo bench -p capability-policy --bench decision`
//! (`PERCENTILES_ONLY=1` skips the criterion part).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::*;
use criterion::Criterion;
use serde_json::json;

const CAPABILITIES: usize = 48;

/// 100 policies: 4 global ones and 96 that each name one of 48 capabilities.
fn policies() -> String {
    let mut text = String::from(
        r#"@id("allow-all") permit(principal, action, resource);
@id("prod-high-risk") @reason("high risk in prod")
forbid(principal, action, resource) when { context.environment == "prod" && resource.riskLevel >= 4 };
@id("scopes") @reason("missing scope")
forbid(principal, action, resource) unless { principal.scopes.containsAll(resource.scopes) };
@id("budget") @decision("approval_required") @reason("expensive")
forbid(principal, action == Action::"model_call", resource)
when { context has estimatedCostUsd && context.estimatedCostUsd.greaterThan(decimal("5.0")) };
"#,
    );
    for i in 0..96 {
        let cap = i % CAPABILITIES;
        if i < CAPABILITIES {
            text.push_str(&format!(
                "@id(\"limit-{i}\") @reason(\"amount too large\")\nforbid(principal, action == Action::\"tool_call\", resource == Capability::\"svc.{cap}\") when {{ context.input has amount && context.input.amount > {} }};\n",
                100 + i
            ));
        } else {
            text.push_str(&format!(
                "@id(\"tenant-{i}\") @reason(\"cross-tenant\")\nforbid(principal, action, resource == Capability::\"svc.{cap}\") when {{ context.input has tenant && context.input.tenant != context.tenant }};\n"
            ));
        }
    }
    text
}

fn setup() -> (PolicyEngine, Arc<CedarPolicies>, PolicyContext) {
    let cedar = Arc::new(
        CedarPolicies::from_sources(&[PolicyFile::new("bench.cedar", policies())]).unwrap(),
    );
    assert_eq!(cedar.len(), 100);
    let engine = PolicyEngine::new();
    engine.add_source(cedar.clone());
    let cap = Arc::new(
        GovernedCapability::new("svc.7", CapabilityKind::Tool)
            .risk(RiskLevel::High)
            .scope("refunds:create")
            .owner("payments")
            .input_schema(json!({"type": "object", "properties": {
                "amount": {"type": "integer"}, "tenant": {"type": "string"}, "note": {"type": "string"}
            }})),
    );
    let action = AgentAction::new(ActionType::ToolCall, cap, "support-agent")
        .input(json!({"amount": 50, "tenant": "acme", "note": "refund for order 1234"}))
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

fn percentiles(label: &str, mut f: impl FnMut()) {
    for _ in 0..2_000 {
        f();
    }
    let mut samples: Vec<u128> = (0..20_000)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize] as f64 / 1000.0;
    println!(
        "{label}: p50 {:.2} µs, p99 {:.2} µs ({} samples)",
        at(0.50),
        at(0.99),
        samples.len()
    );
}

fn main() {
    let (engine, cedar, ctx) = setup();
    percentiles(
        "decision, 100 cedar policies (PolicyEngine::evaluate)",
        || {
            black_box(engine.evaluate(black_box(&ctx)).unwrap());
        },
    );
    percentiles("cedar source only (CedarPolicies::evaluate)", || {
        black_box(cedar.evaluate(black_box(&ctx)).unwrap());
    });

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
