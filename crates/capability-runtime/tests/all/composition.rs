//! Static composites and runtime pipelines (the reference's core test 10, extended):
//! add → double, the effect union, refusals of manifests that omit effects and of schema
//! contradictions, per-step receipts and authorization in pipelines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use capability_core::ErrorCode;
use capability_core::authorization::EffectPolicy;
use capability_core::receipt::ReceiptStatus;
use capability_runtime::composition::{CompositionStep, compose_capabilities, run_pipeline};
use capability_runtime::{Capability, CapabilityRuntime, ExecuteOptions, ReceiptQuery};
use serde_json::{Value, json};

fn number_object(keys: &[&str]) -> Value {
    let props: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| (k.to_string(), json!({"type": "number"})))
        .collect();
    json!({"type": "object", "properties": props, "required": keys})
}

fn manifest(id: &str, input: Value, output: Value, effects: Value) -> Value {
    json!({
        "specVersion": "0.1", "id": id, "version": "1.0.0", "name": id,
        "description": format!("Test capability {id}."),
        "input": input, "output": output, "effects": effects,
        "behavior": {"deterministic": true, "idempotent": true, "reversible": false}
    })
}

fn add(effects: Value) -> Capability {
    Capability::builder(manifest(
        "math/add",
        number_object(&["a", "b"]),
        number_object(&["result"]),
        effects,
    ))
    .execute_json(|i, _| Ok(json!({"result": i["a"].as_f64().unwrap() + i["b"].as_f64().unwrap()})))
    .build()
    .unwrap()
}

fn double(effects: Value) -> Capability {
    Capability::builder(manifest(
        "math/double",
        number_object(&["result"]),
        number_object(&["result"]),
        effects,
    ))
    .execute_json(|i, _| Ok(json!({"result": i["result"].as_f64().unwrap() * 2.0})))
    .build()
    .unwrap()
}

fn composite_manifest(effects: Option<Value>) -> Value {
    let mut m = json!({
        "specVersion": "0.1", "id": "math/add-then-double", "version": "1.0.0",
        "name": "Add then double", "description": "Adds two numbers and doubles the sum."
    });
    if let Some(e) = effects {
        m["effects"] = e;
    }
    m
}

fn runtime(policy: EffectPolicy) -> CapabilityRuntime {
    CapabilityRuntime::builder().policy(policy).build()
}

