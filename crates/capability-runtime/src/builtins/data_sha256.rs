//! `data/sha256`: the canonical SHA-256 of any JSON value (the reference `sha256(value)`:
//! lowercase hex SHA-256 of the canonical JSON, see `capability_core::json`).

use capability_core::json::canonical_hash;
use serde_json::{Value, json};

use super::BuiltinError;
use super::common::member;

/// Runs `data/sha256` on `{value}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    match member(Some(input), "value")? {
        Some(value) => Ok(json!({ "sha256": canonical_hash(value) })),
        // `stableStringify(undefined)` is `undefined`, which the hash refuses.
        None => Err(BuiltinError::type_error(
            "The \"data\" argument must be of type string or an instance of Buffer, TypedArray, \
             or DataView. Received undefined",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn hashes_the_canonical_form() {
        let a = execute(&json!({"value": {"b": 1, "a": [1, "x"]}})).unwrap();
        let b = execute(&json!({"value": {"a": [1, "x"], "b": 1}})).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            execute(&json!({"value": {"a": 1}})).unwrap()["sha256"]
                .as_str()
                .unwrap()
                .len(),
            64
        );
        assert!(execute(&json!({})).is_err());
    }
}
