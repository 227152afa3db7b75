//! Checking policy files before they run: syntax, annotations, duplicate ids, and Cedar's
//! strict validation, against one schema ([`validate_sources`]) or against the schema of
//! every capability a policy can apply to ([`check_sources`]).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Entities, EntityUid, Policy, PolicyId, PolicySet, Request, ValidationMode,
    Validator,
};
use serde_json::{Value, json};

use super::eval::context_use;
use super::fix::{Comparison, comparisons, fix_for};
use super::schema::{Attrs, CapabilityTyping, ContextTypes, Reads};
use super::{CedarError, line_col};
use super::{
    Diagnostic, GeneratedSchema, Parsed, PolicyFile, Severity, ValidationReport, clean_message,
    diag_at, first_label, parse_files, read_paths, rule_from, scope_of, sort_diagnostics,
};

/// Checks policy files: syntax, annotations, duplicate ids, and — when a schema is given —
/// Cedar's strict validation against it. Each problem names file, line and column, and a
/// comparison between a `decimal` and a `Long` comes with its fix.
pub fn validate_sources(
    files: &[PolicyFile],
    schema: Option<&cedar_policy::Schema>,
) -> ValidationReport {
    let mut checker = Checker::new(files);
    if let Some(schema) = schema {
        let all: Vec<usize> = (0..checker.parsed.len()).collect();
        checker.validate(&Validator::new(schema.clone()), &all, &[]);
    }
    checker.finish()
}

/// [`validate_sources`] over files and directories on disk.
pub fn validate_paths<P: AsRef<Path>>(
    paths: &[P],
    schema: Option<&cedar_policy::Schema>,
) -> Result<ValidationReport, CedarError> {
    Ok(validate_sources(&read_paths(paths)?, schema))
}

/// Checks policy files against the capabilities a schema was generated for: as
/// [`validate_sources`], except that a policy that reads `context.input` or `context.output`
/// is validated against the context of each capability it can apply to (its own input and
/// output types, see [`super::schema`]), so that `context.input.a > 100` is reported when
/// `a` is a JSON Schema `number` for a capability the policy governs.
///
/// A policy can apply to a capability when its scope does not name another one and the
/// conditions on `resource` that open its `when` clause (`resource.name like "mcp.calc.*"
/// && ...`) hold for it: Cedar stops at the first false conjunct, so what follows is never
/// evaluated for the other capabilities. A policy that applies to no registered capability
/// (or reads neither input nor output) is validated against the union schema. A diagnostic
/// found only for some capabilities lists them.
pub fn check_sources(files: &[PolicyFile], schema: &GeneratedSchema) -> ValidationReport {
    let mut checker = Checker::new(files);
    let plan = Plan::new(&checker.parsed, schema);
    for (i, name) in &plan.unknown {
        checker.warn(
            *i,
            format!(
                "`{name}` is not a registered capability: the policy's use of `context.input` and `context.output` is checked against the union of the registered capabilities' schemas"
            ),
        );
    }
    if !plan.union_only.is_empty() {
        checker.validate(
            &Validator::new(schema.schema.clone()),
            &plan.union_only,
            &[],
        );
    }
    let (typings, groups) = plan.groups(schema);
    let mut validators: HashMap<usize, Validator> = HashMap::new();
    for g in &groups {
        let validator = match validators.get(&g.typing) {
            Some(v) => v,
            None => match schema.schema_for(&typings[g.typing]) {
                Ok(s) => validators.entry(g.typing).or_insert(Validator::new(s)),
                Err(e) => {
                    let names = g.capabilities.join(", ");
                    for &i in &g.policies {
                        checker.fail(i, format!("cannot build the schema of {names}: {e}"));
                    }
                    continue;
                }
            },
        };
        checker.validate(validator, &g.policies, &g.capabilities);
    }
    checker.finish()
}

/// Which capabilities each policy is checked with.
struct Plan {
    /// Policies validated against the union schema only.
    union_only: Vec<usize>,
    /// Policies scoped to a capability that is not registered, with its name.
    unknown: Vec<(usize, String)>,
    per_capability: Vec<Applies>,
    /// What the per-capability policies read of the input and output.
    reads: Reads,
}

/// A policy checked per capability.
struct Applies {
    policy: usize,
    /// Indices into [`GeneratedSchema::capabilities`].
    capabilities: Vec<usize>,
    /// Its scope names the capability: it is checked with the capability's whole types (not
    /// reduced to what is read), so that a misspelt attribute gets Cedar's "did you mean".
    named: bool,
}

