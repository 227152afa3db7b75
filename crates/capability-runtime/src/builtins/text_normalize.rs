//! `text/normalize`: trim, collapse whitespace and change case, with JavaScript semantics.
//!
//! Whitespace is the ECMAScript set (`String.prototype.trim` and `/\s/`): it includes
//! U+FEFF and excludes U+0085, U+180E and U+200B. Case mapping is the full, locale-independent
//! Unicode mapping (`ß` → `SS`, final sigma, `İ` → `i̇`).

use capability_core::js::{is_js_whitespace, js_trim};
use serde_json::{Value, json};

use super::BuiltinError;
use super::common::member;

/// The `case` option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Case {
    /// Leave the case unchanged (also for a missing `case`).
    #[default]
    Preserve,
    /// Full Unicode lowercasing.
    Lower,
    /// Full Unicode uppercasing.
    Upper,
}

/// Options of [`normalize`]; the default trims, collapses and keeps the case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormalizeOptions {
    /// Strip leading and trailing whitespace (`trim !== false`).
    pub trim: bool,
    /// Replace every run of whitespace with one space (`collapseWhitespace !== false`).
    pub collapse_whitespace: bool,
    /// Case change applied last.
    pub case: Case,
}

impl Default for NormalizeOptions {
    fn default() -> Self {
        NormalizeOptions {
            trim: true,
            collapse_whitespace: true,
            case: Case::Preserve,
        }
    }
}

/// Normalizes `text` as the reference does: trim, then collapse, then change case.
pub fn normalize(text: &str, options: &NormalizeOptions) -> String {
    let text = if options.trim { js_trim(text) } else { text };
    let mut out = String::with_capacity(text.len());
    if options.collapse_whitespace {
        let mut in_space = false;
        for c in text.chars() {
            if is_js_whitespace(c) {
                if !in_space {
                    out.push(' ');
                }
                in_space = true;
            } else {
                out.push(c);
                in_space = false;
            }
        }
    } else {
        out.push_str(text);
    }
    match options.case {
        Case::Preserve => out,
        Case::Lower => out.to_lowercase(),
        Case::Upper => out.to_uppercase(),
    }
}

/// Runs `text/normalize` on `{text, trim?, collapseWhitespace?, case?}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let text = match member(Some(input), "text")? {
        Some(Value::String(s)) => s,
        None => {
            return Err(BuiltinError::type_error(
                "Cannot read properties of undefined (reading 'trim')",
            ));
        }
        Some(_) => return Err(BuiltinError::type_error("text.trim is not a function")),
    };
    let not_false = |key: &str| !matches!(input.get(key), Some(Value::Bool(false)));
    let options = NormalizeOptions {
        trim: not_false("trim"),
        collapse_whitespace: not_false("collapseWhitespace"),
        case: match input.get("case").and_then(Value::as_str) {
            Some("lower") => Case::Lower,
            Some("upper") => Case::Upper,
            _ => Case::Preserve,
        },
    };
    Ok(json!({ "text": normalize(text, &options) }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn opts(trim: bool, collapse_whitespace: bool, case: Case) -> NormalizeOptions {
        NormalizeOptions {
            trim,
            collapse_whitespace,
            case,
        }
    }

    #[test]
    fn whitespace_is_the_ecmascript_set() {
        let d = NormalizeOptions::default();
        assert_eq!(normalize("\u{FEFF} a \t\n b \u{3000}", &d), "a b");
        assert_eq!(normalize("\u{85}a\u{200B}", &d), "\u{85}a\u{200B}");
        assert_eq!(
            normalize("  a  b  ", &opts(false, true, Case::Preserve)),
            " a b "
        );
        assert_eq!(
            normalize(" a  b ", &opts(true, false, Case::Preserve)),
            "a  b"
        );
    }

    #[test]
    fn case_mapping_is_full_unicode() {
        assert_eq!(
            normalize("straße", &opts(true, true, Case::Upper)),
            "STRASSE"
        );
        assert_eq!(
            normalize("ΟΔΟΣ ΣΑ", &opts(true, true, Case::Lower)),
            "\u{3bf}\u{3b4}\u{3bf}\u{3c2} \u{3c3}\u{3b1}"
        );
        assert_eq!(normalize("İ", &opts(true, true, Case::Lower)), "i\u{307}");
    }

    #[test]
    fn only_false_disables_an_option() {
        let out = execute(&json!({"text": " A ", "trim": null, "case": "lower"})).unwrap();
        assert_eq!(out, json!({"text": "a"}));
        assert!(execute(&json!({})).is_err());
    }
}
