//! `json/get`: read a dot/bracket path from a JSON value.
//!
//! The path is split as the reference splits it: every `[<ASCII digits>]` becomes
//! `.<digits>`, then the text is split on `.` and empty segments are dropped (`a.b[1].c` →
//! `a, b, 1, c`; `..a..` → `a`; `a[x]` and `a[-1]` stay single segments). Each segment must
//! name an own member of an object, or a canonical in-range index of an array (`01` and
//! `length` are not found): unlike the reference, nothing is found through the JavaScript
//! prototype chain. Strings, numbers, booleans and `null` are never traversed.

use capability_core::json::is_array_index;
use serde_json::{Value, json};

use super::BuiltinError;
use super::common::member;

/// The path segments of `path` (see the module documentation).
pub fn segments(path: &str) -> Vec<String> {
    // path.replace(/\[(\d+)\]/g, ".$1")
    let bytes = path.as_bytes();
    let mut rewritten = String::with_capacity(path.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'[' {
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits > 0 && bytes.get(i + 1 + digits) == Some(&b']') {
                rewritten.push_str(&path[copied..i]);
                rewritten.push('.');
                rewritten.push_str(&path[i + 1..i + 1 + digits]);
                i += digits + 2;
                copied = i;
                continue;
            }
        }
        i += 1;
    }
    rewritten.push_str(&path[copied..]);
    rewritten
        .split('.')
        .filter(|segment| !segment.is_empty())
        .map(str::to_string)
        .collect()
}

/// The value at `path` in `value`, or `None` when it is not found.
pub fn get<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = value;
    for segment in segments(path) {
        current = match current {
            Value::Object(map) => map.get(&segment)?,
            Value::Array(items) => {
                let index = is_array_index(segment.as_bytes())?;
                items.get(usize::try_from(index).ok()?)?
            }
            _ => return None,
        };
    }
    Some(current)
}

/// Runs `json/get` on `{value, path}`: `{found: true, value}` or `{found: false}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let path = match member(Some(input), "path")? {
        Some(Value::String(path)) => path,
        None => {
            return Err(BuiltinError::type_error(
                "Cannot read properties of undefined (reading 'replace')",
            ));
        }
        Some(_) => return Err(BuiltinError::type_error("path.replace is not a function")),
    };
    let found = match input.get("value") {
        Some(value) => get(value, path),
        // An undefined value has no members; an empty path returns it (and JSON drops it).
        None if segments(path).is_empty() => return Ok(json!({ "found": true })),
        None => None,
    };
    Ok(match found {
        Some(value) => json!({ "found": true, "value": value }),
        None => json!({ "found": false }),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn path_segmentation() {
        assert_eq!(segments("a.b[1].c"), ["a", "b", "1", "c"]);
        assert_eq!(segments("..a.."), ["a"]);
        assert!(segments("").is_empty());
        assert_eq!(segments("a[x]"), ["a[x]"]);
        assert_eq!(segments("a[-1]"), ["a[-1]"]);
        assert_eq!(segments("a[[1]]"), ["a[", "1]"]);
        assert_eq!(segments("[0][12]"), ["0", "12"]);
        assert_eq!(segments("a[]"), ["a[]"]);
        assert_eq!(segments("é[٣]"), ["é[٣]"]); // only ASCII digits
        assert_eq!(segments("a[1"), ["a[1"]);
    }

    #[test]
    fn own_members_and_canonical_indices_only() {
        let v = json!({"a": {"b": [1, {"c": 2}]}, "": 3, "x": null});
        assert_eq!(get(&v, "a.b[1].c"), Some(&json!(2)));
        assert_eq!(get(&v, "a.b.1.c"), Some(&json!(2)));
        assert_eq!(get(&v, "a.b.01"), None);
        assert_eq!(get(&v, "a.b.length"), None);
        assert_eq!(get(&v, "a.b[2]"), None);
        assert_eq!(get(&v, "constructor"), None);
        assert_eq!(get(&v, "x"), Some(&Value::Null));
        assert_eq!(get(&v, "x.y"), None);
        assert_eq!(get(&v, ""), Some(&v));
        assert_eq!(get(&json!("str"), "0"), None);
    }

    #[test]
    fn outputs() {
        let out = execute(&json!({"value": {"a": [10, 20]}, "path": "a[1]"})).unwrap();
        assert_eq!(out, json!({"found": true, "value": 20}));
        let out = execute(&json!({"value": {"a": [10, 20]}, "path": "b"})).unwrap();
        assert_eq!(out, json!({"found": false}));
    }
}
