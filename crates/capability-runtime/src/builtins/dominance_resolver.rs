//! `capability/dominance-resolver`: the Pareto frontier of interchangeable candidates (the
//! reference `resolveCapabilityDominance(candidates)`).
//!
//! Each candidate is measured on risk (min(100, sum of effect weights over the effects as
//! listed, duplicates included; anything outside the built-in table weighs 18), trust
//! (`trustScore ?? 0`), and the `=== true` determinism and reversibility flags. A candidate is
//! dominated by the first other candidate, in input order, that is no worse on every axis and
//! better on one. The frontier is sorted by risk, then trust descending, then `localeCompare`
//! on id; the dominated list by `localeCompare` on id.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{
    array_or_empty, effect_weight, is_true, js_ge, js_gt, js_sort_by, js_to_string,
    locale_compare_ids, member, non_nullish, num, numeric_order, opt_member, to_number,
};

struct Metrics<'a> {
    id: Option<&'a Value>,
    version: Option<&'a Value>,
    risk: u64,
    trust: Cow<'a, Value>,
    deterministic: bool,
    reversible: bool,
}

fn metrics(candidate: &Value) -> Result<Metrics<'_>, BuiltinError> {
    let manifest = member(Some(candidate), "manifest")?;
    let id = member(manifest, "id")?;
    let version = member(manifest, "version")?;
    let effects = array_or_empty(
        member(manifest, "effects")?,
        "(manifest.effects ?? []).reduce",
    )?;
    let risk = effects
        .iter()
        .map(|e| effect_weight(&js_to_string(Some(e))).map_or(18, u64::from))
        .fold(0_u64, u64::saturating_add)
        .min(100);
    let trust = match non_nullish(candidate.get("trustScore")) {
        Some(value) => Cow::Borrowed(value),
        None => Cow::Owned(Value::from(0)),
    };
    let behavior = member(manifest, "behavior")?;
    Ok(Metrics {
        id,
        version,
        risk,
        trust,
        deterministic: is_true(opt_member(behavior, "deterministic")),
        reversible: is_true(opt_member(behavior, "reversible")),
    })
}

fn dominates(a: &Metrics<'_>, b: &Metrics<'_>) -> bool {
    let (at, bt) = (Some(a.trust.as_ref()), Some(b.trust.as_ref()));
    // `Number(flag)` comparisons.
    let (ad, bd) = (u8::from(a.deterministic), u8::from(b.deterministic));
    let (ar, br) = (u8::from(a.reversible), u8::from(b.reversible));
    let no_worse = a.risk <= b.risk && js_ge(at, bt) && ad >= bd && ar >= br;
    let better = a.risk < b.risk || js_gt(at, bt) || ad > bd || ar > br;
    no_worse && better
}

fn insert_identity(item: &mut Map<String, Value>, m: &Metrics<'_>) {
    if let Some(id) = m.id {
        item.insert("id".into(), id.clone());
    }
    if let Some(version) = m.version {
        item.insert("version".into(), version.clone());
    }
}

/// The reference `resolveCapabilityDominance(candidates)`.
pub fn resolve(candidates: &[Value]) -> Result<Value, BuiltinError> {
    let values = candidates
        .iter()
        .map(metrics)
        .collect::<Result<Vec<_>, _>>()?;
    let mut frontier = Vec::new();
    let mut dominated = Vec::new();
    for (index, candidate) in values.iter().enumerate() {
        let superior = values
            .iter()
            .enumerate()
            .find(|(other, value)| *other != index && dominates(value, candidate));
        match superior {
            Some((_, superior)) => {
                let by = format!(
                    "{}@{}",
                    js_to_string(superior.id),
                    js_to_string(superior.version)
                );
                dominated.push((candidate, by));
            }
            None => frontier.push(candidate),
        }
    }
    js_sort_by(&mut frontier, |a, b| {
        let by_risk = a.risk as f64 - b.risk as f64;
        let by_trust = to_number(Some(&b.trust)) - to_number(Some(&a.trust));
        match numeric_order(by_risk).or(numeric_order(by_trust)) {
            Some(order) => Ok(order),
            None => locale_compare_ids(a.id, b.id),
        }
    })?;
    js_sort_by(&mut dominated, |a, b| locale_compare_ids(a.0.id, b.0.id))?;

    let frontier: Vec<Value> = frontier
        .into_iter()
        .map(|m| {
            let mut item = Map::new();
            insert_identity(&mut item, m);
            item.insert("risk".into(), num(m.risk as f64));
            item.insert("trust".into(), m.trust.as_ref().clone());
            item.insert("deterministic".into(), m.deterministic.into());
            item.insert("reversible".into(), m.reversible.into());
            Value::Object(item)
        })
        .collect();
    let dominated: Vec<Value> = dominated
        .into_iter()
        .map(|(m, by)| {
            let mut item = Map::new();
            insert_identity(&mut item, m);
            item.insert("dominatedBy".into(), by.into());
            Value::Object(item)
        })
        .collect();
    let mut out = Map::new();
    out.insert("frontier".into(), Value::Array(frontier));
    out.insert("dominated".into(), Value::Array(dominated));
    Ok(Value::Object(out))
}

/// Runs `capability/dominance-resolver` on `{candidates}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    match member(Some(input), "candidates")? {
        Some(Value::Array(candidates)) => resolve(candidates),
        _ => Err(BuiltinError::type_error("candidates.map is not a function")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn candidate(id: &str, effects: Value, reversible: bool, trust: Option<i64>) -> Value {
        let mut c = json!({"manifest": {"id": id, "version": "1.0.0", "effects": effects,
            "behavior": {"deterministic": true, "reversible": reversible}}});
        if let Some(t) = trust {
            c["trustScore"] = json!(t);
        }
        c
    }

    #[test]
    fn reference_fixture() {
        let out = resolve(&[
            candidate("demo/safe", json!(["filesystem.read"]), true, Some(95)),
            candidate(
                "demo/worse",
                json!(["filesystem.read", "network.connect"]),
                false,
                Some(80),
            ),
            candidate(
                "demo/trusted-risky",
                json!(["filesystem.read", "network.connect"]),
                true,
                Some(100),
            ),
        ])
        .unwrap();
        assert_eq!(
            out["dominated"],
            json!([{"id": "demo/worse", "version": "1.0.0", "dominatedBy": "demo/safe@1.0.0"}])
        );
        assert_eq!(out["frontier"][0]["risk"], json!(5));
        assert_eq!(out["frontier"][1]["id"], json!("demo/trusted-risky"));
    }

    #[test]
    fn duplicate_effects_count_and_the_first_dominator_wins() {
        let out = resolve(&[
            candidate(
                "b/x",
                json!(["filesystem.read", "network.connect"]),
                false,
                None,
            ),
            candidate(
                "a/x",
                json!(["filesystem.read", "network.connect"]),
                false,
                None,
            ),
            candidate("c/x", json!(["custom:z", "custom:z"]), false, None),
        ])
        .unwrap();
        let frontier: Vec<&str> = out["frontier"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap())
            .collect();
        assert_eq!(frontier, ["a/x", "b/x"]);
        assert_eq!(out["dominated"][0]["dominatedBy"], json!("b/x@1.0.0"));
    }

    #[test]
    fn a_candidate_without_manifest_fails() {
        let err = resolve(&[json!({"trustScore": 1})]).unwrap_err();
        assert_eq!(
            err.message,
            "Cannot read properties of undefined (reading 'id')"
        );
    }
}