/// Policies validated together: one typing, reported for these capabilities.
struct Group {
    typing: usize,
    capabilities: Vec<String>,
    policies: Vec<usize>,
}

impl Plan {
    fn new(parsed: &[Parsed], schema: &GeneratedSchema) -> Self {
        let capabilities = schema.capabilities();
        let authorizer = Authorizer::new();
        let mut plan = Plan {
            union_only: Vec::new(),
            unknown: Vec::new(),
            per_capability: Vec::new(),
            reads: Reads {
                input: Attrs::none(),
                output: Attrs::none(),
            },
        };
        for (i, p) in parsed.iter().enumerate() {
            let (_, resource, never) = scope_of(&p.policy);
            let uses = context_use(&p.policy);
            if never || !(uses.all || uses.input || uses.output) {
                plan.union_only.push(i);
                continue;
            }
            let opening = ResourcePrefix::of(&p.policy);
            let applies: Vec<usize> = capabilities
                .iter()
                .enumerate()
                .filter(|(_, c)| resource.as_ref().is_none_or(|r| *r == c.name))
                .filter(|(_, c)| opening.may_hold(c, &authorizer))
                .map(|(ci, _)| ci)
                .collect();
            if applies.is_empty() {
                plan.union_only.push(i);
                if let Some(name) = resource.filter(|r| !capabilities.iter().any(|c| c.name == *r))
                {
                    plan.unknown.push((i, name));
                }
                continue;
            }
            match p.policy.to_json() {
                Ok(est) => add_reads(&est, &mut plan.reads),
                Err(_) => {
                    plan.reads.input = Attrs::All;
                    plan.reads.output = Attrs::All;
                }
            }
            plan.per_capability.push(Applies {
                policy: i,
                capabilities: applies,
                named: resource.is_some(),
            });
        }
        plan
    }

    /// The distinct typings, and the groups of policies to validate with each: capabilities
    /// that agree on what the policies read share a typing.
    fn groups(&self, schema: &GeneratedSchema) -> (Vec<ContextTypes>, Vec<Group>) {
        let capabilities = schema.capabilities();
        let everything = Reads {
            input: Attrs::All,
            output: Attrs::All,
        };
        let mut typings: Vec<ContextTypes> = Vec::new();
        let mut typing_of: HashMap<(usize, bool), usize> = HashMap::new();
        let mut groups: Vec<Group> = Vec::new();
        for a in &self.per_capability {
            let mut by_typing: Vec<(usize, Vec<String>)> = Vec::new();
            for &ci in &a.capabilities {
                let cap = &capabilities[ci];
                let t = *typing_of.entry((ci, a.named)).or_insert_with(|| {
                    let reads = if a.named { &everything } else { &self.reads };
                    let types = schema.context_types(cap, reads);
                    typings.iter().position(|t| *t == types).unwrap_or_else(|| {
                        typings.push(types);
                        typings.len() - 1
                    })
                });
                match by_typing.iter_mut().find(|(k, _)| *k == t) {
                    Some((_, names)) => names.push(cap.name.clone()),
                    None => by_typing.push((t, vec![cap.name.clone()])),
                }
            }
            for (typing, names) in by_typing {
                match groups
                    .iter_mut()
                    .find(|g| g.typing == typing && g.capabilities == names)
                {
                    Some(g) => g.policies.push(a.policy),
                    None => groups.push(Group {
                        typing,
                        capabilities: names,
                        policies: vec![a.policy],
                    }),
                }
            }
        }
        (typings, groups)
    }
}

/// `x` in `context.x` or `context has x` (JSON form).
fn context_attr(v: &Value) -> Option<&str> {
    let o = v.as_object()?;
    let (k, body) = o.iter().next().filter(|_| o.len() == 1)?;
    if k != "." && k != "has" {
        return None;
    }
    (body.get("left")?.get("Var")?.as_str()? == "context").then_some(())?;
    body.get("attr")?.as_str()
}

fn whole(reads: &mut Reads, field: &str) {
    match field {
        "input" => reads.input = Attrs::All,
        "output" => reads.output = Attrs::All,
        _ => {}
    }
}

