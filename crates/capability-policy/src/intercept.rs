//! Interception of any agent action, executed by the runtime or not (a model call, a memory
//! write): before policies → execute → after policies → on_error policies on failure, with an
//! audit event for every decision and outcome.
//!
//! [`Governor`] is the Rust counterpart of Brane's `Runtime`: it holds the agent's defaults
//! (agent id, tenant, environment, principal, granted scopes), a [`CapabilityRegistry`], a
//! [`PolicyEngine`], an [`AuditSink`] and optionally an [`ApprovalManager`].
//!
//! Flow of [`Governor::intercept`] (mode [`InterceptMode::Lifecycle`], the default):
//!
//! 1. Resolve the capability by name (unknown → [`InterceptError::NotFound`], no audit) and
//!    build the [`AgentAction`].
//! 2. If the request carries an approval token, verify it against the action (signature,
//!    plan fingerprint, action digest, expiry, status), reading the approval record once. A
//!    token already verified by the host ([`InterceptRequest::verified_approval`]) is not
//!    decoded again. A bad token is audited as `denied_before_execution` and refused.
//! 3. Before policies. `deny` → audit `denied_before_execution`, refuse.
//!    `approval_required` → create (or find) the pending approval, audit
//!    `approval_required`, refuse with the approval. Otherwise the token (if any) is consumed,
//!    input mutations are applied, a `route` re-resolves and re-authorizes the target (up to
//!    [`MAX_ROUTE_DEPTH`] hops), and an `allowed` event is audited.
//! 4. Execute (the closure receives the final capability, input and sandbox requirement).
//!    Failure → `on_error` policies (observers), audit `execution_failed` with `error_type` and
//!    `error_message`, return the original error.
//! 5. After policies on the output. `deny` → audit `denied_after_execution` (the side effect
//!    happened; the output is withheld). Otherwise output mutations then redactions (from both
//!    stages) are applied, and `executed` is audited.
//!
//! [`InterceptMode::AfterOnly`] skips step 3 (Brane's `after_capability` request stage).
//!
//! A request with [`InterceptRequest::single_event`] is audited with exactly one event: the
//! `allowed` events of step 3 are not written, and the event of the outcome (executed,
//! failed, denied after execution) carries what they said: `metadata.decisions.before`
//! (the before-stage decision type, reason, policy name and policy ids), and
//! `metadata.decisions.after` when after-stage policies decided something; `policy_ids`
//! lists both stages', `shadow` keeps the before stage's would-be decision, and
//! `metadata.routedFrom` the capabilities a `route` moved the call from. A refusal (denied,
//! approval required, a bad token) is one event in either case. [`Governor::refuse`]
//! audits a call a surface refuses before the lifecycle (a quarantined tool, a limit).
//!
//! An approval is bound to the request as the agent made it (before transforms and routes),
//! and covers the capabilities that request is routed to.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::action::{ActionType, Actor, AgentAction};
use crate::approvals::{
    ApprovalError, ApprovalManager, ApprovalRecord, ApprovalRequest, VerifiedApproval,
    VerifiedToken,
};
use crate::audit::{AuditError, AuditEvent, AuditOutcome, AuditSink, NoopSink};
use crate::decision::{Decision, DecisionType, SandboxRequirement};
use crate::engine::{EngineError, Obligations, PolicyEngine, Verdict};
use crate::model::{Environment, GovernedCapability, Labels};
use crate::pointer::{self, Mutation, PointerError};
use crate::policy::{GrantedApproval, PolicyContext, Stage};
use crate::registry::{CapabilityNotFound, CapabilityRegistry};

/// Most `route` hops followed for one action.
pub const MAX_ROUTE_DEPTH: usize = 4;

/// Which stages a request goes through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InterceptMode {
    /// Before → execute → after (on_error on failure).
    #[default]
    Lifecycle,
    /// Execute → after only (Brane's `after_capability` request stage).
    AfterOnly,
}

/// A framework-independent request to use a capability. Unset fields take the governor's
/// defaults.
#[derive(Clone, Debug)]
pub struct InterceptRequest {
    pub capability: String,
    pub action_type: ActionType,
    pub input: Value,
    pub mode: InterceptMode,
    /// Who acts (unset fields take the governor's defaults; scopes add to its scopes).
    pub actor: Actor,
    pub trace_id: Option<String>,
    pub parent_action_id: Option<String>,
    pub input_summary: Option<String>,
    pub cost_so_far_usd: f64,
    pub estimated_cost_usd: Option<f64>,
    pub latency_so_far_ms: Option<u64>,
    pub labels: Labels,
    /// Becomes the action's metadata, the policies' runtime metadata and the audit metadata.
    pub metadata: Map<String, Value>,
    pub plan_fingerprint: Option<String>,
    pub receipt_id: Option<String>,
    /// A token from [`ApprovalManager::approve`], decoded by the governor.
    pub approval_token: Option<String>,
    /// A token the host already decoded with the governor's approval manager
    /// ([`ApprovalManager::decode`]): its signature is not checked again. When set,
    /// `approval_token` is not read.
    pub verified_approval: Option<VerifiedToken>,
    /// Record this request's input in the audit event of its outcome (executed, denied
    /// after execution), with the values the call's `redact` pointers point at masked (the
    /// governor's [`Governor::record_payloads`] does so for every request and event).
    pub record_input: bool,
    /// Audit this request with one event (see the module docs) instead of one per decision
    /// and outcome.
    pub single_event: bool,
}

impl InterceptRequest {
    pub fn new(capability: impl Into<String>, action_type: ActionType, input: Value) -> Self {
        InterceptRequest {
            capability: capability.into(),
            action_type,
            input,
            mode: InterceptMode::Lifecycle,
            actor: Actor::default(),
            trace_id: None,
            parent_action_id: None,
            input_summary: None,
            cost_so_far_usd: 0.0,
            estimated_cost_usd: None,
            latency_so_far_ms: None,
            labels: Labels::new(),
            metadata: Map::new(),
            plan_fingerprint: None,
            receipt_id: None,
            approval_token: None,
            verified_approval: None,
            record_input: false,
            single_event: false,
        }
    }

    pub fn mode(mut self, mode: InterceptMode) -> Self {
        self.mode = mode;
        self
    }
    /// Who acts (replaces any actor fields set before).
    pub fn actor(mut self, actor: Actor) -> Self {
        self.actor = actor;
        self
    }
    pub fn agent(mut self, agent_id: impl Into<String>) -> Self {
        self.actor.agent_id = Some(agent_id.into());
        self
    }
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.actor.tenant = Some(tenant.into());
        self
    }
    pub fn environment(mut self, environment: Environment) -> Self {
        self.actor.environment = Some(environment);
        self
    }
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.actor.principal_id = Some(principal.into());
        self
    }
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.actor.scopes.insert(scope.into());
        self
    }
    pub fn trace(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }
    pub fn parent(mut self, parent: impl Into<String>) -> Self {
        self.parent_action_id = Some(parent.into());
        self
    }
    pub fn label(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }
    pub fn meta(mut self, k: impl Into<String>, v: Value) -> Self {
        self.metadata.insert(k.into(), v);
        self
    }
    pub fn cost_so_far(mut self, usd: f64) -> Self {
        self.cost_so_far_usd = usd;
        self
    }
    pub fn estimated_cost(mut self, usd: f64) -> Self {
        self.estimated_cost_usd = Some(usd);
        self
    }
    pub fn plan_fingerprint(mut self, fp: impl Into<String>) -> Self {
        self.plan_fingerprint = Some(fp.into());
        self
    }
    pub fn receipt(mut self, receipt_id: impl Into<String>) -> Self {
        self.receipt_id = Some(receipt_id.into());
        self
    }
    pub fn approval_token(mut self, token: impl Into<String>) -> Self {
        self.approval_token = Some(token.into());
        self
    }
    /// A token already decoded ([`InterceptRequest::verified_approval`]).
    pub fn verified_approval(mut self, token: VerifiedToken) -> Self {
        self.verified_approval = Some(token);
        self
    }
    pub fn input_summary(mut self, s: impl Into<String>) -> Self {
        self.input_summary = Some(s.into());
        self
    }
    /// Audit the request with one event ([`InterceptRequest::single_event`]).
    pub fn single_event(mut self, on: bool) -> Self {
        self.single_event = on;
        self
    }
}

/// What the execute closure is given.
#[derive(Debug)]
pub struct Execution<'a> {
    /// The capability to run (the routed one after a `route`).
    pub capability: &'a GovernedCapability,
    /// The input after `transform_input`.
    pub input: &'a Value,
    /// Whether a `transform_input` changed the input the request carried.
    pub input_transformed: bool,
    /// The isolation required by `sandbox` decisions.
    pub sandbox: Option<&'a SandboxRequirement>,
    pub action: &'a AgentAction,
    notes: &'a RefCell<Map<String, Value>>,
}

