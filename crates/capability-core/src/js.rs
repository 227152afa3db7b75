//! JavaScript semantics the reference relies on, reproduced exactly: the ECMAScript
//! whitespace set, UTF-16 lengths and ordering, `localeCompare` (ICU root collation) for the
//! strings the reference sorts, `toFixed`, `Math.round`, and `Date.prototype.toISOString`.

use std::cmp::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

/// ECMAScript `WhiteSpace` or `LineTerminator`: includes U+FEFF; excludes U+0085, U+180E and
/// U+200B (unlike `char::is_whitespace`).
pub fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{0009}'..='\u{000D}'
            | '\u{0020}'
            | '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}'
            | '\u{FEFF}'
    )
}

/// `String.prototype.trim`.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

/// `true` when the string is empty after `trim()`.
pub fn is_blank(s: &str) -> bool {
    js_trim(s).is_empty()
}

/// `String.prototype.length`: UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// JavaScript's default `Array.prototype.sort` order for strings (UTF-16 code units).
pub fn compare_utf16(a: &str, b: &str) -> Ordering {
    crate::json::compare_utf16(a.as_bytes(), b.as_bytes())
}

/// Primary weight of an ASCII character under ICU root collation (as `localeCompare` in an
/// en-US locale orders them): whitespace, then punctuation and symbols in CLDR order, then
/// digits, then letters (case-insensitively). `None` for completely ignorable controls.
fn ascii_primary(b: u8) -> Option<u32> {
    const SYMBOLS: &[u8] = b" _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$";
    match b {
        b'\t' | b'\n' | 0x0B | 0x0C | b'\r' => Some(u32::from(b)),
        b'0'..=b'9' => Some(100 + u32::from(b - b'0')),
        b'a'..=b'z' => Some(200 + u32::from(b - b'a')),
        b'A'..=b'Z' => Some(200 + u32::from(b - b'A')),
        _ => SYMBOLS.iter().position(|&s| s == b).map(|p| 20 + p as u32),
    }
}

fn primary(c: char) -> Option<u32> {
    if c.is_ascii() {
        ascii_primary(c as u8)
    } else {
        // Beyond ASCII only code point order is reproduced; the reference only collates
        // identifiers, package names and versions, which are ASCII in practice.
        Some(0x1_0000 + u32::from(c))
    }
}

/// `a.localeCompare(b)` in the reference's locale (ICU root collation): primary strength
/// first (letters ignore case, punctuation before digits before letters), then lowercase
/// before uppercase.
pub fn locale_compare(a: &str, b: &str) -> Ordering {
    let pa = a.chars().filter_map(primary);
    let pb = b.chars().filter_map(primary);
    match pa.cmp(pb) {
        Ordering::Equal => {}
        other => return other,
    }
    // Tertiary level: lowercase sorts before uppercase.
    let ta = a
        .chars()
        .filter(|c| primary(*c).is_some())
        .map(|c| c.is_uppercase());
    let tb = b
        .chars()
        .filter(|c| primary(*c).is_some())
        .map(|c| c.is_uppercase());
    ta.cmp(tb)
}

/// `Number(x.toFixed(digits))`: rounds the exact binary value half away from zero (JavaScript
/// picks the larger candidate on an exact tie), unlike Rust's `{:.N}`.
pub fn to_fixed(x: f64, digits: usize) -> f64 {
    if !x.is_finite() || x.abs() >= 1e21 {
        return x;
    }
    // The exact decimal expansion of a double has at most 1074 fractional digits.
    let exact = format!("{:.1100}", x.abs());
    let Some(dot) = exact.find('.') else {
        return x;
    };
    let keep = &exact[..dot + 1 + digits];
    let next = exact
        .as_bytes()
        .get(dot + 1 + digits)
        .copied()
        .unwrap_or(b'0');
    let mut value: f64 = keep.parse().unwrap_or(x.abs());
    if next >= b'5' {
        let step: f64 = format!("1e-{digits}").parse().unwrap_or(0.0);
        value = format!("{:.*}", digits, value + step)
            .parse()
            .unwrap_or(value);
    }
    if x < 0.0 { -value } else { value }
}

