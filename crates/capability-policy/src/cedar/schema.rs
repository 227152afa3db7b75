//! A Cedar schema generated from the registered capabilities (`cap policy schema`).
//!
//! The schema declares the public contract: entity types `Agent` and `Capability`, the 14
//! actions, and one `Context` type shared by all actions. JSON Schema types map to Cedar
//! types as the request builder converts values (see [`super`], "Numbers"): `string` →
//! `String`, `integer` → `Long`, `number` → `decimal`, `boolean` → `Boolean`, `array` with
//! `items` → `Set`, `object` → record (its `required` properties required, the others
//! optional), `["t", "null"]` → the type of `t`, optional. A property with no Cedar
//! equivalent (a union of types, an array without `items`, no `type`) is left out and
//! reported as a warning.
//!
//! Cedar types the context per action, and every action applies to every capability, so one
//! schema can only give `context.input` (and `context.output`) the union of the properties
//! of every capability's schema, each optional: that is [`GeneratedSchema::schema`], what
//! `cap policy schema` prints. It cannot tell that `a` is a `number` for one tool and an
//! `integer` for another (a property whose types conflict is left out of the union). So
//! the generator also keeps each capability's own types, and [`super::check_sources`]
//! validates each policy that reads `context.input` or `context.output` against a schema
//! whose context is typed by each capability it can apply to
//! ([`GeneratedSchema::capability_json`] shows one). Capabilities whose types agree on the
//! attributes the policies read share one schema, so that checking costs one validation per
//! distinct typing, not per capability.
use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use serde_json::{Map, Value, json};

use super::eval::capability_entity;
use super::{AGENT_TYPE, CAPABILITY_TYPE, CedarError};
use crate::action::ActionType;
use crate::model::GovernedCapability;

/// Options for [`generate_schema`].
#[derive(Clone, Debug, Default)]
pub struct SchemaOptions {
    /// Label keys to declare in `context.labels` (labels are free-form, so the schema only
    /// knows the keys it is told about).
    pub label_keys: Vec<String>,
}

/// The generated schema in both of Cedar's formats, parsed, and the types of each
/// capability's own context.
#[derive(Clone, Debug)]
pub struct GeneratedSchema {
    /// Cedar's JSON schema format.
    pub json: Value,
    /// Cedar's human-readable schema format.
    pub text: String,
    /// The parsed schema, for validation: `context.input` and `context.output` are the union
    /// of every capability's (see the module docs).
    pub schema: cedar_policy::Schema,
    /// Properties left out, and why.
    pub warnings: Vec<String>,
    /// The union types.
    input: CType,
    output: CType,
    labels: CType,
    capabilities: Vec<CapabilityTyping>,
}

/// One capability's own context types and entity.
#[derive(Clone, Debug)]
pub(crate) struct CapabilityTyping {
    pub name: String,
    /// Its input and output record types; `None`: the union's.
    input: Option<CType>,
    output: Option<CType>,
    /// Its Cedar entity, to evaluate the conditions on `resource` that open a policy.
    pub entity: Option<cedar_policy::Entity>,
}

/// Which attributes of a record the checked policies read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Attrs {
    /// The record is used as a whole (compared, or `context` itself is).
    All,
    Named(BTreeSet<String>),
}

impl Attrs {
    pub(crate) fn none() -> Self {
        Attrs::Named(BTreeSet::new())
    }

    pub(crate) fn add(&mut self, attr: &str) {
        if let Attrs::Named(set) = self {
            set.insert(attr.to_string());
        }
    }
}

/// What the checked policies read of `context.input` and `context.output`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reads {
    pub input: Attrs,
    pub output: Attrs,
}

/// A context typing, reduced to the attributes the policies read: capabilities whose
/// typings are equal share one schema (validation gives the same result for them).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ContextTypes {
    input: CType,
    output: CType,
}

impl GeneratedSchema {
    /// The schema, in Cedar's JSON format, whose `context.input` and `context.output` are
    /// the named capability's own input and output types (the union's for one without
    /// schemas): what [`super::check_sources`] validates the policies that apply to it
    /// against. `None` for a capability that was not given to [`generate_schema`].
    pub fn capability_json(&self, name: &str) -> Option<Value> {
        let cap = self.capabilities.iter().find(|c| c.name == name)?;
        let all = Reads {
            input: Attrs::All,
            output: Attrs::All,
        };
        let t = self.context_types(cap, &all);
        Some(schema_json(&t.input, &t.output, &self.labels))
    }

    /// The capabilities the schema was generated for, in order.
    pub(crate) fn capabilities(&self) -> &[CapabilityTyping] {
        &self.capabilities
    }

