//! The WASM executor behind `capability-exec`'s `Executor` trait: what a runtime sees of a
//! `.wasm` package module — hooks, module checks, grants and limits, and the boundary report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::Any;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use capability_core::ErrorCode;
use capability_core::binder::CancelToken;
use capability_core::manifest::Manifest;
use capability_core::plan::{CapabilityRef, Plan};
use capability_exec::{
    BoundaryReport, CapabilityView, ExecutionRequest, Executor, HookError, HostGrants,
    IsolationTier, ModuleSource, SandboxRequirement,
};
use capability_wasm::{Limits, WasmExecutor, WasmLimits, sha256};
use serde_json::{Value, json};

/// A package module as the runtime registers it.
struct Package {
    manifest: Manifest,
    source: Option<ModuleSource>,
}

impl CapabilityView for Package {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    fn module_source(&self) -> Option<&ModuleSource> {
        self.source.as_ref()
    }
    fn provenance(&self) -> Option<&Value> {
        None
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A package holding the fixture `file` as `./<file>` (`module` names it), with `manifest`.
fn package(dir: &Path, file: &str, module: &str, manifest: Value) -> Package {
    std::fs::copy(fixture(file), dir.join(file)).unwrap();
    Package {
        manifest: Manifest::from_value(&manifest).unwrap(),
        source: Some(ModuleSource {
            package_root: dir.to_path_buf(),
            module: module.into(),
            integrity: None,
        }),
    }
}

fn hostile_manifest() -> Value {
    json!({
        "specVersion": "0.1", "id": "test/hostile", "version": "1.0.0", "name": "Hostile",
        "description": "Tries to cross the boundary.",
        "effects": ["filesystem.read"]
    })
}

fn plan(package: &Package, input: Value, effects: &[&str]) -> Plan {
    Plan::build(
        "plan_1".into(),
        CapabilityRef {
            id: package.manifest.id.clone(),
            version: package.manifest.version.clone(),
        },
        input,
        effects.iter().map(|e| e.to_string()).collect(),
        "Execute".into(),
        "2024-01-01T00:00:00.000Z".into(),
        None,
    )
}

fn request<'a>(
    package: &'a Package,
    plan: &'a Plan,
    cancel: &'a CancelToken,
    sandbox: Option<&'a SandboxRequirement>,
) -> ExecutionRequest<'a> {
    ExecutionRequest {
        capability: package,
        plan,
        approved: false,
        metadata: None,
        cancel,
        timeout: None,
        sandbox,
    }
}

fn executor() -> WasmExecutor {
    WasmExecutor::with_engine(engine().clone())
}

#[test]
fn every_hook_crosses_the_wasm_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let add = package(
        dir.path(),
        "guest-add.wasm",
        "./guest-add.wasm",
        add_manifest(),
    );
    let executor = executor();
    let cancel = CancelToken::new();
    assert_eq!(executor.name(), "wasm");
    assert!(executor.can_rollback(&add));

    let details = executor
        .plan(&add, &json!({"a": 2, "b": 3}), &cancel)
        .unwrap()
        .unwrap();
    assert_eq!(details.summary.as_deref(), Some("Add 2 and 3"));

    let plan = plan(&add, json!({"a": 2, "b": 3}), &[]);
    let executed = executor
        .execute(&request(&add, &plan, &cancel, None))
        .unwrap();
    assert_eq!(executed.output, json!({"result": 5}));
    let bytes = std::fs::read(fixture("guest-add.wasm")).unwrap();
    let digest: String = sha256(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    let BoundaryReport::Wasm(report) = &executed.isolation else {
        panic!("a wasm report: {:?}", executed.isolation)
    };
    assert_eq!(report.module_sha256, digest);
    assert_eq!(executed.isolation.tier(), IsolationTier::Wasm);
    assert_eq!(executed.isolation.to_value()["kind"], "wasm");

    let verification = executor
        .verify(&request(&add, &plan, &cancel, None), &executed.output)
        .unwrap()
        .unwrap();
    assert!(verification.ok);

    // The guest's own code stays the guest's: the run failed with EXECUTION_FAILED.
    let receipt = capability_core::receipt::Receipt::from_value(&json!({
        "receiptId": "r1", "planId": "plan_1",
        "capability": {"id": "math/add", "version": "1.0.0"}, "status": "succeeded",
        "startedAt": "2024-01-01T00:00:00.000Z", "endedAt": "2024-01-01T00:00:00.000Z",
        "durationMs": 0, "effects": [], "inputHash": "x", "input": {"a": 2, "b": 3},
        "output": {"result": 5}
    }))
    .unwrap();
    let e = executor
        .rollback(&request(&add, &plan, &cancel, None), &receipt)
        .unwrap_err();
    let HookError::Capability(e) = e else {
        panic!("a capability error: {e:?}")
    };
    assert_eq!(e.code, ErrorCode::ExecutionFailed);
    assert_eq!(
        e.details.unwrap()["guest"]["code"],
        json!("ROLLBACK_UNAVAILABLE")
    );
}