/// Adds the attributes of `context.input` and `context.output` a policy (JSON form) reads.
fn add_reads(v: &Value, reads: &mut Reads) {
    if let Some(field) = context_attr(v) {
        // `context.input` itself, not to read one of its attributes (that is seen from the
        // parent): used as a whole. `context has input` reads nothing of it.
        if v.get(".").is_some() {
            whole(reads, field);
        }
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if k == "." || k == "has" {
                    let left = child.get("left");
                    let field = left.filter(|l| l.get(".").is_some()).and_then(context_attr);
                    if let (Some(field), Some(attr)) =
                        (field, child.get("attr").and_then(Value::as_str))
                    {
                        match field {
                            "input" => reads.input.add(attr),
                            "output" => reads.output.add(attr),
                            _ => {}
                        }
                        continue;
                    }
                }
                if k == "Var" && child.as_str() == Some("context") {
                    // `context` as a whole.
                    whole(reads, "input");
                    whole(reads, "output");
                    continue;
                }
                add_reads(child, reads);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| add_reads(i, reads)),
        _ => {}
    }
}

/// [`check_sources`] over files and directories on disk.
pub fn check_paths<P: AsRef<Path>>(
    paths: &[P],
    schema: &GeneratedSchema,
) -> Result<ValidationReport, CedarError> {
    Ok(check_sources(&read_paths(paths)?, schema))
}

/// A validator finding before merging: the policy, the validation run, the diagnostic.
struct Finding {
    policy: usize,
    run: usize,
    diagnostic: Diagnostic,
    /// Kept only when every run that validated the policy found it.
    only_everywhere: bool,
}

/// Parsed files, the diagnostics of parsing and annotations, and the findings of each
/// validation run.
struct Checker<'a> {
    files: &'a [PolicyFile],
    parsed: Vec<Parsed>,
    /// Per policy: the id it is reported under (`@id`, else `file:line`).
    ids: Vec<String>,
    diagnostics: Vec<Diagnostic>,
    findings: Vec<Finding>,
    /// Per policy: the number of validation runs it took part in.
    runs_of: Vec<usize>,
    runs: usize,
    /// Per file: its comparisons, found on first need.
    comparisons: Vec<Option<Vec<Comparison>>>,
}

impl<'a> Checker<'a> {
    fn new(files: &'a [PolicyFile]) -> Self {
        let (parsed, mut diagnostics) = parse_files(files);
        let mut seen: HashMap<String, (String, usize)> = HashMap::new();
        let mut ids = Vec::with_capacity(parsed.len());
        for p in &parsed {
            let file = &files[p.file];
            let (line, column) = line_col(&file.text, p.offset);
            match rule_from(&p.policy, &file.name, line, column) {
                Err(e) => {
                    ids.push(format!("{}:{line}", file.name));
                    diagnostics.push(diag_at(file, p.offset, e.to_string(), None));
                }
                Ok(rule) => {
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
                    ids.push(rule.id);
                }
            }
        }
        let count = parsed.len();
        Checker {
            files,
            parsed,
            ids,
            diagnostics,
            findings: Vec::new(),
            runs_of: vec![0; count],
            runs: 0,
            comparisons: vec![None; files.len()],
        }
    }

    /// An error about a policy, at its `permit` or `forbid`.
    fn fail(&mut self, policy: usize, message: String) {
        let p = &self.parsed[policy];
        let d = diag_at(
            &self.files[p.file],
            p.offset,
            message,
            Some(self.ids[policy].clone()),
        );
        self.diagnostics.push(d);
    }

    /// A warning about a policy, at its `permit` or `forbid`.
    fn warn(&mut self, policy: usize, message: String) {
        let p = &self.parsed[policy];
        let mut d = diag_at(
            &self.files[p.file],
            p.offset,
            message,
            Some(self.ids[policy].clone()),
        );
        d.severity = Severity::Warning;
        self.diagnostics.push(d);
    }

