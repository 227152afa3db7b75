//! Through the runtime: a hostile package capability is stopped at the boundary, the run fails
//! with a stored receipt that says why and names the boundary, the host is unharmed, and the
//! same capability succeeds once the matching effect is granted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use capability_core::ErrorCode;
use capability_core::authorization::EffectPolicy;
use capability_core::receipt::ReceiptStatus;
use capability_runtime::capability::{Capability, ModuleSource};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_sandbox::{ExecutorChoice, HostGrants, Limits, ModuleExecutor, ProcessLimits};
use serde_json::{Value, json};

/// The hostile JS module, re-declared with the given id and effects (the module's own
/// manifest must equal the inert one, so both are rewritten).
fn package(id: &str, effects: &[&str]) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(common::fixtures().join("hostile/hostile.mjs")).unwrap();
    let effects_js = format!("effects: {}", serde_json::to_string(effects).unwrap());
    let source = source
        .replace("id: 'hostile/js'", &format!("id: '{id}'"))
        .replace(
            "effects: ['filesystem.read', 'filesystem.write', 'network.connect', 'process.spawn', 'environment.read', 'secrets.read']",
            &effects_js,
        );
    std::fs::write(dir.path().join("hostile.mjs"), source).unwrap();
    let manifest = json!({
        "specVersion": "0.1", "id": id, "version": "1.0.0", "name": "Hostile JS",
        "description": "Tries to break out of its sandbox.", "effects": effects,
    });
    (dir, manifest)
}

fn runtime(
    dir: &tempfile::TempDir,
    manifest: &Value,
    host: HostGrants,
    limits: Limits<ProcessLimits>,
) -> CapabilityRuntime {
    let executor = ModuleExecutor::new(ExecutorChoice::Process)
        .with_host_grants(host)
        .with_limits(limits);
    let rt = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .executor(Arc::new(executor))
        .build();
    let source = ModuleSource {
        package_root: dir.path().to_path_buf(),
        module: "./hostile.mjs".into(),
        integrity: None,
    };
    rt.register(Capability::module(manifest, source).unwrap())
        .unwrap();
    rt
}

/// Invokes and returns the stored failed receipt of a refused run.
fn failed_receipt(
    rt: &CapabilityRuntime,
    id: &str,
    input: Value,
) -> Arc<capability_core::receipt::Receipt> {
    let err = rt
        .invoke(id, input, &ExecuteOptions::approved())
        .unwrap_err();
    let receipt_id = err
        .receipt_id
        .clone()
        .unwrap_or_else(|| panic!("no receipt for {err:?}"));
    let r = rt.get_receipt(&receipt_id).unwrap().unwrap();
    assert_eq!(r.status, ReceiptStatus::Failed);
    assert_eq!(
        r.isolation.as_ref().unwrap()["kind"],
        "process-sandbox",
        "{r:?}"
    );
    r
}

#[test]
fn network_and_files_are_closed_without_grants_and_the_receipt_says_why() {
    let (dir, manifest) = package("hostile/closed", &[]);
    let secret = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(secret.path(), "top secret").unwrap();
    let rt = runtime(
        &dir,
        &manifest,
        HostGrants {
            read_paths: vec![secret.path().into()],
            ..Default::default()
        },
        common::limits(),
    );

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = failed_receipt(
        &rt,
        "hostile/closed",
        json!({"action": "connect", "host": "127.0.0.1", "port": port}),
    );
    let err = r.error.as_ref().unwrap();
    assert!(
        ["ENETUNREACH", "ECONNREFUSED", "EPERM", "EACCES"]
            .iter()
            .any(|c| err.message.contains(c)),
        "{err:?}"
    );
    assert_eq!(r.isolation.as_ref().unwrap()["network"], "none");
    std::thread::sleep(Duration::from_millis(200));
    assert!(listener.accept().is_err(), "the listener saw a connection");

    // The host path is only opened with filesystem.read, which this capability lacks.
    let r = failed_receipt(
        &rt,
        "hostile/closed",
        json!({"action": "read", "path": secret.path()}),
    );
    assert!(!serde_json::to_string(&*r).unwrap().contains("top secret"));
    assert_eq!(
        std::fs::read_to_string(secret.path()).unwrap(),
        "top secret"
    );

    let r = failed_receipt(
        &rt,
        "hostile/closed",
        json!({"action": "write", "path": secret.path(), "data": "pwned"}),
    );
    assert!(
        r.error.as_ref().unwrap().message.contains("EACCES")
            || r.error.as_ref().unwrap().message.contains("EROFS")
            || r.error.as_ref().unwrap().message.contains("ENOENT")
    );
    assert_eq!(
        std::fs::read_to_string(secret.path()).unwrap(),
        "top secret"
    );

    // The machine still answers.
    let ok = rt
        .invoke(
            "hostile/closed",
            json!({"action": "ok"}),
            &ExecuteOptions::approved(),
        )
        .unwrap();
    assert_eq!(ok.output, Some(json!({"ok": true})));
}

#[test]
fn limits_stop_runaway_code_with_a_receipt_naming_the_limit() {
    let (dir, manifest) = package("hostile/limits", &[]);
    let tight = Limits {
        timeout: Duration::from_millis(1500),
        memory_bytes: 256 << 20,
        tmp_bytes: 4 << 20,
        ..Limits::default()
    };
    let rt = runtime(&dir, &manifest, HostGrants::default(), tight);
    let r = failed_receipt(&rt, "hostile/limits", json!({"action": "loop"}));
    assert_eq!(r.error.as_ref().unwrap().name, "SandboxTimeout");
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("wall-clock limit of 1500 ms")
    );
    let r = failed_receipt(&rt, "hostile/limits", json!({"action": "alloc"}));
    assert_eq!(
        r.error.as_ref().unwrap().name,
        "SandboxMemoryLimit",
        "{:?}",
        r.error
    );
    let r = failed_receipt(&rt, "hostile/limits", json!({"action": "filltmp"}));
    assert!(
        r.error.as_ref().unwrap().message.contains("ENOSPC"),
        "{:?}",
        r.error
    );
    let limits = &r.isolation.as_ref().unwrap()["limits"];
    assert!(
        limits
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "tmpSize" && l["value"] == 4 << 20)
    );
}

