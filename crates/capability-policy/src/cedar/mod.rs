//! Cedar policy files as the declarative source of governance policies.
//!
//! See the crate documentation ("The Cedar contract") for the entity, action and context
//! shapes, the annotations, and how Cedar's permit/forbid combine with the nine decisions.
//!
//! * [`CedarPolicies::from_paths`] / [`CedarPolicies::from_sources`] load files (directories
//!   are expanded to their `*.cedar` files, sorted) and parse them once.
//! * [`CedarPolicies`] implements [`crate::engine::PolicySource`]; add it to a
//!   [`crate::engine::PolicyEngine`].
//! * [`validate_sources`] / [`validate_paths`] report problems as [`Diagnostic`]s that name
//!   file, line and column, optionally checking against a schema from [`schema`].

mod eval;
mod fast;
pub mod schema;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use cedar_policy::{
    ActionConstraint, Effect, Policy, PolicyId, PolicySet, ResourceConstraint, ValidationMode,
    Validator,
};
use miette::Diagnostic as _;

use crate::decision::{DecisionType, IsolationTier, SandboxRequirement};
use crate::pointer::{self, Mutation};

pub use eval::{CedarPolicies, applies_at};
pub use schema::{GeneratedSchema, SchemaOptions, generate_schema, parse_schema};

/// The Cedar entity type of agents.
pub const AGENT_TYPE: &str = "Agent";
/// The Cedar entity type of capabilities.
pub const CAPABILITY_TYPE: &str = "Capability";
/// The Cedar entity type of actions.
pub const ACTION_TYPE: &str = "Action";

/// How serious a [`Diagnostic`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// A problem in a policy file, located by file, line and column (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub severity: Severity,
    pub message: String,
    /// The policy concerned, when known.
    pub policy_id: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.column, self.severity, self.message
        )
    }
}

/// Failures loading or checking Cedar policies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CedarError {
    /// A file or directory could not be read.
    #[error("cannot read `{path}`: {message}")]
    Io { path: String, message: String },
    /// The policy files have errors.
    #[error("{}", render_diagnostics(.diagnostics))]
    Invalid { diagnostics: Vec<Diagnostic> },
    /// A schema could not be built or parsed.
    #[error("invalid cedar schema: {message}")]
    Schema { message: String },
}

fn render_diagnostics(d: &[Diagnostic]) -> String {
    let errors: Vec<String> = d
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect();
    match errors.len() {
        0 => "policy files are invalid".to_string(),
        1 => errors.join(""),
        n => format!("{n} errors in policy files:\n{}", errors.join("\n")),
    }
}

/// One policy file's text and the name it is reported under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFile {
    pub name: String,
    pub text: String,
}

impl PolicyFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        PolicyFile {
            name: name.into(),
            text: text.into(),
        }
    }
}

/// Reads the given files; directories contribute their `*.cedar` files, sorted by name.
pub fn read_paths<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<PolicyFile>, CedarError> {
    let io = |p: &Path, e: std::io::Error| CedarError::Io {
        path: p.display().to_string(),
        message: e.to_string().to_lowercase(),
    };
    let mut files = Vec::new();
    for p in paths {
        let p = p.as_ref();
        if p.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(p)
                .map_err(|e| io(p, e))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|e| e.extension().is_some_and(|x| x == "cedar") && e.is_file())
                .collect();
            entries.sort();
            for e in entries {
                let text = std::fs::read_to_string(&e).map_err(|err| io(&e, err))?;
                files.push(PolicyFile::new(e.display().to_string(), text));
            }
        } else {
            let text = std::fs::read_to_string(p).map_err(|e| io(p, e))?;
            files.push(PolicyFile::new(p.display().to_string(), text));
        }
    }
    Ok(files)
}

/// Permit or forbid, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleEffect {
    Permit,
    Forbid,
}

