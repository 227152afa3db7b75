//! The PyPI miner, forge, sandboxed run and binder, on wheels built by the tests: hermetic
//! (local files, and pypiserver on loopback for the end-to-end test). Runs that need the
//! process sandbox are skipped, saying why, where user namespaces or python3 are missing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use capability_binders::pypi::forge::{
    BINDING_FILE, MANIFEST_FILE, Selection, forge, forge_wheel, load_forge,
};
use capability_binders::pypi::mine::{CandidateKind, NOTES, mine_wheel};
use capability_binders::pypi::run::{APPROVAL_REQUIRED, RunOptions, RunStatus, execute};
use capability_binders::pypi::{
    Index, Inspection, PypiBinder, PypiConfig, PypiErrorKind, WheelRef,
};
use capability_core::binder::{ExecuteOptions, MetabolicBinder, MetabolicBinderRegistry};
use capability_sandbox::ProcessSandbox;
use serde_json::{Value, json};

use capability_test_support::pypi::{PypiServer, WheelSpec, build_wheel, sha256_file};

/// Whether the process sandbox can run Python here; says why not otherwise.
fn sandbox_ready() -> bool {
    if let Err(e) = ProcessSandbox::check_children() {
        eprintln!("skipping: no user/mount/pid namespaces here: {e}");
        return false;
    }
    if let Err(e) = ProcessSandbox::global().python() {
        eprintln!("skipping: no python3 for the sandbox: {e}");
        return false;
    }
    true
}

macro_rules! require_sandbox {
    () => {
        if !sandbox_ready() {
            return;
        }
    };
}

const CALC_INIT: &str = r#""""A small calculator."""
import asyncio


def add(a, b):
    """Add two numbers."""
    return a + b


def greet(name, greeting="hello"):
    """Greet someone by name."""
    return "%s, %s" % (greeting, name)


def fail(message):
    """Raise an error with the message."""
    raise ValueError(message)


def noisy():
    print("noise on stdout")
    return {"printed": True}


def opaque():
    return object()


async def later(x):
    await asyncio.sleep(0)
    return x * 2


def _private():
    return "hidden"


class Calculator:
    def method(self):
        return 1
"#;

const CALC_CLI: &str = r#"import sys


def main():
    print("args:" + ",".join(sys.argv[1:]))
    print("argv0:" + sys.argv[0])
    return 0


def broken():
    print("about to fail")
    sys.exit(3)
"#;

fn calc_spec(version: &str) -> WheelSpec {
    WheelSpec::new("calc", version)
        .file("calc/__init__.py", CALC_INIT)
        .file("calc/cli.py", CALC_CLI)
        .file("calc/tests/test_calc.py", "def test_add():\n    pass\n")
        .file("calc/broken.py", "def oops(:\n")
        .script("calc-cli", "calc.cli:main")
        .script("calc-broken", "calc.cli:broken")
}

/// The inspection an index would give for a local wheel.
fn inspection_of(path: &Path, spec: &WheelSpec) -> Inspection {
    Inspection {
        name: spec.name.clone(),
        version: spec.version.clone(),
        summary: None,
        requires_python: None,
        project_urls: BTreeMap::new(),
        wheel: WheelRef {
            filename: spec.filename(),
            url: format!("file://{}", path.display()),
            sha256: sha256_file(path),
            size: Some(std::fs::metadata(path).unwrap().len()),
        },
        vulnerabilities: Vec::new(),
        tag: spec.tag.clone(),
    }
}

fn local(spec: &WheelSpec) -> (tempfile::TempDir, PathBuf, Inspection) {
    let dir = tempfile::tempdir().unwrap();
    let wheel = build_wheel(&dir.path().join("wheels"), spec);
    let inspection = inspection_of(&wheel, spec);
    (dir, wheel, inspection)
}

fn select(module: &str, symbol: &str) -> Selection {
    Selection {
        query: None,
        module: Some(module.into()),
        symbol: Some(symbol.into()),
    }
}

