//! `capability/substitution-certificate`: may `replacement` stand in for `original`? (the
//! reference `certifyCapabilitySubstitution(original, replacement, originalTrust = {},
//! replacementTrust = {})`).
//!
//! A replacement is accepted when its object contract is conservatively compatible (no new
//! required input, no incompatible input type, every guaranteed output kept with a compatible
//! type), it adds no effect, it weakens no declared `=== true` behaviour flag, and its trust
//! does not regress. The certificate is `sha256-` + the canonical hash of the body (every
//! output field except `reasons`).

use capability_core::json::canonical_hash;
use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{
    Item, ObjectContract, default_sort, is_true, iterate_or_empty, js_lt, key_set, member,
    non_nullish, opt_member, set_key, to_array, unique,
};

/// A substitution certificate, before serialisation.
pub(crate) struct Certificate<'a> {
    pub original: &'a Value,
    pub replacement: &'a Value,
    pub removed: Vec<Item<'a>>,
    pub added: Vec<Item<'a>>,
    pub behavior_regressions: Vec<&'static str>,
    pub contract_breaking: Vec<String>,
    pub trust_regression: bool,
    pub accepted: bool,
    pub reasons: Vec<String>,
}

fn compatible_type(from: &str, to: &str) -> bool {
    from == "any" || to == "any" || from == to
}

/// The reference `assessContractSubstitution`: the breaking changes, in order.
fn contract_breaking(original: &Value, replacement: &Value) -> Result<Vec<String>, BuiltinError> {
    let old_input = ObjectContract::of(member(Some(original), "input")?);
    let new_input = ObjectContract::of(member(Some(replacement), "input")?);
    let old_output = ObjectContract::of(member(Some(original), "output")?);
    let new_output = ObjectContract::of(member(Some(replacement), "output")?);
    let mut breaking = Vec::new();
    for key in &new_input.required {
        if !old_input.requires(key) {
            breaking.push(format!("replacement requires new input field: {key}"));
        }
    }
    for (key, old_type) in &old_input.properties {
        if !new_input.has(key) {
            continue;
        }
        let new_type = new_input.type_of(key);
        if !compatible_type(old_type, new_type) {
            breaking.push(format!(
                "input type changed for {key}: {old_type} -> {new_type}"
            ));
        }
    }
    for key in &old_output.required {
        if !new_output.requires(key) {
            breaking.push(format!(
                "replacement no longer guarantees output field: {key}"
            ));
        } else {
            let (old_type, new_type) = (old_output.type_of(key), new_output.type_of(key));
            if !compatible_type(new_type, old_type) {
                breaking.push(format!(
                    "output type changed for {key}: {old_type} -> {new_type}"
                ));
            }
        }
    }
    Ok(breaking)
}

fn weakened(original: &Value, replacement: &Value, flag: &str) -> bool {
    is_true(opt_member(original.get("behavior"), flag))
        && !is_true(opt_member(replacement.get("behavior"), flag))
}

/// The reference `certifyCapabilitySubstitution`; `None` trust is the default `{}`.
pub(crate) fn certify<'a>(
    original: &'a Value,
    replacement: &'a Value,
    original_trust: Option<&'a Value>,
    replacement_trust: Option<&'a Value>,
) -> Result<Certificate<'a>, BuiltinError> {
    let breaking = contract_breaking(original, replacement)?;
    let old_effects = unique(iterate_or_empty(
        original.get("effects"),
        "original.effects",
    )?);
    let new_effects = unique(iterate_or_empty(
        replacement.get("effects"),
        "replacement.effects",
    )?);
    let (old_keys, new_keys) = (key_set(&old_effects), key_set(&new_effects));
    let mut added: Vec<Item<'a>> = new_effects
        .iter()
        .filter(|e| !old_keys.contains(&set_key(e)))
        .cloned()
        .collect();
    let mut removed: Vec<Item<'a>> = old_effects
        .iter()
        .filter(|e| !new_keys.contains(&set_key(e)))
        .cloned()
        .collect();
    default_sort(&mut added);
    default_sort(&mut removed);

    let mut behavior_regressions = Vec::new();
    for (flag, regression) in [
        ("deterministic", "determinism weakened"),
        ("idempotent", "idempotence weakened"),
        ("reversible", "reversibility weakened"),
    ] {
        if weakened(original, replacement, flag) {
            behavior_regressions.push(regression);
        }
    }

    let empty = Value::Object(Map::new());
    let original_trust = original_trust.unwrap_or(&empty);
    let replacement_trust = replacement_trust.unwrap_or(&empty);
    let zero = Value::from(0);
    let original_score = non_nullish(member(Some(original_trust), "score")?).unwrap_or(&zero);
    let replacement_score = non_nullish(member(Some(replacement_trust), "score")?).unwrap_or(&zero);
    let trust_regression = js_lt(Some(replacement_score), Some(original_score))
        || ["provenanceVerified", "registrySignatureVerified"]
            .iter()
            .any(|flag| {
                is_true(original_trust.get(*flag)) && !is_true(replacement_trust.get(*flag))
            });

    let mut reasons = Vec::new();
    if added.is_empty() {
        reasons.push("authority did not expand".to_string());
    }
    if behavior_regressions.is_empty() {
        reasons.push("declared behavioral guarantees did not weaken".to_string());
    }
    if !trust_regression {
        reasons.push("trust posture did not regress".to_string());
    }
    if breaking.is_empty() {
        reasons.push("conservative input/output contract compatibility passed".to_string());
    }
    let accepted = breaking.is_empty()
        && added.is_empty()
        && behavior_regressions.is_empty()
        && !trust_regression;
    Ok(Certificate {
        original,
        replacement,
        removed,
        added,
        behavior_regressions,
        contract_breaking: breaking,
        trust_regression,
        accepted,
        reasons,
    })
}

