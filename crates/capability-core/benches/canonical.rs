//! Canonical hashing of a ~200-byte and a ~20 KB document, and plan creation.
//!
//! Run: `cargo bench -p capability-core --bench canonical`. Besides criterion's report, each
//! benchmark prints p50/p99 over individually timed iterations.

use std::hint::black_box;

use capability_core::json::{canonical_hash, canonical_text, parse_str};
use capability_core::plan::{CapabilityRef, Plan, new_plan_id};
use capability_test_support::measure::measure;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn small_doc() -> Value {
    json!({
        "specVersion": "0.1", "id": "text/slugify", "version": "1.0.0", "name": "Slugify Text",
        "description": "Make a URL slug.", "effects": [], "tags": ["text", "slug"],
        "behavior": {"deterministic": true, "idempotent": true, "reversible": false}
    })
}

fn large_doc() -> Value {
    let items: Vec<Value> = (0..120)
        .map(|i| json!({"id": format!("item/{i}"), "score": i as f64 * 1.5, "tags": ["a", "b", "c"], "ok": i % 2 == 0, "n": null, "text": "Lorem ipsum dolor sit amet, consectetur adipiscing elit"}))
        .collect();
    json!({"packages": items, "generatedAt": "2026-01-01T00:00:00.000Z", "10": 1, "2": 2})
}

fn bench(c: &mut Criterion) {
    let small = small_doc();
    let large = large_doc();
    let small_len = capability_core::json::canonical_string(&small).len();
    let large_len = capability_core::json::canonical_string(&large).len();
    println!("documents: small {small_len} bytes, large {large_len} bytes (canonical)");
    let large_text = capability_core::json::to_js_string(&large);

    c.bench_function("canonical_hash/200B", |b| {
        b.iter(|| canonical_hash(black_box(&small)))
    });
    c.bench_function("canonical_hash/20KB", |b| {
        b.iter(|| canonical_hash(black_box(&large)))
    });
    c.bench_function("canonical_text/20KB (parse + canonicalize)", |b| {
        b.iter(|| canonical_text(black_box(large_text.as_bytes())))
    });
    let input =
        parse_str(r#"{"text":"Hello Capability World","separator":"-"}"#).unwrap_or(Value::Null);
    let make_plan = || {
        Plan::build(
            new_plan_id(),
            CapabilityRef {
                id: "text/slugify".into(),
                version: "1.0.0".into(),
            },
            input.clone(),
            Vec::new(),
            "Execute Slugify Text".into(),
            capability_core::js::now_iso(),
            None,
        )
    };
    c.bench_function("plan/create", |b| b.iter(|| black_box(make_plan())));

    measure("canonical_hash/200B", 2_000, 20_000, || {
        black_box(canonical_hash(black_box(&small)));
    });
    measure("canonical_hash/20KB", 2_000, 20_000, || {
        black_box(canonical_hash(black_box(&large)));
    });
    measure("plan/create", 2_000, 20_000, || {
        black_box(make_plan());
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
