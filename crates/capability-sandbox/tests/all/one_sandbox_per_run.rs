//! One sandbox per run: a run's plan, execute and verify hooks are answered by one sandboxed
//! process when the run needs no grant, and a module without hooks costs one start. A run
//! whose `execute` is granted effects never continues the process its grantless `plan` ran in.
//! With a pool, a grant-less run takes a sandbox started ahead, once, under its own limits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::EffectPolicy;
use capability_runtime::capability::{Capability, ModuleSource};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_sandbox::{ExecutorChoice, Limits, ModuleExecutor, ProcessSandbox, SandboxConfig};
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
    build(file, source, id, effects, None, Duration::from_secs(20))
}

/// A package whose executor keeps `pool` pre-started sandboxes (when given) and whose runs
/// have this wall clock.
fn build(
    file: &str,
    source: &str,
    id: &str,
    effects: &[&str],
    pool: Option<usize>,
    wall: Duration,
) -> Package {
    let dir = tempfile::tempdir().unwrap();
    let manifest = manifest(id, effects);
    let text = serde_json::to_string(&manifest).unwrap();
    let py_text = text.replace("true", "True").replace("false", "False");
    let source = source
        .replace("MANIFEST;", &format!("{text};"))
        .replace("manifest: MANIFEST", &format!("manifest: {text}"))
        .replace("__MANIFEST__", &py_text);
    std::fs::write(dir.path().join(file), source).unwrap();
    registered(dir, file, &manifest, pool, wall)
}

