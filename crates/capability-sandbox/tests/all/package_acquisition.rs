//! Safe acquisition: module paths that escape the package root, integrity mismatches and
//! manifests that differ from the inert metadata are refused, and the code does not run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Lang, Package, chmod, fixtures, limits};
use base64::Engine as _;
use capability_sandbox::{Grants, Invocation, ModuleSpec, SandboxError, run_module};
use serde_json::json;
use sha2::{Digest, Sha256, Sha512};

fn refused(spec: &ModuleSpec) -> SandboxError {
    match run_module(
        spec,
        &Invocation::execute(json!({"action": "ok"})),
        &Grants::none(),
        &limits(),
    ) {
        Err(e) => e,
        Ok(out) => panic!("{} was not refused: {:?}", spec.module, out.result),
    }
}

#[test]
fn module_paths_that_escape_the_package_root_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixtures().join("hostile/hostile.mjs"),
        outside.path().join("outside.mjs"),
    )
    .unwrap();
    for lang in [Lang::Js, Lang::Py, Lang::Native] {
        let pkg = Package::new(lang);
        let mut spec = pkg.spec.clone();
        let outside_file = outside.path().join("outside.mjs");
        std::os::unix::fs::symlink(&outside_file, pkg.dir.path().join("link.mjs")).unwrap();
        std::os::unix::fs::symlink(outside.path(), pkg.dir.path().join("linkdir")).unwrap();
        let rel_up = format!(
            "./../{}/outside.mjs",
            outside.path().file_name().unwrap().to_string_lossy()
        );
        for module in [
            rel_up.as_str(),
            "../outside.mjs",
            "./sub/../../outside.mjs",
            "./link.mjs",
            "./linkdir/outside.mjs",
            "/etc/passwd",
            outside_file.to_str().unwrap(),
            "hostile.mjs",
        ] {
            spec.module = module.to_string();
            let e = refused(&spec);
            assert!(
                matches!(e, SandboxError::PathEscape { .. }),
                "{lang:?} {module}: {e:?}"
            );
            assert_eq!(e.kind(), "path_escape");
        }
    }
}

#[test]
fn integrity_is_checked_before_anything_runs() {
    let pkg = Package::new(Lang::Js);
    let bytes = std::fs::read(pkg.dir.path().join("hostile.mjs")).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let good = [
        format!("sha256-{}", b64.encode(Sha256::digest(&bytes))),
        format!("{:x}", Sha256::digest(&bytes)),
        format!("sha512-{}", b64.encode(Sha512::digest(&bytes))),
    ];
    for integrity in good {
        let mut spec = pkg.spec.clone();
        spec.integrity = Some(integrity.clone());
        let out = run_module(
            &spec,
            &Invocation::execute(json!({"action": "ok"})),
            &Grants::none(),
            &limits(),
        )
        .unwrap();
        assert_eq!(out.result.unwrap(), json!({"ok": true}), "{integrity}");
    }
    // A tampered module: the declared integrity no longer matches.
    let mut spec = pkg.spec.clone();
    spec.integrity = Some(format!("sha512-{}", b64.encode(Sha512::digest(&bytes))));
    std::fs::write(
        pkg.dir.path().join("hostile.mjs"),
        [&bytes[..], b"\n// tampered\n"].concat(),
    )
    .unwrap();
    let e = refused(&spec);
    assert!(matches!(e, SandboxError::IntegrityMismatch { .. }), "{e:?}");
    spec.integrity = Some("md5-xyz".into());
    assert!(matches!(
        refused(&spec),
        SandboxError::UnsupportedIntegrity { .. }
    ));
}