impl Execution<'_> {
    /// Adds `key` to the metadata of the audit event that records the outcome (executed,
    /// failed or denied after execution): what only the execution knows, such as its
    /// latency.
    pub fn note(&self, key: impl Into<String>, value: Value) {
        self.notes.borrow_mut().insert(key.into(), value);
    }
}

/// A successful interception.
#[derive(Clone, Debug)]
pub struct InterceptResult {
    /// The executed action, with its (final) output.
    pub action: AgentAction,
    /// The before verdict (absent in after-only mode).
    pub before: Option<Verdict>,
    pub after: Verdict,
    /// The output after transformation and redaction.
    pub output: Value,
    /// The capabilities routed from, in order, when `route` decisions applied.
    pub routed_from: Vec<String>,
    pub approval: Option<GrantedApproval>,
    /// Ids of the audit events emitted, in order.
    pub events: Vec<String>,
}

impl InterceptResult {
    /// Brane's `allowed`.
    pub fn allowed(&self) -> bool {
        self.before.as_ref().is_none_or(Verdict::allows) && self.after.allows()
    }
}

/// What [`Governor::intercept_with`] returns: the result and what the execution produced,
/// or why no output is delivered ([`Interrupted`], with what ran where something did).
pub type Intercepted<T, E> = Result<(InterceptResult, T), Interrupted<T, E>>;

/// Why [`Governor::intercept_with`] delivered no output. Each case carries what exists at
/// that point: nothing ran, the execution failed (its own error), or it ran and its output
/// is withheld (what it produced).
#[derive(Debug)]
pub enum Interrupted<T, E> {
    /// Stopped before the execution, nothing ran: not found, denied or approval required
    /// before execution, a refused token, a failed input transform, a policy or audit
    /// failure. (`InterceptError::Execution` cannot occur here.)
    Refused(InterceptError<Infallible>),
    /// The execution failed: its own error, after the `on_error` stage.
    Failed {
        error: E,
        action: Box<AgentAction>,
        /// The `on_error` policies could not be evaluated, or the failure could not be
        /// audited.
        governance: Option<GovernanceFailure>,
    },
    /// The execution succeeded, then its output was withheld.
    Withheld {
        /// What the execution produced besides its output.
        executed: T,
        reason: OutputWithheld,
    },
}

impl<T, E> Interrupted<T, E> {
    /// The error [`Governor::intercept`] reports for this (what ran is dropped; a
    /// governance failure wins over the execution's error).
    pub fn into_error(self) -> InterceptError<E> {
        match self {
            Interrupted::Refused(e) => widen(e),
            Interrupted::Failed {
                error,
                action,
                governance: None,
            } => InterceptError::Execution { error, action },
            Interrupted::Failed {
                governance: Some(g),
                ..
            } => g.into(),
            Interrupted::Withheld { reason, .. } => reason.into(),
        }
    }
}

impl<T, E: std::fmt::Display> std::fmt::Display for Interrupted<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interrupted::Refused(e) => e.fmt(f),
            Interrupted::Failed {
                governance: Some(g),
                ..
            } => g.fmt(f),
            Interrupted::Failed { error, .. } => write!(f, "capability failed: {error}"),
            Interrupted::Withheld { reason, .. } => reason.fmt(f),
        }
    }
}

impl<T: std::fmt::Debug, E: std::fmt::Debug + std::fmt::Display> std::error::Error
    for Interrupted<T, E>
{
}

impl<T, E> From<InterceptError<Infallible>> for Interrupted<T, E> {
    fn from(e: InterceptError<Infallible>) -> Self {
        Interrupted::Refused(e)
    }
}

