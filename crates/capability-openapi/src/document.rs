//! Reading OpenAPI documents: JSON or YAML text, the version dispatch, local `$ref`s
//! (JSON pointers with `~1`/`~0` unescaping, chains followed with cycle detection), and the
//! schema bundling an executable manifest needs (every local reference a schema reaches is
//! copied under `$defs`, so recursive schemas stay finite and compile).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::ImportError;

/// The largest document read (bytes).
pub const MAX_DOCUMENT_BYTES: usize = 32 << 20;

/// The OpenAPI versions this crate reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// `openapi: 3.0.x` (JSON Schema draft-04 dialect: `nullable`, boolean `exclusiveMinimum`).
    V30,
    /// `openapi: 3.1.x` (JSON Schema 2020-12).
    V31,
}

impl Version {
    /// The version of a parsed document, from its `openapi` field (dispatched here: the
    /// parsers for each version do not check it).
    pub fn of(doc: &Value) -> Result<Version, ImportError> {
        match doc.get("openapi") {
            Some(Value::String(s)) if s.starts_with("3.1") => Ok(Version::V31),
            Some(Value::String(s)) if s.starts_with("3.0") => Ok(Version::V30),
            Some(Value::String(s)) => Err(ImportError::unsupported(format!(
                "found openapi {s:?}; OpenAPI 3.0.x and 3.1.x are supported"
            ))),
            Some(other) => Err(ImportError::unsupported(format!(
                "the openapi field must be a string such as \"3.1.0\", found {other}"
            ))),
            None => match doc.get("swagger") {
                Some(v) => Err(ImportError::unsupported(format!(
                    "found Swagger {}; convert it to OpenAPI 3 first (OpenAPI 3.0.x and 3.1.x are supported)",
                    capability_core::json::js_string_of(v)
                ))),
                None => Err(ImportError::unsupported(
                    "the document has no openapi field".to_string(),
                )),
            },
        }
    }
}

/// Parses document text: JSON when it starts with `{` (after whitespace), YAML otherwise.
/// YAML mapping keys that are numbers or booleans (`200:` in `responses`) become strings.
pub fn parse_document(text: &[u8]) -> Result<Value, ImportError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(ImportError::Read(format!(
            "the document is larger than {MAX_DOCUMENT_BYTES} bytes"
        )));
    }
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        return capability_core::json::parse(text)
            .map_err(|e| ImportError::Read(format!("invalid JSON: {e}")));
    }
    let yaml: yaml_serde::Value = yaml_serde::from_slice(text)
        .map_err(|e| ImportError::Read(format!("invalid YAML: {e}")))?;
    yaml_to_json(yaml, 0)
}

const MAX_DEPTH: usize = 256;

fn yaml_key(key: yaml_serde::Value) -> Result<String, ImportError> {
    use yaml_serde::Value as Y;
    Ok(match key {
        Y::String(s) => s,
        Y::Number(n) => n.to_string(),
        Y::Bool(b) => b.to_string(),
        Y::Null => "null".into(),
        Y::Tagged(t) => yaml_key(t.value)?,
        Y::Sequence(_) | Y::Mapping(_) => {
            return Err(ImportError::Read(
                "invalid YAML: a mapping key must be a scalar".into(),
            ));
        }
    })
}