#[test]
fn a_loaded_manifest_that_differs_is_refused_before_execute() {
    let marker_dir = tempfile::tempdir().unwrap();
    // Writable by others: a root host's guest writes as nobody.
    chmod(marker_dir.path(), 0o777);
    let marker = marker_dir.path().join("executed");
    let grants = Grants::none().write(marker_dir.path());
    let mut spec = ModuleSpec {
        package_root: fixtures().join("hooks"),
        install_root: None,
        module: "./bare.mjs".into(),
        integrity: None,
        manifest: json!({"specVersion": "0.1", "id": "fixtures/bare", "version": "1.0.0", "name": "Bare",
                         "description": "Execute only."}),
    };
    let input = json!({"marker": marker});
    let out = run_module(
        &spec,
        &Invocation::execute(input.clone()),
        &grants,
        &limits(),
    )
    .unwrap();
    assert_eq!(out.result.unwrap(), json!({"ran": true}));
    assert!(marker.exists(), "control run must execute");
    std::fs::remove_file(&marker).unwrap();
    // The inert manifest says another version: the loaded one differs.
    spec.manifest["version"] = json!("2.0.0");
    let out = run_module(
        &spec,
        &Invocation::execute(input.clone()),
        &grants,
        &limits(),
    )
    .unwrap();
    match &out.result {
        Err(SandboxError::ManifestMismatch {
            id,
            expected,
            loaded,
        }) => {
            assert_eq!(id, "fixtures/bare");
            assert_ne!(expected, loaded);
            assert_eq!(
                *expected,
                capability_core::json::canonical_hash(&spec.manifest)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !marker.exists(),
        "execute ran despite the manifest mismatch"
    );
    // Python: MANIFEST present and different.
    let py = ModuleSpec {
        module: "./hooks.py".into(),
        manifest: json!({"id": "fixtures/hooks-py", "tampered": true}),
        ..spec.clone()
    };
    let out = run_module(
        &py,
        &Invocation::execute(json!({"n": 1})),
        &Grants::none(),
        &limits(),
    )
    .unwrap();
    assert!(
        matches!(out.result, Err(SandboxError::ManifestMismatch { .. })),
        "{:?}",
        out.result
    );
}

/// A module whose top-level code speaks the shim's handshake itself: it reports the given
/// manifest line (e.g. `{"manifest": null}`), takes the host's answer and writes an output,
/// all before the shim could report the manifest the module really exports (which differs
/// from the inert one: it claims more effects).
fn handshake_forger(lang: Lang, reported: &str) -> (tempfile::TempDir, ModuleSpec) {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    let (file, source) = match lang {
        Lang::Js => (
            "forger.mjs",
            format!(
                r#"import fs from 'node:fs';
fs.writeSync(1, '{reported}\n');
const buf = Buffer.alloc(64);
fs.readSync(0, buf, 0, 64);
fs.writeSync(1, '{{"output":{{"forged":true}}}}\n');
process.exit(0);
export default {{ manifest: {{ id: 'forge/me', effects: ['process.spawn'] }}, execute() {{ return {{}}; }} }};
"#
            ),
        ),
        Lang::Py => (
            "forger.py",
            format!(
                r#"import os
MANIFEST = {{"id": "forge/me", "effects": ["process.spawn"]}}
os.write(1, b'{reported}\n')
os.read(0, 64)
os.write(1, b'{{"output": {{"forged": true}}}}\n')
os._exit(0)
def execute(input, context):
    return {{}}
"#
            ),
        ),
        Lang::Native => unreachable!("native modules have no handshake"),
    };
    std::fs::write(dir.path().join(file), source).unwrap();
    chmod(&dir.path().join(file), 0o644);
    let spec = ModuleSpec {
        package_root: dir.path().to_path_buf(),
        install_root: None,
        module: format!("./{file}"),
        integrity: None,
        manifest: json!({"specVersion": "0.1", "id": "forge/me", "version": "1.0.0",
            "name": "Forger", "description": "Reports a manifest of its choosing.", "effects": []}),
    };
    (dir, spec)
}

#[test]
fn a_guest_cannot_skip_the_manifest_check() {
    for lang in [Lang::Js, Lang::Py] {
        for reported in [
            r#"{"manifest": null}"#,
            r#"{"manifest": false}"#,
            r#"{"manifest": {"id": "forge/me"}}"#,
        ] {
            let (_dir, spec) = handshake_forger(lang, reported);
            let out = run_module(
                &spec,
                &Invocation::execute(json!({})),
                &Grants::none(),
                &limits(),
            )
            .unwrap();
            match &out.result {
                Err(SandboxError::ManifestMismatch { id, expected, .. }) => {
                    assert_eq!(id, "forge/me");
                    assert_eq!(
                        *expected,
                        capability_core::json::canonical_hash(&spec.manifest)
                    );
                }
                other => panic!("{lang:?} {reported}: {other:?}"),
            }
        }
    }
    // A python module that defines no MANIFEST is still run (the host saw none in it).
    let (dir, mut spec) = handshake_forger(Lang::Py, r#"{"manifest": null}"#);
    let path = dir.path().join("forger.py");
    let source = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, source.replace("MANIFEST = ", "_UNUSED = ")).unwrap();
    spec.manifest["id"] = json!("forge/me");
    let out = run_module(
        &spec,
        &Invocation::execute(json!({})),
        &Grants::none(),
        &limits(),
    )
    .unwrap();
    assert_eq!(out.result.unwrap(), json!({"forged": true}));
}

#[test]
fn wasm_modules_are_sent_to_the_wasm_executor() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let spec = ModuleSpec {
        package_root: dir.path().into(),
        install_root: None,
        module: "./m.wasm".into(),
        integrity: None,
        manifest: json!({}),
    };
    assert!(matches!(
        refused(&spec),
        SandboxError::UseWasmExecutor { .. }
    ));
}

#[test]
fn descriptors_are_parsed_like_the_reference() {
    let export =
        json!({"module": "./add.mjs", "manifest": {"id": "fixtures/add"}, "integrity": "sha256-x"});
    let spec = ModuleSpec::from_export("/pkg", "fixtures/add", &export).unwrap();
    assert_eq!(spec.module, "./add.mjs");
    assert_eq!(spec.integrity.as_deref(), Some("sha256-x"));
    let e = ModuleSpec::from_export("/pkg", "fixtures/add", &json!("./add.mjs")).unwrap_err();
    assert!(e.to_string().contains("legacy"), "{e}");
    let e = ModuleSpec::from_export("/pkg", "other/id", &export).unwrap_err();
    assert!(
        e.to_string().contains("manifest id must equal export id"),
        "{e}"
    );
    let bad = json!({"module": "./a.mjs", "manifest": {"id": "a/b"}, "integrity": 5});
    assert!(ModuleSpec::from_export("/pkg", "a/b", &bad).is_err());
}

/// How one integrity string is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Accepted,
    Mismatch,
    Unsupported,
}

