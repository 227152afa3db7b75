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

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc; // as `cap` and the Python package allocate

use std::hint::black_box;
use std::sync::Arc;

use capability_policy::audit::JsonlSink;
use capability_policy::{AuditSink, MemoryStore};
use capability_runtime::store::MemoryReceiptStore;
use capability_runtime::{Caller, CapabilityRuntime, ExecuteOptions};
use serde_json::json;

use capability_test_support::governed as support;
use capability_test_support::measure::timed;

/// brane-core's one policy (`deny if a > 107`) as one Cedar policy.
const ONE_POLICY: &str = r#"@id("limit") @reason("amount too large")
permit(principal, action, resource) unless { context.input has a && context.input.a > 107 };
"#;

fn runtime(policies: &str, audit: Arc<dyn AuditSink>) -> CapabilityRuntime {
    support::governed_by(policies, Arc::new(MemoryReceiptStore::new()), audit)
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
    let p = timed(
        env("PEERS_WARMUP", 2_000),
        env("PEERS_SAMPLES", 20_000),
        || {
            black_box(rt.invoke("svc/c7", input.clone(), &options).ok());
        },
    );
    println!(
        "{}",
        json!({"workload": workload, "p50_us": p.p50 / 1000.0, "p99_us": p.p99 / 1000.0,
               "mean_us": p.mean / 1000.0, "samples": p.samples})
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
