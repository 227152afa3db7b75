//! `cap mcp-serve` driven by real MCP clients — the Python `mcp` 2.3.0 client (stdio and
//! streamable HTTP, both the 2026-07-28 and the `initialize` handshakes), the MCP Inspector
//! CLI and the official conformance suite — and by raw HTTP for what clients never send:
//! bad tokens, foreign Host and Origin headers, oversized bodies. Afterwards the receipts and
//! audit events are read back with `cap`.
//!
//! The clients are installed into `tools/mcp` by `.ci/run`. Without them these tests say so
//! and pass, unless `CAPABILITY_TEST_REQUIRE_MCP=1` (set by CI), where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Running, cap, stdout_json, succeeded};
use capability_test_support::http::{announced_url, authority, free_port};
use capability_test_support::mcp::{
    clients_present, conformance, everything, inspect, names, post, py_client, python, tools,
};
use capability_test_support::process::processes_with;
use capability_test_support::tls;
use serde_json::{Value, json};

fn stdio_args<'a>(home: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--stdio",
        "--",
        env!("CARGO_BIN_EXE_cap"),
        "mcp-serve",
        "--home",
        home,
    ];
    args.extend_from_slice(extra);
    args
}

/// A `cap mcp-serve --listen 127.0.0.1:0` process, killed on drop.
struct HttpServer {
    child: Running,
    url: String,
    addr: String,
}

impl HttpServer {
    fn start(home: &Path, extra: &[&str]) -> HttpServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cap"))
            .args(["mcp-serve", "--listen", "127.0.0.1:0", "--home"])
            .arg(home)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let url = announced_url(&mut child);
        let addr = authority(&url);
        HttpServer {
            child: Running(child),
            url,
            addr,
        }
    }

    /// SIGTERM, then the exit status.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "mcp-serve did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn token(home: &Path, args: &[&str]) -> (String, String) {
    let mut all = vec!["tokens", "add"];
    all.extend_from_slice(args);
    let doc = stdout_json(&cap(home, &all));
    (
        doc["token"].as_str().unwrap().to_string(),
        doc["id"].as_str().unwrap().to_string(),
    )
}

fn receipt_of(home: &Path, result: &Value) -> Value {
    let id = result["_meta"]["receiptId"]
        .as_str()
        .or_else(|| result["structuredContent"]["receipt"]["receiptId"].as_str())
        .unwrap_or_else(|| panic!("no receipt in {result}"));
    stdout_json(&cap(home, &["receipts", "show", id]))
}

/// Everything a client does in one session: list, search, inspect, execute, a projected
/// capability, over stdio and HTTP with both handshakes; then the receipts and audit.
#[test]
fn python_client_lists_searches_inspects_and_executes_over_stdio_and_http() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let h = home.to_str().unwrap();
    let ops = json!([
        {"op": "list"},
        {"op": "call", "name": "capability_search", "arguments": {"query": "slug", "limit": 3}},
        {"op": "call", "name": "capability_inspect", "arguments": {"id": "text/slugify"}},
        {"op": "call", "name": "capability_execute",
         "arguments": {"id": "text/slugify", "input": {"text": "Hello MCP World"}}},
        {"op": "call", "name": "text__slugify", "arguments": {"text": "Projected Call"}},
        {"op": "call", "name": "capability_need", "arguments": {"query": "x"}},
    ]);
    let expected: Vec<String> = common::vectors("mcp-projection.json")["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "bootstrapTools")
        .unwrap()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(expected.len(), 13);

    let (bearer, _) = token(&home, &["--agent", "http-bot", "--tenant", "acme"]);
    let server = HttpServer::start(&home, &["--expose", "text/slugify"]);
    let stdio = stdio_args(h, &["--expose", "text/*", "--agent", "stdio-bot"]);
    let mut auto_stdio = vec!["--mode", "auto"];
    auto_stdio.extend_from_slice(&stdio);
    let mut legacy_stdio = vec!["--mode", "legacy"];
    legacy_stdio.extend_from_slice(&stdio);
    let runs = [
        ("stdio", "2026-07-28", auto_stdio),
        ("stdio", "2025-11-25", legacy_stdio),
        (
            "http",
            "2026-07-28",
            vec!["--mode", "auto", "--http", &server.url, "--token", &bearer],
        ),
        (
            "http",
            "2025-11-25",
            vec![
                "--mode",
                "legacy",
                "--http",
                &server.url,
                "--token",
                &bearer,
            ],
        ),
    ];
    for (transport, version, args) in runs {
        let doc = py_client(&args, &ops);
        let what = format!("{transport} {version}");
        assert_eq!(doc["protocolVersion"], version, "{what}");
        assert_eq!(doc["serverInfo"]["name"], "capability-network", "{what}");
        assert_eq!(doc["listChanged"], true, "{what}");
        let r = doc["results"].as_array().unwrap();
        let listed = names(&r[0]);
        assert_eq!(listed[..13], expected[..], "{what}");
        assert!(listed.contains(&"text__slugify".to_string()), "{what}");
        assert_eq!(listed.len(), if transport == "stdio" { 15 } else { 14 });

        let hits = r[1]["structuredContent"]["result"].as_array().unwrap();
        assert_eq!(hits[0]["id"], "text/slugify", "{what}");
        assert!(hits.len() <= 3);
        let inspected = &r[2]["structuredContent"];
        assert_eq!(inspected["capability"]["manifest"]["id"], "text/slugify");

        let executed = &r[3];
        assert_eq!(executed["isError"], false, "{what}: {executed}");
        let receipt = receipt_of(&home, executed);
        assert_eq!(receipt["output"], json!({"slug": "hello-mcp-world"}));
        assert_eq!(receipt["status"], "succeeded");

        let projected = &r[4];
        assert_eq!(
            projected["structuredContent"],
            json!({"slug": "projected-call"})
        );
        let receipt = receipt_of(&home, projected);
        assert_eq!(receipt["capability"]["id"], "text/slugify");

        let need = &r[5];
        assert_eq!(need["isError"], true);
        assert!(
            need["structuredContent"]["error"]
                .as_str()
                .unwrap()
                .contains("not built yet"),
            "{need}"
        );
    }
    drop(server);

    // Every call left an audit event with its principal and action; the chain verifies.
    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "100"]));
    let events = events.as_array().unwrap();
    let projected: Vec<&Value> = events
        .iter()
        .filter(|e| e["action_type"] == "mcp_tool_call")
        .collect();
    let agents: std::collections::BTreeSet<&str> = projected
        .iter()
        .map(|e| e["agent_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        agents,
        ["http-bot", "stdio-bot"].into_iter().collect(),
        "{projected:?}"
    );
    assert!(
        projected
            .iter()
            .all(|e| e["labels"]["surface"] == "mcp" && e["capability_name"] == "text/slugify")
    );
    assert!(
        events
            .iter()
            .any(|e| e["action_type"] == "mcp_tool_call" && e["tenant_id"] == "acme")
    );
    let verify = cap(&home, &["audit", "verify"]);
    assert_eq!(verify.status.code(), Some(0));
}

const POLICY: &str = r#"
permit(principal, action, resource);

@id("no-sha-for-mcp")
@reason("Agents may not hash over MCP")
forbid(principal, action == Action::"mcp_tool_call", resource == Capability::"data/sha256");

@id("secret-slugs")
@reason("Slugs of secret text need a human")
@decision("approval_required")
forbid(principal, action == Action::"mcp_tool_call", resource == Capability::"text/slugify")
when { context.input has text && context.input.text like "*secret*" };
"#;

/// A deny policy gives a tool error and an audit record; an approval-required call gives
/// the approval shape, `approved: true` from the agent does not get past it, and the token
/// a human grants completes only the same call, once.
#[test]
fn denials_and_approvals_stay_with_the_host() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let h = home.to_str().unwrap();
    let policy = dir.path().join("policy.cedar");
    std::fs::write(&policy, POLICY).unwrap();
    let serve = stdio_args(
        h,
        &[
            "--expose",
            "*",
            "--policy",
            policy.to_str().unwrap(),
            "--agent",
            "bot",
        ],
    );
    let secret = json!({"text": "top secret plan"});
    let doc = py_client(
        &serve,
        &json!([
            {"op": "call", "name": "data__sha256", "arguments": {"value": 1}},
            {"op": "call", "name": "text__slugify", "arguments": secret},
            {"op": "call", "name": "text__slugify",
             "arguments": {"text": "top secret plan", "approved": true}},
        ]),
    );
    let r = doc["results"].as_array().unwrap();
    assert_eq!(r[0]["isError"], true);
    assert_eq!(r[0]["_meta"]["errorCode"], "PERMISSION_DENIED");
    assert_eq!(r[0]["content"][0]["text"], "Agents may not hash over MCP");
    for pending in &r[1..] {
        assert_eq!(pending["isError"], true, "{pending}");
        let approval = &pending["structuredContent"]["approval"];
        assert_eq!(approval["reason"], "Slugs of secret text need a human");
        assert!(approval["expiresAt"].as_str().unwrap().ends_with('Z'));
        assert_eq!(approval["planFingerprint"].as_str().unwrap().len(), 64);
        assert!(
            pending["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("cap approvals approve")
        );
    }
    let id = r[1]["structuredContent"]["approval"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Nothing ran: the approved=true retry made another pending approval, no receipt.
    assert_ne!(r[2]["structuredContent"]["approval"]["id"], json!(id));
    let out = cap(&home, &["approvals", "approve", &id, "--approver", "alice"]);
    assert_eq!(out.status.code(), Some(0));
    let approval_token = stdout_json(&out)["token"].as_str().unwrap().to_string();

    let doc = py_client(
        &serve,
        &json!([
            // Another input with the token: refused.
            {"op": "call", "name": "text__slugify",
             "arguments": {"text": "top secret plans", "approvalToken": approval_token}},
            // Another capability with the token: refused.
            {"op": "call", "name": "text__normalize",
             "arguments": {"text": "top secret plan"}, "meta": {"approvalToken": approval_token}},
            // The same call: runs.
            {"op": "call", "name": "text__slugify",
             "arguments": {"text": "top secret plan", "approvalToken": approval_token}},
            // Once.
            {"op": "call", "name": "text__slugify",
             "arguments": {"text": "top secret plan", "approvalToken": approval_token}},
        ]),
    );
    let r = doc["results"].as_array().unwrap();
    assert_eq!(r[0]["isError"], true, "{}", r[0]);
    assert!(
        r[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("input differs")
    );
    assert_eq!(r[1]["isError"], true, "{}", r[1]);
    assert_eq!(r[2]["isError"], false, "{}", r[2]);
    assert_eq!(
        r[2]["structuredContent"],
        json!({"slug": "top-secret-plan"})
    );
    let receipt = receipt_of(&home, &r[2]);
    assert_eq!(receipt["governance"]["approval"]["approvalId"], json!(id));
    assert_eq!(r[3]["isError"], true, "{}", r[3]);

    // The denial is in the audit log.
    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "100"]));
    assert!(events.as_array().unwrap().iter().any(|e| {
        e["capability_name"] == "data/sha256"
            && e["outcome"] == "denied_before_execution"
            && e["policy_ids"] == json!(["no-sha-for-mcp"])
    }));
}