/// Integrity strings for `bytes`, with the verdict each must get, whatever the module kind.
fn integrity_cases(bytes: &[u8]) -> Vec<(String, Verdict)> {
    use Verdict::*;
    let b64 = base64::engine::general_purpose::STANDARD;
    let hex = format!("{:x}", Sha256::digest(bytes));
    let s256 = b64.encode(Sha256::digest(bytes));
    let s512 = b64.encode(Sha512::digest(bytes));
    let other512 = b64.encode(Sha512::digest(b"other"));
    vec![
        (hex.clone(), Accepted),
        (hex.to_uppercase(), Accepted),
        (format!("sha256-{hex}"), Accepted),
        (s256.clone(), Accepted),
        (format!("sha256-{s256}"), Accepted),
        (format!("sha256-{}", s256.trim_end_matches('=')), Accepted),
        (format!(" sha256-{s256}\n"), Accepted),
        (format!("sha512-{s512}"), Accepted),
        (format!("sha512-{}", s512.trim_end_matches('=')), Accepted),
        (format!("sha512-{s512}?opt"), Accepted),
        (format!("sha256-{} sha512-{s512}", "0".repeat(64)), Accepted),
        (format!("sha256-{}", "0".repeat(64)), Mismatch),
        (format!("sha512-{other512}"), Mismatch),
        (format!("sha256-{s256} sha512-{other512}"), Mismatch),
        (String::new(), Unsupported),
        ("sha256-".into(), Unsupported),
        ("sha512-AAAA".into(), Unsupported),
        ("md5-1B2M2Y8AsgTpgAmY7PhCfg==".into(), Unsupported),
        ("sha1-qUqP5cyxm6YcTAhz05Hph5gvu9M=".into(), Unsupported),
        (format!("sha256-AAAA sha512-{s512}"), Unsupported),
    ]
}

fn wasm_fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../capability-wasm/tests/fixtures/guest-add.wasm")
}

