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
//! * [`check_sources`] / [`check_paths`] (and [`CedarPolicies::check`]) validate each policy
//!   against the types of every capability it can apply to, from [`generate_schema`]: what
//!   the host runs at startup and whenever capabilities change (MCP upstream tools listed),
//!   and what `cap policy validate` reports.
//!
//! # Checking before the first call
//!
//! Cedar types `context` per action, and every action applies to every capability, so a
//! single schema cannot say that `a` is a `number` for one MCP tool and an `integer` for
//! another. [`check_sources`] therefore validates each policy that reads `context.input` or
//! `context.output` once per capability it can apply to, with a schema whose context is that
//! capability's (see [`schema`]): the policy's scope decides (`resource ==
//! Capability::"mcp.calc.add"`), and so do the conditions on `resource` alone that open its
//! `when` clause (`resource.server == "calc" && ...`), since Cedar never evaluates the rest
//! for a capability they reject. Capabilities registered by name ([`GovernedCapability::with_governance`](crate::GovernedCapability::with_governance),
//! as the MCP gateway registers upstream tools with their `inputSchema`) are covered like
//! manifests. Entity-typed resources (one Cedar entity type per capability) were not chosen:
//! the contract's `Capability::"name"` would change for every policy written.
//!
//! Each problem is a [`Diagnostic`]: file, line, column, the policy id, the source text of
//! the expression, Cedar's message, the capabilities concerned, and a fix when one is known.
//!
//! # Numbers: `Long` and `decimal`
//!
//! A JSON number enters Cedar as its capability's schema says, the same way in the generated
//! schema and in the request: JSON Schema `integer` is a `Long` (`150.0` too), `number` is a
//! `decimal` with 4 places (`150` too, as `decimal("150.0000")`); `["number", "null"]` is an
//! optional `decimal`. A number without a declared type is a `Long` when integral, else a
//! `decimal` (give the field a type to have one Cedar type).
//!
//! **An integral value of a `number` field compared with `>` does not "just work", on
//! purpose.** A field must have one Cedar type: if `150` were a `Long` and `150.5` a
//! `decimal`, `context.input.a > 100` would validate, pass every test written with round
//! numbers, and fail in production on the first fractional value. Cedar's `<`, `<=`, `>`,
//! `>=` take `Long`s only (the `decimal` extension does not overload them, unlike
//! `datetime`), Cedar has no conversion between the two types, and rewriting a policy to
//! make it type-check would make it mean something other than what Cedar's own validator
//! and tools say it means. Instead the problem is reported before traffic, with the fix:
//!
//! | Written, `a` a `number` | Reported fix |
//! | --- | --- |
//! | `context.input.a > 100` (also `>=`, `<`, `<=`, either side) | `context.input.a.greaterThan(decimal("100.0"))` |
//! | `context.input.a == 100` (always false) | `context.input.a == decimal("100.0")` |
//!
//! | Written, `n` an `integer` | Reported fix |
//! | --- | --- |
//! | `context.input.n > decimal("1.5")`, `context.input.n.greaterThan(decimal("1.5"))` | `context.input.n > 1` (exact: `n > 1.5` iff `n > 1`) |
//! | `context.input.n == decimal("2.0")` | `context.input.n == 2` |
//!
//! A policy loaded without being checked still fails at its first such call; its error (in
//! [`crate::engine::SourceDecisions::errors`], and in the reason of the `deny` a failing
//! `forbid` yields) ends with the same fix: ``type error: expected long, got decimal;
//! `context.input.a` is a decimal: write `context.input.a.greaterThan(decimal("100.0"))`
//! instead of `context.input.a > 100` ``.

mod check;
mod eval;
mod fast;
mod fix;
pub mod schema;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::str::FromStr;

use cedar_policy::{ActionConstraint, Effect, Policy, PolicyId, PolicySet, ResourceConstraint};

use crate::decision::{DecisionType, IsolationTier, SandboxRequirement};
use crate::pointer::{self, Mutation};

pub use check::{check_paths, check_sources, validate_paths, validate_sources};
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
///
/// Problems found by validating against a schema also carry the policy's id, the source
/// text of the expression concerned, the capabilities whose types the problem was found with
/// (see [`check_sources`]), and, when one is known, the expression to write instead: for a
/// comparison between a `decimal` and a `Long`, `context.input.a > 100` becomes
/// `context.input.a.greaterThan(decimal("100.0"))`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub severity: Severity,
    /// What is wrong (Cedar's message for a validation error).
    pub message: String,
    /// The policy concerned, when known: its `@id`, else `<file>:<line>` (the id its
    /// decisions are reported under).
    pub policy_id: Option<String>,
    /// The source text of the offending expression (the whole comparison when the problem is
    /// one of its operands).
    pub expression: Option<String>,
    /// The expression to write instead of [`Diagnostic::expression`], when known.
    pub fix: Option<String>,
    /// The capabilities whose input or output types show the problem (empty: it does not
    /// depend on the capability).
    pub capabilities: Vec<String>,
}

/// How many capability names a rendered diagnostic lists.
const LISTED_CAPABILITIES: usize = 3;

