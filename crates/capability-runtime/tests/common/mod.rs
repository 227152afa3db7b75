//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;

/// Loads a vector file from `testdata/vectors/`.
pub fn vectors(name: &str) -> Value {
    let path = format!(
        "{}/../../testdata/vectors/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    capability_core::json::parse(&bytes).unwrap()
}
