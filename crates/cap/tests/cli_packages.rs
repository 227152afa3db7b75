//! `cap run`, `cap plan` and `cap doctor`: package code runs only behind an isolation
//! boundary, and the reference's add fixture gives the reference's output under node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use capability_core::json;
use capability_core::plan::Plan;
use capability_core::published::{PublishedSchema, validate_published};
use common::{cap, fixture, stdout_json};
use serde_json::{Value, json};

#[test]
fn the_reference_add_fixture_runs_in_node_behind_the_sandbox() {
    let home = tempfile::tempdir().unwrap();
    let out = cap(
        home.path(),
        &[
            "run",
            fixture().to_str().unwrap(),
            "fixture/add",
            r#"{"a":20,"b":22}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let receipt = stdout_json(&out);
    assert_eq!(receipt["output"], json!({"result": 42}));
    assert_eq!(
        receipt["outputHash"],
        "0773698cf701d4082d365abcd08181974a52141a62ec0bf2eb2ab14996d02674"
    );
    assert_eq!(receipt["isolation"]["kind"], "process-sandbox");
    assert_eq!(receipt["isolation"]["runner"], "node");
    assert_eq!(receipt["isolation"]["network"], "none");
    assert_eq!(
        receipt["provenance"]["packageName"],
        "@fixture/capabilities"
    );
    assert!(validate_published(PublishedSchema::Receipt, &receipt).is_empty());
    let shown = stdout_json(&cap(
        home.path(),
        &["receipts", "show", receipt["receiptId"].as_str().unwrap()],
    ));
    assert_eq!(shown, receipt);
}

#[test]
fn plan_runs_the_plan_hook_behind_the_boundary_and_fingerprints() {
    let home = tempfile::tempdir().unwrap();
    let out = cap(
        home.path(),
        &[
            "plan",
            fixture().to_str().unwrap(),
            "fixture/add",
            r#"{"a":1,"b":2}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let plan = Plan::from_value(&stdout_json(&out)).unwrap();
    plan.verify_integrity().unwrap();
    assert_eq!(plan.summary, "Execute Fixture Add");
    let out = cap(
        home.path(),
        &[
            "plan",
            fixture().to_str().unwrap(),
            "fixture/add",
            r#"{"a":"x"}"#,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "INVALID_INPUT");
}

#[test]
fn package_code_never_runs_in_process_and_tampering_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let out = cap(
        home.path(),
        &[
            "run",
            fixture().to_str().unwrap(),
            "fixture/add",
            "{\"a\":1,\"b\":1}",
            "--executor",
            "in-process",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "PERMISSION_DENIED");
    let out = cap(
        home.path(),
        &[
            "run",
            fixture().to_str().unwrap(),
            "fixture/add",
            "{\"a\":1,\"b\":1}",
            "--executor",
            "wasm",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "EXECUTION_FAILED");

    // A copy of the package whose declared integrity does not match the module bytes.
    let dir = tempfile::tempdir().unwrap();
    let src = fixture().parent().unwrap().to_path_buf();
    std::fs::copy(src.join("add.mjs"), dir.path().join("add.mjs")).unwrap();
    let mut pkg = json::parse(&std::fs::read(src.join("package.json")).unwrap()).unwrap();
    pkg["capability"]["exports"]["fixture/add"]["integrity"] =
        json!(format!("sha256-{}", "a".repeat(64)));
    std::fs::write(dir.path().join("package.json"), pkg.to_string()).unwrap();
    let out = cap(
        home.path(),
        &[
            "run",
            dir.path().join("package.json").to_str().unwrap(),
            "fixture/add",
            "{\"a\":1,\"b\":1}",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = &stdout_json(&out)["error"];
    assert_eq!(err["code"], "INVALID_PACKAGE_DECLARATION");
    assert_eq!(err["message"], "Integrity check failed for fixture/add");
    let out = cap(
        home.path(),
        &["run", fixture().to_str().unwrap(), "fixture/nope", "{}"],
    );
    assert_eq!(stdout_json(&out)["error"]["code"], "NOT_FOUND");
}

#[test]
fn doctor_reports_boundaries_and_kernel_features() {
    let home = tempfile::tempdir().unwrap();
    let out = cap(home.path(), &["doctor"]);
    let report = stdout_json(&out);
    for key in [
        "namespaces",
        "landlock",
        "seccomp",
        "cgroupV2",
        "node",
        "python",
        "docker",
        "processSandbox",
        "boundaries",
    ] {
        assert!(report.get(key).is_some(), "doctor lacks {key}: {report}");
    }
    assert_eq!(
        out.status.code(),
        Some(if report["ok"] == true { 0 } else { 1 })
    );
    let boundaries: Vec<&str> = report["boundaries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!boundaries.contains(&"in-process"), "{boundaries:?}");
    if report["docker"]["ok"] == false && report["podman"]["ok"] == false {
        assert!(
            !boundaries.contains(&"oci"),
            "auto selection must not pretend an engine answers"
        );
    }
}

#[test]
fn acquire_find_local_trust_eval_and_mcp_tools_work_on_local_packages() {
    let home = tempfile::tempdir().unwrap();
    let f = fixture();
    let f = f.to_str().unwrap();
    let found = stdout_json(&cap(home.path(), &["find-local", "add numbers", f]));
    assert_eq!(found.as_array().unwrap().len(), 1);
    assert_eq!(found[0]["manifest"]["id"], "fixture/add");
    assert_eq!(found[0]["score"], 13);
    assert_eq!(
        found[0]["reasons"],
        json!(["id:add", "name:add", "description:numbers"])
    );

    let acquired = stdout_json(&cap(home.path(), &["acquire", f, "fixture/add"]));
    assert_eq!(acquired["manifest"]["executable"], false);
    assert_eq!(
        acquired["provenance"]["packageName"],
        "@fixture/capabilities"
    );

    let trust = stdout_json(&cap(home.path(), &["trust", f, "fixture/add"]));
    assert_eq!(trust["accepted"], true);
    assert!(trust["score"].as_u64().unwrap() > 0);
    let policy = home.path().join("policy.json");
    std::fs::write(&policy, r#"{"requireIntegrity": true}"#).unwrap();
    let out = cap(
        home.path(),
        &[
            "trust",
            f,
            "fixture/add",
            "--policy",
            policy.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "no integrity was declared");
    assert_eq!(stdout_json(&out)["accepted"], false);

    let cases = home.path().join("cases.json");
    std::fs::write(&cases, r#"[{"name":"three","input":{"a":1,"b":2},"expectedOutput":{"result":3}},{"name":"four","input":{"a":2,"b":2},"expectedOutputHash":"87fc178ae7b6ef0c57ff5afcbda862d2559a112d8da30d0b3379f7ca41fa0f12"}]"#).unwrap();
    let out = cap(
        home.path(),
        &["eval", f, "fixture/add", cases.to_str().unwrap()],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report = stdout_json(&out);
    assert_eq!(report["passRate"], 1);
    assert_eq!(
        report["results"][0]["outputHash"],
        "ea55a943aa0142b49d363a56161b20811f7866375f06228300c325dc5b9bce0f"
    );

    let tools = stdout_json(&cap(home.path(), &["mcp-tools", f]));
    assert_eq!(tools["tools"][0]["name"], "fixture__add");
    assert_eq!(tools["tools"][0]["_meta"]["capability/id"], "fixture/add");
    assert_eq!(tools["tools"][0]["annotations"]["readOnlyHint"], true);
}

/// A package whose export is the example WebAssembly `math/add` guest.
fn wasm_package(dir: &Path) -> PathBuf {
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../capability-wasm/tests/fixtures/guest-add.wasm");
    std::fs::copy(&wasm, dir.join("guest-add.wasm")).unwrap();
    let manifest = json::parse(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../capability-wasm/examples/guest-add/manifest.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let pkg = json!({"name": "@example/wasm-add", "version": "1.0.0",
                     "capability": {"specVersion": "0.1", "exports": {"math/add": {"module": "./guest-add.wasm", "manifest": manifest}}}});
    let path = dir.join("package.json");
    std::fs::write(&path, pkg.to_string()).unwrap();
    path
}

#[test]
fn a_wasm_module_runs_in_the_wasm_executor_only() {
    let home = tempfile::tempdir().unwrap();
    let pkg_dir = tempfile::tempdir().unwrap();
    let pkg = wasm_package(pkg_dir.path());
    let out = cap(
        home.path(),
        &[
            "run",
            pkg.to_str().unwrap(),
            "math/add",
            r#"{"a":20,"b":22}"#,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let receipt = stdout_json(&out);
    assert_eq!(receipt["output"], json!({"result": 42}));
    assert_eq!(receipt["isolation"]["kind"], "wasm");
    assert!(
        receipt["isolation"]["network"]
            .as_str()
            .unwrap()
            .starts_with("none")
    );
    let out = cap(
        home.path(),
        &[
            "run",
            pkg.to_str().unwrap(),
            "math/add",
            r#"{"a":1,"b":2}"#,
            "--executor",
            "process",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout_json(&out)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("runs only in the WASM executor")
    );
}

/// Runs `cap` with no `CAP_HOME`: the home comes from `--home` alone.
fn cap_with_home_flag(home: &Path, args: &[&str]) -> std::process::Output {
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["--home", home.to_str().unwrap()]);
    std::process::Command::new(env!("CARGO_BIN_EXE_cap"))
        .args(&full)
        .env_remove("CAP_HOME")
        .output()
        .unwrap()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn run_plan_and_eval_create_a_new_private_home() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let f = f.to_str().unwrap();
    let cases = dir.path().join("cases.json");
    std::fs::write(
        &cases,
        r#"[{"name":"three","input":{"a":1,"b":2},"expectedOutput":{"result":3}}]"#,
    )
    .unwrap();
    let commands: [&[&str]; 3] = [
        &["plan", f, "fixture/add", r#"{"a":1,"b":2}"#],
        &["run", f, "fixture/add", r#"{"a":1,"b":2}"#],
        &["eval", f, "fixture/add", cases.to_str().unwrap()],
    ];
    for (i, args) in commands.iter().enumerate() {
        // A home that does not exist yet, two levels deep.
        let home = dir.path().join(format!("new-{i}")).join("home");
        let out = cap_with_home_flag(&home, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        #[cfg(unix)]
        {
            assert_eq!(mode(&home), 0o700, "{args:?}: the home is private");
            assert_eq!(mode(&home.join("capability.db")), 0o600, "{args:?}");
            assert_eq!(mode(&home.join("host.key")), 0o600, "{args:?}");
        }
    }
}

/// A package whose one capability declares `filesystem.read`.
fn reading_package(dir: &Path) -> PathBuf {
    let manifest = json!({
        "specVersion": "0.1", "id": "fixture/peek", "version": "1.0.0", "name": "Peek",
        "description": "Declares a read effect and reads nothing.",
        "input": {"type": "object"}, "output": {"type": "object"},
        "effects": ["filesystem.read"],
    });
    std::fs::write(
        dir.join("peek.mjs"),
        format!(
            "export const manifest = {manifest};\nexport default {{ manifest, async execute() {{ return {{ok: true}}; }} }};\n"
        ),
    )
    .unwrap();
    let package = json!({
        "name": "@fixture/peek", "version": "1.0.0", "type": "module",
        "capability": {"specVersion": "0.1", "exports": {"fixture/peek": {"module": "./peek.mjs", "manifest": manifest}}},
    });
    let path = dir.join("package.json");
    std::fs::write(&path, package.to_string()).unwrap();
    path
}

#[test]
fn run_honours_the_effect_preset() {
    let dir = tempfile::tempdir().unwrap();
    let package = reading_package(dir.path());
    let p = package.to_str().unwrap();
    let home = dir.path().join("home");
    let denied = cap(
        &home,
        &["run", p, "fixture/peek", "{}", "--preset", "deny-all"],
    );
    assert_eq!(denied.status.code(), Some(1));
    let err = stdout_json(&denied);
    assert_eq!(err["error"]["code"], "PERMISSION_DENIED", "{err}");
    let allowed = cap(
        &home,
        &["run", p, "fixture/peek", "{}", "--preset", "read-only"],
    );
    assert_eq!(
        allowed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&allowed.stdout)
    );
    assert_eq!(stdout_json(&allowed)["output"], json!({"ok": true}));
}

#[test]
fn a_dangling_symlink_home_is_named_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::os::unix::fs::symlink(dir.path().join("gone"), &home).unwrap();
    let out = cap(&home, &["receipts", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert!(!stderr.contains("os error 17"), "{stderr}");
}
