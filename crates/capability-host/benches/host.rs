//! `Host::invoke` of `text/slugify` with the durable stores (one SQLite database, one
//! writer, crash journals) and 100 Cedar policies: the path every surface takes.
//!
//! `cargo bench -p capability-host --bench host` prints p50/p99 over individually timed
//! calls beside criterion's mean.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Instant;

use capability_host::{Host, HostConfig, Outcome, Request};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

/// 100 policies: one permit and 99 forbids that name other capabilities or inputs, so
/// every one is considered and none denies the benchmarked call.
fn policies() -> String {
    let mut text = String::from("@id(\"allow-all\") permit(principal, action, resource);\n");
    for i in 0..99 {
        if i % 3 == 0 {
            text.push_str(&format!(
                "@id(\"other-{i}\") forbid(principal, action, resource == Capability::\"svc/c{i}\");\n"
            ));
        } else {
            text.push_str(&format!(
                "@id(\"text-{i}\") @reason(\"blocked word\")\nforbid(principal, action, resource) when {{ context.input has text && context.input.text like \"*blocked{i}*\" }};\n"
            ));
        }
    }
    text
}

fn percentiles(name: &str, mut f: impl FnMut()) {
    for _ in 0..1_000 {
        f();
    }
    let mut samples: Vec<u128> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos()
        })
        .collect();
    samples.sort_unstable();
    let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "{name}: p50 {:.2} µs, p99 {:.2} µs",
        p(0.50) as f64 / 1000.0,
        p(0.99) as f64 / 1000.0
    );
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policies.cedar");
    std::fs::write(&file, policies()).unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        policies: vec![file],
        ..HostConfig::default()
    })
    .unwrap();
    let request = Request::new("text/slugify", json!({"text": "Hello Capability World"}));
    let mut call = || match host.invoke(&request) {
        Outcome::Completed(r) => {
            std::hint::black_box(r);
        }
        other => panic!("{other:?}"),
    };
    percentiles(
        "host invoke text/slugify, durable, 100 Cedar policies",
        &mut call,
    );
    c.bench_function("host_invoke_slugify_durable_100_policies", |b| {
        b.iter(&mut call)
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
