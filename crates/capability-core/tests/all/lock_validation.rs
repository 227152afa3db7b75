//! Every case of `testdata/vectors/lock-validation.json`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;

use capability_core::validate::validate_lock;

#[test]
fn lock_validation_vectors_match_the_reference() {
    validation_support::check_issue_cases("lock-validation.json", 82, "document", |d, _| {
        validate_lock(d)
    });
}
