//! Every case of `testdata/vectors/bridge-validation.json`, and its `generatorCases` (the
//! npm CLI bridge descriptor generator).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;
use capability_test_support::vectors::load;

use capability_core::json;
use capability_core::published::{PublishedSchema, validate_published};
use capability_core::validate::{
    NpmCliBridgeOptions, NpmPackageInspection, create_npm_cli_bridge_descriptor, validate_bridge,
};

#[test]
fn bridge_validation_vectors_match_the_reference() {
    validation_support::check_issue_cases("bridge-validation.json", 43, "document", |d, _| {
        validate_bridge(d)
    });
}

#[test]
fn bridge_generator_vectors_match_the_reference() {
    let doc = load("bridge-validation.json");
    let cases = validation_support::array(&doc, "generatorCases", 9);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let label = case["label"].as_str().unwrap_or("");
        let inspection = NpmPackageInspection::from_json(&case["inspection"]).unwrap();
        let options = NpmCliBridgeOptions::from_json(&case["options"]).unwrap();
        let got = create_npm_cli_bridge_descriptor(&inspection, &options);
        match (got, case.get("descriptor"), case.get("error")) {
            (Ok(descriptor), Some(expected), None) => {
                // Pretty JSON compares member order too.
                let (got_text, expected_text) = (
                    json::to_pretty_string(&descriptor),
                    json::to_pretty_string(expected),
                );
                if got_text != expected_text {
                    failures.push(format!(
                        "case {i} ({label})\n  got      {got_text}\n  expected {expected_text}"
                    ));
                }
                // A generated descriptor is valid for the runtime and the published schema.
                let issues = validate_bridge(&descriptor);
                let schema_issues = validate_published(PublishedSchema::Bridge, &descriptor);
                if !issues.is_empty() || !schema_issues.is_empty() {
                    failures.push(format!(
                        "case {i} ({label}): generated descriptor is invalid: {issues:?} {schema_issues:?}"
                    ));
                }
            }
            (Err(error), None, Some(expected)) => {
                if expected["name"] != "Error" || error.to_string() != expected["message"] {
                    failures.push(format!(
                        "case {i} ({label})\n  got error {error}\n  expected  {expected}"
                    ));
                }
            }
            (got, descriptor, error) => failures.push(format!(
                "case {i} ({label})\n  got      {got:?}\n  expected {descriptor:?} / {error:?}"
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
