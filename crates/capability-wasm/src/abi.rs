//! The capability ABI: one JSON envelope in on stdin, one JSON reply out on stdout.

use capability_exec::{GuestError, Invocation};
use serde_json::{Map, Value};

use crate::error::{WasmError, WasmErrorKind};

/// The version tag of the ABI, reported in every [`crate::WasmReport`].
pub const ABI: &str = "capability-wasi-p1/1";

/// The envelope bytes written to the guest's stdin (`JSON.stringify` form):
/// `{"op", "input", "plan"?, "output"?, "receipt"?}`.
pub(crate) fn envelope(invocation: &Invocation) -> Vec<u8> {
    let mut map = Map::new();
    map.insert("op".into(), Value::String(invocation.op.as_str().into()));
    map.insert("input".into(), invocation.input.clone());
    for (key, value) in [
        ("plan", &invocation.plan),
        ("output", &invocation.output),
        ("receipt", &invocation.receipt),
    ] {
        if let Some(v) = value {
            map.insert(key.into(), v.clone());
        }
    }
    capability_core::json::to_js_string(&Value::Object(map)).into_bytes()
}

/// Reads the guest's stdout: exactly one object, `{"output": V}` or
/// `{"error": {"message": S, "code"?: S}}`, with optional surrounding whitespace.
pub(crate) fn parse_reply(stdout: &[u8]) -> Result<Result<Value, GuestError>, WasmError> {
    let protocol = |m: String| WasmError::new(WasmErrorKind::Protocol, m);
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err(protocol("guest wrote no reply on stdout".into()));
    }
    let value = capability_core::json::parse_message(stdout).map_err(|e| {
        if e.is_too_deep() {
            return protocol(capability_core::json::too_deep("Output"));
        }
        protocol(format!("guest reply is not one JSON value: {e}"))
    })?;
    let Value::Object(mut map) = value else {
        return Err(protocol("guest reply must be a JSON object".into()));
    };
    match (map.remove("output"), map.remove("error"), map.is_empty()) {
        (Some(output), None, true) => Ok(Ok(output)),
        (None, Some(error), true) => {
            let message = error.get("message").and_then(Value::as_str);
            let code = error.get("code");
            match (message, code) {
                (Some(m), None | Some(Value::Null)) => Ok(Err(GuestError {
                    message: m.to_string(),
                    code: None,
                })),
                (Some(m), Some(Value::String(c))) => Ok(Err(GuestError {
                    message: m.to_string(),
                    code: Some(c.clone()),
                })),
                _ => Err(protocol(
                    "guest error must be {\"message\": string, \"code\"?: string}".into(),
                )),
            }
        }
        _ => Err(protocol(
            "guest reply must have exactly one key, \"output\" or \"error\"".into(),
        )),
    }
}
