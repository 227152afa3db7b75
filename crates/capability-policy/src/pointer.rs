//! JSON pointers (RFC 6901) for redaction and the mutations of `transform_input` /
//! `transform_output` (an RFC 6902 subset: `add`, `replace`, `remove`).
//!
//! Redaction pointers may use `*` as a segment to mean "every element or member", so
//! `/rows/*/ssn` masks the `ssn` of every row. Mutation pointers are plain RFC 6901.

use serde_json::{Map, Value};

/// The value that replaces a redacted one.
pub const REDACTED: &str = "[REDACTED]";

/// A bad pointer or a mutation that cannot apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// Not an RFC 6901 pointer.
    #[error("invalid JSON pointer `{pointer}`: it must be empty or start with `/`")]
    Syntax { pointer: String },
    /// An escape other than `~0` or `~1`.
    #[error("invalid JSON pointer `{pointer}`: `~` must be followed by `0` or `1`")]
    Escape { pointer: String },
    /// The path does not exist where the operation needs it.
    #[error("no value at `{pointer}`")]
    Missing { pointer: String },
    /// An array index that is not a number or is out of range.
    #[error("bad array index `{segment}` in `{pointer}`")]
    Index { pointer: String, segment: String },
    /// The operation is not one of `add`, `replace`, `remove`.
    #[error("unsupported mutation op `{op}`; expected add, replace or remove")]
    Op { op: String },
    /// A mutation that is not a JSON object with `op` and `path` (and `value`).
    #[error("invalid mutation: {message}")]
    Shape { message: String },
    /// Whole-document removal.
    #[error("cannot remove the whole document")]
    RemoveRoot,
}

