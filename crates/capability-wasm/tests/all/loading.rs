//! Loading: integrity before compilation, the digest-keyed cache, the embedded manifest,
//! what is refused, and inconsistent grants and limits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use base64::Engine as _;
use capability_wasm::{
    EngineConfig, Grants, Invocation, Limits, Op, WasmEngine, WasmErrorKind, WasmLimits,
    WasmModuleSpec, verify_integrity,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256, Sha512};

fn add_bytes() -> Arc<[u8]> {
    std::fs::read(fixture("guest-add.wasm")).unwrap().into()
}

#[test]
fn integrity_forms() {
    let bytes = add_bytes();
    let b64 = base64::engine::general_purpose::STANDARD;
    let hex: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let good = [
        hex.clone(),
        hex.to_uppercase(),
        format!("sha256-{hex}"),
        b64.encode(Sha256::digest(&bytes)),
        format!("sha256-{}", b64.encode(Sha256::digest(&bytes))),
        format!("sha512-{}", b64.encode(Sha512::digest(&bytes))),
    ];
    for integrity in &good {
        verify_integrity(&bytes, integrity).unwrap();
    }
    let wrong = format!("sha256-{}", "0".repeat(64));
    for integrity in [
        wrong.as_str(),
        "sha512-AAAA",
        "md5-1B2M2Y8AsgTpgAmY7PhCfg==",
        "",
        "sha256-",
    ] {
        let e = verify_integrity(&bytes, integrity).unwrap_err();
        assert_eq!(e.kind(), WasmErrorKind::Integrity, "{integrity:?}");
    }
    // Checked before compiling: a tampered module never reaches the compiler.
    let mut tampered = bytes.to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    let e = engine()
        .load(&WasmModuleSpec::from_bytes(tampered).with_integrity(good[2].clone()))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::Integrity);
    assert!(e.message().contains("mismatch"), "{}", e.message());
}

#[test]
fn modules_are_compiled_once_and_cached_by_digest() {
    let engine = WasmEngine::new(EngineConfig::default()).unwrap();
    let spec = WasmModuleSpec::from_bytes(add_bytes());
    let a = engine.load(&spec).unwrap();
    let b = engine
        .load(&WasmModuleSpec::from_path(fixture("guest-add.wasm")))
        .unwrap();
    assert_eq!(engine.cached_modules(), 1);
    assert_eq!(a.sha256_hex(), b.sha256_hex());
    let spin = wat::parse_file(fixture("spin.wat")).unwrap();
    engine.load(&WasmModuleSpec::from_bytes(spin)).unwrap();
    assert_eq!(engine.cached_modules(), 2);

    // A module handle belongs to its engine.
    let e = engine
        .run(
            &add_module(),
            &Invocation::execute(json!({"a": 1, "b": 1})),
            &Grants::none(),
            &Limits::default(),
        )
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::InvalidModule);
}

#[test]
fn the_embedded_manifest_must_match_the_inert_one() {
    let module = add_module();
    assert_eq!(module.embedded_manifest().unwrap(), &add_manifest());

    let mut other = add_manifest();
    other["effects"] = json!(["network.connect"]);
    let e = engine()
        .load(&WasmModuleSpec::from_bytes(add_bytes()).with_manifest(other))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::ManifestMismatch);
    assert!(e.message().contains("math/add"), "{}", e.message());

    // Key order is irrelevant: the comparison is by canonical hash.
    let Value::Object(map) = add_manifest() else {
        panic!()
    };
    let reversed: serde_json::Map<String, Value> = map.into_iter().rev().collect();
    engine()
        .load(&WasmModuleSpec::from_bytes(add_bytes()).with_manifest(Value::Object(reversed)))
        .unwrap();
}

#[test]
fn non_modules_are_refused() {
    let load = |bytes: Vec<u8>| {
        engine()
            .load(&WasmModuleSpec::from_bytes(bytes))
            .unwrap_err()
    };
    assert_eq!(
        load(b"not wasm at all".to_vec()).kind(),
        WasmErrorKind::InvalidModule
    );
    // A component header.
    let e = load(vec![0, b'a', b's', b'm', 0x0d, 0, 1, 0]);
    assert_eq!(e.kind(), WasmErrorKind::InvalidModule);
    assert!(
        e.message().contains("components are not supported"),
        "{}",
        e.message()
    );
    // A library (reactor) module is not a command.
    let e = load(
        wat::parse_str("(module (memory (export \"memory\") 1) (func (export \"_initialize\")))")
            .unwrap(),
    );
    assert!(e.message().contains("_start"), "{}", e.message());
    let e = engine()
        .load(&WasmModuleSpec::from_path(fixture("does-not-exist.wasm")))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::Io);
}

#[test]
fn inconsistent_grants_and_limits_are_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let module = add_module();
    let call = Invocation::execute(json!({"a": 1, "b": 1}));
    let run = |grants: &Grants, limits: &Limits<WasmLimits>| {
        engine().run(&module, &call, grants, limits).unwrap_err()
    };

    let mut g = Grants::none().read(dir.path());
    g.effects.clear();
    assert_eq!(
        run(&g, &Limits::default()).kind(),
        WasmErrorKind::InvalidGrants
    );
    let mut g = Grants::none().env_var("K", "V");
    g.effects.clear();
    assert_eq!(
        run(&g, &Limits::default()).kind(),
        WasmErrorKind::InvalidGrants
    );
    // Granted paths show at their host path: it must be usable as a guest path.
    for path in ["/tmp", "data", "/a/../b", "/x/"] {
        let g = Grants::none().read(path);
        assert_eq!(
            run(&g, &Limits::default()).kind(),
            WasmErrorKind::InvalidGrants,
            "{path}"
        );
    }
    let twice = Grants::none().read(dir.path()).write(dir.path());
    assert_eq!(
        run(&twice, &Limits::default()).kind(),
        WasmErrorKind::InvalidGrants
    );
    let g = Grants::none().read(dir.path().join("missing"));
    assert_eq!(
        run(&g, &Limits::default()).kind(),
        WasmErrorKind::InvalidGrants
    );

    let big = Limits {
        memory_bytes: 1 << 40,
        ..Limits::default()
    };
    assert_eq!(
        run(&Grants::none(), &big).kind(),
        WasmErrorKind::InvalidLimits
    );
    let mut small_stdin = Limits::<WasmLimits>::default();
    small_stdin.boundary.stdin_bytes = 10;
    assert_eq!(
        run(&Grants::none(), &small_stdin).kind(),
        WasmErrorKind::InvalidInvocation
    );
}

