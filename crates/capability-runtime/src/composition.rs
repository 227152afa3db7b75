//! Composition: static composites, governed runtime pipelines, contract compatibility,
//! composition planning, pipeline-intent splitting, native intent fit and capability gaps.
//!
//! # Static composites ([`compose_capabilities`])
//!
//! A composite is a new [`Capability`] whose `execute` runs each step's own Rust hooks in
//! process, in order, each step's output feeding the next (or, with an [`InputMapper`],
//! `mapper(previous output, original input)`). The composite is planned, authorized,
//! executed and receipted as **one** capability; the steps leave no receipts of their own.
//! Use [`run_pipeline`] when every step must be authorized and receipted separately.
//!
//! * **Effects** are the ordered, de-duplicated union of the steps' effects. A manifest that
//!   declares `effects` must include that union (`INVALID_MANIFEST`, `Composed manifest omits
//!   required effects: …`); one that declares none gets the union.
//! * **Behaviour** defaults to `{deterministic: all steps are, idempotent: all steps are,
//!   reversible: false}`; a declared `behavior` is kept as written.
//! * **Contracts** (beyond the reference, as the standard says a composer SHOULD): wherever a
//!   step's output feeds the next step directly (no mapper), [`contracts_compose`] must not
//!   find a contradiction between the two schemas, else the composition is refused
//!   (`INVALID_MANIFEST`, `Composed steps do not compose: a → b: <reason>`). The same check
//!   runs between a declared composite `input` and the first step, and between the last step
//!   and a declared composite `output`. When the manifest declares no `input` (and the first
//!   step has no mapper) it takes the first step's input schema; when it declares no `output`
//!   it takes the last step's, so the runtime validates the composite at its boundary.
//! * **Execution** (beyond the reference): each step's input and output are validated against
//!   the step's own schemas (`INVALID_INPUT` / `INVALID_OUTPUT`, naming the step), its
//!   verification hook runs (`VERIFY_FAILED`), and cancellation is honoured between steps.
//!   Steps see the composite's context with the manifest replaced by their own. Only
//!   in-process (native) capabilities can be steps; a package-module step is refused at
//!   composition time, since it may run only behind its isolating executor.
//!
//! # Runtime pipelines ([`run_pipeline`])
//!
//! Every step goes through [`CapabilityRuntime::invoke`]: planned, authorized, executed and
//! receipted on its own; each output feeds the next step. Before anything runs, every id must
//! resolve (`NOT_FOUND`) and consecutive contracts must not contradict each other
//! (`INVALID_PLAN`, `Pipeline steps do not compose: a → b: <reason>`), so a typo or a schema
//! mismatch cannot leave a half-executed pipeline. A failing step stops the pipeline and its
//! error is returned unchanged; the receipts of the steps that ran stay in the store.
//!
//! # Planning helpers (the reference's, exactly; `vectors/composition.json`)
//!
//! * [`contracts_compose`]: `{compatible, reason}` for a producer output schema and a
//!   consumer input schema.
//! * [`plan_composition`]: depth-first composition plans over candidates, best mean score
//!   first, at most [`MAX_COMPOSITION_PLANS`].
//! * [`split_pipeline_intent`]: splits `"a then b -> c"` into its parts.
//! * [`assess_native_intent_fit`]: whether a native capability covers an intent's
//!   vocabulary (§2.22).
//! * [`gap_options`] and [`create_gap`]: capability gap documents (the document itself is
//!   [`capability_core::gap::create_capability_gap`]), stamped with the current time.

use std::collections::HashSet;
use std::sync::Arc;

