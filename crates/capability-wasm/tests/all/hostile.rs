//! Hostile guests: each tries to cross the WASM boundary, is stopped with an error saying
//! why, and leaves the host unharmed; granted the matching effect, the same guest succeeds
//! where WASI preview 1 allows it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::ErrorKind;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use capability_wasm::effects::{NETWORK_CONNECT, PROCESS_SPAWN};
use capability_wasm::{Grants, Limits, WasmErrorKind, WasmModuleSpec};
use serde_json::{Value, json};

fn err_of(out: &Outcome) -> &capability_wasm::WasmError {
    out.result.as_ref().expect_err("the attack must fail")
}

#[test]
fn read_outside_grant_fails_and_a_read_grant_allows_it() {
    let dir = grant_dir();
    let data = dir.path().display().to_string();
    std::fs::write(dir.path().join("secret.txt"), "top-secret-contents").unwrap();

    for path in [
        format!("{data}/secret.txt"),
        "/etc/passwd".into(),
        "/proc/self/environ".into(),
        "../secret.txt".into(),
    ] {
        let out = attack("read", &path, &Grants::none(), &tight());
        let e = err_of(&out);
        assert_eq!(e.kind(), WasmErrorKind::Guest, "{path}: {e}");
        assert!(e.message().starts_with("read failed:"), "{}", e.message());
        assert!(!e.message().contains("top-secret"));
    }

    // Granted: readable at its host path, and nothing above it.
    let grants = Grants::none().read(dir.path());
    let out = attack("read", &format!("{data}/secret.txt"), &grants, &tight());
    assert_eq!(
        out.result.unwrap(),
        json!({"content": "top-secret-contents"})
    );
    assert_eq!(out.boundary.preopens[1].access, "read");
    assert_eq!(out.boundary.preopens[1].guest, data);
    for escape in [
        format!("{data}/../secret.txt"),
        format!("{data}/../../../../../../etc/hostname"),
        "/etc/hostname".into(),
    ] {
        let out = attack("read", &escape, &grants, &tight());
        assert_eq!(err_of(&out).kind(), WasmErrorKind::Guest, "{escape}");
    }
    assert_follow_up_ok();
}

#[test]
fn write_outside_tmp_fails_and_a_write_grant_allows_it() {
    let dir = grant_dir();
    let data = dir.path().display().to_string();
    let target = dir.path().join("target.txt");
    std::fs::write(&target, "original").unwrap();

    let read_only = Grants::none().read(dir.path());
    for (path, grants) in [
        (format!("{data}/target.txt"), &Grants::none()),
        (format!("{data}/target.txt"), &read_only),
        (format!("{data}/new.txt"), &read_only),
        (format!("/tmp/..{data}/target.txt"), &read_only),
        ("/etc/capability-wasm-pwned".into(), &Grants::none()),
    ] {
        let out = attack("write", &path, grants, &tight());
        let e = err_of(&out);
        assert_eq!(e.kind(), WasmErrorKind::Guest, "{path}: {e}");
        assert!(e.message().starts_with("write failed:"), "{}", e.message());
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original");
    assert!(!dir.path().join("new.txt").exists());
    assert!(!std::path::Path::new("/etc/capability-wasm-pwned").exists());

    let writable = Grants::none().write(dir.path());
    let out = attack("write", &format!("{data}/target.txt"), &writable, &tight());
    assert_eq!(
        out.result.unwrap(),
        json!({"written": format!("{data}/target.txt")})
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "pwned by guest-hostile"
    );
    assert_follow_up_ok();
}

#[test]
fn connect_to_a_loopback_listener_fails_and_the_listener_sees_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();

    for grants in [Grants::none(), Grants::none().effect(NETWORK_CONNECT)] {
        let out = attack("connect", &addr, &grants, &tight());
        let e = err_of(&out);
        assert_eq!(e.kind(), WasmErrorKind::Guest);
        assert!(
            e.message().starts_with("connect failed:"),
            "{}",
            e.message()
        );
        assert!(out.boundary.network.starts_with("none"));
    }
    // Give a stray connection time to arrive before declaring there was none.
    std::thread::sleep(Duration::from_millis(100));
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the listener saw a connection: {other:?}"),
    }

    // The host offers no socket-creating import at all: such a module cannot even link.
    let bytes = wat::parse_file(fixture("sock-open.wat")).unwrap();
    let e = engine()
        .load(&WasmModuleSpec::from_bytes(Arc::<[u8]>::from(bytes)))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::Link);
    assert!(e.message().contains("sock_open"), "{}", e.message());

    // The socket calls preview 1 does have find no socket on any descriptor.
    let module = wat_module(engine(), "sock-accept.wat");
    let out = engine()
        .run(
            &module,
            &capability_wasm::Invocation::execute(Value::Null),
            &Grants::none().effect(NETWORK_CONNECT),
            &tight(),
        )
        .unwrap();
    assert_eq!(out.result.unwrap(), json!("refused"));
    match listener.accept() {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("the listener saw a connection: {other:?}"),
    }
    assert_follow_up_ok();
}

