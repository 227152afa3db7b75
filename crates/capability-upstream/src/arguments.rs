//! What an upstream tool's arguments must be before anything is decided about them.
//!
//! * **No `__proto__` member, at any depth.** The canonical JSON every hash is taken of (the
//!   plan fingerprint an approval is bound to, `argumentsSha256` in the audit event, the
//!   receipt's input hash) drops `__proto__` members, as the reference does; the arguments
//!   sent upstream would keep them. A document carrying one would be approved and audited as
//!   one document and run as another, so it is refused ([`refuse_proto`]): `INVALID_INPUT`
//!   with the member's path, before policies, approvals or the upstream see it. Refusing
//!   breaks no legitimate call: JSON text can carry such a member, but no JavaScript caller
//!   can build one with an object literal, and a receiver in JavaScript that copies or
//!   merges the object turns it into the object's prototype rather than a member.
//! * **Valid against the pinned `inputSchema`** ([`InputSchema`], compiled once per
//!   definition): the validation issues are the refusal's details. A schema that does not
//!   compile (a remote `$ref`, an unknown type) refuses every call: the arguments cannot be
//!   checked, so they are not forwarded unchecked.

use std::sync::Arc;

use capability_core::schema::{CompiledSchema, SchemaIssue};
use capability_core::{CapabilityError, ErrorCode};
use serde_json::{Map, Value, json};

/// The member whose presence is refused.
pub const PROTO: &str = "__proto__";

/// The path (reference notation, `$.a[0].__proto__`) of the first `__proto__` member in
/// `value`, if it has one at any depth.
pub fn proto_member(value: &Value) -> Option<String> {
    // The common case (no such member) costs one walk and no allocation per node.
    if !carries_proto([value]) {
        return None;
    }
    proto_path(value)
}

/// [`proto_member`] of the object whose members are `members`.
pub fn proto_member_of(members: &Map<String, Value>) -> Option<String> {
    if !members.contains_key(PROTO) && !carries_proto(members.values()) {
        return None;
    }
    proto_path(&Value::Object(members.clone()))
}

/// Whether any of `values` carries a `__proto__` member at any depth.
fn carries_proto<'a>(values: impl IntoIterator<Item = &'a Value>) -> bool {
    let mut stack: Vec<&Value> = values.into_iter().collect();
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(members) => {
                if members.contains_key(PROTO) {
                    return true;
                }
                stack.extend(members.values().filter(|m| m.is_object() || m.is_array()));
            }
            Value::Array(items) => {
                stack.extend(items.iter().filter(|m| m.is_object() || m.is_array()));
            }
            _ => {}
        }
    }
    false
}

/// The path of the first `__proto__` member, in document order.
fn proto_path(value: &Value) -> Option<String> {
    let mut stack: Vec<(&Value, String)> = vec![(value, "$".to_string())];
    while let Some((v, path)) = stack.pop() {
        match v {
            Value::Object(members) => {
                if members.contains_key(PROTO) {
                    return Some(format!("{path}.{PROTO}"));
                }
                for (k, m) in members.iter().rev() {
                    if m.is_object() || m.is_array() {
                        stack.push((m, format!("{path}.{k}")));
                    }
                }
            }
            Value::Array(items) => {
                for (i, m) in items.iter().enumerate().rev() {
                    if m.is_object() || m.is_array() {
                        stack.push((m, format!("{path}[{i}]")));
                    }
                }
            }
            _ => {}
        }
    }
    None
}

/// The refusal of a document carrying a `__proto__` member at `path` (see the module docs).
pub fn refuse_proto(path: &str) -> CapabilityError {
    CapabilityError::new(
        ErrorCode::InvalidInput,
        format!(
            "Input carries a `__proto__` member at {path}: it is refused, because the \
             canonical form that is hashed, approved and audited leaves such members out"
        ),
    )
    .with_details(json!([{"path": path, "message": "__proto__ members are not accepted"}]))
}

/// `Ok` unless `value` carries a `__proto__` member ([`refuse_proto`]).
pub fn check_no_proto(value: &Value) -> Result<(), CapabilityError> {
    match proto_member(value) {
        Some(path) => Err(refuse_proto(&path)),
        None => Ok(()),
    }
}

/// The input schema of a tool definition as the host checks it: its `inputSchema` when that
/// is an object, else `{"type": "object"}`.
pub fn input_schema_of(definition: &Value) -> Value {
    definition
        .get("inputSchema")
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}))
}

/// A tool's input schema, compiled once per definition, or why it does not compile.
#[derive(Clone, Debug)]
pub struct InputSchema {
    schema: Value,
    compiled: Result<Arc<CompiledSchema>, String>,
}

