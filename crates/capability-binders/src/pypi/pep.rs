//! The Python packaging standards the index client and the resolver need, written from the
//! specifications (no packaging library):
//!
//! * PEP 503 name normalization ([`normalize_name`]): runs of `-`, `_` and `.` become one `-`,
//!   lowercase.
//! * PEP 440 versions ([`Version`]): parsing with the specification's normalizations (`v`
//!   prefix, `alpha`/`beta`/`c`/`pre`/`preview`, `rev`/`r`, implicit post releases `1.0-1`,
//!   optional separators and numbers, case), the normalized form ([`std::fmt::Display`]) and
//!   the total ordering: epoch, release (trailing zeros ignored), then `.devN` before
//!   pre-releases before the release before post-releases, and local labels last (numeric
//!   segments above alphanumeric ones).
//! * PEP 440 specifiers ([`Specifier`], [`SpecifierSet`]): `==` (with `.*` prefix matching),
//!   `!=`, `<`, `<=`, `>`, `>=`, `~=` and `===`; pre-releases are excluded unless a specifier
//!   names one (or the caller allows them); `<V` excludes pre-releases of `V` and `>V` its
//!   post-releases, as the specification says.
//! * PEP 508 requirements ([`Requirement`]): `name[extras] (specifiers) ; marker` or
//!   `name[extras] @ url ; marker`, and markers ([`Marker`]) evaluated against a
//!   [`MarkerEnv`]: `and`/`or`/parentheses, version comparison when both sides are versions,
//!   string comparison otherwise, `in`/`not in`, extras compared normalized.
//!
//! Every parse error is a [`PypiError`] of kind [`PypiErrorKind::Invalid`] naming the input.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::{PypiError, PypiErrorKind};

fn invalid(message: impl Into<String>) -> PypiError {
    PypiError::new(PypiErrorKind::Invalid, message)
}

/// PEP 503: runs of `-`, `_` and `.` become one `-`, and the name is lowercased.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_sep = false;
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_sep {
                out.push('-');
            }
            in_sep = true;
        } else {
            out.extend(c.to_lowercase());
            in_sep = false;
        }
    }
    out
}

/// Whether `name` is a valid PEP 508 distribution name (ASCII letters and digits, with
/// `-`, `_`, `.` inside).
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The kind of a pre-release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PreKind {
    /// `aN` (alpha).
    Alpha,
    /// `bN` (beta).
    Beta,
    /// `rcN` (release candidate; `c`, `pre` and `preview` normalize to it).
    Rc,
}

impl PreKind {
    fn as_str(self) -> &'static str {
        match self {
            PreKind::Alpha => "a",
            PreKind::Beta => "b",
            PreKind::Rc => "rc",
        }
    }
}

/// One dot-separated segment of a local version label.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LocalSegment {
    Number(u64),
    Text(String),
}

impl Ord for LocalSegment {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (LocalSegment::Number(a), LocalSegment::Number(b)) => a.cmp(b),
            (LocalSegment::Text(a), LocalSegment::Text(b)) => a.cmp(b),
            // Numeric segments sort above alphanumeric ones.
            (LocalSegment::Number(_), LocalSegment::Text(_)) => Ordering::Greater,
            (LocalSegment::Text(_), LocalSegment::Number(_)) => Ordering::Less,
        }
    }
}

impl PartialOrd for LocalSegment {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for LocalSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalSegment::Number(n) => write!(f, "{n}"),
            LocalSegment::Text(s) => f.write_str(s),
        }
    }
}

/// A PEP 440 version. Equality and ordering are the specification's (`1.0 == 1.0.0`); the
/// [`Display`](fmt::Display) form is the normalized one.
#[derive(Clone, Debug)]
pub struct Version {
    pub epoch: u64,
    /// At least one component.
    pub release: Vec<u64>,
    pub pre: Option<(PreKind, u64)>,
    pub post: Option<u64>,
    pub dev: Option<u64>,
    /// Empty when there is no local label.
    pub local: Vec<LocalSegment>,
}

/// The comparison key of a pre-release slot: a dev-only release sorts below every
/// pre-release, a release without pre-release above them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum PreKey {
    DevOnly,
    Pre(PreKind, u64),
    None,
}

impl Version {
    /// Parses (and normalizes) a PEP 440 version.
    pub fn parse(text: &str) -> Result<Version, PypiError> {
        VersionParser::new(text)
            .parse()
            .ok_or_else(|| invalid(format!("`{text}` is not a valid PEP 440 version")))
    }

    /// A pre-release or a development release.
    pub fn is_prerelease(&self) -> bool {
        self.pre.is_some() || self.dev.is_some()
    }

    /// A post-release.
    pub fn is_postrelease(&self) -> bool {
        self.post.is_some()
    }

    /// The same version without its local label.
    pub fn public(&self) -> Version {
        Version {
            local: Vec::new(),
            ..self.clone()
        }
    }

