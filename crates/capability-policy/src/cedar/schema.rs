//! A Cedar schema generated from the registered capabilities (`cap policy schema`).
//!
//! The schema declares the public contract: entity types `Agent` and `Capability`, the 14
//! actions, and one `Context` type shared by all actions. Because every action type may be
//! used with every capability, `context.input` (and `context.output`) is the union of the
//! properties of every capability's input (output) JSON Schema, each attribute optional:
//! policies test `context.input has amount` before reading it, which Cedar's validator
//! enforces. A property whose JSON Schema types conflict between capabilities, or has no
//! Cedar equivalent, is left out and reported as a warning.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::{ACTION_TYPE, AGENT_TYPE, CAPABILITY_TYPE, CedarError};
use crate::action::ActionType;
use crate::model::GovernedCapability;

/// Options for [`generate_schema`].
#[derive(Clone, Debug, Default)]
pub struct SchemaOptions {
    /// Label keys to declare in `context.labels` (labels are free-form, so the schema only
    /// knows the keys it is told about).
    pub label_keys: Vec<String>,
}

/// The generated schema in both of Cedar's formats, parsed.
#[derive(Clone, Debug)]
pub struct GeneratedSchema {
    /// Cedar's JSON schema format.
    pub json: Value,
    /// Cedar's human-readable schema format.
    pub text: String,
    /// The parsed schema, for validation.
    pub schema: cedar_policy::Schema,
    /// Properties left out, and why.
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
enum CType {
    String,
    Long,
    Bool,
    Decimal,
    Set(Box<CType>),
    Record(BTreeMap<String, (CType, bool)>),
}

impl CType {
    fn to_json(&self) -> Value {
        match self {
            CType::String => json!({"type": "String"}),
            CType::Long => json!({"type": "Long"}),
            CType::Bool => json!({"type": "Boolean"}),
            CType::Decimal => json!({"type": "Extension", "name": "decimal"}),
            CType::Set(t) => json!({"type": "Set", "element": t.to_json()}),
            CType::Record(attrs) => {
                let mut m = Map::new();
                for (k, (t, required)) in attrs {
                    let mut v = t.to_json();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("required".into(), Value::Bool(*required));
                    }
                    m.insert(k.clone(), v);
                }
                json!({"type": "Record", "attributes": m})
            }
        }
    }
}

/// JSON Schema → Cedar type; `None` when there is no Cedar equivalent.
fn from_json_schema(s: &Value, path: &str, warnings: &mut Vec<String>) -> Option<CType> {
    let ty = match s.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(ts)) => {
            let non_null: Vec<&str> = ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect();
            if non_null.len() == 1 {
                Some(non_null[0])
            } else {
                warnings.push(format!(
                    "`{path}`: a union of types has no cedar equivalent"
                ));
                return None;
            }
        }
        _ => None,
    };
    let ty = match ty {
        Some(t) => t,
        None => {
            let strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
            if s.get("enum").is_some_and(strings) || s.get("const").is_some_and(Value::is_string) {
                "string"
            } else {
                warnings.push(format!("`{path}`: no single JSON Schema type"));
                return None;
            }
        }
    };
    match ty {
        "string" => Some(CType::String),
        "integer" => Some(CType::Long),
        "number" => Some(CType::Decimal),
        "boolean" => Some(CType::Bool),
        "array" => match s.get("items") {
            Some(items) => from_json_schema(items, &format!("{path}[]"), warnings)
                .map(|t| CType::Set(Box::new(t))),
            None => {
                warnings.push(format!("`{path}`: an array without `items`"));
                None
            }
        },
        "object" => {
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut attrs = BTreeMap::new();
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    if let Some(t) = from_json_schema(v, &format!("{path}.{k}"), warnings) {
                        let nullable = v
                            .get("type")
                            .and_then(Value::as_array)
                            .is_some_and(|a| a.iter().any(|t| t == "null"));
                        attrs.insert(k.clone(), (t, required.contains(&k.as_str()) && !nullable));
                    }
                }
            }
            Some(CType::Record(attrs))
        }
        other => {
            warnings.push(format!("`{path}`: type `{other}` has no cedar equivalent"));
            None
        }
    }
}

/// Merges two records attribute by attribute (an attribute missing on one side becomes
/// optional; conflicting attributes are dropped).
fn merge_records(
    a: &mut BTreeMap<String, (CType, bool)>,
    b: BTreeMap<String, (CType, bool)>,
    path: &str,
    warnings: &mut Vec<String>,
    dropped: &mut Vec<String>,
) {
    let a_keys: Vec<String> = a.keys().cloned().collect();
    for k in a_keys {
        if !b.contains_key(&k)
            && let Some(slot) = a.get_mut(&k)
        {
            slot.1 = false;
        }
    }
    for (k, (tb, rb)) in b {
        let sub = format!("{path}.{k}");
        if dropped.contains(&sub) {
            continue;
        }
        match a.get_mut(&k) {
            None => {
                a.insert(k, (tb, false));
            }
            Some((ta, ra)) => {
                *ra = *ra && rb;
                match (ta, tb) {
                    (CType::Record(ma), CType::Record(mb)) => {
                        merge_records(ma, mb, &sub, warnings, dropped);
                    }
                    (ta, tb) if *ta == tb => {}
                    (_, _) => {
                        warnings.push(format!(
                            "`{sub}`: capabilities disagree on its type; left out of the schema"
                        ));
                        dropped.push(sub);
                        a.remove(&k);
                    }
                }
            }
        }
    }
}