/// Forges `module:symbol` of the calc wheel into `<tmp>/forge`.
fn forged_calc(module: &str, symbol: &str) -> (tempfile::TempDir, PathBuf) {
    let (dir, wheel, inspection) = local(&calc_spec("1.0"));
    let forge_dir = dir.path().join("forge");
    forge_wheel(
        &wheel,
        &inspection,
        &[],
        &select(module, symbol),
        &forge_dir,
    )
    .unwrap();
    (dir, forge_dir)
}

fn approved() -> RunOptions {
    RunOptions {
        approved: true,
        timeout: Duration::from_secs(60),
    }
}

fn succeeded(run: &capability_binders::pypi::run::PythonExecution) -> &Value {
    assert_eq!(
        run.status,
        RunStatus::Succeeded,
        "run failed: {}",
        serde_json::to_string_pretty(&run.to_json()).unwrap()
    );
    run.result.as_ref().unwrap()
}

#[test]
fn mining_lists_console_scripts_and_functions_by_score() {
    require_sandbox!();
    let spec = calc_spec("1.0");
    let (_dir, wheel, inspection) = local(&spec);
    let report = mine_wheel(&wheel, &inspection, Some("Add numbers")).unwrap();
    let found: Vec<(String, String, String, f64)> = report
        .candidates
        .iter()
        .map(|c| {
            (
                c.module.clone(),
                c.symbol.clone(),
                c.kind.as_str().to_string(),
                c.score,
            )
        })
        .collect();
    let expect = |m: &str, s: &str, k: &str, score: f64| {
        (m.to_string(), s.to_string(), k.to_string(), score)
    };
    assert_eq!(
        found,
        vec![
            // "add" and "numbers" both in "add Add two numbers. calc", + docstring.
            expect("calc", "add", "function", 1.2),
            expect("calc.cli", "broken", "console-script", 1.0),
            expect("calc.cli", "main", "console-script", 1.0),
            expect("calc", "fail", "function", 0.2),
            expect("calc", "greet", "function", 0.2),
            expect("calc", "later", "function", 0.0),
            expect("calc", "noisy", "function", 0.0),
            expect("calc", "opaque", "function", 0.0),
            expect("calc.cli", "broken", "function", 0.0),
            expect("calc.cli", "main", "function", 0.0),
        ]
    );
    let add = &report.candidates[0];
    assert_eq!(add.evidence, vec!["calc/__init__.py:5", "Add two numbers."]);
    let script = &report.candidates[2];
    assert_eq!(script.script.as_deref(), Some("calc-cli"));
    assert_eq!(
        script.evidence,
        vec![
            "calc-1.0.dist-info/entry_points.txt",
            "console_scripts: calc-cli = calc.cli:main"
        ]
    );
    // calc/__init__.py, calc/cli.py and calc/broken.py (which does not parse); not the tests.
    assert_eq!(report.files_analyzed, 3);
    assert_eq!(
        report.parse_failures.len(),
        1,
        "{:?}",
        report.parse_failures
    );
    assert!(report.parse_failures[0].starts_with("calc/broken.py"));
    let json = report.to_json();
    assert_eq!(json["notes"].as_array().unwrap().len(), 4);
    assert_eq!(json["notes"][0], NOTES[0]);
    assert_eq!(json["artifact"]["wheel"]["sha256"], inspection.wheel.sha256);
    assert_eq!(json["sandbox"]["kind"], "process-sandbox");
    assert_eq!(json["sandbox"]["network"], "none");

    // Without a query every function scores 0.5 (+0.2 with a docstring).
    let plain = mine_wheel(&wheel, &inspection, None).unwrap();
    let add = plain.candidates.iter().find(|c| c.symbol == "add").unwrap();
    assert_eq!(add.score, 0.7);
    let noisy = plain
        .candidates
        .iter()
        .find(|c| c.symbol == "noisy")
        .unwrap();
    assert_eq!(noisy.score, 0.5);
}

#[test]
fn mining_refuses_a_wheel_whose_bytes_differ_from_the_inspection() {
    let (_dir, wheel, mut inspection) = local(&calc_spec("1.0"));
    inspection.wheel.sha256 = "0".repeat(64);
    let err = mine_wheel(&wheel, &inspection, None).unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::Digest, "{err}");
}

