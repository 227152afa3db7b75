//! `capability/novelty-radar`: how different a proposed manifest is from existing ones
//! (the reference `assessCapabilityNovelty(proposed, existing)`).
//!
//! For every existing manifest other than the one with the proposed id **and** version, five
//! Jaccard similarities are weighted (purpose text 0.28, input features 0.20, output
//! features 0.27, effects 0.15, tags 0.10; two empty sets are identical), capped at 1 and
//! rounded as `Number(x.toFixed(4))`. The five nearest (similarity descending, then
//! `localeCompare` on id) are reported, and the best similarity decides the uniqueness score
//! and the class.

use std::collections::HashSet;
use std::hash::Hash;

use capability_core::js::{math_round, to_fixed};
use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{
    Item, iterate, iterate_or_empty, js_entries, js_sort_by, js_to_string, key_set,
    locale_compare_ids, member, non_nullish, num, numeric_order, strict_eq, truthy,
};

const TWIN: &str = "Do not publish unchanged; differentiate the contract, authority profile, or outcome semantics.";
const INCREMENTAL: &str =
    "Publish only if the improvement is material and explicit in the contract or behavior.";
const DISTINCT: &str = "The capability occupies differentiated space; document why its contract is preferable for its target use.";
const NOVEL: &str = "The capability occupies clear ecosystem whitespace; preserve that differentiation in the public manifest.";

/// Lowercase, split on `[^a-z0-9]+`, keep tokens longer than one character, first
/// occurrence first.
fn tokens(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut seen = HashSet::new();
    lower
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|token| token.len() > 1 && seen.insert(*token))
        .map(str::to_string)
        .collect()
}

/// Tokens of `[id, name, description, ...(tags ?? [])].join(" ")`.
fn manifest_text(manifest: &Value) -> Result<Vec<String>, BuiltinError> {
    let mut parts: Vec<Item<'_>> = Vec::new();
    for key in ["id", "name", "description"] {
        parts.push(match manifest.get(key) {
            Some(v) => Item::Borrowed(v),
            // `undefined` joins as the empty string, like `null`.
            None => Item::Owned(Value::Null),
        });
    }
    parts.extend(iterate_or_empty(manifest.get("tags"), "manifest.tags")?);
    Ok(tokens(&super::common::join(&parts, " ")))
}

/// The reference `schemaFeatures(schema, prefix, depth)`.
fn schema_features(schema: Option<&Value>, prefix: &str, depth: u32, out: &mut Vec<String>) {
    if !truthy(schema) || depth > 3 {
        return;
    }
    let object = schema.and_then(Value::as_object);
    let ty = object
        .and_then(|o| o.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("any");
    out.push(format!("{prefix}:type={ty}"));
    let Some(object) = object else {
        return;
    };
    if let Some(Value::Array(required)) = object.get("required") {
        for key in required.iter().filter_map(Value::as_str) {
            out.push(format!("{prefix}:required={key}"));
        }
    }
    if let Some(Value::Object(properties)) = object.get("properties") {
        for (key, value) in js_entries(properties) {
            out.push(format!("{prefix}:property={key}"));
            if value.is_object() {
                schema_features(Some(value), &format!("{prefix}.{key}"), depth + 1, out);
            }
        }
    }
    if let Some(items @ Value::Object(_)) = object.get("items") {
        schema_features(Some(items), &format!("{prefix}[]"), depth + 1, out);
    }
}

fn features(schema: Option<&Value>) -> HashSet<String> {
    let mut out = Vec::new();
    schema_features(schema, "$", 0, &mut out);
    out.into_iter().collect()
}

/// Jaccard similarity of two sets; 1 when both are empty.
fn jaccard<K: Eq + Hash>(left: &HashSet<K>, right: &HashSet<K>) -> f64 {
    if left.is_empty() && right.is_empty() {
        return 1.0;
    }
    let intersection = left.iter().filter(|k| right.contains(*k)).count();
    let union = left.len() + right.len() - intersection;
    intersection as f64 / union as f64
}

fn string_set(items: &[String]) -> HashSet<&str> {
    items.iter().map(String::as_str).collect()
}

struct Scored<'a> {
    id: Option<&'a Value>,
    version: Option<&'a Value>,
    similarity: f64,
    overlap: Vec<&'static str>,
}