/// A loaded Cedar policy with its governance meaning (from its annotations).
#[derive(Clone, Debug, PartialEq)]
pub struct CedarRule {
    /// `@id("...")`, else `<file>:<line>`.
    pub id: String,
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub effect: RuleEffect,
    /// `@decision`, else `allow` for permit and `deny` for forbid.
    pub decision: DecisionType,
    pub reason: Option<String>,
    pub code: Option<String>,
    pub version: Option<String>,
    /// `@priority("n")`, default 0; lower runs first.
    pub priority: i64,
    pub redact: Vec<String>,
    pub mutations: Vec<Mutation>,
    /// `@disableSideEffects("send_message, ...")` (or `"*"`): transform_input that switches
    /// off the capability's disableable side effects of those types.
    pub disable_side_effects: Option<Vec<String>>,
    pub route_to: Option<String>,
    pub sandbox: Option<SandboxRequirement>,
    /// Whether the policy takes part in Cedar's authorization (a permit grants, a forbid
    /// denies). Annotated forbids and `log_only` policies only yield their decision.
    pub authorizes: bool,
    /// Action ids the scope allows (`None`: any).
    pub(crate) actions: Option<Vec<String>>,
    /// Resource id the scope requires (`None`: any).
    pub(crate) resource: Option<String>,
    /// The scope can never match (wrong entity types).
    pub(crate) never: bool,
}

/// Line and column (1-based, columns in characters) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let upto = &text[..floor_char_boundary(text, offset.min(text.len()))];
    let line = upto.matches('\n').count() + 1;
    let col = upto.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn diag_at(
    file: &PolicyFile,
    offset: usize,
    message: String,
    policy_id: Option<String>,
) -> Diagnostic {
    let (line, column) = line_col(&file.text, offset);
    Diagnostic {
        file: file.name.clone(),
        line,
        column,
        severity: Severity::Error,
        message,
        policy_id,
    }
}

fn first_label_offset(d: &dyn miette::Diagnostic) -> Option<usize> {
    d.labels().and_then(|mut l| l.next()).map(|l| l.offset())
}

/// A parsed policy with where it was found.
struct Parsed {
    policy: Policy,
    file: usize,
    offset: usize,
}

/// Parses each file; returns the policies (ids still Cedar's) and the parse diagnostics.
fn parse_files(files: &[PolicyFile]) -> (Vec<Parsed>, Vec<Diagnostic>) {
    let mut out = Vec::new();
    let mut diags = Vec::new();
    for (fi, file) in files.iter().enumerate() {
        match PolicySet::from_str(&file.text) {
            Err(errors) => {
                for e in errors.iter() {
                    let offset = first_label_offset(e).unwrap_or(0);
                    diags.push(diag_at(file, offset, e.to_string(), None));
                }
            }
            Ok(set) => {
                for t in set.templates() {
                    let text = t.to_string();
                    let offset = file.text.find(&text).unwrap_or(0);
                    diags.push(diag_at(
                        file,
                        offset,
                        "templates (policies with `?principal` or `?resource` slots) are not supported".into(),
                        None,
                    ));
                }
                let mut policies: Vec<(usize, Policy)> = set
                    .policies()
                    .map(|p| {
                        let n = p
                            .id()
                            .to_string()
                            .trim_start_matches("policy")
                            .parse::<usize>()
                            .unwrap_or(usize::MAX);
                        (n, p.clone())
                    })
                    .collect();
                policies.sort_by_key(|(n, _)| *n);
                let mut cursor = 0usize;
                for (_, policy) in policies {
                    let text = policy.to_string();
                    let offset = match file.text[cursor..].find(&text) {
                        Some(i) => cursor + i,
                        None => cursor,
                    };
                    cursor = offset + text.len().min(file.text.len() - offset);
                    // Point at the `permit`/`forbid` keyword rather than the first annotation.
                    let keyword = keyword_offset(&file.text, offset, &text);
                    out.push(Parsed {
                        policy,
                        file: fi,
                        offset: keyword,
                    });
                }
            }
        }
    }
    (out, diags)
}

fn keyword_offset(text: &str, start: usize, policy_text: &str) -> usize {
    let end = (start + policy_text.len()).min(text.len());
    let slice = &text[start..end];
    let mut best: Option<usize> = None;
    for kw in ["permit", "forbid"] {
        let mut from = 0;
        while let Some(i) = slice[from..].find(kw) {
            let at = from + i;
            // Skip occurrences inside annotation strings: take the first one followed by `(`.
            let rest = slice[at + kw.len()..].trim_start();
            if rest.starts_with('(') {
                best = Some(best.map_or(at, |b: usize| b.min(at)));
                break;
            }
            from = at + kw.len();
        }
    }
    start + best.unwrap_or(0)
}

