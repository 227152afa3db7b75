//! Per-execution cost of the process sandbox, next to an unsandboxed spawn of the same program
//! with the same stdin (for node and python: the same shim, without namespaces, landlock,
//! seccomp or limits).
//!
//! The `pool` group: one run of a node (and python) module through the runtime with the
//! sandbox pool, the call arriving after the spare is up (as calls to a server do), beside the
//! reference's `NodePermissionExecutor` way of running the same module (the current node with
//! its permission model, the module's directory readable, the envelope on stdin), spawned
//! the same way. A native module's run through the runtime with the pool (a spare per op),
//! beside the same runtime without a pool and beside three plain spawns of the program.
//!
//! Run: `cargo bench -p capability-sandbox --bench sandbox`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use capability_sandbox::{
    Grants, Invocation, Limits, ModuleSpec, ProcessLimits, ProcessSandbox, run_module,
};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const NODE_SHIM: &str = include_str!("../src/shims/node.mjs");
const PYTHON_SHIM: &str = include_str!("../src/shims/python.py");

/// The fixtures of the tests (`tests/fixtures`).
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn native_package() -> (tempfile::TempDir, ModuleSpec) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("cap");
    let ok = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(Path::new(FIXTURES).join("hostile/hostile.c"))
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
    let root = Path::new(FIXTURES).join("add-package");
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
        package_root: Path::new(FIXTURES).join("hooks"),
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
        timeout: Duration::from_secs(30),
        ..Limits::<ProcessLimits>::default()
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

/// A child script that does what the reference's `NodePermissionExecutor` child does: read
/// the envelope, import the module, run the action, print `{ok, hasResult, result}`.
const PERMISSION_CHILD: &str = r#"
import { readFileSync } from 'node:fs';
const env = JSON.parse(readFileSync(0, 'utf8'));
const mod = await import(process.argv[1]);
const cap = mod.default ?? mod.capability;
const result = await cap.execute(env.input, { manifest: env.manifest, effects: [] });
process.stdout.write(JSON.stringify({ ok: true, hasResult: true, result }));
"#;

/// A runtime whose executor keeps a pool, with `manifest` registered at `module` of `root`.
fn pooled_runtime(
    root: &Path,
    module: &str,
    manifest: &Value,
) -> capability_runtime::CapabilityRuntime {
    runtime_with(root, module, manifest, 2)
}

/// A runtime whose executor keeps a pool of `pool` spares (none with 0).
fn runtime_with(
    root: &Path,
    module: &str,
    manifest: &Value,
    pool: usize,
) -> capability_runtime::CapabilityRuntime {
    use capability_runtime::capability::{Capability, ModuleSource};
    let mut executor =
        capability_sandbox::ModuleExecutor::new(capability_sandbox::ExecutorChoice::Process);
    if pool > 0 {
        executor = executor.with_pool(pool);
    }
    let runtime = capability_runtime::CapabilityRuntime::builder()
        .policy(capability_core::authorization::EffectPolicy::permissive())
        .executor(std::sync::Arc::new(executor))
        .build();
    let source = ModuleSource {
        package_root: root.to_path_buf(),
        module: module.into(),
        integrity: None,
    };
    runtime
        .register(Capability::module(manifest, source).unwrap())
        .unwrap();
    runtime
}

/// Times one invoke per iteration, each after a pause (untimed) that lets the spare start.
fn spaced(
    runtime: &capability_runtime::CapabilityRuntime,
    id: &str,
    input: &Value,
    iters: u64,
) -> Duration {
    let options = capability_runtime::ExecuteOptions::approved();
    spaced_runs(iters, || {
        let receipt = runtime.invoke(id, input.clone(), &options).unwrap();
        assert!(receipt.output.is_some());
    })
}

/// Times `run` once per iteration, each after the same untimed pause as [`spaced`].
fn spaced_runs(iters: u64, mut run: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        std::thread::sleep(Duration::from_millis(400));
        let started = std::time::Instant::now();
        run();
        total += started.elapsed();
    }
    total
}

