//! Actions decided by the host and executed by the caller, elsewhere: a model call, a memory
//! write, a retrieval made by an agent in another process or language. The before stage
//! and the after stage of the governed lifecycle become two requests:
//!
//! 1. [`Host::decide_action`] runs the before stage (token, policies, routes, budgets). A
//!    `deny` or `approval_required` ends the action there, audited; otherwise the action is
//!    *open*: the host keeps it, and answers the capability and input to use.
//! 2. The caller executes, then [`Host::report_action`] hands over the output (or the
//!    error): the after stage (`redact`, `transform_output`, `deny`) gives the output the
//!    agent may use. One audit event records both stages, with the latency, the cost and
//!    the outcome, and a receipt records the action.
//!
//! An open action belongs to the principal that opened it (another principal's id answers
//! as an unknown one). One without a result by its deadline is closed as abandoned by
//! [`Host::close_abandoned_actions`], audited as `execution_failed` with
//! `metadata.abandoned`. Open actions are kept in this process's memory: a process that
//! stops loses them without an outcome event.
//!
//! Requests and answers have one JSON form ([`ActionRequest::from_json`],
//! [`ActionDecided::to_json`], [`ActionReport::from_json`], [`ActionClosed::to_json`]), so
//! that every surface that offers this (the HTTP API and its batch form) speaks it alike.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use capability_core::json::canonical_hash;
use capability_core::plan::CapabilityRef;
use capability_core::receipt::{
    Receipt, ReceiptGovernance, ReceiptStatus, SerializedError, new_receipt_id,
};
use capability_policy::approvals::ApprovalRecord;
use capability_policy::intercept::{InterceptError, Interrupted, OpenAction, OutputWithheld};
use capability_policy::model::Labels;
use capability_policy::{ActionType, Decision, GovernedCapability, InterceptRequest, Verdict};
use serde_json::{Map, Value, json};

use crate::Host;
use crate::approvals::approval_json;
use crate::error::{Forbidden, HostError, InvalidRequest, NotFound, StoreError};
use crate::principal::{Access, Principal};
use crate::tokens::Role;

/// How long an open action waits for its result by default.
pub const DEFAULT_RESULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Most actions one principal may hold open by default.
pub const DEFAULT_MAX_OPEN_PER_PRINCIPAL: usize = 1024;
/// Most actions in one batch.
pub const MAX_BATCH: usize = 100;

/// The capability an action uses.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionCapability {
    /// A governed capability the host knows, by name.
    Named(String),
    /// A description in Brane's shape: declared on first use; a name already declared
    /// differently is refused.
    Inline(Box<GovernedCapability>),
}

/// One action to decide ([`ActionRequest::from_json`] reads its JSON form).
#[derive(Clone, Debug)]
pub struct ActionRequest {
    pub action_type: ActionType,
    pub capability: ActionCapability,
    pub input: Value,
    pub estimated_cost_usd: Option<f64>,
    pub cost_so_far_usd: Option<f64>,
    /// Token counts (`{"input": 100, "output": 20}`), kept in the audit event.
    pub tokens: Option<Map<String, Value>>,
    pub trace_id: Option<String>,
    /// A W3C `traceparent`: its trace id becomes the action's.
    pub traceparent: Option<String>,
    pub parent_action_id: Option<String>,
    pub labels: Labels,
    pub metadata: Map<String, Value>,
    /// The token of an approval, for the retry of an action that needed one.
    pub approval_token: Option<String>,
}

fn bad(message: impl Into<String>) -> InvalidRequest {
    InvalidRequest::new(message)
}

const REQUEST_MEMBERS: &[&str] = &[
    "actionType",
    "capability",
    "input",
    "estimatedCostUsd",
    "costSoFarUsd",
    "tokens",
    "traceId",
    "traceparent",
    "parentActionId",
    "labels",
    "metadata",
    "approvalToken",
];

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, InvalidRequest> {
    value
        .as_object()
        .ok_or_else(|| bad(format!("{what} must be a JSON object")))
}

