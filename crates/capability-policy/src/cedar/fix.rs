//! Fixes for comparisons that mix Cedar's `Long` and `decimal`.
//!
//! Cedar's `<`, `<=`, `>` and `>=` take two `Long`s (the `decimal` extension does not
//! overload them), and `==` between a `Long` and a `decimal` is always `false`. A JSON
//! Schema `number` is a `decimal` in the Cedar contract, so `context.input.a > 100` on such
//! a field is a type error, and `context.input.a == 100` never holds. This module finds the
//! comparisons in a policy's text and writes the expression that means what the user wrote:
//!
//! | Written (`a` a decimal) | Fix |
//! | --- | --- |
//! | `a > 100`, `100 < a` | `a.greaterThan(decimal("100.0"))` (also `>=`, `<`, `<=`) |
//! | `a == 100`, `a != 100` | `a == decimal("100.0")`, `a != decimal("100.0")` |
//!
//! | Written (`n` a Long) | Fix |
//! | --- | --- |
//! | `n > decimal("1.5")`, `n.greaterThan(decimal("1.5"))` | `n > 1` (exact for integers: `>` and `<=` round down, `<` and `>=` up) |
//! | `n == decimal("2.0")` | `n == 2` |
//!
//! The scanner is lexical: it tokenizes the text (strings, comments, identifiers, numbers,
//! operators) and takes as operands the longest runs of tokens around a comparison operator
//! that contain no operator of lower precedence outside brackets, which is Cedar's grammar
//! for relations (`Add RELOP Add`). It only proposes a fix when an operand is a literal
//! (`100`, `-3`, `decimal("1.5")`); comparing two attributes of different types has no
//! fix in Cedar, which cannot convert between the two.

use std::ops::Range;

use super::fast::parse_decimal;

/// Cedar's two number types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumKind {
    Long,
    Decimal,
}

/// A comparison operator, or a decimal comparison method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            "==" => Op::Eq,
            "!=" => Op::Ne,
            _ => return None,
        })
    }

    fn method(s: &str) -> Option<Op> {
        Some(match s {
            "lessThan" => Op::Lt,
            "lessThanOrEqual" => Op::Le,
            "greaterThan" => Op::Gt,
            "greaterThanOrEqual" => Op::Ge,
            _ => return None,
        })
    }

    fn symbol(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Eq => "==",
            Op::Ne => "!=",
        }
    }

    fn method_name(self) -> Option<&'static str> {
        Some(match self {
            Op::Lt => "lessThan",
            Op::Le => "lessThanOrEqual",
            Op::Gt => "greaterThan",
            Op::Ge => "greaterThanOrEqual",
            Op::Eq | Op::Ne => return None,
        })
    }

    /// The operator with its operands swapped (`a < b` is `b > a`).
    fn mirrored(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::Le => Op::Ge,
            Op::Gt => Op::Lt,
            Op::Ge => Op::Le,
            other => other,
        }
    }
}

/// One comparison in a text: `left op right`, or `left.method(right)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Comparison {
    /// The whole expression.
    pub whole: Range<usize>,
    pub left: Range<usize>,
    pub right: Range<usize>,
    op: Op,
    /// Written as a decimal method call (`left.greaterThan(right)`).
    method: bool,
}

impl Comparison {
    /// Whether `span` is this comparison or one of its operands.
    pub(crate) fn covers(&self, span: &Range<usize>) -> bool {
        self.whole == *span || self.left == *span || self.right == *span
    }
}

/// A fix for one comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NumberFix {
    /// The comparison as written.
    pub expression: String,
    /// Its operand that is not a literal.
    pub operand: String,
    /// The type that operand has when the comparison is wrong.
    pub operand_kind: NumKind,
    /// The expression to write instead.
    pub fix: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Ident,
    Int,
    Str,
    Punct,
}

#[derive(Clone, Copy, Debug)]
struct Token {
    kind: Tok,
    start: usize,
    end: usize,
}

