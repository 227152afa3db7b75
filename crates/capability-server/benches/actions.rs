//! The action API as an agent in another process feels it: a real `cap serve` (the binary
//! at `$CAP_BIN`, default `target/release/cap`) with 100 Cedar policies (the workspace's
//! governed workload: 4 global ones, 96 naming other capabilities), one client on loopback
//! with one keep-alive connection:
//!
//! * the floor: `GET /api/v1/whoami` (HTTP and the bearer token, no decision);
//! * the before stage (`POST /api/v1/actions` of a `model_call`), each action then closed
//!   untimed;
//! * the round trip (before, then `POST /api/v1/actions/{id}/result`);
//! * the batch form: 10 and 100 actions per request, as actions per second.
//!
//! `cargo build --release -p cap && cargo bench -p capability-server --bench actions`.
//! No peer is measured: no decision service of an agent framework runs offline here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use axum::body::Bytes;
use capability_test_support::governed;
use capability_test_support::measure::Percentiles;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

struct Served {
    child: Child,
    base: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cap_bin() -> PathBuf {
    match std::env::var_os("CAP_BIN") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/cap"),
    }
}

fn serve() -> Served {
    let bin = cap_bin();
    assert!(
        bin.exists(),
        "{} is missing: cargo build --release -p cap (or set CAP_BIN)",
        bin.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let out = Command::new(&bin)
        .args([
            "tokens", "add", "--role", "agent", "--agent", "bench", "--tenant", "acme",
        ])
        .arg("--home")
        .arg(&home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = serde_json::from_slice::<Value>(&out.stdout).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let policy = dir.path().join("policies.cedar");
    std::fs::write(&policy, governed::policies()).unwrap();
    let mut caps: Vec<Value> = (0..governed::CAPABILITIES)
        .map(|i| json!({"name": format!("svc/c{i}"), "type": "tool"}))
        .collect();
    caps.push(json!({"name": "llm.main", "type": "model", "risk": "medium"}));
    let capabilities = dir.path().join("capabilities.json");
    std::fs::write(&capabilities, json!({"capabilities": caps}).to_string()).unwrap();
    let mut child = Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .arg("--home")
        .arg(&home)
        .arg("--policy")
        .arg(&policy)
        .arg("--capabilities")
        .arg(&capabilities)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .env("CAP_NO_PROGRESS", "1")
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let base = loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(n > 0, "cap serve exited before it listened");
        if let Some(at) = line.find("listening on http://") {
            let rest = &line[at + "listening on ".len()..];
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Served {
        child,
        base,
        token,
        _dir: dir,
    }
}

struct Agent {
    rt: tokio::runtime::Runtime,
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    auth: String,
}

impl Agent {
    fn post(&self, path: &str, body: &Value) -> Value {
        let req = hyper::Request::post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        self.send(req)
    }

    fn get(&self, path: &str) -> Value {
        let req = hyper::Request::get(format!("{}{path}", self.base))
            .body(Full::new(Bytes::new()))
            .unwrap();
        self.send(req)
    }

    fn send(&self, mut req: hyper::Request<Full<Bytes>>) -> Value {
        req.headers_mut()
            .insert("authorization", self.auth.parse().unwrap());
        self.rt.block_on(async {
            let res = self.client.request(req).await.unwrap();
            let status = res.status();
            let bytes = res.into_body().collect().await.unwrap().to_bytes();
            assert!(
                status.is_success(),
                "{status}: {}",
                String::from_utf8_lossy(&bytes)
            );
            serde_json::from_slice(&bytes).unwrap()
        })
    }
}

fn action(n: usize) -> Value {
    json!({"actionType": "model_call", "capability": "llm.main",
           "input": {"prompt": "summarize the ticket", "n": n}, "estimatedCostUsd": 0.002})
}

fn close(agent: &Agent, decided: &Value) {
    let id = decided["actionId"].as_str().unwrap();
    agent.post(
        &format!("/api/v1/actions/{id}/result"),
        &json!({"output": {"text": "ok"}, "costUsd": 0.002}),
    );
}

fn main() {
    let served = serve();
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let agent = Agent {
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        client: Client::builder(TokioExecutor::new()).build(connector),
        base: served.base.clone(),
        auth: format!("Bearer {}", served.token),
    };
    let runs = 5_000;
    // Warm-up: the connection, the caches, the database writer.
    for n in 0..500 {
        let d = agent.post("/api/v1/actions", &action(n));
        assert_eq!(d["decision"], "allow", "{d}");
        close(&agent, &d);
    }

    // The floor: an authenticated request that decides nothing.
    let mut floor = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        agent.get("/api/v1/whoami");
        floor.push(t.elapsed().as_nanos());
    }
    Percentiles::of(&mut floor).print("GET /api/v1/whoami (HTTP and the bearer token only)");

    let mut before = Vec::with_capacity(runs);
    for n in 0..runs {
        let t = Instant::now();
        let d = agent.post("/api/v1/actions", &action(n));
        before.push(t.elapsed().as_nanos());
        close(&agent, &d);
    }
    Percentiles::of(&mut before).print("before stage over HTTP (100 Cedar policies)");

    let mut round = Vec::with_capacity(runs);
    for n in 0..runs {
        let t = Instant::now();
        let d = agent.post("/api/v1/actions", &action(n));
        close(&agent, &d);
        round.push(t.elapsed().as_nanos());
    }
    Percentiles::of(&mut round).print("before + after round trip over HTTP");

    for size in [10, 100] {
        // Only the batch requests are timed; each batch's actions are closed after it
        // (a principal holds at most 1,024 open actions).
        let mut elapsed = std::time::Duration::ZERO;
        let mut count = 0usize;
        for b in 0..10_000 / size {
            let items: Vec<Value> = (0..size).map(|i| action(b * size + i)).collect();
            let body = json!({"actions": items});
            let t = Instant::now();
            let answer = agent.post("/api/v1/actions/batch", &body);
            elapsed += t.elapsed();
            let results = answer["results"].as_array().unwrap();
            count += results.len();
            for d in results {
                assert_eq!(d["decision"], "allow", "{d}");
                close(&agent, d);
            }
        }
        println!(
            "batch of {size}: {:.0} decisions/s ({:.1} µs per decision, {count} decisions)",
            count as f64 / elapsed.as_secs_f64(),
            elapsed.as_micros() as f64 / count as f64,
        );
    }
}