fn union_of<'a>(
    schemas: impl Iterator<Item = (&'a str, Option<&'a Value>)>,
    root: &str,
    warnings: &mut Vec<String>,
) -> CType {
    let mut acc: BTreeMap<String, (CType, bool)> = BTreeMap::new();
    let mut dropped = Vec::new();
    for (name, schema) in schemas {
        let Some(schema) = schema else { continue };
        match from_json_schema(schema, &format!("{name}: {root}"), warnings) {
            Some(CType::Record(attrs)) => {
                let attrs = attrs
                    .into_iter()
                    .map(|(k, (t, _))| (k, (t, false)))
                    .collect();
                merge_records(&mut acc, attrs, root, warnings, &mut dropped);
            }
            Some(_) => warnings.push(format!(
                "`{name}`: its {root} schema is not an object; only object {root}s are typed"
            )),
            None => {}
        }
    }
    CType::Record(acc)
}

/// Generates the schema for the given capabilities.
pub fn generate_schema<'a>(
    capabilities: impl IntoIterator<Item = &'a GovernedCapability>,
    options: &SchemaOptions,
) -> Result<GeneratedSchema, CedarError> {
    let caps: Vec<&GovernedCapability> = capabilities.into_iter().collect();
    let mut warnings = Vec::new();
    let input = union_of(
        caps.iter()
            .map(|c| (c.name.as_str(), c.governance.input_schema.as_ref())),
        "input",
        &mut warnings,
    );
    let output = union_of(
        caps.iter()
            .map(|c| (c.name.as_str(), c.governance.output_schema.as_ref())),
        "output",
        &mut warnings,
    );
    let labels = CType::Record(
        options
            .label_keys
            .iter()
            .map(|k| (k.clone(), (CType::String, false)))
            .collect(),
    );
    let string = || json!({"type": "String"});
    let strings = || json!({"type": "Set", "element": {"type": "String"}});
    let decimal =
        |required: bool| json!({"type": "Extension", "name": "decimal", "required": required});
    let context = json!({
        "type": "Record",
        "attributes": {
            "input": {"type": "Input"},
            "output": {"type": "Output", "required": false},
            "environment": string(),
            "tenant": string(),
            "stage": string(),
            "labels": {"type": "Labels"},
            "costSoFarUsd": decimal(true),
            "estimatedCostUsd": decimal(false),
        }
    });
    let mut actions = Map::new();
    for a in ActionType::ALL {
        actions.insert(
            a.as_str().to_string(),
            json!({"appliesTo": {
                "principalTypes": [AGENT_TYPE],
                "resourceTypes": [CAPABILITY_TYPE],
                "context": {"type": "Context"},
            }}),
        );
    }
    let json = json!({"": {
        "commonTypes": {
            "Input": input.to_json(),
            "Output": output.to_json(),
            "Labels": labels.to_json(),
            "Context": context,
        },
        "entityTypes": {
            AGENT_TYPE: {"shape": {"type": "Record", "attributes": {
                "tenant": string(),
                "scopes": strings(),
            }}},
            CAPABILITY_TYPE: {"shape": {"type": "Record", "attributes": {
                "name": string(),
                "kind": string(),
                "risk": string(),
                "riskLevel": {"type": "Long"},
                "effects": strings(),
                "scopes": strings(),
                "owner": string(),
                "dataNamespace": string(),
                "tenant": string(),
                "environment": string(),
                // The HTTP facts of an OpenAPI operation ("" otherwise); `server` is also
                // the upstream of an MCP gateway tool.
                "method": string(),
                "path": string(),
                "operationId": string(),
                "server": string(),
            }}},
        },
        "actions": actions,
    }});
    let _ = ACTION_TYPE;
    let schema =
        cedar_policy::Schema::from_json_value(json.clone()).map_err(|e| CedarError::Schema {
            message: e.to_string(),
        })?;
    let text = cedar_policy::SchemaFragment::from_json_value(json.clone())
        .map_err(|e| CedarError::Schema {
            message: e.to_string(),
        })?
        .to_cedarschema()
        .map_err(|e| CedarError::Schema {
            message: e.to_string(),
        })?
        .replace("__cedar::", "");
    Ok(GeneratedSchema {
        json,
        text,
        schema,
        warnings,
    })
}

/// Parses a schema in Cedar's human format or JSON format (detected by a leading `{`).
pub fn parse_schema(text: &str) -> Result<cedar_policy::Schema, CedarError> {
    let err = |message: String| CedarError::Schema { message };
    if text.trim_start().starts_with('{') {
        cedar_policy::Schema::from_json_str(text).map_err(|e| err(e.to_string()))
    } else {
        cedar_policy::Schema::from_cedarschema_str(text)
            .map(|(s, _warnings)| s)
            .map_err(|e| err(e.to_string()))
    }
}