    /// Epoch and release only (`1!2.0` of `1!2.0rc1.post2.dev3+x`).
    pub fn base(&self) -> Version {
        Version {
            epoch: self.epoch,
            release: self.release.clone(),
            pre: None,
            post: None,
            dev: None,
            local: Vec::new(),
        }
    }

    fn release_trimmed(&self) -> &[u64] {
        let mut end = self.release.len();
        while end > 1 && self.release[end - 1] == 0 {
            end -= 1;
        }
        &self.release[..end]
    }

    fn pre_key(&self) -> PreKey {
        match (self.pre, self.post, self.dev) {
            (Some((kind, n)), _, _) => PreKey::Pre(kind, n),
            (None, None, Some(_)) => PreKey::DevOnly,
            _ => PreKey::None,
        }
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| self.release_trimmed().cmp(other.release_trimmed()))
            .then_with(|| self.pre_key().cmp(&other.pre_key()))
            // No post-release sorts below every post-release.
            .then_with(|| self.post.map(|p| p + 1).cmp(&other.post.map(|p| p + 1)))
            // No dev-release sorts above every dev-release.
            .then_with(|| match (self.dev, other.dev) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => a.cmp(&b),
            })
            // No local label sorts below every label; segments compare pairwise, then the
            // longer label wins.
            .then_with(|| self.local.cmp(&other.local))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl std::hash::Hash for Version {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.epoch.hash(state);
        self.release_trimmed().hash(state);
        self.pre.hash(state);
        self.post.hash(state);
        self.dev.hash(state);
        self.local.hash(state);
    }
}

impl FromStr for Version {
    type Err = PypiError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse(s)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.epoch != 0 {
            write!(f, "{}!", self.epoch)?;
        }
        let release: Vec<String> = self.release.iter().map(u64::to_string).collect();
        f.write_str(&release.join("."))?;
        if let Some((kind, n)) = self.pre {
            write!(f, "{}{n}", kind.as_str())?;
        }
        if let Some(n) = self.post {
            write!(f, ".post{n}")?;
        }
        if let Some(n) = self.dev {
            write!(f, ".dev{n}")?;
        }
        if !self.local.is_empty() {
            let local: Vec<String> = self.local.iter().map(ToString::to_string).collect();
            write!(f, "+{}", local.join("."))?;
        }
        Ok(())
    }
}

/// A cursor over a lowercased version string.
struct VersionParser {
    s: Vec<u8>,
    i: usize,
}

impl VersionParser {
    fn new(text: &str) -> VersionParser {
        VersionParser {
            s: text.trim().to_ascii_lowercase().into_bytes(),
            i: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn number(&mut self) -> Option<u64> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if start == self.i {
            return None;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()?
            .parse()
            .ok()
    }

    fn eat_word(&mut self, words: &[&str]) -> Option<usize> {
        // Longest first, so that `preview` is not read as `pre`.
        let mut best: Option<(usize, usize)> = None;
        for (k, w) in words.iter().enumerate() {
            if self.s[self.i..].starts_with(w.as_bytes())
                && best.is_none_or(|(_, len)| w.len() > len)
            {
                best = Some((k, w.len()));
            }
        }
        let (k, len) = best?;
        self.i += len;
        Some(k)
    }

    fn is_sep(c: u8) -> bool {
        matches!(c, b'-' | b'_' | b'.')
    }

    /// Tries `[sep] word [sep] [number]`; restores the cursor when `word` is absent.
    fn labelled(&mut self, words: &[&str]) -> Option<(usize, u64)> {
        let save = self.i;
        if self.peek().is_some_and(Self::is_sep) {
            self.i += 1;
        }
        let Some(k) = self.eat_word(words) else {
            self.i = save;
            return None;
        };
        let after_word = self.i;
        if self.peek().is_some_and(Self::is_sep) {
            self.i += 1;
        }
        match self.number() {
            Some(n) => Some((k, n)),
            None => {
                self.i = after_word;
                Some((k, 0))
            }
        }
    }

    fn parse(mut self) -> Option<Version> {
        if self.peek() == Some(b'v') {
            self.i += 1;
        }
        let first = self.number()?;
        let (epoch, mut release) = if self.peek() == Some(b'!') {
            self.i += 1;
            (first, vec![self.number()?])
        } else {
            (0, vec![first])
        };
        while self.peek() == Some(b'.')
            && self.s.get(self.i + 1).is_some_and(|c| c.is_ascii_digit())
        {
            self.i += 1;
            release.push(self.number()?);
        }
        let pre = self
            .labelled(&["a", "alpha", "b", "beta", "c", "rc", "pre", "preview"])
            .map(|(k, n)| {
                let kind = match k {
                    0 | 1 => PreKind::Alpha,
                    2 | 3 => PreKind::Beta,
                    _ => PreKind::Rc,
                };
                (kind, n)
            });
        let mut post = self.labelled(&["post", "rev", "r"]).map(|(_, n)| n);
        if post.is_none()
            && self.peek() == Some(b'-')
            && self.s.get(self.i + 1).is_some_and(|c| c.is_ascii_digit())
        {
            self.i += 1;
            post = Some(self.number()?);
        }
        let dev = self.labelled(&["dev"]).map(|(_, n)| n);
        let mut local = Vec::new();
        if self.peek() == Some(b'+') {
            self.i += 1;
            let rest = std::str::from_utf8(&self.s[self.i..]).ok()?;
            for seg in rest.split(['.', '-', '_']) {
                if seg.is_empty() || !seg.bytes().all(|c| c.is_ascii_alphanumeric()) {
                    return None;
                }
                local.push(match seg.parse::<u64>() {
                    Ok(n) if seg.bytes().all(|c| c.is_ascii_digit()) => LocalSegment::Number(n),
                    _ => LocalSegment::Text(seg.to_string()),
                });
            }
            self.i = self.s.len();
        }
        if self.i != self.s.len() {
            return None;
        }
        Some(Version {
            epoch,
            release,
            pre,
            post,
            dev,
            local,
        })
    }
}

/// A specifier's comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `==` (a trailing `.*` makes it a prefix match).
    Equal,
    /// `!=` (a trailing `.*` makes it a prefix exclusion).
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    /// `~=`
    Compatible,
    /// `===`: string equality.
    Arbitrary,
}

impl Operator {
    fn as_str(self) -> &'static str {
        match self {
            Operator::Equal => "==",
            Operator::NotEqual => "!=",
            Operator::Less => "<",
            Operator::LessEqual => "<=",
            Operator::Greater => ">",
            Operator::GreaterEqual => ">=",
            Operator::Compatible => "~=",
            Operator::Arbitrary => "===",
        }
    }

