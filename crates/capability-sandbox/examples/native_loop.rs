//! Runs a native module in the process sandbox in a loop, for profiling:
//! `cargo run --release -p capability-sandbox --example native_loop -- 200 /path/to/binary`.
//! The binary must answer the native protocol (the hostile fixture does, compiled with gcc).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use capability_sandbox::{Grants, Invocation, Limits, ModuleSpec, ProcessLimits, run_module};
use serde_json::json;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let bin = PathBuf::from(std::env::args().nth(2).expect("the native binary"));
    let spec = ModuleSpec {
        package_root: bin.parent().unwrap().to_path_buf(),
        install_root: None,
        module: format!("./{}", bin.file_name().unwrap().to_string_lossy()),
        integrity: None,
        manifest: json!({"id": "bench/native"}),
    };
    let limits = Limits {
        timeout: Duration::from_secs(30),
        ..Limits::<ProcessLimits>::default()
    };
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let out = run_module(
            &spec,
            &Invocation::execute(json!({"action": "ok"})),
            &Grants::none(),
            &limits,
        )
        .unwrap();
        assert!(out.result.is_ok(), "{:?}", out.result);
        samples.push(t.elapsed());
    }
    samples.sort_unstable();
    println!(
        "native: p50 {:.2} ms, min {:.2} ms over {n} runs",
        samples[n / 2].as_secs_f64() * 1e3,
        samples[0].as_secs_f64() * 1e3
    );
}
