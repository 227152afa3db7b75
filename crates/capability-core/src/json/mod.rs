//! JSON with JavaScript semantics: parsing like `JSON.parse`, canonical JSON and SHA-256
//! byte-identical to the reference runtime, and `JSON.stringify` output.
//!
//! * [`parse`] reads JSON text into a [`serde_json::Value`]. Numbers are IEEE-754 doubles:
//!   integral values up to 2^53 are stored as integers, everything else (`-0`, `1e21`,
//!   `12345678901234567890`) as the double JavaScript would hold. Literals that overflow a
//!   double, and escaped lone surrogates, have no `serde_json` form and are refused with a
//!   clear error.
//! * [`canonical_text`] canonicalizes raw JSON text directly and accepts everything
//!   `JSON.parse` does, including lone surrogates and overflowing numbers (printed `null`).
//! * [`canonical_string`] / [`canonical_hash`] are the reference `stableStringify` / `sha256`.
//! * [`to_js_string`] and [`to_pretty_string`] are `JSON.stringify(v)` and
//!   `JSON.stringify(v, null, 2)`: insertion order, except that array-index keys come first,
//!   as in a JavaScript object.

mod parse;
mod write;

pub use parse::{JsString, JsonNode, MAX_DEPTH, RECORD_DEPTH, parse_node, parse_node_within};
pub(crate) use write::with_scratch;
pub use write::{
    canonical_hash, canonical_node_string, canonical_string, compare_keys, compare_utf16,
    format_number, is_array_index, sha256_hex, to_js_string, to_pretty_string, write_canonical,
    write_canonical_whole, write_json_string,
};

use serde_json::{Map, Number, Value};

/// Malformed JSON text, with the position of the fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    pub message: String,
    /// 1-based line and column (in characters) of the fault, when it has a position.
    pub position: Option<(usize, usize)>,
}

impl JsonError {
    /// Whether the text was refused for nesting past the parser's limit.
    pub fn is_too_deep(&self) -> bool {
        self.message.starts_with(parse::TOO_DEEP)
    }
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.position {
            Some((line, column)) => {
                write!(
                    f,
                    "invalid JSON at line {line}, column {column}: {}",
                    self.message
                )
            }
            None => write!(f, "invalid JSON: {}", self.message),
        }
    }
}

impl std::error::Error for JsonError {}

impl JsonError {
    pub(crate) fn at(text: &[u8], offset: usize, message: &str) -> Self {
        let upto = &text[..offset.min(text.len())];
        let line = upto.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = upto.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        // Columns count characters, not bytes.
        let column = upto[line_start..]
            .iter()
            .filter(|&&b| (b & 0xC0) != 0x80)
            .count()
            + 1;
        JsonError {
            message: message.to_string(),
            position: Some((line, column)),
        }
    }

    fn plain(message: String) -> Self {
        JsonError {
            message,
            position: None,
        }
    }
}

/// Parses JSON text into a [`Value`] with `JSON.parse` semantics (see the module docs).
pub fn parse(text: &[u8]) -> Result<Value, JsonError> {
    let node = parse_node(text)?;
    node_to_value(node)
}

/// [`parse`] for text already known to be UTF-8.
pub fn parse_str(text: &str) -> Result<Value, JsonError> {
    parse(text.as_bytes())
}

/// Parses a protocol message that wraps one value (`{"output": <value>}`, an HTTP body
/// `{"capability", "input": <value>}`): one level more than [`MAX_DEPTH`], so that the
/// value inside may nest as deep as any accepted value. A message nested deeper is refused
/// with [`JsonError::is_too_deep`].
pub fn parse_message(text: &[u8]) -> Result<Value, JsonError> {
    node_to_value(parse_node_within(text, MAX_DEPTH + 1)?)
}

/// The one message of every surface for a value nested past [`MAX_DEPTH`]: `"{what} nests
/// deeper than the 128 levels allowed"` (`what` is `Input`, `Output`, ...).
pub fn too_deep(what: &str) -> String {
    format!("{what} nests deeper than the {MAX_DEPTH} levels allowed")
}

