//! Every case of `plan-fingerprint.json`: input hashes and plan fingerprints, computed both
//! by the plan builder (direct canonical writer) and generically over the plan document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::json::canonical_hash;
use capability_core::plan::{CapabilityRef, Plan};
use capability_test_support::vectors::load;

#[test]
fn plan_fingerprints_match_the_reference() {
    let doc = load("plan-fingerprint.json");
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 79);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let p = &case["plan"];
        let expected = case["fingerprint"].as_str().unwrap();
        let input_hash = case["inputHash"].as_str().unwrap();
        // Generic: the canonical hash of the plan document without its fingerprint.
        if canonical_hash(p) != expected || canonical_hash(&p["input"]) != input_hash {
            failures.push(format!("case {i}: generic hash differs"));
            continue;
        }
        // Built: the plan builder's direct writer must agree byte for byte.
        let built = Plan::build(
            p["planId"].as_str().unwrap().into(),
            CapabilityRef {
                id: p["capability"]["id"].as_str().unwrap().into(),
                version: p["capability"]["version"].as_str().unwrap().into(),
            },
            p["input"].clone(),
            p["effects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e.as_str().unwrap().to_string())
                .collect(),
            p["summary"].as_str().unwrap().into(),
            p["createdAt"].as_str().unwrap().into(),
            p.get("data").cloned(),
        );
        if built.input_hash != input_hash || built.fingerprint != expected {
            failures.push(format!(
                "case {i}: built plan {} / {}",
                built.input_hash, built.fingerprint
            ));
            continue;
        }
        built.verify_integrity().unwrap();
        // Round trip through the document form keeps the fingerprint valid.
        let reread = Plan::from_value(&built.to_value()).unwrap();
        reread.verify_integrity().unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
