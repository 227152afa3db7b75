//! The full in-process invoke — plan + authorize + execute + verify + receipt — for an add
//! capability and for `text/slugify`, with the memory store and with the durable SQLite store.
//!
//! Run: `cargo bench -p capability-runtime --bench invoke`. Besides criterion's report, each
//! case prints p50/p99 over 20,000 individually timed invokes.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use capability_core::receipt::Verification;
use capability_runtime::defaults::builtin_capability;
use capability_runtime::store::{MemoryReceiptStore, ReceiptStore, SqliteReceiptStore};
use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn add() -> Option<Capability> {
    Capability::builder(json!({
        "specVersion": "0.1", "id": "math/add", "version": "1.0.0", "name": "Add",
        "description": "Adds two numbers.",
        "input": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
        "output": {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]},
        "effects": []
    }))
    .execute_json(|input, _| {
        let a = input["a"].as_f64().unwrap_or(0.0);
        let b = input["b"].as_f64().unwrap_or(0.0);
        Ok(json!({"result": a + b}))
    })
    .verify(|_, output, _| Ok(Verification { ok: output["result"].is_number(), message: None, data: None }))
    .build()
    .ok()
}

fn runtime(store: Arc<dyn ReceiptStore>) -> CapabilityRuntime {
    let rt = CapabilityRuntime::builder().store(store).build();
    if let Some(c) = add() {
        let _ = rt.register(c);
    }
    if let Ok(c) = builtin_capability("text/slugify") {
        let _ = rt.register(c);
    }
    rt
}

fn percentiles(name: &str, mut f: impl FnMut()) {
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
    let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{name}: p50 {:.2} µs, p99 {:.2} µs",
        p(0.50) as f64 / 1000.0,
        p(0.99) as f64 / 1000.0
    );
}

fn bench(c: &mut Criterion) {
    let add_input = json!({"a": 20, "b": 22});
    let slug_input = json!({"text": "Hello Capability World"});
    let options = ExecuteOptions::default();
    let home = tempfile::tempdir().ok();
    let sqlite: Option<Arc<dyn ReceiptStore>> = home
        .as_ref()
        .and_then(|h| SqliteReceiptStore::open(h.path()).ok())
        .map(|s| Arc::new(s) as Arc<dyn ReceiptStore>);
    let mut stores: Vec<(&str, Arc<dyn ReceiptStore>)> =
        vec![("memory", Arc::new(MemoryReceiptStore::new()))];
    if let Some(s) = sqlite {
        stores.push(("sqlite", s));
    }
    for (store_name, store) in stores {
        let rt = runtime(store);
        let cases: [(&str, &str, &Value); 2] = [
            ("add", "math/add", &add_input),
            ("slugify", "text/slugify", &slug_input),
        ];
        for (name, id, input) in cases {
            let label = format!("invoke/{name}/{store_name}");
            c.bench_function(&label, |b| {
                b.iter(|| black_box(rt.invoke(id, input.clone(), &options)))
            });
            percentiles(&label, || {
                black_box(rt.invoke(id, input.clone(), &options).ok());
            });
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(std::time::Duration::from_secs(2))
        .warm_up_time(std::time::Duration::from_millis(500));
    targets = bench
}
criterion_main!(benches);