/// The annotations this crate gives meaning to.
pub const KNOWN_ANNOTATIONS: [&str; 14] = [
    "id",
    "decision",
    "reason",
    "code",
    "version",
    "priority",
    "redact",
    "mutations",
    "disableSideEffects",
    "route",
    "sandbox",
    "network",
    "timeoutMs",
    "memoryMb",
];

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// Reads a policy's annotations into a rule (errors are messages for a diagnostic).
fn rule_from(policy: &Policy, file: &str, line: usize, column: usize) -> Result<CedarRule, String> {
    let ann = |k: &str| policy.annotation(k).map(str::to_string);
    let effect = match policy.effect() {
        Effect::Permit => RuleEffect::Permit,
        Effect::Forbid => RuleEffect::Forbid,
    };
    let decision = match policy.annotation("decision") {
        Some(d) => DecisionType::parse(d).map_err(|e| format!("@decision: {e}"))?,
        None => match effect {
            RuleEffect::Permit => DecisionType::Allow,
            RuleEffect::Forbid => DecisionType::Deny,
        },
    };
    match (effect, decision) {
        (RuleEffect::Permit, DecisionType::Deny) => {
            return Err("@decision(\"deny\") on a permit: write `forbid` instead".into());
        }
        (RuleEffect::Forbid, DecisionType::Allow) => {
            return Err("@decision(\"allow\") on a forbid: write `permit` instead".into());
        }
        _ => {}
    }
    let priority = match policy.annotation("priority") {
        Some(p) => p
            .trim()
            .parse::<i64>()
            .map_err(|_| format!("@priority must be an integer, found `{p}`"))?,
        None => 0,
    };
    let redact = ann("redact").map(|s| list(&s)).unwrap_or_default();
    for p in &redact {
        pointer::parse(p).map_err(|e| format!("@redact: {e}"))?;
    }
    let mutations = match policy.annotation("mutations") {
        Some(m) => {
            let v = capability_core::json::parse_str(m).map_err(|e| format!("@mutations: {e}"))?;
            Mutation::list_from_json(&v).map_err(|e| format!("@mutations: {e}"))?
        }
        None => Vec::new(),
    };
    let disable_side_effects = ann("disableSideEffects").map(|s| {
        let l = list(&s);
        if l.iter().any(|x| x == "*") {
            Vec::new()
        } else {
            l
        }
    });
    let route_to = ann("route").map(|s| s.trim().to_string());
    let mut sandbox = None;
    if let Some(t) = policy.annotation("sandbox") {
        let tier = IsolationTier::parse(t.trim()).map_err(|e| format!("@sandbox: {e}"))?;
        sandbox = Some(SandboxRequirement::tier(tier));
    }
    if let Some(n) = policy.annotation("network") {
        let deny = match n.trim() {
            "off" | "deny" | "none" => true,
            "on" | "allow" => false,
            other => return Err(format!("@network must be `off` or `on`, found `{other}`")),
        };
        sandbox
            .get_or_insert_with(SandboxRequirement::default)
            .deny_network = deny;
    }
    for (key, slot) in [("timeoutMs", 0usize), ("memoryMb", 1usize)] {
        if let Some(v) = policy.annotation(key) {
            let n = v
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("@{key} must be a non-negative integer, found `{v}`"))?;
            let req = sandbox.get_or_insert_with(SandboxRequirement::default);
            if slot == 0 {
                req.timeout_ms = Some(n);
            } else {
                req.memory_mb = Some(n);
            }
        }
    }
    let needs = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("@decision(\"{decision}\") needs {what}"))
        }
    };
    match decision {
        DecisionType::Redact => needs(!redact.is_empty(), "@redact(\"/pointer, ...\")")?,
        DecisionType::TransformInput => needs(
            !mutations.is_empty() || disable_side_effects.is_some(),
            "@mutations(\"[...]\") or @disableSideEffects(\"...\")",
        )?,
        DecisionType::TransformOutput => needs(!mutations.is_empty(), "@mutations(\"[...]\")")?,
        DecisionType::Route => needs(
            route_to.as_deref().is_some_and(|r| !r.is_empty()),
            "@route(\"capability\")",
        )?,
        DecisionType::Sandbox => needs(
            sandbox.is_some(),
            "@sandbox(\"tier\"), @network, @timeoutMs or @memoryMb",
        )?,
        _ => {}
    }
    let authorizes = match decision {
        DecisionType::LogOnly => false,
        _ => effect == RuleEffect::Permit || decision == DecisionType::Deny,
    };
    let (actions, resource, never) = scope_of(policy);
    Ok(CedarRule {
        id: ann("id").unwrap_or_else(|| format!("{file}:{line}")),
        file: file.to_string(),
        line,
        column,
        effect,
        decision,
        reason: ann("reason"),
        code: ann("code"),
        version: ann("version"),
        priority,
        redact,
        mutations,
        disable_side_effects,
        route_to,
        sandbox,
        authorizes,
        actions,
        resource,
        never,
    })
}