#[test]
fn static_composite_adds_then_doubles() {
    let steps = vec![
        CompositionStep::new(Arc::new(add(json!([])))),
        CompositionStep::new(Arc::new(double(json!([])))),
    ];
    let composite = compose_capabilities(composite_manifest(None), steps).unwrap();
    let m = composite.manifest();
    assert_eq!(m.effects(), [] as [&str; 0]);
    assert_eq!(
        m.behavior,
        Some(json!({"deterministic": true, "idempotent": true, "reversible": false}))
    );
    // The composite takes the first step's input and the last step's output contracts.
    assert_eq!(m.input, Some(number_object(&["a", "b"])));
    assert_eq!(m.output, Some(number_object(&["result"])));

    let runtime = CapabilityRuntime::default();
    runtime.register(composite).unwrap();
    let receipt = runtime
        .invoke(
            "math/add-then-double",
            json!({"a": 10, "b": 11}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(receipt.output, Some(json!({"result": 42})));
    // One receipt for the composite; its steps ran in process without receipts.
    assert_eq!(
        runtime
            .list_receipts(&ReceiptQuery::default())
            .unwrap()
            .len(),
        1
    );
    // The composite's input contract is enforced before anything runs.
    let err = runtime
        .invoke(
            "math/add-then-double",
            json!({"a": 10}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
}

#[test]
fn composite_effects_are_the_ordered_union_and_behaviour_follows_the_steps() {
    let nondeterministic = Capability::builder(json!({
        "specVersion": "0.1", "id": "math/noisy", "version": "1.0.0", "name": "Noisy",
        "description": "Passes the result through.",
        "input": number_object(&["result"]), "output": number_object(&["result"]),
        "effects": ["network.connect", "filesystem.read"],
        "behavior": {"deterministic": false, "idempotent": true}
    }))
    .execute_json(|i, _| Ok(i.clone()))
    .build()
    .unwrap();
    let steps = vec![
        CompositionStep::new(Arc::new(add(json!(["filesystem.read"])))),
        CompositionStep::new(Arc::new(nondeterministic)),
        CompositionStep::new(Arc::new(double(json!([
            "filesystem.read",
            "database.read"
        ])))),
    ];
    let composite = compose_capabilities(composite_manifest(None), steps).unwrap();
    assert_eq!(
        composite.manifest().effects(),
        ["filesystem.read", "network.connect", "database.read"]
    );
    assert_eq!(
        composite.manifest().behavior,
        Some(json!({"deterministic": false, "idempotent": true, "reversible": false}))
    );

    // The composite is authorized as one capability over the union.
    let runtime = runtime(EffectPolicy::deny_all());
    runtime.register(composite).unwrap();
    let err = runtime
        .invoke(
            "math/add-then-double",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
}

#[test]
fn a_manifest_that_omits_step_effects_is_refused() {
    let steps = vec![
        CompositionStep::new(Arc::new(add(json!(["filesystem.read"])))),
        CompositionStep::new(Arc::new(double(json!(["network.connect"])))),
    ];
    let err = compose_capabilities(composite_manifest(Some(json!(["filesystem.read"]))), steps)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest);
    assert_eq!(
        err.message,
        "Composed manifest omits required effects: network.connect"
    );

    // Declaring a superset is fine.
    let steps = vec![
        CompositionStep::new(Arc::new(add(json!(["filesystem.read"])))),
        CompositionStep::new(Arc::new(double(json!([])))),
    ];
    let composite = compose_capabilities(
        composite_manifest(Some(json!(["filesystem.read", "filesystem.write"]))),
        steps,
    )
    .unwrap();
    assert_eq!(
        composite.manifest().effects(),
        ["filesystem.read", "filesystem.write"]
    );
}

#[test]
fn schema_contradictions_between_steps_are_refused() {
    let text = Capability::builder(manifest(
        "text/upper",
        json!({"type": "string"}),
        json!({"type": "string"}),
        json!([]),
    ))
    .execute_json(|i, _| Ok(json!(i.as_str().unwrap_or_default().to_uppercase())))
    .build()
    .unwrap();
    let text = Arc::new(text);
    let err = compose_capabilities(
        composite_manifest(None),
        vec![
            CompositionStep::new(Arc::new(add(json!([])))),
            CompositionStep::new(Arc::clone(&text)),
        ],
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest);
    assert_eq!(
        err.message,
        "Composed steps do not compose: math/add \u{2192} text/upper: Schema type mismatch: object \u{2192} string"
    );

    // Missing required fields are a contradiction too.
    let needs_x = Capability::builder(manifest(
        "math/needs-x",
        number_object(&["x"]),
        number_object(&["x"]),
        json!([]),
    ))
    .execute_json(|i, _| Ok(i.clone()))
    .build()
    .unwrap();
    let err = compose_capabilities(
        composite_manifest(None),
        vec![
            CompositionStep::new(Arc::new(add(json!([])))),
            CompositionStep::new(Arc::new(needs_x)),
        ],
    )
    .unwrap_err();
    assert!(
        err.message
            .ends_with("Producer lacks required consumer fields: x"),
        "{}",
        err.message
    );

    // An input mapper bridges the gap explicitly: no contradiction is claimed.
    let composite = compose_capabilities(
        composite_manifest(None),
        vec![
            CompositionStep::new(Arc::new(add(json!([])))),
            CompositionStep::with_mapper(Arc::clone(&text), |prev, _original| {
                json!(format!("sum {}", prev["result"]))
            }),
        ],
    )
    .unwrap();
    let runtime = CapabilityRuntime::default();
    runtime.register(composite).unwrap();
    let receipt = runtime
        .invoke(
            "math/add-then-double",
            json!({"a": 40, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(receipt.output, Some(json!("SUM 42")));
}

#[test]
fn input_mappers_see_the_previous_output_and_the_original_input() {
    let composite = compose_capabilities(
        composite_manifest(None),
        vec![
            CompositionStep::new(Arc::new(add(json!([])))),
            CompositionStep::with_mapper(
                Arc::new(add(json!([]))),
                |prev, original| json!({"a": prev["result"], "b": original["a"]}),
            ),
        ],
    );
    // Two steps with the same id are fine in a static composite.
    let composite = composite.unwrap();
    let runtime = CapabilityRuntime::default();
    runtime.register(composite).unwrap();
    let receipt = runtime
        .invoke(
            "math/add-then-double",
            json!({"a": 30, "b": 1}),
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(receipt.output, Some(json!({"result": 61})));
}

#[test]
fn a_step_that_breaks_its_own_output_contract_fails_the_composite_with_a_receipt() {
    let liar = Capability::builder(manifest(
        "math/liar",
        number_object(&["result"]),
        number_object(&["result"]),
        json!([]),
    ))
    .execute_json(|_, _| Ok(json!({"result": "not a number"})))
    .build()
    .unwrap();
    let composite = compose_capabilities(
        composite_manifest(None),
        vec![
            CompositionStep::new(Arc::new(add(json!([])))),
            CompositionStep::new(Arc::new(liar)),
        ],
    )
    .unwrap();
    let runtime = CapabilityRuntime::default();
    runtime.register(composite).unwrap();
    let err = runtime
        .invoke(
            "math/add-then-double",
            json!({"a": 1, "b": 2}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidOutput);
    assert!(err.message.contains("math/liar"), "{}", err.message);
    let receipt = runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(receipt.status, ReceiptStatus::Failed);
}

#[test]
fn inert_steps_and_empty_compositions_are_refused() {
    let inert = Capability::inert(&manifest(
        "math/inert",
        number_object(&["result"]),
        number_object(&["result"]),
        json!([]),
    ))
    .unwrap();
    let err = compose_capabilities(
        composite_manifest(None),
        vec![CompositionStep::new(Arc::new(inert))],
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest);
    assert!(err.message.contains("math/inert"), "{}", err.message);
    let err = compose_capabilities(composite_manifest(None), Vec::new()).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidManifest);
}

#[test]
fn run_pipeline_gives_42_with_one_stored_receipt_per_step() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add(json!([]))).unwrap();
    runtime.register(double(json!([]))).unwrap();
    let run = run_pipeline(
        &runtime,
        &["math/add", "math/double"],
        json!({"a": 10, "b": 11}),
        &ExecuteOptions::default(),
    )
    .unwrap();
    assert_eq!(run.output, json!({"result": 42}));
    assert_eq!(run.receipts.len(), 2);
    let first = runtime.get_receipt(&run.receipts[0]).unwrap().unwrap();
    let second = runtime.get_receipt(&run.receipts[1]).unwrap().unwrap();
    assert_eq!(first.capability.id, "math/add");
    assert_eq!(first.output, Some(json!({"result": 21})));
    assert_eq!(second.capability.id, "math/double");
    assert_eq!(second.input, json!({"result": 21}));
    assert_eq!(second.status, ReceiptStatus::Succeeded);
}

#[test]
fn a_step_refused_by_authorization_stops_the_pipeline_without_a_receipt() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let writer = Capability::builder(manifest(
        "math/store",
        number_object(&["result"]),
        number_object(&["result"]),
        json!(["database.write"]),
    ))
    .execute_json(move |i, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(i.clone())
    })
    .build()
    .unwrap();
    let runtime = runtime(EffectPolicy::permissive());
    runtime.register(add(json!([]))).unwrap();
    runtime.register(writer).unwrap();
    runtime.register(double(json!([]))).unwrap();

    let err = run_pipeline(
        &runtime,
        &["math/add", "math/store", "math/double"],
        json!({"a": 10, "b": 11}),
        &ExecuteOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalRequired);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the refused step never ran");
    let receipts = runtime.list_receipts(&ReceiptQuery::default()).unwrap();
    let ids: Vec<&str> = receipts.iter().map(|r| r.capability.id.as_str()).collect();
    assert_eq!(
        ids,
        ["math/add"],
        "only the step before the refusal left a receipt"
    );

    // With approval the whole pipeline runs.
    let run = run_pipeline(
        &runtime,
        &["math/add", "math/store", "math/double"],
        json!({"a": 10, "b": 11}),
        &ExecuteOptions::approved(),
    )
    .unwrap();
    assert_eq!(run.output, json!({"result": 42}));
    assert_eq!(run.receipts.len(), 3);
}

#[test]
fn pipelines_are_checked_before_anything_runs() {
    let runtime = CapabilityRuntime::default();
    runtime.register(add(json!([]))).unwrap();
    let err = run_pipeline(
        &runtime,
        &["math/add", "math/missing"],
        json!({"a": 1, "b": 2}),
        &ExecuteOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound);

    let text = Capability::builder(manifest(
        "text/echo",
        json!({"type": "string"}),
        json!({"type": "string"}),
        json!([]),
    ))
    .execute_json(|i, _| Ok(i.clone()))
    .build()
    .unwrap();
    runtime.register(text).unwrap();
    let err = run_pipeline(
        &runtime,
        &["math/add", "text/echo"],
        json!({"a": 1, "b": 2}),
        &ExecuteOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidPlan);
    assert!(
        err.message.contains("Schema type mismatch"),
        "{}",
        err.message
    );
    assert!(
        runtime
            .list_receipts(&ReceiptQuery::default())
            .unwrap()
            .is_empty(),
        "nothing ran"
    );

    // An empty pipeline is the identity.
    let run = run_pipeline::<&str>(&runtime, &[], json!(7), &ExecuteOptions::default()).unwrap();
    assert_eq!((run.output, run.receipts.len()), (json!(7), 0));
}
