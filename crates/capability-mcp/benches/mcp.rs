//! `tools/call` of `text/slugify` (projected, governed, receipted in the durable home)
//! against the real `cap mcp-serve` process — the path an agent takes:
//!
//! * over stdio: one client, calls one after another, p50/p99 of the round trip;
//! * over streamable HTTP (a legacy session with a bearer token): one client, p50/p99;
//! * 64 concurrent HTTP clients, one session each, for 5 s: throughput, p50/p99 under load
//!   and the number of failed calls.
//!
//! ```sh
//! cargo build --release -p cap && cargo bench -p capability-mcp --bench mcp
//! ```
//!
//! Then `cap mcp-gateway` in front of server-everything: its `echo` called by one client
//! directly and through the gateway, over stdio (the two calls alternate, so that both see
//! the same machine; the added latency is the difference of the medians and the median of
//! the paired differences), over HTTP, and at 64 concurrent HTTP clients.
//!
//! The `cap` binary is taken from the bench's own target directory (or `$CAP_BIN`).
//! `CAP_BENCH_ONLY=serve` or `=gateway` runs one half, `=gateway-stdio` only the gateway's
//! stdio rounds, `=gateway-inproc` only the in-process case: `Gateway::call` in this
//! process, with the durable home, against an upstream that answers at once (no process, no
//! pipe), the governance of a call without its transport. `CAP_BENCH_THROUGH_TOOL` names the
//! tool when `CAP_BIN` is another proxy put in the gateway's place (one that forwards lines
//! unchanged serves `echo`), to compare the gateway with it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc; // as `cap` allocates

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use capability_test_support::http::{announced_url, authority, free_port};
use capability_test_support::mcp::everything;
use capability_test_support::measure::Percentiles;
use capability_test_support::process::Running;
use serde_json::{Value, json};

// Shared with the other MCP benches; this one uses only the client.
#[allow(dead_code)]
mod common;
use common::{Session, added};

fn cap_bin() -> PathBuf {
    if let Ok(p) = std::env::var("CAP_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("cap");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --release -p cap` first (or set CAP_BIN)",
        bin.display()
    );
    bin
}

/// The call a bench repeats and how its answer is checked.
#[derive(Clone, Copy)]
struct Call {
    tool: &'static str,
    arguments: fn() -> Value,
    ok: fn(&Value) -> bool,
}

const SLUGIFY: Call = Call {
    tool: "text__slugify",
    arguments: || json!({"text": "Hello Capability World"}),
    ok: |r| r["result"]["structuredContent"]["slug"] == "hello-capability-world",
};

fn echo(tool: &'static str) -> Call {
    Call {
        tool,
        arguments: || json!({"message": "hello"}),
        ok: |r| r["result"]["content"][0]["text"] == "Echo: hello",
    }
}

fn call_request(call: Call, id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": call.tool, "arguments": (call.arguments)()}})
}

fn check(call: Call, response: &Value) {
    assert!((call.ok)(response), "{response}");
}

/// A client of a stdio MCP server (one message per write, as MCP clients send them).
struct StdioClient {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    line: String,
    next_id: u64,
}

impl StdioClient {
    /// Starts `command` and performs the `initialize` handshake.
    fn start(command: &mut Command) -> StdioClient {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut c = StdioClient {
            child,
            stdin,
            stdout,
            line: String::new(),
            next_id: 1,
        };
        c.send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"}}}),
            true,
        );
        c.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            false,
        );
        c
    }

    /// Writes a message (a line, one write); with `wait`, the response to it.
    fn send(&mut self, msg: &Value, wait: bool) -> Option<Value> {
        // A `writeln!` of a `Value` on the unbuffered pipe is many small writes, each
        // waking the server.
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{msg}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        if !wait {
            return None;
        }
        // Skip the server's notifications (server-everything sends some).
        loop {
            self.line.clear();
            self.stdout.read_line(&mut self.line).unwrap();
            let v: Value = serde_json::from_str(&self.line).unwrap();
            if v.get("id").is_some() {
                return Some(v);
            }
        }
    }

    /// One checked `tools/call`; its round trip in ns.
    fn call(&mut self, call: Call) -> u128 {
        self.next_id += 1;
        let request = call_request(call, self.next_id);
        let t = Instant::now();
        let r = self.send(&request, true).unwrap();
        let elapsed = t.elapsed().as_nanos();
        check(call, &r);
        elapsed
    }
}