/// `cap tokens` adds, revokes and lists tokens (never their secrets), and `cap mcp-serve`
/// takes them: a revoked one gets 401. Its flags set the HTTP limits: `--max-body-bytes`
/// (413 beyond it) and `--max-sessions` (503 for a session beyond it). The gate itself is
/// tested in capability-mcp.
#[test]
fn mcp_serve_takes_the_tokens_and_limits_cap_sets() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (good, _) = token(&home, &["--agent", "bot"]);
    let (revoked, revoked_id) = token(&home, &["--agent", "bot"]);
    let (_expiring, _) = token(&home, &["--agent", "bot", "--expires", "1s"]);
    let (_approver, _) = token(&home, &["--agent", "alice", "--role", "approver"]);
    assert_eq!(
        stdout_json(&cap(&home, &["tokens", "revoke", &revoked_id]))["status"],
        "revoked"
    );
    let listed = stdout_json(&cap(&home, &["tokens", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 4);
    assert!(!listed.to_string().contains(&good), "a secret was listed");
    let server = HttpServer::start(&home, &["--max-body-bytes", "4096"]);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let bearer = |t: &str| format!("Bearer {t}");
    let (status, _, body) = post(&server.addr, &[("Authorization", &bearer(&revoked))], ping);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("revoked"), "{body}");
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(8192)
    );
    let (status, _, _) = post(&server.addr, &[("Authorization", &bearer(&good))], &big);
    assert_eq!(status, 413);
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let (status, _, body) = post(&server.addr, &[("Authorization", &bearer(&good))], init);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("capability-network"));
    drop(server);

    let server = HttpServer::start(&home, &["--max-sessions", "1"]);
    let auth = bearer(&good);
    let auth = [("Authorization", auth.as_str())];
    let (first, _, _) = post(&server.addr, &auth, init);
    assert_eq!(first, 200);
    let (second, _, body) = post(&server.addr, &auth, init);
    assert_eq!(second, 503, "{body}");
    assert!(body.contains("too many sessions"));
}

/// The Inspector CLI lists and calls tools over stdio (`cap mcp-serve` as its child); over
/// HTTP it is tested in capability-mcp.
#[test]
fn mcp_inspector_lists_and_calls_tools_over_stdio() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let target = [
        env!("CARGO_BIN_EXE_cap"),
        "mcp-serve",
        "--home",
        home.to_str().unwrap(),
        "--expose",
        "text/slugify",
    ];
    let list = inspect(&target, &["--method", "tools/list"]);
    assert_eq!(names(&list).len(), 14);
    let called = inspect(
        &target,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "text__slugify",
            "--tool-arg",
            "text=Inspector Works",
        ],
    );
    assert_eq!(
        called["structuredContent"],
        json!({"slug": "inspector-works"})
    );
    receipt_of(&home, &called);
}

/// When a served package changes, clients are told the tool list changed and see the new
/// tool; the package capability itself runs behind the sandbox.
#[test]
fn a_changed_package_sends_tools_list_changed() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let pkg = dir.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    let fixture = common::fixture();
    std::fs::copy(fixture.with_file_name("add.mjs"), pkg.join("add.mjs")).unwrap();
    let original = std::fs::read_to_string(&fixture).unwrap();
    let manifest = pkg.join("package.json");
    std::fs::write(&manifest, &original).unwrap();
    let mut doc: Value = serde_json::from_str(&original).unwrap();
    let mut twin = doc["capability"]["exports"]["fixture/add"].clone();
    twin["manifest"]["id"] = json!("fixture/plus");
    doc["capability"]["exports"]["fixture/plus"] = twin;
    let h = home.to_str().unwrap();
    let m = manifest.to_str().unwrap();
    // A legacy session gets the notification on its stream; a 2026-07-28 client through
    // `subscriptions/listen`.
    for (mode, version) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        std::fs::write(&manifest, &original).unwrap();
        let mut serve = vec!["--mode", mode];
        serve.extend(stdio_args(h, &["--package", m, "--expose", "fixture/*"]));
        let out = py_client(
            &serve,
            &json!([
                {"op": "list"},
                {"op": "call", "name": "fixture__add", "arguments": {"a": 2, "b": 40}},
                {"op": "wait_list_changed", "touch": m, "content": doc.to_string(), "timeout": 15},
            ]),
        );
        assert_eq!(out["protocolVersion"], version);
        let r = out["results"].as_array().unwrap();
        assert_eq!(names(&r[0])[13..], ["fixture__add"]);
        assert_eq!(r[1]["structuredContent"], json!({"result": 42}), "{}", r[1]);
        let receipt = receipt_of(&home, &r[1]);
        assert!(receipt["governance"].is_object() || receipt["execution"].is_object());
        assert_eq!(r[2]["changed"], true);
        let after: Vec<&str> = r[2]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(after[13..], ["fixture__add", "fixture__plus"]);
    }
}

/// SIGTERM lets the call in flight finish: its receipt is kept and the process exits 0.
#[test]
fn sigterm_finishes_calls_in_flight_and_keeps_their_receipts() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let pkg = dir.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    let fixture = common::fixture();
    let module = std::fs::read_to_string(fixture.with_file_name("add.mjs"))
        .unwrap()
        .replace(
            "return { result: input.a + input.b };",
            "await new Promise((r) => setTimeout(r, 1500)); return { result: input.a + input.b };",
        );
    std::fs::write(pkg.join("add.mjs"), module).unwrap();
    std::fs::copy(&fixture, pkg.join("package.json")).unwrap();
    let (bearer, _) = token(&home, &["--agent", "bot"]);
    let server = HttpServer::start(
        &home,
        &[
            "--package",
            pkg.join("package.json").to_str().unwrap(),
            "--expose",
            "fixture/add",
        ],
    );
    let url = server.url.clone();
    let client = std::thread::spawn(move || {
        py_client(
            &["--mode", "auto", "--http", &url, "--token", &bearer],
            &json!([{"op": "call", "name": "fixture__add", "arguments": {"a": 1, "b": 2}}]),
        )
    });
    // Wait until the call is running (its sandbox is up), then stop the server.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        let listed = stdout_json(&cap(&home, &["audit", "tail", "--limit", "10"]));
        if listed
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["capability_name"] == "fixture/add"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    let _ = client.join();
    let receipts = stdout_json(&cap(&home, &["receipts", "list"]));
    let kept: Vec<&Value> = receipts
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["capability"]["id"] == "fixture/add")
        .collect();
    assert_eq!(kept.len(), 1, "{receipts}");
    assert_eq!(kept[0]["status"], "succeeded");
    assert_eq!(cap(&home, &["audit", "verify"]).status.code(), Some(0));
}

// ---------------------------------------------------------------------------------------
// The gateway
// ---------------------------------------------------------------------------------------

fn fixture_server(kind: &str, extra: &str) -> String {
    format!(
        "command = {:?}\nargs = [{:?}, {:?}{extra}]\n",
        python().to_str().unwrap(),
        tools().join("fixtures.py").to_str().unwrap(),
        kind
    )
}