    /// Splits the leading operator off `text`.
    fn split(text: &str) -> Option<(Operator, &str)> {
        for (token, op) in [
            ("===", Operator::Arbitrary),
            ("~=", Operator::Compatible),
            ("==", Operator::Equal),
            ("!=", Operator::NotEqual),
            ("<=", Operator::LessEqual),
            (">=", Operator::GreaterEqual),
            ("<", Operator::Less),
            (">", Operator::Greater),
        ] {
            if let Some(rest) = text.strip_prefix(token) {
                return Some((op, rest));
            }
        }
        None
    }
}

/// One PEP 440 version specifier (`>=1.2`, `==1.*`, `~=2.2.0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Specifier {
    pub operator: Operator,
    /// The version as written (without `.*`).
    pub raw: String,
    /// The parsed version (`None` only for `===` of a non-PEP 440 string).
    pub version: Option<Version>,
    /// `==V.*` or `!=V.*`.
    pub wildcard: bool,
}

impl Specifier {
    /// Parses one specifier (`>= 1.0`, `==2.*`, `===foobar`).
    pub fn parse(text: &str) -> Result<Specifier, PypiError> {
        let trimmed = text.trim();
        let bad = |why: &str| {
            invalid(format!(
                "`{trimmed}` is not a valid version specifier: {why}"
            ))
        };
        let (operator, rest) =
            Operator::split(trimmed).ok_or_else(|| bad("it has no comparison operator"))?;
        let rest = rest.trim();
        if rest.is_empty() {
            return Err(bad("it has no version"));
        }
        if operator == Operator::Arbitrary {
            return Ok(Specifier {
                operator,
                raw: rest.to_string(),
                version: Version::parse(rest).ok(),
                wildcard: false,
            });
        }
        let (raw, wildcard) = match rest.strip_suffix(".*") {
            Some(prefix) => (prefix, true),
            None => (rest, false),
        };
        if wildcard && !matches!(operator, Operator::Equal | Operator::NotEqual) {
            return Err(bad("`.*` is only allowed with `==` and `!=`"));
        }
        let version = Version::parse(raw).map_err(|_| bad("its version is not PEP 440"))?;
        if wildcard && (!version.local.is_empty() || version.dev.is_some()) {
            return Err(bad(
                "a `.*` prefix cannot have a local label or dev release",
            ));
        }
        if !version.local.is_empty() && !matches!(operator, Operator::Equal | Operator::NotEqual) {
            return Err(bad("only `==` and `!=` may name a local version"));
        }
        if operator == Operator::Compatible && version.release.len() < 2 {
            return Err(bad("`~=` needs at least two release components"));
        }
        Ok(Specifier {
            operator,
            raw: raw.to_string(),
            version: Some(version),
            wildcard,
        })
    }

    /// Whether this specifier names a pre-release (then it admits pre-releases).
    pub fn names_prerelease(&self) -> bool {
        matches!(
            self.operator,
            Operator::Equal
                | Operator::LessEqual
                | Operator::GreaterEqual
                | Operator::Compatible
                | Operator::Arbitrary
        ) && self.version.as_ref().is_some_and(Version::is_prerelease)
    }

