//! The policy engine: runs every matching policy, combines their decisions into a
//! [`Verdict`], and optionally only records what it would have enforced (shadow mode).
//!
//! The combination rules are documented in the crate root ("How decisions combine").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::decision::{Decision, DecisionType, SandboxRequirement};
use crate::pointer::Mutation;
use crate::policy::{Policy, PolicyContext, PolicyFault, Stage};

/// A decision with the priority it was produced at, from a [`PolicySource`].
#[derive(Clone, Debug)]
pub struct RankedDecision {
    pub priority: i64,
    pub decision: Decision,
}

/// A set of policies that is not a list of closures (Cedar files, a remote service): given
/// a context, it returns the decisions of its matching policies, in its own order.
pub trait PolicySource: Send + Sync {
    /// A name for errors and audit (`cedar`).
    fn name(&self) -> &str;
    /// The decisions of the matching policies (annotated with policy id/name).
    fn decide(&self, ctx: &PolicyContext) -> Result<SourceDecisions, PolicyFault>;
    /// Whether its decisions are a function of the context alone (not of the time, of
    /// counters or of anything outside), so that a decision may be kept for as long as the
    /// engine's [`PolicyEngine::generation`] stays the same. `false` unless said.
    fn deterministic(&self) -> bool {
        false
    }
}

/// A source that applies only to actions of one tenant (per-tenant policy files): for any
/// other tenant it decides nothing.
pub struct ForTenant {
    tenant: String,
    name: String,
    inner: Arc<dyn PolicySource>,
}

impl ForTenant {
    pub fn new(tenant: impl Into<String>, inner: Arc<dyn PolicySource>) -> Self {
        let tenant = tenant.into();
        let name = format!("{}@{tenant}", inner.name());
        ForTenant {
            tenant,
            name,
            inner,
        }
    }
}

impl PolicySource for ForTenant {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide(&self, ctx: &PolicyContext) -> Result<SourceDecisions, PolicyFault> {
        if ctx.action.tenant_id.as_deref() == Some(self.tenant.as_str()) {
            self.inner.decide(ctx)
        } else {
            Ok(SourceDecisions::default())
        }
    }

    fn deterministic(&self) -> bool {
        self.inner.deterministic()
    }
}

/// What a [`PolicySource`] returns.
#[derive(Clone, Debug, Default)]
pub struct SourceDecisions {
    pub decisions: Vec<RankedDecision>,
    /// Evaluation problems that did not stop the source (e.g. a Cedar policy that errored
    /// and was skipped).
    pub errors: Vec<String>,
}

/// What enforcement must do besides allowing or refusing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Obligations {
    /// Mutations to apply to the input before execution (then re-validate, re-plan).
    pub input_mutations: Vec<Mutation>,
    /// Mutations to apply to the output, before redaction.
    pub output_mutations: Vec<Mutation>,
    /// JSON pointers to mask in the output and in the audit record.
    pub redact: Vec<String>,
    /// The capability to use instead (authorized again).
    pub route_to: Option<String>,
    /// The isolation the execution needs.
    pub sandbox: Option<SandboxRequirement>,
}

impl Obligations {
    /// The JSON form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "inputMutations": self.input_mutations.iter().map(Mutation::to_json).collect::<Vec<_>>(),
            "outputMutations": self.output_mutations.iter().map(Mutation::to_json).collect::<Vec<_>>(),
            "redact": self.redact,
            "routeTo": self.route_to,
            "sandbox": self.sandbox.as_ref().map(SandboxRequirement::to_json),
        })
    }

    /// No obligation at all.
    pub fn is_empty(&self) -> bool {
        self == &Obligations::default()
    }

    /// Adds the output obligations of `other` (used to carry before-stage redactions and
    /// output transforms into the after stage).
    pub fn extend_output(&mut self, other: &Obligations) {
        self.output_mutations
            .extend(other.output_mutations.iter().cloned());
        for p in &other.redact {
            if !self.redact.contains(p) {
                self.redact.push(p.clone());
            }
        }
    }
}

/// What enforcing decisions would have done, recorded in shadow mode.
#[derive(Clone, Debug, PartialEq)]
pub struct Shadowed {
    pub kind: DecisionType,
    pub decision: Decision,
    pub obligations: Obligations,
}