/// The Python client's arguments for a legacy stdio session with `cap mcp-gateway`.
fn gateway_stdio(config: &Path, home: &Path, agent: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--mode",
        "legacy",
        "--stdio",
        "--",
        env!("CARGO_BIN_EXE_cap"),
    ]
    .into_iter()
    .map(String::from)
    .collect();
    args.extend([
        "mcp-gateway".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    args.extend(["--home".into(), home.display().to_string()]);
    if let Some(agent) = agent {
        args.extend(["--agent".into(), agent.to_string()]);
    }
    args
}

fn gateway_config(dir: &Path, policy: &str, body: &str) -> PathBuf {
    std::fs::write(dir.join("gateway.cedar"), policy).unwrap();
    let path = dir.join("gateway.toml");
    std::fs::write(&path, format!("policy = [\"gateway.cedar\"]\n{body}")).unwrap();
    path
}

const GATEWAY_POLICY: &str = r#"
permit(principal, action, resource);

@id("no-env-for-bots")
@reason("bots may not read the environment")
forbid(principal == Agent::"bot", action == Action::"mcp_tool_call",
       resource == Capability::"mcp.everything.get-env");

@id("big-sums")
@reason("sums over 100 need a human")
@decision("approval_required")
forbid(principal, action == Action::"mcp_tool_call", resource == Capability::"mcp.everything.get-sum")
when { context.input has a && context.input.a.greaterThan(decimal("100.0")) };

@id("hide-temperature")
@decision("redact")
@redact("/temperature")
forbid(principal, action == Action::"mcp_tool_call",
       resource == Capability::"mcp.everything.get-structured-content");
"#;

/// In front of the real server-everything: list filtering per caller, a decision on
/// arguments, an approval that completes only the same call, redaction of the result and
/// of the audit record.
#[test]
fn the_gateway_governs_every_upstream_tool() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let h = home.to_str().unwrap();
    let config = gateway_config(
        dir.path(),
        GATEWAY_POLICY,
        &format!(
            "[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\nrisk = \"medium\"\n",
            everything().display().to_string()
        ),
    );
    let c = config.to_str().unwrap();
    let gateway = |agent: &'static str| {
        let mut args = vec![
            "--mode",
            "legacy",
            "--stdio",
            "--",
            env!("CARGO_BIN_EXE_cap"),
        ];
        args.extend(["mcp-gateway", "--config", c, "--home", h, "--agent", agent]);
        args
    };
    let bot = py_client(
        &gateway("bot"),
        &json!([
            {"op": "list"},
            {"op": "call", "name": "everything__get-sum", "arguments": {"a": 2, "b": 40}},
            {"op": "call", "name": "everything__get-sum", "arguments": {"a": 200, "b": 40}},
            {"op": "call", "name": "everything__get-env", "arguments": {}},
            {"op": "call", "name": "everything__get-structured-content",
             "arguments": {"location": "New York"}},
        ]),
    );
    let r = bot["results"].as_array().unwrap();
    let listed = names(&r[0]);
    assert!(
        listed.contains(&"everything__get-sum".to_string()),
        "{listed:?}"
    );
    assert!(
        !listed.contains(&"everything__get-env".to_string()),
        "{listed:?}"
    );
    assert_eq!(r[1]["isError"], false, "{}", r[1]);
    assert!(r[1]["content"][0]["text"].as_str().unwrap().contains("42"));
    assert_eq!(r[1]["_meta"]["capabilityId"], "mcp.everything.get-sum");
    let approval = &r[2]["structuredContent"]["approval"];
    assert_eq!(approval["reason"], "sums over 100 need a human", "{}", r[2]);
    assert_eq!(r[3]["isError"], true);
    assert_eq!(
        r[3]["content"][0]["text"],
        "bots may not read the environment"
    );
    let weather = &r[4]["structuredContent"];
    assert_eq!(weather["temperature"], "[REDACTED]", "{weather}");
    assert_eq!(weather["conditions"], "Cloudy", "{weather}");
    assert!(!r[4]["content"][0]["text"].as_str().unwrap().contains("33"));

    // Another caller sees the tool the bot cannot.
    let (alice, _) = token(&home, &["--agent", "alice"]);
    let mut server = Command::new(env!("CARGO_BIN_EXE_cap"))
        .args([
            "mcp-gateway",
            "--config",
            c,
            "--home",
            h,
            "--listen",
            "127.0.0.1:0",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = announced_url(&mut server);
    let listed = py_client(
        &["--mode", "auto", "--http", &url, "--token", &alice],
        &json!([{"op": "list"}]),
    );
    let _ = server.kill();
    let _ = server.wait();
    assert!(names(&listed["results"][0]).contains(&"everything__get-env".to_string()));

    // A human approves the big sum; only the same call with the token runs, once.
    let id = approval["id"].as_str().unwrap();
    let out = cap(&home, &["approvals", "approve", id, "--approver", "carol"]);
    let granted = stdout_json(&out)["token"].as_str().unwrap().to_string();
    let bot = py_client(
        &gateway("bot"),
        &json!([
            {"op": "call", "name": "everything__get-sum", "arguments": {"a": 201, "b": 40},
             "meta": {"approvalToken": granted}},
            {"op": "call", "name": "everything__get-sum", "arguments": {"a": 200, "b": 40},
             "meta": {"approvalToken": granted}},
            {"op": "call", "name": "everything__get-sum", "arguments": {"a": 200, "b": 40},
             "meta": {"approvalToken": granted}},
        ]),
    );
    let r = bot["results"].as_array().unwrap();
    assert_eq!(r[0]["isError"], true, "{}", r[0]);
    assert_eq!(r[1]["isError"], false, "{}", r[1]);
    assert!(r[1]["content"][0]["text"].as_str().unwrap().contains("240"));
    assert_eq!(r[2]["isError"], true, "{}", r[2]);

    // The audit log has one event per call, with arguments digested and nothing redacted:
    // get-sum four times (ok, approval required, a token for other arguments refused, the
    // approved call) plus the replayed token, get-env and the weather once each.
    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "200"]));
    let per_capability = |name: &str| {
        events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["capability_name"] == name)
            .count()
    };
    assert_eq!(per_capability("mcp.everything.get-sum"), 5, "{events}");
    assert_eq!(per_capability("mcp.everything.get-env"), 1, "{events}");
    assert_eq!(
        per_capability("mcp.everything.get-structured-content"),
        1,
        "{events}"
    );
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["outcome"] != "allowed"),
        "{events}"
    );
    let text = events.to_string();
    let weather_events: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["capability_name"] == "mcp.everything.get-structured-content")
        .collect();
    assert!(!weather_events.is_empty());
    assert!(weather_events.iter().all(|e| {
        e["metadata"]["argumentsSha256"]
            .as_str()
            .is_some_and(|d| d.len() == 64)
    }));
    assert!(
        !text.contains("\"temperature\":33"),
        "a redacted value reached the audit log"
    );
    assert!(events.as_array().unwrap().iter().any(|e| {
        e["capability_name"] == "mcp.everything.get-env"
            && e["outcome"] == "denied_before_execution"
            && e["agent_id"] == "bot"
    }));
    assert_eq!(cap(&home, &["audit", "verify"]).status.code(), Some(0));
}

/// Shadow mode lets a would-be-denied call through and records the would-be decision.
#[test]
fn gateway_shadow_mode_records_without_enforcing() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        GATEWAY_POLICY,
        &format!(
            "shadow = true\n[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
            everything().display().to_string()
        ),
    );
    let out = py_client(
        &gateway_stdio(&config, &home, Some("bot")),
        &json!([
            {"op": "list"},
            {"op": "call", "name": "everything__get-env", "arguments": {}},
        ]),
    );
    let r = out["results"].as_array().unwrap();
    assert!(names(&r[0]).contains(&"everything__get-env".to_string()));
    assert_eq!(r[1]["isError"], false, "{}", r[1]);
    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "50"]));
    let env_events: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["capability_name"] == "mcp.everything.get-env")
        .collect();
    assert_eq!(
        env_events.len(),
        1,
        "one event for the one call: {env_events:?}"
    );
    assert_eq!(env_events[0]["outcome"], "executed");
    assert_eq!(env_events[0]["shadow"], "deny", "{env_events:?}");
}

/// Tool-definition pinning: trust on first use, a changed description is quarantined
/// (hidden and refused) until `cap mcp-pins accept`; hidden characters are flagged.
#[test]
fn gateway_pins_definitions_and_flags_hidden_characters() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let state = dir.path().join("rugpull.state");
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"rug\"\n{}\n[[server]]\nname = \"hidden\"\n{}",
            fixture_server("rugpull", &format!(", {:?}", state.to_str().unwrap())),
            fixture_server("hidden", "")
        ),
    );
    let run = |ops: Value| py_client(&gateway_stdio(&config, &home, Some("bot")), &ops);
    let ops = json!([
        {"op": "list"},
        {"op": "call", "name": "rug__fetch", "arguments": {"url": "http://x"}},
        {"op": "call", "name": "hidden__add", "arguments": {"a": 1, "b": 2}},
    ]);
    let first = run(ops.clone());
    let r = first["results"].as_array().unwrap();
    assert!(names(&r[0]).contains(&"rug__fetch".to_string()));
    assert_eq!(r[1]["isError"], false, "{}", r[1]);
    assert_eq!(r[2]["isError"], false, "{}", r[2]);

    // The server now describes `fetch` differently: quarantined.
    let second = run(ops.clone());
    let r = second["results"].as_array().unwrap();
    assert!(
        !names(&r[0]).contains(&"rug__fetch".to_string()),
        "{}",
        r[0]
    );
    assert_eq!(r[1]["isError"], true);
    assert!(
        r[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("cap mcp-pins accept rug fetch")
    );
    let pins = stdout_json(&cap(&home, &["mcp-pins", "list"]));
    assert!(
        pins["rug"]["fetch"]["pending"]["definition"]["description"]
            .as_str()
            .unwrap()
            .contains("id_rsa")
    );
    // The human accepts the definition reviewed: its hash, as `mcp-pins list` shows it.
    let reviewed = pins["rug"]["fetch"]["pending"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let accepted = stdout_json(&cap(
        &home,
        &["mcp-pins", "accept", "rug", "fetch", "--hash", &reviewed],
    ));
    assert_eq!(accepted["accepted"], json!(["fetch"]));
    let third = run(ops);
    let r = third["results"].as_array().unwrap();
    assert!(names(&r[0]).contains(&"rug__fetch".to_string()));
    assert_eq!(r[1]["isError"], false, "{}", r[1]);

    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "100"]));
    // One event per call of the rug: executed, refused while quarantined, executed.
    let fetches: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["capability_name"] == "mcp.rug.fetch")
        .collect();
    let outcomes: Vec<&str> = fetches
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["executed", "denied_before_execution", "executed"],
        "{fetches:?}"
    );
    assert_eq!(fetches[1]["code"], "quarantined", "{}", fetches[1]);
    assert_ne!(
        fetches[1]["metadata"]["definitionHash"], fetches[0]["metadata"]["definitionHash"],
        "the refused event names the changed definition"
    );
    assert!(events.as_array().unwrap().iter().any(|e| {
        e["capability_name"] == "mcp.hidden.add"
            && e["metadata"]["hiddenCharacters"]
                .as_array()
                .is_some_and(|h| h.contains(&json!("U+200B")) && h.contains(&json!("U+202E")))
    }));
}

