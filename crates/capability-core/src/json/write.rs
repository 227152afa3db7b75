//! Writers: canonical JSON (the reference `stableStringify`), `JSON.stringify`, and the
//! ECMAScript number and string formatting they share.

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use super::parse::{JsString, JsonNode};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `Some(n)` when `key` is a canonical array index ("0" to "4294967294", no leading zeros):
/// JavaScript enumerates such keys first, in numeric order.
pub fn is_array_index(key: &[u8]) -> Option<u32> {
    match key {
        [] => None,
        [b'0'] => Some(0),
        [b'0', ..] => None,
        _ if key.len() > 10 => None,
        _ => {
            let mut n: u64 = 0;
            for &b in key {
                if !b.is_ascii_digit() {
                    return None;
                }
                n = n * 10 + u64::from(b - b'0');
            }
            if n <= 4_294_967_294 {
                u32::try_from(n).ok()
            } else {
                None
            }
        }
    }
}

/// Orders two (generalized UTF-8) strings by their UTF-16 code units, as JavaScript's default
/// sort does.
pub fn compare_utf16(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (Some(&x), Some(&y)) = (a.get(n), b.get(n)) else {
        return a.len().cmp(&b.len());
    };
    // Byte order equals UTF-16 order unless a supplementary character (lead byte F0..F4,
    // a surrogate pair in UTF-16) meets a character from U+D800 upwards (lead byte ED..EF).
    let hi = x.max(y);
    let lo = x.min(y);
    if hi < 0xF0 || !(0xED..0xF0).contains(&lo) {
        return x.cmp(&y);
    }
    Utf16Units::new(&a[n..]).cmp(Utf16Units::new(&b[n..]))
}

/// Canonical key order: array-index keys first in numeric order, then UTF-16 order.
pub fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    match (is_array_index(a), is_array_index(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => compare_utf16(a, b),
    }
}

/// UTF-16 code units of a generalized UTF-8 byte string.
struct Utf16Units<'a> {
    s: &'a [u8],
    pending: Option<u16>,
}

impl<'a> Utf16Units<'a> {
    fn new(s: &'a [u8]) -> Self {
        Utf16Units { s, pending: None }
    }
}

impl Iterator for Utf16Units<'_> {
    type Item = u16;
    fn next(&mut self) -> Option<u16> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        let (&b0, rest) = self.s.split_first()?;
        let cont = |i: usize| u32::from(rest.get(i).copied().unwrap_or(0x80) & 0x3F);
        let (cp, len) = if b0 < 0x80 {
            (u32::from(b0), 1)
        } else if b0 < 0xE0 {
            ((u32::from(b0 & 0x1F) << 6) | cont(0), 2)
        } else if b0 < 0xF0 {
            ((u32::from(b0 & 0x0F) << 12) | (cont(0) << 6) | cont(1), 3)
        } else {
            (
                (u32::from(b0 & 0x07) << 18) | (cont(0) << 12) | (cont(1) << 6) | cont(2),
                4,
            )
        };
        self.s = self.s.get(len..).unwrap_or(&[]);
        if cp >= 0x10000 {
            let v = cp - 0x10000;
            self.pending = Some(0xDC00 | (v & 0x3FF) as u16);
            Some(0xD800 | (v >> 10) as u16)
        } else {
            Some(cp as u16)
        }
    }
}

/// ECMAScript `Number::toString` for a finite double; `NaN`, `Infinity`, `-Infinity`
/// otherwise.
pub fn format_number(x: f64, out: &mut String) {
    if x.is_nan() {
        out.push_str("NaN");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
    } else if x == 0.0 {
        out.push('0'); // -0 prints as 0
    } else if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 {
        let _ = write!(out, "{}", x as i64);
    } else {
        let mut buf = ryu_js::Buffer::new();
        out.push_str(buf.format_finite(x));
    }
}

/// Writes a JSON number as JavaScript prints the double it holds.
pub(crate) fn write_number(out: &mut String, n: &Number) {
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= 9_007_199_254_740_992 {
            let _ = write!(out, "{i}");
            return;
        }
        format_number(i as f64, out);
    } else if let Some(u) = n.as_u64() {
        format_number(u as f64, out);
    } else {
        format_number(n.as_f64().unwrap_or(f64::NAN), out);
    }
}