/// Why the output of an execution that succeeded is withheld.
#[derive(Debug, thiserror::Error)]
pub enum OutputWithheld {
    /// Denied by the after-stage policies (the side effect happened).
    #[error("{}", .0.decision.reason.as_deref().unwrap_or("capability invocation denied"))]
    Denied(Box<Denial>),
    /// An output transform could not apply.
    #[error("transform by policy failed: {0}")]
    Transform(#[source] PointerError),
    /// The after-stage policies could not be evaluated, or an event not written.
    #[error(transparent)]
    Governance(#[from] GovernanceFailure),
}

impl<E> From<OutputWithheld> for InterceptError<E> {
    fn from(w: OutputWithheld) -> Self {
        match w {
            OutputWithheld::Denied(d) => InterceptError::Denied(d),
            OutputWithheld::Transform(e) => InterceptError::Transform(e),
            OutputWithheld::Governance(g) => g.into(),
        }
    }
}

/// The governance itself failed: a policy could not be evaluated, or an audit event could
/// not be written.
#[derive(Debug, thiserror::Error)]
pub enum GovernanceFailure {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Audit(#[from] AuditError),
}

impl<E> From<GovernanceFailure> for InterceptError<E> {
    fn from(g: GovernanceFailure) -> Self {
        match g {
            GovernanceFailure::Engine(e) => InterceptError::Engine(e),
            GovernanceFailure::Audit(e) => InterceptError::Audit(e),
        }
    }
}

/// A refusal by policy.
#[derive(Clone, Debug)]
pub struct Denial {
    pub stage: Stage,
    /// The action (with its output for after-stage denials).
    pub action: AgentAction,
    pub decision: Decision,
    pub verdict: Option<Verdict>,
}

impl Denial {
    pub fn reason(&self) -> Option<&str> {
        self.decision.reason.as_deref()
    }
    pub fn policy_name(&self) -> Option<&str> {
        self.decision.policy_name.as_deref()
    }
    pub fn policy_version(&self) -> Option<&str> {
        self.decision.policy_version.as_deref()
    }
    pub fn action_id(&self) -> &str {
        &self.action.action_id
    }
}

/// Why an interception did not return an output.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError<E> {
    #[error(transparent)]
    NotFound(#[from] CapabilityNotFound),
    /// Denied by policy, before or after execution.
    #[error("{}", .0.decision.reason.as_deref().unwrap_or("capability invocation denied"))]
    Denied(Box<Denial>),
    /// A human must approve first; the pending approval is attached when an approval
    /// manager is configured.
    #[error("{}", approval_message(.approval.as_deref(), .decision))]
    ApprovalRequired {
        approval: Option<Box<ApprovalRecord>>,
        decision: Box<Decision>,
        action: Box<AgentAction>,
    },
    /// The approval token was refused.
    #[error("approval refused: {0}")]
    Approval(#[source] ApprovalError),
    /// The capability failed; the original error.
    #[error("capability failed: {error}")]
    Execution { error: E, action: Box<AgentAction> },
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// A transform could not apply; nothing ran (input) or the output is withheld.
    #[error("transform by policy failed: {0}")]
    Transform(#[from] PointerError),
}

fn approval_message(approval: Option<&ApprovalRecord>, d: &Decision) -> String {
    let reason = d.reason.as_deref().unwrap_or("approval required");
    match approval {
        Some(a) => format!("{reason} (pending approval `{}`)", a.approval_id),
        None => reason.to_string(),
    }
}

impl<E> InterceptError<E> {
    /// The denial, when this is one.
    pub fn denial(&self) -> Option<&Denial> {
        match self {
            InterceptError::Denied(d) => Some(d),
            _ => None,
        }
    }
}

/// Brane's runtime, for governed actions: defaults, registry, engine, audit, approvals.
pub struct Governor {
    pub agent_id: String,
    pub environment: Environment,
    pub tenant_id: Option<String>,
    pub principal_id: Option<String>,
    /// Scopes granted to the agent.
    pub scopes: BTreeSet<String>,
    registry: Arc<CapabilityRegistry>,
    engine: Arc<PolicyEngine>,
    audit: Arc<dyn AuditSink>,
    approvals: Option<Arc<ApprovalManager>>,
    record_payloads: bool,
}

impl std::fmt::Debug for Governor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governor")
            .field("agent_id", &self.agent_id)
            .field("environment", &self.environment)
            .field("tenant_id", &self.tenant_id)
            .finish_non_exhaustive()
    }
}

impl Governor {
    /// A governor for an agent (environment `dev`, no tenant, no audit).
    pub fn new(agent_id: impl Into<String>) -> Self {
        Governor {
            agent_id: agent_id.into(),
            environment: Environment::Dev,
            tenant_id: None,
            principal_id: None,
            scopes: BTreeSet::new(),
            registry: Arc::new(CapabilityRegistry::new()),
            engine: Arc::new(PolicyEngine::new()),
            audit: Arc::new(NoopSink),
            approvals: None,
            record_payloads: false,
        }
    }

    pub fn environment(mut self, environment: Environment) -> Self {
        self.environment = environment;
        self
    }
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant.into());
        self
    }
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal_id = Some(principal.into());
        self
    }
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scopes.insert(scope.into());
        self
    }
    pub fn registry(mut self, registry: Arc<CapabilityRegistry>) -> Self {
        self.registry = registry;
        self
    }
    pub fn engine(mut self, engine: Arc<PolicyEngine>) -> Self {
        self.engine = engine;
        self
    }
    pub fn audit(mut self, audit: Arc<dyn AuditSink>) -> Self {
        self.audit = audit;
        self
    }
    pub fn approvals(mut self, approvals: Arc<ApprovalManager>) -> Self {
        self.approvals = Some(approvals);
        self
    }
    /// Record the input and the (redacted) output in audit events.
    pub fn record_payloads(mut self, on: bool) -> Self {
        self.record_payloads = on;
        self
    }

    pub fn capabilities(&self) -> &Arc<CapabilityRegistry> {
        &self.registry
    }
    pub fn policies(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }
    pub fn approval_manager(&self) -> Option<&Arc<ApprovalManager>> {
        self.approvals.as_ref()
    }

    /// Registers a capability. Unset tenant and environment take the governor's (Brane's
    /// decorator semantics).
    pub fn register_capability(&self, mut cap: GovernedCapability) -> Arc<GovernedCapability> {
        if cap.governance.tenant.is_none() {
            cap.governance.tenant.clone_from(&self.tenant_id);
        }
        if cap.governance.environment.is_none() {
            cap.governance.environment = Some(self.environment);
        }
        self.registry.register(cap)
    }

    /// Builds the action for a request (Brane's `create_action`): the capability is resolved
    /// by name at call time; overrides win over the governor's defaults.
    pub fn create_action(&self, req: &InterceptRequest) -> Result<AgentAction, CapabilityNotFound> {
        let cap = self.registry.require(&req.capability)?;
        Ok(self.action_for(req, cap))
    }

    fn action_for(&self, req: &InterceptRequest, cap: Arc<GovernedCapability>) -> AgentAction {
        self.action_with_input(req, cap, req.input.clone())
    }

    /// [`Governor::action_for`] with the input given (taken out of the request).
    fn action_with_input(
        &self,
        req: &InterceptRequest,
        cap: Arc<GovernedCapability>,
        input: Value,
    ) -> AgentAction {
        let agent = req
            .actor
            .agent_id
            .clone()
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| self.agent_id.clone());
        let mut a = AgentAction::new(req.action_type, cap, agent).input(input);
        a.tenant_id = req.actor.tenant.clone().or_else(|| self.tenant_id.clone());
        a.environment = req.actor.environment.unwrap_or(self.environment);
        a.principal_id = req
            .actor
            .principal_id
            .clone()
            .or_else(|| self.principal_id.clone());
        if let Some(t) = &req.trace_id {
            a.trace_id.clone_from(t);
        }
        a.parent_action_id.clone_from(&req.parent_action_id);
        a.input_summary.clone_from(&req.input_summary);
        a.cost_so_far_usd = req.cost_so_far_usd;
        a.estimated_cost_usd = req.estimated_cost_usd;
        a.latency_so_far_ms = req.latency_so_far_ms;
        a.labels.clone_from(&req.labels);
        a.metadata.clone_from(&req.metadata);
        a.agent_scopes = self.scopes.union(&req.actor.scopes).cloned().collect();
        a.plan_fingerprint.clone_from(&req.plan_fingerprint);
        a
    }

    /// Evaluates policies for an action at a stage, without audit or execution.
    pub fn evaluate_action(
        &self,
        action: &AgentAction,
        stage: Stage,
        output: Option<Value>,
    ) -> Result<Verdict, EngineError> {
        let mut ctx = PolicyContext::new(action.clone(), stage);
        if let Some(o) = output {
            ctx.output = Some(o);
        }
        ctx.runtime_metadata.clone_from(&action.metadata);
        self.engine.evaluate(&ctx)
    }

    /// Creates the action for a request and evaluates it at a stage (no audit, no execution).
    pub fn evaluate(
        &self,
        req: &InterceptRequest,
        stage: Stage,
    ) -> Result<Verdict, InterceptError<std::convert::Infallible>> {
        let action = self.create_action(req)?;
        Ok(self.evaluate_action(&action, stage, None)?)
    }

    /// Audits a request that a surface refuses before any policy runs (a quarantined tool,
    /// a limit): one `denied_before_execution` event with `reason` and `code`. As for a
    /// denial by policy, the input is not recorded (no policy said what to redact in it).
    /// Returns the event's id.
    pub fn refuse(
        &self,
        req: &InterceptRequest,
        reason: &str,
        code: &str,
    ) -> Result<String, InterceptError<std::convert::Infallible>> {
        let action = self.create_action(req)?;
        let mut d = Decision::deny(reason).with_code(code);
        d.action_id = Some(action.action_id.clone());
        let ev = AuditEvent::new(
            &action,
            &d,
            Stage::BeforeCapability,
            AuditOutcome::DeniedBeforeExecution,
        );
        let mut events = Vec::new();
        self.emit(ev, req.receipt_id.as_ref(), &mut events)?;
        Ok(events.pop().unwrap_or_default())
    }

    /// Appends an event made outside the lifecycle (an embedding language's own audit
    /// sink) to the governor's audit sink, as it is.
    pub fn emit_event(&self, event: AuditEvent) -> Result<(), AuditError> {
        self.audit.emit_owned(event)
    }

    /// The input an event records: none unless `wanted`; the values the call's redactions
    /// (known so far) point at are masked in it too.
    fn recorded_input(wanted: bool, input: &Value, redact: &[String]) -> Option<Value> {
        if !wanted {
            return None;
        }
        let mut input = input.clone();
        for p in redact {
            let _ = pointer::redact(&mut input, p);
        }
        Some(input)
    }

    fn emit(
        &self,
        mut event: AuditEvent,
        receipt: Option<&String>,
        events: &mut Vec<String>,
    ) -> Result<(), AuditError> {
        if event.receipt_id.is_none() {
            event.receipt_id = receipt.cloned();
        }
        events.push(event.event_id.clone());
        self.audit.emit_owned(event)
    }

    /// Runs the whole governed lifecycle around `execute` (see the module docs).
    pub fn intercept<E, F>(
        &self,
        req: InterceptRequest,
        execute: F,
    ) -> Result<InterceptResult, InterceptError<E>>
    where
        E: std::fmt::Display,
        F: FnOnce(&Execution<'_>) -> Result<Value, E>,
    {
        self.intercept_with(req, |exec| execute(exec).map(|v| (v, ())))
            .map(|(result, ())| result)
            .map_err(Interrupted::into_error)
    }

    /// [`Governor::intercept`] for callers that need what the execution produced besides
    /// its output (a receipt's timing, the boundary crossed): `execute` returns the output
    /// and a value `T`, which comes back with the result, or in
    /// [`Interrupted::Withheld`] when the policies withheld the output afterwards (an
    /// after-stage denial, a failed transform, a governance failure still leave the
    /// evidence of what ran). An execution failure comes back as [`Interrupted::Failed`]
    /// with the closure's own error.
    pub fn intercept_with<T, E, F>(&self, req: InterceptRequest, execute: F) -> Intercepted<T, E>
    where
        E: std::fmt::Display,
        F: FnOnce(&Execution<'_>) -> Result<(Value, T), E>,
    {
        // The stages, in order (each a method of `Lifecycle`).
        let mut call = Lifecycle::start(self, req)?;
        call.verify_token()?;
        if call.req.mode == InterceptMode::Lifecycle {
            call = call.before()?;
        }
        call.redeem()?;
        let (call, raw, executed) = call.run(execute)?;
        match call.after(raw) {
            Ok(result) => Ok((result, executed)),
            Err(reason) => Err(Interrupted::Withheld { executed, reason }),
        }
    }

    /// Opens an action whose execution happens elsewhere ([`OpenAction`]): the lifecycle of
    /// [`Governor::intercept_with`] up to the execution (resolve, verify the token, the
    /// before stage with its routes, redeem the token). A refusal is audited and returned
    /// as it is by `intercept`.
    pub fn open(self: &Arc<Self>, req: InterceptRequest) -> Result<OpenAction, Refusal> {
        let mut call = Lifecycle::start(Arc::clone(self), req)?;
        call.verify_token()?;
        if call.req.mode == InterceptMode::Lifecycle {
            call = call.before()?;
        }
        call.redeem()?;
        Ok(OpenAction { call })
    }

    /// Wraps a function as a governed capability call (Brane's `wrap_capability`): each call
    /// runs the whole lifecycle, with `{"interceptor": "callable", "declaration": "wrapper"}`
    /// as metadata. The capability is looked up by name at each call.
    pub fn wrap<E, F>(
        self: &Arc<Self>,
        capability: &str,
        action_type: ActionType,
        f: F,
    ) -> impl Fn(Value) -> Result<Value, InterceptError<E>> + use<E, F>
    where
        E: std::fmt::Display,
        F: Fn(&Value) -> Result<Value, E>,
    {
        let governor = Arc::clone(self);
        let name = capability.to_string();
        move |input: Value| {
            let req = InterceptRequest::new(name.clone(), action_type, input)
                .meta("interceptor", json!("callable"))
                .meta("declaration", json!("wrapper"));
            governor
                .intercept(req, |exec: &Execution<'_>| f(exec.input))
                .map(|r| r.output)
        }
    }
}

/// An action the before stage allowed, executed by someone the governor cannot wait for
/// (another process, the far side of an HTTP request): [`Governor::open`] ran the lifecycle
/// up to the execution; [`OpenAction::complete`] runs the after stage on the output the
/// executor reports, [`OpenAction::fail`] the `on_error` stage on its error. Either ends
/// the action with its audited outcome; an open action that is dropped leaves none (close
/// it with `fail`, e.g. as abandoned).
pub struct OpenAction {
    call: Box<Lifecycle<Arc<Governor>>>,
}

impl std::fmt::Debug for OpenAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAction")
            .field("action_id", &self.call.action.action_id)
            .field("capability", &self.call.action.capability.name)
            .finish_non_exhaustive()
    }
}

