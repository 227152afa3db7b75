//! The latency of one call over streamable HTTP, with every server in this process but on
//! a runtime of its own (as it would be in its own process), one client:
//!
//! * the gateway: a real MCP server (rmcp's streamable-HTTP service, see `common`) called
//!   directly and through a [`GatewayServer`] with that server as its `url` upstream (durable
//!   home, one permit-all policy), alternating; the added latency is the difference of the
//!   medians and the median of the paired differences;
//! * `cap mcp-serve` over HTTP: [`McpServer::serve_http`] with `text/slugify` projected
//!   (durable home), `tools/call` p50/p99.
//!
//! ```sh
//! cargo bench -p capability-mcp --bench latency
//! ```
//!
//! The whole-process figures (the `cap` binary, server-everything upstream) are the `mcp`
//! bench's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc; // as `cap` allocates

use std::sync::Arc;

use capability_host::{Host, HostConfig, TokenSpec};
use capability_mcp::{Gateway, GatewayServer, McpServer, ServeOptions};
use serde_json::json;

#[allow(dead_code)] // each bench uses part of it
mod common;
use common::{Session, added, gateway_host, runtime, time_posts};

/// A token of agent `bench` on `host`.
fn token(host: &Host) -> String {
    host.tokens()
        .unwrap()
        .add(&TokenSpec::agent("bench"))
        .unwrap()
        .1
}

/// Serves `serve` on `rt` at a loopback port (until the runtime is dropped); its address.
fn listen<F, Fut>(rt: &tokio::runtime::Runtime, serve: F) -> String
where
    F: FnOnce(tokio::net::TcpListener) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    rt.spawn(serve(listener));
    addr
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` must not run this.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rounds: usize = std::env::var("CAP_BENCH_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_000);

    // The gateway in front of one upstream.
    let upstream_rt = runtime(1);
    let upstream = upstream_rt.block_on(common::upstreams(1));
    let host = gateway_host(
        &dir.path().join("gateway"),
        "permit(principal, action, resource);",
        &upstream,
        1,
    );
    let secret = token(&host);
    let gateway_rt = runtime(2);
    let server = GatewayServer(Arc::new(Gateway::new(host, ServeOptions::default())));
    let through = listen(&gateway_rt, move |l| async move {
        server.serve_http(l, std::future::pending()).await
    });
    let mut a = client.block_on(Session::open_at(&upstream, "/u0/mcp", "unused"));
    let mut b = client.block_on(Session::open(&through, &secret));
    let call = |tool: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": tool, "arguments": {"message": "hello"}}})
    };
    let (direct_call, through_call) = (call("t0"), call("u0__t0"));
    let timed = |session: &mut Session, msg: &serde_json::Value| {
        let t = std::time::Instant::now();
        let r = client.block_on(session.post(msg)).unwrap().unwrap();
        let elapsed = t.elapsed().as_nanos();
        assert_eq!(r["result"]["content"][0]["text"], "Echo: hello", "{r}");
        elapsed
    };
    added(
        "latency/gateway-http/1",
        rounds,
        || timed(&mut a, &direct_call),
        || timed(&mut b, &through_call),
    );
    drop(gateway_rt);

    // `cap mcp-serve` over HTTP.
    let host = Arc::new(
        Host::open(HostConfig {
            home: Some(dir.path().join("serve")),
            ..Default::default()
        })
        .unwrap(),
    );
    let secret = token(&host);
    let serve_rt = runtime(2);
    let server = McpServer::new(
        host,
        ServeOptions {
            expose: vec!["text/slugify".into()],
            ..Default::default()
        },
    );
    let served = listen(&serve_rt, move |l| async move {
        server.serve_http(l, std::future::pending()).await
    });
    let slugify = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "text__slugify", "arguments": {"text": "Hello Capability World"}}});
    client.block_on(async {
        let mut s = Session::open(&served, &secret).await;
        let r = s.post(&slugify).await.unwrap().unwrap();
        assert_eq!(
            r["result"]["structuredContent"]["slug"], "hello-capability-world",
            "{r}"
        );
        time_posts(&mut s, &slugify, 300, rounds)
            .await
            .print("latency/mcp-serve-http/1");
    });
    drop(serve_rt);
}