#[test]
fn name_resolution_fails() {
    for name in ["localhost", "example.com"] {
        let out = attack(
            "resolve",
            name,
            &Grants::none().effect(NETWORK_CONNECT),
            &tight(),
        );
        let e = err_of(&out);
        assert_eq!(e.kind(), WasmErrorKind::Guest);
        assert!(
            e.message().starts_with("resolve failed:"),
            "{}",
            e.message()
        );
    }
    assert_follow_up_ok();
}

#[test]
fn process_spawn_fails() {
    let marker = tempfile::tempdir().unwrap();
    let grants = Grants::none().effect(PROCESS_SPAWN);
    for cmd in ["/bin/sh", "touch"] {
        let out = attack("spawn", cmd, &grants, &tight());
        let e = err_of(&out);
        assert_eq!(e.kind(), WasmErrorKind::Guest);
        assert!(e.message().starts_with("spawn failed:"), "{}", e.message());
        assert!(out.boundary.process_spawn.starts_with("none"));
    }
    assert_eq!(std::fs::read_dir(marker.path()).unwrap().count(), 0);

    let bytes = wat::parse_file(fixture("proc-spawn.wat")).unwrap();
    let e = engine()
        .load(&WasmModuleSpec::from_bytes(Arc::<[u8]>::from(bytes)))
        .unwrap_err();
    assert_eq!(e.kind(), WasmErrorKind::Link);
    assert!(e.message().contains("proc_spawn"), "{}", e.message());
    assert_follow_up_ok();
}

const SECRET_VAR: &str = "CAPABILITY_WASM_TEST_API_SECRET";
const SECRET: &str = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0";

/// The test process cannot set a variable without `unsafe` (forbidden here), so the test
/// re-runs itself with the secret in its environment and runs the real check there.
#[test]
fn host_environment_never_reaches_the_guest() {
    if std::env::var(SECRET_VAR).is_err() {
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "hostile::host_environment_never_reaches_the_guest",
                "--exact",
                "--test-threads=1",
            ])
            .env(SECRET_VAR, SECRET)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&child.stdout);
        assert!(
            child.status.success() && stdout.contains("1 passed"),
            "child run failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&child.stderr)
        );
        return;
    }
    assert_eq!(std::env::var(SECRET_VAR).unwrap(), SECRET);

    let out = attack("env", SECRET_VAR, &Grants::none(), &tight());
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::Guest);
    assert!(!e.message().contains(SECRET));
    assert!(!out.stderr.contains(SECRET));
    assert!(out.boundary.env.is_empty());

    // Granted: exactly the host-chosen map, never the host's own environment.
    let grants = Grants::none().env_var(SECRET_VAR, "granted-value");
    let out = attack("env", SECRET_VAR, &grants, &tight());
    let report = serde_json::to_string(&out.boundary).unwrap();
    assert_eq!(
        out.result.unwrap(),
        json!({"value": "granted-value", "all": format!("{SECRET_VAR}=granted-value")})
    );
    assert_eq!(out.boundary.env, vec![SECRET_VAR.to_string()]);
    assert!(
        !report.contains("granted-value"),
        "the report names, never values"
    );
    assert_follow_up_ok();
}

#[test]
fn allocating_8_gib_is_stopped_by_the_memory_limit() {
    let out = attack("alloc", "", &Grants::none(), &tight());
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::MemoryLimit, "{e}");
    assert!(
        e.message().contains("67108864 byte limit"),
        "{}",
        e.message()
    );
    assert_eq!(out.boundary.memory_limit, 64 << 20);

    let module = wat_module(engine(), "grow.wat");
    let out = engine()
        .run(
            &module,
            &capability_wasm::Invocation::execute(Value::Null),
            &Grants::none(),
            &tight(),
        )
        .unwrap();
    assert_eq!(err_of(&out).kind(), WasmErrorKind::MemoryLimit);
    assert_follow_up_ok();
}