impl OpenAction {
    /// The action to execute: the final capability (after routes) and input (after
    /// transforms).
    pub fn action(&self) -> &AgentAction {
        &self.call.action
    }
    /// The before stage's verdict (`None` in after-only mode).
    pub fn before(&self) -> Option<&Verdict> {
        self.call.before.as_ref()
    }
    /// The isolation `sandbox` decisions require.
    pub fn sandbox(&self) -> Option<&SandboxRequirement> {
        self.call.sandbox.as_ref()
    }
    /// The capabilities routed from, in order.
    pub fn routed_from(&self) -> &[String] {
        &self.call.routed_from
    }
    /// The verdicts that moved the action to another capability, one per hop.
    pub fn routes(&self) -> &[Verdict] {
        &self.call.routes
    }
    /// Whether a `transform_input` changed the input the request carried.
    pub fn input_transformed(&self) -> bool {
        self.call.input_transformed
    }
    /// The output pointers the after stage will mask (known so far: the before stage's).
    pub fn redactions(&self) -> &[String] {
        &self.call.output_obligations.redact
    }
    /// The approval the request's token redeemed.
    pub fn approval(&self) -> Option<&GrantedApproval> {
        self.call.approval.as_ref()
    }
    /// Ids of the audit events emitted so far.
    pub fn events(&self) -> &[String] {
        &self.call.events
    }
    /// Adds `key` to the metadata of the event that records the outcome (as
    /// [`Execution::note`]).
    pub fn note(&mut self, key: impl Into<String>, value: Value) {
        self.call.notes.insert(key.into(), value);
    }
    /// Names the receipt the events of the outcome link to.
    pub fn set_receipt(&mut self, receipt_id: impl Into<String>) {
        self.call.req.receipt_id = Some(receipt_id.into());
    }
    /// The after stage on the executor's output: the delivered output, or why it is
    /// withheld (the side effect happened).
    pub fn complete(self, output: Value) -> Result<InterceptResult, OutputWithheld> {
        self.call.after(output)
    }
    /// The `on_error` stage on the executor's error, audited as `execution_failed`.
    pub fn fail<E: std::fmt::Display>(self, error: E) -> Interrupted<(), E> {
        self.call.on_error(error)
    }
}

/// A refusal before anything ran: every [`InterceptError`] but `Execution`.
type Refusal = InterceptError<Infallible>;

/// A refusal before execution as the error of a call whose execution fails with `E`
/// (`Execution { error: Infallible, .. }` cannot exist, so it needs no arm).
fn widen<E>(e: Refusal) -> InterceptError<E> {
    match e {
        InterceptError::NotFound(e) => InterceptError::NotFound(e),
        InterceptError::Denied(d) => InterceptError::Denied(d),
        InterceptError::ApprovalRequired {
            approval,
            decision,
            action,
        } => InterceptError::ApprovalRequired {
            approval,
            decision,
            action,
        },
        InterceptError::Approval(e) => InterceptError::Approval(e),
        InterceptError::Engine(e) => InterceptError::Engine(e),
        InterceptError::Audit(e) => InterceptError::Audit(e),
        InterceptError::Transform(e) => InterceptError::Transform(e),
    }
}

/// How a call holds its governor: borrowed for the length of [`Governor::intercept_with`],
/// shared by an [`OpenAction`] that outlives the request that opened it.
trait GovernorRef: std::ops::Deref<Target = Governor> + Clone {}
impl<T: std::ops::Deref<Target = Governor> + Clone> GovernorRef for T {}

/// One governed call on its way through the stages of [`Governor::intercept_with`]: verify the
/// approval token, the before stage (one pass per capability, a `route` moving the call),
/// redeem the token, run (with the `on_error` stage on failure), the after stage, deliver.
/// A stage hands the call on, or ends it with its audited refusal.
///
/// The stages that let policies look at the action take the call by value: the policy
/// context owns the action while they do.
struct Lifecycle<G: GovernorRef> {
    governor: G,
    /// The request (its input moved into `action`).
    req: InterceptRequest,
    /// The action as it is now (transformed, routed).
    action: AgentAction,
    /// The action as the agent asked for it: a pending approval is asked for it. Kept, for
    /// an approval manager, just before a transform or route changes `action`.
    original: Option<AgentAction>,
    /// The digest of `action` as it is now (reset when its input or capability changes).
    digest: DigestCache,
    /// Ids of the audit events emitted, in order.
    events: Vec<String>,
    /// The capabilities routed from, in order.
    routed_from: Vec<String>,
    /// The verdicts that moved the call, one per hop.
    routes: Vec<Verdict>,
    /// The token the request presented, verified against the action, until it is redeemed.
    token: Option<VerifiedApproval>,
    /// The approval of that token.
    approval: Option<GrantedApproval>,
    /// The policies' runtime metadata: one copy of the request's, handed from stage to
    /// stage.
    runtime: Map<String, Value>,
    /// The before stage's verdict (its last pass's); `None` in after-only mode.
    before: Option<Verdict>,
    /// Output mutations and redactions, from both stages.
    output_obligations: Obligations,
    /// The isolation `sandbox` decisions require, merged.
    sandbox: Option<SandboxRequirement>,
    /// What the execution noted for the audit event of its outcome.
    notes: Map<String, Value>,
    /// Whether a `transform_input` changed the request's input.
    input_transformed: bool,
}

// The call moves from stage to stage in one box (a move of the box, not of the call); the
// stages that end it take the box as they are handed it. Clippy cannot size a call generic
// over its governor, so it asks for them to be unboxed.
#[allow(clippy::boxed_local)]
impl<G: GovernorRef> Lifecycle<G> {
    /// Resolves the capability (unknown: [`CapabilityNotFound`], no audit) and builds the
    /// action.
    fn start(governor: G, mut req: InterceptRequest) -> Result<Box<Self>, Refusal> {
        let cap = governor.registry.require(&req.capability)?;
        let input = std::mem::take(&mut req.input);
        let action = governor.action_with_input(&req, cap, input);
        let runtime = req.metadata.clone();
        Ok(Box::new(Lifecycle {
            governor,
            req,
            action,
            original: None,
            digest: DigestCache::default(),
            events: Vec::new(),
            routed_from: Vec::new(),
            routes: Vec::new(),
            token: None,
            approval: None,
            runtime,
            before: None,
            output_obligations: Obligations::default(),
            sandbox: None,
            notes: Map::new(),
            input_transformed: false,
        }))
    }

    fn emit(&mut self, event: AuditEvent) -> Result<(), AuditError> {
        self.governor
            .emit(event, self.req.receipt_id.as_ref(), &mut self.events)
    }

    fn emit_some(&mut self, event: Option<AuditEvent>) -> Result<(), AuditError> {
        match event {
            Some(e) => self.emit(e),
            None => Ok(()),
        }
    }

    /// Audits a refusal before execution that no policy made (a bad token, a failed input
    /// transform, a route loop): one `denied_before_execution` event. Returns the decision.
    fn refuse_before(&mut self, reason: String, code: &str) -> Result<Decision, AuditError> {
        let mut d = Decision::deny(reason).with_code(code);
        d.action_id = Some(self.action.action_id.clone());
        let ev = AuditEvent::with_digest(
            &self.action,
            &d,
            Stage::BeforeCapability,
            AuditOutcome::DeniedBeforeExecution,
            self.digest.get(&self.action),
        );
        self.emit(ev)?;
        Ok(d)
    }

    /// Keeps the action as the agent asked for it, before its first change.
    fn keep_original(&mut self) {
        if self.governor.approvals.is_some() && self.original.is_none() {
            self.original = Some(self.action.clone());
        }
    }

