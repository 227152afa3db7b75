//! `math/add` as a capability-wasm guest: a WASI preview 1 command that reads one JSON
//! envelope on stdin and writes one JSON reply on stdout (see the capability-wasm crate docs).

use serde_json::{Value, json};
use std::io::{Read, Write};

/// The inert manifest, embedded as the `capability-manifest` custom section so the host can
/// check that the code it runs is the capability it authorized.
#[used]
#[unsafe(link_section = "capability-manifest")]
static MANIFEST: [u8; include_bytes!("../manifest.json").len()] =
    *include_bytes!("../manifest.json");

fn main() {
    let mut text = Vec::new();
    let reply = match std::io::stdin().read_to_end(&mut text) {
        Err(e) => failure("EXECUTION_FAILED", format!("cannot read stdin: {e}")),
        Ok(_) => match serde_json::from_slice::<Value>(&text) {
            Ok(envelope) => handle(&envelope),
            Err(e) => failure("INVALID_INPUT", format!("invalid envelope: {e}")),
        },
    };
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut out, &reply).is_ok() && out.flush().is_ok();
    if !written {
        std::process::exit(1);
    }
}

fn handle(envelope: &Value) -> Value {
    let input = envelope.get("input").unwrap_or(&Value::Null);
    let (a, b) = match operands(input) {
        Ok(pair) => pair,
        Err(message) => return failure("INVALID_INPUT", message),
    };
    match envelope.get("op").and_then(Value::as_str) {
        Some("plan") => json!({"output": {
            "summary": format!("Add {a} and {b}"),
            "effects": [],
        }}),
        Some("execute") => json!({"output": {"result": a + b}}),
        Some("verify") => {
            let got = envelope
                .get("output")
                .and_then(|o| o.get("result"))
                .and_then(Value::as_f64);
            match got {
                Some(result) if result == a + b => json!({"output": {"ok": true}}),
                _ => json!({"output": {"ok": false, "reason": "result is not a + b"}}),
            }
        }
        Some("rollback") => failure(
            "ROLLBACK_UNAVAILABLE",
            "math/add has nothing to roll back".into(),
        ),
        Some(other) => failure("INVALID_INPUT", format!("unknown op: {other}")),
        None => failure("INVALID_INPUT", "envelope has no op".into()),
    }
}

fn operands(input: &Value) -> Result<(f64, f64), String> {
    let number = |key: &str| {
        input
            .get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("input.{key} must be a number"))
    };
    Ok((number("a")?, number("b")?))
}

fn failure(code: &str, message: String) -> Value {
    json!({"error": {"message": message, "code": code}})
}
