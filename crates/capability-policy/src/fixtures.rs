//! The policy fixture runner behind `cap policy test <policy files...> --fixtures <file.json>`.
//!
//! A fixture file is a JSON array of cases:
//!
//! ```json
//! [{
//!   "name": "refund under the limit is allowed",
//!   "action": {
//!     "capability": "refund_customer", "actionType": "tool_call", "agentId": "support-agent",
//!     "tenant": "acme", "scopes": ["refunds:create"], "environment": "prod",
//!     "input": {"amount_usd": 50}
//!   },
//!   "expect": "allow"
//! }]
//! ```
//!
//! `action.output` (optional) makes the case an `after_capability` evaluation; otherwise it is
//! `before_capability`. Optional extras: `stage`, `principal`, `labels`, `costSoFarUsd`,
//! `estimatedCostUsd`, and `governance` (a `metadata.governance` object, see [`crate::model`]).
//! `expect` is the combined decision ([`crate::engine::Verdict::kind`]). Action defaults:
//! `environment` `dev`, no tenant, no scopes, `input` `{}`, `costSoFarUsd` 0.
//!
//! # Which capability a case sees
//!
//! * `action.governance` given: the capability is `action.capability` with that governance
//!   (it replaces a registered one), and [`CAPABILITY_DEFAULTS`] for the attributes it leaves
//!   out.
//! * otherwise a registered capability of that name: its registered governance, no defaults.
//! * otherwise (a capability no registry knows, as in the example above): that name with
//!   every attribute from [`CAPABILITY_DEFAULTS`].
//!
//! The defaults, as the Cedar resource sees them: `kind` `"tool"`, `risk` `"low"`
//! (`riskLevel` 1), `effects` `[]`, `scopes` `[]`, and `owner`, `dataNamespace`, `tenant`,
//! `environment` `""`; no input schema either, so integers in `input` are Cedar `Long`s
//! (give `governance.inputSchema` with `"type": "number"` to compare them as `decimal`). A
//! case that used any of them says so in the report ([`FixtureResult::defaults`]), on a
//! `  defaults: ...` line under the case.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::action::{ActionType, AgentAction};
use crate::decision::DecisionType;
use crate::engine::{EngineError, PolicyEngine};
use crate::model::{CapabilityKind, Environment, Governance, GovernedCapability, ModelError};
use crate::policy::{PolicyContext, Stage};
use crate::registry::CapabilityRegistry;

/// Failures reading a fixture file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FixtureError {
    #[error("cannot read `{path}`: {message}")]
    Io { path: String, message: String },
    #[error("`{path}`: {message}")]
    Json { path: String, message: String },
    #[error("`{path}`: fixture {index} (`{name}`): {message}")]
    Case {
        path: String,
        index: usize,
        name: String,
        message: String,
    },
}

/// The action part of a fixture.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureAction {
    pub capability: String,
    pub action_type: ActionType,
    pub agent_id: String,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub environment: Option<Environment>,
    #[serde(default)]
    pub input: Option<Value>,
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default)]
    pub stage: Option<Stage>,
    #[serde(default)]
    pub principal: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub cost_so_far_usd: Option<f64>,
    #[serde(default)]
    pub estimated_cost_usd: Option<f64>,
    #[serde(default)]
    pub governance: Option<Value>,
}

/// One fixture case.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    pub name: String,
    pub action: FixtureAction,
    pub expect: DecisionType,
}

/// Reads a fixture file (a JSON array of cases).
pub fn load_fixtures(path: &Path) -> Result<Vec<Fixture>, FixtureError> {
    let name = path.display().to_string();
    let text = std::fs::read(path).map_err(|e| FixtureError::Io {
        path: name.clone(),
        message: e.to_string(),
    })?;
    parse_fixtures(&text, &name)
}

/// Parses fixture JSON; `name` labels errors.
pub fn parse_fixtures(text: &[u8], name: &str) -> Result<Vec<Fixture>, FixtureError> {
    let v = capability_core::json::parse(text).map_err(|e| FixtureError::Json {
        path: name.to_string(),
        message: e.to_string(),
    })?;
    let Value::Array(items) = v else {
        return Err(FixtureError::Json {
            path: name.to_string(),
            message: "expected a JSON array of fixtures".into(),
        });
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let case_name = item
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            serde_json::from_value::<Fixture>(item).map_err(|e| FixtureError::Case {
                path: name.to_string(),
                index: i + 1,
                name: case_name,
                message: e.to_string(),
            })
        })
        .collect()
}