    /// Evaluates the policies of `stage` (with `error` on error) on the action.
    fn evaluate(
        mut self: Box<Self>,
        stage: Stage,
        error: Option<String>,
    ) -> (Box<Self>, Result<Verdict, EngineError>) {
        // The context owns the action while the policies look at it.
        let mut ctx = PolicyContext::new(self.action, stage);
        ctx.runtime_metadata = std::mem::take(&mut self.runtime);
        // On error the policies are observers: they are not told of an approval.
        if stage != Stage::OnError {
            ctx.approval.clone_from(&self.approval);
        }
        ctx.error = error;
        let verdict = self.governor.engine.evaluate(&ctx);
        self.runtime = ctx.runtime_metadata;
        self.action = ctx.action;
        (self, verdict)
    }

    /// The request's approval token, verified against the action as the agent asked for it
    /// (signature, plan fingerprint, action digest, expiry, status), the approval record
    /// read once; consumed only if execution goes ahead ([`Lifecycle::redeem`]). A token
    /// the host verified is not decoded again. A bad token is audited as
    /// `denied_before_execution` and refused.
    fn verify_token(&mut self) -> Result<(), Refusal> {
        let governor = self.governor.clone();
        let presented = self.req.verified_approval.take();
        let decoded = match (&governor.approvals, presented, &self.req.approval_token) {
            (_, None, None) => return Ok(()),
            (None, _, _) => Err(ApprovalError::Malformed {
                message: "no approval manager is configured".into(),
            }),
            // A token the host decoded wins over the request's text.
            (Some(m), Some(token), _) => Ok((m, token)),
            (Some(m), None, Some(text)) => m.decode(text).map(|token| (m, token)),
        };
        let verified = decoded.and_then(|(m, token)| {
            let digest = self.digest.get(&self.action);
            m.verify_decoded(token, self.action.plan_fingerprint.as_deref(), &digest)
        });
        match verified {
            Ok(v) => {
                self.approval = Some(v.granted());
                self.token = Some(v);
                Ok(())
            }
            Err(e) => {
                self.refuse_before(format!("approval refused: {e}"), "approval_invalid")?;
                Err(InterceptError::Approval(e))
            }
        }
    }

    /// The before stage: one pass per capability, until no `route` moves the call
    /// (at most [`MAX_ROUTE_DEPTH`] hops).
    fn before(self: Box<Self>) -> Result<Box<Self>, Refusal> {
        let mut call = self;
        loop {
            let verdict;
            (call, verdict) = call.before_pass()?;
            match &verdict.obligations.route_to {
                Some(target) if *target != call.action.capability.name => {
                    let target = target.clone();
                    call = call.route(&target)?;
                    call.routes.push(verdict);
                }
                _ => {
                    call.before = Some(verdict);
                    return Ok(call);
                }
            }
        }
    }

    /// One pass of the before stage on the current capability. `deny` and
    /// `approval_required` end the call; otherwise the input mutations are applied, the
    /// output obligations and sandbox kept, and an `allowed` event is audited (not for a
    /// single-event request).
    fn before_pass(self: Box<Self>) -> Result<(Box<Self>, Verdict), Refusal> {
        let (mut call, verdict) = self.evaluate(Stage::BeforeCapability, None);
        let verdict = match verdict {
            Ok(v) => v,
            Err(e) => {
                let digest = call.digest.get(&call.action);
                let ev = policy_failure(&call.req, &call.action, &e, digest, None);
                call.emit_some(ev)?;
                return Err(e.into());
            }
        };
        if verdict.is_denied() {
            return Err(call.denied_before(verdict));
        }
        if verdict.requires_approval() {
            return Err(call.approval_required(verdict));
        }
        // Allowed, possibly with obligations.
        call.transform_input(&verdict.obligations.input_mutations)?;
        call.output_obligations.extend_output(&verdict.obligations);
        if let Some(required) = &verdict.obligations.sandbox {
            call.sandbox = Some(match &call.sandbox {
                Some(s) => s.merge(required),
                None => required.clone(),
            });
        }
        if !call.req.single_event {
            let mut ev = AuditEvent::from_verdict_with_digest(
                &call.action,
                &verdict,
                AuditOutcome::Allowed,
                call.digest.get(&call.action),
            );
            // After-stage redactions are not known yet: only a governor that records
            // every payload records the input here.
            ev.input = Governor::recorded_input(
                call.governor.record_payloads,
                &call.action.input,
                &call.output_obligations.redact,
            );
            call.emit(ev)?;
        }
        Ok((call, verdict))
    }

    /// A `deny` before execution: audited, and the refusal.
    fn denied_before(mut self: Box<Self>, verdict: Verdict) -> Refusal {
        let ev = AuditEvent::from_verdict_with_digest(
            &self.action,
            &verdict,
            AuditOutcome::DeniedBeforeExecution,
            self.digest.get(&self.action),
        );
        if let Err(e) = self.emit(ev) {
            return e.into();
        }
        InterceptError::Denied(Box::new(Denial {
            stage: Stage::BeforeCapability,
            decision: verdict.decision.clone(),
            action: self.action,
            verdict: Some(verdict),
        }))
    }

    /// `approval_required`: the pending approval of the original action is created (or
    /// found) when there is an approval manager, and audited with the verdict.
    fn approval_required(mut self: Box<Self>, verdict: Verdict) -> Refusal {
        let record = match &self.governor.approvals {
            Some(m) => {
                let requested = m.request(ApprovalRequest {
                    action: self.original.as_ref().unwrap_or(&self.action),
                    reason: verdict.decision.reason.clone(),
                    policy_ids: verdict
                        .decisions
                        .iter()
                        .filter(|d| d.requires_approval())
                        .filter_map(|d| d.policy_id.clone())
                        .collect(),
                });
                match requested {
                    Ok(r) => Some(Box::new(r)),
                    Err(e) => return InterceptError::Approval(e),
                }
            }
            None => None,
        };
        let mut ev = AuditEvent::from_verdict_with_digest(
            &self.action,
            &verdict,
            AuditOutcome::ApprovalRequired,
            self.digest.get(&self.action),
        );
        ev.approval_id = record.as_ref().map(|r| r.approval_id.clone());
        if let Err(e) = self.emit(ev) {
            return e.into();
        }
        InterceptError::ApprovalRequired {
            approval: record,
            decision: Box::new(verdict.decision),
            action: Box::new(self.action),
        }
    }

    /// Applies `transform_input` mutations; one that cannot apply refuses the call.
    fn transform_input(&mut self, mutations: &[Mutation]) -> Result<(), Refusal> {
        if mutations.is_empty() {
            return Ok(());
        }
        let mut input = self.action.input.clone();
        if let Err(e) = pointer::apply_all(&mut input, mutations) {
            self.refuse_before(format!("transform_input failed: {e}"), "transform_failed")?;
            return Err(InterceptError::Transform(e));
        }
        self.keep_original();
        self.action.input = input;
        self.input_transformed = true;
        self.digest.reset();
        Ok(())
    }

    /// Moves the call to `target` (one more hop): a new action for the target with the
    /// same input and trace, whose parent is the action routed from. More than
    /// [`MAX_ROUTE_DEPTH`] hops refuses the call (`route_loop`).
    fn route(mut self: Box<Self>, target: &str) -> Result<Box<Self>, Refusal> {
        if self.routed_from.len() >= MAX_ROUTE_DEPTH {
            let reason = format!(
                "more than {MAX_ROUTE_DEPTH} route hops from `{}`",
                self.req.capability
            );
            let decision = self.refuse_before(reason, "route_loop")?;
            return Err(InterceptError::Denied(Box::new(Denial {
                stage: Stage::BeforeCapability,
                decision,
                action: self.action,
                verdict: None,
            })));
        }
        let target = self.governor.registry.require(target)?;
        self.keep_original();
        self.routed_from.push(self.action.capability.name.clone());
        let input = std::mem::take(&mut self.action.input);
        let mut routed = self.governor.action_with_input(&self.req, target, input);
        routed.trace_id.clone_from(&self.action.trace_id);
        routed.parent_action_id = Some(self.action.action_id.clone());
        routed
            .metadata
            .insert("routedFrom".into(), json!(self.action.capability.name));
        self.action = routed;
        self.digest.reset();
        Ok(self)
    }

    /// Consumes the verified token, single use, now that execution goes ahead: a
    /// compare-and-set on the record [`Lifecycle::verify_token`] read (a token redeemed
    /// meanwhile is refused as replayed).
    fn redeem(&mut self) -> Result<(), Refusal> {
        let governor = self.governor.clone();
        let (Some(m), Some(token)) = (&governor.approvals, self.token.take()) else {
            return Ok(());
        };
        if let Err(e) = m.redeem_verified(token) {
            self.refuse_before(format!("approval refused: {e}"), "approval_invalid")?;
            return Err(InterceptError::Approval(e));
        }
        Ok(())
    }