    /// Whether `candidate` satisfies this specifier (pre-releases are not filtered here:
    /// [`SpecifierSet::contains`] does that).
    pub fn matches(&self, candidate: &Version) -> bool {
        let Some(spec) = &self.version else {
            // `===` of a string that is not a version: only that exact string.
            return candidate.to_string().eq_ignore_ascii_case(&self.raw);
        };
        match self.operator {
            Operator::Arbitrary => candidate.to_string().eq_ignore_ascii_case(&self.raw),
            Operator::Equal => self.equal(spec, candidate),
            Operator::NotEqual => !self.equal(spec, candidate),
            Operator::LessEqual => candidate.public() <= *spec,
            Operator::GreaterEqual => candidate.public() >= *spec,
            Operator::Less => {
                candidate.public() < *spec
                    && !(!spec.is_prerelease()
                        && candidate.is_prerelease()
                        && candidate.base() == spec.base())
            }
            Operator::Greater => {
                candidate.public() > *spec
                    && !(!spec.is_postrelease()
                        && candidate.is_postrelease()
                        && candidate.base() == spec.base())
            }
            Operator::Compatible => {
                let prefix = &spec.release[..spec.release.len() - 1];
                candidate.public() >= *spec && prefix_matches(spec.epoch, prefix, candidate)
            }
        }
    }

    fn equal(&self, spec: &Version, candidate: &Version) -> bool {
        if self.wildcard {
            if candidate.epoch != spec.epoch {
                return false;
            }
            if spec.pre.is_some() || spec.post.is_some() {
                // `==1.0rc1.*`, `==1.0.post1.*`: the release must be equal and the
                // pre/post parts too (then any dev release of it).
                return prefix_matches(spec.epoch, &spec.release, candidate)
                    && candidate.release_trimmed() == spec.release_trimmed()
                    && candidate.pre == spec.pre
                    && candidate.post == spec.post;
            }
            return prefix_matches(spec.epoch, &spec.release, candidate);
        }
        if spec.local.is_empty() {
            candidate.public() == *spec
        } else {
            candidate == spec
        }
    }
}

/// Whether `candidate`'s release (padded with zeros) starts with `prefix`.
fn prefix_matches(epoch: u64, prefix: &[u64], candidate: &Version) -> bool {
    candidate.epoch == epoch
        && prefix
            .iter()
            .enumerate()
            .all(|(i, p)| candidate.release.get(i).copied().unwrap_or(0) == *p)
}

impl fmt::Display for Specifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.operator.as_str(), self.raw)?;
        if self.wildcard {
            f.write_str(".*")?;
        }
        Ok(())
    }
}

/// A comma-separated conjunction of specifiers; empty means any version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecifierSet(pub Vec<Specifier>);

impl SpecifierSet {
    /// Parses `>=1.0, <2, !=1.5.*` (empty text: any version).
    pub fn parse(text: &str) -> Result<SpecifierSet, PypiError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(SpecifierSet::default());
        }
        text.split(',')
            .map(Specifier::parse)
            .collect::<Result<Vec<_>, _>>()
            .map(SpecifierSet)
    }

    /// No specifier at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether one of the specifiers names a pre-release (then the set admits them).
    pub fn names_prerelease(&self) -> bool {
        self.0.iter().any(Specifier::names_prerelease)
    }

    /// Whether `v` satisfies every specifier; a pre-release only when a specifier names one.
    pub fn contains(&self, v: &Version) -> bool {
        self.contains_with(v, false)
    }

    /// Whether `v` satisfies every specifier, pre-releases admitted when `prereleases` is true
    /// or a specifier names one.
    pub fn contains_with(&self, v: &Version, prereleases: bool) -> bool {
        if v.is_prerelease() && !prereleases && !self.names_prerelease() {
            return false;
        }
        self.0.iter().all(|s| s.matches(v))
    }

    /// Both sets at once.
    pub fn and(&self, other: &SpecifierSet) -> SpecifierSet {
        let mut all = self.0.clone();
        all.extend(other.0.iter().cloned());
        SpecifierSet(all)
    }
}

impl fmt::Display for SpecifierSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for SpecifierSet {
    type Err = PypiError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpecifierSet::parse(s)
    }
}

/// The values markers are evaluated against (`python_version`, `sys_platform`, `extra`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkerEnv {
    values: BTreeMap<String, String>,
}

impl MarkerEnv {
    /// An environment with no value (every variable reads as the empty string).
    pub fn new() -> MarkerEnv {
        MarkerEnv::default()
    }

    /// Sets one variable.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.values.insert(name.to_string(), value.into());
    }

    /// The same environment with `extra` set (`""`: no extra).
    pub fn with_extra(&self, extra: &str) -> MarkerEnv {
        let mut env = self.clone();
        env.set("extra", extra);
        env
    }

    /// A variable's value (`""` when unset).
    pub fn get(&self, name: &str) -> &str {
        self.values.get(name).map(String::as_str).unwrap_or("")
    }
}

/// The marker variables of PEP 508 (the dotted spellings of PEP 345 map onto them).
const MARKER_VARIABLES: &[&str] = &[
    "python_version",
    "python_full_version",
    "os_name",
    "sys_platform",
    "platform_release",
    "platform_system",
    "platform_version",
    "platform_machine",
    "platform_python_implementation",
    "implementation_name",
    "implementation_version",
    "extra",
];