/// The result of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct FixtureResult {
    pub name: String,
    pub stage: Stage,
    pub expected: DecisionType,
    /// The combined decision, or why the case could not run.
    pub actual: Result<DecisionType, CaseError>,
    pub reason: Option<String>,
    pub policy_ids: Vec<String>,
    /// The capability attributes that came from [`CAPABILITY_DEFAULTS`] (empty for a
    /// registered capability), in that table's order.
    pub defaults: Vec<&'static str>,
    /// The capability the case ran against.
    pub capability: String,
    /// Where its governance came from.
    pub source: CapabilitySource,
}

/// Why a fixture case could not run (the report shows it as the case's `error`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaseError {
    /// The case's `action.governance` is not a governance document.
    #[error(transparent)]
    Governance(#[from] ModelError),
    /// The engine could not evaluate the case.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Where a fixture's capability governance came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapabilitySource {
    /// The registry (no defaults).
    Registry,
    /// The fixture's `action.governance`, with defaults for what it leaves out.
    Fixture,
    /// Nothing: no registry knows the name, and the fixture gives no `governance`.
    Defaults,
}

/// The attributes of a capability that neither the registry nor the fixture describes:
/// (Cedar resource attribute, its default as the report prints it, the `metadata.governance`
/// fields that set it).
pub const CAPABILITY_DEFAULTS: [(&str, &str, &[&str]); 8] = [
    ("kind", "tool", &["kind"]),
    ("risk", "low", &["risk"]),
    ("effects", "[]", &["effect", "sideEffects"]),
    ("scopes", "[]", &["scopes"]),
    ("owner", "\"\"", &["owner"]),
    ("dataNamespace", "\"\"", &["dataNamespace"]),
    ("tenant", "\"\"", &["tenant"]),
    ("environment", "\"\"", &["environment"]),
];

impl FixtureResult {
    pub fn passed(&self) -> bool {
        self.actual.as_ref().is_ok_and(|a| *a == self.expected)
    }

    /// `  defaults: kind=tool, ... (`x` is not registered)` when defaults were used.
    fn render_defaults(&self, out: &mut String) {
        if self.defaults.is_empty() {
            return;
        }
        let used: Vec<String> = CAPABILITY_DEFAULTS
            .iter()
            .filter(|(name, _, _)| self.defaults.contains(name))
            .map(|(name, value, _)| format!("{name}={value}"))
            .collect();
        let _ = write!(out, "  defaults: {}", used.join(", "));
        if self.source == CapabilitySource::Defaults {
            let _ = write!(out, " (`{}` is not registered)", self.capability);
        }
        out.push('\n');
    }
}

/// All results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FixtureReport {
    pub results: Vec<FixtureResult>,
}

impl FixtureReport {
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed()).count()
    }
    pub fn failed(&self) -> usize {
        self.results.len() - self.passed()
    }
    /// Every case matched.
    pub fn ok(&self) -> bool {
        self.failed() == 0
    }

    /// A readable report: one line per case, a diff under each failure, and a closing
    /// `N passed, M failed` line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for r in &self.results {
            if r.passed() {
                let _ = writeln!(out, "ok     {} ({}): {}", r.name, r.stage, r.expected);
                r.render_defaults(&mut out);
                continue;
            }
            let _ = writeln!(out, "FAILED {} ({})", r.name, r.stage);
            let _ = writeln!(out, "  - expected: {}", r.expected);
            match &r.actual {
                Ok(a) => {
                    let _ = writeln!(out, "  + actual:   {a}");
                }
                Err(e) => {
                    let _ = writeln!(out, "  + error:    {e}");
                }
            }
            if let Some(reason) = &r.reason {
                let _ = writeln!(out, "    reason:   {reason}");
            }
            let policies = if r.policy_ids.is_empty() {
                "(none matched)".to_string()
            } else {
                r.policy_ids.join(", ")
            };
            let _ = writeln!(out, "    policies: {policies}");
            r.render_defaults(&mut out);
        }
        let _ = writeln!(out, "{} passed, {} failed", self.passed(), self.failed());
        out
    }
}

