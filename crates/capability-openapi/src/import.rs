//! The reference import (`capabilitiesFromOpenApi`): one capability manifest per operation,
//! exactly as the TypeScript reference builds it (`vectors/openapi-import.json`), and the
//! operation facts an HTTP call needs (parameters with their styles, the JSON body, the
//! responses, the security requirements).

use capability_core::js::compare_utf16;
use capability_core::manifest::{assert_valid_manifest, legacy_slugify};
use serde_json::{Map, Value, json};

use crate::document::{Version, convert_30_schema, deref_chain, deref_once};
use crate::error::{ImportError, SERVER_REQUIRED};

/// The methods of a path item, in the reference's order.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "patch", "head", "options", "trace",
];

/// Import options (`{namespace?, baseUrl?}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    pub namespace: Option<String>,
    pub base_url: Option<String>,
}

/// Where a parameter goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Path,
    Query,
    Header,
    Cookie,
}

impl Location {
    fn parse(s: &str) -> Option<Location> {
        Some(match s {
            "path" => Location::Path,
            "query" => Location::Query,
            "header" => Location::Header,
            "cookie" => Location::Cookie,
            _ => return None,
        })
    }

    /// The input group of the location (`path`, `query`, `headers`, `cookies`).
    pub fn group(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Header => "headers",
            Location::Cookie => "cookies",
        }
    }
}

/// One parameter of an operation (path-item parameters first, then the operation's).
#[derive(Clone, Debug, PartialEq)]
pub struct Parameter {
    pub name: String,
    pub location: Location,
    /// `schema`, or `{}`; not dereferenced.
    pub schema: Value,
    pub required: bool,
    pub style: Option<String>,
    pub explode: Option<bool>,
    pub allow_reserved: bool,
}

/// The JSON request body of an operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Body {
    /// The media type the schema came from (`application/json` or a `+json` type).
    pub media_type: String,
    pub schema: Value,
    pub required: bool,
}

/// One imported operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// Lower case (`get`).
    pub method: &'static str,
    /// The path template (`/pets/{petId}`).
    pub path: String,
    pub operation_id: String,
    /// The manifest the reference builds (validated).
    pub manifest: Value,
    pub parameters: Vec<Parameter>,
    pub body: Option<Body>,
    /// The `responses` object as written.
    pub responses: Value,
    /// The security requirements that apply (the operation's, else the document's).
    pub security: Option<Value>,
}

impl Operation {
    /// `GET`.
    pub fn method_upper(&self) -> String {
        self.method.to_ascii_uppercase()
    }

    /// The capability id.
    pub fn id(&self) -> &str {
        self.manifest["id"].as_str().unwrap_or_default()
    }

    /// The reference plan hook: summary `<METHOD> <path>`, data `{path, query}`.
    pub fn reference_plan(&self, input: &Value) -> (String, Value) {
        let group = |k: &str| input.get(k).cloned().unwrap_or_else(|| json!({}));
        (
            format!("{} {}", self.method_upper(), self.path),
            json!({"path": group("path"), "query": group("query")}),
        )
    }
}

/// A whole import.
#[derive(Clone, Debug, PartialEq)]
pub struct Import {
    pub version: Version,
    pub namespace: String,
    /// `options.baseUrl`, else `servers[0].url`.
    pub base_url: String,
    pub operations: Vec<Operation>,
    /// Entries the import skipped, and why (unresolved or cyclic references).
    pub warnings: Vec<String>,
}

fn semver_prefix(s: &str) -> bool {
    let mut parts = s.splitn(3, '.');
    let digits =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let (a, b) = (parts.next(), parts.next());
    let c = parts.next().map(|c| {
        let end = c
            .bytes()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(c.len());
        &c[..end]
    });
    digits(a) && digits(b) && digits(c)
}

fn js_string(v: &Value) -> String {
    capability_core::json::js_string_of(v)
}

/// The media rule: `application/json`, else the first media type ending in `+json`; the
/// schema of that media type, when it has one.
fn json_media(content: Option<&Value>) -> Option<(String, Value)> {
    let content = content?.as_object()?;
    let (name, media) = match content.get("application/json") {
        Some(m) => ("application/json", m),
        None => content
            .iter()
            .find(|(k, _)| k.ends_with("+json"))
            .map(|(k, m)| (k.as_str(), m))?,
    };
    media.get("schema").map(|s| (name.to_string(), s.clone()))
}

/// The response the output schema comes from: the first `2xx` code in sorted order, else
/// `default`, dereferenced once.
pub fn primary_response<'a>(doc: &'a Value, responses: &'a Value) -> Option<&'a Value> {
    let map = responses.as_object()?;
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by(|a, b| compare_utf16(a, b));
    let is_2xx =
        |k: &str| k.len() == 3 && k.starts_with('2') && k[1..].bytes().all(|b| b.is_ascii_digit());
    let key = keys
        .into_iter()
        .find(|k| is_2xx(k))
        .map(String::as_str)
        .unwrap_or("default");
    deref_once(doc, map.get(key)?)
}