fn canonical_variable(word: &str) -> Option<&'static str> {
    let mapped = match word {
        "os.name" => "os_name",
        "sys.platform" => "sys_platform",
        "platform.version" => "platform_version",
        "platform.machine" => "platform_machine",
        "platform.python_implementation" | "python_implementation" => {
            "platform_python_implementation"
        }
        other => other,
    };
    MARKER_VARIABLES.iter().copied().find(|v| *v == mapped)
}

/// One side of a marker comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkerValue {
    Variable(&'static str),
    Literal(String),
}

/// A marker comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerOp {
    Version(Operator),
    In,
    NotIn,
}

/// A parsed PEP 508 environment marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Marker {
    Compare(MarkerValue, MarkerOp, MarkerValue),
    And(Box<Marker>, Box<Marker>),
    Or(Box<Marker>, Box<Marker>),
}

impl Marker {
    /// Parses a marker expression (`python_version >= "3.8" and extra == 'cli'`).
    pub fn parse(text: &str) -> Result<Marker, PypiError> {
        let mut p = MarkerParser {
            text,
            s: text.as_bytes(),
            i: 0,
        };
        let m = p.or()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(p.error("unexpected text"));
        }
        Ok(m)
    }

    /// Evaluates the marker in `env`.
    pub fn evaluate(&self, env: &MarkerEnv) -> bool {
        match self {
            Marker::And(a, b) => a.evaluate(env) && b.evaluate(env),
            Marker::Or(a, b) => a.evaluate(env) || b.evaluate(env),
            Marker::Compare(l, op, r) => {
                let is_extra = matches!(l, MarkerValue::Variable("extra"))
                    || matches!(r, MarkerValue::Variable("extra"));
                let value = |v: &MarkerValue| match v {
                    MarkerValue::Variable(name) => env.get(name).to_string(),
                    MarkerValue::Literal(s) => s.clone(),
                };
                let (mut lv, mut rv) = (value(l), value(r));
                if is_extra {
                    lv = normalize_name(&lv);
                    rv = normalize_name(&rv);
                }
                compare(&lv, *op, &rv)
            }
        }
    }
}

/// Version semantics when both sides are versions (pre-releases admitted), string semantics
/// otherwise.
fn compare(l: &str, op: MarkerOp, r: &str) -> bool {
    let op = match op {
        MarkerOp::In => return r.contains(l),
        MarkerOp::NotIn => return !r.contains(l),
        MarkerOp::Version(op) => op,
    };
    if op != Operator::Arbitrary
        && let Ok(lv) = Version::parse(l)
        && let Ok(spec) = Specifier::parse(&format!("{}{}", op.as_str(), r))
    {
        return spec.matches(&lv);
    }
    match op {
        Operator::Equal | Operator::Arbitrary => l == r,
        Operator::NotEqual => l != r,
        Operator::Less => l < r,
        Operator::LessEqual => l <= r,
        Operator::Greater => l > r,
        Operator::GreaterEqual => l >= r,
        Operator::Compatible => false,
    }
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = |v: &MarkerValue| match v {
            MarkerValue::Variable(n) => n.to_string(),
            MarkerValue::Literal(s) if s.contains('"') => format!("'{s}'"),
            MarkerValue::Literal(s) => format!("\"{s}\""),
        };
        match self {
            Marker::Compare(l, op, r) => {
                let op = match op {
                    MarkerOp::Version(o) => o.as_str(),
                    MarkerOp::In => "in",
                    MarkerOp::NotIn => "not in",
                };
                write!(f, "{} {op} {}", value(l), value(r))
            }
            Marker::And(a, b) => {
                let side = |m: &Marker| match m {
                    Marker::Or(..) => format!("({m})"),
                    _ => m.to_string(),
                };
                write!(f, "{} and {}", side(a), side(b))
            }
            Marker::Or(a, b) => write!(f, "{a} or {b}"),
        }
    }
}

struct MarkerParser<'a> {
    text: &'a str,
    s: &'a [u8],
    i: usize,
}

