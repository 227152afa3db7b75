//! Per-execution cost of the process sandbox, next to an unsandboxed spawn of the same program
//! with the same stdin (for node and python: the same shim, without namespaces, landlock,
//! seccomp or limits).
//!
//! Run: `cargo bench -p capability-sandbox --bench sandbox`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use capability_sandbox::{Grants, Invocation, Limits, ModuleSpec, ProcessSandbox, run_module};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const NODE_SHIM: &str = include_str!("../src/shims/node.mjs");
const PYTHON_SHIM: &str = include_str!("../src/shims/python.py");

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn native_package() -> (tempfile::TempDir, ModuleSpec) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("cap");
    let ok = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(fixtures().join("hostile/hostile.c"))
        .status()
        .unwrap()
        .success();
    assert!(ok, "gcc failed");
    let spec = ModuleSpec {
        package_root: dir.path().into(),
        install_root: None,
        module: "./cap".into(),
        integrity: None,
        manifest: json!({"id": "bench/native"}),
    };
    (dir, spec)
}

fn node_spec() -> ModuleSpec {
    let root = fixtures().join("add-package");
    let pkg: Value =
        serde_json::from_slice(&std::fs::read(root.join("package.json")).unwrap()).unwrap();
    ModuleSpec::from_export(
        root,
        "fixtures/add",
        &pkg["capability"]["exports"]["fixtures/add"],
    )
    .unwrap()
}

fn python_spec() -> ModuleSpec {
    ModuleSpec {
        package_root: fixtures().join("hooks"),
        install_root: None,
        module: "./bare.py".into(),
        integrity: None,
        manifest: json!({"id": "bench/python"}),
    }
}

/// The same program, spawned plainly, fed the same bytes.
fn plain_spawn(program: &Path, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.stdout.is_empty());
    out.stdout
}

fn envelope(input: Value) -> Vec<u8> {
    let mut v = serde_json::to_vec(
        &json!({"op": "execute", "input": input, "plan": null, "manifest": {}, "effects": []}),
    )
    .unwrap();
    v.push(b'\n');
    v
}

fn bench(c: &mut Criterion) {
    let limits = Limits {
        wall_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let grants = Grants::none();
    let sandbox = ProcessSandbox::global();

    let (_dir, native) = native_package();
    let native_input = json!({"action": "ok"});
    let mut g = c.benchmark_group("native");
    g.sample_size(100).measurement_time(Duration::from_secs(8));
    g.bench_function("sandboxed", |b| {
        b.iter(|| {
            let out = run_module(
                &native,
                &Invocation::execute(native_input.clone()),
                &grants,
                &limits,
            )
            .unwrap();
            assert!(out.result.is_ok());
        })
    });
    let bin = native.package_root.join("cap");
    let env = envelope(native_input.clone());
    g.bench_function("unsandboxed", |b| b.iter(|| plain_spawn(&bin, &[], &env)));
    g.finish();

    let node = node_spec();
    let node_bin = sandbox.node().unwrap().path.clone();
    let mut g = c.benchmark_group("node");
    g.sample_size(20).measurement_time(Duration::from_secs(15));
    let input = json!({"a": 20, "b": 22});
    g.bench_function("sandboxed", |b| {
        b.iter(|| {
            let out =
                run_module(&node, &Invocation::execute(input.clone()), &grants, &limits).unwrap();
            assert_eq!(out.result.unwrap(), json!({"result": 42}));
        })
    });
    let module = node.package_root.join("add.mjs");
    let mut stdin = envelope(input.clone());
    stdin.extend_from_slice(b"{\"proceed\":true}\n");
    let module_str = module.to_str().unwrap().to_string();
    g.bench_function("unsandboxed", |b| {
        b.iter(|| {
            plain_spawn(
                &node_bin,
                &[
                    "--max-old-space-size=512",
                    "--input-type=module",
                    "-e",
                    NODE_SHIM,
                    "--",
                    &module_str,
                ],
                &stdin,
            )
        })
    });
    g.bench_function("bare-node-startup", |b| {
        b.iter(|| plain_spawn(&node_bin, &["-e", "console.log(1)"], b""))
    });
    g.finish();

    let py = python_spec();
    let py_bin = sandbox.python().unwrap().path.clone();
    let mut g = c.benchmark_group("python");
    g.sample_size(30).measurement_time(Duration::from_secs(10));
    g.bench_function("sandboxed", |b| {
        b.iter(|| {
            let out = run_module(&py, &Invocation::execute(json!({})), &grants, &limits).unwrap();
            assert!(out.result.is_ok());
        })
    });
    let module = py.package_root.join("bare.py");
    let module_str = module.to_str().unwrap().to_string();
    let mut stdin = envelope(json!({}));
    stdin.extend_from_slice(b"{\"proceed\":true}\n");
    g.bench_function("unsandboxed", |b| {
        b.iter(|| {
            plain_spawn(
                &py_bin,
                &["-I", "-S", "-B", "-c", PYTHON_SHIM, &module_str],
                &stdin,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
