//! `capability/wasm-module`: bound from a file or a loopback HTTP server by sha256, run on the
//! WASM engine through the registry gate, with WASI preopens only as granted. Hermetic: the
//! checked-in guests of `capability-wasm` and a server of the test's own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use capability_binders::wasm::{WASM_BINDER_ID, WasmBinder};
use capability_core::binder::{
    BinderStatus, ExecuteOptions, MetabolicBinder, MetabolicBinderRegistry,
    MetabolicExecutionResult,
};
use capability_core::conformance::run_binder_conformance;
use capability_core::published::{PublishedSchema, validate_published};
use capability_test_support::http::{Server, authority};
use capability_wasm::{EngineConfig, Limits, WasmEngine, WasmLimits};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../capability-wasm/tests/fixtures")
        .join(name)
}

fn add_manifest() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../capability-wasm/examples/guest-add/manifest.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn sha256_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn fixture_sha(name: &str) -> String {
    sha256_of(&std::fs::read(fixture(name)).unwrap())
}

/// One engine per test binary, as a host shares one per process.
fn engine() -> WasmEngine {
    static ENGINE: OnceLock<WasmEngine> = OnceLock::new();
    ENGINE
        .get_or_init(|| WasmEngine::new(EngineConfig::default()).unwrap())
        .clone()
}

/// Limits small enough that hostile runs end quickly.
fn tight() -> Limits<WasmLimits> {
    Limits {
        timeout: Duration::from_secs(5),
        memory_bytes: 64 << 20,
        tmp_bytes: 1 << 20,
        boundary: WasmLimits {
            fuel: 200_000_000,
            ..WasmLimits::default()
        },
        ..Limits::default()
    }
}

/// A directory outside `/tmp` (the guest's private scratch path), as preopens need.
fn host_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

struct Setup {
    /// Keeps the cache directory alive for the test.
    _cache: tempfile::TempDir,
    binder: Arc<WasmBinder>,
    registry: MetabolicBinderRegistry,
}

fn setup() -> Setup {
    let cache = host_dir();
    let binder = Arc::new(
        WasmBinder::new(cache.path().join("modules"))
            .with_engine(engine())
            .with_limits(tight()),
    );
    let mut registry = MetabolicBinderRegistry::new();
    registry.register(binder.clone()).unwrap();
    Setup {
        _cache: cache,
        binder,
        registry,
    }
}

fn approved() -> ExecuteOptions {
    ExecuteOptions {
        approved: true,
        cancel: None,
    }
}

fn run(s: &Setup, binding: &Value, input: Value) -> MetabolicExecutionResult {
    s.registry
        .execute(WASM_BINDER_ID, binding, &input, &approved())
        .unwrap()
}

fn add_request() -> Value {
    json!({
        "source": fixture("guest-add.wasm").display().to_string(),
        "sha256": fixture_sha("guest-add.wasm"),
    })
}