#[test]
fn an_infinite_loop_is_stopped_by_fuel() {
    let mut limits = tight();
    limits.boundary.fuel = 50_000_000;
    limits.timeout = Duration::from_secs(60);
    let out = attack("spin", "", &Grants::none(), &limits);
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::OutOfFuel, "{e}");
    assert_eq!(e.to_value()["kind"], "outOfFuel");
    assert_eq!(e.to_value()["code"], "EXECUTION_FAILED");
    assert!(out.fuel_consumed.unwrap() >= 50_000_000 - 1000);

    let module = wat_module(engine(), "spin.wat");
    let out = engine()
        .run(
            &module,
            &capability_wasm::Invocation::execute(Value::Null),
            &Grants::none(),
            &limits,
        )
        .unwrap();
    assert_eq!(err_of(&out).kind(), WasmErrorKind::OutOfFuel);
    assert_follow_up_ok();
}

#[test]
fn an_infinite_loop_is_stopped_by_the_timeout() {
    let mut limits = tight();
    limits.boundary.fuel = u64::MAX / 2;
    limits.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let out = attack("spin", "", &Grants::none(), &limits);
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::Timeout, "{e}");
    assert!(e.message().contains("300 ms"), "{}", e.message());
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");

    let module = wat_module(engine(), "spin.wat");
    let started = Instant::now();
    let out = engine()
        .run(
            &module,
            &capability_wasm::Invocation::execute(Value::Null),
            &Grants::none(),
            &limits,
        )
        .unwrap();
    assert_eq!(err_of(&out).kind(), WasmErrorKind::Timeout);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_follow_up_ok();
}

#[test]
fn sleeping_past_the_deadline_is_stopped_at_once() {
    let started = Instant::now();
    let out = attack("sleep", "", &Grants::none(), &tight());
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::Timeout, "{e}");
    assert!(e.message().contains("sleep 3600"), "{}", e.message());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_follow_up_ok();
}

#[test]
fn filling_tmp_is_stopped_by_the_quota_and_tmp_is_removed() {
    let out = attack("fill", "", &Grants::none(), &tight());
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::TmpQuota, "{e}");
    assert!(
        e.message().contains("4194304 byte /tmp quota"),
        "{}",
        e.message()
    );
    assert!(
        e.message().contains("Quota exceeded (os error 19)"),
        "{}",
        e.message()
    );
    let tmp = &out.boundary.preopens[0];
    assert_eq!(
        (tmp.guest.as_str(), tmp.access.as_str()),
        ("/tmp", "scratch")
    );
    assert!(
        !std::path::Path::new(&tmp.host).exists(),
        "scratch dir must be removed"
    );

    // Within the quota /tmp works, and each run gets a fresh one.
    let out = attack("tmp", "hello", &Grants::none(), &tight());
    assert_eq!(out.result.unwrap(), json!({"roundTrip": "hello"}));
    let out = attack("read", "/tmp/note.txt", &Grants::none(), &tight());
    assert_eq!(err_of(&out).kind(), WasmErrorKind::Guest);

    // No quota, no /tmp.
    let none = Limits {
        tmp_bytes: 0,
        ..tight()
    };
    let out = attack("tmp", "hello", &Grants::none(), &none);
    assert_eq!(err_of(&out).kind(), WasmErrorKind::Guest);
    assert!(out.boundary.preopens.is_empty());
    assert_follow_up_ok();
}

#[test]
fn unbounded_recursion_is_trapped() {
    // Native stack (the engine's max_wasm_stack).
    let module = wat_module(engine(), "recurse.wat");
    let out = engine()
        .run(
            &module,
            &capability_wasm::Invocation::execute(Value::Null),
            &Grants::none(),
            &tight(),
        )
        .unwrap();
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::StackOverflow, "{e}");

    // A Rust guest overflows its shadow stack in linear memory first: a memory fault.
    let out = attack("recurse", "", &Grants::none(), &tight());
    let e = err_of(&out);
    assert!(
        matches!(e.kind(), WasmErrorKind::StackOverflow | WasmErrorKind::Trap),
        "{e}"
    );
    assert_follow_up_ok();
}

#[test]
fn flooding_stdout_is_stopped_by_the_cap() {
    let limits = Limits {
        output_bytes: 1 << 20,
        ..tight()
    };
    let out = attack("flood", "", &Grants::none(), &limits);
    let e = err_of(&out);
    assert_eq!(e.kind(), WasmErrorKind::StdoutLimit, "{e}");
    assert_follow_up_ok();
}