use capability_core::gap::{GapOptions, create_capability_gap};
use capability_core::json::{as_f64, normalize_numbers};
use capability_core::plan::unique;
use capability_core::{CapabilityError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::capability::{
    AsyncContext, Capability, ExecuteHook, ExecutionContext, HookError, HookResult, Hooks,
};
use crate::runtime::{CapabilityRuntime, ExecuteOptions};

/// The reason given when either contract is absent.
pub const UNCONSTRAINED_REASON: &str =
    "At least one contract is unconstrained; compatibility is possible but not proven.";

/// The reason given when no contradiction is known.
pub const COMPATIBLE_REASON: &str =
    "Output contract can feed input contract without a known schema contradiction.";

/// The default longest path [`plan_composition`] explores.
pub const DEFAULT_MAX_DEPTH: usize = 4;

/// How many plans [`plan_composition`] returns at most.
pub const MAX_COMPOSITION_PLANS: usize = 25;

/// How many paths [`plan_composition`] considers at most before ranking. The reference has
/// no bound (its search is exponential in the number of candidates); this only changes
/// results for inputs that would produce more than this many compatible paths.
pub const MAX_EXPLORED_PATHS: usize = 100_000;

// ---------------------------------------------------------------------------------------
// Contract compatibility
// ---------------------------------------------------------------------------------------

/// The result of [`contracts_compose`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractCheck {
    pub compatible: bool,
    pub reason: String,
}

/// JavaScript truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => {
            let x = as_f64(n);
            x != 0.0 && !x.is_nan()
        }
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// Whether a producer's output schema can feed a consumer's input schema (the reference
/// `contractsCompose`):
///
/// * either schema absent or falsy → compatible ([`UNCONSTRAINED_REASON`]);
/// * both `type`s are strings and differ → `Schema type mismatch: <out> → <in>`;
/// * the consumer's `type` is `"object"` and some of its string `required` keys are not keys
///   of the producer's `properties` (any object, arrays included) → `Producer lacks required
///   consumer fields: a, b`;
/// * otherwise compatible ([`COMPATIBLE_REASON`]).
pub fn contracts_compose(output: Option<&Value>, input: Option<&Value>) -> ContractCheck {
    let (Some(output), Some(input)) = (output.filter(|v| truthy(v)), input.filter(|v| truthy(v)))
    else {
        return ContractCheck {
            compatible: true,
            reason: UNCONSTRAINED_REASON.into(),
        };
    };
    let out_type = output.get("type").and_then(Value::as_str);
    let in_type = input.get("type").and_then(Value::as_str);
    if let (Some(o), Some(i)) = (out_type, in_type)
        && o != i
    {
        return ContractCheck {
            compatible: false,
            reason: format!("Schema type mismatch: {o} \u{2192} {i}"),
        };
    }
    if in_type == Some("object") {
        let required: Vec<&str> = input
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let has = |key: &str| match output.get("properties") {
            Some(Value::Object(props)) => props.contains_key(key),
            // `Object.keys` of an array: its indices.
            Some(Value::Array(items)) => key
                .parse::<usize>()
                .is_ok_and(|i| i < items.len() && i.to_string() == key),
            _ => false,
        };
        let missing: Vec<&str> = required.into_iter().filter(|k| !has(k)).collect();
        if !missing.is_empty() {
            return ContractCheck {
                compatible: false,
                reason: format!(
                    "Producer lacks required consumer fields: {}",
                    missing.join(", ")
                ),
            };
        }
    }
    ContractCheck {
        compatible: true,
        reason: COMPATIBLE_REASON.into(),
    }
}

// ---------------------------------------------------------------------------------------
// Composition planning
// ---------------------------------------------------------------------------------------

/// A candidate step for [`plan_composition`]: `{id, name, description, input?, output?,
/// effects, score}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompositionCandidate {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(
        default,
        deserialize_with = "capability_core::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub input: Option<Value>,
    #[serde(
        default,
        deserialize_with = "capability_core::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<Value>,
    #[serde(default)]
    pub effects: Vec<String>,
    #[serde(default)]
    pub score: f64,
}

impl CompositionCandidate {
    /// A candidate from a capability's manifest, with a score.
    pub fn from_capability(capability: &Capability, score: f64) -> Self {
        let m = capability.manifest();
        CompositionCandidate {
            id: m.id.clone(),
            name: m.name.clone(),
            description: m.description.clone(),
            input: m.input.clone(),
            output: m.output.clone(),
            effects: m.effects().to_vec(),
            score,
        }
    }
}

/// A composition plan `{intent, steps, compatible, reasons, effects}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompositionPlan {
    pub intent: String,
    pub steps: Vec<CompositionCandidate>,
    pub compatible: bool,
    /// One `a → b: <reason>` per consecutive pair.
    pub reasons: Vec<String>,
    /// The ordered union of the steps' effects.
    pub effects: Vec<String>,
}

