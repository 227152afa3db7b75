//! Runs the governed invoke (100 Cedar policies, memory stores) in a loop, for profiling:
//! `cargo run --release -p capability-runtime --example governed_loop -- 10000`.
//!
//! A second argument picks the case: `memory` (default), `sqlite` (durable stores in a
//! temporary directory), `ungoverned` (the same runtime without a governor: the floor the
//! governance layer adds to).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use capability_policy::MemoryStore;
use capability_runtime::store::MemoryReceiptStore;
use capability_runtime::{Caller, ExecuteOptions};
use capability_test_support::governed::{self as support, runtime};
use serde_json::json;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let case = std::env::args().nth(2).unwrap_or_else(|| "memory".into());
    let home = tempfile::tempdir().unwrap();
    let rt = match case.as_str() {
        "memory" => runtime(
            Arc::new(MemoryReceiptStore::new()),
            Some(Arc::new(MemoryStore::new())),
        ),
        "sqlite" => {
            let (receipts, audit) = support::durable(home.path());
            runtime(receipts, Some(audit))
        }
        "ungoverned" => runtime(Arc::new(MemoryReceiptStore::new()), None),
        other => panic!("unknown case `{other}` (memory, sqlite, ungoverned)"),
    };
    let options = ExecuteOptions {
        caller: Some(Caller::from(
            capability_policy::Actor::default().tenant("acme"),
        )),
        ..Default::default()
    };
    let input = json!({"a": 20, "b": 22, "tenant": "acme"});
    let started = std::time::Instant::now();
    for _ in 0..n {
        rt.invoke("svc/c7", input.clone(), &options).unwrap();
    }
    println!(
        "{case}: {:.2} µs per invoke",
        started.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
