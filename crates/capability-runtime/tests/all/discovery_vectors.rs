//! Every case of `discovery.json`: registry discovery (with the exact-id bonus) and index
//! discovery, scores, reasons, filters, limits and ICU-collation tie-breaks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_test_support::vectors::load;

use capability_core::discovery::DiscoveryQuery;
use capability_core::index::{discover_index, index_entries};
use capability_runtime::{Capability, CapabilityRegistry};
use serde_json::{Value, json};

#[test]
fn discovery_vectors_match_the_reference() {
    let doc = load("discovery.json");
    let registry = CapabilityRegistry::new();
    for m in doc["manifests"].as_array().unwrap() {
        registry.register(Capability::inert(m).unwrap()).unwrap();
    }
    let entries = index_entries(&doc["index"]);
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 176);
    let mut failures = Vec::new();
    let (mut reg, mut idx) = (0, 0);
    for (i, case) in cases.iter().enumerate() {
        let query = DiscoveryQuery::from_value(&case["query"]);
        let got: Vec<Value> = match case["kind"].as_str().unwrap() {
            "registry" => {
                reg += 1;
                registry
                    .discover(&query)
                    .into_iter()
                    .map(|d| json!({"id": d.capability.id(), "score": d.score as u64, "reasons": d.reasons}))
                    .collect()
            }
            "index" => {
                idx += 1;
                discover_index(&entries, &query)
                    .into_iter()
                    .map(|h| {
                        json!({
                            "package": h.item.package_ref(),
                            "id": h.item.manifest.id,
                            "version": h.item.manifest.version,
                            "score": h.score,
                            "reasons": h.reasons,
                        })
                    })
                    .collect()
            }
            other => panic!("unknown kind {other}"),
        };
        if Value::Array(got.clone()) != case["results"] {
            failures.push(format!(
                "case {i} {}: {}\n  got      {}\n  expected {}",
                case["kind"],
                case["query"],
                Value::Array(got),
                case["results"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("discovery: {reg} registry cases, {idx} index cases");
}