/// The module `file` of `dir` registered with `manifest` in a runtime whose executor keeps
/// `pool` pre-started sandboxes (when given) and whose runs have this wall clock.
fn registered(
    dir: tempfile::TempDir,
    file: &str,
    manifest: &Value,
    pool: Option<usize>,
    wall: Duration,
) -> Package {
    // A sandbox instance of its own, so that its start counter sees only this package's runs.
    let sandbox: &'static ProcessSandbox =
        Box::leak(Box::new(ProcessSandbox::new(SandboxConfig::default())));
    let mut executor = ModuleExecutor::new(ExecutorChoice::Process)
        .with_process_sandbox(sandbox)
        .with_limits(Limits {
            timeout: wall,
            ..Limits::default()
        });
    if let Some(capacity) = pool {
        executor = executor.with_pool(capacity);
    }
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
        .register(Capability::module(manifest, source).unwrap())
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

/// A module with per-process state: a call counter, a token, and a marker file in the
/// sandbox's /tmp.
const JS_STATEFUL: &str = r#"
import { existsSync, writeFileSync } from 'node:fs';
let calls = 0;
const token = Math.random().toString(36).slice(2) + process.hrtime.bigint().toString();
export default {
  manifest: MANIFEST,
  execute: async (input) => {
    calls += 1;
    const marker = existsSync('/tmp/marker');
    writeFileSync('/tmp/marker', token);
    if (input.sleepMs) await new Promise((r) => setTimeout(r, input.sleepMs));
    if (input.spin) for (;;) {}
    return { calls, token, marker, version: 1 };
  },
};
"#;

const PY_STATEFUL: &str = r#"
import os, random
MANIFEST = __MANIFEST__
CALLS = [0]
TOKEN = "%d-%d" % (os.getpid(), random.getrandbits(64))
def execute(input, ctx):
    CALLS[0] += 1
    marker = os.path.exists("/tmp/marker")
    with open("/tmp/marker", "w") as f:
        f.write(TOKEN)
    return {"calls": CALLS[0], "token": TOKEN, "marker": marker, "version": 1}
"#;

/// Whether the receipt says its run's sandbox was pre-started.
fn pre_started(receipt: &capability_core::receipt::Receipt) -> bool {
    receipt.isolation.as_ref().unwrap()["notes"]
        .as_array()
        .unwrap()
        .contains(&json!(capability_sandbox::PRE_STARTED_NOTE))
}

/// Runs `id` with `{"spin": true}`: it fails at its wall clock of `wall_ms`, and its receipt
/// (returned) says so.
fn spinning_run_times_out(
    p: &Package,
    id: &str,
    wall_ms: u64,
) -> Arc<capability_core::receipt::Receipt> {
    let err = p
        .runtime
        .invoke(id, json!({"spin": true}), &ExecuteOptions::approved())
        .unwrap_err();
    let receipt = p
        .runtime
        .get_receipt(err.receipt_id.as_ref().unwrap())
        .unwrap()
        .unwrap();
    let error = receipt.error.as_ref().unwrap();
    assert_eq!(error.name, "SandboxTimeout", "{error:?}");
    assert!(
        error
            .message
            .contains(&format!("wall-clock limit of {wall_ms} ms")),
        "{error:?}"
    );
    receipt
}

/// Waits until the sandbox has started `n` times (a spare starts in the background).
fn wait_for_starts(p: &Package, n: u64) {
    let started = std::time::Instant::now();
    while p.sandbox.starts() < n {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} starts, expected {n}",
            p.sandbox.starts()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn pooled_runs_take_a_sandbox_started_ahead_and_use_it_once() {
    for (file, source) in [("stateful.mjs", JS_STATEFUL), ("stateful.py", PY_STATEFUL)] {
        let p = build(
            file,
            source,
            "pool/stateful",
            &[],
            Some(2),
            Duration::from_secs(20),
        );
        let mut tokens = std::collections::HashSet::new();
        for run in 1..=3u64 {
            let receipt = p
                .runtime
                .invoke("pool/stateful", json!({}), &ExecuteOptions::approved())
                .unwrap();
            let output = receipt.output.as_ref().unwrap();
            // A fresh process each run: its state and its /tmp start empty.
            assert_eq!(output["calls"], 1, "{file} run {run}: {output}");
            assert_eq!(output["marker"], false, "{file} run {run}: {output}");
            assert!(
                tokens.insert(output["token"].to_string()),
                "{file}: a process served twice"
            );
            let isolation = receipt.isolation.as_ref().unwrap();
            assert_eq!(isolation["kind"], "process-sandbox");
            // The receipt says whether the run's sandbox was pre-started.
            assert_eq!(
                pre_started(&receipt),
                run > 1,
                "{file} run {run}: {isolation}"
            );
            // The first run starts its own sandbox and a spare; every later run takes the
            // spare and starts the next one: one start per run, plus the one waiting.
            wait_for_starts(&p, run + 1);
            assert_eq!(p.sandbox.starts(), run + 1, "{file} run {run}");
        }
    }
}

#[test]
fn a_spare_waits_without_a_clock_and_a_pooled_run_keeps_its_limits() {
    let p = build(
        "stateful.mjs",
        JS_STATEFUL,
        "pool/limits",
        &[],
        Some(1),
        Duration::from_millis(1500),
    );
    p.runtime
        .invoke("pool/limits", json!({}), &ExecuteOptions::approved())
        .unwrap();
    wait_for_starts(&p, 2);
    // The spare has waited longer than the wall clock: its clock starts with the request.
    std::thread::sleep(Duration::from_millis(2000));
    let receipt = p
        .runtime
        .invoke(
            "pool/limits",
            json!({"sleepMs": 100}),
            &ExecuteOptions::approved(),
        )
        .unwrap();
    assert_eq!(receipt.output.as_ref().unwrap()["calls"], 1);
    // It took the spare, and the next spare was started: no start of its own.
    wait_for_starts(&p, 3);
    assert_eq!(p.sandbox.starts(), 3, "the run took the spare");
    // A pooled run that spins is still stopped at its wall clock, and its receipt says so.
    spinning_run_times_out(&p, "pool/limits", 1500);
    wait_for_starts(&p, 4);
    assert_eq!(p.sandbox.starts(), 4, "the spinning run was a spare");
}

#[test]
fn a_spare_is_not_used_for_a_changed_module_or_a_granted_run() {
    let p = build(
        "stateful.mjs",
        JS_STATEFUL,
        "pool/changed",
        &[],
        Some(2),
        Duration::from_secs(20),
    );
    p.runtime
        .invoke("pool/changed", json!({}), &ExecuteOptions::approved())
        .unwrap();
    wait_for_starts(&p, 2);
    // The module is rewritten after the spare started: the spare is dropped and the run
    // starts a sandbox of its own, which imports the new code.
    let path = p._dir.path().join("stateful.mjs");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("version: 1", "version: 2")).unwrap();
    let receipt = p
        .runtime
        .invoke("pool/changed", json!({}), &ExecuteOptions::approved())
        .unwrap();
    assert_eq!(receipt.output.as_ref().unwrap()["version"], 2);
    // Its own start, and a spare for the new module.
    wait_for_starts(&p, 4);
    assert_eq!(p.sandbox.starts(), 4);

    // A run granted an effect never takes a grant-less spare.
    let g = build(
        "stateful.mjs",
        JS_STATEFUL,
        "pool/granted",
        &["network.connect"],
        Some(2),
        Duration::from_secs(20),
    );
    for run in 1..=2u64 {
        let receipt = g
            .runtime
            .invoke("pool/granted", json!({}), &ExecuteOptions::approved())
            .unwrap();
        assert_eq!(receipt.output.as_ref().unwrap()["calls"], 1);
        // Each run: the grant-less plan takes (the first time: starts) a sandbox and a spare
        // is started; execute, granted, always starts its own.
        wait_for_starts(&g, 1 + 2 * run);
        assert_eq!(g.sandbox.starts(), 1 + 2 * run, "run {run}");
    }
}

/// A native program (built with gcc) that answers only `execute`: whether `/tmp` held the
/// marker an earlier run would have left (then it leaves one), a token read from
/// `/dev/urandom`, and, asked to, it spins.
const C_STATEFUL: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void) {
  static char in[65536];
  size_t n = 0; ssize_t r;
  while (n < sizeof in - 1 && (r = read(0, in + n, sizeof in - 1 - n)) > 0) n += (size_t)r;
  in[n] = 0;
  if (!strstr(in, "\"op\":\"execute\"")) { printf("{\"output\":null,\"hook\":false}\n"); return 0; }
  if (strstr(in, "\"spin\":true")) for (;;) {}
  int marker = access("/tmp/marker", F_OK) == 0;
  int fd = open("/tmp/marker", O_CREAT | O_WRONLY, 0600); if (fd >= 0) close(fd);
  unsigned long long token = 0;
  fd = open("/dev/urandom", O_RDONLY); if (fd >= 0) { if (read(fd, &token, sizeof token) < 0) token = 0; close(fd); }
  printf("{\"output\":{\"marker\":%s,\"token\":\"%llx\"}}\n", marker ? "true" : "false", token);
  return 0;
}
"#;