/// Which bytes `JSON.stringify` escapes, and how: 0 = raw, b'u' = `\u00xx`, else `\<c>`.
static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = b'u';
        i += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0a] = b'n';
    t[0x0c] = b'f';
    t[0x0d] = b'r';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

fn push_escape(out: &mut String, b: u8) {
    match ESCAPE[b as usize] {
        b'u' => {
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xF) as usize] as char);
        }
        c => {
            out.push('\\');
            out.push(c as char);
        }
    }
}

/// Writes a quoted string with `JSON.stringify` escaping.
pub fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if ESCAPE[b as usize] != 0 {
            out.push_str(&s[start..i]);
            push_escape(out, b);
            start = i + 1;
        }
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Writes a generalized UTF-8 string; lone surrogates become lowercase `\udxxx`.
fn write_js_str(out: &mut String, s: &JsString) {
    if let Some(valid) = s.as_str() {
        write_json_string(out, valid);
        return;
    }
    out.push('"');
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == 0xED && bytes.get(i + 1).is_some_and(|&c| c >= 0xA0) {
            let cp = 0xD000u32
                | (u32::from(bytes[i + 1] & 0x3F) << 6)
                | u32::from(bytes.get(i + 2).copied().unwrap_or(0x80) & 0x3F);
            let _ = write!(out, "\\u{cp:04x}");
            i += 3;
            continue;
        }
        if ESCAPE[b as usize] != 0 {
            push_escape(out, b);
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() {
            let c = bytes[i];
            if ESCAPE[c as usize] != 0
                || (c == 0xED && bytes.get(i + 1).is_some_and(|&d| d >= 0xA0))
            {
                break;
            }
            i += 1;
        }
        out.push_str(&String::from_utf8_lossy(&bytes[start..i]));
    }
    out.push('"');
}

/// Appends the canonical JSON of `v` to `out`.
pub fn write_canonical(out: &mut String, v: &Value) {
    write_value(out, v, false);
}

/// [`write_canonical`] keeping `__proto__` members, which the canonical form (as
/// JavaScript) leaves out: for a hash that must cover every member of a document (a pinned
/// tool definition).
pub fn write_canonical_whole(out: &mut String, v: &Value) {
    write_value(out, v, true);
}

fn write_value(out: &mut String, v: &Value, keep_proto: bool) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, keep_proto);
            }
            out.push(']');
        }
        Value::Object(map) => write_canonical_object(out, map, keep_proto),
    }
}

fn write_canonical_object(out: &mut String, map: &Map<String, Value>, keep_proto: bool) {
    let kept = |k: &&String| keep_proto || k.as_str() != "__proto__";
    // Small objects (the common case) are sorted on the stack.
    const SMALL: usize = 16;
    if map.len() <= SMALL {
        let mut members: [Option<(&String, &Value)>; SMALL] = [None; SMALL];
        let mut n = 0;
        for (k, v) in map.iter().filter(|(k, _)| kept(k)) {
            // Insertion sort: keys are few and often already in order.
            let mut at = n;
            while at > 0
                && members[at - 1].is_some_and(|(p, _)| {
                    compare_keys(p.as_bytes(), k.as_bytes()) == Ordering::Greater
                })
            {
                members[at] = members[at - 1];
                at -= 1;
            }
            members[at] = Some((k, v));
            n += 1;
        }
        write_members(out, members[..n].iter().flatten().copied(), keep_proto);
        return;
    }
    let mut members: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| kept(k)).collect();
    members.sort_unstable_by(|a, b| compare_keys(a.0.as_bytes(), b.0.as_bytes()));
    write_members(out, members.into_iter(), keep_proto);
}

fn write_members<'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    keep_proto: bool,
) {
    out.push('{');
    for (i, (k, v)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_string(out, k);
        out.push(':');
        write_value(out, v, keep_proto);
    }
    out.push('}');
}

/// The reference `stableStringify(v)`.
pub fn canonical_string(v: &Value) -> String {
    let mut out = String::with_capacity(128);
    write_canonical(&mut out, v);
    out
}

/// Lowercase hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_digest(&Sha256::digest(bytes))
}

fn hex_digest(digest: &[u8]) -> String {
    let mut out = String::with_capacity(2 * digest.len());
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
    }
    out
}

