//! `cargo bench -p capability-openapi`: importing a generated document of 2,000 operations
//! (the reference import and the executable build; time and peak memory), and the per-call
//! overhead of a governed call (plan, authorize, execute through the HTTP executor, verify,
//! receipt) over a plain HTTP request to the same loopback server (p50, p99), and the same
//! request over `https://` (a TLS terminator on loopback in front of that server; the client
//! opens a connection, with a full handshake, per request).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Instant;

use capability_core::authorization::EffectPolicy;
use capability_openapi::executor::Secrets;
use capability_openapi::http::{Outgoing, origin_of};
use capability_openapi::{
    ApiOptions, HttpClient, HttpConfig, ImportOptions, Resolver, build_api, import,
};
use capability_runtime::capability::Capability;
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_test_support::measure::{measure, paired};
use capability_test_support::tls::{self, TestCa};
use serde_json::{Value, json};

mod common;
use common::server;

/// Peak resident memory of the process (a counting allocator would need `unsafe`, which the
/// workspace forbids).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn generated(operations: usize, server: &str) -> Value {
    let mut paths = serde_json::Map::new();
    for i in 0..operations / 2 {
        paths.insert(
            format!("/things{i}/{{id}}"),
            json!({
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                "get": {"operationId": format!("getThing{i}"), "summary": format!("Get thing {i}"),
                    "parameters": [{"name": "q", "in": "query", "schema": {"type": "string"}},
                                   {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}}},
                "put": {"operationId": format!("putThing{i}"),
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}}}
            }),
        );
    }
    json!({"openapi": "3.1.0", "info": {"title": "Big", "version": "1.0.0"},
        "servers": [{"url": server}], "paths": paths,
        "components": {"schemas": {"Thing": {"type": "object", "required": ["id"],
            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "next": {"$ref": "#/components/schemas/Thing"}}}}}})
}

fn main() {
    let addr = server();
    let base = format!("http://{addr}");

    // Import.
    let doc = generated(2000, &base);
    let text = serde_json::to_vec(&doc).unwrap();
    let before = rss_kib();
    let started = Instant::now();
    let parsed = capability_openapi::parse_document(&text).unwrap();
    let imported = import(&parsed, &ImportOptions::default()).unwrap();
    let import_time = started.elapsed();
    assert_eq!(imported.operations.len(), 2000);
    let client = Arc::new(HttpClient::new(HttpConfig::default(), Resolver::System).unwrap());
    let started = Instant::now();
    let api = build_api(
        &parsed,
        &ApiOptions::default(),
        Arc::clone(&client),
        Secrets::default(),
    )
    .unwrap();
    let build_time = started.elapsed();
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .build();
    let started = Instant::now();
    for op in api.operations() {
        let executor: Arc<dyn capability_runtime::executor::Executor> = op.clone();
        runtime
            .register(Capability::with_executor(&op.manifest, executor).unwrap())
            .unwrap();
    }
    let register_time = started.elapsed();
    let after = rss_kib();
    println!(
        "import of 2000 operations ({} KiB JSON): parse+reference import {:.1} ms, executable build {:.1} ms, register {:.1} ms; RSS +{} KiB (peak RSS {} KiB)",
        text.len() / 1024,
        import_time.as_secs_f64() * 1e3,
        build_time.as_secs_f64() * 1e3,
        register_time.as_secs_f64() * 1e3,
        after.saturating_sub(before),
        peak_rss_kib()
    );

    // Per call.
    let n = 2000;
    let input = json!({"path": {"id": 1}, "query": {"q": "x"}});
    let options = ExecuteOptions::approved();
    let url = url::Url::parse(&format!("{base}/things0/1?q=x")).unwrap();
    let allowed = [origin_of(&url).unwrap()];
    let plain = || {
        client
            .send(
                Outgoing {
                    method: "GET".into(),
                    url: url.clone(),
                    headers: Vec::new(),
                    body: None,
                },
                &allowed,
                None,
                &|| false,
            )
            .unwrap()
    };
    let governed = || {
        runtime
            .invoke("big/getthing0", input.clone(), &options)
            .unwrap()
    };
    let (p, g) = paired(
        ("plain HTTP request (same client)", "governed call"),
        200,
        n,
        || {
            plain();
        },
        || {
            governed();
        },
    );
    println!(
        "overhead of a governed call: p50 {:.0} µs, p99 {:.0} µs ({n} calls each)",
        (g.p50 - p.p50) / 1000.0,
        (g.p99 - p.p99) / 1000.0
    );

    // The same request over TLS.
    let ca = TestCa::new("bench CA");
    let front = tls::front(ca.server(&["127.0.0.1"]), addr);
    let tls_client = HttpClient::new(
        HttpConfig {
            extra_roots_pem: Some(ca.pem()),
            ..HttpConfig::default()
        },
        Resolver::System,
    )
    .unwrap();
    let tls_url = url::Url::parse(&format!("https://{front}/things0/1?q=x")).unwrap();
    let tls_allowed = [origin_of(&tls_url).unwrap()];
    let tls = || {
        tls_client
            .send(
                Outgoing {
                    method: "GET".into(),
                    url: tls_url.clone(),
                    headers: Vec::new(),
                    body: None,
                },
                &tls_allowed,
                None,
                &|| false,
            )
            .unwrap()
    };
    measure(
        &format!(
            "https request (handshake per request, through a loopback TLS terminator, {n} requests)"
        ),
        100,
        n,
        || {
            tls();
        },
    );
}