/// Upstreams that hang, crash, answer 50 MB, flood notifications or write garbage give the
/// caller a tool error (or their answer), are restarted, and never take the gateway down;
/// every call is audited.
#[test]
fn gateway_survives_hostile_upstreams() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "timeout_ms = 2000\n[[server]]\nname = \"bad\"\n{}",
            fixture_server("hostile", "")
        ),
    );
    let started = Instant::now();
    let out = py_client(
        &gateway_stdio(&config, &home, None),
        &json!([
            {"op": "call", "name": "bad__ok", "arguments": {"text": "first"}},
            {"op": "call", "name": "bad__hang", "arguments": {}},
            {"op": "call", "name": "bad__crash", "arguments": {}},
            {"op": "call", "name": "bad__big", "arguments": {}},
            {"op": "call", "name": "bad__flood", "arguments": {}},
            {"op": "call", "name": "bad__garbage", "arguments": {}},
            {"op": "wait_list_changed", "timeout": 2.5},
            {"op": "call", "name": "bad__ok", "arguments": {"text": "still here"}},
        ]),
    );
    let r = out["results"].as_array().unwrap();
    let text = |i: usize| {
        r[i]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(text(0), "first");
    assert_eq!(r[1]["isError"], true);
    assert!(
        text(1).contains("did not answer within 2000 ms"),
        "{}",
        text(1)
    );
    assert_eq!(r[2]["isError"], true);
    assert!(
        text(2).contains("exited") || text(2).contains("unavailable"),
        "{}",
        text(2)
    );
    assert_eq!(r[3]["isError"], true, "{}", r[3]);
    assert!(
        text(3).contains("larger than") || text(3).contains("unavailable"),
        "{}",
        text(3)
    );
    // The flood and the garbage are dropped; the answers arrive.
    let answered: Vec<String> = [4, 5].iter().map(|&i| text(i)).collect();
    assert!(
        answered
            .iter()
            .all(|t| t == "survived" || t == "after garbage" || t.contains("unavailable")),
        "{answered:?}"
    );
    assert_eq!(text(7), "still here", "{}", r[7]);
    assert!(started.elapsed() < Duration::from_secs(60));
    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "100"]));
    let failed = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "execution_failed")
        .count();
    assert!(failed >= 3, "{events}");
    // Every call left exactly one event, whatever the upstream did.
    for (tool, calls) in [
        ("ok", 2),
        ("hang", 1),
        ("crash", 1),
        ("big", 1),
        ("flood", 1),
        ("garbage", 1),
    ] {
        let n = events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["capability_name"] == format!("mcp.bad.{tool}"))
            .count();
        assert_eq!(n, calls, "{tool}: {events}");
    }
    assert_eq!(cap(&home, &["audit", "verify"]).status.code(), Some(0));
}

/// The conformance suite through the gateway, in front of a fixture backend that offers
/// the suite's fixture tools under their own names.
#[test]
fn the_conformance_suite_passes_through_the_gateway() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"fixtures\"\nprefix = false\n{}",
            fixture_server("conformance", "")
        ),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_cap"))
        .args(["mcp-gateway", "--config"])
        .arg(&config)
        .args(["--home", home.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--anonymous-agent", "conformance"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = announced_url(&mut child);
    let _gateway = Running(child);
    let stdout = conformance(
        &url,
        dir.path(),
        "conformance-gateway-expected-failures.yml",
    );
    assert!(stdout.contains("tools-call-image: 1 passed"), "{stdout}");
}

/// `cap mcp-import` over the real server-everything, as the reference.
#[test]
fn mcp_import_of_a_real_server() {
    if !clients_present() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let out = cap(
        home.path(),
        &[
            "mcp-import",
            "--namespace",
            "Everything",
            "--version",
            "2026.8.31",
            "node",
            &everything().display().to_string(),
            "stdio",
        ],
    );
    succeeded(&out);
    let doc = stdout_json(&out);
    assert_eq!(doc["server"]["command"], "node");
    let sum = doc["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "everything/get-sum")
        .unwrap();
    assert_eq!(sum["version"], "2026.8.31");
    assert_eq!(sum["executable"], false);
    assert_eq!(sum["tags"], json!(["mcp", "imported", "stdio"]));
    assert_eq!(sum["effects"][0], "process.spawn");
    assert!(doc["tools"].as_array().unwrap().contains(&json!("get-sum")));
}

/// The hostile Python fixture as a streamable-HTTP MCP server on a free loopback port, once
/// it accepts connections.
fn http_fixture_upstream() -> (std::process::Child, u16) {
    let port = free_port();
    let upstream = Command::new(python())
        .arg(tools().join("fixtures.py"))
        .args(["hostile", "--http", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the upstream did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (upstream, port)
}

/// A streamable-HTTP upstream (the Python SDK's server) behind the gateway: its tools are
/// governed like a child's, a hang is cut by the timeout, and the gateway stays up.
#[test]
fn gateway_governs_a_streamable_http_upstream() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (mut upstream, port) = http_fixture_upstream();
    let config = gateway_config(
        dir.path(),
        r#"permit(principal, action, resource);
@id("no-echo-for-bots") @reason("bots may not echo over HTTP upstreams")
forbid(principal == Agent::"bot", action, resource)
when { resource.server == "remote" && context.input has text && context.input.text == "forbidden" };"#,
        &format!(
            "timeout_ms = 2000\n[[server]]\nname = \"remote\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
        ),
    );
    let out = py_client(
        &gateway_stdio(&config, &home, Some("bot")),
        &json!([
            {"op": "list"},
            {"op": "call", "name": "remote__ok", "arguments": {"text": "over http"}},
            {"op": "call", "name": "remote__ok", "arguments": {"text": "forbidden"}},
            {"op": "call", "name": "remote__hang", "arguments": {}},
            {"op": "call", "name": "remote__ok", "arguments": {"text": "still here"}},
        ]),
    );
    let _ = upstream.kill();
    let _ = upstream.wait();
    let r = out["results"].as_array().unwrap();
    assert!(names(&r[0]).contains(&"remote__ok".to_string()), "{}", r[0]);
    assert_eq!(r[1]["content"][0]["text"], "over http", "{}", r[1]);
    assert_eq!(r[2]["isError"], true);
    assert_eq!(
        r[2]["content"][0]["text"],
        "bots may not echo over HTTP upstreams"
    );
    assert_eq!(r[3]["isError"], true);
    assert!(
        r[3]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("2000 ms"),
        "{}",
        r[3]
    );
    assert_eq!(r[4]["content"][0]["text"], "still here", "{}", r[4]);
}

/// `cap exec mcp.<server>.<tool> --gateway`: an upstream tool run as a capability, governed
/// by the gateway's policies, with the approval flow of `cap exec` (exit 3, then the token).
#[test]
fn cap_exec_runs_an_upstream_tool_through_a_gateway_config() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        GATEWAY_POLICY,
        &format!(
            "[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
            everything().display().to_string()
        ),
    );
    let c = config.to_str().unwrap();
    let run = |input: &str, extra: &[&str]| {
        let mut args = vec![
            "exec",
            "mcp.everything.get-sum",
            input,
            "--gateway",
            c,
            "--agent",
            "bot",
        ];
        args.extend_from_slice(extra);
        cap(&home, &args)
    };
    let out = run(r#"{"a": 2, "b": 3}"#, &[]);
    succeeded(&out);
    // A governed call like any other: a receipt, and an audit event that names it.
    let doc = stdout_json(&out);
    let receipt = &doc["receipt"];
    assert_eq!(
        receipt["capability"]["id"], "mcp.everything.get-sum",
        "{doc}"
    );
    assert_eq!(receipt["status"], "succeeded", "{doc}");
    assert!(receipt["output"].to_string().contains('5'), "{doc}");
    assert!(receipt["outputHash"].is_string(), "{doc}");
    let receipt_id = receipt["receiptId"].as_str().unwrap();
    let listed = stdout_json(&cap(&home, &["receipts", "list"]));
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["receiptId"] == receipt_id),
        "{listed}"
    );
    let events = stdout_json(&cap(&home, &["audit", "tail"]));
    let event = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["receipt_id"] == receipt_id)
        .unwrap_or_else(|| panic!("no audit event names {receipt_id}: {events}"));
    assert_eq!(event["outcome"], "executed");
    assert!(event["plan_fingerprint"].is_string(), "{event}");
    let out = run(r#"{"a": 500, "b": 3}"#, &[]);
    assert_eq!(out.status.code(), Some(3));
    let id = stdout_json(&out)["approval"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Decided as any other approval: here by an approver over the HTTP API of `cap serve`
    // on the same home.
    let (approver, _) = token(
        &home,
        &["--agent", "carol", "--role", "approver", "--tenant", "*"],
    );
    let (_server, addr) = common::serve(&home, &[]);
    let auth = format!("Bearer {approver}");
    let (status, _, body) = common::http(
        &addr,
        "POST",
        &format!("/api/v1/approvals/{id}/approve"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        "{}",
    );
    assert_eq!(status, 200, "{body}");
    let approved = capability_core::json::parse(body.as_bytes()).unwrap();
    assert_eq!(approved["approval"]["capability"], "mcp.everything.get-sum");
    let token = approved["token"].as_str().unwrap();
    let out = run(r#"{"a": 500, "b": 3}"#, &["--approval", token]);
    succeeded(&out);
    assert!(
        stdout_json(&out)["receipt"]["output"]
            .to_string()
            .contains("503")
    );
    let out = cap(
        &home,
        &[
            "exec",
            "mcp.everything.get-env",
            "{}",
            "--gateway",
            c,
            "--agent",
            "bot",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "PERMISSION_DENIED");
    let out = cap(
        &home,
        &["exec", "mcp.everything.nope", "{}", "--gateway", c],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stdout_json(&out)["error"]["code"], "NOT_FOUND");
}

/// Per-tenant policy files apply to that tenant's callers only.
#[test]
fn gateway_tenant_policies_apply_to_their_tenant_only() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(dir.path().join("acme")).unwrap();
    std::fs::write(
        dir.path().join("acme/sums.cedar"),
        r#"permit(principal, action, resource);
@id("acme-no-sums") @reason("acme does not add")
forbid(principal, action, resource == Capability::"mcp.everything.get-sum");"#,
    )
    .unwrap();
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[tenant]]\nname = \"acme\"\npolicy = [\"acme/\"]\n[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
            everything().display().to_string()
        ),
    );
    let c = config.to_str().unwrap();
    let sum = |tenant: &str| {
        cap(
            &home,
            &[
                "exec",
                "mcp.everything.get-sum",
                r#"{"a": 1, "b": 2}"#,
                "--gateway",
                c,
                "--tenant",
                tenant,
            ],
        )
    };
    let acme = sum("acme");
    assert_eq!(
        acme.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&acme.stdout)
    );
    assert_eq!(stdout_json(&acme)["error"]["message"], "acme does not add");
    let beta = sum("beta");
    succeeded(&beta);
}

