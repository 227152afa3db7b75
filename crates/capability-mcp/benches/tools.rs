//! The tools axis: `tools/list` and `tools/call` through the gateway as the number of
//! upstream tools grows — 1, 10 and 100 upstream servers of 100 tools each (100, 1,000 and
//! 10,000 tools), under a Cedar policy set that hides some tools from one caller.
//!
//! ```sh
//! cargo bench -p capability-mcp --bench tools
//! ```
//!
//! The upstreams are real MCP servers: rmcp's streamable-HTTP service in this process, one
//! per path (`/u<i>/mcp`) of one listener, each listing 100 tools and answering a call with
//! its arguments' message. The gateway is a [`GatewayServer`] over a durable home (as `cap
//! mcp-gateway` opens it) serving streamable HTTP in this process; its upstreams are those
//! servers' URLs, reached by the gateway's own HTTP client. For each size it prints:
//!
//! * `tools/list/gateway-list/<tools>`: `Gateway::list` for the filtered caller (the
//!   gateway's and the host's work, without the transport), listed before: the host keeps
//!   each caller's visible set while the policies and the catalog stay the same;
//! * `tools/list/gateway-list-first/<tools>`: the same for a caller not listed before
//!   (one policy evaluation per tool);
//! * `tools/list/http/<tools>`: `tools/list` over HTTP through the gateway, the whole
//!   answer read by the client (not parsed);
//! * `tools/call/http/<tools>`: `tools/call` of one tool over HTTP through the gateway;
//! * `tools/open/first/<tools>`: opening the gateway's host with every tool new to it
//!   (started, listed, pinned and registered), measured once.
//!
//! `CAP_BENCH_SIZES=1,10` picks the numbers of upstreams.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc; // as `cap` allocates

use std::sync::Arc;
use std::time::Instant;

use capability_host::{Actor, TokenSpec};
use capability_mcp::{Gateway, GatewayServer, ServeOptions};
use capability_test_support::measure::Percentiles;
use serde_json::json;

#[allow(dead_code)] // each bench uses part of it
mod common;
use common::{Session, TOOLS, gateway_host, response_of, runtime, time_posts};

/// Callers: `alice` sees every tool; `bob` is denied (so does not see) every tool whose
/// name ends in `7`, and every tool of the upstreams whose name ends in `3`. Other
/// policies name other callers.
const POLICY: &str = r#"
permit(principal, action, resource);

@id("bob-no-sevens") @reason("not for bob")
forbid(principal == Agent::"bob", action == Action::"mcp_tool_call", resource)
when { context.labels has "mcp.tool" && context.labels["mcp.tool"] like "*7" };

@id("bob-no-threes") @reason("not for bob")
forbid(principal == Agent::"bob", action == Action::"mcp_tool_call", resource)
when { context.labels has "mcp.server" && context.labels["mcp.server"] like "*3" };

@id("carol-readonly") @reason("carol reads only")
forbid(principal == Agent::"carol", action == Action::"mcp_tool_call", resource)
when { resource.risk == "high" };
"#;

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` must not run this.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let sizes: Vec<usize> = std::env::var("CAP_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 100]);
    let most = sizes.iter().copied().max().unwrap_or(1);
    let dir = tempfile::tempdir().unwrap();
    // The upstreams, the gateway and the client each on runtimes of their own, as they
    // would be in three processes.
    let upstream_rt = runtime(1);
    let gateway_rt = runtime(2);
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = upstream_rt.block_on(common::upstreams(most));
    let (alice, bob) = (Actor::agent("alice"), Actor::agent("bob"));
    for servers in sizes {
        let tools = servers * TOOLS;
        // Opening a gateway whose tools are all new (every one pinned and registered).
        let opened = Instant::now();
        let host = gateway_host(
            &dir.path().join(format!("g{servers}")),
            POLICY,
            &addr,
            servers,
        );
        println!(
            "tools/open/first/{tools}: {:.1} ms (once)",
            opened.elapsed().as_secs_f64() * 1e3
        );
        let gateway = Arc::new(Gateway::new(Arc::clone(&host), ServeOptions::default()));
        // The policies filter per caller: bob sees fewer.
        let (seen_a, seen_b) = (gateway.list(&alice).len(), gateway.list(&bob).len());
        assert_eq!(seen_a, tools);
        assert!(seen_b < seen_a * 95 / 100, "{seen_b} of {seen_a}");
        // Fewer rounds where a round is long.
        let runs = (20_000 / tools).clamp(20, 300);

        let p = Percentiles::of(
            &mut (0..runs + 3)
                .map(|_| {
                    let t = Instant::now();
                    std::hint::black_box(gateway.list(&bob));
                    t.elapsed().as_nanos()
                })
                .skip(3)
                .collect::<Vec<_>>(),
        );
        p.print(&format!("tools/list/gateway-list/{tools}"));

        // A caller the gateway has not listed for (bob with a scope of his own each
        // time): every tool's policy evaluation, as after a policy or catalog change.
        let mut fresh = 0u64;
        let p = Percentiles::of(
            &mut (0..runs.min(50) + 2)
                .map(|_| {
                    fresh += 1;
                    let caller = Actor::agent("bob").scope(format!("bench-{fresh}"));
                    let t = Instant::now();
                    std::hint::black_box(gateway.list(&caller));
                    t.elapsed().as_nanos()
                })
                .skip(2)
                .collect::<Vec<_>>(),
        );
        p.print(&format!("tools/list/gateway-list-first/{tools}"));

        // The last upstream's first tool (bob may call it: the upstreams hidden from him
        // are u3, u13, …; t0 is never hidden).
        let name = format!("u{}__t0", if servers == 1 { 0 } else { servers - 2 });
        let p = common::measure_calls(2_000, || {
            let r = gateway.call(&name, json!({"message": "hello"}), None, &bob);
            assert_eq!(r["content"][0]["text"], "Echo: hello", "{r}");
        });
        p.print(&format!("tools/call/gateway-call/{tools}"));

        let (_, secret) = host
            .tokens()
            .unwrap()
            .add(&TokenSpec::agent("bob"))
            .unwrap();
        let listener = gateway_rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let served = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = GatewayServer(Arc::clone(&gateway));
        let serving = gateway_rt.spawn(async move {
            server
                .serve_http(listener, async move {
                    let _ = stopped.await;
                })
                .await
        });
        client.block_on(async {
            let mut session = Session::open(&served, &secret).await;
            let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
            let body = session.post_raw(&list).await.unwrap();
            let listed = response_of(&body).unwrap();
            assert_eq!(
                listed["result"]["tools"].as_array().map(Vec::len),
                Some(seen_b),
                "{listed}"
            );
            let p = time_posts(&mut session, &list, 2, runs).await;
            p.print(&format!("tools/list/http/{tools}"));

            let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                              "params": {"name": name, "arguments": {"message": "hello"}}});
            let r = session.post(&call).await.unwrap().unwrap();
            assert_eq!(r["result"]["content"][0]["text"], "Echo: hello", "{r}");
            let p = time_posts(&mut session, &call, 200, 2_000).await;
            p.print(&format!("tools/call/http/{tools}"));
        });
        let _ = stop.send(());
        gateway_rt.block_on(serving).unwrap().unwrap();
        drop(gateway);
        drop(host);
    }
}