/// The action ids and resource id a policy's scope is limited to.
fn scope_of(policy: &Policy) -> (Option<Vec<String>>, Option<String>, bool) {
    let mut never = false;
    let action_id = |uid: &cedar_policy::EntityUid, never: &mut bool| {
        if uid.type_name().to_string() != ACTION_TYPE {
            *never = true;
        }
        uid.id().unescaped().to_string()
    };
    let actions = match policy.action_constraint() {
        ActionConstraint::Any => None,
        ActionConstraint::Eq(uid) => Some(vec![action_id(&uid, &mut never)]),
        ActionConstraint::In(uids) => {
            let ids: Vec<String> = uids
                .iter()
                .filter(|u| u.type_name().to_string() == ACTION_TYPE)
                .map(|u| u.id().unescaped().to_string())
                .collect();
            if ids.is_empty() {
                never = true;
            }
            Some(ids)
        }
    };
    let resource = match policy.resource_constraint() {
        ResourceConstraint::Any => None,
        ResourceConstraint::Is(t) => {
            if t.to_string() != CAPABILITY_TYPE {
                never = true;
            }
            None
        }
        ResourceConstraint::Eq(uid)
        | ResourceConstraint::In(uid)
        | ResourceConstraint::IsIn(_, uid) => {
            if uid.type_name().to_string() != CAPABILITY_TYPE {
                never = true;
            }
            Some(uid.id().unescaped().to_string())
        }
    };
    (actions, resource, never)
}

/// Loaded, checked policies: rules in load order, each policy renamed to its rule id.
pub(crate) struct Loaded {
    pub rules: Vec<CedarRule>,
    pub policies: Vec<Policy>,
}

/// Parses files, reads annotations, renames policies to their rule ids. Errors are
/// diagnostics.
pub(crate) fn load(files: &[PolicyFile]) -> Result<Loaded, Vec<Diagnostic>> {
    let (parsed, mut diags) = parse_files(files);
    let mut rules = Vec::new();
    let mut policies = Vec::new();
    let mut seen: HashMap<String, (String, usize)> = HashMap::new();
    for p in parsed {
        let file = &files[p.file];
        let (line, column) = line_col(&file.text, p.offset);
        match rule_from(&p.policy, &file.name, line, column) {
            Err(message) => diags.push(diag_at(file, p.offset, message, None)),
            Ok(rule) => {
                if let Some((f, l)) = seen.get(&rule.id) {
                    diags.push(diag_at(
                        file,
                        p.offset,
                        format!("duplicate policy id `{}` (first used at {f}:{l})", rule.id),
                        Some(rule.id.clone()),
                    ));
                    continue;
                }
                let id = match PolicyId::from_str(&rule.id) {
                    Ok(id) => id,
                    Err(e) => match e {},
                };
                seen.insert(rule.id.clone(), (file.name.clone(), line));
                policies.push(p.policy.new_id(id));
                rules.push(rule);
            }
        }
    }
    if diags.iter().any(|d| d.severity == Severity::Error) {
        sort_diagnostics(&mut diags);
        return Err(diags);
    }
    Ok(Loaded { rules, policies })
}

/// What [`validate_sources`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationReport {
    /// Number of policies read.
    pub policies: usize,
    pub diagnostics: Vec<Diagnostic>,
}

impl ValidationReport {
    /// No error (warnings allowed).
    pub fn is_ok(&self) -> bool {
        !self
            .diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// One line per diagnostic, then a summary line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for d in &self.diagnostics {
            out.push_str(&d.to_string());
            out.push('\n');
        }
        let errors = self
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        let warnings = self.diagnostics.len() - errors;
        out.push_str(&format!(
            "{} policies, {errors} errors, {warnings} warnings\n",
            self.policies
        ));
        out
    }
}

