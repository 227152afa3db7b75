//! `cap openapi` end to end: the import, `add` / `list` / `remove`, governed `cap exec` of the
//! operations against Prism (the real OpenAPI mock server, from tools/openapi) serving the
//! 3.0 and 3.1 petstores, and against a small loopback server for credentials from the
//! environment (never in receipts, audit events or errors) and a Cedar policy on method and
//! path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Running, cap, stdout_json};
use capability_test_support::http::free_port;
use capability_test_support::tls;
use serde_json::{Value, json};

/// Set (by `.ci/run`) where Prism is installed: a missing Prism then fails the tests instead
/// of skipping them.
const REQUIRE_ENV: &str = "CAPABILITY_TEST_REQUIRE_PRISM";
const KEY: &str = "env-k3y-do-not-leak";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn petstore(version: &str) -> String {
    repo()
        .join(format!("testdata/openapi/petstore-{version}.yaml"))
        .display()
        .to_string()
}

/// Starts Prism on loopback for a document; `None` (after saying why) when it is not
/// installed, or a panic when `CAPABILITY_TEST_REQUIRE_PRISM` is set.
fn prism(document: &str) -> Option<(Running, u16)> {
    let bin = repo().join("tools/openapi/node_modules/.bin/prism");
    if !bin.exists() {
        assert!(
            std::env::var_os(REQUIRE_ENV).is_none(),
            "{REQUIRE_ENV} is set but Prism is not installed at {}",
            bin.display()
        );
        eprintln!("skipping: Prism is not installed (cd tools/openapi && npm ci)");
        return None;
    }
    let port = free_port();
    let child = Command::new(bin)
        .args(["mock", "-h", "127.0.0.1", "-p", &port.to_string(), document])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = Running(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "Prism did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some((guard, port))
}

fn exec(home: &Path, args: &[&str]) -> Value {
    let mut all = vec!["exec"];
    all.extend_from_slice(args);
    stdout_json(&cap(home, &all))
}

#[test]
fn the_import_prints_inspections_and_refuses_swagger() {
    let home = tempfile::tempdir().unwrap();
    let out = cap(home.path(), &["openapi", &petstore("3.1"), "My Pets"]);
    let v = stdout_json(&out);
    let ids: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "my-pets/listpets",
            "my-pets/createpet",
            "my-pets/showpetbyid",
            "my-pets/deletepet"
        ]
    );
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|m| m["executable"] == json!(false))
    );
    let swagger = home.path().join("swagger.json");
    std::fs::write(
        &swagger,
        r#"{"swagger": "2.0", "info": {"title": "Old", "version": "1"}, "paths": {}}"#,
    )
    .unwrap();
    let out = cap(home.path(), &["openapi", swagger.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("OpenAPI 3.1 document required") && err.contains("Swagger 2.0"),
        "{err}"
    );
}

