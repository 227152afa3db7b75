//! A look at a line of JSON that rmcp will not read, to answer it: how long it is, how deep
//! its arrays and objects nest, and the `id` member of its top-level object.
//!
//! It reads the line a byte at a time, in as many pieces as it comes (a line too long for
//! the lane to hold is scanned as it is passed on), in constant memory and without recursion,
//! whatever the line holds: it never fails, and for a line that is not JSON its answers are
//! a best effort (no id, most likely).

use rmcp::model::RequestId;

/// The nesting serde_json refuses (its recursion limit): an array or object inside 127
/// others. rmcp reads messages with serde_json, so a line nested this deep is never read.
pub(crate) const TOO_DEEP: usize = 128;

/// The longest `id` value read (a longer one is not read).
const ID_MAX: usize = 512;

/// The longest top-level key looked at (`id`, perhaps with `\u` escapes).
const KEY_MAX: usize = 32;

/// Where the scan is among the members of the top-level object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Member {
    /// Not at a member of the top-level object: before or after it, inside a member's
    /// value, or in a value that is not the id.
    #[default]
    Other,
    /// Expecting a key (after `{` or `,`).
    Key,
    /// In a key.
    InKey,
    /// After a key, expecting `:`.
    Colon,
    /// After `:`, expecting the value.
    Value,
    /// In the id's value: a string, or a number or literal.
    IdString,
    IdScalar,
}

/// See the module.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    len: usize,
    depth: usize,
    max_depth: usize,
    started: bool,
    root_object: bool,
    in_string: bool,
    escaped: bool,
    member: Member,
    /// The key being read, as written (escapes included).
    key: Vec<u8>,
    key_is_id: bool,
    /// The id's value being read, as written.
    value: Vec<u8>,
    id: Option<RequestId>,
}

impl Scan {
    /// Scans all of `line`.
    pub(crate) fn of(line: &[u8]) -> Scan {
        let mut scan = Scan::default();
        scan.feed(line);
        scan
    }

    /// Scans the next piece of the line.
    pub(crate) fn feed(&mut self, piece: &[u8]) {
        self.len = self.len.saturating_add(piece.len());
        for &b in piece {
            self.byte(b);
        }
    }

    /// The bytes scanned.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The deepest nesting of arrays and objects (outside strings).
    pub(crate) fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// The `id` of the top-level object, when it is a string or an integer that a request id
    /// can be (the last one, as a parser keeps it, if there are several).
    pub(crate) fn id(&self) -> Option<RequestId> {
        self.id.clone()
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            self.string_byte(b);
            return;
        }
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => self.end_scalar(),
            b'"' => {
                self.in_string = true;
                self.started = true;
                match self.member {
                    Member::Key => {
                        self.member = Member::InKey;
                        self.key.clear();
                    }
                    Member::Value if self.key_is_id => {
                        self.member = Member::IdString;
                        self.value.clear();
                        self.value.push(b);
                    }
                    Member::Value => self.member = Member::Other,
                    _ => {}
                }
            }
            b'{' | b'[' => {
                self.end_scalar();
                if self.member == Member::Value {
                    // An object or array is not an id.
                    if self.key_is_id {
                        self.id = None;
                    }
                    self.member = Member::Other;
                }
                if !self.started && b == b'{' {
                    self.root_object = true;
                    self.member = Member::Key;
                }
                self.started = true;
                self.depth = self.depth.saturating_add(1);
                self.max_depth = self.max_depth.max(self.depth);
            }
            b'}' | b']' => {
                self.end_scalar();
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.member = Member::Other;
                }
            }
            b',' => {
                self.end_scalar();
                if self.depth == 1 && self.root_object {
                    self.member = Member::Key;
                }
            }
            b':' => {
                self.end_scalar();
                if self.depth == 1 && self.member == Member::Colon {
                    self.member = Member::Value;
                }
            }
            _ => {
                self.started = true;
                match self.member {
                    Member::Value if self.key_is_id => {
                        self.member = Member::IdScalar;
                        self.value.clear();
                        self.value.push(b);
                    }
                    Member::Value => self.member = Member::Other,
                    Member::IdScalar => self.keep_value(b),
                    _ => {}
                }
            }
        }
    }

    fn string_byte(&mut self, b: u8) {
        let closing = !self.escaped && b == b'"';
        self.escaped = !self.escaped && b == b'\\';
        if closing {
            self.in_string = false;
            match self.member {
                Member::InKey => {
                    self.key_is_id = self.key.len() <= KEY_MAX && is_id(&self.key);
                    self.member = Member::Colon;
                }
                Member::IdString => {
                    self.keep_value(b);
                    self.read_id();
                    self.member = Member::Other;
                }
                _ => {}
            }
            return;
        }
        match self.member {
            Member::InKey if self.key.len() <= KEY_MAX => self.key.push(b),
            Member::IdString => self.keep_value(b),
            _ => {}
        }
    }

    fn keep_value(&mut self, b: u8) {
        // One byte past the limit marks the value as too long to read.
        if self.value.len() <= ID_MAX {
            self.value.push(b);
        }
    }

    /// The end of a number or literal: the id's, if it was being read.
    fn end_scalar(&mut self) {
        if self.member == Member::IdScalar {
            self.read_id();
            self.member = Member::Other;
        }
    }

    fn read_id(&mut self) {
        self.id = if self.value.len() <= ID_MAX {
            serde_json::from_slice::<RequestId>(&self.value).ok()
        } else {
            None
        };
    }
}

