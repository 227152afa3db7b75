//! The governed lifecycle, ported from the reference's core tests and extended: inspection,
//! legacy definitions, input validation, effect authorization, plan integrity, receipts for
//! every attempt, verification, rollback, provenance, timeouts and cancellation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capability_core::ErrorCode;
use capability_core::authorization::EffectPolicy;
use capability_core::binder::CancelToken;
use capability_core::plan::PlanDetails;
use capability_core::receipt::{ReceiptStatus, Verification};
use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions, HookError, ReceiptQuery};
use capability_test_support::capabilities::{AddIn, AddOut, add, add_manifest};
use serde_json::{Value, json};

fn runtime_with(policy: EffectPolicy) -> CapabilityRuntime {
    CapabilityRuntime::builder().policy(policy).build()
}

#[test]
fn inspection_is_inert() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let cap = Capability::builder(add_manifest("math/add", json!([])))
        .execute_json(move |_i, _c| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"result": 0}))
        })
        .build()
        .unwrap();
    let runtime = CapabilityRuntime::default();
    runtime.register(cap).unwrap();
    let inspection = runtime.inspect("math/add").unwrap();
    assert_eq!(inspection["executable"], false);
    assert!(inspection.get("execute").is_none());
    assert_eq!(inspection["id"], "math/add");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn legacy_definitions_get_a_local_id_and_run() {
    let cap = Capability::legacy(json!({"name": "Legacy Add", "description": "Adds."}))
        .execute_json(|i, _| {
            Ok(json!(
                i["a"].as_i64().unwrap_or(0) + i["b"].as_i64().unwrap_or(0)
            ))
        })
        .build()
        .unwrap();
    assert_eq!(cap.id(), "local/legacy-add");
    assert_eq!(cap.manifest().version, "0.0.0");
    let runtime = CapabilityRuntime::default();
    runtime.register(cap).unwrap();
    let r = runtime
        .invoke(
            "local/legacy-add",
            json!({"a": 20, "b": 22}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(r.output, Some(json!(42)));
}

#[test]
fn legacy_object_effects_map_to_effect_strings() {
    let cap = Capability::legacy(json!({
        "name": "Old", "description": "d",
        "effects": {"filesystem": {"read": true, "write": true}, "network": true, "shell": true, "environment": true}
    }))
    .execute_json(|_, _| Ok(json!(null)))
    .build()
    .unwrap();
    assert_eq!(
        cap.manifest().effects(),
        [
            "filesystem.read",
            "filesystem.write",
            "network.connect",
            "process.spawn",
            "environment.read"
        ]
    );
}

#[test]
fn invalid_manifests_are_refused_when_built() {
    let err = Capability::builder(json!({"specVersion": "0.1", "id": "bad", "version": "v1", "name": "n", "description": "d"}))
        .execute_json(|_, _| Ok(json!(null)))
        .build()
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest);
    assert_eq!(err.details.unwrap().as_array().unwrap().len(), 2);
}

#[test]
fn input_is_validated_and_a_valid_invoke_leaves_a_receipt() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add("math/add", json!([]))).unwrap();
    let err = runtime
        .invoke("math/add", json!({"a": 1}), &ExecuteOptions::default())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(
        err.details,
        Some(json!([{"path": "$.b", "message": "is required"}]))
    );
    assert!(
        runtime
            .list_receipts(&ReceiptQuery::default())
            .unwrap()
            .is_empty(),
        "no receipt before planning succeeds"
    );

    let r = runtime
        .invoke(
            "math/add",
            json!({"a": 20, "b": 22}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(r.output, Some(json!({"result": 42})));
    assert_eq!(r.status, ReceiptStatus::Succeeded);
    assert!(r.verification.as_ref().unwrap().ok);
    assert_eq!(
        r.input_hash,
        "19a9da213b0b954d2df6634131600d6a1e7561f25cdaa5152a4bdd35d24e9a0a"
    );
    assert_eq!(
        r.output_hash.as_deref(),
        Some("0773698cf701d4082d365abcd08181974a52141a62ec0bf2eb2ab14996d02674")
    );
    assert_eq!(r.isolation.as_ref().unwrap()["boundary"], "in-process");
    assert_eq!(
        runtime
            .get_receipt(&r.receipt_id)
            .unwrap()
            .unwrap()
            .receipt_id,
        r.receipt_id
    );
}

#[test]
fn effects_are_denied_by_default() {
    let runtime = CapabilityRuntime::default();
    runtime
        .register(add("db/write", json!(["database.write"])))
        .unwrap();
    let err = runtime
        .invoke(
            "db/write",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    assert_eq!(err.message, "denied effects: database.write");
    assert!(
        runtime
            .list_receipts(&ReceiptQuery::default())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn permissive_policy_requires_approval_for_mutating_effects() {
    let runtime = runtime_with(EffectPolicy::permissive());
    runtime
        .register(add("db/write", json!(["database.write"])))
        .unwrap();
    let plan = runtime.plan("db/write", json!({"a": 1, "b": 2})).unwrap();
    let decision = runtime.authorize(&plan, false).unwrap();
    assert!(!decision.allowed);
    assert_eq!(decision.approval_required, ["database.write"]);
    let err = runtime
        .execute(&plan, &ExecuteOptions::default())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalRequired);
    let r = runtime.execute(&plan, &ExecuteOptions::approved()).unwrap();
    assert_eq!(r.output, Some(json!({"result": 3})));
}

#[test]
fn read_only_policy_allows_database_reads() {
    let runtime = runtime_with(EffectPolicy::read_only());
    let cap = Capability::builder(json!({"specVersion": "0.1", "id": "db/read", "version": "1.0.0", "name": "Read", "description": "Reads.", "effects": ["database.read"]}))
        .execute_json(|_, _| Ok(json!("ok")))
        .build()
        .unwrap();
    runtime.register(cap).unwrap();
    let r = runtime
        .invoke("db/read", json!({}), &ExecuteOptions::default())
        .unwrap();
    assert_eq!(r.output, Some(json!("ok")));
}

#[test]
fn tampered_plans_are_rejected() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add("math/add", json!([]))).unwrap();
    let mut plan = runtime.plan("math/add", json!({"a": 1, "b": 2})).unwrap();
    plan.input = json!({"a": 100, "b": 2});
    let err = runtime
        .execute(&plan, &ExecuteOptions::default())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidPlan);
    assert_eq!(err.message, "Plan fingerprint mismatch");

    let mut plan = runtime.plan("math/add", json!({"a": 1, "b": 2})).unwrap();
    plan.input = json!({"a": 100, "b": 2});
    plan.fingerprint = plan.compute_fingerprint();
    assert_eq!(
        runtime
            .execute(&plan, &ExecuteOptions::default())
            .unwrap_err()
            .message,
        "Plan input hash mismatch"
    );
    assert!(runtime.authorize(&plan, false).is_err());
}