/// The combined result of one stage's policies.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub stage: Stage,
    /// What to enforce: `deny`, `approval_required`, or an allowing type (`allow`, or the
    /// most significant obligation: `route`, `sandbox`, `transform_input`,
    /// `transform_output`, `redact`).
    pub kind: DecisionType,
    /// The reported decision (see the crate docs for which one is reported).
    pub decision: Decision,
    /// Every decision, in evaluation order (`log_only` ones included).
    pub decisions: Vec<Decision>,
    pub obligations: Obligations,
    /// `Some` in shadow mode: what enforcement would have done.
    pub shadow: Option<Shadowed>,
    /// Whether a granted approval satisfied `approval_required` decisions.
    pub approval_satisfied: bool,
    /// Non-fatal evaluation problems (e.g. Cedar policies that errored and were skipped).
    pub errors: Vec<String>,
}

impl Verdict {
    /// `deny`.
    pub fn is_denied(&self) -> bool {
        self.kind == DecisionType::Deny
    }
    /// `approval_required`.
    pub fn requires_approval(&self) -> bool {
        self.kind == DecisionType::ApprovalRequired
    }
    /// Execution may proceed (with the obligations).
    pub fn allows(&self) -> bool {
        !self.is_denied() && !self.requires_approval()
    }
    /// What a receipt records of this verdict: the decision, its id, the policies, the
    /// reason.
    pub fn summary(&self) -> capability_core::receipt::VerdictSummary {
        capability_core::receipt::VerdictSummary {
            decision: self.kind.as_str().into(),
            decision_id: Some(self.decision.decision_id.clone()),
            policy_ids: self.policy_ids(),
            reason: self.decision.reason.clone(),
            details: None,
        }
    }

    /// The JSON form (for receipts, the CLI and HTTP answers).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "stage": self.stage.as_str(),
            "kind": self.kind.as_str(),
            "decision": self.decision.to_json(),
            "decisions": self.decisions.iter().map(Decision::to_json).collect::<Vec<_>>(),
            "obligations": self.obligations.to_json(),
            "shadow": self.shadow.as_ref().map(|s| serde_json::json!({
                "kind": s.kind.as_str(),
                "decision": s.decision.to_json(),
                "obligations": s.obligations.to_json(),
            })),
            "approvalSatisfied": self.approval_satisfied,
            "policyIds": self.policy_ids(),
            "errors": self.errors,
        })
    }

    /// Ids of the policies that returned a decision, in order, without duplicates.
    pub fn policy_ids(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for d in &self.decisions {
            if let Some(id) = &d.policy_id
                && !out.contains(id)
            {
                out.push(id.clone());
            }
        }
        out
    }
}

/// Engine-level failures (there are few: policy failures deny instead).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// A policy source could not evaluate at all.
    #[error("policy source `{source_name}` failed: {message}")]
    Source {
        source_name: String,
        message: String,
    },
}

/// Decisions valid in each stage; anything else is refused (fail closed).
pub fn decision_valid_in(kind: DecisionType, stage: Stage) -> bool {
    use DecisionType as D;
    match stage {
        Stage::BeforeCapability => true,
        Stage::AfterCapability => matches!(
            kind,
            D::Allow | D::Deny | D::Redact | D::TransformOutput | D::LogOnly
        ),
        Stage::OnError => matches!(kind, D::Allow | D::Deny | D::LogOnly),
    }
}

/// Runs closure policies and policy sources and combines their decisions.
#[derive(Default)]
pub struct PolicyEngine {
    policies: RwLock<Vec<Arc<Policy>>>,
    sources: RwLock<Vec<Arc<dyn PolicySource>>>,
    shadow: AtomicBool,
    /// Bumped by every change to the policies, the sources or the shadow mode.
    changes: AtomicU64,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("policies", &self.policies().len())
            .field("shadow", &self.shadow_mode())
            .finish_non_exhaustive()
    }
}

impl PolicyEngine {
    /// An engine with no policies (it allows everything).
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a closure policy and returns its id.
    pub fn register(&self, policy: Policy) -> String {
        let id = policy.id.clone();
        write(&self.policies).push(Arc::new(policy));
        self.changed();
        id
    }