    /// Validates some policies; what is found is attributed to `capabilities` (empty: not
    /// capability-specific). Validation uses synthetic unique ids (`p<index>`) so that
    /// duplicate ids do not hide errors.
    fn validate(&mut self, validator: &Validator, policies: &[usize], capabilities: &[String]) {
        let mut set = PolicySet::new();
        for &i in policies {
            let id = match PolicyId::from_str(&format!("p{i}")) {
                Ok(id) => id,
                Err(e) => match e {},
            };
            if set.add(self.parsed[i].policy.new_id(id)).is_ok() {
                self.runs_of[i] += 1;
            }
        }
        let run = self.runs;
        self.runs += 1;
        let result = validator.validate(&set, ValidationMode::Strict);
        for e in result.validation_errors() {
            self.record(e.policy_id(), e, Severity::Error, run, capabilities, false);
        }
        for w in result.validation_warnings() {
            // Impossible with one capability's types is not impossible.
            let everywhere = matches!(w, cedar_policy::ValidationWarning::ImpossiblePolicy(_));
            self.record(
                w.policy_id(),
                w,
                Severity::Warning,
                run,
                capabilities,
                everywhere,
            );
        }
    }

    fn record(
        &mut self,
        pid: &PolicyId,
        e: &dyn miette::Diagnostic,
        severity: Severity,
        run: usize,
        capabilities: &[String],
        only_everywhere: bool,
    ) {
        let pid = pid.to_string();
        let Some(i) = pid
            .strip_prefix('p')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|i| *i < self.parsed.len())
        else {
            return;
        };
        let fi = self.parsed[i].file;
        let file = &self.files[fi];
        // Spans are offsets into the text the policy was parsed from (its file).
        let label = first_label(e);
        let offset = label.as_ref().map_or(self.parsed[i].offset, |l| l.start);
        let mut message = clean_message(&e.to_string(), &pid);
        if let Some(help) = e.help() {
            message = format!("{message} ({})", clean_message(&help.to_string(), &pid));
        }
        let mut d = diag_at(file, offset, message, Some(self.ids[i].clone()));
        d.severity = severity;
        d.capabilities = capabilities.to_vec();
        // An expression inside the policy (not the whole policy).
        if let Some(span) = label.filter(|l| !l.is_empty() && l.start > self.parsed[i].offset) {
            let comparisons = self.comparisons[fi].get_or_insert_with(|| comparisons(&file.text));
            // The innermost comparison the span is, or is an operand of.
            let comparison = comparisons
                .iter()
                .filter(|c| c.covers(&span))
                .min_by_key(|c| c.whole.len());
            d.expression = comparison
                .map(|c| c.whole.clone())
                .or(Some(span))
                .and_then(|r| file.text.get(r))
                .map(str::to_string);
            let mixes_numbers = d.message.contains("Long") && d.message.contains("decimal");
            if severity == Severity::Error && mixes_numbers {
                d.fix = comparison
                    .and_then(|c| fix_for(&file.text, c))
                    .map(|f| f.fix);
            }
        }
        self.findings.push(Finding {
            policy: i,
            run,
            diagnostic: d,
            only_everywhere,
        });
    }

    /// Merges what several runs found at the same place, naming the capabilities concerned,
    /// unless every run that validated the policy found it; then sorts.
    fn finish(self) -> ValidationReport {
        let mut merged: Vec<(usize, BTreeSet<usize>, Diagnostic, bool)> = Vec::new();
        let mut index: HashMap<(usize, String), usize> = HashMap::new();
        for f in self.findings {
            let d = f.diagnostic;
            let key = (
                f.policy,
                format!(
                    "{}:{}:{}: {}: {}",
                    d.file, d.line, d.column, d.severity, d.message
                ),
            );
            match index.get(&key) {
                Some(&at) => {
                    let (_, runs, m, _) = &mut merged[at];
                    runs.insert(f.run);
                    for c in d.capabilities {
                        if !m.capabilities.contains(&c) {
                            m.capabilities.push(c);
                        }
                    }
                }
                None => {
                    index.insert(key, merged.len());
                    merged.push((f.policy, BTreeSet::from([f.run]), d, f.only_everywhere));
                }
            }
        }
        let mut diagnostics = self.diagnostics;
        for (policy, runs, mut d, only_everywhere) in merged {
            let checked = self.runs_of[policy];
            let everywhere = runs.len() == checked;
            if only_everywhere && !everywhere {
                continue;
            }
            if checked > 1 && everywhere {
                d.capabilities.clear();
            }
            diagnostics.push(d);
        }
        sort_diagnostics(&mut diagnostics);
        ValidationReport {
            policies: self.parsed.len(),
            diagnostics,
        }
    }
}

/// The conjuncts on `resource` alone that open a policy's conditions, as a policy of their
/// own; evaluated against a capability, they tell whether the rest can be reached.
struct ResourcePrefix(Option<PolicySet>);