impl CompositionPlan {
    /// The ids of the steps, in order.
    pub fn step_ids(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.id.as_str()).collect()
    }
}

struct PlanSearch<'a> {
    candidates: &'a [CompositionCandidate],
    max_depth: usize,
    found: Vec<Vec<usize>>,
}

impl PlanSearch<'_> {
    fn walk(&mut self, path: &mut Vec<usize>) {
        if self.found.len() >= MAX_EXPLORED_PATHS {
            return;
        }
        if path.len() >= 2 {
            self.found.push(path.clone());
        }
        if path.len() >= self.max_depth {
            return;
        }
        let Some(&last) = path.last() else {
            return;
        };
        for (i, candidate) in self.candidates.iter().enumerate() {
            if path.iter().any(|&p| self.candidates[p].id == candidate.id) {
                continue;
            }
            let previous = &self.candidates[last];
            if !contracts_compose(previous.output.as_ref(), candidate.input.as_ref()).compatible {
                continue;
            }
            path.push(i);
            self.walk(path);
            path.pop();
        }
    }
}

fn mean_score(candidates: &[CompositionCandidate], path: &[usize]) -> f64 {
    let sum = path.iter().fold(0.0, |s, &i| s + candidates[i].score);
    let mean = sum / path.len() as f64;
    if mean.is_nan() {
        f64::NEG_INFINITY
    } else {
        mean
    }
}

