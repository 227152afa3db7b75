//! The full governed invoke: effect authorization + 100 Cedar policies (before and after
//! stages) + execute + receipt + audit, with the durable SQLite stores (receipts and the
//! hash-chained audit log in one database with one writer thread, as the host opens them) and
//! with in-memory stores.
//!
//! Run: `cargo bench -p capability-runtime --bench governed`. Besides criterion's report, each
//! case prints p50/p99 over individually timed invokes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc; // as `cap` and the Python package allocate

use std::hint::black_box;
use std::sync::Arc;

use capability_policy::MemoryStore;
use capability_runtime::store::MemoryReceiptStore;
use capability_runtime::{Caller, CapabilityRuntime, ExecuteOptions};
use capability_test_support::governed::{self as support, runtime};
use capability_test_support::measure::percentiles;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn bench(c: &mut Criterion) {
    let home = tempfile::tempdir().unwrap();
    let (receipts, audit) = support::durable(home.path());
    let cases: Vec<(&str, CapabilityRuntime)> = vec![
        (
            "memory",
            runtime(
                Arc::new(MemoryReceiptStore::new()),
                Some(Arc::new(MemoryStore::new())),
            ),
        ),
        ("sqlite", runtime(receipts, Some(audit))),
    ];
    let options = ExecuteOptions {
        caller: Some(Caller::from(
            capability_policy::Actor::default().tenant("acme"),
        )),
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
