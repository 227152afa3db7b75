//! The capability ABI end to end with the example `math/add` guest, and the reply rules.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::*;
use capability_core::ErrorCode;
use capability_wasm::{Grants, Invocation, Limits, Op, WasmErrorKind, WasmModuleSpec, sha256};
use serde_json::{Value, json};

fn add(op: Op, input: Value, output: Option<Value>) -> Result<Value, capability_wasm::WasmError> {
    let invocation = Invocation {
        output,
        ..Invocation::new(op, input)
    };
    engine()
        .run(
            &add_module(),
            &invocation,
            &Grants::none(),
            &Limits::default(),
        )
        .unwrap()
        .result
}

#[test]
fn execute_adds() {
    assert_eq!(
        add(Op::Execute, json!({"a": 2, "b": 3}), None).unwrap(),
        json!({"result": 5})
    );
    assert_eq!(
        add(Op::Execute, json!({"a": 0.1, "b": 0.2}), None).unwrap(),
        json!({"result": 0.30000000000000004})
    );
    assert_eq!(
        add(Op::Execute, json!({"a": -1.5, "b": 1e21}), None).unwrap(),
        json!({"result": 1e21})
    );
}

#[test]
fn plan_verify_and_rollback() {
    assert_eq!(
        add(Op::Plan, json!({"a": 2, "b": 3}), None).unwrap(),
        json!({"summary": "Add 2 and 3", "effects": []})
    );
    assert_eq!(
        add(
            Op::Verify,
            json!({"a": 2, "b": 3}),
            Some(json!({"result": 5}))
        )
        .unwrap(),
        json!({"ok": true})
    );
    assert_eq!(
        add(
            Op::Verify,
            json!({"a": 2, "b": 3}),
            Some(json!({"result": 6}))
        )
        .unwrap()["ok"],
        json!(false)
    );
    let e = add(Op::Rollback, json!({"a": 2, "b": 3}), None).unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::Guest);
    assert_eq!(
        e.guest_error().unwrap().code.as_deref(),
        Some("ROLLBACK_UNAVAILABLE")
    );
    // The guest's code is the guest's: the host's code stays EXECUTION_FAILED.
    assert_eq!(e.error_code(), ErrorCode::ExecutionFailed);
    assert_eq!(
        e.to_value(),
        json!({
            "kind": "guest",
            "message": "math/add has nothing to roll back",
            "code": "EXECUTION_FAILED",
            "guestCode": "ROLLBACK_UNAVAILABLE",
        })
    );
}

#[test]
fn bad_input_is_a_guest_error_with_its_code() {
    let e = add(Op::Execute, json!({"a": "two", "b": 3}), None).unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::Guest);
    assert_eq!(e.message(), "input.a must be a number");
    assert_eq!(
        e.guest_error().unwrap().code.as_deref(),
        Some("INVALID_INPUT")
    );
    assert_eq!(e.error_code(), ErrorCode::ExecutionFailed);
}

#[test]
fn every_run_reports_its_boundary() {
    let limits = Limits::default();
    let out = engine()
        .run(
            &add_module(),
            &Invocation::execute(json!({"a": 1, "b": 2})),
            &Grants::none(),
            &limits,
        )
        .unwrap();
    let b = &out.boundary;
    let bytes = std::fs::read(fixture("guest-add.wasm")).unwrap();
    assert_eq!(b.engine, "wasmtime 48");
    assert_eq!(b.module_sha256, hex_of(&sha256(&bytes)));
    assert_eq!(b.fuel, limits.boundary.fuel);
    assert_eq!(b.memory_limit, limits.memory_bytes);
    assert_eq!(b.timeout_ms, 10_000);
    assert_eq!(b.tmp_quota, limits.tmp_bytes);
    assert_eq!(b.preopens.len(), 1);
    assert_eq!(b.preopens[0].guest, "/tmp");
    assert!(b.env.is_empty() && b.effects.is_empty());
    assert!(b.network.starts_with("none") && b.process_spawn.starts_with("none"));
    assert!(out.fuel_consumed.unwrap() > 0 && out.fuel_consumed.unwrap() < limits.boundary.fuel);
    let json = serde_json::to_value(b).unwrap();
    for key in [
        "kind",
        "engine",
        "fuel",
        "memoryLimit",
        "timeoutMs",
        "preopens",
        "network",
    ] {
        assert!(json.get(key).is_some(), "missing {key} in {json}");
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn reply(text: &str, status: i32) -> Result<Value, capability_wasm::WasmError> {
    let escaped = text
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let wat = std::fs::read_to_string(fixture("reply.wat"))
        .unwrap()
        .replace("@REPLY@", &escaped)
        .replace("@LEN@", &text.len().to_string())
        .replace("@STATUS@", &status.to_string());
    let bytes = wat::parse_str(&wat).unwrap();
    let module = engine()
        .load(&WasmModuleSpec::from_bytes(Arc::<[u8]>::from(bytes)))
        .unwrap();
    engine()
        .run(
            &module,
            &Invocation::execute(Value::Null),
            &Grants::none(),
            &Limits::default(),
        )
        .unwrap()
        .result
}

#[test]
fn reply_rules() {
    assert_eq!(reply(" {\"output\": [1, 2]}\n", 0).unwrap(), json!([1, 2]));
    assert_eq!(reply("{\"output\": null}", 0).unwrap(), Value::Null);

    let guest = reply(
        "{\"error\": {\"message\": \"nope\", \"code\": \"INVALID_INPUT\"}}",
        0,
    )
    .unwrap_err();
    assert_eq!(
        (guest.kind(), guest.message()),
        (WasmErrorKind::Guest, "nope")
    );
    // A failing exit with an error reply reports the reply.
    let guest = reply("{\"error\": {\"message\": \"bad\"}}", 3).unwrap_err();
    assert_eq!(
        (guest.kind(), guest.message()),
        (WasmErrorKind::Guest, "bad")
    );
    assert_eq!(guest.error_code(), ErrorCode::ExecutionFailed);
    // A failing exit without one is an exit error, even with an output.
    let exit = reply("{\"output\": 1}", 3).unwrap_err();
    assert_eq!(exit.kind(), WasmErrorKind::Exit);
    assert!(exit.message().contains("status 3"), "{}", exit.message());

    for bad in [
        " ",
        "not json",
        "[1]",
        "{\"output\": 1, \"extra\": 2}",
        "{\"output\": 1, \"error\": {\"message\": \"x\"}}",
        "{\"error\": \"just a string\"}",
        "{\"output\": 1} {\"output\": 2}",
    ] {
        let e = reply(bad, 0).unwrap_err();
        assert_eq!(e.kind(), WasmErrorKind::Protocol, "{bad:?} gave {e}");
    }
}

#[test]
fn many_threads_share_one_engine() {
    let module = add_module();
    std::thread::scope(|s| {
        for t in 0..6 {
            let module = module.clone();
            s.spawn(move || {
                for i in 0..15 {
                    let out = engine()
                        .run(
                            &module,
                            &Invocation::execute(json!({"a": t, "b": i})),
                            &Grants::none(),
                            &Limits::default(),
                        )
                        .unwrap();
                    assert_eq!(out.result.unwrap(), json!({"result": t + i}));
                }
            });
        }
    });
}