#[test]
fn a_module_is_checked_before_anything_compiles_it() {
    let dir = tempfile::tempdir().unwrap();
    let pkg = dir.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    std::fs::copy(fixture("guest-add.wasm"), dir.path().join("outside.wasm")).unwrap();
    let executor = executor();
    let cancel = CancelToken::new();
    let input = json!({"a": 1, "b": 2});

    let escape = package(&pkg, "guest-add.wasm", "./../outside.wasm", add_manifest());
    let e = executor.plan(&escape, &input, &cancel).unwrap_err();
    let HookError::Capability(e) = e else {
        panic!("a capability error: {e:?}")
    };
    assert_eq!(e.code, ErrorCode::InvalidPackageDeclaration);
    assert!(
        e.message
            .starts_with("Export math/add escapes package root:"),
        "{}",
        e.message
    );

    let mut tampered = package(&pkg, "guest-add.wasm", "./guest-add.wasm", add_manifest());
    let wrong: String = sha256(b"other")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    tampered.source.as_mut().unwrap().integrity = Some(format!("sha256-{wrong}"));
    let plan = plan(&tampered, input.clone(), &[]);
    let failure = executor
        .execute(&request(&tampered, &plan, &cancel, None))
        .unwrap_err();
    assert_eq!(failure.isolation, None, "nothing ran");
    assert_eq!(
        failure.error.message(),
        "Integrity check failed for math/add"
    );

    let bytes = std::fs::read(fixture("guest-add.wasm")).unwrap();
    let right: String = sha256(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    tampered.source.as_mut().unwrap().integrity = Some(right);
    let executed = executor
        .execute(&request(&tampered, &plan, &cancel, None))
        .unwrap();
    assert_eq!(executed.output, json!({"result": 3}));

    let not_a_module = Package {
        source: None,
        ..package(&pkg, "guest-add.wasm", "./guest-add.wasm", add_manifest())
    };
    let e = executor.plan(&not_a_module, &input, &cancel).unwrap_err();
    assert_eq!(e.message(), "math/add is not a package module");
}

#[test]
fn host_paths_open_only_with_their_effect_and_requests_tighten_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let data = grant_dir();
    std::fs::write(data.path().join("secret.txt"), "granted-contents").unwrap();
    let hostile = package(
        dir.path(),
        "guest-hostile.wasm",
        "./guest-hostile.wasm",
        hostile_manifest(),
    );
    let executor = executor()
        .with_host_grants(HostGrants {
            read_paths: vec![data.path().to_path_buf()],
            ..HostGrants::default()
        })
        .with_limits(Limits {
            // Generous: compiling the module counts against it, and a loaded machine
            // compiles slowly in a debug build.
            timeout: Duration::from_secs(60),
            ..Limits::<WasmLimits>::default()
        });
    let cancel = CancelToken::new();
    let path = format!("{}/secret.txt", data.path().display());
    let input = json!({"attack": "read", "arg": path});

    // Not authorized: the host path stays closed.
    let closed = plan(&hostile, input.clone(), &[]);
    let failure = executor
        .execute(&request(&hostile, &closed, &cancel, None))
        .unwrap_err();
    let Some(BoundaryReport::Wasm(report)) = failure.isolation else {
        panic!("a wasm report: {:?}", failure.isolation)
    };
    assert_eq!(report.preopens.len(), 1, "/tmp only");
    // Compiling counts against the timeout: what is left of it is the run's.
    assert!(report.timeout_ms <= 60_000);

    // Authorized, under a governance requirement: opened read-only at its host path, and the
    // run gets the requirement's tighter time and memory.
    let requirement = SandboxRequirement {
        min_tier: None,
        deny_network: true,
        timeout_ms: Some(3000),
        memory_mb: Some(64),
    };
    let open = plan(&hostile, input, &["filesystem.read"]);
    let executed = executor
        .execute(&request(&hostile, &open, &cancel, Some(&requirement)))
        .unwrap();
    assert_eq!(executed.output, json!({"content": "granted-contents"}));
    let BoundaryReport::Wasm(report) = &executed.isolation else {
        panic!("a wasm report: {:?}", executed.isolation)
    };
    let preopen = &report.preopens[1];
    assert_eq!(preopen.guest, data.path().display().to_string());
    assert_eq!(preopen.access, "read");
    assert_eq!(report.memory_limit, 64 << 20);
    assert!(report.timeout_ms <= 3000);
}
