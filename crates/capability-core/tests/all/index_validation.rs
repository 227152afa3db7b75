//! Every case of `testdata/vectors/index-validation.json`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;

use capability_core::validate::validate_index;

#[test]
fn index_validation_vectors_match_the_reference() {
    validation_support::check_issue_cases("index-validation.json", 147, "document", |d, _| {
        validate_index(d)
    });
}