// ---------------------------------------------------------------------------------------
// Sandboxed upstreams (`sandbox = true`)
// ---------------------------------------------------------------------------------------

/// The text of result `i` of a client run.
fn result_text(out: &Value, i: usize) -> String {
    out["results"][i]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The real server-everything inside the process sandbox answers through the gateway, the
/// same config serves `cap exec --gateway`, and `cap mcp-import --sandbox` lists it.
#[test]
fn a_sandboxed_server_everything_lists_and_answers_through_the_gateway() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\nsandbox = true\n",
            everything().display().to_string()
        ),
    );
    let out = py_client(
        &gateway_stdio(&config, &home, None),
        &json!([
            {"op": "list"},
            {"op": "call", "name": "everything__echo", "arguments": {"message": "from the jail"}},
            {"op": "call", "name": "everything__get-sum", "arguments": {"a": 2, "b": 40}},
        ]),
    );
    let listed = names(&out["results"][0]);
    assert!(
        listed.contains(&"everything__echo".to_string()),
        "{listed:?}"
    );
    assert_eq!(result_text(&out, 1), "Echo: from the jail", "{out}");
    assert!(result_text(&out, 2).contains("42"), "{out}");

    let exec = cap(
        &home,
        &[
            "exec",
            "mcp.everything.get-sum",
            r#"{"a": 1, "b": 2}"#,
            "--gateway",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(
        exec.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&exec.stdout),
        String::from_utf8_lossy(&exec.stderr)
    );
    assert!(
        stdout_json(&exec)["receipt"]["output"]
            .to_string()
            .contains('3')
    );

    let import = cap(
        &home,
        &[
            "mcp-import",
            "--sandbox",
            "node",
            &everything().display().to_string(),
            "stdio",
        ],
    );
    succeeded(&import);
    assert!(
        stdout_json(&import)["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("get-sum"))
    );
}

/// A scratch directory outside `/tmp` (the sandbox's `/tmp` is private, so a host file there
/// would be out of reach anyway), open to the guest's uid (`nobody` on a root host).
fn scratch_outside_tmp() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    dir
}

/// The hostile fixture behind `sandbox = true` without grants: it cannot read a host file,
/// the repository or the capability home's database, cannot write outside its `/tmp`,
/// cannot reach a listener on 127.0.0.1 and cannot start a process; the host sees that
/// nothing happened. It sees no host process and none of the gateway's environment. With `network.connect`, `filesystem.read` and `filesystem.write` (and
/// their `read`/`write` paths) exactly those open.
#[test]
fn a_sandboxed_upstream_cannot_reach_beyond_its_grants() {
    if !clients_present() {
        return;
    }
    let dir = scratch_outside_tmp();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "the host's secret").unwrap();
    let granted = dir.path().join("granted");
    let outbox = dir.path().join("out");
    std::fs::create_dir(&granted).unwrap();
    // The home lies inside a read grant of the second run: it stays masked.
    let home = granted.join("home");
    std::fs::create_dir(&outbox).unwrap();
    std::fs::set_permissions(&outbox, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(granted.join("shared.txt"), "shared").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let database = home.join("capability.db");
    // Canonical paths: inside, only what is mounted exists (a `..` through an unmounted
    // directory would fail for that reason alone).
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../Cargo.toml")
        .canonicalize()
        .unwrap();
    let code = tools().canonicalize().unwrap();
    let planted_code = code.join(format!("planted-{}", std::process::id()));
    let planted_host = dir.path().join("planted");

    let jailed = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"jail\"\n{}sandbox = true\n",
            fixture_server("escape", "")
        ),
    );
    let out = py_client(
        &gateway_stdio(&jailed, &home, None),
        &json!([
            {"op": "call", "name": "jail__read", "arguments": {"path": secret}},
            {"op": "call", "name": "jail__read", "arguments": {"path": database}},
            {"op": "call", "name": "jail__read", "arguments": {"path": repository}},
            {"op": "call", "name": "jail__write", "arguments": {"path": planted_host, "text": "x"}},
            {"op": "call", "name": "jail__write", "arguments": {"path": planted_code, "text": "x"}},
            {"op": "call", "name": "jail__write", "arguments": {"path": "/tmp/private", "text": "x"}},
            {"op": "call", "name": "jail__connect", "arguments": {"port": port}},
            {"op": "call", "name": "jail__spawn", "arguments": {}},
            {"op": "call", "name": "jail__read", "arguments": {"path": code.join("fixtures.py")}},
            {"op": "call", "name": "jail__peek", "arguments": {}},
        ]),
    );
    assert!(
        database.exists(),
        "the home's database is there to be stolen"
    );
    for i in 0..3 {
        let t = result_text(&out, i);
        assert!(
            matches!(t.as_str(), "error:ENOENT" | "error:EACCES"),
            "read {i}: {t} ({out})"
        );
    }
    for i in 3..5 {
        let t = result_text(&out, i);
        assert!(
            matches!(t.as_str(), "error:ENOENT" | "error:EROFS" | "error:EACCES"),
            "write {i}: {t}"
        );
    }
    assert!(!planted_host.exists() && !planted_code.exists());
    assert_eq!(result_text(&out, 5), "wrote", "its own /tmp is writable");
    let t = result_text(&out, 6);
    assert!(
        matches!(
            t.as_str(),
            "error:EACCES" | "error:EPERM" | "error:ENETUNREACH" | "error:ECONNREFUSED"
        ),
        "connect: {t}"
    );
    listener.set_nonblocking(true).unwrap();
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the listener saw a connection"
    );
    let t = result_text(&out, 7);
    assert!(
        matches!(t.as_str(), "error:EPERM" | "error:EACCES" | "error:ENOSYS"),
        "spawn: {t}"
    );
    assert!(
        result_text(&out, 8).starts_with("read:"),
        "its own code is readable"
    );
    // Nothing of the gateway's environment but PATH, and HOME is its /tmp; its own pid
    // namespace shows the sandbox init and itself only.
    let peek: Value = serde_json::from_str(&result_text(&out, 9)).unwrap();
    let env = peek["env"].as_object().unwrap();
    assert_eq!(env["HOME"], "/tmp", "{peek}");
    assert!(
        env.keys()
            .all(|k| ["PATH", "HOME", "LC_CTYPE"].contains(&k.as_str())),
        "{peek}"
    );
    assert!(peek["pids"].as_array().unwrap().len() <= 2, "{peek}");

    // The same fixture with grants: exactly those open.
    let freed = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"jail\"\n{}sandbox = true\neffects = [\"network.connect\", \"filesystem.read\", \"filesystem.write\"]\nread = [\"granted\"]\nwrite = [\"out\"]\n",
            fixture_server("escape", "")
        ),
    );
    listener.set_nonblocking(false).unwrap();
    let result = outbox.join("result.txt");
    let out = py_client(
        &gateway_stdio(&freed, &home, None),
        &json!([
            {"op": "call", "name": "jail__read", "arguments": {"path": granted.join("shared.txt")}},
            {"op": "call", "name": "jail__read", "arguments": {"path": secret}},
            {"op": "call", "name": "jail__write", "arguments": {"path": result, "text": "from inside"}},
            {"op": "call", "name": "jail__connect", "arguments": {"port": port}},
            {"op": "call", "name": "jail__read", "arguments": {"path": database}},
        ]),
    );
    assert_eq!(result_text(&out, 0), "read:shared", "{out}");
    let t = result_text(&out, 4);
    assert!(
        matches!(t.as_str(), "error:ENOENT" | "error:EACCES" | "error:EISDIR"),
        "the home inside a grant: {t}"
    );
    assert!(result_text(&out, 1).starts_with("error:"), "{out}");
    assert_eq!(result_text(&out, 2), "wrote", "{out}");
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "from inside");
    assert_eq!(result_text(&out, 3), "connected", "{out}");
    let (mut conn, _) = listener.accept().unwrap();
    let mut hello = String::new();
    conn.read_to_string(&mut hello).unwrap();
    assert_eq!(hello, "hello");
}

