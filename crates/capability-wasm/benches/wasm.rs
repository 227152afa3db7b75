//! Per-execution cost of the example `math/add` capability, warm: the module is compiled and
//! cached; each iteration instantiates from the pool, builds the WASI context, runs `_start`
//! (envelope in, reply out) and parses the reply.
//!
//! `cargo bench -p capability-wasm --bench wasm`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::path::PathBuf;

use capability_wasm::{EngineConfig, Grants, Invocation, Limits, WasmEngine, WasmModuleSpec};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn add(c: &mut Criterion) {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/guest-add.wasm");
    let engine = WasmEngine::new(EngineConfig::default()).unwrap();
    let spec = WasmModuleSpec::from_path(&fixture);
    let module = engine.load(&spec).unwrap();
    let call = Invocation::execute(json!({"a": 2, "b": 3}));
    let grants = Grants::none();
    let with_tmp = Limits::default();
    let without_tmp = Limits {
        tmp_bytes: 0,
        ..Limits::default()
    };

    let mut group = c.benchmark_group("wasm");
    group.bench_function("add_warm", |b| {
        b.iter(|| {
            let out = engine.run(&module, &call, &grants, &with_tmp).unwrap();
            black_box(out.result.unwrap())
        })
    });
    group.bench_function("add_warm_no_tmp", |b| {
        b.iter(|| {
            let out = engine.run(&module, &call, &grants, &without_tmp).unwrap();
            black_box(out.result.unwrap())
        })
    });
    group.bench_function("load_cached", |b| {
        b.iter(|| black_box(engine.load(&spec).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, add);
criterion_main!(benches);