#[test]
fn a_version_change_after_planning_is_rejected() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add("math/add", json!([]))).unwrap();
    let plan = runtime.plan("math/add", json!({"a": 1, "b": 2})).unwrap();
    let mut manifest = add_manifest("math/add", json!([]));
    manifest["version"] = json!("2.0.0");
    runtime.registry().replace(
        Capability::builder(manifest)
            .execute_json(|_, _| Ok(json!({"result": 0})))
            .build()
            .unwrap(),
    );
    let err = runtime
        .execute(&plan, &ExecuteOptions::default())
        .unwrap_err();
    assert_eq!(err.message, "Capability version changed after planning");
}

#[test]
fn planned_effects_must_be_declared() {
    let runtime = runtime_with(EffectPolicy::permissive());
    let cap = Capability::builder(add_manifest("fs/peek", json!(["filesystem.read"])))
        .execute_json(|_, _| Ok(json!({"result": 1})))
        .plan(|_, _| {
            Ok(PlanDetails {
                effects: Some(vec!["filesystem.read".into(), "network.connect".into()]),
                ..Default::default()
            })
        })
        .build()
        .unwrap();
    runtime.register(cap).unwrap();
    let err = runtime
        .plan("fs/peek", json!({"a": 1, "b": 1}))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidPlan);
    assert_eq!(
        err.message,
        "Plan requested undeclared effects: network.connect"
    );
}