const TWO_CHAR: [&str; 7] = ["::", "==", "!=", "<=", ">=", "&&", "||"];

/// Cedar's tokens, with their byte ranges (comments and whitespace skipped).
fn tokens(text: &str) -> Vec<Token> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = if c.is_ascii_whitespace() {
            i += 1;
            continue;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            Tok::Str
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Tok::Ident
        } else if c.is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            Tok::Int
        } else if text
            .get(i..i + 2)
            .is_some_and(|two| TWO_CHAR.contains(&two))
        {
            i += 2;
            Tok::Punct
        } else {
            // One character (a whole UTF-8 sequence when not ASCII).
            i += text[i..].chars().next().map_or(1, char::len_utf8);
            Tok::Punct
        };
        out.push(Token {
            kind,
            start,
            end: i,
        });
    }
    out
}

/// Tokens that end an operand of a comparison (operators of lower or equal precedence,
/// separators, keywords that start or continue another construct).
fn ends_operand(s: &str) -> bool {
    matches!(
        s,
        "," | ";"
            | ":"
            | "&&"
            | "||"
            | "=="
            | "!="
            | "<"
            | "<="
            | ">"
            | ">="
            | "@"
            | "if"
            | "then"
            | "else"
            | "when"
            | "unless"
            | "in"
            | "has"
            | "like"
            | "is"
    )
}

fn is_open(s: &str) -> bool {
    matches!(s, "(" | "[" | "{")
}

fn is_close(s: &str) -> bool {
    matches!(s, ")" | "]" | "}")
}

/// The operand that ends just before token `k`: token indices `first..k`.
fn operand_before(text: &str, toks: &[Token], k: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut first = None;
    let mut j = k;
    while j > 0 {
        j -= 1;
        let s = &text[toks[j].start..toks[j].end];
        if is_close(s) {
            depth += 1;
        } else if is_open(s) {
            if depth == 0 {
                break;
            }
            depth -= 1;
        } else if depth == 0 && ends_operand(s) {
            break;
        }
        first = Some(j);
    }
    first
}

/// The operand that starts at token `k`: token indices `k..=last`.
fn operand_after(text: &str, toks: &[Token], k: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut last = None;
    for (j, t) in toks.iter().enumerate().skip(k) {
        let s = &text[t.start..t.end];
        if is_open(s) {
            depth += 1;
        } else if is_close(s) {
            if depth == 0 {
                break;
            }
            depth -= 1;
        } else if depth == 0 && ends_operand(s) {
            break;
        }
        last = Some(j);
    }
    last
}

/// The receiver of a method call whose `.` is token `k`: a primary followed by attribute
/// accesses, indexing and calls (`context.input["a"].b`).
fn receiver_before(text: &str, toks: &[Token], k: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut first = None;
    let mut j = k;
    while j > 0 {
        j -= 1;
        let t = toks[j];
        let s = &text[t.start..t.end];
        if is_close(s) {
            depth += 1;
        } else if is_open(s) {
            if depth == 0 {
                break;
            }
            depth -= 1;
        } else if depth == 0 {
            let part = match t.kind {
                Tok::Ident => !ends_operand(s),
                Tok::Str | Tok::Int => true,
                Tok::Punct => s == "." || s == "::",
            };
            if !part {
                break;
            }
        }
        first = Some(j);
    }
    first
}