fn hostile_request(preopens: Value) -> Value {
    json!({
        "source": fixture("guest-hostile.wasm").display().to_string(),
        "sha256": fixture_sha("guest-hostile.wasm"),
        "preopens": preopens,
    })
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn leb(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn name(s: &str, out: &mut Vec<u8>) {
    leb(s.len(), out);
    out.extend_from_slice(s.as_bytes());
}

fn section(id: u8, contents: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    leb(contents.len(), out);
    out.extend_from_slice(contents);
}

/// A minimal command module importing one `() -> ()` function `module::field` and
/// exporting `_start` and `memory` (or neither, when `exports` is false).
fn module_importing(module: &str, field: &str, exports: bool) -> Vec<u8> {
    let mut out = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut out);
    let mut imports = vec![1];
    name(module, &mut imports);
    name(field, &mut imports);
    imports.extend_from_slice(&[0, 0]);
    section(2, &imports, &mut out);
    section(3, &[1, 0], &mut out);
    section(5, &[1, 0, 1], &mut out);
    if exports {
        let mut ex = vec![2];
        name("_start", &mut ex);
        ex.extend_from_slice(&[0, 1]);
        name("memory", &mut ex);
        ex.extend_from_slice(&[2, 0]);
        section(7, &ex, &mut out);
    }
    section(10, &[1, 2, 0, 0x0b], &mut out);
    out
}

fn cached_files(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn binds_a_file_by_sha256_with_its_exports() {
    let s = setup();
    let sha = fixture_sha("guest-add.wasm");
    let binding = s.registry.bind(WASM_BINDER_ID, &add_request()).unwrap();

    assert!(capability_core::validate_binding(&binding, Some((WASM_BINDER_ID, "wasm"))).is_empty());
    capability_core::binder::assert_binding(&binding, s.binder.as_ref()).unwrap();
    assert!(validate_published(PublishedSchema::Binding, &binding).is_empty());

    assert_eq!(binding["bindingVersion"], "1.0");
    assert_eq!(binding["substrate"], "wasm");
    assert_eq!(
        binding["locator"],
        fixture("guest-add.wasm").display().to_string()
    );
    assert_eq!(binding["immutableArtifact"], format!("sha256:{sha}"));
    assert_eq!(binding["authority"]["complete"], false);
    assert_eq!(
        binding["authority"]["effects"],
        json!(["custom:external.opaque-effects"])
    );
    assert!(
        binding["authority"]["note"]
            .as_str()
            .unwrap()
            .contains("not proven")
    );

    let exports = names(&binding["module"]["exports"]);
    assert!(exports.contains(&"_start".to_string()), "{exports:?}");
    assert!(exports.contains(&"memory".to_string()), "{exports:?}");
    assert!(
        binding["module"]["exports"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "_start", "kind": "function"}))
    );
    let evidence = binding["evidence"].as_array().unwrap();
    assert_eq!(evidence[0], format!("sha256:{sha}"));
    assert_eq!(evidence[1], format!("exports:{}", exports.join(",")));
    assert_eq!(
        evidence[2],
        format!("source:{}", fixture("guest-add.wasm").display())
    );
    let imports = binding["module"]["imports"].as_array().unwrap();
    assert!(!imports.is_empty());
    assert!(
        imports
            .iter()
            .all(|i| i["module"] == "wasi_snapshot_preview1" && i["kind"] == "function")
    );
    assert_eq!(binding["module"]["sha256"], sha);
    assert_eq!(
        binding["module"]["size"],
        std::fs::metadata(fixture("guest-add.wasm")).unwrap().len()
    );
    assert_eq!(binding["module"]["embeddedManifest"], true);
    assert_eq!(binding["preopens"], json!([]));

    // The verified bytes are kept under their digest, and nothing else is left behind.
    let cached = s.binder.cached_module_path(&sha);
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(fixture("guest-add.wasm")).unwrap()
    );
    assert_eq!(
        cached_files(s.binder.cache_dir()),
        vec![format!("{sha}.wasm")]
    );

    // `sha256:` prefix and upper case are accepted; the request manifest is kept when it
    // matches the embedded one.
    let mut request = add_request();
    request["sha256"] = json!(format!("sha256:{}", sha.to_uppercase()));
    request["manifest"] = add_manifest();
    let binding = s.registry.bind(WASM_BINDER_ID, &request).unwrap();
    assert_eq!(binding["manifest"]["id"], "math/add");
}

