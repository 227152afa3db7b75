//! `capability/authority-envelope`: the combined authority of a set of manifests (the
//! reference `calculateAuthorityEnvelope(manifests, requiredEffects?)`).
//!
//! * `effects`: the unique union of all declared effects, JS-sorted.
//! * With `requiredEffects` (even `[]`): `overDeclaredEffects` (effects not required) and
//!   `perCapabilityOverDeclaration[id]` (a later manifest with the same id wins).
//! * `riskScore`: min(100, sum of the risk weights of the unique effects; `custom:*` 18,
//!   unknown 10). `openWorldEffects`: the mutating or open-world ones.
//! * `deterministic`: every manifest has `behavior.deterministic === true`;
//!   `fullyReversible`: every manifest has no effects or `behavior.reversible === true`.

use capability_core::js::utf16_len;
use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{
    Item, array_or_empty, default_sort, flat_items, is_open_world, is_true, iterate, js_to_string,
    key_set, member, num, opt_member, set_key, to_array, truthy, unique,
};

/// `(manifest.effects?.length ?? 0) === 0`.
fn has_no_effects(effects: Option<&Value>) -> bool {
    match effects {
        None | Some(Value::Null | Value::Bool(_) | Value::Number(_)) => true,
        Some(Value::Array(items)) => items.is_empty(),
        Some(Value::String(s)) => utf16_len(s) == 0,
        Some(Value::Object(map)) => match map.get("length") {
            Some(Value::Number(n)) => capability_core::json::as_f64(n) == 0.0,
            _ => false,
        },
    }
}

/// Risk weight of one effect: the built-in table, then 18 for `custom:*`, else 10.
fn weight(effect: &Value) -> Result<u64, BuiltinError> {
    if let Some(w) = super::common::effect_weight(&js_to_string(Some(effect))) {
        return Ok(u64::from(w));
    }
    match effect {
        Value::String(s) => Ok(if s.starts_with("custom:") { 18 } else { 10 }),
        Value::Null => Err(BuiltinError::type_error(
            "Cannot read properties of null (reading 'startsWith')",
        )),
        _ => Err(BuiltinError::type_error(
            "effect.startsWith is not a function",
        )),
    }
}

/// The reference `calculateAuthorityEnvelope(manifests, requiredEffects)`; `required` is
/// `None` when no requirement was given.
pub fn envelope(manifests: &[Value], required: Option<&Value>) -> Result<Value, BuiltinError> {
    let mut all: Vec<Item<'_>> = Vec::new();
    for manifest in manifests {
        flat_items(member(Some(manifest), "effects")?, &mut all);
    }
    let mut effects = unique(all);
    default_sort(&mut effects);

    let required_items = if truthy(required) {
        match required {
            Some(value) => Some(iterate(value, "requiredEffects")?),
            None => None,
        }
    } else {
        None
    };
    let required_set = required_items.as_deref().map(key_set);

    let mut over_declared = Vec::new();
    let mut per_capability = Map::new();
    if let Some(required) = &required_set {
        over_declared = effects
            .iter()
            .filter(|e| !required.contains(&set_key(e)))
            .cloned()
            .collect();
        for manifest in manifests {
            let declared = array_or_empty(
                opt_member(Some(manifest), "effects"),
                "(manifest.effects ?? []).filter",
            )?;
            let over: Vec<Item<'_>> = declared
                .iter()
                .filter(|e| !required.contains(&set_key(e)))
                .map(Item::Borrowed)
                .collect();
            if !over.is_empty() {
                let mut over = unique(over);
                default_sort(&mut over);
                let key = js_to_string(manifest.get("id")).into_owned();
                // Assigning `__proto__` sets the prototype instead of a member.
                if key != "__proto__" {
                    per_capability.insert(key, to_array(&over));
                }
            }
        }
    }

    let mut raw_risk: u64 = 0;
    for effect in &effects {
        raw_risk = raw_risk.saturating_add(weight(effect)?);
    }
    let open_world: Vec<Item<'_>> = effects
        .iter()
        .filter(|e| is_open_world(e))
        .cloned()
        .collect();
    let deterministic = manifests
        .iter()
        .all(|m| is_true(opt_member(m.get("behavior"), "deterministic")));
    let fully_reversible = manifests.iter().all(|m| {
        has_no_effects(m.get("effects")) || is_true(opt_member(m.get("behavior"), "reversible"))
    });

    let mut out = Map::new();
    out.insert("effects".into(), to_array(&effects));
    out.insert("openWorldEffects".into(), to_array(&open_world));
    out.insert("overDeclaredEffects".into(), to_array(&over_declared));
    out.insert(
        "perCapabilityOverDeclaration".into(),
        Value::Object(per_capability),
    );
    out.insert("riskScore".into(), num(raw_risk.min(100) as f64));
    out.insert("deterministic".into(), deterministic.into());
    out.insert("fullyReversible".into(), fully_reversible.into());
    Ok(Value::Object(out))
}

/// Runs `capability/authority-envelope` on `{manifests, requiredEffects?}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let manifests = match member(Some(input), "manifests")? {
        Some(Value::Array(items)) => items.as_slice(),
        _ => {
            return Err(BuiltinError::type_error(
                "manifests.flatMap is not a function",
            ));
        }
    };
    envelope(manifests, input.get("requiredEffects"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reference_fixture() {
        let out = envelope(
            &[
                json!({"id": "a/read", "effects": ["filesystem.read"]}),
                json!({"id": "a/send", "effects": ["network.connect", "email.send"]}),
            ],
            Some(&json!(["filesystem.read", "email.send"])),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"effects": ["email.send", "filesystem.read", "network.connect"],
                "openWorldEffects": ["email.send", "network.connect"],
                "overDeclaredEffects": ["network.connect"],
                "perCapabilityOverDeclaration": {"a/send": ["network.connect"]},
                "riskScore": 55, "deterministic": false, "fullyReversible": false})
        );
    }

    #[test]
    fn risk_table_is_own_keys_only() {
        let out = envelope(&[json!({"effects": ["constructor", "custom:x"]})], None).unwrap();
        assert_eq!(out["riskScore"], json!(28));
        let out = envelope(&[json!({"effects": [{}]})], None);
        assert!(out.is_err());
    }
}