/// Whether `processes(marker)` becomes `want` (empty or not) within `limit`.
fn eventually(marker: &str, present: bool, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if processes_with(marker).is_empty() != present {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A sandboxed upstream dies with the gateway, even one killed with SIGKILL: no process of
/// it is left.
#[test]
fn a_sandboxed_upstream_dies_with_the_gateway() {
    if !clients_present() {
        return;
    }
    let dir = scratch_outside_tmp();
    let home = dir.path().join("home");
    let marker = format!("marker-{}", std::process::id());
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"jail\"\n{}sandbox = true\n",
            fixture_server("escape", &format!(", {marker:?}"))
        ),
    );
    let mut gateway = Command::new(env!("CARGO_BIN_EXE_cap"))
        .args(["mcp-gateway", "--config", config.to_str().unwrap()])
        .args(["--home", home.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(&marker, true, Duration::from_secs(30)),
        "the sandboxed upstream never started"
    );
    assert_eq!(processes_with(&marker).len(), 1);
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    assert!(
        eventually(&marker, false, Duration::from_secs(10)),
        "the sandboxed upstream outlived the gateway: {:?}",
        processes_with(&marker)
    );
}

/// Each call's outcome event carries its latency, outcome and the caller's W3C trace
/// context; arguments are recorded only where configured and after the call's redactions;
/// the OTLP export carries it all.
#[test]
fn gateway_audit_records_latency_trace_and_redacted_arguments() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let policy = r#"permit(principal, action, resource);
@id("mask-password") @decision("redact") @redact("/password")
forbid(principal, action, resource == Capability::"mcp.everything.echo");"#;
    let config = gateway_config(
        dir.path(),
        policy,
        &format!(
            "record_arguments = true\n[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n[[server]]\nname = \"plain\"\nrecord_arguments = false\n{}",
            everything().display().to_string(),
            fixture_server("hostile", "")
        ),
    );
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let span = "00f067aa0ba902b7";
    let out = py_client(
        &gateway_stdio(&config, &home, Some("bot")),
        &json!([
            {"op": "call", "name": "everything__echo",
             "arguments": {"message": "hello-visible", "password": "hunter2-secret-value"},
             "meta": {"traceparent": format!("00-{trace}-{span}-01")}},
            {"op": "call", "name": "plain__ok", "arguments": {"text": "unrecorded-text"},
             "meta": {"traceparent": "00-not-a-traceparent-01"}},
            {"op": "call", "name": "plain__crash", "arguments": {}},
        ]),
    );
    let r = out["results"].as_array().unwrap();
    assert_eq!(r[0]["isError"], false, "{}", r[0]);
    assert_eq!(r[1]["isError"], false, "{}", r[1]);
    assert_eq!(r[2]["isError"], true, "{}", r[2]);

    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "100"]));
    let events = events.as_array().unwrap();
    let outcome = |capability: &str| {
        let of: Vec<&Value> = events
            .iter()
            .filter(|e| e["capability_name"] == capability)
            .collect();
        assert_eq!(of.len(), 1, "one event per call of {capability}: {of:?}");
        of[0].clone()
    };
    let echo = outcome("mcp.everything.echo");
    assert_eq!(echo["outcome"], "executed", "{echo}");
    assert_eq!(echo["trace_id"], trace);
    assert_eq!(
        echo["metadata"]["traceparent"],
        format!("00-{trace}-{span}-01")
    );
    assert!(echo["metadata"]["latencyUs"].as_u64().is_some(), "{echo}");
    assert_eq!(echo["metadata"]["toolOutcome"], "ok");
    assert_eq!(echo["metadata"]["mcpServer"], "everything");
    assert_eq!(echo["metadata"]["mcpTool"], "echo");
    assert_eq!(echo["input"]["message"], "hello-visible", "{echo}");
    assert_eq!(echo["input"]["password"], "[REDACTED]", "{echo}");
    assert!(
        echo["policy_ids"]
            .as_array()
            .unwrap()
            .contains(&json!("mask-password")),
        "{echo}"
    );
    // Cedar's redaction applies to the result: the after stage decided it.
    assert_eq!(
        echo["metadata"]["decisions"]["after"]["decision"], "redact",
        "{echo}"
    );
    let ok = outcome("mcp.plain.ok");
    assert!(ok["input"].is_null(), "{ok}");
    assert!(ok["metadata"].get("traceparent").is_none(), "{ok}");
    assert_ne!(ok["trace_id"], "00-not-a-traceparent-01");
    let crash = outcome("mcp.plain.crash");
    assert_eq!(crash["outcome"], "execution_failed", "{crash}");
    assert_eq!(
        crash["metadata"]["toolOutcome"], "upstream_error",
        "{crash}"
    );
    assert!(crash["metadata"]["latencyUs"].as_u64().is_some(), "{crash}");

    // The secret is nowhere: not in the store (any event), not in either export.
    let all = cap(&home, &["audit", "export", "--format", "jsonl"]);
    let otel_out = cap(&home, &["audit", "export", "--format", "otel"]);
    for text in [
        String::from_utf8_lossy(&all.stdout).to_string(),
        String::from_utf8_lossy(&otel_out.stdout).to_string(),
    ] {
        assert!(text.contains("hello-visible"), "{text}");
        assert!(!text.contains("hunter2-secret-value"), "{text}");
        assert!(!text.contains("unrecorded-text"), "{text}");
    }
    // Nor in any file of the home (database, WAL, journals).
    let needle = b"hunter2-secret-value";
    let mut dirs = vec![home.clone()];
    let mut files = 0;
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files += 1;
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "the secret is in {}",
                    path.display()
                );
            }
        }
    }
    assert!(files > 0);

    let otel = stdout_json(&otel_out);
    let records = otel["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
        .as_array()
        .unwrap();
    let echo_record = records
        .iter()
        .find(|l| {
            l["attributes"].as_array().unwrap().iter().any(|a| {
                a["key"] == "capability.event_id" && a["value"]["stringValue"] == echo["event_id"]
            })
        })
        .unwrap();
    assert_eq!(echo_record["traceId"], trace);
    assert_eq!(echo_record["spanId"], span);
    let metadata = echo_record["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "capability.metadata")
        .unwrap()["value"]["kvlistValue"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (kv["key"].as_str().unwrap().to_string(), kv["value"].clone()))
        .collect::<std::collections::BTreeMap<_, _>>();
    for key in [
        "mcpServer",
        "mcpTool",
        "definitionHash",
        "argumentsSha256",
        "latencyUs",
        "toolOutcome",
        "traceparent",
    ] {
        assert!(metadata.contains_key(key), "{key} missing: {metadata:?}");
    }
    assert_eq!(metadata["mcpServer"]["stringValue"], "everything");
}

/// Exactly one audit event per gateway call, whatever happens to it: allowed, denied by
/// policy, redacted (the argument masked in the record, the value in the result), an
/// upstream that crashes mid-call, and a would-be denial in shadow mode. Each call carries
/// a trace id of its own, so each event is matched to its call.
#[test]
fn gateway_writes_one_audit_event_per_call() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let policy = r#"permit(principal, action, resource);
@id("no-env-for-bots") @reason("bots may not read the environment")
forbid(principal == Agent::"bot", action == Action::"mcp_tool_call",
       resource == Capability::"mcp.everything.get-env");
@id("mask-password") @decision("redact") @redact("/password")
forbid(principal, action, resource == Capability::"mcp.everything.echo");
@id("hide-temperature") @decision("redact") @redact("/temperature")
forbid(principal, action, resource == Capability::"mcp.everything.get-structured-content");"#;
    let servers = format!(
        "record_arguments = true\ntimeout_ms = 5000\n[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n[[server]]\nname = \"bad\"\n{}",
        everything().display().to_string(),
        fixture_server("hostile", "")
    );
    let enforcing = gateway_config(dir.path(), policy, &servers);
    let shadow = dir.path().join("shadow.toml");
    std::fs::write(
        &shadow,
        format!("policy = [\"gateway.cedar\"]\nshadow = true\n{servers}"),
    )
    .unwrap();
    let trace = |i: u32| format!("{i:032x}");
    let call = |i: u32, name: &str, arguments: Value| {
        json!({"op": "call", "name": name, "arguments": arguments,
               "meta": {"traceparent": format!("00-{}-00f067aa0ba902b7-01", trace(i))}})
    };
    let out = py_client(
        &gateway_stdio(&enforcing, &home, Some("bot")),
        &json!([
            call(1, "everything__get-sum", json!({"a": 1, "b": 2})),
            call(2, "everything__get-env", json!({})),
            call(
                3,
                "everything__echo",
                json!({"message": "hi", "password": "pw-secret-1"})
            ),
            call(
                4,
                "everything__get-structured-content",
                json!({"location": "New York"})
            ),
            call(5, "bad__crash", json!({})),
        ]),
    );
    let r = out["results"].as_array().unwrap();
    assert_eq!(r[0]["isError"], false, "{}", r[0]);
    assert_eq!(r[1]["isError"], true, "{}", r[1]);
    assert_eq!(r[2]["isError"], false, "{}", r[2]);
    assert_eq!(
        r[3]["structuredContent"]["temperature"], "[REDACTED]",
        "{}",
        r[3]
    );
    assert_eq!(r[4]["isError"], true, "{}", r[4]);
    let out = py_client(
        &gateway_stdio(&shadow, &home, Some("bot")),
        &json!([call(6, "everything__get-env", json!({}))]),
    );
    assert_eq!(out["results"][0]["isError"], false, "{}", out["results"][0]);

    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "100"]));
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 6, "six calls, six events: {events:?}");
    let of = |i: u32| {
        let matching: Vec<&Value> = events
            .iter()
            .filter(|e| e["trace_id"] == trace(i))
            .collect();
        assert_eq!(matching.len(), 1, "call {i}: {matching:?}");
        matching[0].clone()
    };
    let has_policy = |e: &Value, id: &str| {
        e["policy_ids"]
            .as_array()
            .is_some_and(|ids| ids.contains(&json!(id)))
    };
    for i in 1..=6 {
        let e = of(i);
        assert_eq!(e["agent_id"], "bot", "{e}");
        assert!(e["metadata"]["mcpServer"].is_string(), "{e}");
        assert!(
            e["metadata"]["definitionHash"]
                .as_str()
                .is_some_and(|h| h.len() == 64),
            "{e}"
        );
        assert!(
            e["metadata"]["argumentsSha256"]
                .as_str()
                .is_some_and(|h| h.len() == 64),
            "{e}"
        );
        assert!(e["metadata"]["traceparent"].is_string(), "{e}");
    }
    let allowed = of(1);
    assert_eq!(allowed["outcome"], "executed", "{allowed}");
    assert_eq!(
        allowed["metadata"]["decisions"]["before"]["decision"],
        "allow"
    );
    assert_eq!(allowed["metadata"]["toolOutcome"], "ok");
    assert!(allowed["metadata"]["latencyUs"].is_u64(), "{allowed}");
    assert_eq!(allowed["input"], json!({"a": 1, "b": 2}));
    let denied = of(2);
    assert_eq!(denied["outcome"], "denied_before_execution", "{denied}");
    assert_eq!(denied["reason"], "bots may not read the environment");
    assert!(has_policy(&denied, "no-env-for-bots"), "{denied}");
    assert!(
        denied["metadata"].get("latencyUs").is_none(),
        "never called: {denied}"
    );
    let masked = of(3);
    assert_eq!(masked["outcome"], "executed", "{masked}");
    assert_eq!(masked["input"]["password"], "[REDACTED]", "{masked}");
    assert_eq!(masked["input"]["message"], "hi", "{masked}");
    assert!(has_policy(&masked, "mask-password"), "{masked}");
    let weather = of(4);
    assert_eq!(weather["redacted"], json!(["/temperature"]), "{weather}");
    assert!(has_policy(&weather, "hide-temperature"), "{weather}");
    let crashed = of(5);
    assert_eq!(crashed["outcome"], "execution_failed", "{crashed}");
    assert_eq!(
        crashed["metadata"]["toolOutcome"], "upstream_error",
        "{crashed}"
    );
    assert!(crashed["metadata"]["latencyUs"].is_u64(), "{crashed}");
    let shadowed = of(6);
    assert_eq!(shadowed["outcome"], "executed", "{shadowed}");
    assert_eq!(shadowed["shadow"], "deny", "{shadowed}");
    assert_eq!(
        shadowed["metadata"]["decisions"]["before"]["shadow"], "deny",
        "{shadowed}"
    );
    assert!(!json!(events).to_string().contains("pw-secret-1"));

    // The chain verifies and the OTLP export has one log record per event.
    assert_eq!(cap(&home, &["audit", "verify"]).status.code(), Some(0));
    let otel = stdout_json(&cap(&home, &["audit", "export", "--format", "otel"]));
    let records = otel["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
        .as_array()
        .unwrap();
    assert_eq!(records.len(), 6, "{otel}");
    assert!(records.iter().any(|l| l["traceId"] == trace(5)));
}