fn only(obj: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), InvalidRequest> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(bad(format!(
            "{what}: unknown member `{k}` (expected {})",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

fn opt_str(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, InvalidRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(format!("`{key}` must be a string"))),
    }
}

/// A cost in USD: a finite number ≥ 0.
fn opt_usd(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, InvalidRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
            _ => Err(bad(format!("`{key}` must be a number of USD ≥ 0, not {v}"))),
        },
    }
}

fn opt_tokens(obj: &Map<String, Value>) -> Result<Option<Map<String, Value>>, InvalidRequest> {
    match obj.get("tokens") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) if m.values().all(|v| v.as_u64().is_some()) => Ok(Some(m.clone())),
        Some(_) => Err(bad(
            "`tokens` must be an object of counts, e.g. {\"input\": 120, \"output\": 40}",
        )),
    }
}

impl ActionRequest {
    /// An action of `action_type` on a named capability.
    pub fn new(action_type: ActionType, capability: impl Into<String>, input: Value) -> Self {
        ActionRequest {
            action_type,
            capability: ActionCapability::Named(capability.into()),
            input,
            estimated_cost_usd: None,
            cost_so_far_usd: None,
            tokens: None,
            trace_id: None,
            traceparent: None,
            parent_action_id: None,
            labels: Labels::new(),
            metadata: Map::new(),
            approval_token: None,
        }
    }

    /// Reads the JSON form: `actionType` (one of Brane's 14), `capability` (a name, or a
    /// Brane-shaped description), `input` (default `{}`), and optionally
    /// `estimatedCostUsd`, `costSoFarUsd`, `tokens`, `traceId`, `traceparent`,
    /// `parentActionId`, `labels` (strings), `metadata` (an object) and `approvalToken`.
    /// Unknown members are refused (a misspelt cost field must not pass unseen).
    pub fn from_json(value: &Value) -> Result<Self, InvalidRequest> {
        let obj = object(value, "an action")?;
        only(obj, REQUEST_MEMBERS, "an action")?;
        let action_type = match obj.get("actionType") {
            Some(Value::String(t)) => ActionType::parse(t).map_err(|e| bad(e.to_string()))?,
            Some(_) => return Err(bad("`actionType` must be a string")),
            None => {
                return Err(bad(
                    "`actionType` is required (model_call, memory_write, ...)",
                ));
            }
        };
        let capability = match obj.get("capability") {
            Some(Value::String(name)) if !name.trim().is_empty() => {
                ActionCapability::Named(name.clone())
            }
            Some(v @ Value::Object(_)) => ActionCapability::Inline(Box::new(
                GovernedCapability::from_brane_json(v)
                    .map_err(|e| bad(format!("`capability`: {e}")))?,
            )),
            _ => {
                return Err(bad(
                    "`capability` is required: a governed capability's name, or its description {name, type, risk, ...}",
                ));
            }
        };
        let labels = match obj.get("labels") {
            None | Some(Value::Null) => Labels::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    _ => Err(bad(format!("label `{k}` must be a string"))),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad("`labels` must be an object of strings")),
        };
        let metadata = match obj.get("metadata") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(bad("`metadata` must be an object")),
        };
        Ok(ActionRequest {
            action_type,
            capability,
            input: obj.get("input").cloned().unwrap_or_else(|| json!({})),
            estimated_cost_usd: opt_usd(obj, "estimatedCostUsd")?,
            cost_so_far_usd: opt_usd(obj, "costSoFarUsd")?,
            tokens: opt_tokens(obj)?,
            trace_id: opt_str(obj, "traceId")?,
            traceparent: opt_str(obj, "traceparent")?,
            parent_action_id: opt_str(obj, "parentActionId")?,
            labels,
            metadata,
            approval_token: opt_str(obj, "approvalToken")?,
        })
    }
}

/// What the caller reports after executing an open action.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionReport {
    Output {
        output: Value,
        /// The actual cost (default: the estimate the action was decided with).
        cost_usd: Option<f64>,
        tokens: Option<Map<String, Value>>,
    },
    Error {
        message: String,
        error_type: Option<String>,
        cost_usd: Option<f64>,
    },
}

