//! Every case of `testdata/vectors/manifest-validation.json`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;

use capability_core::validate::validate_manifest;

#[test]
fn manifest_validation_vectors_match_the_reference() {
    validation_support::check_issue_cases("manifest-validation.json", 468, "manifest", |m, _| {
        validate_manifest(m)
    });
}