/// The JSON schema of a response object (after the media rule).
pub fn response_schema(response: &Value) -> Option<Value> {
    json_media(response.get("content")).map(|(_, s)| s)
}

fn parameter(doc: &Value, raw: &Value, v30: bool, warnings: &mut Vec<String>) -> Option<Parameter> {
    let resolved = match deref_chain(doc, raw) {
        Ok(p) => p,
        Err(e) => {
            warnings.push(format!("parameter skipped: {e}"));
            return None;
        }
    };
    let obj = resolved.as_object()?;
    let name = obj.get("name")?.as_str()?;
    let location = Location::parse(obj.get("in")?.as_str()?)?;
    let mut schema = obj.get("schema").cloned().unwrap_or_else(|| json!({}));
    if v30 {
        convert_30_schema(&mut schema);
    }
    Some(Parameter {
        name: name.to_string(),
        location,
        schema,
        required: location == Location::Path || obj.get("required") == Some(&Value::Bool(true)),
        style: obj.get("style").and_then(Value::as_str).map(String::from),
        explode: obj.get("explode").and_then(Value::as_bool),
        allow_reserved: obj.get("allowReserved") == Some(&Value::Bool(true)),
    })
}

fn input_schema(parameters: &[Parameter], body: Option<&Body>) -> Value {
    let mut groups = Map::new();
    for p in parameters {
        if p.location == Location::Cookie {
            continue;
        }
        let group = groups
            .entry(p.location.group())
            .or_insert_with(|| json!({"type": "object", "properties": {}, "required": []}));
        group["properties"][&p.name] = p.schema.clone();
        if p.required
            && let Some(Value::Array(r)) = group.get_mut("required")
        {
            r.push(Value::from(p.name.clone()));
        }
    }
    let mut required: Vec<Value> = groups
        .iter()
        .filter(|(_, g)| g["required"].as_array().is_some_and(|r| !r.is_empty()))
        .map(|(k, _)| Value::from(k.clone()))
        .collect();
    if let Some(b) = body {
        groups.insert("body".into(), b.schema.clone());
        if b.required {
            required.push(Value::from("body"));
        }
    }
    let mut schema = json!({"type": "object", "properties": groups});
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    schema
}

/// What every operation of a document shares: its version, namespace and base URL.
#[derive(Clone, Debug)]
pub(crate) struct Prepared {
    pub version: Version,
    pub namespace: String,
    pub base_url: String,
    /// `info.version` when it starts with a semver, else `0.0.0`.
    version_text: String,
}

/// The document-level part of [`import`]: the version dispatch, the base URL and the
/// namespace.
pub(crate) fn prepare(doc: &Value, options: &ImportOptions) -> Result<Prepared, ImportError> {
    let version = Version::of(doc)?;
    let server = doc
        .get("servers")
        .and_then(|s| s.get(0))
        .and_then(|s| s.get("url"))
        .and_then(Value::as_str);
    let base_url = match options.base_url.as_deref().or(server) {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => {
            return Err(ImportError::Document {
                message: SERVER_REQUIRED.into(),
                detail: None,
            });
        }
    };
    let info = doc.get("info");
    let title = info.and_then(|i| i.get("title")).filter(|t| !t.is_null());
    let namespace = legacy_slugify(&match (&options.namespace, title) {
        (Some(n), _) => n.clone(),
        (None, Some(t)) => js_string(t),
        (None, None) => "openapi".into(),
    });
    let version_text = info
        .and_then(|i| i.get("version"))
        .and_then(Value::as_str)
        .filter(|v| semver_prefix(v))
        .unwrap_or("0.0.0")
        .to_string();
    Ok(Prepared {
        version,
        namespace,
        base_url,
        version_text,
    })
}

/// Where an operation is in a document: its path and method (the document's order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Located {
    pub path: String,
    pub method: &'static str,
    /// The operation id (`operationId`, else `<method>-<path>`).
    pub operation_id: String,
}

impl Located {
    /// The capability id the operation is imported as.
    pub fn id(&self, namespace: &str) -> String {
        format!("{namespace}/{}", legacy_slugify(&self.operation_id))
    }
}

/// Every operation of a document, in the order [`import`] imports them, without importing
/// any (no schema is read).
pub(crate) fn locate(doc: &Value) -> Vec<Located> {
    let mut out = Vec::new();
    for (path, item) in doc
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for method in METHODS {
            let Some(op) = item.get(method).and_then(Value::as_object) else {
                continue;
            };
            let operation_id = match op.get("operationId") {
                None | Some(Value::Null) => format!("{method}-{path}"),
                Some(v) => js_string(v),
            };
            out.push(Located {
                path: path.clone(),
                method,
                operation_id,
            });
        }
    }
    out
}

