//! Safe acquisition: module paths that escape the package root, integrity mismatches and
//! manifests that differ from the inert metadata are refused, and the code does not run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use base64::Engine as _;
use capability_sandbox::{Grants, Invocation, ModuleSpec, SandboxError, run_module};
use common::{Lang, Package, chmod, fixtures, limits};
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