#[test]
fn plan_hooks_can_narrow_effects_and_add_data() {
    let runtime = runtime_with(EffectPolicy::read_only());
    let cap = Capability::builder(add_manifest(
        "fs/maybe",
        json!(["filesystem.read", "filesystem.write"]),
    ))
    .execute_json(|_, _| Ok(json!({"result": 1})))
    .plan(|_, _| {
        Ok(PlanDetails {
            effects: Some(vec!["filesystem.read".into()]),
            summary: Some("Read only this time".into()),
            data: Some(json!({"path": "/x"})),
        })
    })
    .build()
    .unwrap();
    runtime.register(cap).unwrap();
    let plan = runtime.plan("fs/maybe", json!({"a": 1, "b": 1})).unwrap();
    assert_eq!(plan.effects, ["filesystem.read"]);
    assert_eq!(plan.summary, "Read only this time");
    assert_eq!(plan.data, Some(json!({"path": "/x"})));
    let r = runtime.execute(&plan, &ExecuteOptions::default()).unwrap();
    assert_eq!(r.effects, ["filesystem.read"]);
}

#[test]
fn failures_leave_a_failed_receipt_stored_before_the_error() {
    let runtime = CapabilityRuntime::default();
    let boom = Capability::builder(add_manifest("x/boom", json!([])))
        .execute_json(|_, _| Err(HookError::named("RangeError", "boom")))
        .build()
        .unwrap();
    runtime.register(boom).unwrap();
    let err = runtime
        .invoke(
            "x/boom",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ExecutionFailed);
    let id = err.receipt_id.clone().unwrap();
    assert_eq!(
        err.message,
        format!("Capability execution failed; receipt {id}")
    );
    assert_eq!(
        err.details.as_ref().unwrap()["cause"],
        json!({"name": "RangeError", "message": "boom"})
    );
    let receipt = runtime.get_receipt(&id).unwrap().unwrap();
    assert_eq!(receipt.status, ReceiptStatus::Failed);
    assert_eq!(receipt.error.as_ref().unwrap().message, "boom");
    assert!(receipt.output.is_none() && receipt.output_hash.is_none());
}

#[test]
fn invalid_output_and_failed_verification_leave_failed_receipts() {
    let runtime = CapabilityRuntime::default();
    let liar = Capability::builder(add_manifest("x/liar", json!([])))
        .execute_json(|_, _| Ok(json!({"result": "not a number"})))
        .build()
        .unwrap();
    let doubter = Capability::builder(add_manifest("x/doubter", json!([])))
        .execute_json(|_, _| Ok(json!({"result": 1})))
        .verify(|_, _, _| {
            Ok(Verification {
                ok: false,
                message: None,
                data: None,
            })
        })
        .build()
        .unwrap();
    runtime.register(liar).unwrap();
    runtime.register(doubter).unwrap();
    let err = runtime
        .invoke(
            "x/liar",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidOutput);
    let r = runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        r.error.as_ref().unwrap().code.as_deref(),
        Some("INVALID_OUTPUT")
    );
    let err = runtime
        .invoke(
            "x/doubter",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::VerifyFailed);
    assert_eq!(err.message, "Capability verification failed");
    assert_eq!(
        runtime
            .list_receipts(&ReceiptQuery {
                status: Some(ReceiptStatus::Failed),
                ..Default::default()
            })
            .unwrap()
            .len(),
        2
    );
}

fn reversible(log: Arc<Mutex<Vec<String>>>) -> Capability {
    let (l1, l2) = (Arc::clone(&log), log);
    Capability::builder(json!({
        "specVersion": "0.1", "id": "counter/add", "version": "1.0.0", "name": "Counter", "description": "Adds to a counter.",
        "effects": ["database.write"], "behavior": {"reversible": true}
    }))
    .execute_json(move |input, _| {
        l1.lock().unwrap().push(format!("add {}", input["n"]));
        Ok(json!({"added": input["n"]}))
    })
    .rollback(move |receipt, _| {
        l2.lock().unwrap().push(format!("undo {}", receipt.input["n"]));
        Ok(json!({"undone": true}))
    })
    .build()
    .unwrap()
}

