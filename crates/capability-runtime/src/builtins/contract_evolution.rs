//! `capability/contract-evolution`: what kind of release a manifest change is (the reference
//! `assessCapabilityEvolution(previous, next)`).
//!
//! The change is certified as a substitution (without trust data). A rejected substitution
//! is `breaking` / `major`; one that removes effects is `authority-reducing` / `minor`;
//! otherwise the insertion-order `JSON.stringify` of `input`, `output`, `effects` and
//! `behavior` decides between `safe-patch` / `patch` (all equal) and `review-required` /
//! `minor` (so merely reordering keys needs review).

use capability_core::json::to_js_string;
use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{join, js_to_string, member, strict_eq};
use super::substitution_certificate::certify;

/// `JSON.stringify(manifest[key] ?? fallback)`.
fn contract_json(manifest: &Value, key: &str, fallback: &str) -> String {
    match manifest.get(key) {
        None | Some(Value::Null) => fallback.to_string(),
        Some(value) => to_js_string(value),
    }
}

/// The reference `assessCapabilityEvolution(previous, next)`.
pub fn assess(previous: &Value, next: &Value) -> Result<Value, BuiltinError> {
    let substitution = certify(previous, next, None, None)?;
    let mut changes: Vec<String> = Vec::new();
    let (old_version, new_version) = (previous.get("version"), next.get("version"));
    if !strict_eq(old_version, new_version) {
        changes.push(format!(
            "version {} -> {}",
            js_to_string(old_version),
            js_to_string(new_version)
        ));
    }
    if !substitution.removed.is_empty() {
        changes.push(format!(
            "authority reduced: {}",
            join(&substitution.removed, ", ")
        ));
    }
    if !substitution.added.is_empty() {
        changes.push(format!(
            "authority expanded: {}",
            join(&substitution.added, ", ")
        ));
    }
    changes.extend(
        substitution
            .behavior_regressions
            .iter()
            .map(|s| (*s).to_string()),
    );
    changes.extend(substitution.contract_breaking.iter().cloned());

    let (classification, semver) = if !substitution.accepted {
        ("breaking", "major")
    } else if !substitution.removed.is_empty() {
        ("authority-reducing", "minor")
    } else {
        let same_contract = [
            ("input", "null"),
            ("output", "null"),
            ("effects", "[]"),
            ("behavior", "{}"),
        ]
        .iter()
        .all(|(key, fallback)| {
            contract_json(previous, key, fallback) == contract_json(next, key, fallback)
        });
        if same_contract {
            ("safe-patch", "patch")
        } else {
            ("review-required", "minor")
        }
    };

    let mut out = Map::new();
    out.insert("classification".into(), classification.into());
    out.insert("semverRecommendation".into(), semver.into());
    out.insert("substitution".into(), substitution.to_value());
    out.insert(
        "changes".into(),
        Value::Array(changes.into_iter().map(Value::from).collect()),
    );
    Ok(Value::Object(out))
}

/// Runs `capability/contract-evolution` on `{previous, next}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let previous = member(Some(input), "previous")?;
    let next = input.get("next");
    match (previous, next) {
        (Some(previous), Some(next)) => assess(previous, next),
        _ => Err(BuiltinError::type_error(
            "Cannot read properties of undefined (reading 'input')",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m() -> Value {
        json!({"id": "demo/process", "version": "1.0.0",
            "input": {"type": "object", "properties": {"value": {"type": "string"}},
                "required": ["value"]},
            "output": {"type": "object", "properties": {"result": {"type": "string"}},
                "required": ["result"]},
            "effects": ["filesystem.read", "network.connect"],
            "behavior": {"deterministic": true, "idempotent": true, "reversible": false}})
    }

    #[test]
    fn classifications() {
        let mut next = m();
        next["version"] = json!("1.1.0");
        next["effects"] = json!(["filesystem.read"]);
        let out = assess(&m(), &next).unwrap();
        assert_eq!(out["classification"], json!("authority-reducing"));
        assert_eq!(
            out["changes"],
            json!([
                "version 1.0.0 -> 1.1.0",
                "authority reduced: network.connect"
            ])
        );

        let mut next = m();
        next["version"] = json!("1.0.1");
        assert_eq!(
            assess(&m(), &next).unwrap()["classification"],
            json!("safe-patch")
        );

        // Reordered keys are a different insertion-order JSON text.
        next["behavior"] = json!({"reversible": false, "idempotent": true, "deterministic": true});
        let out = assess(&m(), &next).unwrap();
        assert_eq!(out["classification"], json!("review-required"));
        assert_eq!(
            out["substitution"]["certificate"],
            json!("sha256-6de4980cdd60b31a4d58cecb441610d5a17147888f6fbfc6bf2cafe77bffd268")
        );
    }

    #[test]
    fn bare_manifests() {
        let out = assess(&json!({}), &json!({})).unwrap();
        assert_eq!(out["classification"], json!("safe-patch"));
        assert_eq!(out["changes"], json!([]));
        assert_eq!(out["substitution"]["original"], json!({}));
    }
}
