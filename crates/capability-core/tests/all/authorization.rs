//! Every case of `authorization.json`: effect authorization under the three presets and
//! custom policies with `*` and prefix patterns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::authorization::{EffectPolicy, Preset, authorize_effects};
use capability_core::json;
use serde_json::Value;

#[test]
fn authorization_decisions_match_the_reference() {
    let path = format!(
        "{}/../../testdata/vectors/authorization.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let doc = json::parse(&std::fs::read(path).unwrap()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 822);
    let mut failures = Vec::new();
    let mut presets = 0;
    for (i, case) in cases.iter().enumerate() {
        let policy: EffectPolicy = serde_json::from_value(case["policy"].clone()).unwrap();
        if let Some(name) = case.get("preset").and_then(Value::as_str) {
            presets += 1;
            let preset = Preset::parse(name).unwrap_or_else(|| panic!("unknown preset {name}"));
            assert_eq!(
                preset.policy(),
                policy,
                "case {i}: preset {name} differs from the reference's"
            );
        }
        let effects: Vec<String> = case["effects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap().to_string())
            .collect();
        let decision = authorize_effects(&effects, &policy, case["approved"] == true);
        if decision.to_value() != case["decision"] {
            failures.push(format!("case {i}: {:?}", decision));
        }
    }
    assert!(presets > 0);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
