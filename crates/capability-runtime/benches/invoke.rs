//! The full in-process invoke — plan + authorize + execute + verify + receipt — for an add
//! capability and for `text/slugify`, with the memory store and with the durable SQLite store.
//!
//! Run: `cargo bench -p capability-runtime --bench invoke`. Besides criterion's report, each
//! case prints p50/p99 over 20,000 individually timed invokes.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc; // as `cap` and the Python package allocate

use std::hint::black_box;
use std::sync::Arc;

use capability_runtime::defaults::builtin_capability;
use capability_runtime::store::{MemoryReceiptStore, ReceiptStore, SqliteReceiptStore};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_test_support::capabilities::add;
use capability_test_support::measure::measure;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn runtime(store: Arc<dyn ReceiptStore>) -> CapabilityRuntime {
    let rt = CapabilityRuntime::builder().store(store).build();
    let _ = rt.register(add("math/add", json!([])));
    if let Ok(c) = builtin_capability("text/slugify") {
        let _ = rt.register(c);
    }
    rt
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
            measure(&label, 2_000, 20_000, || {
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