#[test]
fn forge_writes_the_manifest_the_binding_and_the_wheel() {
    require_sandbox!();
    let spec = calc_spec("1.0");
    let (dir, wheel, inspection) = local(&spec);
    let forge_dir = dir.path().join("forge");
    let selection = Selection {
        query: Some("add numbers".into()),
        module: None,
        symbol: None,
    };
    let forged = forge_wheel(&wheel, &inspection, &[], &selection, &forge_dir).unwrap();
    assert_eq!(forged.capability_id, "forged/python/calc/add");
    assert_eq!(forged.candidate.symbol, "add");
    assert_eq!(forged.wheel_path, forge_dir.join(spec.filename()));
    assert_eq!(sha256_file(&forged.wheel_path), inspection.wheel.sha256);

    let manifest: Value =
        serde_json::from_slice(&std::fs::read(forge_dir.join(MANIFEST_FILE)).unwrap()).unwrap();
    assert_eq!(manifest, forged.manifest);
    assert!(capability_core::validate_manifest(&manifest).is_empty());
    assert_eq!(manifest["id"], "forged/python/calc/add");
    assert_eq!(manifest["specVersion"], "0.1");
    assert_eq!(
        manifest["effects"],
        json!(["process.spawn", "custom:external.opaque-effects"])
    );
    assert_eq!(
        manifest["tags"],
        json!(["forged", "python", "pypi", "artifact-bound"])
    );
    assert_eq!(manifest["input"]["required"], json!(["args"]));
    assert_eq!(manifest["output"]["required"], json!(["result"]));
    assert_eq!(
        manifest["metadata"],
        json!({
            "forged": true, "substrate": "pypi", "binderVersion": "0.2", "package": "calc",
            "packageVersion": "1.0", "wheel": spec.filename(),
            "artifactSha256": inspection.wheel.sha256, "module": "calc", "symbol": "add",
            "authorityComplete": false,
        })
    );

    let binding: Value =
        serde_json::from_slice(&std::fs::read(forge_dir.join(BINDING_FILE)).unwrap()).unwrap();
    assert_eq!(binding["package"], "calc");
    assert_eq!(binding["version"], "1.0");
    assert_eq!(binding["wheel"], spec.filename());
    assert_eq!(binding["sha256"], inspection.wheel.sha256);
    assert_eq!(binding["module"], "calc");
    assert_eq!(binding["symbol"], "add");
    assert_eq!(binding["kind"], "function");
    assert_eq!(binding["dependencies"], json!([]));

    let json = forged.to_json();
    assert_eq!(json["substrate"], "pypi");
    assert_eq!(json["authority"]["complete"], false);
    assert_eq!(json["artifact"]["name"], "calc");

    // Read back, the forge is the same.
    let loaded = load_forge(&forge_dir).unwrap();
    assert_eq!(loaded.binding, forged.binding);
    assert_eq!(loaded.artifact, forged.artifact);

    // A forge never writes into a directory that holds something.
    let err = forge_wheel(&wheel, &inspection, &[], &selection, &forge_dir).unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::Invalid, "{err}");
    // Filters that match nothing are refused, not replaced by another candidate.
    let err = forge_wheel(
        &wheel,
        &inspection,
        &[],
        &select("calc", "nope"),
        &dir.path().join("other"),
    )
    .unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::NotFound, "{err}");
    assert!(err.message.contains("calc:add"), "{err}");
}

