//! A JSON text parser with `JSON.parse` semantics.
//!
//! Numbers are read as IEEE-754 doubles (correctly rounded, overflow to infinity, underflow to
//! zero), the last of several duplicate keys wins while keeping the position of the first, and
//! escaped lone surrogates are kept. Nesting is bounded by [`MAX_DEPTH`] so that hostile input
//! cannot exhaust the stack.

use super::JsonError;

/// The deepest nesting of arrays and objects accepted in JSON from outside (documents, inputs,
/// guest output): one limit on the way in and out. It is serde_json's own recursion limit, so
/// whatever is accepted can also be handled by code that reads JSON with serde_json.
pub const MAX_DEPTH: usize = 128;

/// How a parse refused for nesting begins ([`super::JsonError::is_too_deep`]).
pub(crate) const TOO_DEEP: &str = "nesting deeper than";

/// The deepest nesting accepted when reading back a stored record (a receipt, an approval, an
/// audit event), which holds accepted values a few levels down: [`MAX_DEPTH`] plus room for
/// the record's own structure, so that everything accepted can be read back.
pub const RECORD_DEPTH: usize = MAX_DEPTH + 32;

/// A string as JavaScript sees it: UTF-8, except that lone surrogates (which only an escape can
/// produce) are kept as their generalized UTF-8 (WTF-8) three-byte sequences.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsString(pub(crate) Vec<u8>);

impl JsString {
    /// The string, when it holds no lone surrogate.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The raw WTF-8 bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A parsed JSON value that can hold everything `JSON.parse` can produce: non-finite numbers
/// (from overflowing literals) and lone surrogates.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonNode {
    Null,
    Bool(bool),
    Number(f64),
    String(JsString),
    Array(Vec<JsonNode>),
    /// Members in first-appearance order; a duplicate key replaced the earlier value in place.
    Object(Vec<(JsString, JsonNode)>),
}

/// Parses JSON text with `JSON.parse` semantics, nested at most [`MAX_DEPTH`] levels.
pub fn parse_node(text: &[u8]) -> Result<JsonNode, JsonError> {
    parse_node_within(text, MAX_DEPTH)
}