/// Each tenant's gateway events form a chain of their own: `cap audit verify --tenant`
/// and `cap audit export --tenant` need no other tenant's events, and an edit shows in the
/// edited tenant's chain and in the log, not in the other tenant's chain.
#[test]
fn gateway_tenants_have_audit_chains_of_their_own() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
            everything().display().to_string()
        ),
    );
    let c = config.to_str().unwrap();
    for (tenant, a) in [("acme", "1"), ("beta", "2"), ("acme", "3"), ("beta", "4")] {
        let input = format!(r#"{{"a": {a}, "b": 0}}"#);
        let out = cap(
            &home,
            &[
                "exec",
                "mcp.everything.get-sum",
                &input,
                "--gateway",
                c,
                "--tenant",
                tenant,
            ],
        );
        succeeded(&out);
    }
    let verify = |args: &[&str]| {
        let mut all = vec!["audit", "verify"];
        all.extend(args);
        let out = cap(&home, &all);
        (out.status.code(), stdout_json(&out))
    };
    let (code, acme) = verify(&["--tenant", "acme"]);
    assert_eq!(code, Some(0), "{acme}");
    // One event per call: two calls of acme.
    assert_eq!(acme["records"], 2, "{acme}");
    assert_eq!(verify(&["--tenant", "beta"]).0, Some(0));
    assert_eq!(verify(&[]).0, Some(0));

    let export = cap(
        &home,
        &["audit", "export", "--format", "jsonl", "--tenant", "acme"],
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|e| e["tenant_id"] == "acme"));
    assert_eq!(
        lines
            .iter()
            .map(|e| e["tenant_seq"].clone())
            .collect::<Vec<_>>(),
        [json!(1), json!(2)]
    );
    assert_eq!(lines[0]["tenant_prev_hash"], "0".repeat(64));
    assert_eq!(lines[1]["tenant_prev_hash"], lines[0]["tenant_hash"]);

    // Edit one of acme's events in the database.
    let conn = rusqlite::Connection::open(home.join("capability.db")).unwrap();
    let edited = conn
        .execute(
            "UPDATE audit_events SET event = replace(event, '\"agent_id\":\"', '\"agent_id\":\"x')
             WHERE tenant = 'acme' AND tenant_seq = 2",
            [],
        )
        .unwrap();
    assert_eq!(edited, 1);
    drop(conn);
    let (code, acme) = verify(&["--tenant", "acme"]);
    assert_eq!(code, Some(1), "{acme}");
    assert_eq!(acme["firstBad"]["seq"], 2, "{acme}");
    assert_eq!(verify(&["--tenant", "beta"]).0, Some(0));
    assert_eq!(verify(&[]).0, Some(1));
}

/// `--max-calls-per-principal` holds for the gateway: while a principal's call hangs, its
/// next call is refused, another principal's goes through.
#[test]
fn gateway_limits_calls_in_flight_per_principal() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "timeout_ms = 15000\n[[server]]\nname = \"bad\"\n{}",
            fixture_server("hostile", "")
        ),
    );
    let (alice, _) = token(&home, &["--agent", "alice"]);
    let (bob, _) = token(&home, &["--agent", "bob"]);
    let mut server = Command::new(env!("CARGO_BIN_EXE_cap"))
        .args(["mcp-gateway", "--config"])
        .arg(&config)
        .arg("--home")
        .arg(&home)
        .args(["--listen", "127.0.0.1:0", "--max-calls-per-principal", "1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = announced_url(&mut server);
    let call = |token: &str, name: &str, arguments: Value| {
        let out = py_client(
            &["--mode", "auto", "--http", &url, "--token", token],
            &json!([{"op": "call", "name": name, "arguments": arguments}]),
        );
        out["results"][0].clone()
    };
    let hang = || {
        let (url, alice) = (url.clone(), alice.clone());
        std::thread::spawn(move || {
            py_client(
                &["--mode", "auto", "--http", &url, "--token", &alice],
                &json!([{"op": "call", "name": "bad__hang", "arguments": {}}]),
            )
        })
    };
    let mut hanging = hang();
    // Alice's calls go through until her hanging call is in flight, then are refused. On a
    // loaded machine her hanging call may end (its 15 s timeout) before one of her other
    // calls got in while it was in flight: then she starts another (three at most).
    let mut ended = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let refused = loop {
        if hanging.is_finished() {
            ended.push(std::mem::replace(&mut hanging, hang()).join().unwrap());
            assert!(
                ended.len() < 3,
                "the hanging calls never counted: {ended:?}"
            );
        }
        let r = call(&alice, "bad__ok", json!({"text": "alice"}));
        let text = r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if text.contains("too many calls in flight") {
            break r;
        }
        assert_eq!(text, "alice", "{r}");
        assert!(Instant::now() < deadline, "the hanging call never counted");
    };
    assert_eq!(refused["isError"], true);
    assert_eq!(
        refused["structuredContent"]["error"]["details"]["code"], "rate_limited",
        "{refused}"
    );
    assert_eq!(refused["_meta"]["errorCode"], "RATE_LIMITED", "{refused}");
    // Bob is not Alice.
    let r = call(&bob, "bad__ok", json!({"text": "bob"}));
    assert_eq!(r["content"][0]["text"], "bob", "{r}");
    // The refused call is audited: one event with the limit's code.
    let events = stdout_json(&cap(&home, &["audit", "tail", "--limit", "200"]));
    assert!(
        events.as_array().unwrap().iter().any(|e| {
            e["capability_name"] == "mcp.bad.ok"
                && e["agent_id"] == "alice"
                && e["outcome"] == "denied_before_execution"
                && e["code"] == "rate_limited"
        }),
        "{events}"
    );
    let hung = hanging.join().unwrap();
    assert_eq!(hung["results"][0]["isError"], true, "{hung}");
    // Her slot is free again once the hanging call ended (the upstream restarts).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = call(&alice, "bad__ok", json!({"text": "again"}));
        if r["content"][0]["text"] == "again" {
            break;
        }
        let text = r["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("unavailable"), "{r}");
        assert!(Instant::now() < deadline, "{r}");
    }
    let _ = server.kill();
    let _ = server.wait();
}

/// The gateway with an `https://` streamable-HTTP upstream: the Python fixture server behind
/// a TLS terminator whose certificate a test CA issued, trusted through `SSL_CERT_FILE`.
/// Without the CA the upstream's tools never appear.
#[test]
fn gateway_reaches_an_https_streamable_http_upstream() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (mut upstream, port) = http_fixture_upstream();
    let ca = tls::TestCa::new("gateway test CA");
    let front = tls::front(
        ca.server(&["127.0.0.1"]),
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    );
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "timeout_ms = 3000\n[[server]]\nname = \"remote\"\nurl = \"https://{front}/mcp\"\n"
        ),
    );
    // The client starts the gateway with a clean environment: name the CA through env(1).
    let with_env = |env: &[&str]| {
        let mut args = gateway_stdio(&config, &home, None);
        let at = args.iter().position(|a| a == "--").unwrap() + 1;
        let mut prefix = vec!["env".to_string()];
        prefix.extend(env.iter().map(|s| s.to_string()));
        args.splice(at..at, prefix);
        args
    };
    let ops = json!([
        {"op": "list"},
        {"op": "call", "name": "remote__ok", "arguments": {"text": "over https"}},
    ]);
    let trusted = py_client(
        &with_env(&[&format!("SSL_CERT_FILE={}", ca_file.display())]),
        &ops,
    );
    let untrusted = py_client(
        &with_env(&["-u", "SSL_CERT_FILE"]),
        &json!([{"op": "list"}]),
    );
    let _ = upstream.kill();
    let _ = upstream.wait();
    let r = trusted["results"].as_array().unwrap();
    assert!(names(&r[0]).contains(&"remote__ok".to_string()), "{}", r[0]);
    assert_eq!(r[1]["content"][0]["text"], "over https", "{}", r[1]);
    let r = untrusted["results"].as_array().unwrap();
    assert!(
        !names(&r[0]).contains(&"remote__ok".to_string()),
        "{}",
        r[0]
    );
}