#[test]
fn a_forged_function_runs_in_the_sandbox() {
    require_sandbox!();
    let (_dir, forge_dir) = forged_calc("calc", "add");
    let run = execute(&forge_dir, &json!([2, 3]), &approved()).unwrap();
    assert_eq!(succeeded(&run), &json!(5));
    assert_eq!(run.output(), Some(json!({"result": 5})));
    let receipt = run.to_json();
    assert_eq!(receipt["substrate"], "pypi");
    assert_eq!(receipt["binderVersion"], "0.2");
    assert_eq!(receipt["package"], "calc");
    assert_eq!(receipt["artifactVerified"], true);
    assert_eq!(receipt["isolation"], "process-sandbox");
    assert_eq!(receipt["network"], "none");
    assert_eq!(receipt["dependencyPolicy"], "no-deps");
    assert_eq!(receipt["status"], "succeeded");
    assert_eq!(receipt["result"], 5);
    assert_eq!(receipt["sandbox"]["kind"], "process-sandbox");
    assert_eq!(receipt["sandbox"]["network"], "none");
    assert_eq!(receipt["sandbox"]["processSpawn"], false);
    assert_eq!(receipt["observedEffects"], json!([]));

    // {args, kwargs} too.
    let run = execute(
        &forge_dir,
        &json!({"args": [1], "kwargs": {"b": 41}}),
        &approved(),
    )
    .unwrap();
    assert_eq!(succeeded(&run), &json!(42));
    // Bad input is refused before anything runs.
    let err = execute(&forge_dir, &json!({"argz": []}), &approved()).unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::Invalid);
}

#[test]
fn kwargs_coroutines_stdout_and_unserializable_results() {
    require_sandbox!();
    let (dir, wheel, inspection) = local(&calc_spec("1.0"));
    let forge = |symbol: &str| {
        let d = dir.path().join(symbol);
        forge_wheel(&wheel, &inspection, &[], &select("calc", symbol), &d).unwrap();
        d
    };
    let greet = forge("greet");
    let run = execute(
        &greet,
        &json!({"args": ["Ada"], "kwargs": {"greeting": "hi"}}),
        &approved(),
    )
    .unwrap();
    assert_eq!(succeeded(&run), &json!("hi, Ada"));

    let later = forge("later");
    let run = execute(&later, &json!([21]), &approved()).unwrap();
    assert_eq!(succeeded(&run), &json!(42));

    let noisy = forge("noisy");
    let run = execute(&noisy, &json!([]), &approved()).unwrap();
    assert_eq!(succeeded(&run), &json!({"printed": true}));
    assert_eq!(run.stdout, "noise on stdout\n");

    let opaque = forge("opaque");
    let run = execute(&opaque, &json!([]), &approved()).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.error
            .as_deref()
            .unwrap()
            .contains("not JSON-serializable"),
        "{:?}",
        run.error
    );
}

#[test]
fn a_console_script_gets_its_argv_and_its_exit_code_counts() {
    require_sandbox!();
    let (_dir, forge_dir) = forged_calc("calc.cli", "main");
    let binding: Value =
        serde_json::from_slice(&std::fs::read(forge_dir.join(BINDING_FILE)).unwrap()).unwrap();
    assert_eq!(binding["kind"], "console-script");
    assert_eq!(binding["script"], "calc-cli");
    let run = execute(&forge_dir, &json!(["x", 2, true]), &approved()).unwrap();
    assert_eq!(
        succeeded(&run),
        &json!({"exitCode": 0, "stdout": "args:x,2,True\nargv0:calc-cli\n"})
    );
    let err = execute(
        &forge_dir,
        &json!({"args": [], "kwargs": {"a": 1}}),
        &approved(),
    )
    .unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::Invalid);

    let (_dir, broken) = forged_calc("calc.cli", "broken");
    let run = execute(&broken, &json!([]), &approved()).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.result,
        Some(json!({"exitCode": 3, "stdout": "about to fail\n"}))
    );
    assert!(run.error.as_deref().unwrap().contains("code 3"));
}

#[test]
fn a_function_that_raises_gives_a_failed_receipt() {
    require_sandbox!();
    let (_dir, forge_dir) = forged_calc("calc", "fail");
    let run = execute(&forge_dir, &json!(["boom"]), &approved()).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.output(), None);
    assert_eq!(run.error.as_deref(), Some("ValueError: boom"));
    assert_eq!(run.error_kind.as_deref(), Some("ValueError"));
    assert!(
        run.stderr.as_deref().unwrap().contains("Traceback"),
        "{:?}",
        run.stderr
    );
    let receipt = run.to_json();
    assert_eq!(receipt["status"], "failed");
    assert!(receipt.get("result").is_none());
    assert_eq!(receipt["artifactVerified"], true);
}