impl ActionReport {
    /// Reads `{"output": ..., "costUsd"?, "tokens"?}` or
    /// `{"error": {"message", "type"?}, "costUsd"?}`.
    pub fn from_json(value: &Value) -> Result<Self, InvalidRequest> {
        let obj = object(value, "a result")?;
        only(obj, &["output", "error", "costUsd", "tokens"], "a result")?;
        let cost_usd = opt_usd(obj, "costUsd")?;
        match (obj.get("output"), obj.get("error")) {
            (Some(output), None) => Ok(ActionReport::Output {
                output: output.clone(),
                cost_usd,
                tokens: opt_tokens(obj)?,
            }),
            (None, Some(error)) => {
                let e = object(error, "`error`")?;
                only(e, &["message", "type"], "`error`")?;
                let message =
                    opt_str(e, "message")?.ok_or_else(|| bad("`error.message` is required"))?;
                Ok(ActionReport::Error {
                    message,
                    error_type: opt_str(e, "type")?,
                    cost_usd,
                })
            }
            _ => Err(bad("a result holds exactly one of `output` and `error`")),
        }
    }
}

/// Reads a file of governed capabilities: `{"capabilities": [...]}` or a bare array, each
/// in Brane's shape ([`GovernedCapability::from_brane_json`]); every mistake names the file
/// and the entry.
pub fn read_governed(path: &Path) -> Result<Vec<GovernedCapability>, InvalidRequest> {
    let named = |message: String| InvalidRequest::new(format!("`{}`: {message}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| named(format!("cannot read it: {e}")))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| named(format!("not JSON: {e}")))?;
    let list = match &value {
        Value::Array(items) => items,
        Value::Object(m) => match m.get("capabilities") {
            Some(Value::Array(items)) => items,
            _ => {
                return Err(named(
                    "expected {\"capabilities\": [...]} or an array".into(),
                ));
            }
        },
        _ => {
            return Err(named(
                "expected {\"capabilities\": [...]} or an array".into(),
            ));
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            GovernedCapability::from_brane_json(item)
                .map_err(|e| named(format!("capability #{i}: {e}")))
        })
        .collect()
}

/// The answer of the before stage.
#[derive(Clone, Debug)]
pub enum ActionDecided {
    /// Go ahead: the action is open until its result or its deadline.
    Open {
        action_id: String,
        /// The capability to use (the route's target after a `route`).
        capability: String,
        /// The input to use (after `transform_input`).
        input: Value,
        verdict: Option<Verdict>,
        routed_from: Vec<String>,
        /// The verdicts that routed it, one per hop.
        routes: Vec<Verdict>,
        /// Output pointers the after stage will mask (known so far).
        redact: Vec<String>,
        sandbox: Option<Value>,
        expires_at: String,
    },
    /// Denied before execution (audited; nothing is open).
    Denied {
        action_id: String,
        decision: Decision,
        verdict: Option<Verdict>,
    },
    /// A human must approve first; retry with the token of the approval.
    ApprovalRequired {
        action_id: String,
        decision: Decision,
        approval: Option<Box<ApprovalRecord>>,
    },
}

/// The `log_only` decision of an allowing verdict with nothing else to enforce: what a
/// policy observed without enforcing it.
fn logged(v: &Verdict) -> Option<&Decision> {
    if v.kind != capability_policy::DecisionType::Allow {
        return None;
    }
    v.decisions
        .iter()
        .find(|d| d.kind == capability_policy::DecisionType::LogOnly)
}

fn shadow_json(verdict: Option<&Verdict>) -> Value {
    match verdict.and_then(|v| v.shadow.as_ref()) {
        Some(s) => json!({
            "decision": s.kind.as_str(),
            "reason": s.decision.reason,
            "policyIds": verdict.map(Verdict::policy_ids).unwrap_or_default(),
        }),
        None => Value::Null,
    }
}

fn policy_ids(verdict: Option<&Verdict>, decision: &Decision) -> Vec<String> {
    match verdict {
        Some(v) => v.policy_ids(),
        None => decision.policy_id.iter().cloned().collect(),
    }
}

impl ActionDecided {
    pub fn action_id(&self) -> &str {
        match self {
            ActionDecided::Open { action_id, .. }
            | ActionDecided::Denied { action_id, .. }
            | ActionDecided::ApprovalRequired { action_id, .. } => action_id,
        }
    }

    /// The decision type (`allow`, `deny`, `approval_required`, or the allowing
    /// obligation that applied: `route`, `transform_input`, `sandbox`, `redact`, ...).
    pub fn decision(&self) -> &'static str {
        match self {
            ActionDecided::Open { routes, .. } if !routes.is_empty() => "route",
            ActionDecided::Open {
                verdict: Some(v), ..
            } if logged(v).is_some() => "log_only",
            ActionDecided::Open { verdict, .. } => {
                verdict.as_ref().map_or("allow", |v| v.kind.as_str())
            }
            ActionDecided::Denied { .. } => "deny",
            ActionDecided::ApprovalRequired { .. } => "approval_required",
        }
    }

    /// The JSON answer: `actionId`, `decision`, `reason`, `code`, `policyIds`, `shadow`, and
    /// for an open action `capability`, `input`, `routedFrom`, `redact`, `sandbox`,
    /// `expiresAt` (and `wouldBe` for `log_only`); for an approval, `approval` (id, reason,
    /// expiresAt, ...).
    pub fn to_json(&self) -> Value {
        let mut v = json!({"actionId": self.action_id(), "decision": self.decision()});
        match self {
            ActionDecided::Open {
                capability,
                input,
                verdict,
                routed_from,
                routes,
                redact,
                sandbox,
                expires_at,
                ..
            } => {
                // A routed action reports the first route's reason, a logged one its
                // log_only decision; the policy ids of every hop and of the final pass.
                let logged = verdict
                    .as_ref()
                    .and_then(logged)
                    .filter(|_| routes.is_empty());
                let decision = routes
                    .first()
                    .map(|v| &v.decision)
                    .or(logged)
                    .or(verdict.as_ref().map(|v| &v.decision));
                if let Some(d) = logged {
                    v["wouldBe"] = json!(d.would_be.map(|k| k.as_str()));
                }
                let mut ids: Vec<String> = Vec::new();
                for v in routes.iter().chain(verdict.as_ref()) {
                    for id in v.policy_ids() {
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                }
                v["capability"] = json!(capability);
                v["input"] = input.clone();
                v["reason"] = json!(decision.and_then(|d| d.reason.clone()));
                v["code"] = json!(decision.and_then(|d| d.code.clone()));
                v["policyIds"] = json!(ids);
                v["routedFrom"] = json!(routed_from);
                v["redact"] = json!(redact);
                v["sandbox"] = sandbox.clone().unwrap_or(Value::Null);
                v["shadow"] = shadow_json(verdict.as_ref());
                v["expiresAt"] = json!(expires_at);
            }
            ActionDecided::Denied {
                decision, verdict, ..
            } => {
                v["reason"] = json!(decision.reason);
                v["code"] = json!(decision.code);
                v["policyIds"] = json!(policy_ids(verdict.as_ref(), decision));
                v["shadow"] = shadow_json(verdict.as_ref());
            }
            ActionDecided::ApprovalRequired {
                decision, approval, ..
            } => {
                v["reason"] = json!(decision.reason);
                v["code"] = json!(decision.code);
                v["policyIds"] = json!(policy_ids(None, decision));
                v["approval"] = approval.as_deref().map_or(Value::Null, |r| {
                    let mut a = approval_json(r);
                    a["reason"] = json!(decision.reason.clone().or_else(|| r.reason.clone()));
                    a["expiresAt"] = a.get("expiresAtIso").cloned().unwrap_or(Value::Null);
                    a
                });
            }
        }
        v
    }
}

/// The answer of the after stage.
#[derive(Clone, Debug)]
pub struct ActionClosed {
    pub action_id: String,
    /// `executed`, `denied_after_execution` or `execution_failed`.
    pub outcome: &'static str,
    /// The after stage's decision type (`allow`, `redact`, `transform_output`, `deny`).
    pub decision: Option<String>,
    /// The output the agent may use (`None` when withheld or failed).
    pub output: Option<Value>,
    pub reason: Option<String>,
    pub policy_ids: Vec<String>,
    pub redacted: Vec<String>,
    pub receipt_id: String,
    pub event_id: Option<String>,
}

impl ActionClosed {
    pub fn to_json(&self) -> Value {
        json!({
            "actionId": self.action_id,
            "outcome": self.outcome,
            "decision": self.decision,
            "output": self.output,
            "withheld": self.outcome == "denied_after_execution",
            "reason": self.reason,
            "policyIds": self.policy_ids,
            "redacted": self.redacted,
            "receiptId": self.receipt_id,
            "eventId": self.event_id,
        })
    }
}

/// An open action, as the host keeps it.
struct Held {
    open: OpenAction,
    /// Who opened it (its principal id, else its agent id).
    owner: String,
    opened: Instant,
    started_ms: i64,
    deadline: Instant,
    /// What was charged to the budgets when it opened.
    estimate: f64,
}

/// The open actions of a host, and how many each principal holds (slots are reserved
/// before the before stage runs, so concurrent requests cannot pass the limit).
pub(crate) struct OpenActions {
    table: Mutex<Table>,
    timeout: Duration,
    max_per_principal: usize,
}

#[derive(Default)]
struct Table {
    held: HashMap<String, Held>,
    /// Open actions and reserved slots per owner.
    per_owner: HashMap<String, usize>,
}

impl Table {
    fn release(&mut self, owner: &str) {
        if let Some(n) = self.per_owner.get_mut(owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_owner.remove(owner);
            }
        }
    }

    fn take(&mut self, id: &str) -> Option<Held> {
        let held = self.held.remove(id)?;
        self.release(&held.owner);
        Some(held)
    }
}

impl std::fmt::Debug for OpenActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenActions")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl OpenActions {
    pub(crate) fn new(timeout: Duration, max_per_principal: usize) -> Self {
        OpenActions {
            table: Mutex::new(Table::default()),
            timeout,
            max_per_principal: max_per_principal.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reserves a slot for `owner`, or says it holds the most allowed.
    fn reserve(&self, owner: &str) -> bool {
        let mut t = self.lock();
        let n = t.per_owner.entry(owner.to_string()).or_default();
        if *n >= self.max_per_principal {
            return false;
        }
        *n += 1;
        true
    }
}

/// A reserved slot: released when dropped, unless the action took it.
struct Slot<'a> {
    open: &'a OpenActions,
    owner: Option<String>,
}

impl Slot<'_> {
    /// The action opened: it holds the slot until it is closed.
    fn fill(mut self, id: String, held: Held) {
        let _ = self.owner.take();
        self.open.lock().held.insert(id, held);
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            self.open.lock().release(&owner);
        }
    }
}

