//! The capability manifest (document version `specVersion: "0.1"`) as a typed model, and the
//! legacy definition conversion.
//!
//! Validation of untrusted manifest JSON lives in [`crate::validate`]; this module is the
//! typed form a validated manifest takes. Unknown members are kept in [`Manifest::extra`] so
//! that a manifest survives a round trip byte for byte (manifest equality is a canonical hash
//! comparison, so dropping a member would change identity).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{CapabilityError, ErrorCode};

/// The manifest document version of Capability 1.x.
pub const CAPABILITY_SPEC_VERSION: &str = "0.1";

/// A capability manifest: inert, portable metadata that describes a capability without
/// running it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub spec_version: String,
    pub id: String,
    pub version: String,
    pub name: String,
    pub description: String,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub input: Option<Value>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effects: Option<Vec<String>>,
    /// `{deterministic?, idempotent?, reversible?}` (kept as written: the format does not
    /// validate it).
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub behavior: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
    /// Members the format does not define, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Manifest {
    /// Validates manifest JSON with the reference rules and converts it. Fails with
    /// `INVALID_MANIFEST`, the issues joined by `"; "` and listed in `details`.
    pub fn from_value(value: &Value) -> Result<Manifest, CapabilityError> {
        assert_valid_manifest(value)?;
        serde_json::from_value(value.clone())
            .map_err(|e| CapabilityError::new(ErrorCode::InvalidManifest, format!("manifest: {e}")))
    }

    /// The manifest as JSON (members in the reference's order, then unknown members).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The declared effects, or none.
    pub fn effects(&self) -> &[String] {
        self.effects.as_deref().unwrap_or(&[])
    }

    /// The declared tags, or none.
    pub fn tags(&self) -> &[String] {
        self.tags.as_deref().unwrap_or(&[])
    }

    fn flag(&self, name: &str) -> bool {
        self.behavior.as_ref().and_then(|b| b.get(name)) == Some(&Value::Bool(true))
    }

    /// `behavior.deterministic === true`.
    pub fn is_deterministic(&self) -> bool {
        self.flag("deterministic")
    }

    /// `behavior.idempotent === true`.
    pub fn is_idempotent(&self) -> bool {
        self.flag("idempotent")
    }

    /// `behavior.reversible === true`.
    pub fn is_reversible(&self) -> bool {
        self.flag("reversible")
    }

    /// The reference `inspectCapability`: the manifest members followed by
    /// `executable: false`. Inspection never exposes or runs code.
    pub fn inspect(&self) -> Value {
        let mut v = self.to_value();
        if let Value::Object(map) = &mut v {
            map.insert("executable".into(), Value::Bool(false));
        }
        v
    }

    /// The canonical SHA-256 of the manifest (its identity for equality checks).
    pub fn digest(&self) -> String {
        crate::json::canonical_hash(&self.to_value())
    }
}

/// Validates manifest JSON and fails with `INVALID_MANIFEST` (issues joined by `"; "`,
/// `details` = the issue list) when it is not valid.
pub fn assert_valid_manifest(value: &Value) -> Result<(), CapabilityError> {
    let issues = crate::validate::validate_manifest(value);
    if issues.is_empty() {
        Ok(())
    } else {
        Err(
            CapabilityError::new(ErrorCode::InvalidManifest, issues.join("; "))
                .with_details(Value::from(issues)),
        )
    }
}

/// The reference's internal `slugify` (legacy ids, OpenAPI and MCP import): trim, lowercase,
/// runs outside `[a-z0-9._-]` become `-`, leading and trailing `-` runs stripped; falls back
/// to `capability`.
pub fn legacy_slugify(value: &str) -> String {
    let lower = crate::js::js_trim(value).to_lowercase();
    let mut out = String::with_capacity(lower.len());
    let mut in_run = false;
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-') {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let trimmed = out.trim_matches('-');
    if trimmed.is_empty() {
        "capability".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Maps the legacy effects forms to effect strings: the object form
/// `{filesystem:{read,write}, network, shell, environment}` or an array (de-duplicated).
pub fn normalize_legacy_effects(effects: &Value) -> Vec<String> {
    match effects {
        Value::Array(items) => {
            let mut out: Vec<String> = Vec::new();
            for s in items.iter().filter_map(Value::as_str) {
                if !out.iter().any(|e| e == s) {
                    out.push(s.to_string());
                }
            }
            out
        }
        Value::Object(map) => {
            let truthy = |v: Option<&Value>| match v {
                None | Some(Value::Null) | Some(Value::Bool(false)) => false,
                Some(Value::Number(n)) => crate::json::as_f64(n) != 0.0,
                Some(Value::String(s)) => !s.is_empty(),
                Some(_) => true,
            };
            let fs = map.get("filesystem");
            let mut out = Vec::new();
            if truthy(fs.and_then(|f| f.get("read"))) {
                out.push("filesystem.read".to_string());
            }
            if truthy(fs.and_then(|f| f.get("write"))) {
                out.push("filesystem.write".to_string());
            }
            if truthy(map.get("network")) {
                out.push("network.connect".to_string());
            }
            if truthy(map.get("shell")) {
                out.push("process.spawn".to_string());
            }
            if truthy(map.get("environment")) {
                out.push("environment.read".to_string());
            }
            out
        }
        _ => Vec::new(),
    }
}

/// Converts a legacy definition `{id?, version?, name, description, input?, output?,
/// effects?, behavior?, tags?}` into a manifest (`id` defaults to `local/<slug(name)>`,
/// `version` to `0.0.0`, `behavior` to `{}`, `tags` to `[]`), then validates it.
pub fn manifest_from_legacy(definition: &Value) -> Result<Manifest, CapabilityError> {
    let get = |k: &str| definition.get(k).filter(|v| !v.is_null()).cloned();
    let name = definition
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut m = Map::new();
    m.insert("specVersion".into(), CAPABILITY_SPEC_VERSION.into());
    m.insert(
        "id".into(),
        get("id").unwrap_or_else(|| Value::String(format!("local/{}", legacy_slugify(name)))),
    );
    m.insert(
        "version".into(),
        get("version").unwrap_or_else(|| "0.0.0".into()),
    );
    m.insert("name".into(), get("name").unwrap_or(Value::Null));
    m.insert(
        "description".into(),
        get("description").unwrap_or(Value::Null),
    );
    if let Some(input) = get("input") {
        m.insert("input".into(), input);
    }
    if let Some(output) = get("output") {
        m.insert("output".into(), output);
    }
    let effects = get("effects")
        .map(|e| normalize_legacy_effects(&e))
        .unwrap_or_default();
    m.insert("effects".into(), Value::from(effects));
    m.insert(
        "behavior".into(),
        get("behavior").unwrap_or_else(|| Value::Object(Map::new())),
    );
    m.insert(
        "tags".into(),
        get("tags").unwrap_or_else(|| Value::Array(Vec::new())),
    );
    Manifest::from_value(&Value::Object(m))
}
