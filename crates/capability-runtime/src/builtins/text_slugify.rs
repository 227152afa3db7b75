//! `text/slugify`: a deterministic URL slug.
//!
//! 1. The separator must be 1–8 UTF-16 units long and hold no ASCII letter or digit.
//! 2. NFKD, then every code point in U+0300–U+036F is dropped.
//! 3. Full Unicode lowercasing, unless `lowercase` is falsy.
//! 4. Every maximal run of characters outside `[A-Za-z0-9]` becomes the separator, inserted
//!    literally (the reference would interpret `$` patterns; that is a deliberate divergence).
//! 5. The reference then removes `^S+|S+$` (global) where `S` is the escaped separator: the
//!    `+` repeats only the separator's last UTF-16 unit. [`strip_separator`] reproduces that
//!    pattern exactly.

use capability_core::js::utf16_len;
use serde_json::{Value, json};
use unicode_normalization::UnicodeNormalization;

use super::BuiltinError;
use super::common::{member, truthy};

/// The reference's message for a rejected separator.
pub const SEPARATOR_ERROR: &str = "separator must be 1-8 non-alphanumeric characters";

fn is_combining_diacritic(c: char) -> bool {
    ('\u{0300}'..='\u{036F}').contains(&c)
}

/// Slugifies `text` with `separator` (the reference default is `-`), lowercasing when
/// `lowercase` is true (the default). Fails with [`SEPARATOR_ERROR`] for an empty separator,
/// one longer than 8 UTF-16 units, or one holding an ASCII letter or digit.
pub fn slugify(text: &str, separator: &str, lowercase: bool) -> Result<String, BuiltinError> {
    if separator.is_empty()
        || utf16_len(separator) > 8
        || separator.bytes().any(|b| b.is_ascii_alphanumeric())
    {
        return Err(BuiltinError::type_error(SEPARATOR_ERROR));
    }
    let mut out = String::with_capacity(text.len() + separator.len());
    let mut in_run = false;
    let mut push = |c: char| {
        if c.is_ascii_alphanumeric() {
            if in_run {
                out.push_str(separator);
                in_run = false;
            }
            out.push(c);
        } else {
            in_run = true;
        }
    };
    if text.is_ascii() {
        // ASCII is its own NFKD and holds no combining diacritic.
        for b in text.bytes() {
            push(char::from(if lowercase {
                b.to_ascii_lowercase()
            } else {
                b
            }));
        }
    } else {
        for c in text.nfkd().filter(|c| !is_combining_diacritic(*c)) {
            if lowercase && !c.is_ascii() {
                // Char-wise lowercasing differs from the string-wise one only for the final
                // sigma, and both sigmas are outside [A-Za-z0-9].
                c.to_lowercase().for_each(&mut push);
            } else if lowercase {
                push(c.to_ascii_lowercase());
            } else {
                push(c);
            }
        }
    }
    if in_run {
        out.push_str(separator);
    }
    let stripped = strip_separator(&out, separator);
    if stripped.len() == out.len() {
        Ok(out)
    } else {
        Ok(stripped.to_string())
    }
}

/// `value.replace(new RegExp("^" + S + "+|" + S + "+$", "g"), "")` where `S` is `separator`
/// as an escaped literal. The quantifier binds to the separator's last UTF-16 unit, so a
/// one-character separator strips all its leading and trailing copies, while a longer one
/// strips one occurrence whose last character may repeat. When that last character is
/// astral, its low surrogate cannot repeat in well-formed text, so exactly one occurrence is
/// stripped.
pub fn strip_separator<'a>(value: &'a str, separator: &str) -> &'a str {
    let Some(last) = separator.chars().next_back() else {
        return value;
    };
    let prefix = &separator[..separator.len() - last.len_utf8()];
    let repeatable = last.len_utf16() == 1;
    // First alternative, at position 0 only.
    let mut start = 0;
    if value.starts_with(separator) {
        start = separator.len();
        if repeatable {
            while value[start..].starts_with(last) {
                start += last.len_utf8();
            }
        }
    }
    // Second alternative: the leftmost match at or after `start` that reaches the end, which
    // is the one with the most repetitions of the last character.
    let rest = &value[start..];
    let mut count = rest.chars().rev().take_while(|c| *c == last).count();
    if !repeatable {
        count = count.min(1);
    }
    for k in (1..=count).rev() {
        let cut = rest.len() - k * last.len_utf8();
        if rest[..cut].ends_with(prefix) {
            return &rest[..cut - prefix.len()];
        }
    }
    rest
}

