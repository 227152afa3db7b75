//! Capabilities the tests and benches register: the `Add` capability (`a + b = result`) that
//! the reference's own tests use, as a manifest and with in-process hooks.

use capability_core::receipt::Verification;
use capability_runtime::Capability;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The `Add` manifest: numbers `a` and `b` in, `result` out, with the given `id` and
/// `effects`; tagged `math` and `arithmetic`, deterministic and idempotent.
pub fn add_manifest(id: &str, effects: Value) -> Value {
    json!({
        "specVersion": "0.1", "id": id, "version": "1.0.0", "name": "Add",
        "description": "Adds two numbers.",
        "input": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
        "output": {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]},
        "effects": effects,
        "tags": ["math", "arithmetic"],
        "behavior": {"deterministic": true, "idempotent": true}
    })
}

/// The input of [`add`], typed.
#[derive(Deserialize)]
pub struct AddIn {
    pub a: f64,
    pub b: f64,
}

/// The output of [`add`], typed.
#[derive(Serialize)]
pub struct AddOut {
    pub result: f64,
}

/// [`add_manifest`] with typed Rust hooks: the sum, verified to be a number.
pub fn add(id: &str, effects: Value) -> Capability {
    Capability::builder(add_manifest(id, effects))
        .execute(|i: AddIn, _ctx| Ok(AddOut { result: i.a + i.b }))
        .verify(|_input, output, _ctx| {
            Ok(Verification {
                ok: output["result"].is_number(),
                message: None,
                data: None,
            })
        })
        .build()
        .unwrap()
}
