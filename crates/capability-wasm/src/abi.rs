//! The capability ABI: one JSON envelope in on stdin, one JSON reply out on stdout.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{GuestError, WasmError, WasmErrorKind};

/// The version tag of the ABI, reported in every [`crate::BoundaryReport`].
pub const ABI: &str = "capability-wasi-p1/1";

/// Which hook of the capability to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Plan,
    Execute,
    Verify,
    Rollback,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Plan => "plan",
            Op::Execute => "execute",
            Op::Verify => "verify",
            Op::Rollback => "rollback",
        }
    }
}

/// One call into a capability: the envelope's content.
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    pub op: Op,
    pub input: Value,
    /// The authorized plan (for execute, verify, rollback).
    pub plan: Option<Value>,
    /// The output being verified or rolled back.
    pub output: Option<Value>,
    /// The receipt of the execution being rolled back.
    pub receipt: Option<Value>,
}

impl Invocation {
    pub fn new(op: Op, input: Value) -> Self {
        Invocation {
            op,
            input,
            plan: None,
            output: None,
            receipt: None,
        }
    }

    pub fn plan(input: Value) -> Self {
        Invocation::new(Op::Plan, input)
    }

    pub fn execute(input: Value, plan: Option<Value>) -> Self {
        Invocation {
            plan,
            ..Invocation::new(Op::Execute, input)
        }
    }

    /// The envelope bytes written to the guest's stdin (`JSON.stringify` form).
    pub fn envelope(&self) -> Vec<u8> {
        let mut map = Map::new();
        map.insert("op".into(), Value::String(self.op.as_str().into()));
        map.insert("input".into(), self.input.clone());
        for (key, value) in [
            ("plan", &self.plan),
            ("output", &self.output),
            ("receipt", &self.receipt),
        ] {
            if let Some(v) = value {
                map.insert(key.into(), v.clone());
            }
        }
        capability_core::json::to_js_string(&Value::Object(map)).into_bytes()
    }
}

/// Reads the guest's stdout: exactly one object, `{"output": V}` or
/// `{"error": {"message": S, "code"?: S}}`, with optional surrounding whitespace.
pub(crate) fn parse_reply(stdout: &[u8]) -> Result<Result<Value, GuestError>, WasmError> {
    let protocol = |m: String| WasmError::new(WasmErrorKind::Protocol, m);
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err(protocol("guest wrote no reply on stdout".into()));
    }
    let value = capability_core::json::parse_message(stdout)
        .map_err(|e| protocol(format!("guest reply is not one JSON value: {e}")))?;
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