/// A native module's run through the runtime with a pool (the spares started during the
/// pause), beside the same runtime without one (a fresh sandbox per op) and the program
/// spawned plainly once per op, all spaced alike.
fn native_pool(c: &mut Criterion) {
    let (dir, native) = native_package();
    let manifest = json!({"specVersion": "0.1", "id": "bench/native", "version": "1.0.0",
        "name": "Native", "description": "Answers ok.", "effects": []});
    let input = json!({"action": "ok"});
    let pooled = runtime_with(dir.path(), &native.module, &manifest, 4);
    let fresh = runtime_with(dir.path(), &native.module, &manifest, 0);
    let mut g = c.benchmark_group("pool");
    g.sample_size(20).measurement_time(Duration::from_secs(20));
    g.bench_function("native/pooled", |b| {
        b.iter_custom(|iters| spaced(&pooled, "bench/native", &input, iters))
    });
    g.bench_function("native/fresh", |b| {
        b.iter_custom(|iters| spaced(&fresh, "bench/native", &input, iters))
    });
    // The runtime asks a native program three times (plan, execute, verify: a program
    // answers one op): the same three spawns, plainly.
    let bin = native.package_root.join("cap");
    let env = envelope(input.clone());
    g.bench_function("native/unsandboxed-three-spawns", |b| {
        b.iter_custom(|iters| {
            spaced_runs(iters, || {
                for _ in 0..3 {
                    plain_spawn(&bin, &[], &env);
                }
            })
        })
    });
    g.finish();
}

fn pool(c: &mut Criterion) {
    let sandbox = ProcessSandbox::global();
    let node = node_spec();
    let node_bin = sandbox.node().unwrap().path.clone();
    let runtime = pooled_runtime(&node.package_root, &node.module, &node.manifest);
    let input = json!({"a": 20, "b": 22});
    let id = node.manifest["id"].as_str().unwrap().to_string();
    let mut g = c.benchmark_group("pool");
    g.sample_size(10).measurement_time(Duration::from_secs(30));
    g.bench_function("node/pooled", |b| {
        b.iter_custom(|iters| spaced(&runtime, &id, &input, iters))
    });
    // The permission flag is `--permission` from node 22, `--experimental-permission` before.
    let version = Command::new(&node_bin)
        .arg("--version")
        .output()
        .unwrap()
        .stdout;
    let major: u32 = String::from_utf8_lossy(&version)
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    let permission = if major >= 22 {
        "--permission"
    } else {
        "--experimental-permission"
    };
    let module = node.package_root.join(node.module.trim_start_matches("./"));
    let url = format!("file://{}", module.display());
    // The module's directory and the package root, de-duplicated (as the reference does).
    let mut reads = vec![format!(
        "--allow-fs-read={}",
        module.parent().unwrap().display()
    )];
    let root_read = format!("--allow-fs-read={}", node.package_root.display());
    if !reads.contains(&root_read) {
        reads.push(root_read);
    }
    let stdin = serde_json::to_vec(
        &json!({"action": "execute", "input": input, "manifest": node.manifest}),
    )
    .unwrap();
    g.bench_function("node/reference-permission-executor", |b| {
        b.iter(|| {
            let mut args = vec![permission];
            args.extend(reads.iter().map(String::as_str));
            args.extend(["--input-type=module", "--eval", PERMISSION_CHILD, &url]);
            plain_spawn(&node_bin, &args, &stdin)
        })
    });
    let py_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        py_dir.path().join("add.py"),
        "def execute(input, ctx):\n    return {\"result\": input[\"a\"] + input[\"b\"]}\n",
    )
    .unwrap();
    let py_manifest = json!({"specVersion": "0.1", "id": "bench/py-add", "version": "1.0.0",
        "name": "Add", "description": "Adds two numbers.", "effects": []});
    let py_runtime = pooled_runtime(py_dir.path(), "./add.py", &py_manifest);
    g.bench_function("python/pooled", |b| {
        b.iter_custom(|iters| spaced(&py_runtime, "bench/py-add", &input, iters))
    });
    g.finish();
}

criterion_group!(benches, bench, pool, native_pool);
criterion_main!(benches);