/// The reference `planComposition`: a depth-first search from each candidate in order,
/// never repeating an id within a path, extending a path only with candidates whose input
/// the previous step's output can feed ([`contracts_compose`]), up to `max_depth` steps
/// (the reference default is [`DEFAULT_MAX_DEPTH`]). Every path of two steps or more is a
/// plan; plans are stably sorted by mean step score, best first, and the first
/// [`MAX_COMPOSITION_PLANS`] are returned.
pub fn plan_composition(
    intent: &str,
    candidates: &[CompositionCandidate],
    max_depth: usize,
) -> Vec<CompositionPlan> {
    let mut search = PlanSearch {
        candidates,
        max_depth,
        found: Vec::new(),
    };
    for i in 0..candidates.len() {
        search.walk(&mut vec![i]);
    }
    let mut ranked: Vec<(f64, Vec<usize>)> = search
        .found
        .into_iter()
        .map(|p| (mean_score(candidates, &p), p))
        .collect();
    // Stable: equal means keep discovery order, as JavaScript's sort does.
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked
        .into_iter()
        .take(MAX_COMPOSITION_PLANS)
        .map(|(_, path)| {
            let steps: Vec<CompositionCandidate> =
                path.iter().map(|&i| candidates[i].clone()).collect();
            let mut compatible = true;
            let reasons = steps
                .windows(2)
                .map(|pair| {
                    let check = contracts_compose(pair[0].output.as_ref(), pair[1].input.as_ref());
                    compatible &= check.compatible;
                    format!("{} \u{2192} {}: {}", pair[0].id, pair[1].id, check.reason)
                })
                .collect();
            let effects = unique(steps.iter().flat_map(|s| s.effects.iter().cloned()));
            CompositionPlan {
                intent: intent.to_string(),
                steps,
                compatible,
                reasons,
                effects,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Pipeline intents
// ---------------------------------------------------------------------------------------

fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && capability_core::js::is_js_whitespace(chars[i]) {
        i += 1;
    }
    i
}

/// The end of `word` (ASCII, matched case-insensitively) at `i`.
fn word_at(chars: &[char], i: usize, word: &str) -> Option<usize> {
    let n = word.len();
    let ok = chars.len() >= i + n
        && chars[i..i + n]
            .iter()
            .zip(word.chars())
            .all(|(c, w)| c.eq_ignore_ascii_case(&w));
    ok.then_some(i + n)
}

/// `word` followed by at least one whitespace; the end of that whitespace.
fn word_then_ws(chars: &[char], i: usize, word: &str) -> Option<usize> {
    let end = word_at(chars, i, word)?;
    let after = skip_ws(chars, end);
    (after > end).then_some(after)
}

/// The end of a pipeline boundary starting exactly at `p`: `\s+(?:and\s+then|then)\s+` or
/// `\s*(?:->|→|\|>)\s*`, tried in that order.
fn boundary_at(chars: &[char], p: usize) -> Option<usize> {
    let i = skip_ws(chars, p);
    if i > p {
        let and_then = word_then_ws(chars, i, "and").and_then(|k| word_then_ws(chars, k, "then"));
        if let Some(end) = and_then.or_else(|| word_then_ws(chars, i, "then")) {
            return Some(end);
        }
    }
    let arrow = match chars.get(i..) {
        Some(['-', '>', ..]) | Some(['|', '>', ..]) => i + 2,
        Some(['\u{2192}', ..]) => i + 1,
        _ => return None,
    };
    Some(skip_ws(chars, arrow))
}

/// The reference `splitPipelineIntent`: splits on whitespace + `then` + whitespace,
/// whitespace + `and` + whitespace + `then` + whitespace (ASCII case-insensitive), or the
/// arrows `->`, `→` and `|>` with optional surrounding whitespace (ECMAScript whitespace),
/// then trims the parts and drops empty ones. `"a then b -> c"` gives `[a, b, c]`.
pub fn split_pipeline_intent(intent: &str) -> Vec<String> {
    let chars: Vec<char> = intent.chars().collect();
    let mut pieces = Vec::new();
    let (mut start, mut q) = (0, 0);
    while q < chars.len() {
        match boundary_at(&chars, q) {
            Some(end) => {
                pieces.push(&chars[start..q]);
                start = end;
                q = end;
            }
            None => q += 1,
        }
    }
    pieces.push(&chars[start.min(chars.len())..]);
    pieces
        .into_iter()
        .map(|p| {
            let s: String = p.iter().collect();
            capability_core::js::js_trim(&s).to_string()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Native intent fit (§2.22)
// ---------------------------------------------------------------------------------------

const INTENT_STOPWORDS: [&str; 21] = [
    "a", "an", "the", "to", "of", "for", "in", "on", "at", "by", "with", "and", "or", "from",
    "into", "this", "that", "my", "your", "its", "please",
];

/// Whether a native capability covers an intent (the reference `assessNativeIntentFit`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntentFit {
    /// At least one query token, and `coverage >= 0.6`.
    pub accepted: bool,
    /// `matched / query tokens` (0 without query tokens).
    pub coverage: f64,
    pub matched: Vec<String>,
    pub missing: Vec<String>,
}

/// Intent tokens: lowercased, split on runs outside `[a-z0-9]`, longer than one character,
/// stopwords removed, de-duplicated in order.
pub fn intent_tokens(value: &str) -> Vec<String> {
    let lower = value.to_lowercase();
    let mut out: Vec<String> = Vec::new();
    for token in lower.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit())) {
        if token.len() > 1 && !INTENT_STOPWORDS.contains(&token) && !out.iter().any(|t| t == token)
        {
            out.push(token.to_string());
        }
    }
    out
}

/// The reference `assessNativeIntentFit(query, {id, name, description})`: the share of the
/// query's [`intent_tokens`] found among the tokens of `id name description`. Lexical
/// discovery locates candidates; this check keeps a plausible-but-wrong capability from
/// being selected automatically.
pub fn assess_native_intent_fit(query: &str, id: &str, name: &str, description: &str) -> IntentFit {
    let query_tokens = intent_tokens(query);
    let candidate: HashSet<String> = intent_tokens(&format!("{id} {name} {description}"))
        .into_iter()
        .collect();
    let (matched, missing): (Vec<String>, Vec<String>) = query_tokens
        .iter()
        .cloned()
        .partition(|t| candidate.contains(t));
    let coverage = if query_tokens.is_empty() {
        0.0
    } else {
        matched.len() as f64 / query_tokens.len() as f64
    };
    IntentFit {
        accepted: !query_tokens.is_empty() && coverage >= 0.6,
        coverage,
        matched,
        missing,
    }
}

// ---------------------------------------------------------------------------------------
// Gaps
// ---------------------------------------------------------------------------------------

/// Reads the reference's gap options object. As in the reference, a falsy `input` or
/// `output` (`null`, `false`, `0`, `""`) is left out of the gap.
pub fn gap_options(options: &Value) -> GapOptions {
    let mut parsed = GapOptions::from_value(options);
    parsed.input = parsed.input.filter(truthy);
    parsed.output = parsed.output.filter(truthy);
    parsed
}

/// A capability gap document for an unresolved intent, created now (`createdAt` is
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, UTC).
pub fn create_gap(intent: &str, options: &GapOptions) -> Value {
    create_capability_gap(intent, options, &capability_core::js::now_iso())
}

// ---------------------------------------------------------------------------------------
// Static composites
// ---------------------------------------------------------------------------------------

/// Maps `(previous output, original input)` to a step's input.
pub type InputMapper = Arc<dyn Fn(&Value, &Value) -> Value + Send + Sync>;

/// One step of a static composite: a capability, optionally with an [`InputMapper`].
#[derive(Clone)]
pub struct CompositionStep {
    pub capability: Arc<Capability>,
    pub map_input: Option<InputMapper>,
}

impl std::fmt::Debug for CompositionStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositionStep")
            .field("capability", &self.capability.id())
            .field("map_input", &self.map_input.is_some())
            .finish()
    }
}

