//! Our side of `benches/peers/run.sh`: brane-core's three workloads on the same capability, the
//! same input and the same policy logic, printed as JSON lines (`workload`, `p50_us`, `p99_us`,
//! `mean_us`) for the script to pair with brane-core's.
//!
//! * `1_policy`: one Cedar policy, in-memory receipts and audit.
//! * `100_policies`: the 100 policies of the `governed` bench, in-memory receipts and audit.
//! * `1_policy_jsonl`: one policy, audit appended to a JSONL file (brane-core's
//!   `JsonlAuditSink`), in-memory receipts.
//!
//! Each call is the full governed invoke: effect authorization, the before and after policy
//! stages, execute, output validation, three canonical hashes, a receipt and two audit events.
//!
//! Run: `cargo bench -p capability-runtime --bench peers` (`PEERS_SAMPLES`, `PEERS_WARMUP`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use capability_core::authorization::EffectPolicy;
use capability_policy::audit::JsonlSink;
use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::{AuditSink, Governor, MemoryStore, PolicyEngine};
use capability_runtime::store::MemoryReceiptStore;
use capability_runtime::{Caller, CapabilityRuntime, ExecuteOptions};
use serde_json::json;

use capability_test_support::governed as support;

/// brane-core's one policy (`deny if a > 107`) as one Cedar policy.
const ONE_POLICY: &str = r#"@id("limit") @reason("amount too large")
permit(principal, action, resource) unless { context.input has a && context.input.a > 107 };
"#;

fn runtime(policies: &str, audit: Arc<dyn AuditSink>) -> CapabilityRuntime {
    let cedar = CedarPolicies::from_sources(&[PolicyFile::new("peers.cedar", policies)]).unwrap();
    let engine = PolicyEngine::new();
    engine.add_source(Arc::new(cedar));
    let governor = Governor::new("bench-agent")
        .engine(Arc::new(engine))
        .audit(audit);
    let rt = CapabilityRuntime::builder()
        .policy(EffectPolicy::read_only())
        .store(Arc::new(MemoryReceiptStore::new()))
        .governor(Arc::new(governor))
        .build();
    for i in 0..support::CAPABILITIES {
        rt.register(support::add(&format!("svc/c{i}"))).unwrap();
    }
    rt
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn measure(workload: &str, rt: &CapabilityRuntime) {
    let options = ExecuteOptions {
        caller: Some(Caller::from(
            capability_policy::Actor::default().tenant("acme"),
        )),
        ..Default::default()
    };
    let input = json!({"a": 20, "b": 22, "tenant": "acme"});
    let r = rt.invoke("svc/c7", input.clone(), &options).unwrap();
    assert_eq!(r.output, Some(json!({"result": 42})));
    for _ in 0..env("PEERS_WARMUP", 2_000) {
        black_box(rt.invoke("svc/c7", input.clone(), &options).ok());
    }
    let mut samples: Vec<u128> = (0..env("PEERS_SAMPLES", 20_000))
        .map(|_| {
            let t = Instant::now();
            black_box(rt.invoke("svc/c7", input.clone(), &options).ok());
            t.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    let p = |q: f64| {
        samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)] as f64 / 1000.0
    };
    let mean = samples.iter().sum::<u128>() as f64 / samples.len() as f64 / 1000.0;
    println!(
        "{}",
        json!({"workload": workload, "p50_us": p(0.5), "p99_us": p(0.99), "mean_us": mean,
               "samples": samples.len()})
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    measure(
        "1_policy",
        &runtime(ONE_POLICY, Arc::new(MemoryStore::new())),
    );
    measure(
        "100_policies",
        &runtime(&support::policies(), Arc::new(MemoryStore::new())),
    );
    let dir = tempfile::tempdir().unwrap();
    measure(
        "1_policy_jsonl",
        &runtime(
            ONE_POLICY,
            Arc::new(JsonlSink::new(dir.path().join("audit.jsonl"))),
        ),
    );
}