/// Runs `text/slugify` on `{text, separator?, lowercase?}`.
pub fn execute(input: &Value) -> Result<Value, BuiltinError> {
    let separator = match member(Some(input), "separator")? {
        None => "-",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(BuiltinError::type_error(SEPARATOR_ERROR)),
    };
    let lowercase = match input.get("lowercase") {
        None => true,
        some => truthy(some),
    };
    let text = match input.get("text") {
        Some(Value::String(s)) => s.as_str(),
        None => {
            // The separator is checked first, as in the reference.
            slugify("", separator, lowercase)?;
            return Err(BuiltinError::type_error(
                "Cannot read properties of undefined (reading 'normalize')",
            ));
        }
        Some(_) => {
            slugify("", separator, lowercase)?;
            return Err(BuiltinError::type_error("text.normalize is not a function"));
        }
    };
    Ok(json!({ "slug": slugify(text, separator, lowercase)? }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn slug(text: &str, sep: &str) -> String {
        slugify(text, sep, true).unwrap()
    }

    #[test]
    fn reference_examples() {
        assert_eq!(slug("Hello World", "-"), "hello-world");
        assert_eq!(slug("  Hello,   World!  ", "-"), "hello-world");
        assert_eq!(slug("Héllo Wörld — Ça va?", "-"), "hello-world-ca-va");
        assert_eq!(slug("ÆØÅ æøå ß Œ", "-"), "a-a");
        assert_eq!(slug("İstanbul", "-"), "istanbul");
        assert_eq!(slug("ﬁ ① ℌ", "-"), "fi-1-h");
        assert_eq!(slugify("Crème Brûlée", "-", false).unwrap(), "Creme-Brulee");
        assert_eq!(slug("a_b-c.d", "-"), "a-b-c-d");
        assert_eq!(slug("---", "-"), "");
        assert_eq!(slug("", "-"), "");
        assert_eq!(slug("日本語 text", "-"), "text");
        assert_eq!(slug("Ǆ ǅ", "-"), "dz-dz");
        assert_eq!(slug("a\u{200b}b", "-"), "a-b");
    }

    #[test]
    fn multi_character_separators_are_stripped_once_at_each_end() {
        assert_eq!(slug("Hello World", "--"), "hello--world");
        assert_eq!(slug("!Hello World!", "->"), "hello->world");
        assert_eq!(slug("!!a!!", "<=>"), "a");
        assert_eq!(slug("!!!", "<=>"), "");
        assert_eq!(slug(" a b ", "😀"), "a😀b");
        assert_eq!(slug(" a ", "—·"), "a");
    }

    #[test]
    fn strip_follows_the_regular_expression() {
        // `^--+|--+$`: the last `-` repeats.
        assert_eq!(strip_separator("--a---", "--"), "a");
        assert_eq!(strip_separator("---a--", "--"), "a");
        assert_eq!(strip_separator("-a-", "--"), "-a-");
        // `^-\.+|-\.+$`
        assert_eq!(strip_separator("-..a-.-..", "-."), "a-.");
        assert_eq!(strip_separator("-.-..", "-."), "");
        // A single character strips every copy.
        assert_eq!(strip_separator("__a__", "_"), "a");
        // An astral last character (its low surrogate) cannot repeat.
        assert_eq!(strip_separator("😀😀a😀😀", "😀"), "😀a😀");
        assert_eq!(strip_separator("", "-"), "");
    }

    #[test]
    fn separators_are_checked() {
        for bad in ["", "a", "-1", "---------", "😀😀😀😀😀"] {
            let err = slugify("x", bad, true).unwrap_err();
            assert_eq!(err.name, "TypeError");
            assert_eq!(err.message, SEPARATOR_ERROR);
        }
        assert_eq!(slug("a b", "😀😀😀😀"), "a😀😀😀😀b");
        assert_eq!(slug("a b", "é"), "aéb");
    }

    #[test]
    fn separators_are_literal() {
        assert_eq!(slug("Hello World", "$&"), "hello$&world");
        assert_eq!(slug("a b", "$'"), "a$'b");
    }
}