impl Drop for StdioClient {
    /// Closes the server's input and gives it a second to finish (the gateway flushes its
    /// audit log) before killing it.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// p50 of `call` over stdio against `command` (µs).
fn stdio(name: &str, command: &mut Command, call: Call) -> f64 {
    let mut client = StdioClient::start(command);
    for _ in 0..500 {
        client.call(call);
    }
    let mut samples: Vec<u128> = (0..5_000).map(|_| client.call(call)).collect();
    Percentiles::of(&mut samples).print(name).p50 / 1000.0
}

/// The latency `through` adds to `direct` over stdio: both servers run at once and their
/// calls alternate (see [`added`]).
fn stdio_added(
    name: &str,
    direct: (&mut Command, Call),
    through: (&mut Command, Call),
    rounds: usize,
) {
    let mut a = StdioClient::start(direct.0);
    let mut b = StdioClient::start(through.0);
    added(name, rounds, || a.call(direct.1), || b.call(through.1));
}

struct Server {
    _child: Running,
    addr: String,
}

fn http_server(command: &mut Command) -> Server {
    let mut child = command
        .args(["--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = authority(&announced_url(&mut child));
    Server {
        _child: Running(child),
        addr,
    }
}

/// A bearer token for an agent `bench`, added to `home`.
fn token(home: &std::path::Path) -> String {
    let host = capability_host::Host::open(capability_host::HostConfig {
        home: Some(home.to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let (_, secret) = host
        .tokens()
        .unwrap()
        .add(&capability_host::TokenSpec::agent("bench"))
        .unwrap();
    secret
}

/// One call of `call` in `session`, checked: its round trip in ns.
async fn timed(session: &mut Session, call: Call) -> u128 {
    static ID: AtomicU64 = AtomicU64::new(1);
    let request = call_request(call, ID.fetch_add(1, Ordering::Relaxed));
    let t = Instant::now();
    let r = session.post(&request).await.unwrap().unwrap();
    let elapsed = t.elapsed().as_nanos();
    check(call, &r);
    elapsed
}

async fn http(name: &str, home: &std::path::Path, command: &mut Command, call: Call) {
    let token = token(home);
    let server = http_server(command);

    let mut one = Session::open(&server.addr, &token).await;
    for _ in 0..300 {
        timed(&mut one, call).await;
    }
    let mut samples = Vec::with_capacity(3_000);
    for _ in 0..3_000 {
        samples.push(timed(&mut one, call).await);
    }
    Percentiles::of(&mut samples).print(&format!("{name} over HTTP (one client)"));

    // As many sessions as one principal may hold (64 by default), under a token of their
    // own: the one-client session above still holds a slot of the first.
    let clients = 64;
    let token = self::token(home);
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(5);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (addr, token) = (server.addr.clone(), token.clone());
        let (ok, failed) = (Arc::clone(&ok), Arc::clone(&failed));
        tasks.push(tokio::spawn(async move {
            let mut s = Session::open(&addr, &token).await;
            let mut samples = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                i += 1;
                let t = Instant::now();
                match s.post(&call_request(call, c * 1_000_000 + i)).await {
                    Ok(Some(r)) if (call.ok)(&r) => {
                        samples.push(t.elapsed().as_nanos());
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("failed call: {other:?}");
                        }
                    }
                }
            }
            samples
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!(
        "{name} over HTTP, {clients} concurrent clients: {:.0} calls/s, {ok} ok, {failed} failed",
        ok as f64 / elapsed
    );
    Percentiles::of(&mut all).print("  latency under load");
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` must not run this.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let serve = |home: &std::path::Path| {
        let mut c = Command::new(cap_bin());
        c.args(["mcp-serve", "--expose", "text/slugify", "--home"])
            .arg(home);
        c
    };
    let only = std::env::var("CAP_BENCH_ONLY").ok();
    let only = only.as_deref();
    let home = dir.path().join("serve");
    if matches!(only, None | Some("serve")) {
        serve_bench(&runtime, &home, serve);
    }
    if matches!(only, None | Some("gateway" | "gateway-inproc")) {
        gateway_inproc(dir.path());
    }
    if matches!(only, None | Some("gateway" | "gateway-stdio")) {
        gateway_bench(&runtime, dir.path(), only != Some("gateway-stdio"));
    }
}

fn serve_bench(
    runtime: &tokio::runtime::Runtime,
    home: &std::path::Path,
    serve: impl Fn(&std::path::Path) -> Command,
) {
    stdio(
        "cap mcp-serve: tools/call text/slugify over stdio",
        &mut serve(home),
        SLUGIFY,
    );
    runtime.block_on(http(
        "cap mcp-serve: tools/call text/slugify",
        home,
        &mut serve(home),
        SLUGIFY,
    ));
}

/// The gateway in front of server-everything: the same call direct and through it.
fn gateway_bench(runtime: &tokio::runtime::Runtime, dir: &std::path::Path, http_too: bool) {
    let everything = everything();
    if !everything.exists() {
        println!("gateway: skipped (install tools/mcp: see .ci/run)");
        return;
    }
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[server]]\nname = \"everything\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n",
            everything.to_str().unwrap()
        ),
    )
    .unwrap();
    let home = dir.join("gateway");
    let gateway = |home: &std::path::Path| {
        let mut c = Command::new(cap_bin());
        c.args(["mcp-gateway", "--config"])
            .arg(&config)
            .arg("--home")
            .arg(home);
        c
    };
    // To measure another proxy in the gateway's place (`CAP_BIN`), name the tool it serves.
    let through_tool: &'static str = std::env::var("CAP_BENCH_THROUGH_TOOL")
        .map(|t| &*t.leak())
        .unwrap_or("everything__echo");
    stdio_added(
        "server-everything echo over stdio, direct vs through cap mcp-gateway",
        (
            Command::new("node").arg(&everything).arg("stdio"),
            echo("echo"),
        ),
        (&mut gateway(&home), echo(through_tool)),
        5_000,
    );
    if !http_too {
        return;
    }
    http_added(runtime, dir, &everything);
    runtime.block_on(http(
        "cap mcp-gateway: tools/call everything__echo",
        &home,
        &mut gateway(&home),
        echo("everything__echo"),
    ));
}

/// server-everything over streamable HTTP, called by one HTTP client directly and through
/// `cap mcp-gateway --listen` with that same server as its `url` upstream.
fn http_added(
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    everything: &std::path::Path,
) {
    let port = free_port();
    let upstream = Server {
        _child: Running(
            Command::new("node")
                .arg(everything)
                .arg("streamableHttp")
                .env("PORT", port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ),
        addr: format!("127.0.0.1:{port}"),
    };
    let started = Instant::now();
    while std::net::TcpStream::connect(&upstream.addr).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "server-everything did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let config = dir.join("gateway-http.toml");
    std::fs::write(
        &config,
        format!(
            "[[server]]\nname = \"everything\"\nurl = \"http://{}/mcp\"\n",
            upstream.addr
        ),
    )
    .unwrap();
    let home = dir.join("gateway-http");
    let token = token(&home);
    let gateway = http_server(
        Command::new(cap_bin())
            .args(["mcp-gateway", "--config"])
            .arg(&config)
            .arg("--home")
            .arg(&home),
    );
    let mut a = runtime.block_on(Session::open(&upstream.addr, "unused"));
    let mut b = runtime.block_on(Session::open(&gateway.addr, &token));
    added(
        "server-everything echo over HTTP, direct vs through cap mcp-gateway",
        3_000,
        || runtime.block_on(timed(&mut a, echo("echo"))),
        || runtime.block_on(timed(&mut b, echo("everything__echo"))),
    );
}

/// An upstream in this process that answers at once: one tool, `echo`.
#[derive(Debug)]
struct InstantEcho;

impl capability_host::upstream::McpSession for InstantEcho {
    fn request(
        &self,
        method: &str,
        params: Value,
        _timeout: Duration,
    ) -> Result<Value, capability_host::upstream::UpstreamError> {
        match method {
            "tools/list" => Ok(json!({"tools": [{
                "name": "echo",
                "description": "Echoes back the input",
                "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}},
                                "required": ["message"]},
            }]})),
            _ => Ok(json!({"content": [{"type": "text", "text": format!(
                "Echo: {}", params["arguments"]["message"].as_str().unwrap_or_default())}]})),
        }
    }
    fn dead(&self) -> Option<capability_host::upstream::UpstreamError> {
        None
    }
    fn take_list_changed(&self) -> bool {
        false
    }
    fn kill(&self) {}
}

/// `Gateway::call` in process against [`InstantEcho`], the durable home as `cap
/// mcp-gateway` opens it (SQLite audit log with its journal): p50/p99 of a call.
fn gateway_inproc(dir: &std::path::Path) {
    use capability_host::upstream::GatewayConfig;
    use capability_mcp::gateway::Gateway;
    let config = dir.join("inproc.toml");
    std::fs::write(
        &config,
        "[[server]]\nname = \"everything\"\ncommand = \"in-process\"\n",
    )
    .unwrap();
    let config = GatewayConfig::load(&config).unwrap();
    let host = capability_host::Host::open(capability_host::HostConfig {
        home: Some(dir.join("inproc-home")),
        gateway: Some(config),
        upstream_connect: Some(Arc::new(|_, _| {
            Ok(Arc::new(InstantEcho) as Arc<dyn capability_host::upstream::McpSession>)
        })),
        ..Default::default()
    })
    .unwrap();
    let gateway = Gateway::new(Arc::new(host), capability_mcp::ServeOptions::default());
    let actor = capability_host::Actor::agent("bench");
    let call = echo("everything__echo");
    let once = || {
        let t = Instant::now();
        let result = gateway.call(call.tool, (call.arguments)(), None, &actor);
        let elapsed = t.elapsed().as_nanos();
        assert_eq!(result["content"][0]["text"], "Echo: hello", "{result}");
        elapsed
    };
    for _ in 0..2_000 {
        once();
    }
    let n: usize = std::env::var("CAP_BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let mut samples: Vec<u128> = (0..n).map(|_| once()).collect();
    Percentiles::of(&mut samples)
        .print("Gateway::call in process (instant upstream, durable home)");
}