#[test]
fn rollback_undoes_a_successful_receipt_with_authorization() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let runtime = runtime_with(EffectPolicy::permissive());
    runtime.register(reversible(Arc::clone(&log))).unwrap();
    let r = runtime
        .invoke("counter/add", json!({"n": 5}), &ExecuteOptions::approved())
        .unwrap();
    let err = runtime
        .rollback(&r.receipt_id, &ExecuteOptions::default())
        .unwrap_err();
    assert_eq!(
        err.code,
        ErrorCode::ApprovalRequired,
        "rollback is authorized like an execution"
    );
    let rolled = runtime
        .rollback(&r.receipt_id, &ExecuteOptions::approved())
        .unwrap();
    assert_eq!(rolled.status, ReceiptStatus::RolledBack);
    assert_eq!(rolled.rollback_result, Some(json!({"undone": true})));
    assert_eq!(*log.lock().unwrap(), ["add 5", "undo 5"]);
    let again = runtime
        .rollback(&r.receipt_id, &ExecuteOptions::approved())
        .unwrap_err();
    assert_eq!(again.code, ErrorCode::RollbackUnavailable);
    assert_eq!(
        again.message,
        "Only successful executions can be rolled back"
    );
    assert_eq!(
        runtime
            .rollback("receipt_nope", &ExecuteOptions::approved())
            .unwrap_err()
            .code,
        ErrorCode::NotFound
    );
}

#[test]
fn rollback_needs_a_reversible_capability_with_an_implementation() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add("math/add", json!([]))).unwrap();
    let r = runtime
        .invoke(
            "math/add",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    let err = runtime
        .rollback(&r.receipt_id, &ExecuteOptions::approved())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::RollbackUnavailable);
    assert_eq!(err.message, "Capability is not rollback-enabled: math/add");
}

#[test]
fn a_failing_rollback_marks_the_receipt() {
    let runtime = CapabilityRuntime::default();
    let cap = Capability::builder(json!({
        "specVersion": "0.1", "id": "x/undo", "version": "1.0.0", "name": "Undo", "description": "d", "behavior": {"reversible": true}
    }))
    .execute_json(|_, _| Ok(json!(1)))
    .rollback(|_, _| Err(HookError::msg("cannot undo")))
    .build()
    .unwrap();
    runtime.register(cap).unwrap();
    let r = runtime
        .invoke("x/undo", json!({}), &ExecuteOptions::default())
        .unwrap();
    let err = runtime
        .rollback(&r.receipt_id, &ExecuteOptions::default())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::RollbackFailed);
    assert_eq!(
        err.message,
        format!("Rollback failed for receipt {}", r.receipt_id)
    );
    let stored = runtime.get_receipt(&r.receipt_id).unwrap().unwrap();
    assert_eq!(stored.status, ReceiptStatus::RollbackFailed);
    assert_eq!(stored.error.as_ref().unwrap().message, "cannot undo");
}

#[test]
fn provenance_and_caller_metadata_are_copied_into_receipts() {
    let runtime = CapabilityRuntime::default();
    let cap = Capability::builder(add_manifest("math/add", json!([])))
        .execute_json(|_, _| Ok(json!({"result": 1})))
        .provenance(json!({"packageName": "@fixture/add", "commit": "abc123"}))
        .build()
        .unwrap();
    runtime.register(cap).unwrap();
    let options = ExecuteOptions {
        metadata: Some(json!({"trace": "t-1"})),
        ..Default::default()
    };
    let r = runtime
        .invoke("math/add", json!({"a": 1, "b": 0}), &options)
        .unwrap();
    assert_eq!(
        r.provenance.as_ref().unwrap()["packageName"],
        "@fixture/add"
    );
    assert_eq!(r.provenance.as_ref().unwrap()["commit"], "abc123");
    assert_eq!(r.metadata, Some(json!({"trace": "t-1"})));
}

#[test]
fn registration_is_unique_and_replaceable() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add("math/add", json!([]))).unwrap();
    let err = runtime.register(add("math/add", json!([]))).unwrap_err();
    assert_eq!(err.code, ErrorCode::DuplicateCapability);
    assert_eq!(err.message, "Capability already registered: math/add");
    assert!(runtime.registry().unregister("math/add").is_some());
    assert!(runtime.registry().unregister("math/add").is_none());
    assert_eq!(
        runtime.inspect("math/add").unwrap_err().code,
        ErrorCode::NotFound
    );
}

