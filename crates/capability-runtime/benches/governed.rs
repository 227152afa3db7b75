//! The full governed invoke: effect authorization + 100 Cedar policies (before and after
//! stages) + execute + receipt + audit, with the durable SQLite stores (receipts and the
//! hash-chained audit log in one database) and with in-memory stores.
//!
//! Run: `cargo bench -p capability-runtime --bench governed`. Besides criterion's report, each
//! case prints p50/p99 over individually timed invokes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use capability_core::authorization::EffectPolicy;
use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::{AuditSink, Governor, MemoryStore, PolicyEngine, SqliteStore};
use capability_runtime::store::{MemoryReceiptStore, ReceiptStore, SqliteReceiptStore};
use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions, Principal};
use criterion::{Criterion, criterion_group, criterion_main};
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

fn runtime(store: Arc<dyn ReceiptStore>, audit: Arc<dyn AuditSink>) -> CapabilityRuntime {
    let cedar = CedarPolicies::from_sources(&[PolicyFile::new("bench.cedar", policies())]).unwrap();
    let engine = PolicyEngine::new();
    engine.add_source(Arc::new(cedar));
    let governor = Governor::new("bench-agent")
        .engine(Arc::new(engine))
        .audit(audit);
    let rt = CapabilityRuntime::builder()
        .policy(EffectPolicy::read_only())
        .store(store)
        .governor(Arc::new(governor))
        .build();
    for i in 0..CAPABILITIES {
        rt.register(add(&format!("svc/c{i}"))).unwrap();
    }
    rt
}

fn percentiles(name: &str, mut f: impl FnMut()) {
    for _ in 0..1_000 {
        f();
    }
    let mut samples: Vec<u128> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{name}: p50 {:.2} µs, p99 {:.2} µs",
        p(0.50) as f64 / 1000.0,
        p(0.99) as f64 / 1000.0
    );
}

fn bench(c: &mut Criterion) {
    let home = tempfile::tempdir().unwrap();
    let receipts: Arc<dyn ReceiptStore> = Arc::new(SqliteReceiptStore::open(home.path()).unwrap());
    let audit: Arc<dyn AuditSink> =
        Arc::new(SqliteStore::open(&home.path().join("capability.db")).unwrap());
    let cases: Vec<(&str, CapabilityRuntime)> = vec![
        (
            "memory",
            runtime(
                Arc::new(MemoryReceiptStore::new()),
                Arc::new(MemoryStore::new()),
            ),
        ),
        ("sqlite", runtime(receipts, audit)),
    ];
    let options = ExecuteOptions {
        principal: Some(Principal {
            tenant: Some("acme".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let input = json!({"a": 20, "b": 22, "tenant": "acme"});
    for (name, rt) in &cases {
        let r = rt.invoke("svc/c7", input.clone(), &options).unwrap();
        assert_eq!(r.output, Some(json!({"result": 42})));
        let label = format!("governed_invoke/100_policies/{name}");
        c.bench_function(&label, |b| {
            b.iter(|| black_box(rt.invoke("svc/c7", input.clone(), &options)))
        });
        percentiles(&label, || {
            black_box(rt.invoke("svc/c7", input.clone(), &options).ok());
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(std::time::Duration::from_secs(3))
        .warm_up_time(std::time::Duration::from_millis(500));
    targets = bench
}
criterion_main!(benches);