impl PartialEq for InputSchema {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

impl InputSchema {
    /// Compiles the input schema of `definition` ([`input_schema_of`]).
    pub fn of(definition: &Value) -> InputSchema {
        let schema = input_schema_of(definition);
        let compiled = CompiledSchema::compile(&schema)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        InputSchema { schema, compiled }
    }

    /// Why the schema does not compile, if it does not.
    pub fn error(&self) -> Option<&str> {
        self.compiled.as_ref().err().map(String::as_str)
    }

    /// Checks `input`: `INVALID_INPUT` with the validation issues (their messages in the
    /// error's message too), or with why the schema cannot check anything.
    pub fn check(&self, tool: &str, input: &Value) -> Result<(), CapabilityError> {
        let compiled = self.compiled.as_ref().map_err(|e| {
            CapabilityError::new(
                ErrorCode::InvalidInput,
                format!(
                    "The input schema of {tool} does not compile ({e}): its arguments cannot \
                     be checked, so it is not called"
                ),
            )
        })?;
        let issues = compiled.validate(input);
        if issues.is_empty() {
            return Ok(());
        }
        Err(CapabilityError::new(
            ErrorCode::InvalidInput,
            format!("Input failed schema validation: {}", issue_summary(&issues)),
        )
        .with_details(serde_json::to_value(&issues).unwrap_or(Value::Null)))
    }
}

/// `path: message; ...`.
pub fn issue_summary(issues: &[SchemaIssue]) -> String {
    issues
        .iter()
        .map(|i| format!("{}: {}", i.path, i.message))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn proto_members_are_found_at_any_depth() {
        assert_eq!(proto_member(&json!({"a": 1, "b": [1, {"c": {}}]})), None);
        assert_eq!(proto_member(&json!("__proto__")), None);
        assert_eq!(proto_member(&json!({"k": "__proto__"})), None);
        assert_eq!(
            proto_member(&json!({"__proto__": 1})).as_deref(),
            Some("$.__proto__")
        );
        assert_eq!(
            proto_member(&json!({"a": [0, {"b": {"__proto__": null}}]})).as_deref(),
            Some("$.a[1].b.__proto__")
        );
        assert_eq!(
            proto_member(&json!([[{"__proto__": {}}]])).as_deref(),
            Some("$[0][0].__proto__")
        );
        let members = json!({"a": {"b": [{"__proto__": 1}]}});
        assert_eq!(
            proto_member_of(members.as_object().unwrap()).as_deref(),
            Some("$.a.b[0].__proto__")
        );
        assert_eq!(proto_member_of(json!({"a": 1}).as_object().unwrap()), None);
    }

    #[test]
    fn schemas_check_or_refuse() {
        let s = InputSchema::of(&json!({"inputSchema": {"type": "object",
            "properties": {"n": {"type": "integer"}}, "required": ["n"]}}));
        assert!(s.check("t", &json!({"n": 1})).is_ok());
        let e = s.check("t", &json!({"n": "x"})).unwrap_err();
        assert!(e.message.contains("$.n: expected integer"), "{e:?}");
        let bad = InputSchema::of(&json!({"inputSchema": {"type": "objekt"}}));
        assert!(bad.error().is_some());
        assert!(bad.check("t", &json!({})).is_err());
        // No schema: an object.
        let none = InputSchema::of(&json!({"name": "t"}));
        assert!(none.check("t", &json!({})).is_ok());
        assert!(none.check("t", &json!("x")).is_err());
    }

    /// Values with `__proto__` members planted at random depths: the detector finds every
    /// one (and the canonical form, which drops them, differs exactly when it does), so
    /// nothing approved under the canonical form is forwarded with more (issue 30, item 2).
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(json!(null)),
                any::<i64>().prop_map(|i| json!(i)),
                "[a-z_]{0,8}".prop_map(|s| json!(s)),
            ];
            leaf.prop_recursive(5, 40, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map(
                        prop_oneof![Just("__proto__".to_string()), "[a-z_]{1,8}"],
                        inner,
                        0..4
                    )
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn has_proto(v: &Value) -> bool {
            match v {
                Value::Object(m) => m.contains_key("__proto__") || m.values().any(has_proto),
                Value::Array(items) => items.iter().any(has_proto),
                _ => false,
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

            #[test]
            fn every_proto_member_is_found(v in value()) {
                prop_assert_eq!(proto_member(&v).is_some(), has_proto(&v), "{}", v);
                prop_assert_eq!(check_no_proto(&v).is_ok(), !has_proto(&v));
                if !has_proto(&v) {
                    // What is hashed and approved is then byte for byte what is forwarded.
                    prop_assert_eq!(
                        capability_core::json::canonical_string(&v),
                        capability_core::json::canonical_string(&serde_json::from_str::<Value>(&v.to_string()).unwrap())
                    );
                }
            }
        }
    }
}