/// `.wasm` modules (checked by the WASM engine) and `.js` modules (checked by the sandbox's
/// acquisition) accept and refuse exactly the same integrity strings: one checker.
#[test]
fn one_integrity_checker_for_every_module_kind() {
    use capability_wasm::{EngineConfig, WasmEngine, WasmErrorKind, WasmModuleSpec};
    let dir = tempfile::tempdir().unwrap();
    let wasm_bytes = std::fs::read(wasm_fixture()).unwrap();
    std::fs::write(dir.path().join("add.wasm"), &wasm_bytes).unwrap();
    let pkg = Package::new(Lang::Js);
    let js_bytes = std::fs::read(pkg.dir.path().join("hostile.mjs")).unwrap();
    let engine = WasmEngine::new(EngineConfig::default()).unwrap();

    let js_verdict = |integrity: &str| {
        let mut spec = pkg.spec.clone();
        spec.integrity = Some(integrity.to_string());
        match capability_sandbox::resolve_module(&spec) {
            Ok(_) => Verdict::Accepted,
            Err(SandboxError::IntegrityMismatch { .. }) => Verdict::Mismatch,
            Err(SandboxError::UnsupportedIntegrity { .. }) => Verdict::Unsupported,
            Err(e) => panic!("{integrity:?}: {e:?}"),
        }
    };
    let wasm_verdict = |integrity: &str| {
        let spec = WasmModuleSpec::from_path(dir.path().join("add.wasm")).with_integrity(integrity);
        match engine.load(&spec) {
            Ok(_) => Verdict::Accepted,
            Err(e) if e.kind() == WasmErrorKind::Integrity => {
                if e.message().starts_with("module integrity mismatch") {
                    Verdict::Mismatch
                } else if e.message().starts_with("unsupported integrity value") {
                    Verdict::Unsupported
                } else {
                    panic!("{integrity:?}: {e}")
                }
            }
            Err(e) => panic!("{integrity:?}: {e}"),
        }
    };
    // The sandbox's WASM executor resolves `.wasm` modules through the same acquisition.
    let wasm_acquired = |integrity: &str| {
        let spec = ModuleSpec {
            package_root: dir.path().into(),
            install_root: None,
            module: "./add.wasm".into(),
            integrity: Some(integrity.to_string()),
            manifest: json!({}),
        };
        match capability_sandbox::resolve_module(&spec) {
            Ok(_) => Verdict::Accepted,
            Err(SandboxError::IntegrityMismatch { .. }) => Verdict::Mismatch,
            Err(SandboxError::UnsupportedIntegrity { .. }) => Verdict::Unsupported,
            Err(e) => panic!("{integrity:?}: {e:?}"),
        }
    };
    for (integrity, expected) in integrity_cases(&js_bytes) {
        assert_eq!(js_verdict(&integrity), expected, ".js {integrity:?}");
    }
    for (integrity, expected) in integrity_cases(&wasm_bytes) {
        assert_eq!(wasm_verdict(&integrity), expected, ".wasm {integrity:?}");
        assert_eq!(wasm_acquired(&integrity), expected, ".wasm {integrity:?}");
    }
}

/// A 2 GiB sparse module file is refused from its size, on every path that reads modules,
/// without being read (hashing 2 GiB would take many seconds); the limit is configurable.
#[test]
fn a_sparse_2_gib_module_is_refused_without_being_read() {
    use capability_wasm::{EngineConfig, WasmEngine, WasmErrorKind, WasmModuleSpec};
    let dir = tempfile::tempdir().unwrap();
    for name in ["huge.mjs", "huge.wasm"] {
        std::fs::File::create(dir.path().join(name))
            .unwrap()
            .set_len(2 << 30)
            .unwrap();
    }
    let started = std::time::Instant::now();
    let spec = ModuleSpec {
        package_root: dir.path().into(),
        install_root: None,
        module: "./huge.mjs".into(),
        integrity: Some(format!("sha256-{}", "0".repeat(64))),
        manifest: json!({"id": "hostile/huge"}),
    };
    // Acquisition (`cap acquire`), then a run.
    let e = capability_sandbox::resolve_module(&spec).unwrap_err();
    assert!(
        matches!(e, SandboxError::ModuleTooLarge { size, limit, .. }
            if size == 2 << 30 && limit == capability_exec::DEFAULT_MAX_MODULE_BYTES),
        "{e:?}"
    );
    assert_eq!(e.kind(), "module_too_large");
    assert_eq!(
        e.to_string(),
        "module \"./huge.mjs\" is 2147483648 bytes, above the 268435456 byte limit for module files"
    );
    let e = refused(&spec);
    assert!(matches!(e, SandboxError::ModuleTooLarge { .. }), "{e:?}");
    let hook = capability_sandbox::hook_error("hostile/huge", e);
    assert!(
        matches!(&hook, capability_exec::HookError::Capability(c)
            if c.code == capability_core::ErrorCode::InvalidPackageDeclaration),
        "{hook:?}"
    );
    // The WASM engine, from a path.
    let engine = WasmEngine::new(EngineConfig::default()).unwrap();
    let e = engine
        .load(&WasmModuleSpec::from_path(dir.path().join("huge.wasm")))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::InvalidModule, "{e}");
    assert!(e.message().contains("above the 67108864 byte limit"), "{e}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );

    // The limit is the host's: a small one refuses an ordinary module.
    let pkg = Package::new(Lang::Js);
    let mut tight = limits();
    tight.boundary.max_module_bytes = 16;
    let e = capability_sandbox::run_module(
        &pkg.spec,
        &Invocation::execute(json!({"action": "ok"})),
        &Grants::none(),
        &tight,
    )
    .unwrap_err();
    assert!(
        matches!(e, SandboxError::ModuleTooLarge { limit: 16, .. }),
        "{e:?}"
    );
}
