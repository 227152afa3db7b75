//! Processes: no child process without `process.spawn`; a fork bomb is stopped (by seccomp
//! without the grant, by the pid limit with it), and nothing is left running on the host.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use crate::common::{
    ALL, Lang, Package, assert_host_alive, assert_no_stray_processes, guest_error, limits,
    ok_output,
};
use capability_sandbox::{Grants, SandboxError};
use serde_json::json;

#[test]
fn spawning_fails_without_the_grant_and_works_with_it() {
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(json!({"action": "spawn"}), &Grants::none(), &limits());
        let (code, message) = guest_error(&out);
        assert!(
            matches!(code.as_str(), "EPERM" | "EACCES"),
            "{lang:?}: {code} {message}"
        );
        assert!(!out.boundary.process_spawn);
        let out = pkg.run(
            json!({"action": "spawn"}),
            &Grants::none().effect("process.spawn"),
            &limits(),
        );
        assert_eq!(ok_output(&out)["stdout"], "spawned", "{lang:?}");
        assert!(out.boundary.process_spawn);
    }
}

#[test]
fn a_fork_bomb_without_the_grant_is_refused_at_the_first_fork() {
    for lang in ALL {
        let stem = format!("bomb-{}-{lang:?}", std::process::id()).to_lowercase();
        let pkg = Package::named(lang, &stem);
        let out = pkg.run(json!({"action": "forkbomb"}), &Grants::none(), &limits());
        let (code, message) = guest_error(&out);
        assert!(
            matches!(code.as_str(), "EPERM" | "EACCES"),
            "{lang:?}: {code} {message}"
        );
        assert_no_stray_processes(&stem, Duration::from_secs(5));
    }
    assert_host_alive(Lang::Native);
}

#[test]
fn a_granted_fork_bomb_hits_the_pid_limit_and_the_tree_dies() {
    let stem = format!("granted-bomb-{}", std::process::id());
    let pkg = Package::named(Lang::Native, &stem);
    let mut limits = limits();
    limits.boundary.max_pids = 32;
    limits.timeout = Duration::from_secs(20);
    let started = Instant::now();
    let out = pkg.run(
        json!({"action": "forkbomb"}),
        &Grants::none().effect("process.spawn"),
        &limits,
    );
    let pids = out.boundary.limit("maxPids").unwrap().clone();
    assert!(pids.enforced, "{pids:?}");
    match &out.result {
        // A pids cgroup (or the uid-0 watchdog) stops the tree at the limit.
        Err(SandboxError::PidLimit { limit }) => assert_eq!(*limit, 32),
        other if out.boundary.cgroup != "unavailable" => {
            panic!("with a pids cgroup the bomb must end in PidLimit, got {other:?}")
        }
        // Unprivileged RLIMIT_NPROC: fork fails with EAGAIN and the bomb's root reports it.
        Err(SandboxError::Guest(g)) => assert_eq!(g.code.as_deref(), Some("EAGAIN"), "{g:?}"),
        other => panic!("fork bomb not stopped by the pid limit: {other:?} ({pids:?})"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    assert_no_stray_processes(&stem, Duration::from_secs(5));
    assert_host_alive(Lang::Native);
}

#[test]
fn a_granted_python_fork_bomb_is_stopped_too() {
    let stem = format!("py-bomb-{}", std::process::id());
    let pkg = Package::named(Lang::Py, &stem);
    let mut limits = limits();
    limits.boundary.max_pids = 32;
    let out = pkg.run(
        json!({"action": "forkbomb"}),
        &Grants::none().effect("process.spawn"),
        &limits,
    );
    match &out.result {
        Err(SandboxError::PidLimit { limit }) => assert_eq!(*limit, 32),
        Err(SandboxError::Guest(g)) if out.boundary.cgroup == "unavailable" => {
            assert_eq!(g.code.as_deref(), Some("EAGAIN"), "{g:?}")
        }
        other => panic!("python fork bomb not stopped by the pid limit: {other:?}"),
    }
    assert_no_stray_processes(&stem, Duration::from_secs(5));
}