#[test]
fn granted_effects_open_exactly_what_the_host_chose() {
    let (dir, manifest) = package("hostile/granted", &["filesystem.read", "network.connect"]);
    let secret = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(secret.path(), "shared on purpose").unwrap();
    // Readable by others: a root host's guest reads as nobody.
    common::chmod(secret.path(), 0o644);
    let rt = runtime(
        &dir,
        &manifest,
        HostGrants {
            read_paths: vec![secret.path().into()],
            ..Default::default()
        },
        common::limits(),
    );
    // Without approval the permissive policy refuses network.connect: no receipt, no run.
    let err = rt
        .invoke(
            "hostile/granted",
            json!({"action": "ok"}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalRequired);
    let r = rt
        .invoke(
            "hostile/granted",
            json!({"action": "read", "path": secret.path()}),
            &ExecuteOptions::approved(),
        )
        .unwrap();
    assert_eq!(r.output, Some(json!({"content": "shared on purpose"})));
    assert_eq!(
        r.isolation.as_ref().unwrap()["readPaths"][0],
        secret.path().display().to_string()
    );

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        got
    });
    let r = rt
        .invoke(
            "hostile/granted",
            json!({"action": "connect", "host": "127.0.0.1", "port": port}),
            &ExecuteOptions::approved(),
        )
        .unwrap();
    assert_eq!(r.output, Some(json!({"connected": true})));
    assert_eq!(r.isolation.as_ref().unwrap()["network"], "host");
    assert_eq!(accept.join().unwrap(), "hello");
}

#[test]
fn a_tampered_module_is_refused_before_it_runs() {
    let (dir, manifest) = package("hostile/tampered", &[]);
    let executor = ModuleExecutor::new(ExecutorChoice::Process);
    let rt = CapabilityRuntime::builder()
        .executor(Arc::new(executor))
        .build();
    let source = ModuleSource {
        package_root: dir.path().to_path_buf(),
        module: "./hostile.mjs".into(),
        integrity: Some(format!("sha256-{}", "0".repeat(64))),
    };
    rt.register(Capability::module(&manifest, source).unwrap())
        .unwrap();
    let err = rt
        .invoke(
            "hostile/tampered",
            json!({"action": "ok"}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidPackageDeclaration, "{err:?}");
    assert_eq!(err.message, "Integrity check failed for hostile/tampered");
}

#[test]
fn the_in_process_choice_runs_no_package_module() {
    let (dir, manifest) = package("hostile/in-process", &[]);
    let executor = ModuleExecutor::new(ExecutorChoice::InProcess);
    let rt = CapabilityRuntime::builder()
        .executor(Arc::new(executor))
        .build();
    let source = ModuleSource {
        package_root: dir.path().to_path_buf(),
        module: "./hostile.mjs".into(),
        integrity: None,
    };
    rt.register(Capability::module(&manifest, source).unwrap())
        .unwrap();
    let err = rt
        .invoke(
            "hostile/in-process",
            json!({"action": "ok"}),
            &ExecuteOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ExecutionFailed, "{err:?}");
    assert!(err.message.contains("never in process"), "{}", err.message);
}

#[test]
fn a_guest_error_code_is_the_guests_never_the_runs() {
    for lang in common::ALL {
        let pkg = common::Package::new(lang);
        let executor = ModuleExecutor::new(ExecutorChoice::Process).with_limits(common::limits());
        let rt = CapabilityRuntime::builder()
            .policy(EffectPolicy::permissive())
            .executor(Arc::new(executor))
            .build();
        let source = ModuleSource {
            package_root: pkg.dir.path().to_path_buf(),
            module: pkg.spec.module.clone(),
            integrity: None,
        };
        rt.register(Capability::module(&pkg.spec.manifest, source).unwrap())
            .unwrap();
        let id = pkg.spec.manifest["id"].as_str().unwrap().to_string();
        // Codes the host itself answers with: a guest saying them must not make the host say so.
        for code in [
            "APPROVAL_REQUIRED",
            "PERMISSION_DENIED",
            "INVALID_INPUT",
            "EWHATEVER",
        ] {
            let err = rt
                .invoke(
                    &id,
                    json!({"action": "throw", "arg": code, "data": "guest says no"}),
                    &ExecuteOptions::approved(),
                )
                .unwrap_err();
            assert_eq!(
                err.code,
                ErrorCode::ExecutionFailed,
                "{lang:?} {code}: {err:?}"
            );
            let details = err.details.clone().unwrap_or(Value::Null);
            assert_eq!(details["guest"]["code"], code, "{lang:?}: {details}");
            assert!(
                details["guest"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("guest says no"),
                "{lang:?}: {details}"
            );
            // The native program answers every op alike, so it already fails its plan (no
            // receipt, the same top-level code); the shims' modules fail in execute.
            let Some(receipt_id) = err.receipt_id.as_deref() else {
                assert_eq!(lang, common::Lang::Native, "no receipt: {err:?}");
                continue;
            };
            let receipt = rt.get_receipt(receipt_id).unwrap().unwrap();
            let stored = receipt.error.as_ref().unwrap();
            assert_eq!(stored.code.as_deref(), Some("EXECUTION_FAILED"), "{lang:?}");
        }
    }
}