#[test]
fn a_full_pool_refuses_new_runs_until_a_slot_frees() {
    let engine = WasmEngine::new(EngineConfig {
        max_instances: 1,
        ..EngineConfig::default()
    })
    .unwrap();
    let spin = engine
        .load(&WasmModuleSpec::from_bytes(
            wat::parse_file(fixture("spin.wat")).unwrap(),
        ))
        .unwrap();
    let add = engine
        .load(&WasmModuleSpec::from_bytes(add_bytes()))
        .unwrap();
    let call = Invocation::execute(json!({"a": 1, "b": 1}));
    std::thread::scope(|s| {
        let spinner = s.spawn(|| {
            let mut limits = Limits::<WasmLimits>::default();
            limits.boundary.fuel = u64::MAX / 2;
            limits.timeout = Duration::from_secs(2);
            engine
                .run(
                    &spin,
                    &Invocation::execute(Value::Null),
                    &Grants::none(),
                    &limits,
                )
                .unwrap()
        });
        // Let the spinner take the only slot first (it holds it for 2 s).
        std::thread::sleep(Duration::from_millis(200));
        let mut saw_capacity = false;
        while !spinner.is_finished() {
            match engine.run(&add, &call, &Grants::none(), &Limits::default()) {
                Err(e) if e.kind() == WasmErrorKind::Capacity => {
                    saw_capacity = true;
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        assert!(
            saw_capacity,
            "a second run must be refused while the only slot is busy"
        );
        let spun = spinner.join().unwrap();
        assert_eq!(spun.result.unwrap_err().kind(), WasmErrorKind::Timeout);
    });
    let out = engine
        .run(&add, &call, &Grants::none(), &Limits::default())
        .unwrap();
    assert_eq!(out.result.unwrap(), json!({"result": 2}));
}

/// A valid command module of `functions` functions of `ops` additions each: slow to compile.
fn many_functions(functions: usize, ops: usize) -> Arc<[u8]> {
    let mut text = String::from("(module (func (export \"_start\"))\n");
    for _ in 0..functions {
        text.push_str("(func (param i32) (result i32) local.get 0\n");
        for i in 0..ops {
            text.push_str(&format!("i32.const {i} i32.add\n"));
        }
        text.push_str(")\n");
    }
    text.push(')');
    Arc::from(wat::parse_str(&text).unwrap())
}

#[test]
fn compiling_past_the_timeout_is_refused_on_time() {
    let bytes = many_functions(60, 100);
    // A fresh engine: nothing cached, and the compile left running is its own.
    let engine = WasmEngine::new(EngineConfig::default()).unwrap();
    let spec = WasmModuleSpec::from_bytes(bytes.clone());
    let limits = Limits {
        timeout: Duration::from_millis(30),
        ..Limits::default()
    };
    let started = Instant::now();
    let e = engine
        .run_spec(
            &spec,
            &Invocation::new(Op::Execute, json!({})),
            &Grants::none(),
            &limits,
        )
        .unwrap_err();
    let waited = started.elapsed();
    assert_eq!(e.kind(), WasmErrorKind::Timeout, "{e}");
    assert!(e.message().contains("compiling"), "{}", e.message());
    assert!(e.message().contains("timeout"), "{}", e.message());
    assert!(
        waited < Duration::from_millis(1500),
        "refused after {waited:?}"
    );
    // Given the time, the same module compiles (the abandoned compile finished and cached it,
    // or this one does).
    let started = Instant::now();
    let module = engine
        .load_within(&spec, Some(Instant::now() + Duration::from_secs(300)))
        .unwrap();
    eprintln!(
        "{} byte module: compiled after {:?} more",
        bytes.len(),
        started.elapsed()
    );
    assert_eq!(module.size(), bytes.len());
    // A deadline already passed refuses at once, unless the module is cached.
    let other = many_functions(3, 3);
    let e = engine
        .load_within(&WasmModuleSpec::from_bytes(other), Some(Instant::now()))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::Timeout);
    assert!(engine.load_within(&spec, Some(Instant::now())).is_ok());
}

#[test]
fn a_module_above_the_size_limit_is_refused_before_it_is_compiled() {
    let engine = WasmEngine::new(EngineConfig {
        max_module_bytes: 64 << 10,
        ..EngineConfig::default()
    })
    .unwrap();
    let bytes = many_functions(120, 200);
    assert!(bytes.len() > 64 << 10, "{}", bytes.len());
    let e = engine
        .load(&WasmModuleSpec::from_bytes(bytes.clone()))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::InvalidModule);
    assert!(e.message().contains("byte limit"), "{}", e.message());
    // From a file: refused from its size (a sparse file far above the limit is never read).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.wasm");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(8 << 30).unwrap();
    let started = Instant::now();
    let e = engine.load(&WasmModuleSpec::from_path(path)).unwrap_err();
    assert!(e.message().contains("byte limit"), "{}", e.message());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(engine.cached_modules(), 0);
}