#[test]
fn prism_serves_both_petstores_and_governed_calls_succeed() {
    for version in ["3.0", "3.1"] {
        let Some((_prism, port)) = prism(&petstore(version)) else {
            return;
        };
        let home = tempfile::tempdir().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let out = cap(
            home.path(),
            &[
                "openapi",
                "add",
                &petstore(version),
                "--namespace",
                "pets",
                "--base-url",
                &base,
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed = stdout_json(&cap(home.path(), &["openapi", "list"]));
        assert_eq!(listed[0]["namespace"], "pets");
        assert_eq!(listed[0]["operations"], 4);
        let found = stdout_json(&cap(home.path(), &["find", "pet"]));
        assert!(
            found
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["id"] == "pets/showpetbyid"),
            "{found}"
        );

        // GET with a path and a query parameter.
        let v = exec(
            home.path(),
            &[
                "pets/showpetbyid",
                r#"{"path": {"petId": 7}, "query": {"verbose": true}}"#,
                "--approve",
            ],
        );
        let receipt = &v["receipt"];
        assert_eq!(receipt["status"], "succeeded", "{version}: {v}");
        assert_eq!(
            receipt["output"],
            json!({"id": 7, "name": "Rex", "tag": "dog"})
        );
        assert_eq!(
            receipt["isolation"]["request"]["url"],
            format!("{base}/pets/7?verbose=true")
        );
        assert_eq!(receipt["isolation"]["response"]["status"], 200);

        // POST with a JSON body (Prism validates it against the document).
        let v = exec(
            home.path(),
            &[
                "pets/createpet",
                r#"{"body": {"name": "Kit", "tag": "cat"}}"#,
                "--approve",
            ],
        );
        assert_eq!(v["receipt"]["status"], "succeeded", "{version}: {v}");
        assert_eq!(v["receipt"]["output"], json!({"id": 3, "name": "Kit"}));
        assert_eq!(v["receipt"]["isolation"]["response"]["status"], 201);

        // A request that violates the document is refused before it is sent: no receipt.
        let v = exec(
            home.path(),
            &[
                "pets/showpetbyid",
                r#"{"path": {"petId": "abc"}}"#,
                "--approve",
            ],
        );
        assert_eq!(v["error"]["code"], "INVALID_INPUT", "{v}");
        let v = exec(
            home.path(),
            &[
                "pets/createpet",
                r#"{"body": {"tag": "no name"}}"#,
                "--approve",
            ],
        );
        assert_eq!(v["error"]["code"], "INVALID_INPUT", "{v}");
        let receipts = String::from_utf8(cap(home.path(), &["receipts", "export"]).stdout).unwrap();
        assert_eq!(
            receipts.lines().count(),
            2,
            "{version}: only the two calls that were sent"
        );

        let out = cap(home.path(), &["openapi", "remove", "pets"]);
        assert!(out.status.success());
        let v = exec(
            home.path(),
            &["pets/showpetbyid", r#"{"path": {"petId": 7}}"#, "--approve"],
        );
        assert_eq!(v["error"]["code"], "NOT_FOUND", "{v}");
    }
}

/// A one-route HTTP/1.1 server: answers every request with 200 and a JSON body that says
/// whether the key arrived (never the key itself), and records the request lines.
fn key_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push(line.trim_end().to_string());
            }
            let length: usize = head
                .iter()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let authorized = head
                .iter()
                .any(|l| l.to_ascii_lowercase() == format!("authorization: bearer {KEY}"));
            let _ = tx.send(head[0].clone());
            let (status, text) = if authorized {
                ("200 OK", r#"{"id": 1, "name": "ok"}"#.to_string())
            } else {
                (
                    "401 Unauthorized",
                    r#"{"error": "missing bearer"}"#.to_string(),
                )
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (port, rx)
}

fn secured_document(port: u16) -> Value {
    let pet = json!({"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}});
    json!({"openapi": "3.1.0", "info": {"title": "Secured", "version": "2.0.0"},
        "servers": [{"url": format!("http://127.0.0.1:{port}")}],
        "security": [{"bearer": []}],
        "paths": {"/pets/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
            "get": {"operationId": "getPet", "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": pet}}}}},
            "delete": {"operationId": "deletePet", "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": pet}}}}}}},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}})
}

