//! The document commands of `cap`: outputs, exit codes, hostile input, and every document
//! `cap` emits validated against the published schemas.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use capability_core::json;
use capability_core::published::{PublishedSchema, validate_published};
use serde_json::{Value, json};

use crate::common::{fixture, stdout_json, succeeded};

fn cap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cap"))
        .args(args)
        .output()
        .unwrap()
}

fn cap_stdin(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cap"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn assert_schema_valid(schema: PublishedSchema, doc: &Value) {
    let issues = validate_published(schema, doc);
    assert!(issues.is_empty(), "{schema:?}: {issues:?}\n{doc}");
}

/// A failure is one line on stderr, exit 1, and never a panic.
fn assert_clean_failure(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn validate_reports_issues_and_exits_one_when_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"specVersion":"0.1","id":"bad","version":"v1","name":" ","description":"x","effects":["shell"]}"#).unwrap();
    let out = cap(&["validate", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout_json(&out),
        json!({"valid": false, "issues": [
            "id must be a stable namespace/name identifier",
            "version must be valid semantic versioning",
            "name is required",
            "invalid effect: shell"
        ]})
    );
    let out = cap(&["validate", "--kind", "package", fixture().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout_json(&out), json!({"valid": true, "issues": []}));
}

#[test]
fn validate_knows_every_document_kind() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Value, bool); 6] = [
        ("lock", json!({"lockVersion": 1}), false),
        (
            "site",
            json!({"capabilityDiscoveryVersion": "0.1", "indexes": ["https://x.test/i.json"]}),
            true,
        ),
        ("binding", json!({"bindingVersion": "0.9"}), false),
        ("gap", json!({"gapVersion": "0.1"}), false),
        ("receipt", json!({"receiptId": "r"}), false),
        ("plan", json!({"planId": "p"}), false),
    ];
    for (kind, doc, valid) in cases {
        let path = dir.path().join(format!("{kind}.json"));
        std::fs::write(&path, doc.to_string()).unwrap();
        let out = cap(&["validate", "--kind", kind, path.to_str().unwrap()]);
        let report = stdout_json(&out);
        assert_eq!(report["valid"], valid, "{kind}: {report}");
        assert_eq!(out.status.code(), Some(if valid { 0 } else { 1 }), "{kind}");
    }
}

#[test]
fn hash_matches_the_reference_and_lines_mode_reports_per_line() {
    let out = cap(&["hash", r#"{"b":1,"a":{"d":[3,{"z":1,"y":2}],"c":null}}"#]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout_json(&out),
        json!({
            "canonical": "{\"a\":{\"c\":null,\"d\":[3,{\"y\":2,\"z\":1}]},\"b\":1}",
            "sha256": "76aa76d553c645f69dc7fdd1677b11e51e7ea839d2d9a7e021b41af7d7cf5a06"
        })
    );
    let out = cap_stdin(&["hash", "--lines"], b"{\"a\":1}\n{oops\n\"\\ud800\"\n");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines[0],
        "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862 {\"a\":1}"
    );
    assert!(
        lines[1].starts_with("error: invalid JSON at line 1, column 2"),
        "{}",
        lines[1]
    );
    assert_eq!(
        lines[2],
        "8c0c59dd0d275aadcd462a5fe12eb352cbdfeaf961eae4f85a4660521df7d2f5 \"\\ud800\""
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a line that is not JSON makes the run fail"
    );
}

