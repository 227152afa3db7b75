//! Times the pieces of an invoke separately (profiling aid).
use capability_core::json::{canonical_hash, canonical_string};
use capability_core::plan::{CapabilityRef, Plan, new_plan_id};
use capability_core::schema::CompiledSchema;
use serde_json::json;
use std::hint::black_box;
use std::time::Instant;

fn time(name: &str, n: u32, mut f: impl FnMut()) {
    for _ in 0..1000 {
        f();
    }
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    println!("{name}: {:.0} ns", t.elapsed().as_nanos() as f64 / n as f64);
}

fn main() {
    let input = json!({"a": 20, "b": 22});
    let schema = CompiledSchema::compile(&json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})).unwrap_or_else(|_| std::process::exit(1));
    time("validate input", 200_000, || {
        black_box(schema.validate(black_box(&input)));
    });
    time("canonical_string(input)", 200_000, || {
        black_box(canonical_string(black_box(&input)));
    });
    time("canonical_hash(input)", 200_000, || {
        black_box(canonical_hash(black_box(&input)));
    });
    time("new_plan_id", 200_000, || {
        black_box(new_plan_id());
    });
    time("now_iso", 200_000, || {
        black_box(capability_core::js::now_iso());
    });
    time("Plan::build", 200_000, || {
        black_box(Plan::build(
            new_plan_id(),
            CapabilityRef {
                id: "math/add".into(),
                version: "1.0.0".into(),
            },
            input.clone(),
            vec![],
            "Execute Add".into(),
            capability_core::js::now_iso(),
            None,
            None,
        ));
    });
    time("input.clone", 200_000, || {
        black_box(input.clone());
    });
    time("json! output", 200_000, || {
        black_box(json!({"result": 42.0}));
    });
    for len in [15usize, 64, 300, 2000] {
        let data = vec![b'x'; len];
        time(&format!("sha256_hex({len} bytes)"), 200_000, || {
            black_box(capability_core::json::sha256_hex(black_box(&data)));
        });
    }
}

#[allow(dead_code)]
fn sha_bench() {}
