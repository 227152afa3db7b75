//! Shared helpers of the integration tests (public API only).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use capability_wasm::{
    EngineConfig, Grants, Invocation, Limits, Op, RunOutcome, WasmEngine, WasmError, WasmLimits,
    WasmModule, WasmModuleSpec, WasmReport,
};
use serde_json::{Value, json};

/// What a run of the engine returns.
pub type Outcome = RunOutcome<WasmError, WasmReport>;

/// A directory to grant, outside the guest's private `/tmp` (granted paths show at their host
/// path).
pub fn grant_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn add_manifest() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/guest-add/manifest.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// One engine per test binary (as a host would share one per process).
pub fn engine() -> &'static WasmEngine {
    static ENGINE: OnceLock<WasmEngine> = OnceLock::new();
    ENGINE.get_or_init(|| WasmEngine::new(EngineConfig::default()).unwrap())
}

pub fn wat_module(engine: &WasmEngine, file: &str) -> WasmModule {
    let bytes = wat::parse_file(fixture(file)).unwrap();
    engine
        .load(&WasmModuleSpec::from_bytes(Arc::<[u8]>::from(bytes)))
        .unwrap()
}

pub fn add_module() -> WasmModule {
    engine()
        .load(&WasmModuleSpec::from_path(fixture("guest-add.wasm")).with_manifest(add_manifest()))
        .unwrap()
}

pub fn hostile_module() -> WasmModule {
    engine()
        .load(&WasmModuleSpec::from_path(fixture("guest-hostile.wasm")))
        .unwrap()
}

/// Limits small enough that hostile runs end quickly.
pub fn tight() -> Limits<WasmLimits> {
    Limits {
        timeout: Duration::from_secs(5),
        memory_bytes: 64 << 20,
        tmp_bytes: 4 << 20,
        boundary: WasmLimits {
            fuel: 2_000_000_000,
            ..WasmLimits::default()
        },
        ..Limits::default()
    }
}

pub fn attack(attack: &str, arg: &str, grants: &Grants, limits: &Limits<WasmLimits>) -> Outcome {
    engine()
        .run(
            &hostile_module(),
            &Invocation::new(Op::Execute, json!({"attack": attack, "arg": arg})),
            grants,
            limits,
        )
        .unwrap()
}

/// The add capability still works: the host is unharmed by whatever ran before.
pub fn assert_follow_up_ok() {
    let out = engine()
        .run(
            &add_module(),
            &Invocation::execute(json!({"a": 20, "b": 22})),
            &Grants::none(),
            &Limits::default(),
        )
        .unwrap();
    assert_eq!(out.result.unwrap(), json!({"result": 42}));
}
