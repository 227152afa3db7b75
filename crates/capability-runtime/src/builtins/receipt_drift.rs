//! `capability/receipt-drift`: how far a receipt drifted from a baseline (the reference
//! `assessReceiptDrift(baseline, current)`).
//!
//! Points (each with a change label): capability id 100, version 20, same input with a
//! different non-empty output 55, input changed 5, effect envelope 30 (the insertion-order
//! `JSON.stringify` of the JS-sorted effect lists differ), package name 35, package version
//! 15, both integrities non-empty and different 50, verification result 35. The score is
//! capped at 100; severity is none (0), low (< 20), medium (< 45), high (< 75) or critical.

use capability_core::json::to_js_string;
use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{
    default_sort, iterate, member, non_nullish, num, opt_member, strict_eq, to_array, truthy,
};

/// `JSON.stringify([...effects].sort())`.
fn sorted_effects_json(effects: Option<&Value>, label: &str) -> Result<String, BuiltinError> {
    let Some(effects) = effects else {
        return Err(BuiltinError::type_error(format!("{label} is not iterable")));
    };
    let mut items = iterate(effects, label)?;
    default_sort(&mut items);
    Ok(to_js_string(&to_array(&items)))
}

/// `record?.key`.
fn field<'a>(record: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    opt_member(non_nullish(record), key)
}

/// The reference `assessReceiptDrift(baseline, current)`.
pub fn assess(baseline: &Value, current: &Value) -> Result<Value, BuiltinError> {
    let b_capability = member(Some(baseline), "capability")?;
    let c_capability = member(Some(current), "capability")?;
    let b_id = member(b_capability, "id")?;
    let c_id = member(c_capability, "id")?;
    let b_version = member(b_capability, "version")?;
    let c_version = member(c_capability, "version")?;

    let mut score: u32 = 0;
    let mut changes: Vec<&str> = Vec::new();
    let mut add = |points: u32, change: &'static str| {
        score += points;
        changes.push(change);
    };
    let same_id = strict_eq(b_id, c_id);
    if !same_id {
        add(100, "capability-id");
    }
    let same_version = strict_eq(b_version, c_version);
    if !same_version {
        add(20, "capability-version");
    }
    let same_input = strict_eq(baseline.get("inputHash"), current.get("inputHash"));
    let (b_output, c_output) = (baseline.get("outputHash"), current.get("outputHash"));
    if same_input && truthy(b_output) && truthy(c_output) && !strict_eq(b_output, c_output) {
        add(55, "same-input-different-output");
    }
    if !same_input {
        add(5, "input-changed");
    }
    let same_effects = sorted_effects_json(baseline.get("effects"), "baseline.effects")?
        == sorted_effects_json(current.get("effects"), "current.effects")?;
    if !same_effects {
        add(30, "effect-envelope");
    }
    let (b_provenance, c_provenance) = (baseline.get("provenance"), current.get("provenance"));
    if !strict_eq(
        field(b_provenance, "packageName"),
        field(c_provenance, "packageName"),
    ) {
        add(35, "package-identity");
    }
    if !strict_eq(
        field(b_provenance, "packageVersion"),
        field(c_provenance, "packageVersion"),
    ) {
        add(15, "package-version");
    }
    let b_integrity = field(b_provenance, "packageIntegrity");
    let c_integrity = field(c_provenance, "packageIntegrity");
    if truthy(b_integrity) && truthy(c_integrity) && !strict_eq(b_integrity, c_integrity) {
        add(50, "package-integrity");
    }
    if !strict_eq(
        field(baseline.get("verification"), "ok"),
        field(current.get("verification"), "ok"),
    ) {
        add(35, "verification-result");
    }
    let score = score.min(100);
    let severity = match score {
        0 => "none",
        1..20 => "low",
        20..45 => "medium",
        45..75 => "high",
        _ => "critical",
    };
    let reproducible = same_id
        && same_version
        && same_input
        && b_output.is_some()
        && strict_eq(b_output, c_output)
        && same_effects
        && strict_eq(
            Some(non_nullish(b_integrity).unwrap_or(&Value::Null)),
            Some(non_nullish(c_integrity).unwrap_or(&Value::Null)),
        );

    let mut out = Map::new();
    out.insert("severity".into(), severity.into());
    out.insert("reproducible".into(), reproducible.into());
    out.insert(
        "changes".into(),
        Value::Array(changes.into_iter().map(Value::from).collect()),
    );
    out.insert("score".into(), num(f64::from(score)));
    Ok(Value::Object(out))
}

/// Runs `capability/receipt-drift` on `{baseline, current}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let baseline = member(Some(input), "baseline")?;
    let current = member(Some(input), "current")?;
    match (baseline, current) {
        (Some(b), Some(c)) => assess(b, c),
        _ => Err(BuiltinError::type_error(
            "Cannot read properties of undefined (reading 'capability')",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn receipt() -> Value {
        json!({"capability": {"id": "x/run", "version": "1.0.0"}, "effects": [],
            "inputHash": "same", "outputHash": "one",
            "provenance": {"packageName": "x", "packageVersion": "1.0.0",
                "packageIntegrity": "sha512-a"}})
    }

    #[test]
    fn reference_fixtures() {
        let base = receipt();
        let same = assess(&base, &receipt()).unwrap();
        assert_eq!(
            same,
            json!({"severity": "none", "reproducible": true, "changes": [], "score": 0})
        );
        let mut other = receipt();
        other["outputHash"] = json!("two");
        assert_eq!(
            assess(&base, &other).unwrap(),
            json!({"severity": "high", "reproducible": false,
                "changes": ["same-input-different-output"], "score": 55})
        );
    }

    #[test]
    fn missing_members_fail_like_the_reference() {
        let err = assess(&json!({"effects": []}), &json!({"effects": []})).unwrap_err();
        assert_eq!(
            err.message,
            "Cannot read properties of undefined (reading 'id')"
        );
        let with_capability = json!({"capability": {"id": "a/b"}});
        let err = assess(&with_capability, &with_capability).unwrap_err();
        assert_eq!(err.message, "baseline.effects is not iterable");
    }

    #[test]
    fn effect_order_does_not_matter_but_duplicates_do() {
        let mut a = receipt();
        let mut b = receipt();
        a["effects"] = json!(["network.connect", "filesystem.read"]);
        b["effects"] = json!(["filesystem.read", "network.connect"]);
        assert_eq!(assess(&a, &b).unwrap()["score"], json!(0));
        b["effects"] = json!(["filesystem.read", "network.connect", "network.connect"]);
        assert_eq!(
            assess(&a, &b).unwrap()["changes"],
            json!(["effect-envelope"])
        );
    }
}
