//! What the built-ins share: the JavaScript value semantics the reference algorithms rely on
//! (member access, `===`, truthiness, iteration, `Set` identity, default and comparator
//! sorts, `String(x)`, `Number(x)`, relational comparison, object key order), the object
//! contract of a schema, and the effect risk weights.
//!
//! Inputs are read as JavaScript would read the parsed JSON: a missing member is
//! `undefined` (`None` here), objects and arrays are distinct by identity, and every access
//! that would throw in JavaScript returns a [`BuiltinError`] instead. Member lookups are own
//! members only: like `json/get`, nothing is found through a prototype chain.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use capability_core::js::{compare_utf16, js_trim, locale_compare};
use capability_core::json::{as_f64, is_array_index, js_string_of, number_from_f64};
use serde_json::{Map, Value};

use super::BuiltinError;

/// A JavaScript value taken from the input, or made while iterating a string (one code
/// point). Borrowed objects and arrays keep their identity (see [`SetKey`]).
pub(crate) type Item<'a> = Cow<'a, Value>;

/// A number as JavaScript holds it: integral values become JSON integers, non-finite
/// values `null` (as `JSON.stringify` prints them).
pub(crate) fn num(x: f64) -> Value {
    number_from_f64(x).map_or(Value::Null, Value::Number)
}

fn own<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    match value {
        Value::Object(map) => map.get(key),
        _ => None,
    }
}

fn read_error(base: Option<&Value>, key: &str) -> BuiltinError {
    let what = if base.is_none() { "undefined" } else { "null" };
    BuiltinError::type_error(format!(
        "Cannot read properties of {what} (reading '{key}')"
    ))
}

/// `base.key`: a `TypeError` when `base` is `undefined` or `null`; `undefined` for a missing
/// member or a primitive base.
pub(crate) fn member<'a>(
    base: Option<&'a Value>,
    key: &str,
) -> Result<Option<&'a Value>, BuiltinError> {
    match base {
        None | Some(Value::Null) => Err(read_error(base, key)),
        Some(value) => Ok(own(value, key)),
    }
}

/// `base?.key`.
pub(crate) fn opt_member<'a>(base: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    base.and_then(|value| own(value, key))
}

/// `value ?? <fallback>`: `None` when the value is `undefined` or `null`.
pub(crate) fn non_nullish(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// `value === true`.
pub(crate) fn is_true(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::Bool(true)))
}

/// JavaScript truthiness (`undefined`, `null`, `false`, `0`, `NaN` and `""` are falsy).
pub(crate) fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => {
            let x = as_f64(n);
            x != 0.0 && !x.is_nan()
        }
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(_) | Value::Object(_)) => true,
    }
}

/// `a === b`: primitives by value, objects and arrays by identity.
pub(crate) fn strict_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => match (x, y) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(p), Value::Bool(q)) => p == q,
            (Value::Number(p), Value::Number(q)) => as_f64(p) == as_f64(q),
            (Value::String(p), Value::String(q)) => p == q,
            (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => {
                std::ptr::eq(x, y)
            }
            _ => false,
        },
        _ => false,
    }
}

/// `String(value)` (and template-literal interpolation): `undefined` prints as `undefined`.
pub(crate) fn js_to_string(value: Option<&Value>) -> Cow<'_, str> {
    match value {
        None => Cow::Borrowed("undefined"),
        Some(Value::String(s)) => Cow::Borrowed(s),
        Some(other) => Cow::Owned(js_string_of(other)),
    }
}

/// `items.join(separator)`: `null` items print as the empty string.
pub(crate) fn join(items: &[Item<'_>], separator: &str) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(separator);
        }
        if !item.is_null() {
            out.push_str(&js_to_string(Some(item)));
        }
    }
    out
}

/// Identity of a value in a JavaScript `Set` (SameValueZero): primitives by value, objects
/// and arrays by address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SetKey<'a> {
    Null,
    Bool(bool),
    Number(u64),
    String(&'a str),
    Object(usize),
}