#[test]
fn executes_with_approval_and_is_refused_without() {
    let s = setup();
    let binding = s.registry.bind(WASM_BINDER_ID, &add_request()).unwrap();
    let input = json!({"a": 2, "b": 3});

    let refused = s
        .registry
        .execute(WASM_BINDER_ID, &binding, &input, &ExecuteOptions::default())
        .unwrap_err();
    assert_eq!(
        refused.0,
        "Binder capability/wasm-module requires explicit approval because authority is \
         incomplete"
    );

    let result = run(&s, &binding, input);
    assert_eq!(result.status, BinderStatus::Succeeded);
    assert_eq!(result.output, Some(json!({"result": 5})));
    let receipt = &result.receipt;
    assert!(validate_published(PublishedSchema::MetabolicReceipt, receipt).is_empty());
    assert_eq!(receipt["receiptVersion"], "1.0");
    assert_eq!(receipt["status"], "succeeded");
    assert_eq!(receipt["isolation"], "wasm");
    assert_eq!(receipt["immutableArtifact"], binding["immutableArtifact"]);
    assert_eq!(receipt["evidence"], binding["evidence"]);
    let upstream = &receipt["upstreamReceipt"];
    assert_eq!(upstream["substrate"], "wasm");
    assert_eq!(upstream["sha256"], binding["module"]["sha256"]);
    assert_eq!(upstream["source"], binding["locator"]);
    assert_eq!(upstream["status"], "succeeded");
    assert_eq!(
        upstream["exports"],
        json!(names(&binding["module"]["exports"]))
    );
    assert_eq!(upstream["boundary"]["kind"], "wasm");
    assert_eq!(
        upstream["boundary"]["moduleSha256"],
        binding["module"]["sha256"]
    );
    assert_eq!(upstream["boundary"]["env"], json!([]));
    // Only the private /tmp is open: no granted directory.
    let preopens = upstream["boundary"]["preopens"].as_array().unwrap();
    assert!(
        preopens.iter().all(|p| p["access"] == "scratch"),
        "{preopens:?}"
    );
    assert!(upstream.get("error").is_none());
    assert!(upstream["startedAt"].is_string() && upstream["finishedAt"].is_string());
    assert_eq!(receipt["metadata"]["manifest"]["id"], "math/add");
    assert_eq!(receipt["metadata"]["manifest"]["origin"], "embedded");

    // A guest error is a failed execution with the receipt, not an error of the call.
    let result = run(&s, &binding, json!({"a": "two"}));
    assert_eq!(result.status, BinderStatus::Failed);
    assert_eq!(result.output, None);
    assert_eq!(result.receipt["upstreamReceipt"]["status"], "failed");
    assert_eq!(result.receipt["upstreamReceipt"]["error"]["kind"], "guest");
    assert_eq!(
        result.receipt["upstreamReceipt"]["boundary"]["kind"],
        "wasm"
    );
}

#[test]
fn a_wrong_sha256_is_refused_before_parsing_and_nothing_is_kept() {
    let s = setup();
    let right = fixture_sha("guest-add.wasm");
    let wrong = "0".repeat(64);
    let mut request = add_request();
    request["sha256"] = json!(wrong);
    let e = s.registry.bind(WASM_BINDER_ID, &request).unwrap_err();
    assert!(e.0.contains(&format!("expected sha256:{wrong}")), "{}", e.0);
    assert!(e.0.contains(&format!("got sha256:{right}")), "{}", e.0);
    assert!(cached_files(s.binder.cache_dir()).is_empty());

    // Bytes that are not WASM at all: with a wrong digest the digest is what is refused
    // (nothing parsed them); with their right digest, parsing refuses them.
    let dir = host_dir();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"#!/bin/sh\nrm -rf /\n").unwrap();
    let request = json!({"source": junk.display().to_string(), "sha256": wrong});
    let e = s.registry.bind(WASM_BINDER_ID, &request).unwrap_err();
    assert!(e.0.contains("does not match its pinned digest"), "{}", e.0);
    let request = json!({
        "source": junk.display().to_string(),
        "sha256": sha256_of(&std::fs::read(&junk).unwrap()),
    });
    let e = s.registry.bind(WASM_BINDER_ID, &request).unwrap_err();
    assert!(e.0.contains("malformed"), "{}", e.0);
    assert!(cached_files(s.binder.cache_dir()).is_empty());

    // No digest, no binding.
    let e = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &json!({"source": fixture("guest-add.wasm").display().to_string()}),
        )
        .unwrap_err();
    assert!(
        e.0.contains("never bound by a mutable locator alone"),
        "{}",
        e.0
    );
    let e = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &json!({"source": fixture("guest-add.wasm").display().to_string(), "sha256": "abc"}),
        )
        .unwrap_err();
    assert!(e.0.contains("64 hex digits"), "{}", e.0);
}