#[test]
fn a_wheel_swapped_after_forging_is_refused_before_anything_runs() {
    require_sandbox!();
    let (dir, wheel, inspection) = local(&calc_spec("1.0"));
    let forge_dir = dir.path().join("forge");
    forge_wheel(&wheel, &inspection, &[], &select("calc", "add"), &forge_dir).unwrap();
    // Another wheel with the same filename: add subtracts.
    let evil = WheelSpec::new("calc", "1.0")
        .file("calc/__init__.py", "def add(a, b):\n    return a - b\n");
    let evil_dir = dir.path().join("evil");
    let evil_wheel = build_wheel(&evil_dir, &evil);
    std::fs::copy(&evil_wheel, forge_dir.join(calc_spec("1.0").filename())).unwrap();
    let err = execute(&forge_dir, &json!([2, 3]), &approved()).unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::Digest, "{err}");
    assert!(err.message.contains("nothing ran"), "{err}");
    // Binding the changed directory is refused too.
    let err = load_forge(&forge_dir).unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::Digest);
    // A removed wheel is refused as well.
    std::fs::remove_file(forge_dir.join(calc_spec("1.0").filename())).unwrap();
    let err = execute(&forge_dir, &json!([2, 3]), &approved()).unwrap_err();
    assert_eq!(err.kind, PypiErrorKind::Io, "{err}");
}

#[test]
fn without_approval_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    // Refused before the directory is even read.
    let err = execute(dir.path(), &json!([2, 3]), &RunOptions::default()).unwrap_err();
    assert_eq!(err.message, APPROVAL_REQUIRED);
}

const HOSTILE: &str = r#"import os
import socket
import subprocess


def attack(port):
    """Reads, connects, spawns, looks at the environment and writes scratch."""
    out = {}
    try:
        with open("/etc/passwd") as f:
            out["passwd"] = f.read()
    except OSError as e:
        out["passwd"] = "error: %s" % e
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.close()
        out["connect"] = "connected"
    except OSError as e:
        out["connect"] = "error: %s" % e
    try:
        subprocess.run(["/bin/true"], check=True)
        out["spawn"] = "spawned"
    except OSError as e:
        out["spawn"] = "error: %s" % e
    out["home"] = os.environ.get("HOME")
    try:
        with open("/tmp/scratch.txt", "w") as f:
            f.write("x")
        out["tmp"] = "written"
    except OSError as e:
        out["tmp"] = "error: %s" % e
    try:
        with open("/usr/hostile.txt", "w") as f:
            f.write("x")
        out["usr"] = "written"
    except OSError as e:
        out["usr"] = "error: %s" % e
    return out


