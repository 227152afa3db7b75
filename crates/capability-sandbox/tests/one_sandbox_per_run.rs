//! One sandbox per run: a run's plan, execute and verify hooks are answered by one sandboxed
//! process when the run needs no grant, and a module without hooks costs one start. A run
//! whose `execute` is granted effects never continues the process its grantless `plan` ran in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::EffectPolicy;
use capability_runtime::capability::{Capability, ModuleSource};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_sandbox::{Choice, Limits, ModuleExecutor, ProcessSandbox, SandboxConfig};
use serde_json::{Value, json};

/// A node module whose process has a random token; every hook reports whether it saw the
/// token of the process it runs in, and the effects it was granted.
const JS_HOOKS: &str = r#"
const token = Math.random().toString(36).slice(2) + process.hrtime.bigint().toString();
export const manifest = MANIFEST;
export default {
  manifest,
  plan: (input, ctx) => ({ data: { token, planEffects: ctx.effects } }),
  execute: (input, ctx) => ({ n: input.n, token, samePlanProcess: ctx.plan?.data?.token === token, effects: ctx.effects }),
  verify: (input, output, ctx) => ({ ok: true, data: { sameExecuteProcess: output.token === token } }),
};
"#;

const JS_BARE: &str = r#"
export default { manifest: MANIFEST, execute: (input) => ({ n: input.n }) };
"#;

const PY_HOOKS: &str = r#"
import os, random
TOKEN = "%d-%d" % (os.getpid(), random.getrandbits(64))
MANIFEST = __MANIFEST__
def plan(input, ctx):
    return {"data": {"token": TOKEN, "planEffects": ctx["effects"]}}
def execute(input, ctx):
    planned = (ctx.get("plan") or {}).get("data") or {}
    return {"n": input["n"], "token": TOKEN, "samePlanProcess": planned.get("token") == TOKEN, "effects": ctx["effects"]}
def verify(input, output, ctx):
    return {"ok": True, "data": {"sameExecuteProcess": output["token"] == TOKEN}}
"#;

struct Package {
    _dir: tempfile::TempDir,
    runtime: CapabilityRuntime,
    sandbox: &'static ProcessSandbox,
}

fn manifest(id: &str, effects: &[&str]) -> Value {
    json!({"specVersion": "0.1", "id": id, "version": "1.0.0", "name": "Per run",
           "description": "Counts its sandboxes.", "effects": effects})
}

fn package(file: &str, source: &str, id: &str, effects: &[&str]) -> Package {
    let dir = tempfile::tempdir().unwrap();
    let manifest = manifest(id, effects);
    let text = serde_json::to_string(&manifest).unwrap();
    let py_text = text.replace("true", "True").replace("false", "False");
    let source = source
        .replace("MANIFEST;", &format!("{text};"))
        .replace("manifest: MANIFEST", &format!("manifest: {text}"))
        .replace("__MANIFEST__", &py_text);
    std::fs::write(dir.path().join(file), source).unwrap();
    // A sandbox instance of its own, so that its start counter sees only this package's runs.
    let sandbox: &'static ProcessSandbox =
        Box::leak(Box::new(ProcessSandbox::new(SandboxConfig::default())));
    let executor = ModuleExecutor::new(Choice::Process)
        .with_process_sandbox(sandbox)
        .with_limits(Limits {
            wall_timeout: Duration::from_secs(20),
            ..Limits::default()
        });
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .executor(Arc::new(executor))
        .build();
    let source = ModuleSource {
        package_root: dir.path().to_path_buf(),
        module: format!("./{file}"),
        integrity: None,
    };
    runtime
        .register(Capability::module(&manifest, source).unwrap())
        .unwrap();
    Package {
        _dir: dir,
        runtime,
        sandbox,
    }
}

#[test]
fn plan_execute_and_verify_of_a_grantless_run_share_one_sandbox() {
    for (file, source) in [("hooks.mjs", JS_HOOKS), ("hooks.py", PY_HOOKS)] {
        let p = package(file, source, "per-run/hooks", &[]);
        let receipt = p
            .runtime
            .invoke(
                "per-run/hooks",
                json!({"n": 7}),
                &ExecuteOptions::approved(),
            )
            .unwrap();
        assert_eq!(p.sandbox.starts(), 1, "{file}: one sandbox for the run");
        let output = receipt.output.as_ref().unwrap();
        assert_eq!(output["n"], 7);
        assert_eq!(output["samePlanProcess"], true, "{file}: {output}");
        assert_eq!(output["effects"], json!([]));
        let verification = receipt.verification.as_ref().unwrap();
        assert!(verification.ok);
        assert_eq!(
            verification.data,
            Some(json!({"sameExecuteProcess": true})),
            "{file}"
        );
        assert_eq!(
            receipt.isolation.as_ref().unwrap()["kind"],
            "process-sandbox"
        );

        // The next run starts a fresh sandbox: nothing is carried from one run to the next.
        let second = p
            .runtime
            .invoke(
                "per-run/hooks",
                json!({"n": 7}),
                &ExecuteOptions::approved(),
            )
            .unwrap();
        assert_eq!(p.sandbox.starts(), 2, "{file}");
        assert_ne!(
            second.output.as_ref().unwrap()["token"],
            output["token"],
            "{file}: a second run must not reuse the first run's process"
        );
    }
}

#[test]
fn a_module_without_hooks_costs_one_start() {
    let p = package("bare.mjs", JS_BARE, "per-run/bare", &[]);
    let receipt = p
        .runtime
        .invoke("per-run/bare", json!({"n": 3}), &ExecuteOptions::approved())
        .unwrap();
    assert_eq!(receipt.output, Some(json!({"n": 3})));
    assert_eq!(receipt.verification, None);
    assert_eq!(p.sandbox.starts(), 1);
}

#[test]
fn a_granted_execute_never_continues_the_grantless_plan_process() {
    for (file, source) in [("hooks.mjs", JS_HOOKS), ("hooks.py", PY_HOOKS)] {
        let p = package(file, source, "per-run/net", &["network.connect"]);
        let receipt = p
            .runtime
            .invoke("per-run/net", json!({"n": 1}), &ExecuteOptions::approved())
            .unwrap();
        // plan: no grant, its own sandbox; execute and verify: the granted one.
        assert_eq!(p.sandbox.starts(), 2, "{file}");
        let output = receipt.output.as_ref().unwrap();
        assert_eq!(output["samePlanProcess"], false, "{file}: {output}");
        assert_eq!(output["effects"], json!(["network.connect"]));
        assert_eq!(
            receipt.verification.as_ref().unwrap().data,
            Some(json!({"sameExecuteProcess": true})),
            "{file}"
        );
        assert_eq!(receipt.isolation.as_ref().unwrap()["network"], "host");
    }
}

#[test]
fn the_plan_hook_is_granted_nothing_even_when_execute_will_be() {
    let p = package("hooks.mjs", JS_HOOKS, "per-run/plan", &["network.connect"]);
    let plan = p.runtime.plan("per-run/plan", json!({"n": 2})).unwrap();
    assert_eq!(plan.data.as_ref().unwrap()["planEffects"], json!([]));
    assert_eq!(plan.effects, vec!["network.connect".to_string()]);
    assert_eq!(p.sandbox.starts(), 1);
}