#[test]
fn binds_from_a_loopback_http_server() {
    let s = setup();
    let bytes = std::fs::read(fixture("guest-add.wasm")).unwrap();
    let sha = sha256_of(&bytes);
    let server = Server::start();
    let url = server.put("/guest-add.wasm", 200, bytes);
    let addr = authority(&server.base);

    let binding = s
        .registry
        .bind(WASM_BINDER_ID, &json!({"source": url, "sha256": sha}))
        .unwrap();
    assert_eq!(binding["locator"], url);
    assert_eq!(binding["evidence"][2], format!("source:{url}"));
    assert_eq!(binding["immutableArtifact"], format!("sha256:{sha}"));
    assert!(s.binder.cached_module_path(&sha).is_file());
    let result = run(&s, &binding, json!({"a": 40, "b": 2}));
    assert_eq!(result.output, Some(json!({"result": 42})));
    assert_eq!(result.receipt["upstreamReceipt"]["source"], url);

    // A missing file is an HTTP error. (`localhost` and IP literals are always reachable;
    // `allowPrivate` lets other names resolve to private addresses, which needs DNS to test.)
    let e = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &json!({"source": format!("http://{addr}/missing.wasm"), "sha256": sha}),
        )
        .unwrap_err();
    assert!(e.0.contains("HTTP 404"), "{}", e.0);
    let port = addr.rsplit(':').next().unwrap();
    let by_name = format!("http://localhost:{port}/guest-add.wasm");
    let binding = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &json!({"source": by_name, "sha256": sha, "allowPrivate": true}),
        )
        .unwrap();
    assert_eq!(binding["locator"], by_name);
    let e = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &json!({"source": by_name, "sha256": sha, "allowPrivate": "yes"}),
        )
        .unwrap_err();
    assert!(e.0.contains("allowPrivate must be a boolean"), "{}", e.0);
    let e = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &json!({"source": "ftp://example.test/m.wasm", "sha256": sha}),
        )
        .unwrap_err();
    assert!(e.0.contains("unsupported WASM module source"), "{}", e.0);
}

#[test]
fn a_cached_module_changed_on_disk_is_refused_at_execute() {
    let s = setup();
    let binding = s.registry.bind(WASM_BINDER_ID, &add_request()).unwrap();
    let sha = binding["module"]["sha256"].as_str().unwrap().to_string();
    let cached = s.binder.cached_module_path(&sha);
    let mut bytes = std::fs::read(&cached).unwrap();
    bytes.extend_from_slice(b"\0tampered");
    std::fs::write(&cached, &bytes).unwrap();

    let result = run(&s, &binding, json!({"a": 1, "b": 1}));
    assert_eq!(result.status, BinderStatus::Failed);
    assert_eq!(result.output, None);
    let error = result.receipt["error"].as_str().unwrap();
    assert!(error.contains("changed on disk"), "{error}");
    assert!(error.contains(&format!("expected sha256:{sha}")), "{error}");

    // Gone from the cache: refused too, with the way out.
    std::fs::remove_file(&cached).unwrap();
    let result = run(&s, &binding, json!({"a": 1, "b": 1}));
    let error = result.receipt["error"].as_str().unwrap();
    assert!(error.contains("bind it again"), "{error}");

    // Binding again restores it.
    let binding = s.registry.bind(WASM_BINDER_ID, &add_request()).unwrap();
    assert_eq!(
        run(&s, &binding, json!({"a": 1, "b": 1})).output,
        Some(json!({"result": 2}))
    );
}

