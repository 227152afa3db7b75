//! Runs a native module through the runtime with a sandbox pool, spaced as calls to a server
//! are, for profiling: `cargo run --release -p capability-sandbox --example native_pool --
//! 20 /path/to/binary [pool]` (`pool` 0 starts a fresh sandbox per op). The binary must
//! answer the native protocol (the hostile fixture does, compiled with gcc).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use capability_runtime::capability::{Capability, ModuleSource};
use serde_json::json;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let bin = PathBuf::from(args.next().expect("the native binary"));
    let pool: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let mut executor =
        capability_sandbox::ModuleExecutor::new(capability_sandbox::ExecutorChoice::Process);
    if pool > 0 {
        executor = executor.with_pool(pool);
    }
    let runtime = capability_runtime::CapabilityRuntime::builder()
        .policy(capability_core::authorization::EffectPolicy::permissive())
        .executor(std::sync::Arc::new(executor))
        .build();
    let manifest = json!({"specVersion": "0.1", "id": "bench/native", "version": "1.0.0",
        "name": "Native", "description": "Answers ok.", "effects": []});
    let source = ModuleSource {
        package_root: bin.parent().unwrap().to_path_buf(),
        module: format!("./{}", bin.file_name().unwrap().to_string_lossy()),
        integrity: None,
    };
    runtime
        .register(Capability::module(&manifest, source).unwrap())
        .unwrap();
    let options = capability_runtime::ExecuteOptions::approved();
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(400));
        let t = Instant::now();
        let receipt = runtime
            .invoke("bench/native", json!({"action": "ok"}), &options)
            .unwrap();
        samples.push(t.elapsed());
        assert!(receipt.output.is_some());
    }
    samples.sort_unstable();
    println!(
        "native through the runtime (pool {pool}): p50 {:.2} ms, min {:.2} ms over {n} runs",
        samples[n / 2].as_secs_f64() * 1e3,
        samples[0].as_secs_f64() * 1e3
    );
}
