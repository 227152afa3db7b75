//! Every case of `testdata/vectors/package-declaration.json`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;

use capability_core::validate::validate_package_declaration;

#[test]
fn package_declaration_vectors_match_the_reference() {
    validation_support::check_issue_cases(
        "package-declaration.json",
        108,
        "declaration",
        |d, _| validate_package_declaration(d),
    );
}
