//! Every case of `testdata/vectors/canonical-json.json`, checked byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::json;
use capability_test_support::vectors::load;

#[test]
fn canonical_json_vectors_match_the_reference() {
    let doc = load("canonical-json.json");
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 512);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let input = case["input"].as_str().unwrap();
        let expected = case["canonical"].as_str().unwrap();
        let sha = case["sha256"].as_str().unwrap();
        match json::canonical_text(input.as_bytes()) {
            Ok(got) => {
                if got != expected || json::sha256_hex(got.as_bytes()) != sha {
                    failures.push(format!(
                        "case {i}: {input:?}\n  got      {got:?}\n  expected {expected:?}"
                    ));
                }
            }
            Err(e) => failures.push(format!("case {i}: {input:?}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
