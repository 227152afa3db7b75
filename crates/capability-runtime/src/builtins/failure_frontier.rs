//! `capability/failure-frontier`: where a plan of steps stops being undoable (the reference
//! `calculateFailureFrontier(steps)`).
//!
//! A step is mutating when one of its effects is mutating or open-world. The point of no
//! return is the first mutating step not declared `reversible === true`; every mutating step
//! is an approval checkpoint; the retry-safe prefix is the leading run of
//! `idempotent === true` steps; compensation coverage is the rounded share of reversible
//! mutating steps (100 without any).

use capability_core::js::math_round;
use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{
    Item, array_or_empty, default_sort, flat_items, is_open_world, is_true, member, non_nullish,
    num, opt_member, to_array, unique,
};

fn reversible(step: &Value) -> bool {
    is_true(opt_member(step.get("behavior"), "reversible"))
}

/// The reference `calculateFailureFrontier(steps)`.
pub fn frontier(steps: &[Value]) -> Result<Value, BuiltinError> {
    let mut mutating = Vec::new();
    for step in steps {
        let effects = array_or_empty(member(Some(step), "effects")?, "(step.effects ?? []).some")?;
        if effects.iter().any(is_open_world) {
            mutating.push(step);
        }
    }
    let point = mutating
        .iter()
        .find(|step| !reversible(step))
        .and_then(|step| non_nullish(step.get("id")))
        .cloned()
        .unwrap_or(Value::Null);
    let retry_safe = steps
        .iter()
        .take_while(|step| is_true(opt_member(step.get("behavior"), "idempotent")))
        .count();
    let reversible_mutations = mutating.iter().filter(|step| reversible(step)).count();
    let coverage = if mutating.is_empty() {
        100.0
    } else {
        math_round(reversible_mutations as f64 / mutating.len() as f64 * 100.0)
    };
    let mut all: Vec<Item<'_>> = Vec::new();
    for step in steps {
        flat_items(step.get("effects"), &mut all);
    }
    let mut effects = unique(all);
    default_sort(&mut effects);

    let mut out = Map::new();
    out.insert("pointOfNoReturn".into(), point);
    out.insert(
        "approvalCheckpoints".into(),
        Value::Array(
            mutating
                .iter()
                .map(|step| step.get("id").cloned().unwrap_or(Value::Null))
                .collect(),
        ),
    );
    out.insert("retrySafePrefixLength".into(), num(retry_safe as f64));
    out.insert("compensationCoverage".into(), num(coverage));
    out.insert("effects".into(), to_array(&effects));
    Ok(Value::Object(out))
}

/// Runs `capability/failure-frontier` on `{steps}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    match member(Some(input), "steps")? {
        Some(Value::Array(steps)) => frontier(steps),
        _ => Err(BuiltinError::type_error("steps.filter is not a function")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reference_fixture() {
        let steps = [
            json!({"id": "read", "effects": ["filesystem.read"], "behavior": {"idempotent": true}}),
            json!({"id": "write", "effects": ["filesystem.write"],
                "behavior": {"idempotent": true, "reversible": true}}),
            json!({"id": "send", "effects": ["email.send"]}),
        ];
        assert_eq!(
            frontier(&steps).unwrap(),
            json!({"pointOfNoReturn": "send", "approvalCheckpoints": ["write", "send"],
                "retrySafePrefixLength": 2, "compensationCoverage": 50,
                "effects": ["email.send", "filesystem.read", "filesystem.write"]})
        );
        assert_eq!(
            frontier(&[]).unwrap(),
            json!({"pointOfNoReturn": null, "approvalCheckpoints": [],
                "retrySafePrefixLength": 0, "compensationCoverage": 100, "effects": []})
        );
    }

    #[test]
    fn non_array_effects_fail() {
        assert!(frontier(&[json!({"effects": "filesystem.write"})]).is_err());
        assert!(frontier(&[json!(null)]).is_err());
    }
}