/// `Math.round`: halves round towards +∞.
pub fn math_round(x: f64) -> f64 {
    let f = x.floor();
    if x - f >= 0.5 { f + 1.0 } else { f }
}

/// `new Date(ms).toISOString()`: `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC (`±YYYYYY-…` outside
/// years 0–9999).
pub fn iso_from_millis(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let mut buf = [0u8; 27];
    let mut n = 0;
    if !(0..=9999).contains(&y) {
        buf[0] = if y < 0 { b'-' } else { b'+' };
        n = 1;
    }
    fn put(buf: &mut [u8; 27], n: &mut usize, mut value: u64, width: usize, sep: u8) {
        for k in (0..width).rev() {
            buf[*n + k] = b'0' + (value % 10) as u8;
            value /= 10;
        }
        *n += width;
        buf[*n] = sep;
        *n += 1;
    }
    if (0..=9999).contains(&y) {
        put(&mut buf, &mut n, y as u64, 4, b'-');
    } else {
        put(&mut buf, &mut n, y.unsigned_abs().min(999_999), 6, b'-');
    }
    put(&mut buf, &mut n, u64::from(m), 2, b'-');
    put(&mut buf, &mut n, u64::from(d), 2, b'T');
    put(&mut buf, &mut n, (rem / 3_600_000) as u64, 2, b':');
    put(&mut buf, &mut n, (rem / 60_000 % 60) as u64, 2, b':');
    put(&mut buf, &mut n, (rem / 1000 % 60) as u64, 2, b'.');
    put(&mut buf, &mut n, (rem % 1000) as u64, 3, b'Z');
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Milliseconds since the Unix epoch, now.
pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `new Date().toISOString()`.
pub fn now_iso() -> String {
    iso_from_millis(now_millis())
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) to days since 1970-01-01 in the proleptic Gregorian calendar.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_the_ecmascript_set() {
        assert!(is_js_whitespace('\u{FEFF}'));
        assert!(!is_js_whitespace('\u{0085}'));
        assert!(!is_js_whitespace('\u{200B}'));
        assert_eq!(js_trim("\u{FEFF} a \u{3000}"), "a");
    }

    #[test]
    fn locale_order_puts_underscore_before_dash_before_dot_before_slash_before_digits() {
        let mut ids = vec![
            "ab/x", "a1/x", "a/x", "a.b/x", "a-b/x", "a_b/x", "a0/x", "B/x", "b/x",
        ];
        ids.sort_by(|a, b| locale_compare(a, b));
        assert_eq!(
            ids,
            [
                "a_b/x", "a-b/x", "a.b/x", "a/x", "a0/x", "a1/x", "ab/x", "b/x", "B/x"
            ]
        );
    }

    #[test]
    fn to_fixed_rounds_exact_ties_away_from_zero() {
        assert_eq!(to_fixed(0.03125, 4), 0.0313);
        assert_eq!(to_fixed(0.93775, 4), 0.9377); // 0.93775 is slightly below the tie
        assert_eq!(to_fixed(-0.03125, 4), -0.0313);
        assert_eq!(to_fixed(1.0, 4), 1.0);
    }

    #[test]
    fn math_round_rounds_halves_up() {
        assert_eq!(math_round(2.5), 3.0);
        assert_eq!(math_round(-2.5), -2.0);
        assert_eq!(math_round(2.4), 2.0);
    }

    #[test]
    fn iso_timestamps_match_to_iso_string() {
        assert_eq!(iso_from_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso_from_millis(1_767_225_600_123),
            "2026-01-01T00:00:00.123Z"
        );
        assert_eq!(days_from_civil(2026, 1, 1), 20_454);
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }
}
