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
//!    plan fingerprint, action digest, expiry, status). A bad token is audited as
//!    `denied_before_execution` and refused.
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
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::action::{ActionType, Actor, AgentAction};
use crate::approvals::{ApprovalError, ApprovalManager, ApprovalRecord, ApprovalRequest};
use crate::audit::{AuditError, AuditEvent, AuditOutcome, AuditSink, NoopSink};
use crate::decision::{Decision, DecisionType, SandboxRequirement};
use crate::engine::{EngineError, Obligations, PolicyEngine, Verdict};
use crate::model::{Environment, GovernedCapability, Labels};
use crate::pointer::{self, PointerError};
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
    /// A token from [`ApprovalManager::approve`].
    pub approval_token: Option<String>,
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

/// What [`Governor::intercept_with`] returns: the lifecycle's result, and what the
/// execution produced when it ran.
#[derive(Debug)]
pub struct Intercepted<T, E> {
    pub result: Result<InterceptResult, InterceptError<E>>,
    /// `Some` when the execution ran and succeeded (whatever was decided after it).
    pub executed: Option<T>,
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

    fn emit_some(
        &self,
        event: Option<AuditEvent>,
        receipt: Option<&String>,
        events: &mut Vec<String>,
    ) -> Result<(), AuditError> {
        match event {
            Some(e) => self.emit(e, receipt, events),
            None => Ok(()),
        }
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
            .result
    }