/// The index of the bracket that closes the one at `open`.
fn closing(text: &str, toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        let s = &text[t.start..t.end];
        if is_open(s) {
            depth += 1;
        } else if is_close(s) {
            depth = depth.checked_sub(1)?;
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

/// Every comparison (`<`, `<=`, `>`, `>=`, `==`, `!=`, and the decimal methods
/// `lessThan`, ... called with one argument) in a text, in order.
pub(crate) fn comparisons(text: &str) -> Vec<Comparison> {
    let toks = tokens(text);
    let span = |a: usize, b: usize| toks[a].start..toks[b].end;
    let mut out = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        let s = &text[t.start..t.end];
        if let Some(op) = Op::parse(s) {
            let (Some(first), Some(last)) = (
                operand_before(text, &toks, k),
                operand_after(text, &toks, k + 1),
            ) else {
                continue;
            };
            out.push(Comparison {
                whole: span(first, last),
                left: span(first, k - 1),
                right: span(k + 1, last),
                op,
                method: false,
            });
        } else if s == "." {
            let Some(op) = toks
                .get(k + 1)
                .and_then(|m| Op::method(&text[m.start..m.end]))
            else {
                continue;
            };
            if toks.get(k + 2).map(|p| &text[p.start..p.end]) != Some("(") {
                continue;
            }
            let (Some(first), Some(close)) =
                (receiver_before(text, &toks, k), closing(text, &toks, k + 2))
            else {
                continue;
            };
            if close <= k + 3 {
                continue;
            }
            out.push(Comparison {
                whole: span(first, close),
                left: span(first, k - 1),
                right: span(k + 3, close - 1),
                op,
                method: true,
            });
        }
    }
    out
}

/// A number literal: a Long (`100`, `-3`) or a decimal (`decimal("1.5")`, scaled by 10⁴).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Literal {
    Long(i64),
    Decimal(i64),
}

fn literal(text: &str) -> Option<Literal> {
    let toks = tokens(text);
    let parts: Vec<&str> = toks.iter().map(|t| &text[t.start..t.end]).collect();
    match parts.as_slice() {
        [n] if toks[0].kind == Tok::Int => n.parse().ok().map(Literal::Long),
        ["-", n] if toks[1].kind == Tok::Int => format!("-{n}").parse().ok().map(Literal::Long),
        ["decimal", "(", s, ")"] if toks[2].kind == Tok::Str => {
            let inner = s.strip_prefix('"')?.strip_suffix('"')?;
            parse_decimal(inner).map(Literal::Decimal)
        }
        _ => None,
    }
}

/// The largest integer part a Cedar decimal holds.
const DECIMAL_MAX_INT: i64 = 922_337_203_685_477;

/// `decimal("100.0")` for a Long literal, when it fits.
fn decimal_of_long(n: i64) -> Option<String> {
    (-DECIMAL_MAX_INT..=DECIMAL_MAX_INT)
        .contains(&n)
        .then(|| format!("decimal(\"{n}.0\")"))
}

/// `n op d` for an integer `n` and a decimal `d` (scaled by 10⁴), as `n op' m` with an
/// integer `m`: exact, since `n > 1.5` iff `n > 1` and `n >= 1.5` iff `n >= 2`.
fn integer_bound(op: Op, scaled: i64) -> Option<i64> {
    let d = i128::from(scaled);
    let floor = d.div_euclid(10_000);
    let ceil = -((-d).div_euclid(10_000));
    let exact = d.rem_euclid(10_000) == 0;
    let m = match op {
        Op::Gt | Op::Le => floor,
        Op::Lt | Op::Ge => ceil,
        Op::Eq | Op::Ne if exact => floor,
        Op::Eq | Op::Ne => return None,
    };
    i64::try_from(m).ok()
}

/// Whether an expression can take a method call without parentheses.
fn is_member(text: &str) -> bool {
    let toks = tokens(text);
    let mut depth = 0usize;
    for t in &toks {
        let s = &text[t.start..t.end];
        if is_open(s) {
            depth += 1;
        } else if is_close(s) {
            depth = depth.saturating_sub(1);
        } else if depth == 0 {
            let part = match t.kind {
                Tok::Ident => !ends_operand(s),
                Tok::Str | Tok::Int => true,
                Tok::Punct => s == "." || s == "::",
            };
            if !part {
                return false;
            }
        }
    }
    !toks.is_empty()
}