#[test]
fn a_hostile_guest_is_stopped_and_reads_only_its_read_only_preopen() {
    let s = setup();
    let granted = host_dir();
    let other = host_dir();
    std::fs::write(granted.path().join("data.txt"), "granted-contents").unwrap();
    std::fs::write(other.path().join("secret.txt"), "top-secret").unwrap();
    let granted_path = granted.path().display().to_string();
    let data = format!("{granted_path}/data.txt");
    let secret = format!("{}/secret.txt", other.path().display());

    // No preopens: nothing outside its private /tmp, and a spin is stopped by a limit.
    let binding = s
        .registry
        .bind(WASM_BINDER_ID, &hostile_request(json!([])))
        .unwrap();
    for (attack, arg) in [
        ("read", data.as_str()),
        ("read", "/etc/passwd"),
        ("write", data.as_str()),
        ("connect", "127.0.0.1:9"),
        ("spawn", "/bin/sh"),
    ] {
        let result = run(&s, &binding, json!({"attack": attack, "arg": arg}));
        assert_eq!(result.status, BinderStatus::Failed, "{attack} {arg}");
        assert_eq!(result.receipt["status"], "failed");
        let upstream = &result.receipt["upstreamReceipt"];
        assert_eq!(upstream["error"]["kind"], "guest", "{attack}: {upstream}");
        assert!(
            upstream["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{attack} failed:"))
        );
        assert!(!upstream.to_string().contains("granted-contents"));
    }
    assert_eq!(
        std::fs::read_to_string(granted.path().join("data.txt")).unwrap(),
        "granted-contents"
    );
    let result = run(&s, &binding, json!({"attack": "spin", "arg": ""}));
    assert_eq!(result.status, BinderStatus::Failed);
    let kind = &result.receipt["upstreamReceipt"]["error"]["kind"];
    assert!(kind == "outOfFuel" || kind == "timeout", "{kind}");

    // A read-only preopen: that directory is readable, not writable, and nothing else is.
    let binding = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &hostile_request(json!([{"path": granted_path}])),
        )
        .unwrap();
    assert_eq!(
        binding["authority"]["effects"],
        json!(["filesystem.read", "custom:external.opaque-effects"])
    );
    assert_eq!(
        binding["preopens"],
        json!([{"path": granted_path, "write": false}])
    );
    let result = run(&s, &binding, json!({"attack": "read", "arg": data}));
    assert_eq!(result.status, BinderStatus::Succeeded);
    assert_eq!(result.output, Some(json!({"content": "granted-contents"})));
    let preopens = result.receipt["upstreamReceipt"]["boundary"]["preopens"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        preopens.iter().any(|p| p["guest"] == granted_path
            && p["host"] == granted_path
            && p["access"] == "read"),
        "{preopens:?}"
    );
    let new_file = format!("{granted_path}/new.txt");
    for (attack, arg) in [
        ("read", secret.as_str()),
        ("read", "/etc/passwd"),
        ("write", data.as_str()),
        ("write", new_file.as_str()),
    ] {
        let result = run(&s, &binding, json!({"attack": attack, "arg": arg}));
        assert_eq!(result.status, BinderStatus::Failed, "{attack} {arg}");
        assert!(!result.receipt.to_string().contains("top-secret"));
    }
    assert_eq!(
        std::fs::read_to_string(granted.path().join("data.txt")).unwrap(),
        "granted-contents"
    );
    assert!(!granted.path().join("new.txt").exists());

    // A binding edited to open another directory without its effect is refused.
    let mut tampered = binding.clone();
    tampered["preopens"] = json!([{"path": other.path().display().to_string(), "write": true}]);
    let result = run(&s, &tampered, json!({"attack": "read", "arg": secret}));
    assert_eq!(result.status, BinderStatus::Failed);
    let error = result.receipt["error"].as_str().unwrap();
    assert!(error.contains("filesystem.write"), "{error}");

    // A writable preopen is granted filesystem.write and can be written.
    let binding = s
        .registry
        .bind(
            WASM_BINDER_ID,
            &hostile_request(json!([{"path": granted_path, "write": true}])),
        )
        .unwrap();
    assert_eq!(
        binding["authority"]["effects"],
        json!(["filesystem.write", "custom:external.opaque-effects"])
    );
    let result = run(&s, &binding, json!({"attack": "write", "arg": data}));
    assert_eq!(result.status, BinderStatus::Succeeded, "{}", result.receipt);
    assert_eq!(
        std::fs::read_to_string(granted.path().join("data.txt")).unwrap(),
        "pwned by guest-hostile"
    );
}

