//! Runs the in-process invoke of an add capability in a loop (for profiling):
//! `cargo run --release -p capability-runtime --example invoke_loop -- 100000`.

use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions};
use serde_json::json;

fn main() -> Result<(), capability_core::CapabilityError> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let add = Capability::builder(json!({
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
    .build()?;
    let runtime = CapabilityRuntime::default();
    runtime.register(add)?;
    let input = json!({"a": 20, "b": 22});
    let options = ExecuteOptions::default();
    let started = std::time::Instant::now();
    for _ in 0..n {
        runtime.invoke("math/add", input.clone(), &options)?;
    }
    println!(
        "{:.3} µs per invoke",
        started.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    Ok(())
}