    /// Runs `execute` with the final capability, input and sandbox requirement. Its
    /// output and value, or its failure after the `on_error` stage.
    fn run<T, E, F>(
        mut self: Box<Self>,
        execute: F,
    ) -> Result<(Box<Self>, Value, T), Interrupted<T, E>>
    where
        E: std::fmt::Display,
        F: FnOnce(&Execution<'_>) -> Result<(Value, T), E>,
    {
        let notes = RefCell::new(Map::new());
        let result = execute(&Execution {
            capability: &self.action.capability,
            input: &self.action.input,
            input_transformed: self.input_transformed,
            sandbox: self.sandbox.as_ref(),
            action: &self.action,
            notes: &notes,
        });
        self.notes = notes.into_inner();
        match result {
            Ok((raw, ran)) => Ok((self, raw, ran)),
            Err(error) => Err(self.on_error(error)),
        }
    }

    /// The `on_error` stage (observers) and the `execution_failed` event with
    /// `error_type` and `error_message`; the execution's own error.
    fn on_error<T, E: std::fmt::Display>(self: Box<Self>, error: E) -> Interrupted<T, E> {
        let message = error.to_string();
        let (mut call, on_error) = self.evaluate(Stage::OnError, Some(message.clone()));
        let notes = std::mem::take(&mut call.notes);
        let on_error = match on_error {
            Ok(v) => v,
            Err(e) => {
                let digest = call.digest.get(&call.action);
                let mut ev = policy_failure(&call.req, &call.action, &e, digest, None);
                if let Some(ev) = &mut ev {
                    ev.outcome = AuditOutcome::ExecutionFailed;
                    ev.stage = Stage::OnError;
                    ev.metadata.insert("error_message".into(), json!(message));
                    ev.metadata.extend(notes);
                }
                let governance = match call.emit_some(ev) {
                    Err(a) => a.into(),
                    Ok(()) => e.into(),
                };
                return call.failed(error, Some(governance));
            }
        };
        let reported = match &call.before {
            Some(b) if on_error.decisions.is_empty() => b,
            _ => &on_error,
        };
        let mut ev = AuditEvent::from_verdict_with_digest(
            &call.action,
            reported,
            AuditOutcome::ExecutionFailed,
            call.digest.get(&call.action),
        );
        ev.stage = Stage::OnError;
        ev.metadata
            .insert("error_type".into(), json!(short_type_name::<E>()));
        ev.metadata.insert("error_message".into(), json!(message));
        ev.metadata.extend(notes);
        call.summarize(&mut ev, decided(&on_error));
        let governance = call.emit(ev).err().map(GovernanceFailure::from);
        call.failed(error, governance)
    }

    /// The execution's failure, with a governance failure that followed it.
    fn failed<T, E>(
        self: Box<Self>,
        error: E,
        governance: Option<GovernanceFailure>,
    ) -> Interrupted<T, E> {
        Interrupted::Failed {
            error,
            action: Box::new(self.action),
            governance,
        }
    }

    /// The after stage on the raw output: output mutations then redactions (from both
    /// stages); a `deny` withholds the output, as does a mutation that cannot apply.
    fn after(mut self: Box<Self>, raw: Value) -> Result<InterceptResult, OutputWithheld> {
        // The action with the raw output (the summary is replaced, as `with_output` does).
        self.action.output = Some(raw);
        self.action.output_summary = None;
        let (mut call, after) = self.evaluate(Stage::AfterCapability, None);
        let after = match after {
            Ok(v) => v,
            Err(e) => {
                let digest = call.digest.get(&call.action);
                let notes = std::mem::take(&mut call.notes);
                let mut ev = policy_failure(&call.req, &call.action, &e, digest, Some(notes));
                if let Some(ev) = &mut ev {
                    ev.outcome = AuditOutcome::DeniedAfterExecution;
                    ev.stage = Stage::AfterCapability;
                }
                call.emit_some(ev).map_err(GovernanceFailure::from)?;
                return Err(GovernanceFailure::from(e).into());
            }
        };
        call.output_obligations.extend_output(&after.obligations);
        // A redaction that points into text cannot be applied: the output is withheld
        // rather than delivered with what it should have hidden.
        if let Some(p) = call.action.output.as_ref().and_then(|raw| {
            call.output_obligations
                .redact
                .iter()
                .find(|p| pointer::hidden_in_text(raw, p))
        }) {
            let e = PointerError::Shape {
                message: format!(
                    "the output holds text where `{p}` should be redacted: it cannot be, so the output is withheld"
                ),
            };
            return Err(call.transform_failed(&after, e));
        }
        let mut output = call.action.output.take().unwrap_or_default();
        let transformed =
            pointer::apply_all(&mut output, &call.output_obligations.output_mutations);
        let mut redacted = Vec::new();
        for p in &call.output_obligations.redact {
            if pointer::redact(&mut output, p).is_ok() {
                redacted.push(p.clone());
            }
        }
        // The executed action carries the delivered output.
        call.action.output = Some(output.clone());
        if after.is_denied() {
            return Err(call.denied_after(after, output, redacted));
        }
        if let Err(e) = transformed {
            return Err(call.transform_failed(&after, e));
        }
        call.deliver(after, output, redacted)
            .map_err(|e| GovernanceFailure::from(e).into())
    }

    /// A `deny` after execution: the side effect happened, the output is withheld.
    fn denied_after(
        mut self,
        after: Verdict,
        output: Value,
        redacted: Vec<String>,
    ) -> OutputWithheld {
        let mut ev = AuditEvent::from_verdict_with_digest(
            &self.action,
            &after,
            AuditOutcome::DeniedAfterExecution,
            self.digest.get(&self.action),
        );
        ev.redacted = redacted;
        ev.input = self.recorded_input();
        if self.governor.record_payloads {
            ev.output = Some(output);
        }
        ev.metadata.extend(std::mem::take(&mut self.notes));
        self.summarize(&mut ev, Some(&after));
        if let Err(e) = self.emit(ev) {
            return GovernanceFailure::from(e).into();
        }
        OutputWithheld::Denied(Box::new(Denial {
            stage: Stage::AfterCapability,
            decision: after.decision.clone(),
            action: self.action,
            verdict: Some(after),
        }))
    }

    /// A `transform_output` mutation that could not apply: the output is withheld.
    fn transform_failed(mut self: Box<Self>, after: &Verdict, e: PointerError) -> OutputWithheld {
        let mut d =
            Decision::deny(format!("transform_output failed: {e}")).with_code("transform_failed");
        d.action_id = Some(self.action.action_id.clone());
        let mut ev = AuditEvent::with_digest(
            &self.action,
            &d,
            Stage::AfterCapability,
            AuditOutcome::DeniedAfterExecution,
            self.digest.get(&self.action),
        );
        ev.metadata.extend(std::mem::take(&mut self.notes));
        self.summarize(&mut ev, decided(after));
        if let Err(a) = self.emit(ev) {
            return GovernanceFailure::from(a).into();
        }
        OutputWithheld::Transform(e)
    }

    /// The `executed` event, and the result.
    fn deliver(
        mut self,
        after: Verdict,
        output: Value,
        redacted: Vec<String>,
    ) -> Result<InterceptResult, AuditError> {
        let reported = match &self.before {
            Some(b) if after.decisions.is_empty() => b,
            _ => &after,
        };
        let mut ev = AuditEvent::from_verdict_with_digest(
            &self.action,
            reported,
            AuditOutcome::Executed,
            self.digest.get(&self.action),
        );
        ev.stage = if after.decisions.is_empty() && self.before.is_some() {
            Stage::BeforeCapability
        } else {
            Stage::AfterCapability
        };
        if !after.decisions.is_empty() {
            let mut ids = self
                .before
                .as_ref()
                .map(Verdict::policy_ids)
                .unwrap_or_default();
            for id in after.policy_ids() {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            ev.policy_ids = ids;
        }
        ev.redacted = redacted;
        ev.approval_id = self.approval.as_ref().map(|a| a.approval_id.clone());
        ev.input = self.recorded_input();
        if self.governor.record_payloads {
            ev.output = Some(output.clone());
        }
        ev.metadata.extend(std::mem::take(&mut self.notes));
        self.summarize(&mut ev, decided(&after));
        self.emit(ev)?;
        Ok(InterceptResult {
            action: self.action,
            before: self.before,
            after,
            output,
            routed_from: self.routed_from,
            approval: self.approval,
            events: self.events,
        })
    }

    /// The input the event of the outcome records (see [`Governor::recorded_input`]).
    fn recorded_input(&self) -> Option<Value> {
        Governor::recorded_input(
            self.governor.record_payloads || self.req.record_input,
            &self.action.input,
            &self.output_obligations.redact,
        )
    }

    /// For a single-event request, adds what the events it does not write said to its one
    /// event ([`single_event_summary`]); `after` is the after stage's (or on_error's)
    /// verdict when it decided something.
    fn summarize(&self, ev: &mut AuditEvent, after: Option<&Verdict>) {
        if self.req.single_event {
            single_event_summary(ev, self.before.as_ref(), after, &self.routed_from);
        }
    }
}

/// A verdict that decided something (an after-stage or on_error verdict without decisions
/// is not reported).
fn decided(v: &Verdict) -> Option<&Verdict> {
    (!v.decisions.is_empty()).then_some(v)
}

/// The digest of an action, computed at most once while the action does not change (its
/// events all record it).
#[derive(Default)]
struct DigestCache(Option<String>);

impl DigestCache {
    fn get(&mut self, action: &AgentAction) -> String {
        self.0.get_or_insert_with(|| action.digest()).clone()
    }

    /// The action's input or capability changed.
    fn reset(&mut self) {
        self.0 = None;
    }
}

/// The one event of a single-event request whose policies could not be evaluated (the
/// call is refused, or its output withheld); `None` for other requests, which are refused
/// without an event as before.
fn policy_failure(
    req: &InterceptRequest,
    action: &AgentAction,
    error: &EngineError,
    digest: String,
    notes: Option<Map<String, Value>>,
) -> Option<AuditEvent> {
    if !req.single_event {
        return None;
    }
    let mut d =
        Decision::deny(format!("policy evaluation failed: {error}")).with_code("policy_error");
    d.action_id = Some(action.action_id.clone());
    let mut ev = AuditEvent::with_digest(
        action,
        &d,
        Stage::BeforeCapability,
        AuditOutcome::DeniedBeforeExecution,
        digest,
    );
    ev.metadata.extend(notes.unwrap_or_default());
    Some(ev)
}

/// `{decision, reason, policyName, policyIds}` of one stage's verdict.
fn stage_summary(v: &Verdict) -> Value {
    let mut s = json!({
        "decision": v.decision.kind.as_str(),
        "reason": v.decision.reason,
        "policyName": v.decision.policy_name,
        "policyIds": v.policy_ids(),
    });
    if let Some(shadow) = &v.shadow {
        s["shadow"] = json!(shadow.kind.as_str());
    }
    s
}

/// What the events a single-event request does not write said, added to its one event:
/// both stages' decisions and policy ids, the before stage's shadow result, the route.
fn single_event_summary(
    ev: &mut AuditEvent,
    before: Option<&Verdict>,
    after: Option<&Verdict>,
    routed_from: &[String],
) {
    let mut stages = Map::new();
    for (name, verdict) in [("before", before), ("after", after)] {
        let Some(v) = verdict else { continue };
        stages.insert(name.into(), stage_summary(v));
        for id in v.policy_ids() {
            if !ev.policy_ids.contains(&id) {
                ev.policy_ids.push(id);
            }
        }
    }
    // A would-be refusal before execution is what shadow mode is read for: it wins over an
    // after-stage shadow result.
    if let Some(s) = before.and_then(|b| b.shadow.as_ref())
        && (ev.shadow.is_none()
            || matches!(s.kind, DecisionType::Deny | DecisionType::ApprovalRequired))
    {
        ev.shadow = Some(s.kind);
        ev.metadata.insert(
            "shadow".into(),
            json!({
                "decision": s.kind.as_str(),
                "reason": s.decision.reason,
                "policyName": s.decision.policy_name,
            }),
        );
    }
    ev.metadata
        .insert("decisions".into(), Value::Object(stages));
    if !routed_from.is_empty() {
        ev.metadata.insert("routedFrom".into(), json!(routed_from));
    }
}

fn short_type_name<E>() -> String {
    let full = std::any::type_name::<E>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::approvals::HostKey;
    use crate::audit::MemorySink;
    use crate::model::CapabilityKind;
    use crate::policy::Policy;
    use crate::store::MemoryStore;

    /// A governor knowing `names`, auditing into memory.
    fn governor(names: &[&str]) -> (Governor, Arc<MemorySink>) {
        let sink = Arc::new(MemorySink::new());
        let g = Governor::new("agent").audit(Arc::clone(&sink) as Arc<dyn AuditSink>);
        for name in names {
            g.register_capability(GovernedCapability::new(*name, CapabilityKind::Tool));
        }
        (g, sink)
    }

    fn req(name: &str) -> InterceptRequest {
        InterceptRequest::new(name, ActionType::ToolCall, json!({"n": 1}))
    }

    fn with_approvals(g: Governor) -> Governor {
        g.approvals(Arc::new(ApprovalManager::new(
            Arc::new(MemoryStore::new()),
            HostKey::from_seed([3; 32]),
        )))
    }

    #[test]
    fn a_route_moves_the_call_and_the_hop_past_the_limit_is_refused_once() {
        let (g, sink) = governor(&["a", "b"]);
        let mut call = Lifecycle::start(&g, req("a")).unwrap();
        let trace = call.action.trace_id.clone();
        for hop in 1..=MAX_ROUTE_DEPTH {
            let from = call.action.clone();
            let target = if hop % 2 == 1 { "b" } else { "a" };
            call = call.route(target).unwrap();
            assert_eq!(call.action.capability.name, target);
            assert_ne!(call.action.action_id, from.action_id);
            assert_eq!(call.action.parent_action_id, Some(from.action_id));
            assert_eq!(call.action.trace_id, trace);
            assert_eq!(call.action.input, json!({"n": 1}));
            assert_eq!(
                call.action.metadata["routedFrom"],
                json!(from.capability.name)
            );
        }
        assert_eq!(call.routed_from.len(), MAX_ROUTE_DEPTH);
        assert!(sink.events().is_empty(), "a hop audits nothing itself");
        let at = call.action.action_id.clone();
        let Err(InterceptError::Denied(denial)) = call.route("b") else {
            panic!("the hop past the limit must be denied");
        };
        assert_eq!(denial.decision.code.as_deref(), Some("route_loop"));
        assert_eq!(
            denial.reason(),
            Some(format!("more than {MAX_ROUTE_DEPTH} route hops from `a`").as_str())
        );
        assert_eq!(denial.action.action_id, at);
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].outcome, AuditOutcome::DeniedBeforeExecution);
        assert_eq!(events[0].code.as_deref(), Some("route_loop"));
        assert_eq!(events[0].action_id, at);
    }