#[test]
fn credentials_from_the_environment_never_reach_receipts_audit_or_errors_and_cedar_denies_delete() {
    let (port, requests) = key_server();
    let home = tempfile::tempdir().unwrap();
    let doc = home.path().join("secured.json");
    std::fs::write(&doc, secured_document(port).to_string()).unwrap();
    let out = cap(
        home.path(),
        &[
            "openapi",
            "add",
            doc.to_str().unwrap(),
            "--namespace",
            "sec",
            "--auth",
            "bearer=env:SEC_TOKEN",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let added = stdout_json(&out);
    assert_eq!(
        added["capabilities"][0]["effects"],
        json!(["network.connect", "secrets.read"])
    );

    let with_key = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cap"))
            .env("CAP_HOME", home.path())
            .env("SEC_TOKEN", KEY)
            .args(args)
            .output()
            .unwrap()
    };
    let out = with_key(&["exec", "sec/getpet", r#"{"path": {"id": 1}}"#, "--approve"]);
    let v = stdout_json(&out);
    assert_eq!(v["receipt"]["status"], "succeeded", "{v}");
    assert_eq!(v["receipt"]["output"], json!({"id": 1, "name": "ok"}));
    assert_eq!(requests.recv().unwrap(), "GET /pets/1 HTTP/1.1");

    // Without the variable: a clear error naming the reference, not the value.
    let v = exec(
        home.path(),
        &["sec/getpet", r#"{"path": {"id": 1}}"#, "--approve"],
    );
    assert!(v["error"].to_string().contains("env:SEC_TOKEN"), "{v}");

    // A Cedar policy on method and path denies the DELETE before anything is sent.
    let policy = home.path().join("no-delete.cedar");
    std::fs::write(
        &policy,
        r#"permit(principal, action, resource);
@reason("pets are never deleted")
forbid(principal, action, resource) when {
  resource.method == "DELETE" && resource.path like "/pets/*" && resource.operationId == "deletePet"
  && resource.server like "http://127.0.0.1:*"
};"#,
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let out = with_key(&[
        "exec",
        "sec/deletepet",
        r#"{"path": {"id": 1}}"#,
        "--approve",
        "--policy",
        p,
    ]);
    let v = stdout_json(&out);
    assert_eq!(v["error"]["code"], "PERMISSION_DENIED", "{v}");
    let out = with_key(&[
        "exec",
        "sec/getpet",
        r#"{"path": {"id": 2}}"#,
        "--approve",
        "--policy",
        p,
    ]);
    assert_eq!(stdout_json(&out)["receipt"]["status"], "succeeded");
    assert_eq!(requests.recv().unwrap(), "GET /pets/2 HTTP/1.1");
    assert!(requests.try_recv().is_err(), "the DELETE was never sent");

    // A failing call (the server refuses): the error does not carry the key either.
    let out = Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home.path())
        .env("SEC_TOKEN", "wrong-but-still-secret")
        .args(["exec", "sec/getpet", r#"{"path": {"id": 3}}"#, "--approve"])
        .output()
        .unwrap();
    let v = stdout_json(&out);
    assert!(v["error"].to_string().contains("401"), "{v}");

    let receipts = String::from_utf8(cap(home.path(), &["receipts", "export"]).stdout).unwrap();
    let audit = String::from_utf8(cap(home.path(), &["audit", "export"]).stdout).unwrap();
    let stored = std::fs::read_to_string(home.path().join("openapi/sec.json")).unwrap();
    assert!(receipts.lines().count() >= 3, "{receipts}");
    assert!(audit.contains("sec/deletepet"), "the denial is audited");
    for (what, text) in [
        ("receipts", &receipts),
        ("audit", &audit),
        ("stored source", &stored),
    ] {
        assert!(
            !text.contains(KEY) && !text.contains("wrong-but-still-secret"),
            "{what} leaks the key: {text}"
        );
    }
    assert!(stored.contains("env:SEC_TOKEN"));
    assert!(stdout_json(&cap(home.path(), &["audit", "verify"]))["ok"] == json!(true));
}

/// A governed call to an `https://` server: Prism behind a TLS terminator whose certificate a
/// test CA issued, trusted through `SSL_CERT_FILE`; without it the call fails on the
/// certificate and nothing is sent.
#[test]
fn governed_calls_reach_an_https_server() {
    let Some((_prism, port)) = prism(&petstore("3.1")) else {
        return;
    };
    let ca = tls::TestCa::new("openapi test CA");
    let front = tls::front(
        ca.server(&["localhost", "127.0.0.1"]),
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    );
    let home = tempfile::tempdir().unwrap();
    let ca_file = home.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let base = format!("https://localhost:{}", front.port());
    let run = |trust: bool, args: &[&str]| {
        common::cap_with_roots(home.path(), trust.then_some(ca_file.as_path()), args)
    };
    let add = [
        "openapi",
        "add",
        &petstore("3.1"),
        "--namespace",
        "pets",
        "--base-url",
        &base,
    ];
    let out = run(false, &add);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let call = [
        "exec",
        "pets/showpetbyid",
        r#"{"path": {"petId": 7}}"#,
        "--approve",
    ];
    let v = stdout_json(&run(true, &call));
    let receipt = &v["receipt"];
    assert_eq!(receipt["status"], "succeeded", "{v}");
    assert_eq!(
        receipt["output"],
        json!({"id": 7, "name": "Rex", "tag": "dog"})
    );
    assert_eq!(
        receipt["isolation"]["request"]["url"],
        format!("{base}/pets/7")
    );
    let v = stdout_json(&run(false, &call));
    let shown = v.to_string();
    assert!(
        shown.contains(&format!(
            "certificate not trusted: localhost:{}",
            front.port()
        )),
        "{shown}"
    );
}