/// Imports the one operation `at` of a prepared document (see [`import`]).
pub(crate) fn import_operation(
    doc: &Value,
    prepared: &Prepared,
    at: &Located,
    warnings: &mut Vec<String>,
) -> Result<Operation, ImportError> {
    let v30 = prepared.version == Version::V30;
    let (path, method) = (at.path.as_str(), at.method);
    let missing = || ImportError::Reference(format!("{method} {path} is not in the document"));
    let item = doc
        .get("paths")
        .and_then(|p| p.get(path))
        .and_then(Value::as_object)
        .ok_or_else(missing)?;
    let op = item
        .get(method)
        .and_then(Value::as_object)
        .ok_or_else(missing)?;
    let shared: &[Value] = item
        .get("parameters")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let own: &[Value] = op
        .get("parameters")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let parameters: Vec<Parameter> = shared
        .iter()
        .chain(own)
        .filter_map(|p| parameter(doc, p, v30, warnings))
        .collect();
    let body = op
        .get("requestBody")
        .and_then(|b| match deref_chain(doc, b) {
            Ok(b) => {
                let (media_type, mut schema) = json_media(b.get("content"))?;
                if v30 {
                    convert_30_schema(&mut schema);
                }
                Some(Body {
                    media_type,
                    schema,
                    required: b.get("required") == Some(&Value::Bool(true)),
                })
            }
            Err(e) => {
                warnings.push(format!("request body of {method} {path} skipped: {e}"));
                None
            }
        });
    let operation_id = at.operation_id.clone();
    let upper = method.to_ascii_uppercase();
    let responses = op.get("responses").cloned().unwrap_or(Value::Null);
    let mut output = primary_response(doc, &responses).and_then(response_schema);
    if v30 && let Some(o) = &mut output {
        convert_30_schema(o);
    }
    let mut manifest = Map::new();
    manifest.insert("specVersion".into(), json!("0.1"));
    manifest.insert("id".into(), json!(at.id(&prepared.namespace)));
    manifest.insert("version".into(), json!(prepared.version_text));
    manifest.insert(
        "name".into(),
        op.get("summary")
            .filter(|s| !s.is_null())
            .cloned()
            .unwrap_or_else(|| json!(operation_id)),
    );
    manifest.insert(
        "description".into(),
        op.get("description")
            .filter(|s| !s.is_null())
            .cloned()
            .unwrap_or_else(|| json!(format!("{upper} {path}"))),
    );
    manifest.insert("input".into(), input_schema(&parameters, body.as_ref()));
    if let Some(o) = output {
        manifest.insert("output".into(), o);
    }
    manifest.insert("effects".into(), json!(["network.connect"]));
    manifest.insert(
        "behavior".into(),
        json!({
            "deterministic": false,
            "idempotent": matches!(method, "get" | "head" | "put" | "delete"),
            "reversible": false
        }),
    );
    let mut tags = vec![json!("openapi"), json!(method)];
    if let Some(Value::Array(t)) = op.get("tags") {
        tags.extend(t.iter().filter(|t| t.is_string()).cloned());
    }
    manifest.insert("tags".into(), Value::Array(tags));
    manifest.insert(
        "metadata".into(),
        json!({"openapiOperationId": operation_id, "method": upper, "path": path}),
    );
    let manifest = Value::Object(manifest);
    assert_valid_manifest(&manifest).map_err(ImportError::Manifest)?;
    Ok(Operation {
        method,
        path: path.to_string(),
        operation_id,
        manifest,
        parameters,
        body,
        responses,
        security: op.get("security").or_else(|| doc.get("security")).cloned(),
    })
}

/// Imports every operation of a parsed document as the reference does (see the module
/// docs). OpenAPI 3.0 documents are imported too (the reference refuses them).
pub fn import(doc: &Value, options: &ImportOptions) -> Result<Import, ImportError> {
    let prepared = prepare(doc, options)?;
    let mut warnings = Vec::new();
    let operations = locate(doc)
        .iter()
        .map(|at| import_operation(doc, &prepared, at, &mut warnings))
        .collect::<Result<_, _>>()?;
    Ok(Import {
        version: prepared.version,
        namespace: prepared.namespace,
        base_url: prepared.base_url,
        operations,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_prefix_is_three_dotted_numbers() {
        assert!(semver_prefix("1.0.0"));
        assert!(semver_prefix("2.0.0-beta.1+build.7"));
        assert!(semver_prefix("1.0.0.1"));
        assert!(!semver_prefix("v1"));
        assert!(!semver_prefix("1.0"));
        assert!(!semver_prefix("1..0"));
    }
}
