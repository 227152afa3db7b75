//! The governed lifecycle: plan → authorize → execute → verify → receipt → rollback.

use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::{AuthorizationDecision, EffectPolicy, authorize_effects};
use capability_core::binder::CancelToken;
use capability_core::discovery::DiscoveryQuery;
use capability_core::json::canonical_hash;
use capability_core::plan::{CapabilityRef, Plan, PlanDetails, new_plan_id, unique};
use capability_core::receipt::{
    ApprovalUse, Receipt, ReceiptGovernance, ReceiptStatus, SerializedError, VerdictSummary,
    Verification, new_receipt_id,
};
use capability_core::{CapabilityError, ErrorCode};
use serde_json::{Value, json};

use capability_policy::intercept::Denial;
use capability_policy::{
    GovernedCapability, Governor, InterceptError, InterceptRequest, Interrupted, IsolationTier,
    OutputWithheld, SandboxRequirement, VerifiedToken,
};

use crate::capability::{Capability, ExecutionContext, HookError, Implementation};
use crate::executor::{Executed, ExecutionFailure, ExecutionRequest, Executor, InProcessExecutor};
use crate::governance::Caller;
use crate::registry::{CapabilityRegistry, Discovered, Ranker};
use crate::store::{MemoryReceiptStore, ReceiptQuery, ReceiptStore};
use capability_exec::BoundaryReport;

/// A source of time (milliseconds since the Unix epoch), replaceable for deterministic tests.
pub trait Clock: Send + Sync {
    fn now_millis(&self) -> i64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        capability_core::js::now_millis()
    }
}

/// Per-call options of `execute`, `invoke` and `rollback`.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// The caller approves effects that require approval.
    pub approved: bool,
    /// Caller metadata, copied into the receipt.
    pub metadata: Option<Value>,
    /// Wall-clock limit for the execution.
    pub timeout: Option<Duration>,
    /// Cooperative cancellation.
    pub cancel: Option<CancelToken>,
    /// Who acts, for whom and where, and the call's context (used by the governance layer).
    pub caller: Option<Caller>,
    /// A token from an approved approval, valid for this exact plan (single use).
    pub approval_token: Option<String>,
    /// The same, already decoded by the governor's approval manager
    /// ([`ApprovalManager::decode`](capability_policy::ApprovalManager::decode)), as a host
    /// does to find the plan: its signature is not checked again. When set,
    /// `approval_token` is not read.
    pub verified_approval: Option<VerifiedToken>,
    /// Audit the call with one event (see `capability_policy::InterceptRequest::single_event`).
    pub single_event: bool,
    /// Record the input in the audit event of the outcome (redactions applied).
    pub record_input: bool,
}

impl ExecuteOptions {
    pub fn approved() -> Self {
        ExecuteOptions {
            approved: true,
            ..Default::default()
        }
    }
}

/// Builds a [`CapabilityRuntime`].
pub struct RuntimeBuilder {
    policy: EffectPolicy,
    store: Arc<dyn ReceiptStore>,
    executor: Option<Arc<dyn Executor>>,
    clock: Arc<dyn Clock>,
    governor: Option<Arc<Governor>>,
}

impl RuntimeBuilder {
    /// The governance layer: policies decide after effect authorization, and every decision
    /// and outcome is audited.
    pub fn governor(mut self, governor: Arc<Governor>) -> Self {
        self.governor = Some(governor);
        self
    }

    /// The effect policy (default: deny all effects, as the reference).
    pub fn policy(mut self, policy: EffectPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Where receipts go (default: in memory).
    pub fn store(mut self, store: Arc<dyn ReceiptStore>) -> Self {
        self.store = store;
        self
    }

    /// The isolating executor for package modules (default: none, so they cannot run).
    pub fn executor(mut self, executor: Arc<dyn Executor>) -> Self {
        self.executor = Some(executor);
        self
    }

    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn build(self) -> CapabilityRuntime {
        CapabilityRuntime {
            registry: CapabilityRegistry::new(),
            policy: self.policy,
            store: self.store,
            module_executor: self
                .executor
                .map(std::sync::OnceLock::from)
                .unwrap_or_default(),
            clock: self.clock,
            governor: self.governor,
        }
    }
}

/// The capability runtime.
pub struct CapabilityRuntime {
    registry: CapabilityRegistry,
    policy: EffectPolicy,
    store: Arc<dyn ReceiptStore>,
    /// Set at build time, or once later ([`CapabilityRuntime::set_module_executor`]).
    module_executor: std::sync::OnceLock<Arc<dyn Executor>>,
    clock: Arc<dyn Clock>,
    governor: Option<Arc<Governor>>,
}

impl std::fmt::Debug for CapabilityRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityRuntime")
            .field("capabilities", &self.registry.len())
            .finish()
    }
}

impl Default for CapabilityRuntime {
    fn default() -> Self {
        CapabilityRuntime::builder().build()
    }
}

