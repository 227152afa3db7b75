//! Every case of `testdata/vectors/site-validation.json`, and its `discoveryUrls`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::validation_support;
use capability_test_support::vectors::load;

use capability_core::validate::{site_discovery_urls, validate_site};

#[test]
fn site_validation_vectors_match_the_reference() {
    validation_support::check_issue_cases("site-validation.json", 118, "document", |d, _| {
        validate_site(d)
    });
}

#[test]
fn site_discovery_urls_match_the_reference() {
    let doc = load("site-validation.json");
    let cases = validation_support::array(&doc, "discoveryUrls", 7);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let site = case["site"].as_str().unwrap();
        let expected: Vec<&str> = case["urls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap())
            .collect();
        match site_discovery_urls(site) {
            Ok(urls) if urls.iter().map(String::as_str).eq(expected.iter().copied()) => {}
            got => failures.push(format!(
                "case {i}: {site:?}\n  got      {got:?}\n  expected {expected:?}"
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