    #[test]
    fn a_route_to_an_unknown_capability_is_not_found_unaudited() {
        let (g, sink) = governor(&["a"]);
        let call = Lifecycle::start(&g, req("a")).unwrap();
        assert!(matches!(
            call.route("nowhere"),
            Err(InterceptError::NotFound(_))
        ));
        assert!(sink.events().is_empty());
    }

    #[test]
    fn the_before_stage_follows_routes_until_the_limit() {
        let (g, sink) = governor(&["a", "b"]);
        g.policies()
            .register(Policy::before("a", |_| Decision::route("b")));
        g.policies()
            .register(Policy::before("b", |_| Decision::route("a")));
        let call = Lifecycle::start(&g, req("a")).unwrap();
        let Err(InterceptError::Denied(denial)) = call.before() else {
            panic!("a route loop must be denied");
        };
        assert_eq!(denial.stage, Stage::BeforeCapability);
        let outcomes: Vec<AuditOutcome> = sink.events().iter().map(|e| e.outcome).collect();
        let mut expected = vec![AuditOutcome::Allowed; MAX_ROUTE_DEPTH + 1];
        expected.push(AuditOutcome::DeniedBeforeExecution);
        assert_eq!(outcomes, expected);
    }

    #[test]
    fn a_route_to_the_capability_itself_ends_the_before_stage() {
        let (g, sink) = governor(&["a"]);
        g.policies()
            .register(Policy::before("a", |_| Decision::route("a")));
        let call = Lifecycle::start(&g, req("a")).unwrap().before().unwrap();
        assert!(call.routed_from.is_empty());
        assert_eq!(
            call.before.as_ref().map(|v| v.kind),
            Some(DecisionType::Route)
        );
        assert_eq!(sink.events().len(), 1);
    }

