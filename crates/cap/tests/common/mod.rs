//! Helpers shared by the `cap` integration tests: run the binary with a capability home and
//! read its JSON output.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// A vector file from `testdata/vectors/`.
pub fn vectors(name: &str) -> Value {
    let path = format!(
        "{}/../../testdata/vectors/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    capability_core::json::parse(&std::fs::read(path).unwrap()).unwrap()
}

/// The reference's add fixture package.
pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/add-package/package.json")
}
