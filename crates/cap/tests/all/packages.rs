//! `cap run`, `cap plan` and `cap doctor`: package code runs only behind an isolation
//! boundary, and the reference's add fixture gives the reference's output under node.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use crate::common::{cap, fixture, stdout_json, succeeded};
use capability_core::json;
use capability_core::plan::Plan;
use capability_core::published::{PublishedSchema, validate_published};
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
    succeeded(&out);
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
    succeeded(&out);
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
    succeeded(&out);
    let report = stdout_json(&out);
    assert_eq!(report["passRate"], 1);
    assert_eq!(
        report["results"][0]["outputHash"],
        "ea55a943aa0142b49d363a56161b20811f7866375f06228300c325dc5b9bce0f"
    );
    // The trust policy applies to evals as to every run: a package it refuses runs no case.
    let strict = home.path().join("strict-trust.json");
    std::fs::write(&strict, r#"{"minScore": 100, "requireIntegrity": true}"#).unwrap();
    let out = cap(
        home.path(),
        &[
            "eval",
            f,
            "fixture/add",
            cases.to_str().unwrap(),
            "--trust-policy",
            strict.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let refused = stdout_json(&out);
    assert_eq!(refused["error"]["code"], "PERMISSION_DENIED", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("trust policy"),
        "{refused}"
    );
    assert!(refused.get("results").is_none(), "no case ran: {refused}");
    // One the package satisfies lets the cases run.
    let lenient = home.path().join("lenient-trust.json");
    std::fs::write(&lenient, r#"{"minScore": 0}"#).unwrap();
    let out = cap(
        home.path(),
        &[
            "eval",
            f,
            "fixture/add",
            cases.to_str().unwrap(),
            "--trust-policy",
            lenient.to_str().unwrap(),
        ],
    );
    succeeded(&out);
    assert_eq!(stdout_json(&out)["passed"], 2);

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
    succeeded(&out);
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
    succeeded(&allowed);
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

/// A package whose `fixture/deep` returns a value nested `input.n` levels deep (and whose
/// input may nest as it likes).
fn deep_package(dir: &std::path::Path) -> std::path::PathBuf {
    let manifest = json!({
        "specVersion": "0.1", "id": "fixture/deep", "version": "1.0.0", "name": "Deep",
        "description": "Returns deeply nested output.", "effects": [],
    });
    std::fs::write(
        dir.join("deep.mjs"),
        format!(
            "export const manifest = {manifest};\nexport default {{ manifest, async execute(input) {{ let v = 1; for (let i = 0; i < (input.n ?? 0); i++) v = {{ d: v }}; return v; }} }};\n"
        ),
    )
    .unwrap();
    let package = json!({
        "name": "@fixture/deep", "version": "1.0.0", "type": "module",
        "capability": {"specVersion": "0.1", "exports": {"fixture/deep": {"module": "./deep.mjs", "manifest": manifest}}},
    });
    let path = dir.join("package.json");
    std::fs::write(&path, package.to_string()).unwrap();
    path
}

/// `{"n": 0, "x": {"d": {"d": ...}}}` with the innermost object `levels` deep in the input.
fn deep_input(levels: usize) -> String {
    format!(
        "{{\"n\":0,\"x\":{}1{}}}",
        "{\"d\":".repeat(levels - 1),
        "}".repeat(levels - 1)
    )
}

fn depth(v: &Value) -> usize {
    capability_core::json::depth(v)
}

const DEEP_APPROVAL: &str = r#"
permit(principal, action, resource);
@id("deep-needs-approval")
@reason("deep inputs need a human")
@decision("approval_required")
forbid(principal, action == Action::"tool_call", resource == Capability::"fixture/deep")
when { context.input has x };
"#;

#[test]
fn what_is_accepted_nested_is_read_back_and_one_bad_record_never_stops_a_list() {
    let dir = tempfile::tempdir().unwrap();
    let package = deep_package(dir.path());
    let p = package.to_str().unwrap();
    let home = dir.path().join("home");
    let limit = capability_core::json::MAX_DEPTH;
    assert_eq!(limit, 128);
    // A guest output nested as deep as the limit is stored and read back.
    let out = cap(
        &home,
        &["run", p, "fixture/deep", &format!("{{\"n\":{limit}}}")],
    );
    succeeded(&out);
    let deep_id = stdout_json(&out)["receiptId"].as_str().unwrap().to_string();
    // Deeper than the limit: the run fails (with a receipt) instead of storing it.
    for n in [limit + 1, 200] {
        let out = cap(
            &home,
            &["run", p, "fixture/deep", &format!("{{\"n\":{n}}}")],
        );
        assert_eq!(out.status.code(), Some(1), "{n}");
        let error = &stdout_json(&out)["error"];
        assert!(error["code"].is_string());
        // The one message of the limit, for an output as for an input.
        assert!(
            error
                .to_string()
                .contains("Output nests deeper than the 128 levels allowed"),
            "{n}: {error}"
        );
    }
    // A caller input as deep as the limit is accepted; one deeper is refused up front.
    let policy = dir.path().join("deep.cedar");
    std::fs::write(&policy, DEEP_APPROVAL).unwrap();
    let pol = policy.to_str().unwrap();
    let out = cap(
        &home,
        &[
            "run",
            p,
            "fixture/deep",
            &deep_input(limit),
            "--policy",
            pol,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let approval = stdout_json(&out)["approval"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for levels in [limit + 1, 200] {
        let out = cap(
            &home,
            &[
                "run",
                p,
                "fixture/deep",
                &deep_input(levels),
                "--policy",
                pol,
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{levels}");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("Input nests deeper than the 128 levels allowed"),
            "one limit, one message: {text}"
        );
    }
    // Everything accepted reads back: show, list, export, approvals list and show, and a
    // later approval request.
    let shown = stdout_json(&cap(&home, &["receipts", "show", &deep_id]));
    assert_eq!(depth(&shown["output"]), limit);
    let listed = stdout_json(&cap(&home, &["receipts", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    let out = cap(&home, &["receipts", "export"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    let approvals = stdout_json(&cap(&home, &["approvals", "list"]));
    assert_eq!(approvals[0]["approvalId"], approval.as_str(), "{approvals}");
    let out = cap(&home, &["approvals", "show", &approval]);
    succeeded(&out);
    let out = cap(
        &home,
        &["run", p, "fixture/deep", &deep_input(3), "--policy", pol],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The audit log verifies and exports.
    assert_eq!(cap(&home, &["audit", "verify"]).status.code(), Some(0));
    assert_eq!(cap(&home, &["audit", "export"]).status.code(), Some(0));

    // One corrupt record of each kind: the others are still listed, with a warning.
    let db = rusqlite::Connection::open(home.join("capability.db")).unwrap();
    db.execute(
        "UPDATE receipts SET body = '{\"receiptId\": [' WHERE id = ?1",
        [&deep_id],
    )
    .unwrap();
    db.execute(
        "UPDATE approval_requests SET record = 'not json' WHERE approval_id = ?1",
        [&approval],
    )
    .unwrap();
    drop(db);
    let out = cap(&home, &["receipts", "list"]);
    succeeded(&out);
    assert_eq!(stdout_json(&out).as_array().unwrap().len(), 2);
    let warning = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        warning.contains("warning") && warning.contains(&deep_id),
        "{warning}"
    );
    let out = cap(&home, &["receipts", "export"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    let out = cap(&home, &["approvals", "list"]);
    succeeded(&out);
    let listed = stdout_json(&out);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&approval));
    // ... and new approval requests still work.
    let out = cap(
        &home,
        &["run", p, "fixture/deep", &deep_input(4), "--policy", pol],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
