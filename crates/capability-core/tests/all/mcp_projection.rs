//! Every case of `testdata/vectors/mcp-projection.json`: the projection of manifests as MCP
//! tools (exact descriptors, member order included) and the fixed bootstrap tool list.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::json;
use capability_core::manifest::Manifest;
use capability_core::mcp::{BOOTSTRAP_TOOL_NAMES, bootstrap_tools, to_mcp_tool};
use capability_test_support::vectors::load;
use serde_json::Value;

/// Member names of an object, in order (projection order is part of the contract: tools are
/// printed as pretty JSON by the CLI and the MCP server).
fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn mcp_projection_vectors_match_the_reference() {
    let doc = load("mcp-projection.json");
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 95, "number of cases");
    let mut projections = 0;
    let mut bootstrap = 0;
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        match case["kind"].as_str() {
            Some("projection") => {
                projections += 1;
                let manifest = match Manifest::from_value(&case["manifest"]) {
                    Ok(m) => m,
                    Err(e) => {
                        failures.push(format!("#{i} {}: manifest refused: {e}", case["label"]));
                        continue;
                    }
                };
                let tool = to_mcp_tool(&manifest);
                let expected = &case["tool"];
                if &tool != expected {
                    failures.push(format!(
                        "#{i} {}:\n  expected {}\n  actual   {}",
                        case["label"],
                        json::to_js_string(expected),
                        json::to_js_string(&tool)
                    ));
                } else if keys(&tool) != keys(expected) {
                    failures.push(format!(
                        "#{i} {}: member order {:?}, expected {:?}",
                        case["label"],
                        keys(&tool),
                        keys(expected)
                    ));
                }
            }
            Some("bootstrapTools") => {
                bootstrap += 1;
                let expected = case["tools"].as_array().unwrap();
                let names: Vec<&str> = expected.iter().filter_map(|t| t["name"].as_str()).collect();
                if names != BOOTSTRAP_TOOL_NAMES {
                    failures.push(format!(
                        "#{i}: locked names {BOOTSTRAP_TOOL_NAMES:?}, vector {names:?}"
                    ));
                }
                let actual = bootstrap_tools();
                if actual.len() != expected.len() {
                    failures.push(format!(
                        "#{i}: {} bootstrap tools, expected {}",
                        actual.len(),
                        expected.len()
                    ));
                }
                for (a, e) in actual.iter().zip(expected) {
                    if a != e || keys(a) != keys(e) {
                        failures.push(format!(
                            "#{i} bootstrap tool {}:\n  expected {}\n  actual   {}",
                            e["name"],
                            json::to_js_string(e),
                            json::to_js_string(a)
                        ));
                    }
                }
            }
            other => failures.push(format!("#{i}: unknown kind {other:?}")),
        }
    }
    assert_eq!((projections, bootstrap), (94, 1), "cases per kind");
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
