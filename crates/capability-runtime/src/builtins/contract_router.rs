//! `capability/contract-router`: which consumers can take a producer's output (the reference
//! `routeCapabilityContracts(producerOutput, consumers)`).
//!
//! For each consumer, the required input keys the producer lacks are `missing`, those whose
//! declared types differ (neither `any`) are `typeMismatches`, the consumer's properties the
//! producer also has form the `projection`, and `score` is the share of required keys
//! fulfilled (a consumer without required keys scores 0 while being compatible). Routes are
//! sorted compatible first, then by score, then by `localeCompare` on id.

use capability_core::js::math_round;
use serde_json::{Map, Value};

use super::BuiltinError;
use super::common::{ObjectContract, js_sort_by, locale_compare_ids, member, num, numeric_order};

struct Route<'a> {
    id: Option<&'a Value>,
    compatible: bool,
    projection: Vec<&'a str>,
    missing: Vec<&'a str>,
    type_mismatches: Vec<&'a str>,
    score: f64,
}

fn strings(items: &[&str]) -> Value {
    Value::Array(items.iter().map(|s| Value::from(*s)).collect())
}

/// The reference `routeCapabilityContracts(producerOutput, consumers)`.
pub fn route(producer_output: Option<&Value>, consumers: &[Value]) -> Result<Value, BuiltinError> {
    let producer = ObjectContract::of(producer_output);
    let mut routes = Vec::with_capacity(consumers.len());
    for consumer in consumers {
        let target = ObjectContract::of(member(Some(consumer), "input")?);
        let missing: Vec<&str> = target
            .required
            .iter()
            .copied()
            .filter(|key| !producer.has(key))
            .collect();
        let type_mismatches: Vec<&str> = target
            .required
            .iter()
            .copied()
            .filter(|key| {
                if !producer.has(key) {
                    return false;
                }
                let (from, to) = (producer.type_of(key), target.type_of(key));
                from != "any" && to != "any" && from != to
            })
            .collect();
        let projection: Vec<&str> = target
            .properties
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| producer.has(key))
            .collect();
        let compatible = missing.is_empty() && type_mismatches.is_empty();
        let required_count = target.required.len().max(1);
        let fulfilled = target
            .required
            .iter()
            .filter(|key| producer.has(key) && !type_mismatches.contains(key))
            .count();
        routes.push(Route {
            id: consumer.get("id"),
            compatible,
            projection,
            missing,
            type_mismatches,
            score: math_round(fulfilled as f64 / required_count as f64 * 100.0),
        });
    }
    js_sort_by(&mut routes, |a, b| {
        let by_compat = f64::from(u8::from(b.compatible)) - f64::from(u8::from(a.compatible));
        if let Some(order) = numeric_order(by_compat).or(numeric_order(b.score - a.score)) {
            return Ok(order);
        }
        locale_compare_ids(a.id, b.id)
    })?;
    Ok(Value::Array(
        routes
            .into_iter()
            .map(|r| {
                let mut item = Map::new();
                if let Some(id) = r.id {
                    item.insert("id".into(), id.clone());
                }
                item.insert("compatible".into(), r.compatible.into());
                item.insert("projection".into(), strings(&r.projection));
                item.insert("missing".into(), strings(&r.missing));
                item.insert("typeMismatches".into(), strings(&r.type_mismatches));
                item.insert("score".into(), num(r.score));
                Value::Object(item)
            })
            .collect(),
    ))
}

/// Runs `capability/contract-router` on `{producerOutput?, consumers}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let producer = member(Some(input), "producerOutput")?;
    let consumers = match input.get("consumers") {
        Some(Value::Array(items)) => items.as_slice(),
        _ => return Err(BuiltinError::type_error("consumers.map is not a function")),
    };
    route(producer, consumers)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reference_fixture() {
        let producer = json!({"type": "object", "properties": {"text": {"type": "string"},
            "count": {"type": "number"}}, "required": ["text", "count"]});
        let consumers = [
            json!({"id": "text/use", "input": {"properties": {"text": {"type": "string"}},
                "required": ["text"]}}),
            json!({"id": "number/use", "input": {"properties": {"count": {"type": "string"}},
                "required": ["count"]}}),
            json!({"id": "missing/use", "input": {"required": ["path"]}}),
            json!({"id": "free/use"}),
        ];
        let out = route(Some(&producer), &consumers).unwrap();
        let ids: Vec<&str> = out
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["text/use", "free/use", "missing/use", "number/use"]);
        assert_eq!(out[1]["score"], json!(0));
        assert_eq!(out[1]["compatible"], json!(true));
        assert_eq!(out[3]["typeMismatches"], json!(["count"]));
    }
}