    #[test]
    fn a_bad_token_is_refused_and_audited_once() {
        let (g, sink) = governor(&["a"]);
        let g = with_approvals(g);
        let mut call = Lifecycle::start(&g, req("a").approval_token("capapr1.bad.token")).unwrap();
        let Err(InterceptError::Approval(ApprovalError::Malformed { .. })) = call.verify_token()
        else {
            panic!("a malformed token must be refused");
        };
        assert!(call.approval.is_none());
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].outcome, AuditOutcome::DeniedBeforeExecution);
        assert_eq!(events[0].code.as_deref(), Some("approval_invalid"));

        // The whole call: one event, and nothing runs.
        let mut ran = false;
        let r = g.intercept(req("a").approval_token("capapr1.bad.token"), |_| {
            ran = true;
            Ok::<_, String>(json!(1))
        });
        assert!(matches!(r, Err(InterceptError::Approval(_))));
        assert!(!ran);
        assert_eq!(sink.events().len(), 2);
    }

    #[test]
    fn a_token_without_an_approval_manager_is_refused() {
        let (g, sink) = governor(&["a"]);
        let mut call = Lifecycle::start(&g, req("a").approval_token("capapr1.x.y")).unwrap();
        let Err(InterceptError::Approval(e)) = call.verify_token() else {
            panic!("no manager, no approval");
        };
        assert_eq!(
            e.to_string(),
            "malformed approval token: no approval manager is configured"
        );
        assert_eq!(sink.events().len(), 1);
    }

    #[test]
    fn a_single_event_call_writes_one_event_that_summarizes_both_stages_and_the_route() {
        let (g, sink) = governor(&["a", "b"]);
        g.policies()
            .register(Policy::before("a", |_| Decision::route("b")).with_id("to-b"));
        g.policies()
            .register(Policy::after("b", |_| Decision::redact(["/secret"])).with_id("mask"));
        let call = Lifecycle::start(&g, req("a").single_event(true))
            .unwrap()
            .before()
            .unwrap();
        assert!(sink.events().is_empty(), "no allowed events");
        let r = call.after(json!({"secret": "s", "ok": 1})).unwrap();
        assert_eq!(r.output, json!({"secret": "[REDACTED]", "ok": 1}));
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        let e = &events[0];
        assert_eq!(r.events, std::slice::from_ref(&e.event_id));
        assert_eq!(e.outcome, AuditOutcome::Executed);
        assert_eq!(e.capability_name, "b");
        assert_eq!(e.redacted, ["/secret"]);
        assert_eq!(e.policy_ids, ["mask"]);
        assert_eq!(e.metadata["routedFrom"], json!(["a"]));
        assert_eq!(e.metadata["decisions"]["before"]["decision"], "allow");
        assert_eq!(e.metadata["decisions"]["after"]["decision"], "redact");
        assert_eq!(
            e.metadata["decisions"]["after"]["policyIds"],
            json!(["mask"])
        );
    }

    #[test]
    fn a_failed_output_transform_withholds_the_output_with_what_the_execution_noted() {
        let (g, sink) = governor(&["a"]);
        g.policies().register(Policy::after("a", |_| {
            Decision::transform_output(vec![Mutation::remove("/missing")])
        }));
        let mut call = Lifecycle::start(&g, req("a").mode(InterceptMode::AfterOnly)).unwrap();
        call.notes.insert("latencyUs".into(), json!(5));
        let Err(OutputWithheld::Transform(_)) = call.after(json!({"ok": 1})) else {
            panic!("the output must be withheld");
        };
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].outcome, AuditOutcome::DeniedAfterExecution);
        assert_eq!(events[0].stage, Stage::AfterCapability);
        assert_eq!(events[0].code.as_deref(), Some("transform_failed"));
        assert_eq!(events[0].metadata["latencyUs"], 5);
    }

    #[test]
    fn a_denial_after_execution_keeps_the_output_redacted_by_the_before_stage_on_the_action() {
        let (g, sink) = governor(&["a"]);
        g.policies()
            .register(Policy::before("a", |_| Decision::redact(["/secret"])));
        g.policies()
            .register(Policy::after("a", |_| Decision::deny("not for you")));
        let call = Lifecycle::start(&g, req("a")).unwrap().before().unwrap();
        let Err(OutputWithheld::Denied(denial)) = call.after(json!({"secret": "s"})) else {
            panic!("the output must be denied");
        };
        assert_eq!(denial.stage, Stage::AfterCapability);
        assert_eq!(denial.reason(), Some("not for you"));
        assert_eq!(denial.action.output, Some(json!({"secret": "[REDACTED]"})));
        let events = sink.events();
        let outcomes: Vec<AuditOutcome> = events.iter().map(|e| e.outcome).collect();
        assert_eq!(
            outcomes,
            [AuditOutcome::Allowed, AuditOutcome::DeniedAfterExecution]
        );
        assert_eq!(events[1].redacted, ["/secret"]);
    }

    #[test]
    fn a_failed_run_goes_through_on_error_and_returns_its_own_error() {
        let (g, sink) = governor(&["a"]);
        let seen = Arc::new(std::sync::Mutex::new(None));
        let observed = Arc::clone(&seen);
        g.policies().register(Policy::on_error("a", move |ctx| {
            *observed.lock().unwrap() = ctx.error.clone();
            Decision::allow().with_reason("observed")
        }));
        let call = Lifecycle::start(&g, req("a")).unwrap();
        let Err(Interrupted::Failed {
            error,
            action,
            governance: None,
        }) = call.run(|exec| {
            exec.note("latencyUs", json!(9));
            Err::<(Value, ()), _>("upstream exited".to_string())
        })
        else {
            panic!("the execution failed");
        };
        assert_eq!(error, "upstream exited");
        assert_eq!(action.capability.name, "a");
        assert_eq!(seen.lock().unwrap().as_deref(), Some("upstream exited"));
        let events = sink.events();
        assert_eq!(events.len(), 1, "{events:?}");
        let e = &events[0];
        assert_eq!(
            (e.outcome, e.stage),
            (AuditOutcome::ExecutionFailed, Stage::OnError)
        );
        assert_eq!(e.reason.as_deref(), Some("observed"));
        assert_eq!(e.metadata["error_type"], "String");
        assert_eq!(e.metadata["error_message"], "upstream exited");
        assert_eq!(e.metadata["latencyUs"], 9);
    }

    /// A sink that cannot write events of one outcome.
    struct FailsOn(AuditOutcome);

    impl AuditSink for FailsOn {
        fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
            if event.outcome == self.0 {
                return Err(AuditError::Malformed {
                    message: "disk full".into(),
                });
            }
            Ok(())
        }
    }

    fn failing_on(outcome: AuditOutcome) -> Governor {
        let g = Governor::new("agent").audit(Arc::new(FailsOn(outcome)));
        g.register_capability(GovernedCapability::new("a", CapabilityKind::Tool));
        g
    }

    #[test]
    fn intercept_with_returns_what_ran_with_the_result_or_with_the_withheld_output() {
        let (g, _) = governor(&["a"]);
        let (done, ran) = g
            .intercept_with(req("a"), |_| Ok::<_, String>((json!({"x": 1}), "receipt")))
            .unwrap();
        assert_eq!((done.output, ran), (json!({"x": 1}), "receipt"));

        g.policies()
            .register(Policy::after("a", |_| Decision::deny("withheld")));
        let Err(Interrupted::Withheld {
            executed,
            reason: OutputWithheld::Denied(denial),
        }) = g.intercept_with(req("a"), |_| Ok::<_, String>((json!({"x": 1}), "receipt")))
        else {
            panic!("the output must be withheld with what ran");
        };
        assert_eq!(executed, "receipt");
        assert_eq!(denial.stage, Stage::AfterCapability);
    }

    #[test]
    fn a_refusal_before_execution_carries_nothing_that_ran() {
        let (g, _) = governor(&["a"]);
        g.policies()
            .register(Policy::before("a", |_| Decision::deny("no")));
        let mut ran = false;
        let r = g.intercept_with(req("a"), |_| {
            ran = true;
            Ok::<_, String>((json!(1), ()))
        });
        let Err(Interrupted::Refused(InterceptError::Denied(denial))) = r else {
            panic!("denied before execution");
        };
        assert_eq!(denial.stage, Stage::BeforeCapability);
        assert!(!ran);
    }

    #[test]
    fn an_audit_failure_after_execution_keeps_what_ran_or_the_executions_error() {
        // The execution failed, then its event could not be written: the execution's own
        // error comes back with the governance failure.
        let g = failing_on(AuditOutcome::ExecutionFailed);
        let r = g.intercept_with(req("a"), |_| Err::<(Value, ()), _>("boom".to_string()));
        let Err(Interrupted::Failed {
            error,
            governance: Some(GovernanceFailure::Audit(_)),
            ..
        }) = r
        else {
            panic!("the failure must carry the execution's error and the audit failure");
        };
        assert_eq!(error, "boom");
        // `intercept` reports the audit failure, as before.
        let simple = g.intercept(req("a"), |_| Err::<Value, _>("boom".to_string()));
        assert!(matches!(simple, Err(InterceptError::Audit(_))));

        // The execution succeeded, then its event could not be written: the output is
        // withheld, what ran comes back.
        let g = failing_on(AuditOutcome::Executed);
        let r = g.intercept_with(req("a"), |_| Ok::<_, String>((json!(1), "receipt")));
        let Err(Interrupted::Withheld {
            executed,
            reason: OutputWithheld::Governance(GovernanceFailure::Audit(e)),
        }) = r
        else {
            panic!("the output must be withheld with what ran");
        };
        assert_eq!(executed, "receipt");
        assert_eq!(e.to_string(), "audit event is malformed: disk full");
    }
}