/// The fix for a comparison between a decimal and a Long literal, or between a Long and a
/// decimal literal; `None` when neither operand is such a literal.
pub(crate) fn fix_for(text: &str, c: &Comparison) -> Option<NumberFix> {
    let left = text.get(c.left.clone())?.trim();
    let right = text.get(c.right.clone())?.trim();
    let expression = text.get(c.whole.clone())?.to_string();
    // Put the literal on the right: `100 < a` is `a > 100`.
    let (operand, lit, op, literal_first) = match (literal(left), literal(right)) {
        (None, Some(l)) => (left, l, c.op, false),
        (Some(l), None) if !c.method => (right, l, c.op.mirrored(), true),
        _ => return None,
    };
    let (operand_kind, fix) = match (lit, c.method) {
        // A decimal compared with a Long literal.
        (Literal::Long(n), false) => {
            let d = decimal_of_long(n)?;
            let fix = match op.method_name() {
                Some(m) if is_member(operand) => format!("{operand}.{m}({d})"),
                Some(m) => format!("({operand}).{m}({d})"),
                None if literal_first => format!("{d} {} {operand}", op.symbol()),
                None => format!("{operand} {} {d}", op.symbol()),
            };
            (NumKind::Decimal, fix)
        }
        // A Long compared with a decimal literal.
        (Literal::Decimal(scaled), _) => {
            let m = integer_bound(op, scaled)?;
            let fix = if literal_first && matches!(op, Op::Eq | Op::Ne) {
                format!("{m} {} {operand}", op.symbol())
            } else {
                format!("{operand} {} {m}", op.symbol())
            };
            (NumKind::Long, fix)
        }
        // `a.greaterThan(100)`: the argument must be a decimal whatever `a` is.
        (Literal::Long(_), true) => return None,
    };
    Some(NumberFix {
        expression,
        operand: operand.to_string(),
        operand_kind,
        fix,
    })
}

