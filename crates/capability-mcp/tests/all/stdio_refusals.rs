//! Over stdio every request is answered, also one the server cannot read: nested deeper than
//! serde_json reads (whether the id comes before or after the nesting), not JSON at all,
//! malformed params, longer than a line may be. A raw client talks to `cap mcp-serve` (the
//! binary at `$CAP_BIN`, else the workspace's `target/<profile>/cap`: build it first, as
//! `cargo test --workspace` does) and waits for an answer to each; the session goes on.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use capability_test_support::process::Running;
use serde_json::{Value, json};

/// The `cap` binary, if it was built.
fn cap_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAP_BIN") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("cap");
    if bin.exists() {
        return Some(bin);
    }
    eprintln!(
        "skipped: {} is missing (cargo build -p cap, or set CAP_BIN)",
        bin.display()
    );
    None
}

/// `cap mcp-serve` over stdio, with its answers coming in on a channel.
struct StdioServer {
    _child: Running,
    input: ChildStdin,
    answers: Receiver<Value>,
    _home: tempfile::TempDir,
}

impl StdioServer {
    fn start() -> Option<StdioServer> {
        let bin = cap_bin()?;
        let home = tempfile::tempdir().unwrap();
        let mut child = Command::new(bin)
            .args(["mcp-serve", "--expose", "text/slugify", "--home"])
            .arg(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(output).lines() {
                let Ok(line) = line else { return };
                let answer = serde_json::from_str(&line)
                    .unwrap_or_else(|e| json!({"unreadable": line, "why": e.to_string()}));
                if tx.send(answer).is_err() {
                    return;
                }
            }
        });
        let mut served = StdioServer {
            _child: Running(child),
            input,
            answers,
            _home: home,
        };
        served.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#);
        let init = served.next();
        assert_eq!(init["id"], 1, "{init}");
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        served.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        Some(served)
    }

    fn send(&mut self, line: &str) {
        self.input.write_all(line.as_bytes()).unwrap();
        self.input.write_all(b"\n").unwrap();
        self.input.flush().unwrap();
    }

    /// The next answer; panics when none comes.
    fn next(&self) -> Value {
        self.answers
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no answer"))
    }
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn call(id: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"text__slugify","arguments":{arguments}}}}}"#
    )
}

fn slug(answer: &Value) -> &Value {
    &answer["result"]["structuredContent"]["slug"]
}

#[test]
fn a_request_nested_too_deep_is_answered_with_its_id() {
    let Some(mut served) = StdioServer::start() else {
        return;
    };
    served.send(&call("2", &format!(r#"{{"text":{}}}"#, nested(200))));
    let refused = served.next();
    assert_eq!(refused["id"], 2, "{refused}");
    assert_eq!(refused["error"]["code"], -32700, "{refused}");
    served.send(&call("3", r#"{"text":"After The Deep One"}"#));
    let answer = served.next();
    assert_eq!(answer["id"], 3, "{answer}");
    assert_eq!(slug(&answer), "after-the-deep-one", "{answer}");
}

#[test]
fn every_refused_stdio_request_is_answered() {
    let Some(mut served) = StdioServer::start() else {
        return;
    };
    let expect = |served: &mut StdioServer, line: &str, id: Value, code: i64| {
        served.send(line);
        let answer = served.next();
        assert_eq!(answer.get("id"), Some(&id), "{answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
    };
    // The id after the nesting; a deep notification (no id: a null one).
    let late = format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"text__slugify","arguments":{{"text":{}}}}},"id":"late"}}"#,
        nested(129)
    );
    expect(&mut served, &late, json!("late"), -32700);
    let notification = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{}}}"#,
        nested(1000)
    );
    expect(&mut served, &notification, Value::Null, -32700);
    // Not JSON, broken JSON with a readable id.
    expect(&mut served, "hello?", Value::Null, -32700);
    expect(
        &mut served,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"text__slugify""#,
        json!(4),
        -32700,
    );
    // Malformed params of a known method: rmcp's own answer would have no id.
    expect(
        &mut served,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":"all"}"#,
        json!(5),
        -32600,
    );
    // Longer than a line may be (16 MiB), and too deep in a line the lane passes on.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(16 << 20)
    );
    expect(&mut served, &huge, json!(6), -32600);
    let long_and_deep = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"pad":"{}","deep":{}}}}}"#,
        "x".repeat(2 << 20),
        nested(300)
    );
    expect(&mut served, &long_and_deep, json!(7), -32700);
    // And the session goes on.
    served.send(&call("8", r#"{"text":"Still Answering"}"#));
    let answer = served.next();
    assert_eq!(answer["id"], 8, "{answer}");
    assert_eq!(slug(&answer), "still-answering", "{answer}");
}