impl fmt::Display for Diagnostic {
    /// `file:line:column: severity: message`, then, when known, `(for capability `x`)`,
    /// `; in policy `id`: `expression``, and `; fix: `expression``, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.column, self.severity, self.message
        )?;
        if !self.capabilities.is_empty() {
            let names: Vec<String> = self
                .capabilities
                .iter()
                .take(LISTED_CAPABILITIES)
                .map(|c| format!("`{c}`"))
                .collect();
            let plural = if self.capabilities.len() == 1 {
                "y"
            } else {
                "ies"
            };
            write!(f, " (for capabilit{plural} {}", names.join(", "))?;
            if self.capabilities.len() > LISTED_CAPABILITIES {
                write!(
                    f,
                    " and {} more",
                    self.capabilities.len() - LISTED_CAPABILITIES
                )?;
            }
            f.write_str(")")?;
        }
        if let Some(expression) = &self.expression {
            match &self.policy_id {
                Some(id) => write!(f, "; in policy `{id}`: `{expression}`")?,
                None => write!(f, "; in `{expression}`")?,
            }
        }
        if let Some(fix) = &self.fix {
            write!(f, "; fix: `{fix}`")?;
        }
        Ok(())
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
        expression: None,
        fix: None,
        capabilities: Vec::new(),
    }
}

fn first_label_offset(d: &dyn miette::Diagnostic) -> Option<usize> {
    first_label(d).map(|l| l.start)
}

/// The span of a Cedar diagnostic's first label.
fn first_label(d: &dyn miette::Diagnostic) -> Option<Range<usize>> {
    d.labels()
        .and_then(|mut l| l.next())
        .map(|l| l.offset()..l.offset() + l.len())
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

/// Why a policy's annotations do not make a rule (it becomes the message of a diagnostic at
/// the policy).
#[derive(Debug, thiserror::Error)]
enum AnnotationError {
    /// The annotation's value does not read (`@redact("not a pointer")`).
    #[error("@{annotation}: {reason}")]
    Invalid {
        annotation: &'static str,
        reason: String,
    },
    /// The annotation's value is not of the kind it must be (`@priority("high")`).
    #[error("@{annotation} must be {expected}, found `{found}`")]
    Expected {
        annotation: &'static str,
        expected: &'static str,
        found: String,
    },
    /// A decision the policy's effect cannot give.
    #[error("@decision(\"{decision}\") on a {effect}: write `{instead}` instead")]
    WrongEffect {
        decision: DecisionType,
        effect: &'static str,
        instead: &'static str,
    },
    /// A decision without the annotation it needs (`@decision("redact")` without `@redact`).
    #[error("@decision(\"{decision}\") needs {needs}")]
    Incomplete {
        decision: DecisionType,
        needs: &'static str,
    },
}

impl AnnotationError {
    fn invalid(annotation: &'static str, reason: impl std::fmt::Display) -> Self {
        AnnotationError::Invalid {
            annotation,
            reason: reason.to_string(),
        }
    }
}

/// Reads a policy's annotations into a rule.
fn rule_from(
    policy: &Policy,
    file: &str,
    line: usize,
    column: usize,
) -> Result<CedarRule, AnnotationError> {
    let ann = |k: &str| policy.annotation(k).map(str::to_string);
    let effect = match policy.effect() {
        Effect::Permit => RuleEffect::Permit,
        Effect::Forbid => RuleEffect::Forbid,
    };
    let decision = match policy.annotation("decision") {
        Some(d) => DecisionType::parse(d).map_err(|e| AnnotationError::invalid("decision", e))?,
        None => match effect {
            RuleEffect::Permit => DecisionType::Allow,
            RuleEffect::Forbid => DecisionType::Deny,
        },
    };
    match (effect, decision) {
        (RuleEffect::Permit, DecisionType::Deny) => {
            return Err(AnnotationError::WrongEffect {
                decision,
                effect: "permit",
                instead: "forbid",
            });
        }
        (RuleEffect::Forbid, DecisionType::Allow) => {
            return Err(AnnotationError::WrongEffect {
                decision,
                effect: "forbid",
                instead: "permit",
            });
        }
        _ => {}
    }
    let priority = match policy.annotation("priority") {
        Some(p) => p
            .trim()
            .parse::<i64>()
            .map_err(|_| AnnotationError::Expected {
                annotation: "priority",
                expected: "an integer",
                found: p.to_string(),
            })?,
        None => 0,
    };
    let redact = ann("redact").map(|s| list(&s)).unwrap_or_default();
    for p in &redact {
        pointer::parse(p).map_err(|e| AnnotationError::invalid("redact", e))?;
    }
    let mutations = match policy.annotation("mutations") {
        Some(m) => {
            let v = capability_core::json::parse_str(m)
                .map_err(|e| AnnotationError::invalid("mutations", e))?;
            Mutation::list_from_json(&v).map_err(|e| AnnotationError::invalid("mutations", e))?
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
        let tier =
            IsolationTier::parse(t.trim()).map_err(|e| AnnotationError::invalid("sandbox", e))?;
        sandbox = Some(SandboxRequirement::tier(tier));
    }
    if let Some(n) = policy.annotation("network") {
        let deny = match n.trim() {
            "off" | "deny" | "none" => true,
            "on" | "allow" => false,
            other => {
                return Err(AnnotationError::Expected {
                    annotation: "network",
                    expected: "`off` or `on`",
                    found: other.to_string(),
                });
            }
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
                .map_err(|_| AnnotationError::Expected {
                    annotation: key,
                    expected: "a non-negative integer",
                    found: v.to_string(),
                })?;
            let req = sandbox.get_or_insert_with(SandboxRequirement::default);
            if slot == 0 {
                req.timeout_ms = Some(n);
            } else {
                req.memory_mb = Some(n);
            }
        }
    }
    let needs = |ok: bool, needs: &'static str| {
        if ok {
            Ok(())
        } else {
            Err(AnnotationError::Incomplete { decision, needs })
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
            Err(e) => diags.push(diag_at(file, p.offset, e.to_string(), None)),
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