#[test]
fn requests_and_modules_the_engine_cannot_honour_are_refused() {
    let s = setup();
    let dir = host_dir();
    let bind = |request: Value| s.registry.bind(WASM_BINDER_ID, &request).unwrap_err().0;
    let write_module = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        json!({"source": path.display().to_string(), "sha256": sha256_of(bytes)})
    };

    // ABI: no _start/memory; an import from outside WASI; a WASI import the host lacks.
    let e = bind(write_module(
        "bare.wasm",
        &module_importing("env", "f", false),
    ));
    assert!(e.contains("does not export the function _start"), "{e}");
    let e = bind(write_module(
        "env.wasm",
        &module_importing("env", "host_call", true),
    ));
    assert!(e.contains("env::host_call (function)"), "{e}");
    let e = bind(write_module(
        "sock.wasm",
        &module_importing("wasi_snapshot_preview1", "sock_open", true),
    ));
    assert!(e.contains("sock_open"), "{e}");
    assert!(e.contains("refused by the engine"), "{e}");
    assert!(cached_files(s.binder.cache_dir()).is_empty());

    // A manifest that is not the one the module embeds.
    let mut manifest = add_manifest();
    manifest["description"] = json!("Not what the module says.");
    let mut request = add_request();
    request["manifest"] = manifest;
    let e = bind(request);
    assert!(e.contains("manifestMismatch"), "{e}");

    // Preopens: relative, unnormalized, /tmp, missing, duplicate, unknown keys.
    let real = dir.path().display().to_string();
    for (preopens, expected) in [
        (json!([{"path": "relative/dir"}]), "absolute and normalized"),
        (
            json!([{"path": format!("{real}/../x")}]),
            "absolute and normalized",
        ),
        (json!([{"path": "/tmp"}]), "private scratch directory"),
        (
            json!([{"path": format!("{real}/missing")}]),
            "not an existing directory",
        ),
        (
            json!([{"path": real}, {"path": real, "write": true}]),
            "listed twice",
        ),
        (json!([{"path": real, "readOnly": true}]), "unknown key"),
        (json!([{"path": real, "write": "yes"}]), "must be a boolean"),
        (json!({"path": real}), "must be an array"),
    ] {
        let mut request = add_request();
        request["preopens"] = preopens;
        let e = bind(request);
        assert!(e.contains(expected), "{expected}: {e}");
    }
    let mut request = add_request();
    request["preopen"] = json!([]);
    assert!(bind(request).contains("unknown key \"preopen\""));
}

#[test]
fn a_module_without_a_manifest_runs_under_a_derived_one() {
    // The hostile guest embeds no manifest.
    let s = setup();
    let binding = s
        .registry
        .bind(WASM_BINDER_ID, &hostile_request(json!([])))
        .unwrap();
    assert_eq!(binding["module"]["embeddedManifest"], false);
    let result = run(&s, &binding, json!({"attack": "tmp", "arg": "note"}));
    assert_eq!(result.output, Some(json!({"roundTrip": "note"})));
    let sha = binding["module"]["sha256"].as_str().unwrap();
    assert_eq!(
        result.receipt["metadata"]["manifest"],
        json!({"id": format!("wasm/{}", &sha[..12]), "origin": "derived"})
    );
}

#[test]
fn passes_binder_conformance() {
    let cache = host_dir();
    let binder = Arc::new(
        WasmBinder::new(cache.path().to_path_buf())
            .with_engine(engine())
            .with_limits(tight()),
    );
    assert_eq!(binder.id(), WASM_BINDER_ID);
    let report = run_binder_conformance(binder, &add_request(), &json!({"a": 1, "b": 2}));
    assert!(report.ok, "{}", report.to_value());
    let ids: Vec<&str> = report.checks.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "register",
            "bind",
            "tamper",
            "approval-gate",
            "execute",
            "cancel"
        ]
    );
}