    /// A capability's context types, reduced to what is read.
    pub(crate) fn context_types(&self, cap: &CapabilityTyping, reads: &Reads) -> ContextTypes {
        let project = |own: &Option<CType>, union: &CType, attrs: &Attrs| {
            let t = own.as_ref().unwrap_or(union);
            match (t, attrs) {
                (CType::Record(all), Attrs::Named(names)) => CType::Record(
                    all.iter()
                        .filter(|(k, _)| names.contains(*k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
                _ => t.clone(),
            }
        };
        ContextTypes {
            input: project(&cap.input, &self.input, &reads.input),
            output: project(&cap.output, &self.output, &reads.output),
        }
    }

    /// The schema for a context typing.
    pub(crate) fn schema_for(&self, t: &ContextTypes) -> Result<cedar_policy::Schema, CedarError> {
        parsed(&schema_json(&t.input, &t.output, &self.labels))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CType {
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

/// A capability's own input (or output) record type; `None` when it has no schema or one
/// that is not an object.
fn own_type(
    name: &str,
    schema: Option<&Value>,
    root: &str,
    warnings: &mut Vec<String>,
) -> Option<CType> {
    match from_json_schema(schema?, &format!("{name}: {root}"), warnings)? {
        t @ CType::Record(_) => Some(t),
        _ => {
            warnings.push(format!(
                "`{name}`: its {root} schema is not an object; only object {root}s are typed"
            ));
            None
        }
    }
}

/// The union of record types, every attribute optional.
fn union_of<'a>(
    types: impl Iterator<Item = Option<&'a CType>>,
    root: &str,
    warnings: &mut Vec<String>,
) -> CType {
    let mut acc: BTreeMap<String, (CType, bool)> = BTreeMap::new();
    let mut dropped = Vec::new();
    for t in types {
        let Some(CType::Record(attrs)) = t else {
            continue;
        };
        let attrs = attrs
            .iter()
            .map(|(k, (t, _))| (k.clone(), (t.clone(), false)))
            .collect();
        merge_records(&mut acc, attrs, root, warnings, &mut dropped);
    }
    CType::Record(acc)
}

/// The schema's JSON for given input, output and labels types.
fn schema_json(input: &CType, output: &CType, labels: &CType) -> Value {
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
    json!({"": {
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
    }})
}

fn parsed(json: &Value) -> Result<cedar_policy::Schema, CedarError> {
    cedar_policy::Schema::from_json_value(json.clone()).map_err(|e| CedarError::Schema {
        message: e.to_string(),
    })
}

/// Generates the schema for the given capabilities: the union schema, and each
/// capability's own types for [`super::check_sources`] (see the module docs).
pub fn generate_schema<'a>(
    capabilities: impl IntoIterator<Item = &'a GovernedCapability>,
    options: &SchemaOptions,
) -> Result<GeneratedSchema, CedarError> {
    let caps: Vec<&GovernedCapability> = capabilities.into_iter().collect();
    let mut warnings = Vec::new();
    let own: Vec<(Option<CType>, Option<CType>)> = caps
        .iter()
        .map(|c| {
            let g = &c.governance;
            (
                own_type(&c.name, g.input_schema.as_ref(), "input", &mut warnings),
                own_type(&c.name, g.output_schema.as_ref(), "output", &mut warnings),
            )
        })
        .collect();
    let input = union_of(own.iter().map(|(i, _)| i.as_ref()), "input", &mut warnings);
    let output = union_of(own.iter().map(|(_, o)| o.as_ref()), "output", &mut warnings);
    let labels = CType::Record(
        options
            .label_keys
            .iter()
            .map(|k| (k.clone(), (CType::String, false)))
            .collect(),
    );
    let json = schema_json(&input, &output, &labels);
    let schema = parsed(&json)?;
    let text = cedar_policy::SchemaFragment::from_json_value(json.clone())
        .map_err(|e| CedarError::Schema {
            message: e.to_string(),
        })?
        .to_cedarschema()
        .map_err(|e| CedarError::Schema {
            message: e.to_string(),
        })?
        .replace("__cedar::", "");

    let capability_type = cedar_policy::EntityTypeName::from_str(CAPABILITY_TYPE).map_err(|e| {
        CedarError::Schema {
            message: e.to_string(),
        }
    })?;
    let capabilities = caps
        .iter()
        .zip(own)
        .map(|(cap, (input, output))| {
            let uid = cedar_policy::EntityUid::from_type_name_and_id(
                capability_type.clone(),
                cedar_policy::EntityId::new(&cap.name),
            );
            CapabilityTyping {
                name: cap.name.clone(),
                input,
                output,
                entity: capability_entity(cap, uid).ok(),
            }
        })
        .collect();
    Ok(GeneratedSchema {
        json,
        text,
        schema,
        warnings,
        input,
        output,
        labels,
        capabilities,
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