impl CompositionStep {
    /// A step fed with the previous step's output (the composite's input for the first).
    pub fn new(capability: Arc<Capability>) -> Self {
        CompositionStep {
            capability,
            map_input: None,
        }
    }

    /// A step fed with `mapper(previous output, original input)`.
    pub fn with_mapper<F>(capability: Arc<Capability>, mapper: F) -> Self
    where
        F: Fn(&Value, &Value) -> Value + Send + Sync + 'static,
    {
        CompositionStep {
            capability,
            map_input: Some(Arc::new(mapper)),
        }
    }
}

impl From<Arc<Capability>> for CompositionStep {
    fn from(capability: Arc<Capability>) -> Self {
        CompositionStep::new(capability)
    }
}

fn refuse(message: String) -> CapabilityError {
    CapabilityError::new(ErrorCode::InvalidManifest, message)
}

fn check_link(
    check: ContractCheck,
    describe: impl FnOnce() -> String,
) -> Result<(), CapabilityError> {
    if check.compatible {
        Ok(())
    } else {
        Err(refuse(format!("{}: {}", describe(), check.reason)))
    }
}

/// Builds a static composite from a manifest (its `effects` and `behavior` may be omitted)
/// and its steps; see the module documentation for the rules. Fails with
/// `INVALID_MANIFEST` when the manifest is invalid or omits required effects, when a step
/// is not an in-process capability, or when consecutive contracts contradict each other.
pub fn compose_capabilities(
    manifest: Value,
    steps: Vec<CompositionStep>,
) -> Result<Capability, CapabilityError> {
    let Value::Object(mut m) = manifest else {
        return Err(refuse("Composed manifest must be an object".into()));
    };
    let Some(first) = steps.first() else {
        return Err(refuse("A composition needs at least one step".into()));
    };
    for step in &steps {
        if step.capability.hooks().is_none() {
            return Err(refuse(format!(
                "Composition step {} has no in-process implementation; a static composite runs \
                 its steps in process, so run it with run_pipeline behind its executor",
                step.capability.id()
            )));
        }
    }

    let effects = unique(
        steps
            .iter()
            .flat_map(|s| s.capability.manifest().effects().iter().cloned()),
    );
    match m.get("effects") {
        None | Some(Value::Null) => {
            m.insert("effects".into(), json!(effects));
        }
        Some(declared) => {
            let declared: Vec<&str> = declared
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let missing: Vec<&str> = effects
                .iter()
                .map(String::as_str)
                .filter(|e| !declared.contains(e))
                .collect();
            if !missing.is_empty() {
                return Err(refuse(format!(
                    "Composed manifest omits required effects: {}",
                    missing.join(", ")
                )));
            }
        }
    }
    if m.get("behavior").is_none_or(Value::is_null) {
        let all = |f: fn(&capability_core::manifest::Manifest) -> bool| {
            steps.iter().all(|s| f(s.capability.manifest()))
        };
        m.insert(
            "behavior".into(),
            json!({
                "deterministic": all(|x| x.is_deterministic()),
                "idempotent": all(|x| x.is_idempotent()),
                "reversible": false,
            }),
        );
    }

    // Contracts: the composite's input → the first step, step → step, last step → output.
    let id = m
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("composite")
        .to_string();
    let first_manifest = first.capability.manifest();
    if first.map_input.is_none() {
        if let Some(declared) = m.get("input").filter(|v| !v.is_null()) {
            check_link(
                contracts_compose(Some(declared), first_manifest.input.as_ref()),
                || {
                    format!(
                        "Composed steps do not compose: {id} \u{2192} {}",
                        first_manifest.id
                    )
                },
            )?;
        } else if let Some(schema) = &first_manifest.input {
            m.insert("input".into(), schema.clone());
        }
    }
    for pair in steps.windows(2) {
        if pair[1].map_input.is_some() {
            continue;
        }
        let (a, b) = (pair[0].capability.manifest(), pair[1].capability.manifest());
        check_link(
            contracts_compose(a.output.as_ref(), b.input.as_ref()),
            || format!("Composed steps do not compose: {} \u{2192} {}", a.id, b.id),
        )?;
    }
    if let Some(last) = steps.last() {
        let last_manifest = last.capability.manifest();
        if let Some(declared) = m.get("output").filter(|v| !v.is_null()) {
            check_link(
                contracts_compose(last_manifest.output.as_ref(), Some(declared)),
                || {
                    format!(
                        "Composed steps do not compose: {} \u{2192} {id}",
                        last_manifest.id
                    )
                },
            )?;
        } else if let Some(schema) = &last_manifest.output {
            m.insert("output".into(), schema.clone());
        }
    }

    let steps: Arc<[CompositionStep]> = steps.into();
    Capability::builder(Value::Object(m))
        .execute_json(move |input, ctx| run_steps(&steps, input, ctx))
        .build()
}