/// Splits an RFC 6901 pointer into unescaped segments.
pub fn parse(pointer: &str) -> Result<Vec<String>, PointerError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PointerError::Syntax {
            pointer: pointer.to_string(),
        });
    };
    rest.split('/')
        .map(|seg| {
            let mut out = String::with_capacity(seg.len());
            let mut chars = seg.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => {
                            return Err(PointerError::Escape {
                                pointer: pointer.to_string(),
                            });
                        }
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

/// Replaces every value the (possibly wildcarded) pointer reaches with [`REDACTED`]; returns
/// how many values were masked. A pointer that reaches nothing masks nothing.
/// Whether `pointer` leads into text that names what it points at: a string (or the text of
/// an array of strings) met while segments remain, holding the name of the pointer's last
/// member (`"password: hunter2"` for `/password`, or `{"password": "hun` and `ter2"}` split
/// across two text blocks). What is there cannot be redacted, so it must not be delivered.
/// Text that does not name it holds nothing to redact; neither does an object that lacks the
/// member and whose texts do not name it (one whose texts do, such as an MCP result with an
/// embedded resource, is treated as text).
pub fn hidden_in_text(value: &Value, pointer: &str) -> bool {
    let Ok(segments) = parse(pointer) else {
        return false;
    };
    let Some(name) = segments
        .iter()
        .rev()
        .find(|s| *s != "*" && s.parse::<usize>().is_err())
        .map(|s| s.to_lowercase())
    else {
        return false;
    };
    text_at(value, &segments, &name)
}

fn names(text: &str, name: &str) -> bool {
    text.to_lowercase().contains(name)
}

/// Whether any string in `value` (at any depth, keys aside) names `name`.
fn any_text_names(value: &Value, name: &str) -> bool {
    match value {
        Value::String(s) => names(s, name),
        Value::Array(items) => items.iter().any(|v| any_text_names(v, name)),
        Value::Object(map) => map.values().any(|v| any_text_names(v, name)),
        _ => false,
    }
}

fn text_at(value: &Value, segments: &[String], name: &str) -> bool {
    let Some((first, rest)) = segments.split_first() else {
        return false;
    };
    match value {
        Value::String(s) => names(s, name),
        Value::Object(map) if first == "*" => map.values().any(|v| text_at(v, rest, name)),
        Value::Object(map) => match map.get(first.as_str()) {
            Some(v) => text_at(v, rest, name),
            // Not where the pointer says: text elsewhere in it (an MCP result's embedded
            // resource, a message) may still hold it.
            None => any_text_names(value, name),
        },
        Value::Array(items) if first == "*" => items.iter().any(|v| text_at(v, rest, name)),
        Value::Array(items) => match first.parse::<usize>() {
            Ok(i) => items.get(i).is_some_and(|v| text_at(v, rest, name)),
            // A member name where the value is a list: its texts, joined, may name it.
            Err(_) => {
                let joined: String = items.iter().filter_map(Value::as_str).collect();
                names(&joined, name) || items.iter().any(|v| text_at(v, segments, name))
            }
        },
        _ => false,
    }
}

pub fn redact(value: &mut Value, pointer: &str) -> Result<usize, PointerError> {
    let segments = parse(pointer)?;
    Ok(redact_at(value, &segments))
}

fn redact_at(value: &mut Value, segments: &[String]) -> usize {
    let Some((first, rest)) = segments.split_first() else {
        *value = Value::String(REDACTED.to_string());
        return 1;
    };
    match value {
        Value::Object(map) => {
            if first == "*" {
                map.values_mut().map(|v| redact_at(v, rest)).sum()
            } else {
                map.get_mut(first.as_str())
                    .map_or(0, |v| redact_at(v, rest))
            }
        }
        Value::Array(items) => {
            if first == "*" {
                items.iter_mut().map(|v| redact_at(v, rest)).sum()
            } else {
                first
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| items.get_mut(i))
                    .map_or(0, |v| redact_at(v, rest))
            }
        }
        _ => 0,
    }
}

/// One mutation of a JSON document.
#[derive(Clone, Debug, PartialEq)]
pub enum Mutation {
    /// Sets a member (creating or replacing it) or inserts into an array (`-` appends).
    Add { path: String, value: Value },
    /// Replaces an existing value.
    Replace { path: String, value: Value },
    /// Removes an existing value.
    Remove { path: String },
}

impl Mutation {
    /// `add` of a value.
    pub fn set(path: impl Into<String>, value: Value) -> Self {
        Mutation::Add {
            path: path.into(),
            value,
        }
    }

    /// `remove` of a value.
    pub fn remove(path: impl Into<String>) -> Self {
        Mutation::Remove { path: path.into() }
    }

    /// The pointer it applies to.
    pub fn path(&self) -> &str {
        match self {
            Mutation::Add { path, .. } | Mutation::Replace { path, .. } => path,
            Mutation::Remove { path } => path,
        }
    }

    /// Reads `{"op": "add"|"replace"|"remove", "path": "/x", "value": ...}`.
    pub fn from_json(v: &Value) -> Result<Self, PointerError> {
        let shape = |message: &str| PointerError::Shape {
            message: message.to_string(),
        };
        let obj = v.as_object().ok_or_else(|| shape("expected an object"))?;
        let op = obj
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| shape("`op` must be a string"))?;
        let path = obj
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| shape("`path` must be a string"))?
            .to_string();
        parse(&path)?;
        let value = || {
            obj.get("value")
                .cloned()
                .ok_or_else(|| shape("`value` is required for add and replace"))
        };
        match op {
            "add" => Ok(Mutation::Add {
                path,
                value: value()?,
            }),
            "replace" => Ok(Mutation::Replace {
                path,
                value: value()?,
            }),
            "remove" => Ok(Mutation::Remove { path }),
            other => Err(PointerError::Op {
                op: other.to_string(),
            }),
        }
    }

    /// Reads a JSON array of mutations.
    pub fn list_from_json(v: &Value) -> Result<Vec<Self>, PointerError> {
        match v {
            Value::Array(items) => items.iter().map(Mutation::from_json).collect(),
            _ => Err(PointerError::Shape {
                message: "expected an array of mutations".into(),
            }),
        }
    }

    /// The JSON form.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        match self {
            Mutation::Add { path, value } => {
                m.insert("op".into(), "add".into());
                m.insert("path".into(), path.clone().into());
                m.insert("value".into(), value.clone());
            }
            Mutation::Replace { path, value } => {
                m.insert("op".into(), "replace".into());
                m.insert("path".into(), path.clone().into());
                m.insert("value".into(), value.clone());
            }
            Mutation::Remove { path } => {
                m.insert("op".into(), "remove".into());
                m.insert("path".into(), path.clone().into());
            }
        }
        Value::Object(m)
    }

    /// Applies the mutation in place.
    pub fn apply(&self, doc: &mut Value) -> Result<(), PointerError> {
        let pointer = self.path();
        let segments = parse(pointer)?;
        let missing = || PointerError::Missing {
            pointer: pointer.to_string(),
        };
        let Some((last, parents)) = segments.split_last() else {
            return match self {
                Mutation::Add { value, .. } | Mutation::Replace { value, .. } => {
                    *doc = value.clone();
                    Ok(())
                }
                Mutation::Remove { .. } => Err(PointerError::RemoveRoot),
            };
        };
        let mut target = doc;
        for seg in parents {
            target = match target {
                Value::Object(map) => map.get_mut(seg.as_str()).ok_or_else(missing)?,
                Value::Array(items) => {
                    let i = index(pointer, seg, items.len(), false)?;
                    items.get_mut(i).ok_or_else(missing)?
                }
                _ => return Err(missing()),
            };
        }
        match (target, self) {
            (Value::Object(map), Mutation::Add { value, .. }) => {
                map.insert(last.clone(), value.clone());
            }
            (Value::Object(map), Mutation::Replace { value, .. }) => {
                let slot = map.get_mut(last.as_str()).ok_or_else(missing)?;
                *slot = value.clone();
            }
            (Value::Object(map), Mutation::Remove { .. }) => {
                map.remove(last.as_str()).ok_or_else(missing)?;
            }
            (Value::Array(items), Mutation::Add { value, .. }) => {
                let i = index(pointer, last, items.len(), true)?;
                items.insert(i, value.clone());
            }
            (Value::Array(items), Mutation::Replace { value, .. }) => {
                let i = index(pointer, last, items.len(), false)?;
                let slot = items.get_mut(i).ok_or_else(missing)?;
                *slot = value.clone();
            }
            (Value::Array(items), Mutation::Remove { .. }) => {
                let i = index(pointer, last, items.len(), false)?;
                if i >= items.len() {
                    return Err(missing());
                }
                items.remove(i);
            }
            _ => return Err(missing()),
        }
        Ok(())
    }
}

