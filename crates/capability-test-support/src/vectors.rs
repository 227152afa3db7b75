//! The repository's shared test data (`testdata/`): the reference vectors
//! (`testdata/vectors/*.json`) and the other files beside them, parsed with the runtime's own
//! `JSON.parse`-compatible parser (key order kept).

use std::path::PathBuf;

use capability_core::json;
use serde_json::Value;

/// The path of `testdata/<relative>` in the repository.
pub fn testdata(relative: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata")).join(relative)
}

/// Reads and parses `testdata/<relative>`; panics naming the file when it cannot.
pub fn load_testdata(relative: &str) -> Value {
    let path = testdata(relative);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    json::parse(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// Reads and parses the reference vector file `testdata/vectors/<name>`.
pub fn load(name: &str) -> Value {
    load_testdata(&format!("vectors/{name}"))
}