/// Registers the governance view of a capability with the governor when it is missing
/// (`INVALID_MANIFEST` when its `metadata.governance` does not read).
fn ensure_governed(governor: &Governor, capability: &Capability) -> Result<(), CapabilityError> {
    if governor.capabilities().exists(capability.id()) {
        return Ok(());
    }
    let governed =
        GovernedCapability::from_manifest(&capability.manifest().to_value()).map_err(|e| {
            CapabilityError::new(
                ErrorCode::InvalidManifest,
                format!("metadata.governance: {e}"),
            )
        })?;
    governor.register_capability(governed);
    Ok(())
}

fn iso(ms: i64) -> String {
    capability_core::js::iso_from_millis(ms)
}

fn serialize_hook_error(e: &HookError) -> SerializedError {
    match e {
        HookError::Capability(c) => SerializedError {
            name: "CapabilityError".into(),
            message: c.message.clone(),
            code: Some(c.code.as_str().into()),
        },
        HookError::Other { name, message } => SerializedError {
            name: name.clone(),
            message: message.clone(),
            code: None,
        },
    }
}

static IN_PROCESS: InProcessExecutor = InProcessExecutor;

type RunResult = Result<(Executed, Option<Verification>), ExecutionFailure>;

/// One timed run through an executor.
struct Run {
    started: i64,
    ended: i64,
    outcome: RunResult,
}

/// What ran under governance: the capability (the routed one after a `route`), its plan and
/// the timed run.
struct Ran {
    capability: Arc<Capability>,
    plan: Plan,
    run: Run,
}

/// Why the governed execute closure did not produce an output.
enum GovernedFailure {
    /// Refused before running (re-planning or re-authorization failed): no receipt.
    Refused(CapabilityError),
    /// The capability ran and failed: its receipt is kept.
    Failed { message: String, ran: Box<Ran> },
}

/// A successful execution: its receipt (stored), and the executor's own answer when it gave
/// one and policies left the output as it was ([`Executed::reply`]).
#[derive(Clone, Debug)]
pub struct Completed {
    pub receipt: Arc<Receipt>,
    pub reply: Option<Value>,
}

/// What an invocation came to.
#[derive(Debug)]
pub enum Outcome {
    /// The capability ran and succeeded.
    Completed(Completed),
    /// A policy requires a human's approval first: the pending approval (the plan is kept).
    NeedsApproval(Box<PendingApproval>),
    /// Refused or failed: the error, whose `receipt_id` names the failed receipt when one
    /// was kept.
    Failed(CapabilityError),
}

/// An execution waiting for a human's approval.
#[derive(Clone, Debug)]
pub struct PendingApproval {
    /// Why approval is required (the policy's reason).
    pub reason: String,
    /// The exact plan an approval would let run (kept in the store).
    pub plan: Plan,
    /// The pending approval record (absent when the governor has no approval manager).
    pub approval: Option<capability_policy::ApprovalRecord>,
}

impl PendingApproval {
    /// The `APPROVAL_REQUIRED` error of the plain API, with `details.approval`.
    pub fn to_error(&self) -> CapabilityError {
        let mut details = json!({"reason": self.reason, "planFingerprint": self.plan.fingerprint});
        if let Some(a) = &self.approval {
            details["approval"] = a.to_json();
        }
        CapabilityError::new(ErrorCode::ApprovalRequired, self.reason.clone()).with_details(details)
    }
}

impl Outcome {
    /// The plain API's view: the receipt, or an error (`APPROVAL_REQUIRED` for a pending
    /// approval).
    pub fn into_result(self) -> Result<Arc<Receipt>, CapabilityError> {
        match self {
            Outcome::Completed(c) => Ok(c.receipt),
            Outcome::NeedsApproval(p) => Err(p.to_error()),
            Outcome::Failed(e) => Err(e),
        }
    }

    /// The receipt kept for this attempt, if any.
    pub fn receipt_id(&self) -> Option<&str> {
        match self {
            Outcome::Completed(c) => Some(&c.receipt.receipt_id),
            Outcome::NeedsApproval(_) => None,
            Outcome::Failed(e) => e.receipt_id.as_deref(),
        }
    }
}

impl From<Result<Completed, CapabilityError>> for Outcome {
    fn from(r: Result<Completed, CapabilityError>) -> Self {
        match r {
            Ok(c) => Outcome::Completed(c),
            Err(e) => Outcome::Failed(e),
        }
    }
}

impl From<CapabilityError> for GovernedFailure {
    fn from(e: CapabilityError) -> Self {
        GovernedFailure::Refused(e)
    }
}

impl std::fmt::Display for GovernedFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GovernedFailure::Refused(e) => write!(f, "{}", e.message),
            GovernedFailure::Failed { message, .. } => f.write_str(message),
        }
    }
}