def attack_then_raise(port):
    """Connects, then raises."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3)
    except OSError:
        pass
    raise RuntimeError("gave up")
"#;

fn effect<'a>(run: &'a Value, kind: &str, target: &str) -> &'a Value {
    run["observedEffects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == kind && e["target"].as_str().unwrap().contains(target))
        .unwrap_or_else(|| {
            panic!(
                "no observed {kind} of {target}: {}",
                serde_json::to_string_pretty(&run["observedEffects"]).unwrap()
            )
        })
}

#[test]
fn a_hostile_wheel_is_stopped_and_every_attempt_is_observed() {
    require_sandbox!();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    let spec = WheelSpec::new("hostile", "0.1").file("hostile/__init__.py", HOSTILE);
    let (dir, wheel, inspection) = local(&spec);
    let forge_dir = dir.path().join("forge");
    forge_wheel(
        &wheel,
        &inspection,
        &[],
        &select("hostile", "attack"),
        &forge_dir,
    )
    .unwrap();
    let run = execute(&forge_dir, &json!([port]), &approved()).unwrap();
    let result = succeeded(&run).clone();
    let receipt = run.to_json();

    // Each attempt was stopped: the guest saw only the synthetic passwd, and errors.
    assert_eq!(
        result["passwd"],
        "sandbox:x:1000:1000:sandbox:/tmp:/nonexistent\n"
    );
    assert!(
        result["connect"].as_str().unwrap().starts_with("error:"),
        "{result}"
    );
    assert!(
        result["spawn"].as_str().unwrap().starts_with("error:"),
        "{result}"
    );
    assert_eq!(result["home"], Value::Null);
    assert_eq!(result["tmp"], "written");
    assert!(
        result["usr"].as_str().unwrap().starts_with("error:"),
        "{result}"
    );
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener got a connection: {other:?}"),
    }

    // And each attempt is named in the receipt.
    let passwd = effect(&receipt, "file.read", "/etc/passwd");
    assert_eq!(passwd["allowed"], true);
    assert_eq!(passwd["observer"], "python-audit-hook");
    let connect = effect(&receipt, "network.connect", &format!("127.0.0.1:{port}"));
    assert_eq!(connect["allowed"], false);
    let spawn = effect(&receipt, "process.spawn", "/bin/true");
    assert_eq!(spawn["allowed"], false);
    let env = effect(&receipt, "environment.read", "HOME");
    assert_eq!(env["allowed"], false);
    let scratch = effect(&receipt, "file.write", "/tmp/scratch.txt");
    assert_eq!(scratch["allowed"], true);
    assert_eq!(scratch["scratch"], true);
    let usr = effect(&receipt, "file.write", "/usr/hostile.txt");
    assert_eq!(usr["allowed"], false);
    // Its own unpacked tree and the interpreter's files are not effects.
    for e in receipt["observedEffects"].as_array().unwrap() {
        let target = e["target"].as_str().unwrap();
        assert!(!target.starts_with("/package"), "{e}");
        assert!(!target.ends_with(".py") && !target.ends_with(".pyc"), "{e}");
    }

    // A failed call still reports what it attempted.
    let forge_dir = dir.path().join("forge-raise");
    forge_wheel(
        &wheel,
        &inspection,
        &[],
        &select("hostile", "attack_then_raise"),
        &forge_dir,
    )
    .unwrap();
    let run = execute(&forge_dir, &json!([port]), &approved()).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_deref(), Some("RuntimeError: gave up"));
    let receipt = run.to_json();
    let connect = effect(&receipt, "network.connect", &format!("127.0.0.1:{port}"));
    assert_eq!(connect["allowed"], false);
    assert!(listener.accept().is_err());
}

fn offline_config(cache: &Path) -> PypiConfig {
    PypiConfig {
        index_url: "http://127.0.0.1:9/simple/".into(),
        allow_private: true,
        timeout: Duration::from_secs(5),
        cache_dir: cache.to_path_buf(),
    }
}

#[test]
fn the_binder_passes_the_binder_conformance_suite() {
    require_sandbox!();
    let (dir, forge_dir) = forged_calc("calc", "add");
    let binder = PypiBinder::new(offline_config(&dir.path().join("cache")));
    let request = json!({"forge": forge_dir.to_string_lossy()});
    let report = capability_core::conformance::run_binder_conformance(
        Arc::new(binder.clone()),
        &request,
        &json!([2, 3]),
    );
    assert!(
        report.ok,
        "{}",
        serde_json::to_string_pretty(&report.to_value()).unwrap()
    );
    assert!(report.checks.iter().any(|c| c.id == "execute" && c.ok));

    let mut registry = MetabolicBinderRegistry::new();
    registry.register(Arc::new(binder.clone())).unwrap();
    let binding = registry.bind("capability/pypi-wheel", &request).unwrap();
    assert_eq!(binding["bindingVersion"], "1.0");
    assert_eq!(binding["locator"], "pypi:calc==1.0");
    let sha = sha256_file(&forge_dir.join(calc_spec("1.0").filename()));
    assert_eq!(
        binding["immutableArtifact"],
        format!("calc@1.0#sha256:{sha}")
    );
    assert_eq!(
        binding["evidence"],
        json!([
            calc_spec("1.0").filename(),
            format!("sha256:{sha}"),
            "calc:add"
        ])
    );
    assert_eq!(binding["authority"]["complete"], false);
    assert_eq!(binding["forged"]["capabilityId"], "forged/python/calc/add");
    assert_eq!(binding["inspection"]["name"], "calc");

    let refused = registry
        .execute(
            "capability/pypi-wheel",
            &binding,
            &json!([2, 3]),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert!(refused.0.contains("explicit approval"), "{refused}");
    let options = ExecuteOptions {
        approved: true,
        cancel: None,
    };
    let result = registry
        .execute("capability/pypi-wheel", &binding, &json!([2, 3]), &options)
        .unwrap();
    assert_eq!(result.output, Some(json!({"result": 5})));
    assert_eq!(result.receipt["isolation"], "process-sandbox-network-none");
    assert_eq!(result.receipt["upstreamReceipt"]["result"], 5);
    assert_eq!(result.receipt["upstreamReceipt"]["artifactVerified"], true);

    // A guest failure is a failed execution with its receipt.
    let failing = registry
        .execute(
            "capability/pypi-wheel",
            &binding,
            &json!({"args": ["x", 1]}),
            &options,
        )
        .unwrap();
    assert_eq!(failing.receipt["status"], "failed");
    assert_eq!(failing.receipt["upstreamReceipt"]["status"], "failed");
    assert!(
        failing.receipt["upstreamReceipt"]["error"]
            .as_str()
            .unwrap()
            .contains("TypeError")
    );

    // A binding whose directory was re-forged with other bytes is refused at execution.
    let mut other = binding.clone();
    other["immutableArtifact"] = json!(format!("calc@1.0#sha256:{}", "1".repeat(64)));
    let changed = binder.execute(&other, &json!([2, 3]), &Default::default());
    assert!(changed.is_err());
}

#[test]
fn end_to_end_from_a_package_index() {
    require_sandbox!();
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = PypiServer::start(&dir.path().join("packages")) else {
        return;
    };
    server.add_wheel(&WheelSpec::new("helper-lib", "2.0").file(
        "helper_lib/__init__.py",
        "def double(x):\n    return 2 * x\n",
    ));
    server.add_wheel(
        &WheelSpec::new("quad", "1.0")
            .requires("helper-lib (>=2)")
            .file(
                "quad/__init__.py",
                "from helper_lib import double\n\n\ndef quadruple(x):\n    \"\"\"Four times x.\"\"\"\n    return double(double(x))\n",
            ),
    );
    let config = PypiConfig {
        index_url: server.url.clone(),
        allow_private: true,
        timeout: Duration::from_secs(20),
        cache_dir: dir.path().join("cache"),
    };
    let index = Index::new(&config).unwrap();
    let report =
        capability_binders::pypi::mine::mine(&index, "quad", Some("1.0"), Some("four times"))
            .unwrap();
    assert_eq!(report.candidates[0].symbol, "quadruple");
    assert_eq!(report.candidates[0].kind, CandidateKind::Function);

    let forged = forge(
        &index,
        &capability_binders::pypi::forge::ForgeOptions {
            package: "quad".into(),
            version: None,
            query: Some("four times".into()),
            module: None,
            symbol: None,
            directory: Some(dir.path().join("forge")),
        },
    )
    .unwrap();
    assert_eq!(forged.binding.dependencies.len(), 1);
    assert_eq!(forged.binding.dependencies[0].package, "helper-lib");
    let run = execute(&forged.directory, &json!([5]), &approved()).unwrap();
    assert_eq!(succeeded(&run), &json!(20));
    let receipt = run.to_json();
    assert_eq!(receipt["dependencyPolicy"], "bound-closure");
    assert_eq!(receipt["dependencies"][0]["package"], "helper-lib");

    // Through the binder, forging into its cache.
    let binder = PypiBinder::new(config);
    let mut registry = MetabolicBinderRegistry::new();
    registry.register(Arc::new(binder)).unwrap();
    let binding = registry
        .bind(
            "capability/pypi-wheel",
            &json!({"package": "quad", "version": "1.0", "symbol": "quadruple"}),
        )
        .unwrap();
    assert_eq!(binding["locator"], "pypi:quad==1.0");
    let result = registry
        .execute(
            "capability/pypi-wheel",
            &binding,
            &json!({"args": [1]}),
            &ExecuteOptions {
                approved: true,
                cancel: None,
            },
        )
        .unwrap();
    assert_eq!(result.output, Some(json!({"result": 4})));
}

#[test]
fn the_miner_never_imports_the_wheel() {
    require_sandbox!();
    // Importing this module would end the interpreter; the miner lists it anyway.
    let spec = WheelSpec::new("exploder", "1.0").file(
        "exploder/__init__.py",
        "import os\nos._exit(9)\n\n\ndef detonate():\n    \"\"\"Never runs at mining time.\"\"\"\n",
    );
    let (_dir, wheel, inspection) = local(&spec);
    let report = mine_wheel(&wheel, &inspection, Some("detonate")).unwrap();
    assert_eq!(report.candidates.len(), 1);
    assert_eq!(report.candidates[0].symbol, "detonate");
    assert_eq!(report.candidates[0].score, 1.2);
}

#[test]
fn a_run_that_outlives_its_timeout_is_a_failed_receipt() {
    require_sandbox!();
    let spec = WheelSpec::new("spinner", "1.0").file(
        "spinner/__init__.py",
        "def spin():\n    while True:\n        pass\n",
    );
    let (dir, wheel, inspection) = local(&spec);
    let forge_dir = dir.path().join("forge");
    forge_wheel(
        &wheel,
        &inspection,
        &[],
        &select("spinner", "spin"),
        &forge_dir,
    )
    .unwrap();
    let options = RunOptions {
        approved: true,
        timeout: Duration::from_secs(2),
    };
    let run = execute(&forge_dir, &json!([]), &options).unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        matches!(run.error_kind.as_deref(), Some("timeout" | "cpu_limit")),
        "{:?}: {:?}",
        run.error_kind,
        run.error
    );
    assert_eq!(run.to_json()["status"], "failed");
}

/// A wheel of `pkg/__init__.py` (defining `f`) plus one hostile entry.
fn wheel_with(
    dir: &Path,
    name: &str,
    hostile: impl FnOnce(&mut zip::ZipWriter<std::fs::File>),
) -> PathBuf {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{name}-1.0-py3-none-any.whl"));
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    zip.start_file("pkg/__init__.py", options).unwrap();
    zip.write_all(b"def f():\n    return 1\n").unwrap();
    hostile(&mut zip);
    zip.finish().unwrap();
    path
}

#[test]
fn unsafe_archive_entries_are_refused_before_anything_runs() {
    use std::io::Write as _;
    require_sandbox!();
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, PathBuf)> = vec![
        (
            "a `..` component",
            wheel_with(&dir.path().join("dotdot"), "dotdot", |z| {
                z.start_file("../escape.txt", zip::write::SimpleFileOptions::default())
                    .unwrap();
                z.write_all(b"x").unwrap();
            }),
        ),
        (
            "an absolute path",
            wheel_with(&dir.path().join("absolute"), "absolute", |z| {
                z.start_file("/etc/escape.txt", zip::write::SimpleFileOptions::default())
                    .unwrap();
                z.write_all(b"x").unwrap();
            }),
        ),
        (
            "a symlink",
            wheel_with(&dir.path().join("symlink"), "symlink", |z| {
                z.add_symlink(
                    "pkg/link",
                    "/etc/shadow",
                    zip::write::SimpleFileOptions::default(),
                )
                .unwrap();
            }),
        ),
    ];
    for (why, wheel) in cases {
        let name = wheel.file_name().unwrap().to_string_lossy().to_string();
        let project = name.split('-').next().unwrap().to_string();
        let inspection = Inspection {
            name: project.clone(),
            version: "1.0".into(),
            summary: None,
            requires_python: None,
            project_urls: BTreeMap::new(),
            wheel: WheelRef {
                filename: name,
                url: String::new(),
                sha256: sha256_file(&wheel),
                size: None,
            },
            vulnerabilities: Vec::new(),
            tag: "py3-none-any".into(),
        };
        let forge_dir = dir.path().join(format!("forge-{project}"));
        forge_wheel(&wheel, &inspection, &[], &select("pkg", "f"), &forge_dir).unwrap();
        let err = execute(&forge_dir, &json!([]), &approved()).unwrap_err();
        assert_eq!(err.kind, PypiErrorKind::Invalid, "{why}: {err}");
        assert!(err.message.contains(why), "{why}: {err}");
    }
}
