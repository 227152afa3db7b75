//! Runs the governed invoke (100 Cedar policies, memory stores) in a loop, for profiling:
//! `cargo run --release -p capability-runtime --example governed_loop -- 10000`.
//!
//! A second argument picks the case: `memory` (default), `sqlite` (durable stores in a
//! temporary directory), `ungoverned` (the same runtime without a governor: the floor the
//! governance layer adds to).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use capability_core::authorization::EffectPolicy;
use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::{AuditSink, Governor, MemoryStore, PolicyEngine, SqliteStore};
use capability_runtime::store::{MemoryReceiptStore, ReceiptStore, SqliteReceiptStore};
use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions, Principal};
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
                "@id(\"limit-{i}\") @reason(\"amount too large\")\nforbid(principal, action == Action::\"tool_call\", resource == Capability::\"svc/c{cap}\") when {{ context.input has a && context.input.a > {} }};\n",
                100 + i
            ));
        } else {
            text.push_str(&format!(
                "@id(\"tenant-{i}\") @reason(\"cross-tenant\")\nforbid(principal, action, resource == Capability::\"svc/c{cap}\") when {{ context.input has tenant && context.input.tenant != context.tenant }};\n"
            ));
        }
    }
    text
}

fn add(id: &str) -> Capability {
    Capability::builder(json!({
        "specVersion": "0.1", "id": id, "version": "1.0.0", "name": "Add",
        "description": "Adds two numbers.",
        "input": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
        "output": {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]},
        "effects": ["database.read"],
        "metadata": {"governance": {"kind": "tool", "risk": "medium", "owner": "payments"}}
    }))
    .execute_json(|input, _| {
        Ok(json!({"result": input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0)}))
    })
    .build()
    .unwrap()
}

fn runtime(store: Arc<dyn ReceiptStore>, audit: Option<Arc<dyn AuditSink>>) -> CapabilityRuntime {
    let mut builder = CapabilityRuntime::builder()
        .policy(EffectPolicy::read_only())
        .store(store);
    if let Some(audit) = audit {
        let cedar =
            CedarPolicies::from_sources(&[PolicyFile::new("bench.cedar", policies())]).unwrap();
        let engine = PolicyEngine::new();
        engine.add_source(Arc::new(cedar));
        let governor = Governor::new("bench-agent")
            .engine(Arc::new(engine))
            .audit(audit);
        builder = builder.governor(Arc::new(governor));
    }
    let rt = builder.build();
    for i in 0..CAPABILITIES {
        rt.register(add(&format!("svc/c{i}"))).unwrap();
    }
    rt
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let case = std::env::args().nth(2).unwrap_or_else(|| "memory".into());
    let home = tempfile::tempdir().unwrap();
    let rt = match case.as_str() {
        "memory" => runtime(
            Arc::new(MemoryReceiptStore::new()),
            Some(Arc::new(MemoryStore::new())),
        ),
        "sqlite" => runtime(
            Arc::new(SqliteReceiptStore::open(home.path()).unwrap()),
            Some(Arc::new(
                SqliteStore::open(&home.path().join("capability.db")).unwrap(),
            )),
        ),
        "ungoverned" => runtime(Arc::new(MemoryReceiptStore::new()), None),
        other => panic!("unknown case `{other}` (memory, sqlite, ungoverned)"),
    };
    let options = ExecuteOptions {
        principal: Some(Principal {
            tenant: Some("acme".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let input = json!({"a": 20, "b": 22, "tenant": "acme"});
    let started = std::time::Instant::now();
    for _ in 0..n {
        rt.invoke("svc/c7", input.clone(), &options).unwrap();
    }
    println!(
        "{case}: {:.2} µs per invoke",
        started.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