/// Checks policy files: syntax, annotations, duplicate ids, and — when a schema is given —
/// Cedar's strict validation against it. Each problem names file, line and column.
pub fn validate_sources(
    files: &[PolicyFile],
    schema: Option<&cedar_policy::Schema>,
) -> ValidationReport {
    let (parsed, mut diagnostics) = parse_files(files);
    let count = parsed.len();
    // Annotation problems and duplicate ids.
    let mut seen: HashMap<String, (String, usize)> = HashMap::new();
    let mut set = PolicySet::new();
    let mut where_is: HashMap<String, (usize, usize)> = HashMap::new();
    let mut display_ids: HashMap<String, String> = HashMap::new();
    for (i, p) in parsed.iter().enumerate() {
        let file = &files[p.file];
        let (line, column) = line_col(&file.text, p.offset);
        let vid = format!("p{i}");
        match rule_from(&p.policy, &file.name, line, column) {
            Err(message) => {
                display_ids.insert(vid.clone(), format!("{}:{line}", file.name));
                diagnostics.push(diag_at(file, p.offset, message, None));
            }
            Ok(rule) => {
                display_ids.insert(vid.clone(), rule.id.clone());
                if let Some((f, l)) = seen.get(&rule.id) {
                    diagnostics.push(diag_at(
                        file,
                        p.offset,
                        format!("duplicate policy id `{}` (first used at {f}:{l})", rule.id),
                        Some(rule.id.clone()),
                    ));
                } else {
                    seen.insert(rule.id.clone(), (file.name.clone(), line));
                }
            }
        }
        // Validation uses synthetic unique ids so that duplicates do not hide errors.
        let id = match PolicyId::from_str(&vid) {
            Ok(id) => id,
            Err(e) => match e {},
        };
        if set.add(p.policy.new_id(id)).is_ok() {
            where_is.insert(vid, (p.file, p.offset));
        }
    }
    if let Some(schema) = schema {
        let validator = Validator::new(schema.clone());
        let result = validator.validate(&set, ValidationMode::Strict);
        for e in result.validation_errors() {
            let pid = e.policy_id().to_string();
            let Some(&(fi, policy_offset)) = where_is.get(&pid) else {
                continue;
            };
            let file = &files[fi];
            // Spans are offsets into the text the policy was parsed from (its file).
            let offset = first_label_offset(e).unwrap_or(policy_offset);
            let mut message = clean_message(&e.to_string(), &pid);
            if let Some(help) = e.help() {
                message = format!("{message} ({help})");
            }
            diagnostics.push(diag_at(
                file,
                offset,
                message,
                display_ids.get(&pid).cloned(),
            ));
        }
        for w in result.validation_warnings() {
            let pid = w.policy_id().to_string();
            let Some(&(fi, policy_offset)) = where_is.get(&pid) else {
                continue;
            };
            let file = &files[fi];
            let offset = first_label_offset(w).unwrap_or(policy_offset);
            let mut d = diag_at(
                file,
                offset,
                clean_message(&w.to_string(), &pid),
                display_ids.get(&pid).cloned(),
            );
            d.severity = Severity::Warning;
            diagnostics.push(d);
        }
    }
    sort_diagnostics(&mut diagnostics);
    ValidationReport {
        policies: count,
        diagnostics,
    }
}

/// Sorts by file, line and column, and drops repeats.
fn sort_diagnostics(diagnostics: &mut Vec<Diagnostic>) {
    diagnostics.sort_by(|a, b| {
        (a.file.as_str(), a.line, a.column).cmp(&(b.file.as_str(), b.line, b.column))
    });
    let mut unique = HashSet::new();
    diagnostics.retain(|d| unique.insert(d.to_string()));
}

/// Drops the synthetic policy id and the action name from a validator message (the
/// diagnostic already locates the policy, and the same problem repeats for every action).
fn clean_message(message: &str, synthetic_id: &str) -> String {
    let mut m = message.replace(&format!("for policy `{synthetic_id}`, "), "");
    while let Some(start) = m.find(" for Action::\"") {
        let rest = &m[start + " for Action::\"".len()..];
        match rest.find('"') {
            Some(end) => {
                let cut = start + " for Action::\"".len() + end + 1;
                m.replace_range(start..cut, "");
            }
            None => break,
        }
    }
    m
}

/// [`validate_sources`] over files and directories on disk.
pub fn validate_paths<P: AsRef<Path>>(
    paths: &[P],
    schema: Option<&cedar_policy::Schema>,
) -> Result<ValidationReport, CedarError> {
    Ok(validate_sources(&read_paths(paths)?, schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_count_characters() {
        let t = "ab\ncdé\nx";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 7), (2, 4));
        assert_eq!(line_col(t, 6), (2, 3), "inside a character: its start");
        assert_eq!(line_col(t, 8), (3, 1));
    }
}