/// Parses a stored record (nested at most [`RECORD_DEPTH`] levels: it holds values accepted
/// with [`MAX_DEPTH`] a few levels down).
pub fn parse_record(text: &[u8]) -> Result<Value, JsonError> {
    node_to_value(parse_node_within(text, RECORD_DEPTH)?)
}

/// A stored record as `T`: [`parse_record`], then `serde_json::from_value` (which, unlike
/// serde_json's text parser, has no 128-level limit of its own).
pub fn from_record<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, RecordError> {
    let value = parse_record(text.as_bytes())?;
    Ok(serde_json::from_value(value)?)
}

/// Why a stored record could not be read back ([`from_record`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The text is not JSON (or nests deeper than a record may).
    #[error(transparent)]
    Json(#[from] JsonError),
    /// The JSON does not have the record's shape.
    #[error(transparent)]
    Shape(#[from] serde_json::Error),
}

/// How deeply arrays and objects nest in `value` (a scalar is 0, `[]` is 1); computed without
/// recursion, so any value can be measured.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(d + 1);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            Value::Object(members) => {
                deepest = deepest.max(d + 1);
                stack.extend(members.values().map(|i| (i, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// Canonical JSON of raw JSON text, accepting all that `JSON.parse` accepts.
pub fn canonical_text(text: &[u8]) -> Result<String, JsonError> {
    Ok(canonical_node_string(&parse_node(text)?))
}

/// The number a JavaScript double becomes in a [`Value`]: an integer when it is one (and not
/// `-0`) within the exactly representable range, else a float. `None` when not finite.
pub fn number_from_f64(x: f64) -> Option<Number> {
    const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53
    if x.fract() == 0.0 && x.abs() <= LIMIT && !(x == 0.0 && x.is_sign_negative()) {
        Some(Number::from(x as i64))
    } else {
        Number::from_f64(x)
    }
}

/// Converts a parsed node into a [`Value`], refusing what `serde_json` cannot hold.
pub fn node_to_value(node: JsonNode) -> Result<Value, JsonError> {
    Ok(match node {
        JsonNode::Null => Value::Null,
        JsonNode::Bool(b) => Value::Bool(b),
        JsonNode::Number(x) => match number_from_f64(x) {
            Some(n) => Value::Number(n),
            None => {
                return Err(JsonError::plain(
                    "number out of range: the literal overflows a 64-bit float".to_string(),
                ));
            }
        },
        JsonNode::String(s) => Value::String(js_string_to_string(s)?),
        JsonNode::Array(items) => Value::Array(
            items
                .into_iter()
                .map(node_to_value)
                .collect::<Result<_, _>>()?,
        ),
        JsonNode::Object(members) => {
            let mut map = Map::with_capacity(members.len());
            for (k, v) in members {
                map.insert(js_string_to_string(k)?, node_to_value(v)?);
            }
            Value::Object(map)
        }
    })
}

fn js_string_to_string(s: JsString) -> Result<String, JsonError> {
    String::from_utf8(s.0).map_err(|_| {
        JsonError::plain("string holds a lone UTF-16 surrogate, which is not supported here".into())
    })
}

/// `String(x)` of a JSON value as JavaScript prints it (used in issue messages).
pub fn js_string_of(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            let mut s = String::new();
            write::write_number(&mut s, n);
            s
        }
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Null => String::new(),
                other => js_string_of(other),
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) => "[object Object]".into(),
    }
}

/// The JavaScript double a JSON number holds.
pub fn as_f64(n: &Number) -> f64 {
    if let Some(i) = n.as_i64() {
        i as f64
    } else if let Some(u) = n.as_u64() {
        u as f64
    } else {
        n.as_f64().unwrap_or(f64::NAN)
    }
}

/// Rewrites every number to the form [`parse`] gives it: integral doubles up to 2^53 become
/// integers (`42.0` → `42`), so that values built in Rust compare equal to parsed ones, as
/// the numbers do in JavaScript.
pub fn normalize_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if n.is_f64()
                && let Some(x) = n.as_f64()
                && let Some(normal) = number_from_f64(x)
            {
                *n = normal;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

/// A serde `deserialize_with` for optional JSON members in which `null` is a value: a
/// present member (even `null`) becomes `Some`, an absent one `None` (with `#[serde(default)]`).
pub fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    use serde::Deserialize;
    Value::deserialize(d).map(Some)
}