fn step_error(code: ErrorCode, message: String, details: Option<Value>) -> HookError {
    let mut e = CapabilityError::new(code, message);
    e.details = details;
    HookError::Capability(e)
}

fn run_steps(
    steps: &[CompositionStep],
    original: &Value,
    ctx: &ExecutionContext<'_>,
) -> HookResult<Value> {
    let mut value = original.clone();
    for step in steps {
        if ctx.cancel.is_cancelled() {
            return Err(HookError::named("AbortError", "The operation was aborted"));
        }
        let capability = &step.capability;
        let input = match &step.map_input {
            Some(map) => {
                let mut mapped = map(&value, original);
                normalize_numbers(&mut mapped);
                mapped
            }
            None => value,
        };
        value = run_step(capability, &input, ctx)?;
    }
    Ok(value)
}

fn run_step(
    capability: &Arc<Capability>,
    input: &Value,
    ctx: &ExecutionContext<'_>,
) -> HookResult<Value> {
    let id = capability.id();
    let issues = capability.validate_input(input);
    if !issues.is_empty() {
        return Err(step_error(
            ErrorCode::InvalidInput,
            format!("Input of composed step {id} failed schema validation"),
            serde_json::to_value(issues).ok(),
        ));
    }
    let Some(hooks) = capability.hooks() else {
        return Err(step_error(
            ErrorCode::ExecutionFailed,
            format!("Composed step {id} has no in-process implementation"),
            None,
        ));
    };
    let step_ctx = ExecutionContext {
        manifest: capability.manifest(),
        ..*ctx
    };
    let mut output = execute_hook(hooks, capability, input, &step_ctx)?;
    normalize_numbers(&mut output);
    let issues = capability.validate_output(&output);
    if !issues.is_empty() {
        return Err(step_error(
            ErrorCode::InvalidOutput,
            format!("Output of composed step {id} failed schema validation"),
            serde_json::to_value(issues).ok(),
        ));
    }
    if let Some(verify) = &hooks.verify {
        let verification = verify(input, &output, &step_ctx)?;
        if !verification.ok {
            let message = verification
                .message
                .unwrap_or_else(|| "Capability verification failed".into());
            return Err(step_error(
                ErrorCode::VerifyFailed,
                format!("Composed step {id}: {message}"),
                None,
            ));
        }
    }
    Ok(output)
}

