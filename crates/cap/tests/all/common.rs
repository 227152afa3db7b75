//! Helpers shared by the `cap` integration tests: run the binary with a capability home and
//! read its JSON output.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

use capability_test_support::http::{announced_url, authority};
pub use capability_test_support::http::{http, set_cookies};
pub use capability_test_support::process::Running;
pub use capability_test_support::registry::fixture;
pub use capability_test_support::vectors::load as vectors;
use serde_json::Value;

/// Runs `cap` with `CAP_HOME` set to `home`.
pub fn cap(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home)
        .args(args)
        .output()
        .unwrap()
}

/// Runs `cap` with `CAP_HOME` set to `home` and its trusted TLS roots taken from `ca_file`
/// alone (`SSL_CERT_FILE`), or from the system when `None`.
pub fn cap_with_roots(home: &Path, ca_file: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cap"));
    command.env("CAP_HOME", home).env_remove("SSL_CERT_DIR");
    match ca_file {
        Some(file) => command.env("SSL_CERT_FILE", file),
        None => command.env_remove("SSL_CERT_FILE"),
    };
    command.args(args).output().unwrap()
}

/// Asserts that `cap` exited with status 0, showing what it printed otherwise.
pub fn succeeded(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON `cap` printed (a record, which may hold accepted values a few levels down), or a
/// panic showing stdout and stderr.
pub fn stdout_json(out: &Output) -> Value {
    capability_core::json::parse_record(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `cap serve` on a free loopback port with `args`; the child (killed when dropped) and its
/// `host:port`.
pub fn serve(home: &Path, args: &[&str]) -> (Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = authority(&announced_url(&mut child));
    (Running(child), addr)
}