/// The capability a fixture runs against, where it came from, and the attributes defaulted.
fn capability_for(
    a: &FixtureAction,
    registry: &CapabilityRegistry,
) -> Result<(Arc<GovernedCapability>, CapabilitySource, Vec<&'static str>), CaseError> {
    if let Some(g) = &a.governance {
        let governance = Governance::from_json(g, "action.governance")?;
        let given = |field: &&str| g.get(*field).is_some_and(|v| !v.is_null());
        let defaults = CAPABILITY_DEFAULTS
            .iter()
            .filter(|(_, _, fields)| !fields.iter().any(given))
            .map(|(name, _, _)| *name)
            .collect();
        let cap = GovernedCapability::with_governance(a.capability.clone(), governance);
        return Ok((Arc::new(cap), CapabilitySource::Fixture, defaults));
    }
    if let Some(cap) = registry.get(&a.capability) {
        return Ok((cap, CapabilitySource::Registry, Vec::new()));
    }
    let cap = GovernedCapability::new(a.capability.clone(), CapabilityKind::Tool);
    let defaults = CAPABILITY_DEFAULTS
        .iter()
        .map(|(name, _, _)| *name)
        .collect();
    Ok((Arc::new(cap), CapabilitySource::Defaults, defaults))
}

/// Runs one case.
pub fn run_fixture(
    engine: &PolicyEngine,
    registry: &CapabilityRegistry,
    f: &Fixture,
) -> FixtureResult {
    let a = &f.action;
    let stage = a.stage.unwrap_or(if a.output.is_some() {
        Stage::AfterCapability
    } else {
        Stage::BeforeCapability
    });
    let (cap, source, defaults) = match capability_for(a, registry) {
        Ok(found) => found,
        Err(e) => {
            return FixtureResult {
                name: f.name.clone(),
                stage,
                expected: f.expect,
                actual: Err(e),
                reason: None,
                policy_ids: Vec::new(),
                defaults: Vec::new(),
                capability: a.capability.clone(),
                source: CapabilitySource::Fixture,
            };
        }
    };
    let mut action = AgentAction::new(a.action_type, cap, a.agent_id.clone())
        .input(
            a.input
                .clone()
                .unwrap_or_else(|| Value::Object(Default::default())),
        )
        .scopes(a.scopes.iter().cloned());
    action.tenant_id.clone_from(&a.tenant);
    action.environment = a.environment.unwrap_or(Environment::Dev);
    action.principal_id.clone_from(&a.principal);
    action.labels.clone_from(&a.labels);
    action.cost_so_far_usd = a.cost_so_far_usd.unwrap_or(0.0);
    action.estimated_cost_usd = a.estimated_cost_usd;
    let mut ctx = PolicyContext::new(action, stage);
    ctx.output.clone_from(&a.output);
    let (actual, reason, policy_ids) = match engine.evaluate(&ctx) {
        Ok(v) => (Ok(v.kind), v.decision.reason.clone(), v.policy_ids()),
        Err(e) => (Err(e.into()), None, Vec::new()),
    };
    FixtureResult {
        name: f.name.clone(),
        stage,
        expected: f.expect,
        actual,
        reason,
        policy_ids,
        defaults,
        capability: a.capability.clone(),
        source,
    }
}

/// Runs every case.
pub fn run_fixtures(
    engine: &PolicyEngine,
    registry: &CapabilityRegistry,
    fixtures: &[Fixture],
) -> FixtureReport {
    FixtureReport {
        results: fixtures
            .iter()
            .map(|f| run_fixture(engine, registry, f))
            .collect(),
    }
}

/// The `cap policy test` entry point: loads the policy files and the fixtures, runs them
/// against a Cedar-only engine. `Ok(report)` even when cases fail (see
/// [`FixtureReport::ok`]).
pub fn test_policy_files<P: AsRef<Path>>(
    policy_paths: &[P],
    fixtures_path: &Path,
    registry: &CapabilityRegistry,
) -> Result<FixtureReport, TestFilesError> {
    let cedar = crate::cedar::CedarPolicies::from_paths(policy_paths)?;
    let fixtures = load_fixtures(fixtures_path)?;
    let engine = PolicyEngine::new();
    engine.add_source(Arc::new(cedar));
    Ok(run_fixtures(&engine, registry, &fixtures))
}

/// Why [`test_policy_files`] could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TestFilesError {
    #[error(transparent)]
    Cedar(#[from] crate::cedar::CedarError),
    #[error(transparent)]
    Fixtures(#[from] FixtureError),
}