impl CapabilityRuntime {
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            policy: EffectPolicy::deny_all(),
            store: Arc::new(MemoryReceiptStore::new()),
            executor: None,
            clock: Arc::new(SystemClock),
            governor: None,
        }
    }

    pub fn registry(&self) -> &CapabilityRegistry {
        &self.registry
    }

    pub fn policy(&self) -> &EffectPolicy {
        &self.policy
    }

    pub fn store(&self) -> &Arc<dyn ReceiptStore> {
        &self.store
    }

    /// Registers a capability (`DUPLICATE_CAPABILITY` when the id is taken). With a
    /// governance layer, its `metadata.governance` is read now (`INVALID_MANIFEST` when bad).
    pub fn register(&self, capability: Capability) -> Result<Arc<Capability>, CapabilityError> {
        if let Some(g) = &self.governor {
            GovernedCapability::from_manifest(&capability.manifest().to_value()).map_err(|e| {
                CapabilityError::new(
                    ErrorCode::InvalidManifest,
                    format!("metadata.governance: {e}"),
                )
            })?;
            let cap = self.registry.register(capability)?;
            ensure_governed(g, &cap)?;
            return Ok(cap);
        }
        self.registry.register(capability)
    }

    /// Registers the capability `id` without building it: `resolve` builds it the first time
    /// it is looked up or listed (see [`crate::registry`]); `DUPLICATE_CAPABILITY` when the
    /// id is taken. With a governance layer, its `metadata.governance` is read when it is
    /// built (an `INVALID_MANIFEST` error of the lookup then, where
    /// [`CapabilityRuntime::register`] fails at once) and its governed view registered with
    /// the governor then.
    pub fn register_deferred(
        &self,
        id: impl Into<String>,
        resolve: crate::registry::Resolve,
    ) -> Result<(), CapabilityError> {
        let resolve = match &self.governor {
            None => resolve,
            Some(g) => {
                let governor = Arc::clone(g);
                Box::new(move || {
                    let capability = resolve()?;
                    ensure_governed(&governor, &capability)?;
                    Ok(capability)
                })
            }
        };
        self.registry.register_deferred(id, resolve)
    }

    /// Gives a runtime built without one its isolating executor for package modules (a host
    /// that registers its first package later). Returns `false`, leaving the executor as it
    /// was, when it already had one.
    pub fn set_module_executor(&self, executor: Arc<dyn Executor>) -> bool {
        self.module_executor.set(executor).is_ok()
    }

    /// Whether package modules can run (an isolating executor is set).
    pub fn has_module_executor(&self) -> bool {
        self.module_executor.get().is_some()
    }

    /// The governance layer, when there is one.
    pub fn governor(&self) -> Option<&Arc<Governor>> {
        self.governor.as_ref()
    }

    /// A plan kept while its approval was pending (by fingerprint).
    pub fn pending_plan(&self, fingerprint: &str) -> Result<Option<Plan>, CapabilityError> {
        self.store.get_plan(fingerprint).map_err(store_error)
    }

    /// The inert view of a capability: manifest plus `executable: false`.
    pub fn inspect(&self, id: &str) -> Result<Value, CapabilityError> {
        Ok(self.registry.require(id)?.inspect())
    }

    /// Lexical discovery over the registered capabilities.
    pub fn discover(&self, query: &DiscoveryQuery) -> Vec<Discovered> {
        self.registry.discover(query)
    }

    /// Ranked discovery.
    pub fn discover_with(
        &self,
        query: &DiscoveryQuery,
        ranker: &dyn Ranker,
    ) -> Result<Vec<Discovered>, CapabilityError> {
        self.registry.discover_with(query, ranker)
    }

    fn executor_for<'a>(
        &'a self,
        capability: &'a Capability,
    ) -> Result<&'a dyn Executor, CapabilityError> {
        match capability.implementation() {
            Implementation::Native(_) => Ok(&IN_PROCESS),
            Implementation::Module(_) => match self.module_executor.get() {
                Some(e) => Ok(e.as_ref()),
                None => Err(CapabilityError::new(
                    ErrorCode::ExecutionFailed,
                    format!(
                        "Module-backed capability {} requires an isolated executor",
                        capability.id()
                    ),
                )),
            },
            Implementation::Executor(e) => Ok(e.as_ref()),
            Implementation::Inert => Err(CapabilityError::new(
                ErrorCode::ExecutionFailed,
                format!(
                    "Capability {} is inert: it has no implementation",
                    capability.id()
                ),
            )),
        }
    }

    /// Plans an execution: validates the input (`INVALID_INPUT`, issues as details), runs the
    /// plan hook (the capability's, else the executor's, else the default), checks that the
    /// planned effects were declared (`INVALID_PLAN`) and fingerprints the plan.
    pub fn plan(&self, id: &str, input: Value) -> Result<Plan, CapabilityError> {
        let capability = self.registry.require(id)?;
        self.plan_for(&capability, input)
    }

    fn plan_for(
        &self,
        capability: &Arc<Capability>,
        input: Value,
    ) -> Result<Plan, CapabilityError> {
        // One nesting limit on the way in and out: what is accepted can be stored and read
        // back (receipts, pending plans and approvals hold the input).
        if capability_core::json::depth(&input) > capability_core::json::MAX_DEPTH {
            return Err(CapabilityError::new(
                ErrorCode::InvalidInput,
                capability_core::json::too_deep("Input"),
            ));
        }
        let issues = capability.validate_input(&input);
        if !issues.is_empty() {
            return Err(CapabilityError::new(
                ErrorCode::InvalidInput,
                "Input failed schema validation",
            )
            .with_details(serde_json::to_value(issues).unwrap_or(Value::Null)));
        }
        let manifest = capability.manifest();
        let cancel = CancelToken::new();
        let details = match capability.hooks().and_then(|h| h.plan.as_ref()) {
            Some(hook) => {
                let ctx = ExecutionContext {
                    manifest,
                    plan: None,
                    approved: false,
                    metadata: None,
                    cancel: &cancel,
                };
                hook(&input, &ctx).map_err(hook_to_plan_error)?
            }
            None => match capability.implementation() {
                Implementation::Module(_) | Implementation::Executor(_) => self
                    .executor_for(capability)?
                    .plan(capability.as_ref(), &input, &cancel)
                    .map_err(hook_to_plan_error)?
                    .unwrap_or_default(),
                _ => PlanDetails::default(),
            },
        };
        let effects = unique(
            details
                .effects
                .unwrap_or_else(|| manifest.effects().to_vec()),
        );
        let undeclared: Vec<&str> = effects
            .iter()
            .filter(|e| !manifest.effects().contains(e))
            .map(String::as_str)
            .collect();
        if !undeclared.is_empty() {
            return Err(CapabilityError::new(
                ErrorCode::InvalidPlan,
                format!(
                    "Plan requested undeclared effects: {}",
                    undeclared.join(", ")
                ),
            ));
        }
        let summary = details
            .summary
            .unwrap_or_else(|| ["Execute ", &manifest.name].concat());
        Ok(Plan::build(
            new_plan_id(),
            CapabilityRef {
                id: manifest.id.clone(),
                version: manifest.version.clone(),
            },
            input,
            effects,
            summary,
            iso(self.clock.now_millis()),
            details.data,
        ))
    }

    /// Re-checks the plan's integrity, then authorizes its effects under the host policy.
    pub fn authorize(
        &self,
        plan: &Plan,
        approved: bool,
    ) -> Result<AuthorizationDecision, CapabilityError> {
        plan.verify_integrity()?;
        Ok(authorize_effects(&plan.effects, &self.policy, approved))
    }

    /// Executes a plan: rejects drift (fingerprint, input hash, version), authorizes
    /// (`PERMISSION_DENIED` / `APPROVAL_REQUIRED`, no receipt), runs the capability through
    /// its executor, validates the output, verifies, and stores a receipt for the attempt —
    /// a failed receipt is stored before the error is returned.
    pub fn execute(
        &self,
        plan: &Plan,
        options: &ExecuteOptions,
    ) -> Result<Arc<Receipt>, CapabilityError> {
        self.execute_outcome(plan, options).into_result()
    }

    /// [`CapabilityRuntime::execute`], with a pending approval told apart from a failure.
    pub fn execute_outcome(&self, plan: &Plan, options: &ExecuteOptions) -> Outcome {
        let capability = match self.registry.require(&plan.capability.id) {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(e),
        };
        if let Err(e) = plan.verify_integrity() {
            return Outcome::Failed(e);
        }
        self.execute_verified(&capability, plan.clone(), options)
    }

    /// Plans and executes in one call.
    pub fn invoke(
        &self,
        id: &str,
        input: Value,
        options: &ExecuteOptions,
    ) -> Result<Arc<Receipt>, CapabilityError> {
        self.invoke_outcome(id, input, options).into_result()
    }

    /// [`CapabilityRuntime::invoke`], with a pending approval told apart from a failure.
    pub fn invoke_outcome(&self, id: &str, input: Value, options: &ExecuteOptions) -> Outcome {
        let planned = self
            .registry
            .require(id)
            .and_then(|c| self.plan_for(&c, input).map(|p| (c, p)));
        match planned {
            // The plan was built here and never left this call: its integrity holds.
            Ok((capability, plan)) => self.execute_verified(&capability, plan, options),
            Err(e) => Outcome::Failed(e),
        }
    }

    fn execute_verified(
        &self,
        capability: &Arc<Capability>,
        plan: Plan,
        options: &ExecuteOptions,
    ) -> Outcome {
        if capability.manifest().version != plan.capability.version {
            return Outcome::Failed(CapabilityError::new(
                ErrorCode::InvalidPlan,
                "Capability version changed after planning",
            ));
        }
        let decision = authorize_effects(&plan.effects, &self.policy, options.approved);
        if let Some(e) = decision.to_error() {
            return Outcome::Failed(e);
        }
        if let Some(governor) = &self.governor {
            return self.execute_governed(governor, capability, plan, options);
        }
        self.run_timed(capability, &plan, options, None)
            .and_then(|run| self.finish(new_receipt_id(), capability, plan, options, run, None))
            .into()
    }

    /// Runs a plan through its executor, timed.
    fn run_timed(
        &self,
        capability: &Arc<Capability>,
        plan: &Plan,
        options: &ExecuteOptions,
        sandbox: Option<&SandboxRequirement>,
    ) -> Result<Run, CapabilityError> {
        let executor = self.executor_for(capability)?;
        let cancel = options.cancel.clone().unwrap_or_default();
        let mut timeout = options.timeout;
        if let Some(ms) = sandbox.and_then(|s| s.timeout_ms) {
            let floor = Duration::from_millis(ms);
            timeout = Some(timeout.map_or(floor, |t| t.min(floor)));
        }
        let request = ExecutionRequest {
            capability: capability.as_ref(),
            plan,
            approved: options.approved,
            metadata: options.metadata.as_ref(),
            cancel: &cancel,
            timeout,
            sandbox,
        };
        let started = self.clock.now_millis();
        let outcome = self.run(capability, executor, &request);
        let ended = self.clock.now_millis();
        Ok(Run {
            started,
            ended,
            outcome,
        })
    }

    /// Builds, stores and returns the receipt of an attempt (a failed receipt is stored
    /// before its error is returned).
    fn finish(
        &self,
        receipt_id: String,
        capability: &Capability,
        plan: Plan,
        options: &ExecuteOptions,
        run: Run,
        governance: Option<ReceiptGovernance>,
    ) -> Result<Completed, CapabilityError> {
        let Plan {
            plan_id,
            capability: capability_ref,
            input,
            input_hash,
            effects,
            ..
        } = plan;
        let mut receipt = Receipt {
            receipt_id,
            plan_id,
            capability: capability_ref,
            status: ReceiptStatus::Succeeded,
            started_at: iso(run.started),
            ended_at: iso(run.ended),
            duration_ms: u64::try_from(run.ended - run.started).unwrap_or(0),
            effects,
            input_hash,
            output_hash: None,
            input,
            output: None,
            verification: None,
            error: None,
            metadata: options.metadata.clone(),
            provenance: capability.provenance().cloned(),
            rollback_result: None,
            isolation: None,
            governance,
            extra: Default::default(),
        };
        match run.outcome {
            Ok((executed, verification)) => {
                receipt.output_hash = Some(canonical_hash(&executed.output));
                receipt.output = Some(executed.output);
                receipt.verification = verification;
                receipt.isolation = Some(executed.isolation.to_value());
                let receipt = Arc::new(receipt);
                self.store.put(Arc::clone(&receipt)).map_err(store_error)?;
                Ok(Completed {
                    receipt,
                    reply: executed.reply,
                })
            }
            Err(ExecutionFailure {
                error, isolation, ..
            }) => {
                receipt.status = ReceiptStatus::Failed;
                receipt.error = Some(serialize_hook_error(&error));
                receipt.isolation = isolation.as_ref().map(BoundaryReport::to_value);
                let id = receipt.receipt_id.clone();
                self.store.put(Arc::new(receipt)).map_err(store_error)?;
                Err(match error {
                    HookError::Capability(e) => e.with_receipt(id),
                    HookError::Other { name, message } => CapabilityError::new(
                        ErrorCode::ExecutionFailed,
                        format!("Capability execution failed; receipt {id}"),
                    )
                    .with_details(
                        json!({"receiptId": id, "cause": {"name": name, "message": message}}),
                    )
                    .with_receipt(id),
                })
            }
        }
    }

    /// The governed path: the policy layer decides before and after the execution, and every
    /// decision and outcome is audited (see [`crate::governance`]).
    fn execute_governed(
        &self,
        governor: &Governor,
        capability: &Arc<Capability>,
        plan: Plan,
        options: &ExecuteOptions,
    ) -> Outcome {
        let receipt_id = new_receipt_id();
        if let Err(e) = ensure_governed(governor, capability) {
            return Outcome::Failed(e);
        }
        let caller = options.caller.clone().unwrap_or_default();
        let mut req = caller
            .apply(InterceptRequest::new(
                capability.id(),
                caller.action_type,
                plan.input.clone(),
            ))
            .plan_fingerprint(plan.fingerprint.clone())
            .receipt(receipt_id.clone())
            .single_event(options.single_event);
        req.record_input = options.record_input;
        if let Some(token) = &options.verified_approval {
            req = req.verified_approval(token.clone());
        } else if let Some(token) = &options.approval_token {
            req = req.approval_token(token.clone());
        }
        let intercepted = governor.intercept_with(req, |exec| {
            let mut ran = self.run_governed(governor, capability, &plan, options, exec)?;
            if let Err(failure) = &mut ran.run.outcome {
                withhold_named_in_error(governor, exec.action, &mut failure.error);
            }
            let notes = match &ran.run.outcome {
                Ok((executed, _)) => &executed.notes,
                Err(failure) => &failure.notes,
            };
            for (key, value) in notes {
                exec.note(key.clone(), value.clone());
            }
            match &ran.run.outcome {
                Ok((executed, _)) => Ok((executed.output.clone(), ran)),
                Err(failure) => Err(GovernedFailure::Failed {
                    message: failure.error.message().to_string(),
                    ran: Box::new(ran),
                }),
            }
        });
        let finish = |ran: Ran, governance: Option<ReceiptGovernance>| -> Outcome {
            self.finish(
                receipt_id.clone(),
                &ran.capability,
                ran.plan,
                options,
                ran.run,
                governance,
            )
            .into()
        };
        // An output withheld after the capability ran: its receipt records the refusal.
        let withheld = |mut ran: Ran, e: CapabilityError, governance| -> Outcome {
            ran.run.outcome = Err(withheld_failure(HookError::Capability(e), ran.run.outcome));
            finish(ran, governance)
        };
        let governance_failed = |e: &dyn std::fmt::Display| {
            Outcome::Failed(CapabilityError::new(
                ErrorCode::ExecutionFailed,
                format!("governance failed: {e}"),
            ))
        };
        match intercepted {
            Ok((done, mut ran)) => {
                let governance = ReceiptGovernance {
                    agent_id: Some(done.action.agent_id.clone()),
                    tenant: done.action.tenant_id.clone(),
                    action_id: Some(done.action.action_id.clone()),
                    before: done
                        .before
                        .as_ref()
                        .map(capability_policy::Verdict::summary),
                    after: Some(done.after.summary()),
                    audit_events: done.events,
                    routed_from: done.routed_from,
                    approval: done.approval.map(|a| ApprovalUse {
                        approval_id: a.approval_id,
                        approver: a.approver,
                    }),
                    redacted: done.after.obligations.redact.clone(),
                    ..Default::default()
                };
                // What policies said to redact is kept nowhere: not in the receipt's input
                // either (its `inputHash` still binds the input as given).
                let redact: Vec<&String> = done
                    .before
                    .iter()
                    .chain(std::iter::once(&done.after))
                    .flat_map(|v| v.obligations.redact.iter())
                    .collect();
                for pointer in &redact {
                    let _ = capability_policy::pointer::redact(&mut ran.plan.input, pointer);
                }
                if let Ok((executed, _)) = &mut ran.run.outcome {
                    // The delivered output: transformed and redacted by policy. The
                    // executor's own answer holds the output as it was (and maybe in other
                    // forms: an MCP result's text beside its structured content): it goes
                    // back only when policies changed nothing and redact nothing.
                    if executed.output != done.output || !redact.is_empty() {
                        executed.output = done.output;
                        executed.reply = None;
                    }
                }
                finish(ran, Some(governance))
            }
            Err(Interrupted::Refused(refusal)) => match refusal {
                InterceptError::Denied(denial) => {
                    let (reason, details) = denial_details(&denial);
                    Outcome::Failed(
                        CapabilityError::new(ErrorCode::PermissionDenied, reason)
                            .with_details(details),
                    )
                }
                InterceptError::ApprovalRequired {
                    approval, decision, ..
                } => {
                    if let Err(e) = self.store.put_plan(&plan) {
                        return Outcome::Failed(store_error(e));
                    }
                    Outcome::NeedsApproval(Box::new(PendingApproval {
                        reason: decision
                            .reason
                            .clone()
                            .unwrap_or_else(|| "approval required".into()),
                        plan,
                        approval: approval.map(|a| *a),
                    }))
                }
                InterceptError::Approval(e) => Outcome::Failed(CapabilityError::new(
                    ErrorCode::PermissionDenied,
                    format!("approval refused: {e}"),
                )),
                InterceptError::NotFound(e) => {
                    Outcome::Failed(CapabilityError::new(ErrorCode::NotFound, e.to_string()))
                }
                InterceptError::Transform(e) => Outcome::Failed(CapabilityError::new(
                    ErrorCode::PermissionDenied,
                    format!("transform by policy failed: {e}"),
                )),
                e @ (InterceptError::Engine(_) | InterceptError::Audit(_)) => governance_failed(&e),
            },
            Err(Interrupted::Failed {
                error, governance, ..
            }) => match (error, governance) {
                (GovernedFailure::Refused(e), None) => Outcome::Failed(e),
                (GovernedFailure::Failed { ran, .. }, None) => finish(
                    *ran,
                    Some(ReceiptGovernance {
                        outcome: Some("execution_failed".into()),
                        ..Default::default()
                    }),
                ),
                (error, Some(g)) => {
                    // Keep the evidence of what ran, then report the failure.
                    if let GovernedFailure::Failed { ran, .. } = error {
                        let _ = finish(*ran, None);
                    }
                    governance_failed(&g)
                }
            },
            Err(Interrupted::Withheld {
                executed: ran,
                reason,
            }) => match reason {
                OutputWithheld::Denied(denial) => {
                    // The side effect happened; the output is withheld.
                    let (reason, details) = denial_details(&denial);
                    let e = CapabilityError::new(
                        ErrorCode::PermissionDenied,
                        format!("Output denied by policy: {reason}"),
                    )
                    .with_details(details.clone());
                    let governance = ReceiptGovernance {
                        after: Some(VerdictSummary {
                            decision: "deny".into(),
                            reason: Some(reason),
                            details: Some(details),
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                    withheld(ran, e, Some(governance))
                }
                OutputWithheld::Transform(e) => {
                    let e = CapabilityError::new(
                        ErrorCode::PermissionDenied,
                        format!("Output withheld: transform by policy failed: {e}"),
                    );
                    withheld(ran, e, None)
                }
                OutputWithheld::Governance(g) => {
                    // Keep the evidence of what ran, then report the failure.
                    let _ = finish(ran, None);
                    governance_failed(&g)
                }
            },
        }
    }

    /// The execution inside the governed lifecycle: the target (the routed capability after a
    /// `route`), re-planned and re-authorized when its input or capability changed, run
    /// under the isolation a `sandbox` decision requires.
    fn run_governed(
        &self,
        governor: &Governor,
        capability: &Arc<Capability>,
        plan: &Plan,
        options: &ExecuteOptions,
        exec: &capability_policy::Execution<'_>,
    ) -> Result<Ran, GovernedFailure> {
        let target = if exec.capability.name == capability.id() {
            Arc::clone(capability)
        } else {
            let routed = self.registry.require(&exec.capability.name)?;
            ensure_governed(governor, &routed)?;
            routed
        };
        let target_plan = if Arc::ptr_eq(&target, capability) && *exec.input == plan.input {
            plan.clone()
        } else {
            // A transformed input or a routed capability is planned (validated,
            // fingerprinted) and authorized again.
            let replanned = self.plan_for(&target, exec.input.clone())?;
            let decision = authorize_effects(&replanned.effects, &self.policy, options.approved);
            if let Some(e) = decision.to_error() {
                return Err(e.into());
            }
            replanned
        };
        if let Some(floor) = exec.sandbox.and_then(|s| s.min_tier)
            && floor > IsolationTier::InProcess
            && target.is_native()
        {
            return Err(CapabilityError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "policy requires isolation tier {} but {} runs in process",
                    floor.as_str(),
                    target.id()
                ),
            )
            .into());
        }
        let run = self.run_timed(&target, &target_plan, options, exec.sandbox)?;
        Ok(Ran {
            capability: target,
            plan: target_plan,
            run,
        })
    }

    /// Runs execute, output validation and verification; failures carry the isolation record
    /// when the boundary was crossed.
    fn run(
        &self,
        capability: &Capability,
        executor: &dyn Executor,
        request: &ExecutionRequest<'_>,
    ) -> RunResult {
        let check = &mut |executed: &mut Executed| check_output(capability, executed);
        let (executed, verification) = match capability.hooks().and_then(|h| h.verify.as_ref()) {
            // The capability's own (in-process) verification hook.
            Some(hook) => {
                let mut executed = executor.execute(request)?;
                if let Err(e) = check(&mut executed) {
                    return Err(ExecutionFailure::after(HookError::Capability(e), executed));
                }
                let verification = hook(&request.plan.input, &executed.output, &request.context());
                (executed, Some(verification))
            }
            // The executor's: execute and verify may share one boundary crossing.
            None => {
                let (executed, verification) = executor.execute_verified(request, check)?;
                (executed, verification.map(Ok))
            }
        };
        let verification = match verification {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => return Err(ExecutionFailure::after(e, executed)),
        };
        if let Some(v) = &verification
            && !v.ok
        {
            let message = v
                .message
                .clone()
                .unwrap_or_else(|| "Capability verification failed".into());
            let e = CapabilityError::new(ErrorCode::VerifyFailed, message);
            return Err(ExecutionFailure::after(HookError::Capability(e), executed));
        }
        Ok((executed, verification))
    }

    /// Rolls back a successful receipt of a reversible capability that has a rollback
    /// implementation, after authorizing the receipt's effects. The receipt becomes
    /// `rolled_back` (with `rollbackResult`) or `rollback_failed` (then `ROLLBACK_FAILED`).
    pub fn rollback(
        &self,
        receipt_id: &str,
        options: &ExecuteOptions,
    ) -> Result<Arc<Receipt>, CapabilityError> {
        let receipt = self
            .store
            .get(receipt_id)
            .map_err(store_error)?
            .ok_or_else(|| {
                CapabilityError::new(
                    ErrorCode::NotFound,
                    format!("Receipt not found: {receipt_id}"),
                )
            })?;
        if receipt.status != ReceiptStatus::Succeeded {
            return Err(CapabilityError::new(
                ErrorCode::RollbackUnavailable,
                "Only successful executions can be rolled back",
            ));
        }
        let capability = self.registry.require(&receipt.capability.id)?;
        let executor = self.executor_for(&capability)?;
        if !capability.manifest().is_reversible() || !executor.can_rollback(capability.as_ref()) {
            return Err(CapabilityError::new(
                ErrorCode::RollbackUnavailable,
                format!("Capability is not rollback-enabled: {}", capability.id()),
            ));
        }
        let decision = authorize_effects(&receipt.effects, &self.policy, options.approved);
        if let Some(e) = decision.to_error() {
            return Err(e);
        }
        let plan = Plan {
            plan_id: receipt.plan_id.clone(),
            capability: receipt.capability.clone(),
            input: receipt.input.clone(),
            input_hash: receipt.input_hash.clone(),
            effects: receipt.effects.clone(),
            summary: format!("Roll back {}", capability.manifest().name),
            created_at: iso(self.clock.now_millis()),
            data: None,
            fingerprint: "rollback".into(),
            extra: Default::default(),
        };
        let cancel = options.cancel.clone().unwrap_or_default();
        let request = ExecutionRequest {
            capability: capability.as_ref(),
            plan: &plan,
            approved: options.approved,
            metadata: options.metadata.as_ref(),
            cancel: &cancel,
            timeout: options.timeout,
            sandbox: None,
        };
        let result = executor.rollback(&request, &receipt);
        let mut updated = (*receipt).clone();
        updated.ended_at = iso(self.clock.now_millis());
        match result {
            Ok(value) => {
                updated.status = ReceiptStatus::RolledBack;
                updated.rollback_result = Some(value);
                let updated = Arc::new(updated);
                self.store.put(Arc::clone(&updated)).map_err(store_error)?;
                Ok(updated)
            }
            Err(e) => {
                updated.status = ReceiptStatus::RollbackFailed;
                updated.error = Some(serialize_hook_error(&e));
                self.store.put(Arc::new(updated)).map_err(store_error)?;
                Err(CapabilityError::new(
                    ErrorCode::RollbackFailed,
                    format!("Rollback failed for receipt {receipt_id}"),
                )
                .with_details(json!({"receiptId": receipt_id, "cause": serialize_hook_error(&e)}))
                .with_receipt(receipt_id))
            }
        }
    }

    pub fn get_receipt(&self, receipt_id: &str) -> Result<Option<Arc<Receipt>>, CapabilityError> {
        self.store.get(receipt_id).map_err(store_error)
    }

    pub fn list_receipts(
        &self,
        query: &ReceiptQuery,
    ) -> Result<Vec<Arc<Receipt>>, CapabilityError> {
        self.store.list(query).map_err(store_error)
    }
}