#[test]
fn hostile_input_gives_one_line_errors_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // Malformed JSON.
    let p = write("malformed.json", b"{\"a\": [1, 2,, 3]}");
    let e = assert_clean_failure(&cap(&["validate", p.to_str().unwrap()]));
    assert!(e.contains("invalid JSON at line 1, column 13"), "{e}");
    // 100,000 levels of nesting.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let p = write("deep.json", deep.as_bytes());
    let e = assert_clean_failure(&cap(&["hash", "--file", p.to_str().unwrap()]));
    assert!(e.contains("nesting deeper than 128 levels"), "{e}");
    assert_clean_failure(&cap(&["validate", p.to_str().unwrap()]));
    // Invalid UTF-8.
    let p = write("latin1.json", b"{\"name\": \"caf\xe9\"}");
    let e = assert_clean_failure(&cap(&["validate", p.to_str().unwrap()]));
    assert!(e.contains("invalid UTF-8"), "{e}");
    // A 10 MB string where a document is expected: a wrong type, reported as an issue.
    let big = format!("\"{}\"", "x".repeat(10 * 1024 * 1024));
    let p = write("big.json", big.as_bytes());
    let out = cap(&["validate", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout_json(&out),
        json!({"valid": false, "issues": ["manifest must be an object"]})
    );
    // ... and unterminated, as hash input.
    let p = write("big-open.json", &big.as_bytes()[..big.len() - 1]);
    let e = assert_clean_failure(&cap(&["hash", "--file", p.to_str().unwrap()]));
    assert!(e.contains("unterminated string"), "{e}");
    // Wrong types for a package.
    let p = write(
        "package.json",
        br#"{"name": 5, "capability": {"specVersion": "0.1", "exports": []}}"#,
    );
    let e = assert_clean_failure(&cap(&["package", p.to_str().unwrap()]));
    assert!(e.contains("INVALID_PACKAGE_DECLARATION"), "{e}");
    // A missing file, and unknown or incomplete commands.
    assert_clean_failure(&cap(&["validate", "/nonexistent/x.json"]));
    assert_eq!(cap(&["no-such-command"]).status.code(), Some(1));
    assert_eq!(cap(&["validate"]).status.code(), Some(1));
}

#[test]
fn locked_commands_that_are_not_built_say_so() {
    let lock = json::parse(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/reference-data/stability-lock.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let commands = lock["cliCommands"].as_array().unwrap();
    assert_eq!(commands.len(), 39);
    for command in commands {
        let name = command.as_str().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_cap"))
            .arg(name)
            .arg("--help")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "cap {name} --help: the command exists"
        );
        let out = Command::new(env!("CARGO_BIN_EXE_cap"))
            .arg(name)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        if stderr.contains("not available yet") {
            assert_eq!(out.status.code(), Some(1), "{name}");
            assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
        }
    }
}

#[test]
fn emitted_documents_pass_the_published_schemas() {
    let dir = tempfile::tempdir().unwrap();
    // gap
    let gap_path = dir.path().join("gap.json");
    let out = cap(&[
        "gap",
        "render",
        "video",
        "--effect",
        "filesystem.read",
        "--out",
        gap_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let gap = stdout_json(&out);
    assert_eq!(gap["id"], "gap/render-video");
    assert_schema_valid(PublishedSchema::Gap, &gap);
    assert_eq!(
        json::parse(&std::fs::read(&gap_path).unwrap()).unwrap(),
        gap
    );
    // index
    let index_path = dir.path().join("index.json");
    let out = cap(&[
        "index",
        index_path.to_str().unwrap(),
        fixture().to_str().unwrap(),
    ]);
    succeeded(&out);
    assert_eq!(stdout_json(&out)["capabilities"], 1);
    let index = json::parse(&std::fs::read(&index_path).unwrap()).unwrap();
    assert_eq!(
        index["packages"][0]["repository"],
        "https://github.com/fixture/capabilities"
    );
    assert_schema_valid(PublishedSchema::Index, &index);
    assert!(capability_core::validate::validate_index(&index).is_empty());
    // registry-entry, inside an index document
    let out = cap(&["registry-entry", fixture().to_str().unwrap()]);
    let record = stdout_json(&out);
    assert_eq!(record["source"], "npm");
    let wrapped = json!({"indexVersion": "0.1", "generatedAt": "2026-01-01T00:00:00.000Z", "packages": [record]});
    assert_schema_valid(PublishedSchema::Index, &wrapped);
    // package inspection never imports and carries the inert manifest
    let out = cap(&["package", fixture().to_str().unwrap()]);
    let pkg = stdout_json(&out);
    assert_eq!(pkg["entries"][0]["id"], "fixture/add");
    assert_eq!(pkg["manifests"][0]["executable"], false);
    assert_schema_valid(PublishedSchema::Manifest, &pkg["entries"][0]["manifest"]);
    // conformance report and coverage
    let out = cap(&["conformance"]);
    assert_eq!(out.status.code(), Some(0));
    let report = stdout_json(&out);
    assert_eq!(report["ok"], true);
    assert_eq!(report["checks"].as_array().unwrap().len(), 7);
    let coverage = stdout_json(&cap(&["coverage"]));
    assert_eq!(coverage["entries"].as_array().unwrap().len(), 9);
}