    /// Registers a policy source (such as a [`crate::cedar::CedarPolicies`]).
    pub fn add_source(&self, source: Arc<dyn PolicySource>) {
        write(&self.sources).push(source);
        self.changed();
    }

    /// Removes every policy source (e.g. before loading new Cedar files).
    pub fn clear_sources(&self) {
        write(&self.sources).clear();
        self.changed();
    }

    /// Removes a closure policy by id; returns whether it existed.
    pub fn unregister(&self, policy_id: &str) -> bool {
        let mut list = write(&self.policies);
        let before = list.len();
        list.retain(|p| p.id != policy_id);
        let removed = list.len() != before;
        drop(list);
        if removed {
            self.changed();
        }
        removed
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// While every decision is a function of the context alone (no closure policy, every
    /// source [`PolicySource::deterministic`]): a number that changes whenever the
    /// policies, the sources or the shadow mode do. A caller that keeps decisions (a
    /// per-caller tool listing) may reuse them while this stays the same; `None` means
    /// that no decision may be kept.
    pub fn generation(&self) -> Option<u64> {
        let before = self.changes.load(Ordering::Acquire);
        let pure = read(&self.policies).is_empty()
            && read(&self.sources).iter().all(|s| s.deterministic());
        (pure && self.changes.load(Ordering::Acquire) == before).then_some(before)
    }

    /// The closure policies, in registration order.
    pub fn policies(&self) -> Vec<Arc<Policy>> {
        read(&self.policies).clone()
    }

    /// Global shadow mode: evaluate everything, enforce nothing, record what would have
    /// happened in [`Verdict::shadow`].
    pub fn set_shadow_mode(&self, on: bool) {
        if self.shadow.swap(on, Ordering::Relaxed) != on {
            self.changed();
        }
    }

    pub fn shadow_mode(&self) -> bool {
        self.shadow.load(Ordering::Relaxed)
    }

    /// The closure policies that apply to the action at the stage, by ascending priority
    /// (stable).
    pub fn matching_policies(&self, ctx: &PolicyContext) -> Vec<Arc<Policy>> {
        let mut out: Vec<Arc<Policy>> = read(&self.policies)
            .iter()
            .filter(|p| p.applies(&ctx.action.capability.name, ctx.stage))
            .cloned()
            .collect();
        out.sort_by_key(|p| p.priority);
        out
    }

    /// Evaluates every matching policy at `ctx.stage` and combines the decisions.
    pub fn evaluate(&self, ctx: &PolicyContext) -> Result<Verdict, EngineError> {
        let mut ranked: Vec<(i64, usize, Decision)> = Vec::new();
        let mut order = 0usize;
        for policy in self.matching_policies(ctx) {
            let decision = match policy.call(ctx) {
                Ok(d) => policy.annotate(d),
                Err(fault) => policy.annotate(
                    Decision::deny(format!(
                        "policy `{}` failed: {}",
                        policy.display_name(),
                        fault.message
                    ))
                    .with_code("policy_error"),
                ),
            };
            ranked.push((policy.priority, order, decision));
            order += 1;
        }
        let mut errors = Vec::new();
        let sources = read(&self.sources);
        for source in sources.iter() {
            let out = source.decide(ctx).map_err(|f| EngineError::Source {
                source_name: source.name().to_string(),
                message: f.message,
            })?;
            for r in out.decisions {
                ranked.push((r.priority, order, r.decision));
                order += 1;
            }
            errors.extend(out.errors);
        }
        drop(sources);
        ranked.sort_by_key(|(p, o, _)| (*p, *o));
        let decisions = ranked
            .into_iter()
            .map(|(_, _, mut d)| {
                if d.action_id.is_none() {
                    d.action_id = Some(ctx.action.action_id.clone());
                }
                if decision_valid_in(d.kind, ctx.stage) {
                    d
                } else {
                    let mut deny = Decision::deny(format!(
                        "policy `{}` returned `{}`, which is not valid at stage {}",
                        d.policy_name.as_deref().unwrap_or("?"),
                        d.kind,
                        ctx.stage
                    ))
                    .with_code("invalid_decision");
                    deny.policy_id = d.policy_id;
                    deny.policy_name = d.policy_name;
                    deny.policy_version = d.policy_version;
                    deny.action_id = d.action_id;
                    deny
                }
            })
            .collect::<Vec<_>>();
        let mut verdict = combine(ctx, decisions);
        verdict.errors = errors;
        if self.shadow_mode() {
            verdict = into_shadow(verdict);
        }
        Ok(verdict)
    }
}

fn read<T: Clone>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    match lock.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Precedence of the reported decision among allowing types.
const OBLIGATION_ORDER: [DecisionType; 5] = [
    DecisionType::Route,
    DecisionType::Sandbox,
    DecisionType::TransformInput,
    DecisionType::TransformOutput,
    DecisionType::Redact,
];

/// Combines decisions that are already in evaluation order (see the crate docs).
pub fn combine(ctx: &PolicyContext, decisions: Vec<Decision>) -> Verdict {
    let stage = ctx.stage;
    let approved = ctx.approval.is_some();
    let synthetic = || {
        let mut d = Decision::allow();
        d.action_id = Some(ctx.action.action_id.clone());
        d
    };
    let enforced = |d: &&Decision| {
        d.kind != DecisionType::LogOnly && !(approved && d.kind == DecisionType::ApprovalRequired)
    };

    let first_of = |kind: DecisionType| decisions.iter().find(|d| d.kind == kind).cloned();
    let approval_satisfied = approved
        && decisions
            .iter()
            .any(|d| d.kind == DecisionType::ApprovalRequired);

    let mut obligations = Obligations::default();
    for d in decisions.iter().filter(enforced) {
        match d.kind {
            DecisionType::TransformInput => {
                obligations
                    .input_mutations
                    .extend(d.mutations.iter().cloned());
            }
            DecisionType::TransformOutput => {
                obligations
                    .output_mutations
                    .extend(d.mutations.iter().cloned());
            }
            DecisionType::Redact => {
                for p in &d.redact {
                    if !obligations.redact.contains(p) {
                        obligations.redact.push(p.clone());
                    }
                }
            }
            DecisionType::Route if obligations.route_to.is_none() => {
                obligations.route_to.clone_from(&d.route_to);
            }
            DecisionType::Sandbox => {
                let req = d.sandbox.clone().unwrap_or_default();
                obligations.sandbox = Some(match &obligations.sandbox {
                    Some(prev) => prev.merge(&req),
                    None => req,
                });
            }
            _ => {}
        }
    }

    let (kind, decision) = if let Some(deny) = first_of(DecisionType::Deny) {
        (DecisionType::Deny, deny)
    } else if let Some(approval) = (!approved)
        .then(|| first_of(DecisionType::ApprovalRequired))
        .flatten()
    {
        (DecisionType::ApprovalRequired, approval)
    } else if let Some(d) = OBLIGATION_ORDER.iter().find_map(|k| first_of(*k)) {
        (d.kind, d)
    } else if let Some(last_allow) = decisions
        .iter()
        .rev()
        .find(|d| d.kind == DecisionType::Allow)
    {
        (DecisionType::Allow, last_allow.clone())
    } else {
        (DecisionType::Allow, synthetic())
    };
    if kind == DecisionType::Deny || kind == DecisionType::ApprovalRequired {
        // Nothing executes, so no obligation applies.
        obligations = Obligations::default();
    }
    Verdict {
        stage,
        kind,
        decision,
        decisions,
        obligations,
        shadow: None,
        approval_satisfied,
        errors: Vec::new(),
    }
}

fn into_shadow(v: Verdict) -> Verdict {
    let would = Shadowed {
        kind: v.kind,
        decision: v.decision.clone(),
        obligations: v.obligations.clone(),
    };
    let mut allow = Decision::allow()
        .with_reason(format!("shadow mode: would have been {}", v.kind))
        .with_code("shadow");
    allow.action_id.clone_from(&v.decision.action_id);
    Verdict {
        stage: v.stage,
        kind: DecisionType::Allow,
        decision: allow,
        decisions: v.decisions,
        obligations: Obligations::default(),
        shadow: Some(would),
        approval_satisfied: v.approval_satisfied,
        errors: v.errors,
    }
}