    /// [`Governor::intercept`] for callers that need what the execution produced besides
    /// its output (a receipt's timing, the boundary crossed): `execute` returns the output
    /// and a value `T`, which comes back in [`Intercepted::executed`] whatever the policies
    /// decided afterwards (an after-stage denial or a failed transform still leaves the
    /// evidence of what ran). An execution failure comes back as
    /// [`InterceptError::Execution`] with the closure's own error.
    pub fn intercept_with<T, E, F>(&self, req: InterceptRequest, execute: F) -> Intercepted<T, E>
    where
        E: std::fmt::Display,
        F: FnOnce(&Execution<'_>) -> Result<(Value, T), E>,
    {
        let mut executed = None;
        let result = self.lifecycle(req, execute, &mut executed);
        Intercepted { result, executed }
    }

    fn lifecycle<T, E, F>(
        &self,
        mut req: InterceptRequest,
        execute: F,
        executed: &mut Option<T>,
    ) -> Result<InterceptResult, InterceptError<E>>
    where
        E: std::fmt::Display,
        F: FnOnce(&Execution<'_>) -> Result<(Value, T), E>,
    {
        let cap = self.registry.require(&req.capability)?;
        let input = std::mem::take(&mut req.input);
        let mut action = self.action_with_input(&req, cap, input);
        // Approvals bind to the action the agent asked for (before transforms and routes): a
        // copy is kept, for an approval manager, just before a transform or route changes it.
        let mut original: Option<AgentAction> = None;
        let keep = |original: &mut Option<AgentAction>, action: &AgentAction| {
            if self.approvals.is_some() && original.is_none() {
                *original = Some(action.clone());
            }
        };
        // The digest of `action` as it is now (reset when its input or capability changes).
        let mut digest = DigestCache::default();
        let receipt = req.receipt_id.as_ref();
        let mut events = Vec::new();
        let mut routed_from = Vec::new();
        let mut approval: Option<GrantedApproval> = None;

        // Approval token: verified now, consumed only if execution goes ahead.
        if let Some(token) = &req.approval_token {
            let verified = match &self.approvals {
                Some(m) => m
                    .verify_for(token, &action)
                    .map(|(claims, _)| GrantedApproval {
                        approval_id: claims.approval_id,
                        approver: claims.approver,
                    }),
                None => Err(ApprovalError::Malformed {
                    message: "no approval manager is configured".into(),
                }),
            };
            match verified {
                Ok(g) => approval = Some(g),
                Err(e) => {
                    let mut d = Decision::deny(format!("approval refused: {e}"))
                        .with_code("approval_invalid");
                    d.action_id = Some(action.action_id.clone());
                    let ev = AuditEvent::with_digest(
                        &action,
                        &d,
                        Stage::BeforeCapability,
                        AuditOutcome::DeniedBeforeExecution,
                        digest.get(&action),
                    );
                    self.emit(ev, receipt, &mut events)?;
                    return Err(InterceptError::Approval(e));
                }
            }
        }

        let mut output_obligations = Obligations::default();
        let mut sandbox: Option<SandboxRequirement> = None;
        // The policies' runtime metadata: one copy of the request's, handed from stage to
        // stage.
        let mut runtime = req.metadata.clone();
        let before = if req.mode == InterceptMode::Lifecycle {
            let mut depth = 0usize;
            loop {
                // The context owns the action while the policies look at it.
                let mut ctx = PolicyContext::new(action, Stage::BeforeCapability);
                ctx.runtime_metadata = std::mem::take(&mut runtime);
                ctx.approval.clone_from(&approval);
                let verdict = self.engine.evaluate(&ctx);
                runtime = std::mem::take(&mut ctx.runtime_metadata);
                action = ctx.action;
                let verdict = match verdict {
                    Ok(v) => v,
                    Err(e) => {
                        let ev = policy_failure(&req, &action, &e, digest.get(&action), None);
                        self.emit_some(ev, receipt, &mut events)?;
                        return Err(e.into());
                    }
                };
                if verdict.is_denied() {
                    let ev = AuditEvent::from_verdict_with_digest(
                        &action,
                        &verdict,
                        AuditOutcome::DeniedBeforeExecution,
                        digest.get(&action),
                    );
                    self.emit(ev, receipt, &mut events)?;
                    return Err(InterceptError::Denied(Box::new(Denial {
                        stage: Stage::BeforeCapability,
                        decision: verdict.decision.clone(),
                        action,
                        verdict: Some(verdict),
                    })));
                }
                if verdict.requires_approval() {
                    let record = match &self.approvals {
                        Some(m) => Some(Box::new(
                            m.request(ApprovalRequest {
                                action: original.as_ref().unwrap_or(&action),
                                reason: verdict.decision.reason.clone(),
                                policy_ids: verdict
                                    .decisions
                                    .iter()
                                    .filter(|d| d.requires_approval())
                                    .filter_map(|d| d.policy_id.clone())
                                    .collect(),
                            })
                            .map_err(InterceptError::Approval)?,
                        )),
                        _ => None,
                    };
                    let mut ev = AuditEvent::from_verdict_with_digest(
                        &action,
                        &verdict,
                        AuditOutcome::ApprovalRequired,
                        digest.get(&action),
                    );
                    ev.approval_id = record.as_ref().map(|r| r.approval_id.clone());
                    self.emit(ev, receipt, &mut events)?;
                    return Err(InterceptError::ApprovalRequired {
                        approval: record,
                        decision: Box::new(verdict.decision),
                        action: Box::new(action),
                    });
                }
                // Allowed, possibly with obligations.
                if !verdict.obligations.input_mutations.is_empty() {
                    let mut input = action.input.clone();
                    if let Err(e) =
                        pointer::apply_all(&mut input, &verdict.obligations.input_mutations)
                    {
                        let mut d = Decision::deny(format!("transform_input failed: {e}"))
                            .with_code("transform_failed");
                        d.action_id = Some(action.action_id.clone());
                        let ev = AuditEvent::with_digest(
                            &action,
                            &d,
                            Stage::BeforeCapability,
                            AuditOutcome::DeniedBeforeExecution,
                            digest.get(&action),
                        );
                        self.emit(ev, receipt, &mut events)?;
                        return Err(InterceptError::Transform(e));
                    }
                    keep(&mut original, &action);
                    action.input = input;
                    digest.reset();
                }
                output_obligations.extend_output(&verdict.obligations);
                if let Some(req_sandbox) = &verdict.obligations.sandbox {
                    sandbox = Some(match &sandbox {
                        Some(s) => s.merge(req_sandbox),
                        None => req_sandbox.clone(),
                    });
                }
                if !req.single_event {
                    let mut ev = AuditEvent::from_verdict_with_digest(
                        &action,
                        &verdict,
                        AuditOutcome::Allowed,
                        digest.get(&action),
                    );
                    // After-stage redactions are not known yet: only a governor that records
                    // every payload records the input here.
                    ev.input = Self::recorded_input(
                        self.record_payloads,
                        &action.input,
                        &output_obligations.redact,
                    );
                    self.emit(ev, receipt, &mut events)?;
                }
                match verdict.obligations.route_to.clone() {
                    Some(target) if target != action.capability.name => {
                        depth += 1;
                        if depth > MAX_ROUTE_DEPTH {
                            let mut d = Decision::deny(format!(
                                "more than {MAX_ROUTE_DEPTH} route hops from `{}`",
                                req.capability
                            ))
                            .with_code("route_loop");
                            d.action_id = Some(action.action_id.clone());
                            let ev = AuditEvent::with_digest(
                                &action,
                                &d,
                                Stage::BeforeCapability,
                                AuditOutcome::DeniedBeforeExecution,
                                digest.get(&action),
                            );
                            self.emit(ev, receipt, &mut events)?;
                            return Err(InterceptError::Denied(Box::new(Denial {
                                stage: Stage::BeforeCapability,
                                decision: d,
                                action,
                                verdict: None,
                            })));
                        }
                        let target_cap = self.registry.require(&target)?;
                        keep(&mut original, &action);
                        routed_from.push(action.capability.name.clone());
                        let routed_input = std::mem::take(&mut action.input);
                        let mut routed = self.action_with_input(&req, target_cap, routed_input);
                        routed.trace_id.clone_from(&action.trace_id);
                        routed.parent_action_id = Some(action.action_id.clone());
                        routed
                            .metadata
                            .insert("routedFrom".into(), json!(action.capability.name));
                        action = routed;
                        digest.reset();
                    }
                    _ => break Some(verdict),
                }
            }
        } else {
            None
        };

        if let (Some(m), Some(token)) = (&self.approvals, &req.approval_token) {
            let original = original.as_ref().unwrap_or(&action);
            // Single use: consumed now that execution goes ahead. The digest binds the
            // original action (before any transform or route).
            if let Err(e) = m.redeem_for(token, original) {
                let mut d =
                    Decision::deny(format!("approval refused: {e}")).with_code("approval_invalid");
                d.action_id = Some(action.action_id.clone());
                let ev = AuditEvent::with_digest(
                    &action,
                    &d,
                    Stage::BeforeCapability,
                    AuditOutcome::DeniedBeforeExecution,
                    digest.get(&action),
                );
                self.emit(ev, receipt, &mut events)?;
                return Err(InterceptError::Approval(e));
            }
        }

        let notes = RefCell::new(Map::new());
        let result = {
            let exec = Execution {
                capability: &action.capability,
                input: &action.input,
                sandbox: sandbox.as_ref(),
                action: &action,
                notes: &notes,
            };
            execute(&exec)
        };
        let notes = notes.into_inner();
        let raw = match result {
            Ok((v, t)) => {
                *executed = Some(t);
                v
            }
            Err(error) => {
                let message = error.to_string();
                let mut ctx = PolicyContext::new(action, Stage::OnError);
                ctx.runtime_metadata = runtime;
                ctx.error = Some(message.clone());
                let on_error = self.engine.evaluate(&ctx);
                action = ctx.action;
                let on_error = match on_error {
                    Ok(v) => v,
                    Err(e) => {
                        let mut ev = policy_failure(&req, &action, &e, digest.get(&action), None);
                        if let Some(ev) = &mut ev {
                            ev.outcome = AuditOutcome::ExecutionFailed;
                            ev.stage = Stage::OnError;
                            ev.metadata.insert("error_message".into(), json!(message));
                            ev.metadata.extend(notes);
                        }
                        self.emit_some(ev, receipt, &mut events)?;
                        return Err(e.into());
                    }
                };
                let reported = if on_error.decisions.is_empty() {
                    before.as_ref().unwrap_or(&on_error)
                } else {
                    &on_error
                };
                let mut ev = AuditEvent::from_verdict_with_digest(
                    &action,
                    reported,
                    AuditOutcome::ExecutionFailed,
                    digest.get(&action),
                );
                ev.stage = Stage::OnError;
                ev.metadata
                    .insert("error_type".into(), json!(short_type_name::<E>()));
                ev.metadata.insert("error_message".into(), json!(message));
                ev.metadata.extend(notes);
                if req.single_event {
                    let after = (!on_error.decisions.is_empty()).then_some(&on_error);
                    single_event_summary(&mut ev, before.as_ref(), after, &routed_from);
                }
                self.emit(ev, receipt, &mut events)?;
                return Err(InterceptError::Execution {
                    error,
                    action: Box::new(action),
                });
            }
        };

        // The action with the raw output (the summary is replaced, as `with_output` does).
        action.output = Some(raw);
        action.output_summary = None;
        let mut ctx = PolicyContext::new(action, Stage::AfterCapability);
        ctx.runtime_metadata = runtime;
        ctx.approval.clone_from(&approval);
        let after = self.engine.evaluate(&ctx);
        let PolicyContext {
            action: mut done,
            output: raw,
            ..
        } = ctx;
        let after = match after {
            Ok(v) => v,
            Err(e) => {
                let mut ev = policy_failure(&req, &done, &e, digest.get(&done), Some(notes));
                if let Some(ev) = &mut ev {
                    ev.outcome = AuditOutcome::DeniedAfterExecution;
                    ev.stage = Stage::AfterCapability;
                }
                self.emit_some(ev, receipt, &mut events)?;
                return Err(e.into());
            }
        };
        output_obligations.extend_output(&after.obligations);
        let mut output = raw.unwrap_or_default();
        let transformed = pointer::apply_all(&mut output, &output_obligations.output_mutations);
        let mut redacted = Vec::new();
        for p in &output_obligations.redact {
            if pointer::redact(&mut output, p).is_ok() {
                redacted.push(p.clone());
            }
        }
        // The executed action carries the delivered output.
        done.output = Some(output.clone());
        if after.is_denied() {
            let mut ev = AuditEvent::from_verdict_with_digest(
                &done,
                &after,
                AuditOutcome::DeniedAfterExecution,
                digest.get(&done),
            );
            ev.redacted = redacted;
            ev.input = Self::recorded_input(
                self.record_payloads || req.record_input,
                &done.input,
                &output_obligations.redact,
            );
            if self.record_payloads {
                ev.output = Some(output);
            }
            ev.metadata.extend(notes);
            if req.single_event {
                single_event_summary(&mut ev, before.as_ref(), Some(&after), &routed_from);
            }
            self.emit(ev, receipt, &mut events)?;
            return Err(InterceptError::Denied(Box::new(Denial {
                stage: Stage::AfterCapability,
                decision: after.decision.clone(),
                action: done,
                verdict: Some(after),
            })));
        }
        if let Err(e) = transformed {
            let mut d = Decision::deny(format!("transform_output failed: {e}"))
                .with_code("transform_failed");
            d.action_id = Some(done.action_id.clone());
            let mut ev = AuditEvent::with_digest(
                &done,
                &d,
                Stage::AfterCapability,
                AuditOutcome::DeniedAfterExecution,
                digest.get(&done),
            );
            ev.metadata.extend(notes);
            if req.single_event {
                let after = (!after.decisions.is_empty()).then_some(&after);
                single_event_summary(&mut ev, before.as_ref(), after, &routed_from);
            }
            self.emit(ev, receipt, &mut events)?;
            return Err(InterceptError::Transform(e));
        }
        let reported = match &before {
            Some(b) if after.decisions.is_empty() => b,
            _ => &after,
        };
        let mut ev = AuditEvent::from_verdict_with_digest(
            &done,
            reported,
            AuditOutcome::Executed,
            digest.get(&done),
        );
        ev.stage = if after.decisions.is_empty() && before.is_some() {
            Stage::BeforeCapability
        } else {
            Stage::AfterCapability
        };
        if !after.decisions.is_empty() {
            let mut ids = before.as_ref().map(Verdict::policy_ids).unwrap_or_default();
            for id in after.policy_ids() {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            ev.policy_ids = ids;
        }
        ev.redacted = redacted;
        ev.approval_id = approval.as_ref().map(|a| a.approval_id.clone());
        ev.input = Self::recorded_input(
            self.record_payloads || req.record_input,
            &done.input,
            &output_obligations.redact,
        );
        if self.record_payloads {
            ev.output = Some(output.clone());
        }
        ev.metadata.extend(notes);
        if req.single_event {
            let after = (!after.decisions.is_empty()).then_some(&after);
            single_event_summary(&mut ev, before.as_ref(), after, &routed_from);
        }
        self.emit(ev, receipt, &mut events)?;
        Ok(InterceptResult {
            action: done,
            before,
            after,
            output,
            routed_from,
            approval,
            events,
        })
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