thread_local! {
    /// A reusable buffer for canonical text that is only hashed.
    static SCRATCH: std::cell::RefCell<String> = std::cell::RefCell::new(String::with_capacity(1024));
}

/// Runs `f` with a cleared, reusable per-thread buffer (a fresh one when the thread's buffer
/// is already in use).
pub(crate) fn with_scratch<T>(f: impl FnOnce(&mut String) -> T) -> T {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let out = f(&mut buf);
            if buf.capacity() > 1 << 20 {
                *buf = String::with_capacity(1024);
            }
            out
        }
        Err(_) => f(&mut String::new()),
    })
}

/// The reference `sha256(v)`: hex SHA-256 of the canonical JSON of `v`.
pub fn canonical_hash(v: &Value) -> String {
    with_scratch(|buf| {
        write_canonical(buf, v);
        sha256_hex(buf.as_bytes())
    })
}

/// Canonical JSON of a parsed node (lone surrogates escaped, non-finite numbers as `null`).
pub fn canonical_node_string(node: &JsonNode) -> String {
    let mut out = String::with_capacity(128);
    write_node(&mut out, node);
    out
}

fn write_node(out: &mut String, node: &JsonNode) {
    match node {
        JsonNode::Null => out.push_str("null"),
        JsonNode::Bool(true) => out.push_str("true"),
        JsonNode::Bool(false) => out.push_str("false"),
        JsonNode::Number(x) if !x.is_finite() => out.push_str("null"),
        JsonNode::Number(x) => format_number(*x, out),
        JsonNode::String(s) => write_js_str(out, s),
        JsonNode::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_node(out, item);
            }
            out.push(']');
        }
        JsonNode::Object(members) => {
            let mut sorted: Vec<&(JsString, JsonNode)> = members
                .iter()
                .filter(|(k, _)| k.as_bytes() != b"__proto__")
                .collect();
            sorted.sort_unstable_by(|a, b| compare_keys(a.0.as_bytes(), b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_js_str(out, k);
                out.push(':');
                write_node(out, v);
            }
            out.push('}');
        }
    }
}

/// Object members in JavaScript enumeration order: array-index keys ascending, then the rest
/// in insertion order.
fn js_order(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    if members
        .iter()
        .any(|(k, _)| is_array_index(k.as_bytes()).is_some())
    {
        members.sort_by_key(|(k, _)| match is_array_index(k.as_bytes()) {
            Some(n) => (0, n),
            None => (1, 0),
        });
    }
    members
}

fn write_js(out: &mut String, v: &Value, indent: Option<&mut String>) {
    match v {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            match indent {
                Some(ind) => {
                    ind.push_str("  ");
                    for (i, item) in items.iter().enumerate() {
                        out.push_str(if i > 0 { ",\n" } else { "\n" });
                        out.push_str(ind);
                        write_js(out, item, Some(ind));
                    }
                    ind.truncate(ind.len() - 2);
                    out.push('\n');
                    out.push_str(ind);
                }
                None => {
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        write_js(out, item, None);
                    }
                }
            }
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            let members = js_order(map);
            match indent {
                Some(ind) => {
                    ind.push_str("  ");
                    for (i, (k, item)) in members.into_iter().enumerate() {
                        out.push_str(if i > 0 { ",\n" } else { "\n" });
                        out.push_str(ind);
                        write_json_string(out, k);
                        out.push_str(": ");
                        write_js(out, item, Some(ind));
                    }
                    ind.truncate(ind.len() - 2);
                    out.push('\n');
                    out.push_str(ind);
                }
                None => {
                    for (i, (k, item)) in members.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        write_json_string(out, k);
                        out.push(':');
                        write_js(out, item, None);
                    }
                }
            }
            out.push('}');
        }
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
        scalar => write_canonical(out, scalar),
    }
}

/// `JSON.stringify(v)`.
pub fn to_js_string(v: &Value) -> String {
    let mut out = String::new();
    write_js(&mut out, v, None);
    out
}

/// `JSON.stringify(v, null, 2)`.
pub fn to_pretty_string(v: &Value) -> String {
    let mut out = String::new();
    let mut indent = String::new();
    write_js(&mut out, v, Some(&mut indent));
    out
}
