//! Plan, verify and rollback cross the same boundary as execute, in node and python.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Outcome, fixtures, limits};
use capability_sandbox::{Grants, Invocation, ModuleSpec, SandboxError, run_module};
use serde_json::{Value, json};

fn spec(module: &str, manifest: Value) -> ModuleSpec {
    ModuleSpec {
        package_root: fixtures().join("hooks"),
        install_root: None,
        module: module.into(),
        integrity: None,
        manifest,
    }
}

fn js_manifest() -> Value {
    json!({"specVersion": "0.1", "id": "fixtures/hooks", "version": "1.0.0", "name": "Hooks",
           "description": "Plan, execute, verify and rollback.", "behavior": {"reversible": true}})
}

fn py_manifest() -> Value {
    json!({"specVersion": "0.1", "id": "fixtures/hooks-py", "version": "1.0.0", "name": "Hooks",
           "description": "Plan, execute, verify and rollback."})
}

fn run(spec: &ModuleSpec, inv: Invocation) -> Outcome {
    run_module(spec, &inv, &Grants::none(), &limits()).unwrap()
}

#[test]
fn every_hook_runs_in_the_sandbox() {
    for spec in [
        spec("./hooks.mjs", js_manifest()),
        spec("./hooks.py", py_manifest()),
    ] {
        let plan = run(&spec, Invocation::plan(json!({"n": 21})));
        assert!(plan.hook_present);
        assert_eq!(plan.boundary.kind, "process-sandbox");
        let plan_value = plan.result.unwrap();
        assert_eq!(plan_value, json!({"data": {"doubled": 42}}));
        let exec = run(
            &spec,
            Invocation::execute(json!({"n": 21}))
                .with_plan(json!({"planId": "p1", "data": plan_value["data"]})),
        );
        assert_eq!(
            exec.result.unwrap(),
            json!({"n": 21, "planned": {"doubled": 42}})
        );
        let verify = run(
            &spec,
            Invocation::verify(json!({"n": 21}), json!({"n": 21})),
        );
        assert_eq!(verify.result.unwrap(), json!({"ok": true}));
        let rollback = run(
            &spec,
            Invocation::rollback(json!({"n": 21}), json!({"receiptId": "r-1"})),
        );
        assert_eq!(rollback.result.unwrap(), json!({"undone": "r-1"}));
    }
}

#[test]
fn missing_hooks_have_defaults_and_rollback_is_refused() {
    let bare_js = spec(
        "./bare.mjs",
        json!({"specVersion": "0.1", "id": "fixtures/bare", "version": "1.0.0", "name": "Bare", "description": "Execute only."}),
    );
    let bare_py = spec("./bare.py", json!({"id": "fixtures/bare-py"}));
    for spec in [bare_js, bare_py] {
        let plan = run(&spec, Invocation::plan(json!({})));
        assert!(!plan.hook_present);
        assert_eq!(plan.result.unwrap(), json!({}));
        let verify = run(&spec, Invocation::verify(json!({}), json!({})));
        assert!(!verify.hook_present);
        assert_eq!(verify.result.unwrap(), Value::Null);
        let rollback = run(
            &spec,
            Invocation::rollback(json!({}), json!({"receiptId": "r"})),
        );
        match rollback.result {
            Err(SandboxError::Guest(g)) => {
                assert_eq!(g.code.as_deref(), Some("ROLLBACK_UNSUPPORTED"));
                assert!(
                    g.message.contains("does not provide rollback()"),
                    "{}",
                    g.message
                );
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn modules_that_are_not_capabilities_are_refused() {
    let out = run(
        &spec("./not_a_capability.mjs", json!({})),
        Invocation::execute(json!({})),
    );
    assert!(
        matches!(out.result, Err(SandboxError::NotACapability { .. })),
        "{:?}",
        out.result
    );
    let out = run(
        &spec("./broken.py", json!({})),
        Invocation::execute(json!({})),
    );
    match out.result {
        Err(SandboxError::Guest(g)) => assert!(g.message.contains("import-time failure"), "{g:?}"),
        other => panic!("{other:?}"),
    }
}