fn yaml_to_json(value: yaml_serde::Value, depth: usize) -> Result<Value, ImportError> {
    use yaml_serde::Value as Y;
    if depth > MAX_DEPTH {
        return Err(ImportError::Read(format!(
            "the document nests deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Value::Null, Value::Number)
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(
            items
                .into_iter()
                .map(|i| yaml_to_json(i, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Y::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                out.insert(yaml_key(k)?, yaml_to_json(v, depth + 1)?);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => yaml_to_json(t.value, depth + 1)?,
    })
}

/// Unescapes one JSON-pointer token (`~1` is `/`, `~0` is `~`).
fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The value a local reference (`#/a/b`) names in `doc`, if any.
pub fn resolve_pointer<'a>(doc: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(doc);
    }
    let pointer = pointer.strip_prefix('/')?;
    let mut node = doc;
    for raw in pointer.split('/') {
        let token = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .ok()?;
        let token = unescape(&token);
        node = match node {
            Value::Object(m) => m.get(&token)?,
            Value::Array(a) => a.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(node)
}

/// The `$ref` string of a value that is exactly a reference object.
pub fn ref_of(value: &Value) -> Option<&str> {
    value.get("$ref").and_then(Value::as_str)
}

/// The reference's one-level dereference: a value that is a local `$ref` is replaced by its
/// target (`None` when unresolved or remote); any other value is kept.
pub fn deref_once<'a>(doc: &'a Value, value: &'a Value) -> Option<&'a Value> {
    match ref_of(value) {
        Some(r) if r.starts_with('#') => resolve_pointer(doc, r),
        Some(_) => None,
        None => Some(value),
    }
}

/// Follows a chain of reference objects to a value that is not one, refusing remote
/// references, unresolved references and cycles.
pub fn deref_chain<'a>(doc: &'a Value, value: &'a Value) -> Result<&'a Value, ImportError> {
    let mut seen: Vec<&str> = Vec::new();
    let mut node = value;
    while let Some(r) = ref_of(node) {
        if !r.starts_with('#') {
            return Err(ImportError::Reference(format!(
                "external $ref {r} is not supported (only references inside the document)"
            )));
        }
        if seen.contains(&r) {
            seen.push(r);
            return Err(ImportError::Reference(format!(
                "cyclic $ref: {}",
                seen.join(" -> ")
            )));
        }
        seen.push(r);
        node = resolve_pointer(doc, r)
            .ok_or_else(|| ImportError::Reference(format!("unresolved $ref {r}")))?;
    }
    Ok(node)
}

/// Converts an OpenAPI 3.0 schema (draft-04 dialect) to JSON Schema 2020-12: `nullable`
/// becomes a `null` type, boolean `exclusiveMinimum`/`exclusiveMaximum` become numbers.
pub fn convert_30_schema(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            if m.get("nullable") == Some(&Value::Bool(true)) {
                match m.get_mut("type") {
                    Some(Value::String(t)) => {
                        let t = std::mem::take(t);
                        m.insert("type".into(), serde_json::json!([t, "null"]));
                    }
                    Some(Value::Array(ts)) if !ts.iter().any(|t| t == "null") => {
                        ts.push(Value::from("null"));
                    }
                    _ => {}
                }
                if let Some(Value::Array(e)) = m.get_mut("enum")
                    && !e.contains(&Value::Null)
                {
                    e.push(Value::Null);
                }
            }
            m.remove("nullable");
            for (flag, bound) in [
                ("exclusiveMinimum", "minimum"),
                ("exclusiveMaximum", "maximum"),
            ] {
                match m.get(flag) {
                    Some(Value::Bool(true)) => match m.remove(bound) {
                        Some(n) => {
                            m.insert(flag.into(), n);
                        }
                        None => {
                            m.remove(flag);
                        }
                    },
                    Some(Value::Bool(false)) => {
                        m.remove(flag);
                    }
                    _ => {}
                }
            }
            for (k, v) in m.iter_mut() {
                // Values that are data, not schemas.
                if matches!(k.as_str(), "enum" | "const" | "example" | "default") {
                    continue;
                }
                convert_30_schema(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(convert_30_schema),
        _ => {}
    }
}

/// A key for `$defs` from a reference (`#/components/schemas/Pet` → `components.schemas.Pet`).
fn def_key(reference: &str, used: &BTreeMap<String, String>) -> String {
    let raw = reference.trim_start_matches('#').trim_start_matches('/');
    let mut key: String = raw
        .chars()
        .map(|c| match c {
            '/' => '.',
            c if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') => c,
            _ => '_',
        })
        .collect();
    if key.is_empty() {
        key = "root".into();
    }
    let base = key.clone();
    let mut n = 2;
    while used.values().any(|k| *k == key) {
        key = format!("{base}_{n}");
        n += 1;
    }
    key
}

/// A schema that compiles on its own: every local `$ref` it reaches (transitively) is copied
/// under `$defs` and rewritten to `#/$defs/<key>`. Recursive schemas stay recursive (and
/// finite); a reference that only aliases itself, an unresolved reference or an external one
/// is refused.
pub fn bundle_schema(doc: &Value, schema: &Value, v30: bool) -> Result<Value, ImportError> {
    // Collect the references, breadth first.
    let mut keys: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut queue: Vec<String> = Vec::new();
    collect_refs(schema, &mut queue);
    while let Some(r) = queue.pop() {
        if keys.contains_key(&r) {
            continue;
        }
        if !r.starts_with('#') {
            return Err(ImportError::Reference(format!(
                "external $ref {r} is not supported (only references inside the document)"
            )));
        }
        let target = resolve_pointer(doc, &r)
            .ok_or_else(|| ImportError::Reference(format!("unresolved $ref {r}")))?;
        // A pure alias chain that returns to itself describes no value.
        deref_chain(doc, target)?;
        let key = def_key(&r, &keys);
        keys.insert(r.clone(), key);
        order.push(r);
        collect_refs(target, &mut queue);
    }
    let rewrite = |v: &Value| -> Value {
        let mut v = v.clone();
        rewrite_refs(&mut v, &keys);
        if v30 {
            convert_30_schema(&mut v);
        }
        v
    };
    let mut out = rewrite(schema);
    if !order.is_empty() {
        let mut defs = Map::new();
        for r in &order {
            if let (Some(target), Some(key)) = (resolve_pointer(doc, r), keys.get(r)) {
                defs.insert(key.clone(), rewrite(target));
            }
        }
        match &mut out {
            Value::Object(m) => {
                let existing = m
                    .entry("$defs")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(e) = existing {
                    e.extend(defs);
                }
            }
            other => {
                // A boolean schema has nowhere to keep definitions and references none.
                let _ = other;
            }
        }
    }
    Ok(out)
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    if let Value::String(s) = x {
                        out.push(s.clone());
                    }
                } else if !matches!(
                    k.as_str(),
                    "enum" | "const" | "example" | "examples" | "default"
                ) {
                    collect_refs(x, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_refs(i, out)),
        _ => {}
    }
}

fn rewrite_refs(v: &mut Value, keys: &BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "$ref" {
                    if let Value::String(s) = x
                        && let Some(key) = keys.get(s.as_str())
                    {
                        *s = format!("#/$defs/{key}");
                    }
                } else if !matches!(
                    k.as_str(),
                    "enum" | "const" | "example" | "examples" | "default"
                ) {
                    rewrite_refs(x, keys);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| rewrite_refs(i, keys)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_unescape_and_chains_detect_cycles() {
        let doc = json!({"components": {"parameters": {"a/b~c": {"name": "x"}},
            "schemas": {"A": {"$ref": "#/components/schemas/B"}, "B": {"$ref": "#/components/schemas/A"}}}});
        assert_eq!(
            resolve_pointer(&doc, "#/components/parameters/a~1b~0c"),
            Some(&json!({"name": "x"}))
        );
        let e = deref_chain(&doc, &json!({"$ref": "#/components/schemas/A"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cyclic $ref: #/components/schemas/A -> #/components/schemas/B -> #/components/schemas/A"
        );
        assert!(bundle_schema(&doc, &json!({"$ref": "#/components/schemas/A"}), false).is_err());
    }

    #[test]
    fn recursive_schemas_are_bundled_and_compile() {
        let doc = json!({"components": {"schemas": {"Node": {"type": "object",
            "properties": {"next": {"$ref": "#/components/schemas/Node"}, "v": {"type": "integer"}}}}}});
        let s = bundle_schema(&doc, &json!({"$ref": "#/components/schemas/Node"}), false).unwrap();
        assert_eq!(s["$ref"], "#/$defs/components.schemas.Node");
        let c = capability_core::schema::CompiledSchema::compile(&s).unwrap();
        assert!(c.is_valid(&json!({"v": 1, "next": {"v": 2}})));
        assert!(!c.is_valid(&json!({"v": 1, "next": {"v": "x"}})));
    }

    #[test]
    fn openapi_30_schemas_become_2020_12() {
        let mut s = json!({"type": "object", "properties": {
            "n": {"type": "integer", "nullable": true, "minimum": 1, "exclusiveMinimum": true},
            "e": {"type": "string", "enum": ["a"], "nullable": true}}});
        convert_30_schema(&mut s);
        assert_eq!(
            s["properties"]["n"],
            json!({"type": ["integer", "null"], "exclusiveMinimum": 1})
        );
        assert_eq!(
            s["properties"]["e"],
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
    }

    #[test]
    fn yaml_numeric_keys_become_strings() {
        let doc = parse_document(b"openapi: 3.0.3\npaths:\n  /x:\n    get:\n      responses:\n        200:\n          description: ok\n").unwrap();
        assert_eq!(
            doc["paths"]["/x"]["get"]["responses"]["200"]["description"],
            "ok"
        );
        assert_eq!(Version::of(&doc).unwrap(), Version::V30);
        assert!(parse_document(b"{\"openapi\": ").is_err());
    }
}