/// [`parse_node`] with another nesting limit.
pub fn parse_node_within(text: &[u8], max_depth: usize) -> Result<JsonNode, JsonError> {
    let mut p = Parser {
        s: text,
        i: 0,
        max_depth,
    };
    p.skip_ws();
    let v = p.value(0)?;
    p.skip_ws();
    if p.i < p.s.len() {
        return Err(p.err("unexpected data after the JSON value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    max_depth: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, msg: &str) -> JsonError {
        JsonError::at(self.s, self.i, msg)
    }

    fn skip_ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn expect_lit(&mut self, lit: &[u8]) -> Result<(), JsonError> {
        if self.s.get(self.i..self.i + lit.len()) == Some(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn too_deep(&self) -> JsonError {
        self.err(&format!("{TOO_DEEP} {} levels", self.max_depth))
    }

    fn value(&mut self, depth: usize) -> Result<JsonNode, JsonError> {
        match self.peek() {
            None => Err(self.err("unexpected end of input, expected a value")),
            Some(b'n') => self.expect_lit(b"null").map(|_| JsonNode::Null),
            Some(b't') => self.expect_lit(b"true").map(|_| JsonNode::Bool(true)),
            Some(b'f') => self.expect_lit(b"false").map(|_| JsonNode::Bool(false)),
            Some(b'"') => self.string().map(JsonNode::String),
            Some(b'[') => {
                if depth >= self.max_depth {
                    return Err(self.too_deep());
                }
                self.i += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(JsonNode::Array(items));
                }
                loop {
                    self.skip_ws();
                    items.push(self.value(depth + 1)?);
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(JsonNode::Array(items));
                        }
                        _ => return Err(self.err("expected ',' or ']' in array")),
                    }
                }
            }
            Some(b'{') => {
                if depth >= self.max_depth {
                    return Err(self.too_deep());
                }
                self.i += 1;
                let mut members: Vec<(JsString, JsonNode)> = Vec::new();
                self.skip_ws();
                if self.peek() == Some(b'}') {
                    self.i += 1;
                    return Ok(JsonNode::Object(members));
                }
                loop {
                    self.skip_ws();
                    if self.peek() != Some(b'"') {
                        return Err(self.err("expected a string key in object"));
                    }
                    let key = self.string()?;
                    self.skip_ws();
                    if self.peek() != Some(b':') {
                        return Err(self.err("expected ':' after object key"));
                    }
                    self.i += 1;
                    self.skip_ws();
                    let value = self.value(depth + 1)?;
                    // Duplicate keys: the last value wins, at the first key's position.
                    // Small objects dominate, so a linear scan beats hashing here.
                    if let Some(slot) = members.iter_mut().find(|(k, _)| *k == key) {
                        slot.1 = value;
                    } else {
                        members.push((key, value));
                    }
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(JsonNode::Object(members));
                        }
                        _ => return Err(self.err("expected ',' or '}' in object")),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number().map(JsonNode::Number),
            Some(_) => Err(self.err("unexpected character, expected a value")),
        }
    }

    fn number(&mut self) -> Result<f64, JsonError> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while matches!(self.peek(), Some(b'0'..=b'9')) {
                    self.i += 1;
                }
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number: expected a digit after '.'"));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number: expected an exponent digit"));
            }
            while matches!(self.peek(), Some(b'0'..=b'9')) {
                self.i += 1;
            }
        }
        // The slice is ASCII by construction.
        let text =
            std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.err("invalid number"))?;
        // Rust's float parsing is correctly rounded and maps overflow to infinity, like JS.
        text.parse::<f64>().map_err(|_| self.err("invalid number"))
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let Some(digits) = self.s.get(self.i..self.i + 4) else {
            return Err(self.err("truncated \\u escape"));
        };
        let mut v: u16 = 0;
        for &d in digits {
            let n = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(self.err("invalid \\u escape")),
            };
            v = (v << 4) | u16::from(n);
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<JsString, JsonError> {
        self.i += 1; // opening quote
        let mut out: Vec<u8> = Vec::new();
        loop {
            // Copy the longest run of plain bytes at once.
            let run_start = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            if self.i > run_start {
                let run = &self.s[run_start..self.i];
                if std::str::from_utf8(run).is_err() {
                    return Err(JsonError::at(self.s, run_start, "invalid UTF-8 in string"));
                }
                out.extend_from_slice(run);
            }
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(JsString(out));
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.err("unterminated escape"));
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let u = self.hex4()?;
                            let cp: u32 = if (0xD800..0xDC00).contains(&u)
                                && self.s.get(self.i..self.i + 2) == Some(b"\\u")
                            {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    0x10000
                                        + ((u32::from(u) - 0xD800) << 10)
                                        + (u32::from(lo) - 0xDC00)
                                } else {
                                    self.i = save;
                                    u32::from(u)
                                }
                            } else {
                                u32::from(u)
                            };
                            push_wtf8(&mut out, cp);
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }
}

/// Appends a code point (surrogates included) as generalized UTF-8.
fn push_wtf8(out: &mut Vec<u8>, cp: u32) {
    if cp < 0x80 {
        out.push(cp as u8);
    } else if cp < 0x800 {
        out.push(0xC0 | (cp >> 6) as u8);
        out.push(0x80 | (cp & 0x3F) as u8);
    } else if cp < 0x10000 {
        out.push(0xE0 | (cp >> 12) as u8);
        out.push(0x80 | ((cp >> 6) & 0x3F) as u8);
        out.push(0x80 | (cp & 0x3F) as u8);
    } else {
        out.push(0xF0 | (cp >> 18) as u8);
        out.push(0x80 | ((cp >> 12) & 0x3F) as u8);
        out.push(0x80 | ((cp >> 6) & 0x3F) as u8);
        out.push(0x80 | (cp & 0x3F) as u8);
    }
}