fn execute_hook(
    hooks: &Hooks,
    capability: &Capability,
    input: &Value,
    ctx: &ExecutionContext<'_>,
) -> HookResult<Value> {
    match &hooks.execute {
        ExecuteHook::Sync(f) => f(input, ctx),
        ExecuteHook::Async(f) => {
            let actx = AsyncContext {
                capability_id: capability.id().to_string(),
                approved: ctx.approved,
                metadata: ctx.metadata.cloned(),
                cancel: ctx.cancel.clone(),
            };
            crate::executor::block_on(f(input.clone(), actx), None, ctx.cancel)?
        }
    }
}

// ---------------------------------------------------------------------------------------
// Runtime pipelines
// ---------------------------------------------------------------------------------------

/// The result of [`run_pipeline`]: `{output, receipts}` (one receipt id per step).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineRun {
    pub output: Value,
    pub receipts: Vec<String>,
}

/// Runs capabilities in sequence through the runtime (the reference `runPipeline`): each
/// step is planned, authorized, executed and receipted by [`CapabilityRuntime::invoke`] with
/// `options`, and its output is the next step's input. Fails before running anything when
/// an id is unknown (`NOT_FOUND`) or consecutive contracts contradict each other
/// (`INVALID_PLAN`); a failing step stops the pipeline with that step's error. An empty
/// pipeline returns its input.
pub fn run_pipeline<S: AsRef<str>>(
    runtime: &CapabilityRuntime,
    ids: &[S],
    input: Value,
    options: &ExecuteOptions,
) -> Result<PipelineRun, CapabilityError> {
    let capabilities = ids
        .iter()
        .map(|id| runtime.registry().require(id.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    for pair in capabilities.windows(2) {
        let (a, b) = (pair[0].manifest(), pair[1].manifest());
        let check = contracts_compose(a.output.as_ref(), b.input.as_ref());
        if !check.compatible {
            return Err(CapabilityError::new(
                ErrorCode::InvalidPlan,
                format!(
                    "Pipeline steps do not compose: {} \u{2192} {}: {}",
                    a.id, b.id, check.reason
                ),
            ));
        }
    }
    let mut value = input;
    let mut receipts = Vec::with_capacity(ids.len());
    for capability in &capabilities {
        let receipt = runtime.invoke(capability.id(), value, options)?;
        receipts.push(receipt.receipt_id.clone());
        value = receipt.output.clone().unwrap_or(Value::Null);
    }
    Ok(PipelineRun {
        output: value,
        receipts,
    })
}

/// A JSON object view of a plan (`{intent, stepIds, compatible, reasons, effects}`), the
/// compact form used in reports and the golden vectors.
pub fn plan_summary(plan: &CompositionPlan) -> Value {
    let mut m = Map::new();
    m.insert("intent".into(), json!(plan.intent));
    m.insert("stepIds".into(), json!(plan.step_ids()));
    m.insert("compatible".into(), json!(plan.compatible));
    m.insert("reasons".into(), json!(plan.reasons));
    m.insert("effects".into(), json!(plan.effects));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_examples_from_the_reference() {
        assert_eq!(split_pipeline_intent("a and then b"), ["a", "b"]);
        assert_eq!(
            split_pipeline_intent("a -> b \u{2192} c |> d"),
            ["a", "b", "c", "d"]
        );
        assert_eq!(split_pipeline_intent("athen b"), ["athen b"]);
        assert_eq!(split_pipeline_intent("a |>> b"), ["a", "> b"]);
        assert!(split_pipeline_intent("->").is_empty());
    }

    #[test]
    fn intent_fit_matches_the_forge_examples() {
        let fit = assess_native_intent_fit(
            "convert separated text to camel case",
            "text/normalize",
            "Normalize Text",
            "Normalize whitespace, surrounding space, and letter case in text without network or filesystem access.",
        );
        assert!(!fit.accepted);
        assert!(fit.missing.contains(&"camel".to_string()));
        let fit = assess_native_intent_fit(
            "slugify text",
            "text/slugify",
            "Slugify Text",
            "Turn text into a URL slug.",
        );
        assert!(fit.accepted);
        assert_eq!(fit.coverage, 1.0);
        assert_eq!(
            assess_native_intent_fit("a the", "x", "y", "z").coverage,
            0.0
        );
    }
}
