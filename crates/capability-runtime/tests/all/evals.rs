//! The eval harness and determinism replay (the reference's advanced test 1, extended).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use capability_core::ErrorCode;
use capability_core::authorization::EffectPolicy;
use capability_core::json::canonical_hash;
use capability_runtime::evals::{EvalCase, evaluate_determinism, run_capability_evals};
use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions};
use capability_test_support::capabilities::add_manifest;
use serde_json::json;

fn runtime_with_add() -> CapabilityRuntime {
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .build();
    runtime
        .register(
            Capability::builder(add_manifest("math/add", json!([])))
                .execute_json(|i, _| {
                    Ok(json!({"result": i["a"].as_f64().unwrap() + i["b"].as_f64().unwrap()}))
                })
                .build()
                .unwrap(),
        )
        .unwrap();
    runtime
}

fn case(name: &str, a: i64, b: i64, expected: i64) -> EvalCase {
    EvalCase {
        name: name.into(),
        input: json!({"a": a, "b": b}),
        expected_output: Some(json!({"result": expected})),
        ..EvalCase::default()
    }
}

#[test]
fn two_expected_output_cases_pass() {
    let runtime = runtime_with_add();
    let cases = [case("small", 20, 22, 42), case("negative", -2, 1, -1)];
    let report = run_capability_evals(&runtime, "math/add", &cases, &ExecuteOptions::default());
    assert_eq!((report.passed, report.failed, report.total), (2, 0, 2));
    assert_eq!(report.pass_rate, 1.0);
    for result in &report.results {
        assert!(result.passed, "{result:?}");
        assert!(result.error.is_none());
        let receipt = runtime
            .get_receipt(result.receipt_id.as_deref().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(result.output_hash, receipt.output_hash);
    }
    assert_eq!(
        report.results[0].output_hash.as_deref(),
        Some(canonical_hash(&json!({"result": 42})).as_str())
    );
    let v = serde_json::to_value(&report).unwrap();
    assert_eq!(v["capabilityId"], "math/add");
    assert_eq!(v["passRate"], 1.0);
    assert!(v["results"][0].get("receiptId").is_some());
}

#[test]
fn a_wrong_expectation_fails_only_that_case() {
    let runtime = runtime_with_add();
    let mut by_hash = case("by hash", 1, 1, 2);
    by_hash.expected_output = None;
    by_hash.expected_output_hash = Some(canonical_hash(&json!({"result": 2})));
    let mut wrong_hash = by_hash.clone();
    wrong_hash.name = "wrong hash".into();
    wrong_hash.expected_output_hash = Some("0".repeat(64));
    let cases = [
        case("right", 20, 22, 42),
        case("wrong", 20, 22, 43),
        by_hash,
        wrong_hash,
    ];
    let report = run_capability_evals(&runtime, "math/add", &cases, &ExecuteOptions::default());
    let passed: Vec<bool> = report.results.iter().map(|r| r.passed).collect();
    assert_eq!(passed, [true, false, true, false]);
    assert_eq!(
        (report.passed, report.failed, report.total, report.pass_rate),
        (2, 2, 4, 0.5)
    );
    let wrong = &report.results[1];
    assert!(
        wrong.receipt_id.is_some(),
        "the case ran and left a receipt"
    );
    assert!(
        wrong.error.as_deref().unwrap().contains("expectedOutput"),
        "{wrong:?}"
    );
}

#[test]
fn invocation_errors_are_recorded_per_case_and_approval_is_per_case() {
    let runtime = runtime_with_add();
    runtime
        .register(
            Capability::builder(add_manifest(
                "math/add-and-store",
                json!(["database.write"]),
            ))
            .execute_json(|i, _| {
                Ok(json!({"result": i["a"].as_f64().unwrap() + i["b"].as_f64().unwrap()}))
            })
            .build()
            .unwrap(),
        )
        .unwrap();
    let cases: Vec<EvalCase> = serde_json::from_value(json!([
        {"name": "not approved", "input": {"a": 1, "b": 2}, "expectedOutput": {"result": 3}},
        {"name": "approved", "input": {"a": 1, "b": 2}, "approved": true, "expectedOutput": {"result": 3}},
        {"name": "bad input", "input": {"a": 1}, "approved": true}
    ]))
    .unwrap();
    let report = run_capability_evals(
        &runtime,
        "math/add-and-store",
        &cases,
        &ExecuteOptions::default(),
    );
    let passed: Vec<bool> = report.results.iter().map(|r| r.passed).collect();
    assert_eq!(passed, [false, true, false]);
    assert!(
        report.results[0]
            .error
            .as_deref()
            .unwrap()
            .contains("approval required"),
        "{:?}",
        report.results[0]
    );
    assert_eq!(
        report.results[2].error.as_deref(),
        Some("Input failed schema validation")
    );
    assert!(
        report.results[0].receipt_id.is_none(),
        "refused before execution: no receipt"
    );
}

#[test]
fn no_cases_give_pass_rate_one() {
    let runtime = runtime_with_add();
    let report = run_capability_evals(&runtime, "math/add", &[], &ExecuteOptions::default());
    assert_eq!((report.total, report.pass_rate), (0, 1.0));
}

#[test]
fn determinism_over_three_runs_gives_one_hash() {
    let runtime = runtime_with_add();
    let result = evaluate_determinism(
        &runtime,
        "math/add",
        &json!({"a": 20, "b": 22}),
        3,
        &ExecuteOptions::default(),
    )
    .unwrap();
    assert!(result.deterministic);
    assert_eq!(result.hashes.len(), 3);
    assert_eq!(result.receipt_ids.len(), 3);
    let unique: std::collections::HashSet<&String> = result.hashes.iter().collect();
    assert_eq!(unique.len(), 1);
    let distinct: std::collections::HashSet<&String> = result.receipt_ids.iter().collect();
    assert_eq!(distinct.len(), 3);
}

#[test]
fn a_counter_is_not_deterministic_and_runs_must_be_at_least_two() {
    let runtime = CapabilityRuntime::default();
    let counter = Arc::new(AtomicI64::new(0));
    let c = Arc::clone(&counter);
    runtime
        .register(
            Capability::builder(json!({
                "specVersion": "0.1", "id": "test/counter", "version": "1.0.0",
                "name": "Counter", "description": "Counts calls.", "effects": []
            }))
            .execute_json(move |_, _| Ok(json!(c.fetch_add(1, Ordering::SeqCst))))
            .build()
            .unwrap(),
        )
        .unwrap();
    let result = evaluate_determinism(
        &runtime,
        "test/counter",
        &json!({}),
        3,
        &ExecuteOptions::default(),
    )
    .unwrap();
    assert!(!result.deterministic);
    assert_eq!(result.hashes[0], canonical_hash(&json!(0)));
    let err = evaluate_determinism(
        &runtime,
        "test/counter",
        &json!({}),
        1,
        &ExecuteOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(err.message, "runs must be an integer >= 2");
}