/// `cap mcp-serve` keeps pre-started sandboxes, warmed for the modules it serves: every run
/// of a package module, the first one too, is answered by a sandbox started ahead (its
/// receipt says so), each run in a fresh process; `--sandbox-pool 0` keeps none.
#[test]
fn mcp_serve_answers_module_runs_from_pre_started_sandboxes() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let h = home.to_str().unwrap();
    let package = common::fixture();
    let m = package.to_str().unwrap();
    let call = |a: u64| {
        json!({"op": "call", "name": "capability_execute",
               "arguments": {"id": "fixture/add", "input": {"a": a, "b": 2}}})
    };
    // The calls are spaced so that the spare is up before the next one.
    let ops = json!([call(1), {"op": "sleep", "seconds": 3}, call(2), {"op": "sleep", "seconds": 3}, call(3)]);
    for (pool, expected) in [
        (None, [true, true, true]),
        (Some("0"), [false, false, false]),
    ] {
        let mut extra = vec!["--package", m, "--expose", "fixture/*"];
        if let Some(n) = pool {
            extra.extend(["--sandbox-pool", n]);
        }
        let mut args = vec!["--mode", "auto"];
        args.extend(stdio_args(h, &extra));
        let out = py_client(&args, &ops);
        let results = out["results"].as_array().unwrap_or_else(|| panic!("{out}"));
        assert_eq!(results.len(), 3, "{out}");
        for (i, (result, pre_started)) in results.iter().zip(expected).enumerate() {
            let receipt = receipt_of(&home, result);
            assert_eq!(receipt["status"], "succeeded", "{receipt}");
            assert_eq!(receipt["output"], json!({"result": i as u64 + 3}));
            let isolation = &receipt["isolation"];
            assert_eq!(isolation["kind"], "process-sandbox", "{isolation}");
            let noted = isolation["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().starts_with("pre-started"));
            assert_eq!(noted, pre_started, "pool {pool:?}, call {i}: {isolation}");
        }
    }
}

/// An upstream that takes long to start (it never answers `initialize`, so each start waits
/// out the handshake timeout) holds up no call to another upstream: starts happen outside
/// the gateway's upstreams lock.
#[test]
fn a_slow_upstream_start_holds_up_no_call_to_another() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = gateway_config(
        dir.path(),
        "permit(principal, action, resource);",
        &format!(
            "[[server]]\nname = \"fast\"\n{}[[server]]\nname = \"mute\"\ncommand = \"sleep\"\nargs = [\"3600\"]\n",
            fixture_server("hostile", "")
        ),
    );
    // The mute upstream is restarted (1 s, then 2 s of backoff) and each start waits 10 s
    // for its handshake; the calls to the other one keep coming meanwhile.
    let mut ops = Vec::new();
    for i in 0..12 {
        ops.push(json!({"op": "timed_call", "name": "fast__ok", "arguments": {"text": format!("call {i}")}}));
        ops.push(json!({"op": "sleep", "seconds": 0.5}));
    }
    let out = py_client(&gateway_stdio(&config, &home, None), &json!(ops));
    let results = out["results"].as_array().unwrap();
    assert_eq!(results.len(), 12, "{out}");
    for (i, r) in results.iter().enumerate() {
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("call {i}"),
            "{r}"
        );
        let seconds = r["seconds"].as_f64().unwrap();
        assert!(
            seconds < 5.0,
            "call {i} waited {seconds} s for another upstream's start"
        );
    }
}

/// A policy that cannot type-check against an upstream tool's input schema (get-sum's `a`
/// is a JSON Schema `number`, a Cedar `decimal`: `>` does not apply to it) is reported
/// before any call: by `cap policy validate --gateway`, and when `cap mcp-gateway` starts,
/// each with the policy id, the expression and the fix.
#[test]
fn a_policy_that_cannot_type_check_against_an_upstream_tool_is_reported_before_any_call() {
    if !clients_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let policy = r#"permit(principal, action, resource);
@id("big-sums-typed-wrong") @reason("sums over 100 need a human") @decision("approval_required")
forbid(principal, action == Action::"mcp_tool_call", resource == Capability::"mcp.everything.get-sum")
when { context.input has a && context.input.a > 100 };"#;
    let config = gateway_config(
        dir.path(),
        policy,
        &format!(
            "[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
            everything().display().to_string()
        ),
    );
    let cedar = dir.path().join("gateway.cedar");
    let out = cap(
        &home,
        &[
            "policy",
            "validate",
            cedar.to_str().unwrap(),
            "--gateway",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = stdout_json(&out);
    assert_eq!(report["valid"], false, "{report}");
    let diagnostic = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["policy"] == "big-sums-typed-wrong")
        .unwrap_or_else(|| panic!("{report}"))
        .clone();
    assert_eq!(
        diagnostic["expression"], "context.input.a > 100",
        "{diagnostic}"
    );
    let fix = diagnostic["fix"].as_str().unwrap();
    assert!(
        fix.starts_with("context.input.a.greaterThan(decimal(\"100"),
        "{fix}"
    );
    assert!(
        diagnostic["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp.everything.get-sum")),
        "{diagnostic}"
    );
    // Without the gateway's tools the policy type-checks (nothing says `a` is a number).
    let out = cap(&home, &["policy", "validate", cedar.to_str().unwrap()]);
    assert_eq!(
        stdout_json(&out)["valid"],
        true,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The gateway says so when it starts (its client closes at once).
    let started = Command::new(env!("CARGO_BIN_EXE_cap"))
        .args(["mcp-gateway", "--config"])
        .arg(&config)
        .arg("--home")
        .arg(&home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&started.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("policy:") && l.contains("big-sums-typed-wrong"))
        .unwrap_or_else(|| panic!("not reported at startup: {stderr}"));
    assert!(line.contains("context.input.a > 100"), "{line}");
    assert!(
        line.contains("fix: `context.input.a.greaterThan(decimal("),
        "{line}"
    );
    // The fix type-checks.
    std::fs::write(&cedar, policy.replace("context.input.a > 100", fix)).unwrap();
    let out = cap(
        &home,
        &[
            "policy",
            "validate",
            cedar.to_str().unwrap(),
            "--gateway",
            config.to_str().unwrap(),
        ],
    );
    succeeded(&out);
}

/// A call limit of zero would refuse every call: each long-running surface refuses it when it
/// parses its options, before it opens a home or listens.
#[test]
fn every_serving_surface_refuses_a_zero_call_limit() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let config = dir.path().join("gateway.toml");
    std::fs::write(&config, "").unwrap();
    for args in [
        vec!["serve", "--listen", "127.0.0.1:0"],
        vec!["mcp-serve", "--listen", "127.0.0.1:0"],
        vec!["mcp-gateway", "--config", config.to_str().unwrap()],
    ] {
        let mut all = args.clone();
        all.extend(["--max-calls-per-principal", "0"]);
        let out = cap(&home, &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("invalid value '0' for '--max-calls-per-principal"),
            "{args:?}: {stderr}"
        );
        assert!(!home.exists(), "{args:?} opened the home");
    }
}