fn index(pointer: &str, seg: &str, len: usize, for_insert: bool) -> Result<usize, PointerError> {
    let bad = || PointerError::Index {
        pointer: pointer.to_string(),
        segment: seg.to_string(),
    };
    if seg == "-" && for_insert {
        return Ok(len);
    }
    if seg.len() > 1 && seg.starts_with('0') {
        return Err(bad());
    }
    let i: usize = seg.parse().map_err(|_| bad())?;
    let limit = if for_insert {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > limit || (!for_insert && len == 0) {
        return Err(bad());
    }
    Ok(i)
}

/// Applies mutations in order; stops at the first that fails.
pub fn apply_all(doc: &mut Value, mutations: &[Mutation]) -> Result<(), PointerError> {
    mutations.iter().try_for_each(|m| m.apply(doc))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_unescape() {
        assert_eq!(parse("/a~1b/c~0d").unwrap(), vec!["a/b", "c~d"]);
        assert_eq!(parse("").unwrap(), Vec::<String>::new());
        assert!(parse("a").is_err());
        assert!(parse("/a~2").is_err());
    }

    #[test]
    fn redaction_masks_wildcards_and_ignores_missing_paths() {
        let mut v = json!({"rows": [{"ssn": "1", "n": 1}, {"ssn": "2"}], "k": "s"});
        assert_eq!(redact(&mut v, "/rows/*/ssn").unwrap(), 2);
        assert_eq!(redact(&mut v, "/nope").unwrap(), 0);
        assert_eq!(
            v,
            json!({"rows": [{"ssn": REDACTED, "n": 1}, {"ssn": REDACTED}], "k": "s"})
        );
    }

    #[test]
    fn mutations_follow_rfc6902() {
        let mut v = json!({"a": {"b": 1}, "l": [1, 2]});
        Mutation::set("/a/c", json!(true)).apply(&mut v).unwrap();
        Mutation::set("/l/-", json!(3)).apply(&mut v).unwrap();
        Mutation::Replace {
            path: "/a/b".into(),
            value: json!(2),
        }
        .apply(&mut v)
        .unwrap();
        Mutation::remove("/l/0").apply(&mut v).unwrap();
        assert_eq!(v, json!({"a": {"b": 2, "c": true}, "l": [2, 3]}));
        assert_eq!(
            Mutation::remove("/zz").apply(&mut v),
            Err(PointerError::Missing {
                pointer: "/zz".into()
            })
        );
        assert!(
            Mutation::Replace {
                path: "/l/9".into(),
                value: json!(0)
            }
            .apply(&mut v)
            .is_err()
        );
    }
}