fn owner_of(principal: &Principal) -> String {
    principal.id().to_string()
}

/// The host's error for a lifecycle that stopped for a reason other than a decision or the
/// execution: an unknown capability, a refused token, a failed transform, the engine or the
/// audit chain. (Decisions and execution failures are each caller's own answers.)
pub(crate) fn governance_error<E: std::fmt::Display>(e: InterceptError<E>) -> HostError {
    match e {
        InterceptError::NotFound(e) => NotFound::new("capability", e.name).into(),
        InterceptError::Approval(e) => e.into(),
        InterceptError::Transform(e) => {
            InvalidRequest::new(format!("transform by policy failed: {e}")).into()
        }
        e => StoreError::new("governance", e).into(),
    }
}

/// An action left without a result.
#[derive(Debug)]
struct Abandoned(Duration);

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "abandoned: no result within {} s of the decision",
            self.0.as_secs()
        )
    }
}

/// A caller-reported execution error.
#[derive(Debug)]
struct Reported(String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Host {
    /// Declares a governed capability for the action API (a principal of role admin):
    /// Brane's shape, as [`GovernedCapability::from_brane_json`] reads it.
    pub fn register_governed(
        &self,
        principal: &Principal,
        description: &Value,
    ) -> Result<Arc<GovernedCapability>, HostError> {
        if principal.role() != Role::Admin {
            return Err(Forbidden::new(
                principal.name(),
                format!(
                    "(role {}) may not register capabilities (admin only)",
                    principal.role().as_str()
                ),
            )
            .into());
        }
        let capability = GovernedCapability::from_brane_json(description)
            .map_err(|e| InvalidRequest::new(format!("capability: {e}")))?;
        self.declare(capability)
    }

    /// The capability an action names, declaring an inline description on first use.
    fn action_capability(&self, capability: ActionCapability) -> Result<String, HostError> {
        let name = match &capability {
            ActionCapability::Named(name) => name,
            ActionCapability::Inline(description) => &description.name,
        };
        if !self.governor.capabilities().exists(name) {
            // A capability registered deferred (an OpenAPI operation never called yet) is
            // built now, which registers its governed view.
            self.runtime.registry().get(name);
        }
        match capability {
            ActionCapability::Named(name) => {
                if self.governor.capabilities().get(&name).is_none() {
                    return Err(NotFound::new("capability", name).into());
                }
                Ok(name)
            }
            ActionCapability::Inline(description) => {
                if let Some(known) = self.governor.capabilities().get(&description.name) {
                    let mut declared = description.as_ref().clone();
                    // Unset tenant and environment take the host's, as on declaration.
                    if declared.governance.tenant.is_none() {
                        declared
                            .governance
                            .tenant
                            .clone_from(&known.governance.tenant);
                    }
                    if declared.governance.environment.is_none() {
                        declared.governance.environment = known.governance.environment;
                    }
                    if declared.governance != known.governance {
                        return Err(InvalidRequest::new(format!(
                            "capability `{}` is declared with other governance; name it without a description, or an admin registers the change",
                            description.name
                        ))
                        .into());
                    }
                    return Ok(description.name);
                }
                let name = description.name.clone();
                self.declare(*description)?;
                Ok(name)
            }
        }
    }

    /// The before stage of an action the caller executes (see the module docs).
    pub fn decide_action(
        &self,
        principal: &Principal,
        request: ActionRequest,
    ) -> Result<ActionDecided, HostError> {
        principal.require(Access::Call)?;
        let owner = owner_of(principal);
        let open = &self.open_actions;
        if !open.reserve(&owner) {
            return Err(InvalidRequest::new(format!(
                "`{}` holds {} open actions, the most allowed; post their results first",
                principal.name(),
                open.max_per_principal
            ))
            .into());
        }
        let slot = Slot {
            open,
            owner: Some(owner.clone()),
        };
        // The approval binds the canonical form, which leaves `__proto__` out.
        if let Err(e) = capability_upstream::check_no_proto(&request.input) {
            return Err(InvalidRequest::new(e.message).into());
        }
        let capability = self.action_capability(request.capability)?;
        let mut req = InterceptRequest::new(capability, request.action_type, request.input)
            .actor(principal.actor())
            .single_event(true);
        req.trace_id = request.trace_id;
        if let Some(tp) = &request.traceparent
            && let Some((trace, _)) = capability_policy::audit::parse_traceparent(tp)
        {
            req.trace_id = Some(trace.to_string());
            req.metadata.insert("traceparent".into(), json!(tp));
        }
        req.parent_action_id = request.parent_action_id;
        req.labels = request.labels;
        req.metadata.extend(request.metadata);
        req.metadata
            .insert("interceptor".into(), json!("action_api"));
        if let Some(t) = request.tokens {
            req.metadata.insert("tokens".into(), Value::Object(t));
        }
        req.cost_so_far_usd = request.cost_so_far_usd.unwrap_or(0.0);
        req.estimated_cost_usd = request.estimated_cost_usd;
        req.approval_token = request.approval_token;
        let started_ms = capability_core::js::now_millis();
        match self.governor.open(req) {
            Ok(action) => {
                let estimate = action.action().estimated_cost_usd.unwrap_or(0.0);
                self.budgets.charge(action.action(), estimate);
                let now = Instant::now();
                let deadline = now + open.timeout;
                let expires_ms = started_ms
                    .saturating_add(i64::try_from(open.timeout.as_millis()).unwrap_or(i64::MAX));
                let decided = ActionDecided::Open {
                    action_id: action.action().action_id.clone(),
                    capability: action.action().capability.name.clone(),
                    input: action.action().input.clone(),
                    verdict: action.before().cloned(),
                    routed_from: action.routed_from().to_vec(),
                    routes: action.routes().to_vec(),
                    redact: action.redactions().to_vec(),
                    sandbox: action.sandbox().map(|s| s.to_json()),
                    expires_at: capability_core::js::iso_from_millis(expires_ms),
                };
                slot.fill(
                    action.action().action_id.clone(),
                    Held {
                        open: action,
                        owner,
                        opened: now,
                        started_ms,
                        deadline,
                        estimate,
                    },
                );
                Ok(decided)
            }
            Err(InterceptError::Denied(d)) => Ok(ActionDecided::Denied {
                action_id: d.action.action_id.clone(),
                decision: d.decision,
                verdict: d.verdict,
            }),
            Err(InterceptError::ApprovalRequired {
                approval,
                decision,
                action,
            }) => Ok(ActionDecided::ApprovalRequired {
                action_id: action.action_id,
                decision: *decision,
                approval,
            }),
            Err(InterceptError::Execution { error, .. }) => match error {},
            Err(e) => Err(governance_error(e)),
        }
    }

    /// The after stage of an open action of `principal` (see the module docs).
    pub fn report_action(
        &self,
        principal: &Principal,
        action_id: &str,
        report: ActionReport,
    ) -> Result<ActionClosed, HostError> {
        let owner = owner_of(principal);
        let held = {
            let mut open = self.open_actions.lock();
            match open.held.get(action_id) {
                Some(h) if h.owner == owner => open.take(action_id),
                _ => None,
            }
        };
        let Some(held) = held else {
            return Err(NotFound::new("open action", action_id).into());
        };
        Ok(self.close(held, report))
    }

    /// Closes every open action whose deadline has passed, as abandoned; how many.
    pub fn close_abandoned_actions(&self) -> usize {
        let now = Instant::now();
        let expired: Vec<Held> = {
            let mut open = self.open_actions.lock();
            let ids: Vec<String> = open
                .held
                .iter()
                .filter(|(_, h)| h.deadline <= now)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| open.take(id)).collect()
        };
        let n = expired.len();
        for held in expired {
            let timeout = self.open_actions.timeout;
            self.close_with(held, Closing::Abandoned(timeout));
        }
        n
    }

    /// How many actions are open.
    pub fn open_action_count(&self) -> usize {
        self.open_actions.lock().held.len()
    }

    fn close(&self, held: Held, report: ActionReport) -> ActionClosed {
        match report {
            ActionReport::Output {
                output,
                cost_usd,
                tokens,
            } => self.close_with(held, Closing::Output(output, cost_usd, tokens)),
            ActionReport::Error {
                message,
                error_type,
                cost_usd,
            } => self.close_with(held, Closing::Error(message, error_type, cost_usd)),
        }
    }

    fn close_with(&self, mut held: Held, closing: Closing) -> ActionClosed {
        let latency = held.opened.elapsed();
        held.open.note(
            "latencyMs",
            json!(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX)),
        );
        let reported_cost = match &closing {
            Closing::Output(_, c, _) | Closing::Error(_, _, c) => *c,
            Closing::Abandoned(_) => None,
        };
        let cost = reported_cost.unwrap_or(held.estimate);
        if cost != 0.0 {
            held.open.note("costUsd", json!(cost));
        }
        // The budgets were charged the estimate; the actual cost corrects it.
        if let Some(actual) = reported_cost {
            self.budgets
                .charge(held.open.action(), actual - held.estimate);
        }
        let receipt_id = new_receipt_id();
        held.open.set_receipt(receipt_id.clone());
        let action = held.open.action().clone();
        let before = held.open.before().map(Verdict::summary);
        let routed_from = held.open.routed_from().to_vec();
        let approval = held.open.approval().cloned();
        let mut closed = ActionClosed {
            action_id: action.action_id.clone(),
            outcome: "executed",
            decision: None,
            output: None,
            reason: None,
            policy_ids: Vec::new(),
            redacted: Vec::new(),
            receipt_id: receipt_id.clone(),
            event_id: None,
        };
        let mut governance = ReceiptGovernance {
            agent_id: Some(action.agent_id.clone()),
            tenant: action.tenant_id.clone(),
            action_id: Some(action.action_id.clone()),
            before,
            routed_from,
            ..Default::default()
        };
        if let Some(a) = &approval {
            governance
                .extra
                .insert("approvalId".into(), json!(a.approval_id));
        }
        let mut error = None;
        let mut output = None;
        match closing {
            Closing::Output(raw, _, tokens) => {
                if let Some(t) = tokens {
                    held.open.note("tokens", Value::Object(t));
                }
                match held.open.complete(raw) {
                    Ok(result) => {
                        closed.decision = Some(result.after.kind.as_str().into());
                        closed.reason.clone_from(&result.after.decision.reason);
                        closed.policy_ids = result.after.policy_ids();
                        closed.redacted = result.after.obligations.redact.clone();
                        closed.event_id = result.events.last().cloned();
                        governance.after = Some(result.after.summary());
                        governance.audit_events.clone_from(&result.events);
                        governance.redacted.clone_from(&closed.redacted);
                        output = Some(result.output.clone());
                        closed.output = Some(result.output);
                    }
                    Err(OutputWithheld::Denied(d)) => {
                        closed.outcome = "denied_after_execution";
                        closed.decision = Some("deny".into());
                        closed.reason.clone_from(&d.decision.reason);
                        closed.policy_ids = policy_ids(d.verdict.as_ref(), &d.decision);
                        if let Some(v) = &d.verdict {
                            governance.after = Some(v.summary());
                        }
                        governance.outcome = Some("denied_after_execution".into());
                    }
                    Err(other) => {
                        closed.outcome = "denied_after_execution";
                        closed.decision = Some("deny".into());
                        closed.reason = Some(other.to_string());
                        governance.outcome = Some("denied_after_execution".into());
                    }
                }
            }
            Closing::Error(message, error_type, _) => {
                closed.outcome = "execution_failed";
                let name = error_type.unwrap_or_else(|| "Error".into());
                held.open.note("reportedErrorType", json!(name));
                if let Interrupted::Failed {
                    governance: Some(g),
                    ..
                } = held.open.fail(Reported(message.clone()))
                {
                    closed.reason = Some(g.to_string());
                }
                governance.outcome = Some("execution_failed".into());
                error = Some(SerializedError {
                    name,
                    message,
                    code: None,
                });
            }
            Closing::Abandoned(timeout) => {
                closed.outcome = "execution_failed";
                held.open.note("abandoned", json!(true));
                let message = Abandoned(timeout).to_string();
                let _ = held.open.fail(Abandoned(timeout));
                governance.outcome = Some("abandoned".into());
                error = Some(SerializedError {
                    name: "Abandoned".into(),
                    message,
                    code: Some("ABANDONED".into()),
                });
            }
        }
        let ended_ms = capability_core::js::now_millis();
        let receipt = Receipt {
            receipt_id,
            plan_id: action.action_id.clone(),
            capability: CapabilityRef {
                id: action.capability.name.clone(),
                version: "governed".into(),
            },
            status: if error.is_some() {
                ReceiptStatus::Failed
            } else {
                ReceiptStatus::Succeeded
            },
            started_at: capability_core::js::iso_from_millis(held.started_ms),
            ended_at: capability_core::js::iso_from_millis(ended_ms),
            duration_ms: u64::try_from(ended_ms - held.started_ms).unwrap_or(0),
            effects: action.capability.effect_names(),
            input_hash: canonical_hash(&action.input),
            output_hash: output.as_ref().map(canonical_hash),
            input: action.input.clone(),
            output,
            verification: None,
            error,
            metadata: Some(json!({"actionType": action.action_type.as_str()})),
            provenance: None,
            rollback_result: None,
            isolation: None,
            governance: Some(governance),
            extra: Map::new(),
        };
        if let Err(e) = self.receipts.put(Arc::new(receipt)) {
            closed.reason = Some(format!("the receipt could not be stored: {e}"));
        }
        closed
    }
}

/// How an open action ends.
enum Closing {
    Output(Value, Option<f64>, Option<Map<String, Value>>),
    Error(String, Option<String>, Option<f64>),
    Abandoned(Duration),
}