pub(crate) fn set_key(value: &Value) -> SetKey<'_> {
    match value {
        Value::Null => SetKey::Null,
        Value::Bool(b) => SetKey::Bool(*b),
        Value::Number(n) => {
            let x = as_f64(n);
            SetKey::Number(if x == 0.0 { 0 } else { x.to_bits() })
        }
        Value::String(s) => SetKey::String(s),
        Value::Array(_) | Value::Object(_) => SetKey::Object(std::ptr::from_ref(value) as usize),
    }
}

/// The values `[...value]` or `new Set(value)` iterate: an array's items or a string's code
/// points; anything else is not iterable.
pub(crate) fn iterate<'a>(value: &'a Value, label: &str) -> Result<Vec<Item<'a>>, BuiltinError> {
    match value {
        Value::Array(items) => Ok(items.iter().map(Cow::Borrowed).collect()),
        Value::String(s) => Ok(s
            .chars()
            .map(|c| Cow::Owned(Value::String(c.to_string())))
            .collect()),
        _ => Err(BuiltinError::type_error(format!("{label} is not iterable"))),
    }
}

/// `[...(value ?? [])]` and `new Set(value ?? [])`.
pub(crate) fn iterate_or_empty<'a>(
    value: Option<&'a Value>,
    label: &str,
) -> Result<Vec<Item<'a>>, BuiltinError> {
    match non_nullish(value) {
        None => Ok(Vec::new()),
        Some(v) => iterate(v, label),
    }
}

/// What `flatMap((x) => x.member ?? [])` contributes for one value: an array's items, or
/// the value itself when it is not an array.
pub(crate) fn flat_items<'a>(value: Option<&'a Value>, out: &mut Vec<Item<'a>>) {
    match non_nullish(value) {
        None => {}
        Some(Value::Array(items)) => out.extend(items.iter().map(Cow::Borrowed)),
        Some(other) => out.push(Cow::Borrowed(other)),
    }
}

/// `(value ?? []).method(...)` for array methods: the array's items, an empty list for
/// `undefined` or `null`, and a `TypeError` for anything else.
pub(crate) fn array_or_empty<'a>(
    value: Option<&'a Value>,
    call: &str,
) -> Result<&'a [Value], BuiltinError> {
    match non_nullish(value) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(BuiltinError::type_error(format!(
            "{call} is not a function"
        ))),
    }
}