/// The failure of a run whose output policy withheld after it ran: the boundary it crossed
/// and its notes are kept.
fn withheld_failure(error: HookError, outcome: RunResult) -> ExecutionFailure {
    match outcome {
        Ok((executed, _)) => ExecutionFailure::after(error, executed),
        Err(failure) => ExecutionFailure { error, ..failure },
    }
}

/// An execution's error reaches the agent, the receipt and the audit log as it is, and no
/// redaction applies to it (an MCP tool's `isError` text, a guest's message): when its text
/// names a member an after-stage `redact` points at, the text is withheld instead.
fn withhold_named_in_error(
    governor: &Governor,
    action: &capability_policy::AgentAction,
    error: &mut HookError,
) {
    let text = Value::String(error.message().to_string());
    let Ok(verdict) = governor.evaluate_action(
        action,
        capability_policy::Stage::AfterCapability,
        Some(text.clone()),
    ) else {
        return;
    };
    let Some(pointer) = verdict
        .obligations
        .redact
        .iter()
        .find(|p| capability_policy::pointer::hidden_in_text(&text, p))
    else {
        return;
    };
    let withheld =
        format!("the error text is withheld: it names `{pointer}`, which a policy redacts");
    match error {
        HookError::Capability(c) => {
            c.message = withheld;
            c.details = None;
        }
        HookError::Other { message, .. } => *message = withheld,
    }
}