/// Whether a key, as written between its quotes, is `id`.
fn is_id(key: &[u8]) -> bool {
    if key == b"id" {
        return true;
    }
    if !key.contains(&b'\\') {
        return false;
    }
    let mut quoted = Vec::with_capacity(key.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(key);
    quoted.push(b'"');
    serde_json::from_slice::<String>(&quoted).is_ok_and(|k| k == "id")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn too_deep_is_where_serde_json_stops() {
        for depth in 1..TOO_DEEP + 8 {
            let text = nested(depth);
            let read = serde_json::from_str::<serde_json::Value>(&text).is_ok();
            assert_eq!(Scan::of(text.as_bytes()).max_depth(), depth);
            assert_eq!(read, depth < TOO_DEEP, "{depth}");
        }
        // As rmcp reads a message, with the nesting inside its params.
        let message = |depth: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{}}}}}}}"#,
                nested(depth - 3)
            )
        };
        for depth in [TOO_DEEP - 1, TOO_DEEP] {
            let text = message(depth);
            assert_eq!(Scan::of(text.as_bytes()).max_depth(), depth);
            let read = serde_json::from_str::<rmcp::model::ClientJsonRpcMessage>(&text);
            assert_eq!(read.is_ok(), depth < TOO_DEEP, "{depth}: {read:?}");
        }
    }

    #[test]
    fn the_id_is_read_wherever_it_is_and_however_deep_the_rest() {
        let deep = nested(100_000);
        for (line, id) in [
            (
                format!(r#"{{"jsonrpc":"2.0","id":7,"params":{deep}}}"#),
                Some(RequestId::Number(7)),
            ),
            (
                format!(r#"{{"params":{deep},"id":"a\"b","method":"x"}}"#),
                Some(RequestId::String("a\"b".into())),
            ),
            (
                r#"{ "params" : {"id":1} , "id" : -3 }"#.to_string(),
                Some(RequestId::Number(-3)),
            ),
            (r#"{"\u0069d":4}"#.to_string(), Some(RequestId::Number(4))),
            // A nested id, a string value that looks like one, no id, a null or object id.
            (r#"{"params":{"id":1},"x":"\"id\":2"}"#.to_string(), None),
            (format!(r#"{{"method":"x","params":{deep}}}"#), None),
            (r#"{"id":null}"#.to_string(), None),
            (r#"{"id":{"n":1}}"#.to_string(), None),
            (r#"[{"id":1}]"#.to_string(), None),
            // The last id wins; an id after broken JSON is still found.
            (r#"{"id":1,"id":2}"#.to_string(), Some(RequestId::Number(2))),
            (
                r#"{"id":9,"params":{"a":tru"#.to_string(),
                Some(RequestId::Number(9)),
            ),
            ("not json at all".to_string(), None),
            (format!(r#"{{"id":"{}"}}"#, "x".repeat(ID_MAX)), None),
        ] {
            assert_eq!(
                Scan::of(line.as_bytes()).id(),
                id,
                "{}",
                &line[..line.len().min(80)]
            );
            // In pieces, cut anywhere.
            let mut scan = Scan::default();
            for piece in line.as_bytes().chunks(3) {
                scan.feed(piece);
            }
            assert_eq!(scan.id(), id);
            assert_eq!(scan.len(), line.len());
        }
    }
}