impl MarkerParser<'_> {
    fn error(&self, why: &str) -> PypiError {
        invalid(format!(
            "`{}` is not a valid environment marker: {why} at offset {}",
            self.text, self.i
        ))
    }

    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    /// Eats the keyword `word` when it stands alone.
    fn keyword(&mut self, word: &str) -> bool {
        self.ws();
        let end = self.i + word.len();
        if self.s.get(self.i..end) == Some(word.as_bytes())
            && !self
                .s
                .get(end)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.')
        {
            self.i = end;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<Marker, PypiError> {
        let mut left = self.and()?;
        while self.keyword("or") {
            let right = self.and()?;
            left = Marker::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Marker, PypiError> {
        let mut left = self.atom()?;
        while self.keyword("and") {
            let right = self.atom()?;
            left = Marker::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn atom(&mut self) -> Result<Marker, PypiError> {
        self.ws();
        if self.s.get(self.i) == Some(&b'(') {
            self.i += 1;
            let m = self.or()?;
            self.ws();
            if self.s.get(self.i) != Some(&b')') {
                return Err(self.error("expected `)`"));
            }
            self.i += 1;
            return Ok(m);
        }
        let left = self.value()?;
        let op = self.op()?;
        let right = self.value()?;
        Ok(Marker::Compare(left, op, right))
    }

    fn value(&mut self) -> Result<MarkerValue, PypiError> {
        self.ws();
        match self.s.get(self.i) {
            Some(&q) if q == b'"' || q == b'\'' => {
                let start = self.i + 1;
                let len = self.s[start..]
                    .iter()
                    .position(|&c| c == q)
                    .ok_or_else(|| self.error("unterminated string"))?;
                self.i = start + len + 1;
                Ok(MarkerValue::Literal(
                    self.text[start..start + len].to_string(),
                ))
            }
            _ => {
                let start = self.i;
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'.')
                {
                    self.i += 1;
                }
                let word = &self.text[start..self.i];
                if word.is_empty() {
                    return Err(self.error("expected a marker variable or a quoted string"));
                }
                canonical_variable(word)
                    .map(MarkerValue::Variable)
                    .ok_or_else(|| {
                        self.i = start;
                        self.error(&format!("unknown marker variable `{word}`"))
                    })
            }
        }
    }

    fn op(&mut self) -> Result<MarkerOp, PypiError> {
        self.ws();
        if self.keyword("in") {
            return Ok(MarkerOp::In);
        }
        let save = self.i;
        if self.keyword("not") {
            if self.keyword("in") {
                return Ok(MarkerOp::NotIn);
            }
            self.i = save;
            return Err(self.error("expected `in` after `not`"));
        }
        let rest = &self.text[self.i..];
        match Operator::split(rest) {
            Some((op, after)) => {
                self.i += rest.len() - after.len();
                Ok(MarkerOp::Version(op))
            }
            None => Err(self.error("expected a comparison operator")),
        }
    }
}

/// A PEP 508 dependency specification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// As written.
    pub name: String,
    /// Normalized (PEP 503), sorted, deduplicated.
    pub extras: Vec<String>,
    pub specifiers: SpecifierSet,
    /// `name @ url`.
    pub url: Option<String>,
    pub marker: Option<Marker>,
}

impl Requirement {
    /// Parses `name[extras] (specifiers) ; marker` (parentheses optional) or
    /// `name[extras] @ url ; marker`.
    pub fn parse(text: &str) -> Result<Requirement, PypiError> {
        let bad = |why: &str| {
            invalid(format!(
                "`{}` is not a valid requirement: {why}",
                text.trim()
            ))
        };
        let s = text.trim();
        let name_end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(s.len());
        let name = &s[..name_end];
        if !is_valid_name(name) {
            return Err(bad("it does not start with a valid project name"));
        }
        let mut rest = s[name_end..].trim_start();
        let mut extras = Vec::new();
        if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']').ok_or_else(|| bad("unclosed `[`"))?;
            for extra in after[..close].split(',') {
                let extra = extra.trim();
                if extra.is_empty() {
                    continue;
                }
                if !is_valid_name(extra) {
                    return Err(bad(&format!("`{extra}` is not a valid extra")));
                }
                extras.push(normalize_name(extra));
            }
            extras.sort();
            extras.dedup();
            rest = after[close + 1..].trim_start();
        }
        let mut url = None;
        let mut specifiers = SpecifierSet::default();
        let marker_text;
        if let Some(after) = rest.strip_prefix('@') {
            let after = after.trim_start();
            // The URL ends at whitespace; a marker must be separated from it by whitespace.
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            if end == 0 {
                return Err(bad("`@` without a URL"));
            }
            url = Some(after[..end].to_string());
            let tail = after[end..].trim_start();
            marker_text = match tail.strip_prefix(';') {
                Some(m) => Some(m),
                None if tail.is_empty() => None,
                None => return Err(bad("unexpected text after the URL")),
            };
        } else {
            let (spec_part, marker_part) = match rest.find(';') {
                Some(k) => (&rest[..k], Some(&rest[k + 1..])),
                None => (rest, None),
            };
            let mut spec_part = spec_part.trim();
            if let Some(inner) = spec_part.strip_prefix('(') {
                spec_part = inner
                    .strip_suffix(')')
                    .ok_or_else(|| bad("unclosed `(`"))?
                    .trim();
            }
            specifiers = SpecifierSet::parse(spec_part)?;
            marker_text = marker_part;
        }
        let marker = match marker_text.map(str::trim) {
            Some("") => return Err(bad("`;` without a marker")),
            Some(m) => Some(Marker::parse(m)?),
            None => None,
        };
        Ok(Requirement {
            name: name.to_string(),
            extras,
            specifiers,
            url,
            marker,
        })
    }

    /// The PEP 503 name.
    pub fn normalized_name(&self) -> String {
        normalize_name(&self.name)
    }

    /// Whether the requirement applies in `env` (no marker: always).
    pub fn applies(&self, env: &MarkerEnv) -> bool {
        self.marker.as_ref().is_none_or(|m| m.evaluate(env))
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.extras.is_empty() {
            write!(f, "[{}]", self.extras.join(","))?;
        }
        if let Some(url) = &self.url {
            write!(f, " @ {url}")?;
            if self.marker.is_some() {
                f.write_str(" ")?;
            }
        } else if !self.specifiers.is_empty() {
            write!(f, "{}", self.specifiers)?;
        }
        if let Some(m) = &self.marker {
            write!(f, "; {m}")?;
        }
        Ok(())
    }
}

impl FromStr for Requirement {
    type Err = PypiError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Requirement::parse(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn set(s: &str) -> SpecifierSet {
        SpecifierSet::parse(s).unwrap()
    }

    #[test]
    fn names_normalize() {
        assert_eq!(normalize_name("Friendly-Bard"), "friendly-bard");
        assert_eq!(normalize_name("FRIENDLY__bard"), "friendly-bard");
        assert_eq!(normalize_name("friendly.-_bard"), "friendly-bard");
        assert_eq!(normalize_name("Zope.Interface"), "zope-interface");
        assert!(is_valid_name("a.b-c_d"));
        assert!(!is_valid_name("-a"));
        assert!(!is_valid_name(""));
    }

    #[test]
    fn versions_normalize() {
        for (input, normal) in [
            ("1.0", "1.0"),
            ("v1.0", "1.0"),
            ("1.0a1", "1.0a1"),
            ("1.0-alpha.1", "1.0a1"),
            ("1.0.BETA2", "1.0b2"),
            ("1.0c3", "1.0rc3"),
            ("1.0pre", "1.0rc0"),
            ("1.0preview4", "1.0rc4"),
            ("1.0-1", "1.0.post1"),
            ("1.0.rev2", "1.0.post2"),
            ("1.0r", "1.0.post0"),
            ("1.0_post_3", "1.0.post3"),
            ("1.0dev", "1.0.dev0"),
            ("1.0-dev-7", "1.0.dev7"),
            ("2!1.0.post1.dev2", "2!1.0.post1.dev2"),
            ("1.0+Ubuntu-1", "1.0+ubuntu.1"),
            ("1.0+abc_5.x", "1.0+abc.5.x"),
            ("  1.2.3  ", "1.2.3"),
            ("01.002", "1.2"),
        ] {
            assert_eq!(v(input).to_string(), normal, "{input}");
        }
        for bad in [
            "", "1.", "a1", "1.0+", "1.0+a..b", "1.0 2", "1.0-", "1!", "1.0a1b2",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Version::parse("x").unwrap_err().kind,
            PypiErrorKind::Invalid
        );
    }

    #[test]
    fn versions_order() {
        let ordered = [
            "1.0.dev456",
            "1.0a1",
            "1.0a2.dev456",
            "1.0a12.dev456",
            "1.0a12",
            "1.0b1.dev456",
            "1.0b2",
            "1.0b2.post345.dev456",
            "1.0b2.post345",
            "1.0rc1.dev456",
            "1.0rc1",
            "1.0",
            "1.0+abc.5",
            "1.0+abc.7",
            "1.0+5",
            "1.0.post456.dev34",
            "1.0.post456",
            "1.0.15",
            "1.1.dev1",
            "1!0.1",
        ];
        for pair in ordered.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(v("1.0"), v("1.0.0"));
        assert_eq!(v("1.0"), v("1"));
        assert!(v("1.0+a") < v("1.0+a.b"));
        assert!(v("1.0.0+1") > v("1.0"));
        assert!(v("1.0rc1").is_prerelease());
        assert!(v("1.0.dev1").is_prerelease());
        assert!(!v("1.0.post1").is_prerelease());
        assert!(v("1.0.post1").is_postrelease());
    }

    #[test]
    fn specifiers_match() {
        let cases: &[(&str, &str, bool)] = &[
            ("==1.0", "1.0.0", true),
            ("==1.0", "1.0+local", true),
            ("==1.0+local", "1.0", false),
            ("==1.0+local", "1.0+local", true),
            ("==1.*", "1.9.2", true),
            ("==1.*", "2.0", false),
            ("==1.0.*", "1.0", true),
            ("==1.0.*", "1.0.3.post1", true),
            ("==1.0.*", "1.1", false),
            ("!=1.0.*", "1.1", true),
            ("!=1.0", "1.0.0", false),
            ("<2", "1.9", true),
            ("<2", "2.0", false),
            ("<2.0", "2.0rc1", false),
            ("<2.0rc2", "2.0rc1", true),
            ("<=2", "2.0+x", true),
            (">1.7", "1.7.1", true),
            (">1.7", "1.7.post2", false),
            (">1.7.post2", "1.7.post3", true),
            (">1.7", "1.7+local", false),
            (">=1.7", "1.7", true),
            ("~=2.2", "2.3", true),
            ("~=2.2", "3.0", false),
            ("~=2.2.0", "2.2.5", true),
            ("~=2.2.0", "2.3", false),
            ("~=1.4.5a4", "1.4.5", true),
            ("~=1.4.5a4", "1.4.5a5", true),
            ("===1.0", "1.0", true),
            ("===1.0", "1.0.0", false),
            ("==1!1.0", "1.0", false),
            ("==1!1.*", "1!1.2", true),
        ];
        for (spec, candidate, expected) in cases {
            let s = Specifier::parse(spec).unwrap();
            assert_eq!(s.matches(&v(candidate)), *expected, "{spec} {candidate}");
        }
        for bad in [
            "1.0",
            "=1.0",
            ">=1.*",
            "~=1",
            "<1.0+local",
            "==",
            "== 1.0.*.*",
        ] {
            assert!(Specifier::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prereleases_only_when_named() {
        assert!(!set(">=1.0").contains(&v("2.0b1")));
        assert!(set(">=1.0").contains_with(&v("2.0b1"), true));
        assert!(set(">=2.0b1").contains(&v("2.0b2")));
        assert!(!set("").contains(&v("1.0.dev1")));
        assert!(set("").contains(&v("1.0")));
        assert!(set(">=1.0, <2, !=1.5.*").contains(&v("1.4")));
        assert!(!set(">=1.0, <2, !=1.5.*").contains(&v("1.5.1")));
        assert_eq!(set(">=1.0 , <2").to_string(), ">=1.0,<2");
    }

    #[test]
    fn requirements_parse() {
        let r = Requirement::parse(
            "Requests [Security, socks] (>=2.8.1, ==2.8.*) ; python_version < \"2.7\"",
        )
        .unwrap();
        assert_eq!(r.name, "Requests");
        assert_eq!(r.normalized_name(), "requests");
        assert_eq!(r.extras, vec!["security", "socks"]);
        assert_eq!(r.specifiers.to_string(), ">=2.8.1,==2.8.*");
        assert!(r.marker.is_some());
        let r = Requirement::parse("name>=3,<4").unwrap();
        assert_eq!(r.specifiers.0.len(), 2);
        assert!(r.marker.is_none());
        let r =
            Requirement::parse("pip @ https://example.com/pip.whl ; os_name == 'posix'").unwrap();
        assert_eq!(r.url.as_deref(), Some("https://example.com/pip.whl"));
        assert!(r.marker.is_some());
        let r = Requirement::parse("foo").unwrap();
        assert!(r.specifiers.is_empty());
        assert_eq!(
            Requirement::parse("a.b_c[x]>=1; extra == 'y'")
                .unwrap()
                .to_string(),
            "a.b_c[x]>=1; extra == \"y\""
        );
        for bad in [
            "",
            ">=1",
            "foo (>=1",
            "foo[bar",
            "foo; ",
            "foo >=1 ; bogus == '1'",
            "foo @",
        ] {
            assert!(Requirement::parse(bad).is_err(), "{bad}");
        }
    }

    fn env() -> MarkerEnv {
        let mut e = MarkerEnv::new();
        e.set("python_version", "3.11");
        e.set("python_full_version", "3.11.7");
        e.set("os_name", "posix");
        e.set("sys_platform", "linux");
        e.set("platform_machine", "x86_64");
        e.set("platform_system", "Linux");
        e.set("implementation_name", "cpython");
        e.set("platform_python_implementation", "CPython");
        e
    }

    #[test]
    fn markers_evaluate() {
        let e = env();
        let eval = |m: &str| Marker::parse(m).unwrap().evaluate(&e);
        assert!(eval("python_version >= '3.8'"));
        assert!(
            eval("python_version > '3.9'"),
            "versions, not strings: 3.11 > 3.9"
        );
        assert!(!eval("python_version < \"3.10\""));
        assert!(eval(
            "python_full_version >= '3.11.0' and python_full_version < '3.12'"
        ));
        assert!(eval("python_version ~= '3.8'"));
        assert!(eval(
            "sys_platform == 'linux' and (os_name == 'nt' or platform_machine == 'x86_64')"
        ));
        assert!(!eval("sys_platform == 'win32' or os_name == 'nt'"));
        assert!(eval("'linux' in sys_platform"));
        assert!(eval("sys_platform not in 'win32 cygwin'"));
        assert!(eval("platform_system != 'Windows'"));
        assert!(eval("implementation_name == \"cpython\""));
        assert!(eval("platform.python_implementation == 'CPython'"));
        assert!(eval("os_name < 'qq'"), "string comparison");
        assert!(!eval("extra == 'cli'"));
        assert!(
            Marker::parse("extra == 'CLI_tools'")
                .unwrap()
                .evaluate(&e.with_extra("cli-tools"))
        );
        assert!(eval(
            "python_version >= '3' and python_version < '4' or extra == 'x'"
        ));
        assert!(!eval(
            "extra == 'x' and python_version >= '3' or sys_platform == 'x'"
        ));
        for bad in [
            "",
            "python_version",
            "python_version >= ",
            "foo == 'x'",
            "(os_name == 'x'",
            "os_name not 'x'",
            "os_name == 'x' and",
        ] {
            assert!(Marker::parse(bad).is_err(), "{bad}");
        }
    }
}