impl ResourcePrefix {
    fn of(policy: &Policy) -> Self {
        let Ok(est) = policy.to_json() else {
            return ResourcePrefix(None);
        };
        let mut conjuncts: Vec<Value> = Vec::new();
        let conditions = est
            .get("conditions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        'outer: for c in conditions {
            let (Some(kind), Some(body)) = (c.get("kind").and_then(Value::as_str), c.get("body"))
            else {
                break;
            };
            let mut parts = Vec::new();
            match kind {
                "when" => flatten_and(body, &mut parts),
                _ => parts.push(json!({"!": {"arg": body}})),
            }
            for part in parts {
                if !on_resource_only(&part) {
                    break 'outer;
                }
                conjuncts.push(part);
            }
        }
        let Some(body) = conjuncts
            .into_iter()
            .reduce(|left, right| json!({"&&": {"left": left, "right": right}}))
        else {
            return ResourcePrefix(None);
        };
        let prefix = json!({
            "effect": "permit",
            "principal": {"op": "All"},
            "action": {"op": "All"},
            "resource": {"op": "All"},
            "conditions": [{"kind": "when", "body": body}],
        });
        let set = Policy::from_json(None, prefix)
            .ok()
            .and_then(|p| PolicySet::from_policies([p]).ok());
        ResourcePrefix(set)
    }

    /// Whether the opening conditions may hold for the capability (`true` unless they are
    /// certainly false).
    fn may_hold(&self, cap: &CapabilityTyping, authorizer: &Authorizer) -> bool {
        let (Some(set), Some(entity)) = (&self.0, &cap.entity) else {
            return true;
        };
        let request = (|| {
            let principal = EntityUid::from_str("Agent::\"\"").ok()?;
            let action = EntityUid::from_str("Action::\"tool_call\"").ok()?;
            Request::new(principal, action, entity.uid(), Context::empty(), None).ok()
        })();
        let (Some(request), Ok(entities)) =
            (request, Entities::from_entities([entity.clone()], None))
        else {
            return true;
        };
        let response = authorizer.is_authorized(&request, set, &entities);
        response.decision() == cedar_policy::Decision::Allow
            || response.diagnostics().errors().next().is_some()
    }
}

/// `a && b && c` as its conjuncts, in evaluation order.
fn flatten_and(e: &Value, out: &mut Vec<Value>) {
    match e.get("&&") {
        Some(and) => {
            if let (Some(l), Some(r)) = (and.get("left"), and.get("right")) {
                flatten_and(l, out);
                flatten_and(r, out);
            } else {
                out.push(e.clone());
            }
        }
        None => out.push(e.clone()),
    }
}

/// Whether an expression (JSON form) reads no variable but `resource`.
fn on_resource_only(e: &Value) -> bool {
    match e {
        Value::Object(m) => m.iter().all(|(k, v)| match k.as_str() {
            "Var" => v.as_str() == Some("resource"),
            "Slot" | "Unknown" => false,
            _ => on_resource_only(v),
        }),
        Value::Array(items) => items.iter().all(on_resource_only),
        _ => true,
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    fn reads(condition: &str) -> Reads {
        let text = format!("permit(principal, action, resource) when {{ {condition} }};");
        let policy = match Policy::from_str(&text) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let est = match policy.to_json() {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        };
        let mut r = Reads {
            input: Attrs::none(),
            output: Attrs::none(),
        };
        add_reads(&est, &mut r);
        r
    }

    fn named(names: &[&str]) -> Attrs {
        Attrs::Named(names.iter().map(|n| (*n).to_string()).collect())
    }

    #[test]
    fn the_attributes_read_are_found() {
        let r = reads(
            r#"context.input.a > 1 && context.input has b && context["input"]["c"].d == 1 && context.output.e.f && context.environment == "x" && context has labels"#,
        );
        assert_eq!(r.input, named(&["a", "b", "c"]));
        assert_eq!(r.output, named(&["e"]));
        let r = reads("context has input && context.input == {}");
        assert_eq!(r.input, Attrs::All);
        assert_eq!(r.output, named(&[]));
        let r = reads("[context.output].isEmpty()");
        assert_eq!((r.input, r.output), (named(&[]), Attrs::All));
        let r = reads("context == {}");
        assert_eq!((r.input, r.output), (Attrs::All, Attrs::All));
    }
}
