//! Resources: an 8 GiB allocation, an endless loop (wall clock and cpu time), each stopped
//! with an error naming the limit, and the host still answers afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::common::{ALL, Package, assert_host_alive, assert_no_stray_processes, limits};
use capability_sandbox::{Grants, Limits, SandboxError};
use serde_json::json;

#[test]
fn allocating_8_gib_hits_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 512 << 20,
        ..limits()
    };
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(json!({"action": "alloc"}), &Grants::none(), &limits);
        match &out.result {
            Err(SandboxError::MemoryLimit { limit, detail }) => {
                assert_eq!(*limit, 512 << 20);
                assert!(!detail.is_empty());
            }
            other => panic!(
                "{lang:?}: expected a memory limit, got {other:?}\nstderr: {}",
                out.stderr
            ),
        }
        assert_eq!(out.result.as_ref().unwrap_err().kind(), "memory_limit");
        assert_host_alive(lang);
    }
}

#[test]
fn an_endless_loop_is_killed_at_the_wall_clock_limit() {
    let limits = Limits {
        timeout: Duration::from_millis(1500),
        ..limits()
    };
    for lang in ALL {
        let stem = format!("loop-{}-{lang:?}", std::process::id()).to_lowercase();
        let pkg = Package::named(lang, &stem);
        let started = Instant::now();
        let out = pkg.run(json!({"action": "loop"}), &Grants::none(), &limits);
        let elapsed = started.elapsed();
        assert!(
            matches!(out.result, Err(SandboxError::Timeout { limit }) if limit == Duration::from_millis(1500)),
            "{lang:?}: {:?}",
            out.result
        );
        assert!(
            elapsed >= Duration::from_millis(1400) && elapsed < Duration::from_secs(6),
            "{lang:?}: {elapsed:?}"
        );
        assert_no_stray_processes(&stem, Duration::from_secs(5));
        assert_host_alive(lang);
    }
}

#[test]
fn an_endless_loop_is_killed_at_the_cpu_limit() {
    let mut limits = limits();
    limits.boundary.cpu_time = Duration::from_secs(1);
    limits.timeout = Duration::from_secs(30);
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(json!({"action": "loop"}), &Grants::none(), &limits);
        assert!(
            matches!(out.result, Err(SandboxError::CpuLimit { .. })),
            "{lang:?}: {:?}\nstderr: {}",
            out.result,
            out.stderr
        );
        assert_eq!(out.result.as_ref().unwrap_err().kind(), "cpu_limit");
    }
}