/// Every fix the comparisons of a text could need (the runtime picks those whose operand
/// has the wrong type in the request at hand).
pub(crate) fn number_fixes(text: &str) -> Vec<NumberFix> {
    comparisons(text)
        .iter()
        .filter(|c| !matches!(c.op, Op::Eq | Op::Ne))
        .filter_map(|c| fix_for(text, c))
        .collect()
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    fn fix_of(text: &str) -> Option<String> {
        let cs = comparisons(text);
        cs.iter().find_map(|c| fix_for(text, c)).map(|f| f.fix)
    }

    fn texts(text: &str) -> Vec<(String, String, String)> {
        comparisons(text)
            .iter()
            .map(|c| {
                (
                    text[c.whole.clone()].to_string(),
                    text[c.left.clone()].to_string(),
                    text[c.right.clone()].to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn comparisons_take_cedar_relation_operands() {
        let t = r#"forbid(principal, action, resource) when { context.input has a && context.input.a + 1 > 100 || (context["input"].b <= -3) } unless { if x then 1 < y else z.lessThan(decimal("2.5")) };"#;
        assert_eq!(
            texts(t),
            vec![
                (
                    "context.input.a + 1 > 100".into(),
                    "context.input.a + 1".into(),
                    "100".into()
                ),
                (
                    r#"context["input"].b <= -3"#.into(),
                    r#"context["input"].b"#.into(),
                    "-3".into()
                ),
                ("1 < y".into(), "1".into(), "y".into()),
                (
                    r#"z.lessThan(decimal("2.5"))"#.into(),
                    "z".into(),
                    r#"decimal("2.5")"#.into()
                ),
            ]
        );
        // Strings and comments are not scanned.
        assert!(
            comparisons(r#"@reason("a > 1") permit(principal, action, resource); // b < 2"#)
                .is_empty()
        );
        // `::` and `==` in entity references.
        assert_eq!(
            texts(r#"when { resource == Capability::"x" }"#)[0].1,
            "resource"
        );
    }

    #[test]
    fn decimals_compared_with_longs_get_decimal_methods() {
        for (written, fix) in [
            (
                "context.input.a > 100",
                r#"context.input.a.greaterThan(decimal("100.0"))"#,
            ),
            (
                "context.input.a >= 0",
                r#"context.input.a.greaterThanOrEqual(decimal("0.0"))"#,
            ),
            (
                "context.input.a < -5",
                r#"context.input.a.lessThan(decimal("-5.0"))"#,
            ),
            (
                "context.input.a <= 7",
                r#"context.input.a.lessThanOrEqual(decimal("7.0"))"#,
            ),
            (
                "100 < context.input.a",
                r#"context.input.a.greaterThan(decimal("100.0"))"#,
            ),
            (
                "100 >= context.input.a",
                r#"context.input.a.lessThanOrEqual(decimal("100.0"))"#,
            ),
            (
                r#"context.input["a b"] > 1"#,
                r#"context.input["a b"].greaterThan(decimal("1.0"))"#,
            ),
            (
                "context.input.a == 100",
                r#"context.input.a == decimal("100.0")"#,
            ),
            (
                "100 != context.input.a",
                r#"decimal("100.0") != context.input.a"#,
            ),
            (
                "(if c then context.input.a else context.input.b) > 2",
                r#"(if c then context.input.a else context.input.b).greaterThan(decimal("2.0"))"#,
            ),
        ] {
            assert_eq!(fix_of(written).as_deref(), Some(fix), "{written}");
        }
        // Too large for a decimal: no fix.
        assert_eq!(fix_of("context.input.a > 1000000000000000"), None);
        // Two attributes: Cedar cannot convert, so there is no fix.
        assert_eq!(fix_of("context.input.a > context.input.n"), None);
    }

    #[test]
    fn longs_compared_with_decimals_get_exact_integer_bounds() {
        for (written, fix) in [
            (r#"context.input.n > decimal("1.5")"#, "context.input.n > 1"),
            (
                r#"context.input.n >= decimal("1.5")"#,
                "context.input.n >= 2",
            ),
            (r#"context.input.n < decimal("1.5")"#, "context.input.n < 2"),
            (
                r#"context.input.n <= decimal("1.5")"#,
                "context.input.n <= 1",
            ),
            (
                r#"context.input.n > decimal("-1.5")"#,
                "context.input.n > -2",
            ),
            (
                r#"context.input.n >= decimal("-1.5")"#,
                "context.input.n >= -1",
            ),
            (
                r#"context.input.n.greaterThan(decimal("100.0"))"#,
                "context.input.n > 100",
            ),
            (
                r#"context.input.n.lessThanOrEqual(decimal("0.25"))"#,
                "context.input.n <= 0",
            ),
            (r#"decimal("2.5") < context.input.n"#, "context.input.n > 2"),
            (
                r#"context.input.n == decimal("2.0")"#,
                "context.input.n == 2",
            ),
            (
                r#"decimal("2.0") != context.input.n"#,
                "2 != context.input.n",
            ),
        ] {
            assert_eq!(fix_of(written).as_deref(), Some(fix), "{written}");
        }
        // An integer never equals 2.5: nothing to propose.
        assert_eq!(fix_of(r#"context.input.n == decimal("2.5")"#), None);
    }

    #[test]
    fn runtime_candidates_are_the_ordering_comparisons() {
        let t = r#"permit(principal, action, resource) when { context.input.a > 100 && context.input.b == 3 && context.input.n.greaterThan(decimal("1.0")) };"#;
        let fixes = number_fixes(t);
        assert_eq!(fixes.len(), 2, "{fixes:#?}");
        assert_eq!(fixes[0].operand, "context.input.a");
        assert_eq!(fixes[0].operand_kind, NumKind::Decimal);
        assert_eq!(fixes[0].expression, "context.input.a > 100");
        assert_eq!(fixes[1].operand, "context.input.n");
        assert_eq!(fixes[1].operand_kind, NumKind::Long);
        assert_eq!(fixes[1].fix, "context.input.n > 1");
    }
}