/// `[...new Set(items)]`: the first occurrence of each value, in order.
pub(crate) fn unique(items: Vec<Item<'_>>) -> Vec<Item<'_>> {
    let keep: Vec<bool> = {
        let mut seen = HashSet::with_capacity(items.len());
        items
            .iter()
            .map(|item| seen.insert(set_key(item)))
            .collect()
    };
    items
        .into_iter()
        .zip(keep)
        .filter_map(|(item, first)| first.then_some(item))
        .collect()
}

/// `Array.prototype.sort()` without a comparator: stable, by `String(x)` in UTF-16 order.
pub(crate) fn default_sort(items: &mut [Item<'_>]) {
    if items.iter().all(|item| item.is_string()) {
        items.sort_by(|a, b| compare_utf16(a.as_str().unwrap_or(""), b.as_str().unwrap_or("")));
    } else {
        let mut keyed: Vec<(String, Item<'_>)> = items
            .iter()
            .map(|item| (js_to_string(Some(item)).into_owned(), item.clone()))
            .collect();
        keyed.sort_by(|a, b| compare_utf16(&a.0, &b.0));
        for (slot, (_, item)) in items.iter_mut().zip(keyed) {
            *slot = item;
        }
    }
}

/// A set of input values with JavaScript `Set` identity.
pub(crate) fn key_set<'a>(items: &'a [Item<'_>]) -> HashSet<SetKey<'a>> {
    items.iter().map(|item| set_key(item)).collect()
}

/// Items as a JSON array (cloning borrowed values).
pub(crate) fn to_array(items: &[Item<'_>]) -> Value {
    Value::Array(items.iter().map(|item| item.as_ref().clone()).collect())
}

/// `Array.prototype.sort(comparator)` as V8 runs it for arrays of any length below 64
/// (one natural run, then binary insertion sort), so that a comparator which throws does so
/// on the same pair as the reference. Longer arrays are sorted the same way: the result is
/// identical for any consistent comparator, only the sequence of comparisons differs.
pub(crate) fn js_sort_by<T, F>(items: &mut [T], mut compare: F) -> Result<(), BuiltinError>
where
    F: FnMut(&T, &T) -> Result<Ordering, BuiltinError>,
{
    let n = items.len();
    if n < 2 {
        return Ok(());
    }
    let descending = compare(&items[1], &items[0])? == Ordering::Less;
    let mut run = 2;
    while run < n {
        let order = compare(&items[run], &items[run - 1])?;
        let ends = if descending {
            order != Ordering::Less
        } else {
            order == Ordering::Less
        };
        if ends {
            break;
        }
        run += 1;
    }
    if descending {
        items[..run].reverse();
    }
    for start in run..n {
        let (mut left, mut right) = (0, start);
        while left < right {
            let mid = left + (right - left) / 2;
            if compare(&items[start], &items[mid])? == Ordering::Less {
                right = mid;
            } else {
                left = mid + 1;
            }
        }
        items[left..=start].rotate_right(1);
    }
    Ok(())
}

/// The sign of a numeric comparator term (`a - b`): `None` for `0` and `NaN`, which make
/// `a - b || next` fall through to the next term.
pub(crate) fn numeric_order(difference: f64) -> Option<Ordering> {
    if difference < 0.0 {
        Some(Ordering::Less)
    } else if difference > 0.0 {
        Some(Ordering::Greater)
    } else {
        None
    }
}

/// `a.id.localeCompare(b.id)`: `a.id` must be a string; `b.id` is converted with `String`.
pub(crate) fn locale_compare_ids(
    a: Option<&Value>,
    b: Option<&Value>,
) -> Result<Ordering, BuiltinError> {
    let left = match a {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => return Err(read_error(a, "localeCompare")),
        Some(_) => {
            return Err(BuiltinError::type_error(
                "a.id.localeCompare is not a function",
            ));
        }
    };
    Ok(locale_compare(left, &js_to_string(b)))
}

/// `ToPrimitive` of a JSON value: objects and arrays become their string form.
fn to_primitive(value: Option<&Value>) -> Option<Cow<'_, Value>> {
    match value {
        Some(v @ (Value::Array(_) | Value::Object(_))) => {
            Some(Cow::Owned(Value::String(js_string_of(v))))
        }
        other => other.map(Cow::Borrowed),
    }
}

/// `Number(value)`.
pub(crate) fn to_number(value: Option<&Value>) -> f64 {
    match value {
        None => f64::NAN,
        Some(Value::Null) => 0.0,
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        Some(Value::Number(n)) => as_f64(n),
        Some(Value::String(s)) => string_to_number(s),
        Some(other) => string_to_number(&js_string_of(other)),
    }
}

/// ECMAScript `StringToNumber`.
pub(crate) fn string_to_number(text: &str) -> f64 {
    let s = js_trim(text);
    if s.is_empty() {
        return 0.0;
    }
    for (prefix, radix) in [
        ("0x", 16),
        ("0X", 16),
        ("0o", 8),
        ("0O", 8),
        ("0b", 2),
        ("0B", 2),
    ] {
        if let Some(digits) = s.strip_prefix(prefix) {
            if digits.is_empty() {
                return f64::NAN;
            }
            let mut value = 0.0_f64;
            for c in digits.chars() {
                match c.to_digit(radix) {
                    Some(d) => value = value * f64::from(radix) + f64::from(d),
                    None => return f64::NAN,
                }
            }
            return value;
        }
    }
    let (sign, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (-1.0, &s[1..]),
        Some(b'+') => (1.0, &s[1..]),
        _ => (1.0, s),
    };
    if unsigned == "Infinity" {
        return sign * f64::INFINITY;
    }
    if !is_decimal_literal(unsigned) {
        return f64::NAN;
    }
    unsigned.parse::<f64>().map_or(f64::NAN, |x| sign * x)
}

/// `StrUnsignedDecimalLiteral` without `Infinity`: digits with an optional fraction (at
/// least one digit overall) and an optional exponent.
fn is_decimal_literal(s: &str) -> bool {
    let bytes = s.as_bytes();
    let mut i = 0;
    let int_digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return false;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if exp_digits == 0 {
            return false;
        }
        i += exp_digits;
    }
    i == bytes.len()
}

/// The abstract relational comparison `x < y`: `None` when a `NaN` is involved.
fn abstract_less(x: Option<&Value>, y: Option<&Value>) -> Option<bool> {
    let px = to_primitive(x);
    let py = to_primitive(y);
    if let (Some(Value::String(a)), Some(Value::String(b))) = (px.as_deref(), py.as_deref()) {
        return Some(compare_utf16(a, b) == Ordering::Less);
    }
    let a = to_number(px.as_deref());
    let b = to_number(py.as_deref());
    if a.is_nan() || b.is_nan() {
        None
    } else {
        Some(a < b)
    }
}

/// `a < b` on any two JavaScript values.
pub(crate) fn js_lt(a: Option<&Value>, b: Option<&Value>) -> bool {
    abstract_less(a, b) == Some(true)
}

/// `a > b`.
pub(crate) fn js_gt(a: Option<&Value>, b: Option<&Value>) -> bool {
    abstract_less(b, a) == Some(true)
}

/// `a >= b`.
pub(crate) fn js_ge(a: Option<&Value>, b: Option<&Value>) -> bool {
    abstract_less(a, b) == Some(false)
}

/// `Object.entries(map)` order: array-index keys first in numeric order, then the other
/// keys in insertion order.
pub(crate) fn js_entries(map: &Map<String, Value>) -> Vec<(&str, &Value)> {
    let mut entries: Vec<(&str, &Value)> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
    if entries
        .iter()
        .any(|(k, _)| is_array_index(k.as_bytes()).is_some())
    {
        entries.sort_by_key(|(k, _)| match is_array_index(k.as_bytes()) {
            Some(index) => (0, index),
            None => (1, 0),
        });
    }
    entries
}

/// The conservative object view of a JSON Schema that contract routing and substitution use:
/// property names (in `Object.keys` order) with their `type` string or `any`, and the
/// de-duplicated string entries of `required`.
#[derive(Debug, Default)]
pub(crate) struct ObjectContract<'a> {
    /// Property names and types, in JavaScript key order.
    pub properties: Vec<(&'a str, &'a str)>,
    /// Required names, first occurrence first.
    pub required: Vec<&'a str>,
    types: HashMap<&'a str, &'a str>,
    required_set: HashSet<&'a str>,
}

impl<'a> ObjectContract<'a> {
    /// The contract of `schema` (anything; only a plain object contributes).
    pub fn of(schema: Option<&'a Value>) -> Self {
        let mut contract = ObjectContract::default();
        if let Some(Value::Object(properties)) = opt_member(schema, "properties") {
            for (key, value) in js_entries(properties) {
                let ty = match value {
                    Value::Object(prop) => match prop.get("type") {
                        Some(Value::String(t)) => t.as_str(),
                        _ => "any",
                    },
                    _ => "any",
                };
                contract.properties.push((key, ty));
                contract.types.insert(key, ty);
            }
        }
        if let Some(Value::Array(required)) = opt_member(schema, "required") {
            for key in required.iter().filter_map(Value::as_str) {
                if contract.required_set.insert(key) {
                    contract.required.push(key);
                }
            }
        }
        contract
    }

    /// `true` when `key` is a property.
    pub fn has(&self, key: &str) -> bool {
        self.types.contains_key(key)
    }

    /// `true` when `key` is required.
    pub fn requires(&self, key: &str) -> bool {
        self.required_set.contains(key)
    }

    /// The declared type of `key`, or `any`.
    pub fn type_of(&self, key: &str) -> &'a str {
        self.types.get(key).copied().unwrap_or("any")
    }
}

/// Risk weight of a built-in effect (§5.6 of the reference description).
pub(crate) fn effect_weight(effect: &str) -> Option<u32> {
    Some(match effect {
        "filesystem.read" => 5,
        "environment.read" => 8,
        "database.read" => 10,
        "filesystem.write" | "network.connect" | "git.commit" => 20,
        "database.write" => 25,
        "process.spawn" | "email.send" | "git.push" => 30,
        "secrets.read" => 35,
        _ => return None,
    })
}

/// `true` for the eight mutating or open-world effects (only strings can be one).
pub(crate) fn is_open_world(effect: &Value) -> bool {
    effect
        .as_str()
        .is_some_and(|e| capability_core::effects::MUTATING_OR_OPEN_WORLD_EFFECTS.contains(&e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_to_number_follows_ecmascript() {
        assert_eq!(string_to_number(" 12 "), 12.0);
        assert_eq!(string_to_number(""), 0.0);
        assert_eq!(string_to_number("0x1F"), 31.0);
        assert_eq!(string_to_number("-Infinity"), f64::NEG_INFINITY);
        assert_eq!(string_to_number(".5e1"), 5.0);
        assert!(string_to_number("inf").is_nan());
        assert!(string_to_number("1_0").is_nan());
        assert!(string_to_number("-0x1").is_nan());
        assert!(string_to_number("e5").is_nan());
    }

    #[test]
    fn relational_comparison_follows_ecmascript() {
        let (ten, nine) = (json!("10"), json!("9"));
        assert!(js_lt(Some(&ten), Some(&nine))); // string comparison
        let n9 = json!(9);
        assert!(js_gt(Some(&ten), Some(&n9))); // numeric comparison
        assert!(!js_ge(None, Some(&n9))); // undefined is NaN
        assert!(js_ge(Some(&json!(null)), Some(&json!(0))));
    }

    #[test]
    fn v8_sort_is_stable_and_reports_comparator_errors() {
        let mut v = vec![(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e')];
        js_sort_by(&mut v, |a, b| Ok(a.0.cmp(&b.0))).unwrap();
        assert_eq!(v, [(1, 'b'), (1, 'e'), (2, 'd'), (3, 'a'), (3, 'c')]);
        let mut w = vec![5, 4, 3, 2, 1, 0];
        js_sort_by(&mut w, |a, b| Ok(a.cmp(b))).unwrap();
        assert_eq!(w, [0, 1, 2, 3, 4, 5]);
        let err = js_sort_by(&mut w, |_, _| Err(BuiltinError::type_error("boom")));
        assert!(err.is_err());
    }

    #[test]
    fn set_identity_is_same_value_zero_for_primitives_and_identity_for_objects() {
        let v = json!(["a", "a", 0, -0.0, {}, {}, null, null]);
        let items = iterate(&v, "v").unwrap();
        assert_eq!(unique(items).len(), 5); // "a", 0, {}, {}, null
        let s = json!("ab😀");
        assert_eq!(iterate(&s, "s").unwrap().len(), 3);
        assert!(iterate(&json!(5), "x").is_err());
    }

    #[test]
    fn entries_put_array_index_keys_first() {
        let v = json!({"b": 1, "10": 2, "a": 3, "2": 4, "01": 5});
        let Value::Object(map) = &v else {
            unreachable!()
        };
        let keys: Vec<&str> = js_entries(map).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["2", "10", "b", "a", "01"]);
    }
}