/// The reason of a denial and the details its error carries.
fn denial_details(denial: &Denial) -> (String, Value) {
    let reason = denial
        .reason()
        .unwrap_or("capability invocation denied")
        .to_string();
    let details = json!({
        "stage": denial.stage.as_str(),
        "decisionId": denial.decision.decision_id,
        "policy": denial.policy_name(),
        "code": denial.decision.code,
    });
    (reason, details)
}

/// The runtime's checks of an output before it is verified: numbers normalized, the nesting
/// limit, the output schema.
fn check_output(capability: &Capability, executed: &mut Executed) -> Result<(), CapabilityError> {
    capability_core::json::normalize_numbers(&mut executed.output);
    if capability_core::json::depth(&executed.output) > capability_core::json::MAX_DEPTH {
        return Err(CapabilityError::new(
            ErrorCode::InvalidOutput,
            capability_core::json::too_deep("Output"),
        ));
    }
    let issues = capability.validate_output(&executed.output);
    if !issues.is_empty() {
        return Err(CapabilityError::new(
            ErrorCode::InvalidOutput,
            "Output failed schema validation",
        )
        .with_details(serde_json::to_value(issues).unwrap_or(Value::Null)));
    }
    Ok(())
}

fn hook_to_plan_error(e: HookError) -> CapabilityError {
    match e {
        HookError::Capability(c) => c,
        HookError::Other { name, message } => CapabilityError::new(
            ErrorCode::InvalidPlan,
            format!("Plan hook failed: {name}: {message}"),
        ),
    }
}

fn store_error(e: crate::store::StoreError) -> CapabilityError {
    CapabilityError::new(ErrorCode::ExecutionFailed, e.to_string())
}