/// The reference `assessCapabilityNovelty(proposed, existing)`.
pub fn assess(proposed: &Value, existing: &[Value]) -> Result<Value, BuiltinError> {
    let proposed_input = features(proposed.get("input"));
    let proposed_output = features(proposed.get("output"));
    let proposed_effects = non_nullish(proposed.get("effects"));
    let proposed_tags = non_nullish(proposed.get("tags"));
    let proposed_id = proposed.get("id");
    let proposed_version = proposed.get("version");
    // Computed once, but only reported when the first comparison needs them, in the
    // reference's order of evaluation.
    let proposed_text = manifest_text(proposed);
    let own_text = proposed_text.as_ref().map(|t| string_set(t));
    let own_effects = iterate_opt(proposed_effects, "proposedEffects");
    let own_effects = own_effects.as_ref().map(|items| key_set(items));
    let own_tags = iterate_opt(proposed_tags, "proposedTags");
    let own_tags = own_tags.as_ref().map(|items| key_set(items));

    let mut candidates = Vec::with_capacity(existing.len());
    for manifest in existing {
        let id = member(Some(manifest), "id")?;
        if !strict_eq(id, proposed_id)
            || !strict_eq(member(Some(manifest), "version")?, proposed_version)
        {
            candidates.push(manifest);
        }
    }

    let mut scored = Vec::with_capacity(candidates.len());
    for manifest in candidates {
        let own_text = own_text.as_ref().map_err(|e| (*e).clone())?;
        let other_text = manifest_text(manifest)?;
        let lexical = jaccard(own_text, &string_set(&other_text));
        let input = jaccard(&proposed_input, &features(manifest.get("input")));
        let output = jaccard(&proposed_output, &features(manifest.get("output")));
        let own_effects = own_effects.as_ref().map_err(|e| (*e).clone())?;
        let other_effects = iterate_or_empty(manifest.get("effects"), "manifest.effects")?;
        let effects = jaccard(own_effects, &key_set(&other_effects));
        let own_tags = own_tags.as_ref().map_err(|e| (*e).clone())?;
        let other_tags = iterate_or_empty(manifest.get("tags"), "manifest.tags")?;
        let tags = jaccard(own_tags, &key_set(&other_tags));
        let similarity =
            (lexical * 0.28 + input * 0.2 + output * 0.27 + effects * 0.15 + tags * 0.1).min(1.0);
        let mut overlap = Vec::new();
        if lexical >= 0.65 {
            overlap.push("purpose-language");
        }
        if input >= 0.8 {
            overlap.push("input-contract");
        }
        if output >= 0.8 {
            overlap.push("output-contract");
        }
        if effects >= 0.9 {
            overlap.push("effect-profile");
        }
        if tags >= 0.7 {
            overlap.push("tags");
        }
        scored.push(Scored {
            id: manifest.get("id"),
            version: manifest.get("version"),
            similarity: to_fixed(similarity, 4),
            overlap,
        });
    }
    js_sort_by(&mut scored, |a, b| {
        match numeric_order(b.similarity - a.similarity) {
            Some(order) => Ok(order),
            None => locale_compare_ids(a.id, b.id),
        }
    })?;
    scored.truncate(5);

    let maximum = scored.first().map_or(0.0, |s| s.similarity);
    let (classification, recommendation) = if maximum >= 0.84 {
        ("functional-twin", TWIN)
    } else if maximum >= 0.62 {
        ("incremental", INCREMENTAL)
    } else if maximum >= 0.36 {
        ("distinct", DISTINCT)
    } else {
        ("novel", NOVEL)
    };
    let nearest: Vec<Value> = scored
        .into_iter()
        .map(|s| {
            let mut item = Map::new();
            if let Some(id) = s.id {
                item.insert("id".into(), id.clone());
            }
            if let Some(version) = s.version {
                item.insert("version".into(), version.clone());
            }
            item.insert("similarity".into(), num(s.similarity));
            item.insert(
                "overlap".into(),
                Value::Array(s.overlap.into_iter().map(Value::from).collect()),
            );
            Value::Object(item)
        })
        .collect();
    let mut out = Map::new();
    out.insert(
        "uniquenessScore".into(),
        num(math_round((1.0 - maximum) * 100.0)),
    );
    out.insert("classification".into(), classification.into());
    out.insert("nearest".into(), Value::Array(nearest));
    out.insert("recommendation".into(), recommendation.into());
    Ok(Value::Object(out))
}

