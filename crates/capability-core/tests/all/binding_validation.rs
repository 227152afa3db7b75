//! Every case of `testdata/vectors/binding-validation.json`, with the registered binder
//! `expected` (or none).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;

use capability_core::validate::validate_binding;
use serde_json::Value;

#[test]
fn binding_validation_vectors_match_the_reference() {
    validation_support::check_issue_cases("binding-validation.json", 234, "binding", |b, case| {
        let expected = match &case["expected"] {
            Value::Null => None,
            e => Some((
                e["id"].as_str().expect("expected.id"),
                e["substrate"].as_str().expect("expected.substrate"),
            )),
        };
        validate_binding(b, expected)
    });
}