#[test]
fn a_slow_synchronous_capability_times_out_with_a_failed_receipt() {
    let runtime = CapabilityRuntime::default();
    let cap = Capability::builder(add_manifest("x/slow", json!([])))
        .execute_json(|_, ctx| {
            for _ in 0..500 {
                if ctx.cancel.is_cancelled() {
                    return Err(HookError::msg("stopped"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(json!({"result": 1}))
        })
        .build()
        .unwrap();
    runtime.register(cap).unwrap();
    let options = ExecuteOptions {
        timeout: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let err = runtime
        .invoke("x/slow", json!({"a": 1, "b": 2}), &options)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(err.code, ErrorCode::ExecutionFailed);
    let r = runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(r.error.as_ref().unwrap().name, "TimeoutError");
    let isolation = r.isolation.as_ref().unwrap();
    assert_eq!(isolation["boundary"], "in-process");
    assert_eq!(isolation["limits"]["timeoutMs"], 100);
}

#[test]
fn async_capabilities_run_and_are_dropped_at_the_deadline_or_on_cancel() {
    let runtime = CapabilityRuntime::default();
    let fast = Capability::builder(add_manifest("x/async-add", json!([])))
        .execute_async(|i: AddIn, _ctx| async move { Ok(AddOut { result: i.a + i.b }) })
        .build()
        .unwrap();
    let never = Capability::builder(add_manifest("x/never", json!([])))
        .execute_async(|_i: Value, _ctx| std::future::pending::<Result<AddOut, HookError>>())
        .build()
        .unwrap();
    runtime.register(fast).unwrap();
    runtime.register(never).unwrap();
    let r = runtime
        .invoke(
            "x/async-add",
            json!({"a": 40, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(r.output, Some(json!({"result": 42})));

    let options = ExecuteOptions {
        timeout: Some(Duration::from_millis(50)),
        ..Default::default()
    };
    let err = runtime
        .invoke("x/never", json!({"a": 1, "b": 2}), &options)
        .unwrap_err();
    let r = runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(r.error.as_ref().unwrap().name, "TimeoutError");

    let cancel = CancelToken::new();
    let trigger = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        trigger.cancel();
    });
    let options = ExecuteOptions {
        cancel: Some(cancel),
        ..Default::default()
    };
    let err = runtime
        .invoke("x/never", json!({"a": 1, "b": 2}), &options)
        .unwrap_err();
    let r = runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(r.error.as_ref().unwrap().name, "AbortError");
}

#[test]
fn module_capabilities_never_run_in_process() {
    let runtime = CapabilityRuntime::default();
    let cap = Capability::module(
        &add_manifest("pkg/add", json!([])),
        capability_runtime::ModuleSource {
            package_root: "/nonexistent".into(),
            module: "./add.js".into(),
            integrity: None,
        },
    )
    .unwrap();
    runtime.register(cap).unwrap();
    let err = runtime
        .invoke(
            "pkg/add",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ExecutionFailed);
    assert_eq!(
        err.message,
        "Module-backed capability pkg/add requires an isolated executor"
    );
}

#[test]
fn receipts_are_queryable_by_capability_status_and_time() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add("math/add", json!([]))).unwrap();
    runtime.register(add("math/plus", json!([]))).unwrap();
    for i in 0..3 {
        runtime
            .invoke(
                "math/add",
                json!({"a": i, "b": 1}),
                &ExecuteOptions::default(),
            )
            .unwrap();
    }
    runtime
        .invoke(
            "math/plus",
            json!({"a": 1, "b": 1}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    let q = |capability: Option<&str>, limit: Option<usize>| ReceiptQuery {
        capability: capability.map(String::from),
        limit,
        ..Default::default()
    };
    assert_eq!(
        runtime
            .list_receipts(&q(Some("math/add"), None))
            .unwrap()
            .len(),
        3
    );
    assert_eq!(runtime.list_receipts(&q(None, Some(2))).unwrap().len(), 2);
    let future = ReceiptQuery {
        since: Some("2999-01-01T00:00:00.000Z".into()),
        ..Default::default()
    };
    assert!(runtime.list_receipts(&future).unwrap().is_empty());
}