fn iterate_opt<'a>(value: Option<&'a Value>, label: &str) -> Result<Vec<Item<'a>>, BuiltinError> {
    match value {
        None => Ok(Vec::new()),
        Some(v) => iterate(v, label),
    }
}

/// Runs `capability/novelty-radar` on `{proposed, existing}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let proposed = match member(Some(input), "proposed")? {
        Some(p) if !p.is_null() => p,
        other => {
            let what = js_to_string(other);
            return Err(BuiltinError::type_error(format!(
                "Cannot read properties of {what} (reading 'input')"
            )));
        }
    };
    let existing = match input.get("existing") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => {
            return Err(BuiltinError::type_error(
                "existing.filter is not a function",
            ));
        }
    };
    assess(proposed, existing)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_are_lowercase_ascii_words() {
        assert_eq!(
            tokens("Inspect image-Metadata a 42 İx"),
            ["inspect", "image", "metadata", "42"]
        );
        assert_eq!(tokens("Kelvin \u{212A}x"), ["kelvin", "kx"]);
    }

    #[test]
    fn features_follow_the_schema_shape() {
        let schema = json!({"type": "object", "required": ["a", 1],
            "properties": {"a": {"type": "string"}, "b": {"items": {"type": "number"}}}});
        let mut out = Vec::new();
        schema_features(Some(&schema), "$", 0, &mut out);
        assert_eq!(
            out,
            [
                "$:type=object",
                "$:required=a",
                "$:property=a",
                "$.a:type=string",
                "$:property=b",
                "$.b:type=any",
                "$.b[]:type=number"
            ]
        );
    }

    #[test]
    fn similarity_rounds_exact_ties_away_from_zero() {
        // Only the tags overlap: 5 shared out of 16, and 0.1 * 0.3125 is exactly 0.03125,
        // which toFixed(4) rounds to 0.0313 where Rust's `{:.4}` would give 0.0312.
        // Single-letter tags add no purpose tokens.
        let proposed = json!({"id": "alpha/one", "input": {"type": "string"},
            "output": {"type": "string"}, "effects": ["filesystem.read"],
            "tags": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]});
        let other = json!({"id": "beta/two", "version": "1.0.0", "input": {"type": "number"},
            "output": {"type": "number"}, "effects": ["network.connect"],
            "tags": ["a", "b", "c", "d", "e", "p", "q", "r", "s", "t"]});
        let out = assess(&proposed, &[other]).unwrap();
        assert_eq!(format!("{:.4}", 0.1 * 0.3125), "0.0312");
        assert_eq!(out["nearest"][0]["similarity"], json!(0.0313));
        assert_eq!(out["uniquenessScore"], json!(97));
        assert_eq!(out["classification"], json!("novel"));
    }

    #[test]
    fn nearest_ties_are_broken_by_collation_of_ids() {
        let proposed = json!({"id": "alpha/one"});
        let existing = [
            json!({"id": "b/x"}),
            json!({"id": "a_b/x"}),
            json!({"id": "a-b/x"}),
        ];
        let out = assess(&proposed, &existing).unwrap();
        let ids: Vec<&str> = out["nearest"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["a_b/x", "a-b/x", "b/x"]);
    }

    #[test]
    fn a_comparator_that_throws_is_reported() {
        // Equal similarity and a non-string id: `a.id.localeCompare` is not a function.
        let out = assess(
            &json!({"id": "alpha/one"}),
            &[json!({"id": 1}), json!({"id": 2})],
        );
        assert_eq!(out.unwrap_err().name, "TypeError");
        // A non-iterable tag list fails only once a comparison needs it.
        assert!(assess(&json!({"tags": 5}), &[]).is_ok());
        assert!(assess(&json!({"tags": 5}), &[json!({"id": "x/y"})]).is_err());
    }

    #[test]
    fn empty_existing_is_novel() {
        let out = assess(&json!({"id": "a/b"}), &[]).unwrap();
        assert_eq!(out["uniquenessScore"], json!(100));
        assert_eq!(out["classification"], json!("novel"));
        assert_eq!(out["nearest"], json!([]));
    }

    #[test]
    fn empty_sets_count_as_identical() {
        let out = assess(&json!({"id": "alpha/one"}), &[json!({"id": "beta/two"})]).unwrap();
        assert_eq!(out["nearest"][0]["similarity"], json!(0.72));
    }
}