fn identity(manifest: &Value) -> Value {
    let mut out = Map::new();
    for key in ["id", "version"] {
        if let Some(value) = manifest.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    Value::Object(out)
}

impl Certificate<'_> {
    /// The output: the hashed body, then `reasons` and `certificate`.
    pub fn to_value(&self) -> Value {
        let mut delta = Map::new();
        delta.insert("removed".into(), to_array(&self.removed));
        delta.insert("added".into(), to_array(&self.added));
        let mut body = Map::new();
        body.insert("original".into(), identity(self.original));
        body.insert("replacement".into(), identity(self.replacement));
        body.insert("authorityDelta".into(), Value::Object(delta));
        body.insert(
            "behaviorRegressions".into(),
            Value::Array(
                self.behavior_regressions
                    .iter()
                    .map(|s| Value::from(*s))
                    .collect(),
            ),
        );
        body.insert(
            "contractBreaking".into(),
            Value::Array(
                self.contract_breaking
                    .iter()
                    .map(|s| Value::from(s.as_str()))
                    .collect(),
            ),
        );
        body.insert("trustRegression".into(), self.trust_regression.into());
        body.insert("accepted".into(), self.accepted.into());
        let mut out = Value::Object(body);
        let certificate = format!("sha256-{}", canonical_hash(&out));
        if let Value::Object(map) = &mut out {
            map.insert(
                "reasons".into(),
                Value::Array(
                    self.reasons
                        .iter()
                        .map(|s| Value::from(s.as_str()))
                        .collect(),
                ),
            );
            map.insert("certificate".into(), certificate.into());
        }
        out
    }
}

/// Runs `capability/substitution-certificate` on
/// `{original, replacement, originalTrust?, replacementTrust?}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let original = member(Some(input), "original")?;
    let replacement = input.get("replacement");
    let (Some(original), Some(replacement)) = (original, replacement) else {
        return Err(BuiltinError::type_error(
            "Cannot read properties of undefined (reading 'input')",
        ));
    };
    let certificate = certify(
        original,
        replacement,
        input.get("originalTrust"),
        input.get("replacementTrust"),
    )?;
    Ok(certificate.to_value())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m() -> Value {
        json!({"specVersion": "0.1", "id": "demo/process", "version": "1.0.0",
            "name": "Process", "description": "Process a value.",
            "input": {"type": "object", "properties": {"value": {"type": "string"}},
                "required": ["value"]},
            "output": {"type": "object", "properties": {"result": {"type": "string"}},
                "required": ["result"]},
            "effects": ["filesystem.read", "network.connect"],
            "behavior": {"deterministic": true, "idempotent": true, "reversible": false}})
    }

    #[test]
    fn reference_fixtures() {
        let mut replacement = m();
        replacement["version"] = json!("2.0.0");
        replacement["effects"] = json!(["filesystem.read"]);
        let out = execute(&json!({"original": m(), "replacement": replacement,
            "originalTrust": {"score": 80, "provenanceVerified": true},
            "replacementTrust": {"score": 90, "provenanceVerified": true}}))
        .unwrap();
        assert_eq!(out["accepted"], json!(true));
        assert_eq!(
            out["certificate"],
            json!("sha256-854488c8c168f76f36accdd400c542ba3fa6595d3d5f7fbddee2768ee7ece188")
        );
        let same = execute(&json!({"original": m(), "replacement": m()})).unwrap();
        assert_eq!(
            same["certificate"],
            json!("sha256-afe921414df7a0299694cd2dfad921f092702a2c19aa4e14b0374331f40c82cf")
        );
    }

    #[test]
    fn breaking_changes_are_listed_in_order() {
        let mut replacement = m();
        replacement["input"] = json!({"properties": {"value": {"type": "number"}},
            "required": ["value", "extra"]});
        replacement["output"] = json!({"properties": {"result": {"type": "string"}}});
        let out = execute(&json!({"original": m(), "replacement": replacement})).unwrap();
        assert_eq!(
            out["contractBreaking"],
            json!([
                "replacement requires new input field: extra",
                "input type changed for value: string -> number",
                "replacement no longer guarantees output field: result"
            ])
        );
        assert_eq!(out["accepted"], json!(false));
    }
}