/// A native package built from [`C_STATEFUL`] with a pool of `capacity`.
fn native(id: &str, capacity: usize, wall: Duration) -> Package {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("stateful.c");
    std::fs::write(&src, C_STATEFUL).unwrap();
    let ok = std::process::Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(dir.path().join("stateful"))
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "gcc failed");
    registered(dir, "stateful", &manifest(id, &[]), Some(capacity), wall)
}

#[test]
fn pooled_native_runs_take_a_started_program_per_op_and_use_it_once() {
    let p = native("pool/native", 3, Duration::from_secs(20));
    let mut tokens = std::collections::HashSet::new();
    for run in 1..=3u64 {
        // Calls come spaced, as to a server: the replacements start once no op is under way.
        std::thread::sleep(Duration::from_millis(200));
        let receipt = p
            .runtime
            .invoke("pool/native", json!({}), &ExecuteOptions::approved())
            .unwrap();
        let output = receipt.output.as_ref().unwrap();
        // A fresh program and /tmp each run.
        assert_eq!(output["marker"], false, "run {run}: {output}");
        assert!(
            tokens.insert(output["token"].to_string()),
            "run {run}: a program served twice"
        );
        let isolation = receipt.isolation.as_ref().unwrap();
        assert_eq!(isolation["kind"], "process-sandbox");
        // The first run's plan starts its own sandbox and three spares (one per op); its
        // execute already takes one of them.
        assert!(pre_started(&receipt), "run {run}: {isolation}");
        // Every op took one program: the first run started 1 + 3 and replaced the two it
        // took; each later run takes three and replaces them.
        wait_for_starts(&p, 3 * run + 3);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(p.sandbox.starts(), 3 * run + 3, "run {run}");
    }
}

#[test]
fn a_native_spare_waits_without_a_clock_and_keeps_its_limits() {
    let p = native("pool/native-limits", 3, Duration::from_millis(1500));
    p.runtime
        .invoke("pool/native-limits", json!({}), &ExecuteOptions::approved())
        .unwrap();
    wait_for_starts(&p, 6);
    // The spares have waited longer than the wall clock: a run's clock starts with its request.
    std::thread::sleep(Duration::from_millis(2000));
    let receipt = p
        .runtime
        .invoke("pool/native-limits", json!({}), &ExecuteOptions::approved())
        .unwrap();
    assert_eq!(receipt.output.as_ref().unwrap()["marker"], false);
    // A pooled native program that spins is stopped at its wall clock, and the receipt says so.
    std::thread::sleep(Duration::from_millis(300));
    let receipt = spinning_run_times_out(&p, "pool/native-limits", 1500);
    assert!(pre_started(&receipt), "{:?}", receipt.isolation);
}
