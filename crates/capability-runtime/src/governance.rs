//! Governance in the runtime: after effect authorization, every execution goes through the
//! policy layer ([`capability_policy::Governor`]) — before policies, execution, after
//! policies, on-error policies — with an audit event for each decision and outcome.
//!
//! How the nine decisions act on an execution:
//!
//! | Decision | In the runtime |
//! | --- | --- |
//! | `allow` | the plan executes |
//! | `deny` (before) | `PERMISSION_DENIED`, nothing runs, no receipt |
//! | `approval_required` | a pending approval bound to the plan fingerprint and the action digest is created and the plan is kept; `APPROVAL_REQUIRED` with `details.approval`. Executing the same plan with the approval's token (`ExecuteOptions::approval_token`) runs it once |
//! | `transform_input` | the mutated input is validated against the input schema and re-planned (a new fingerprint), and its effects are authorized again |
//! | `route` | the target capability is planned and authorized (effects and policies) again |
//! | `sandbox` | a floor on isolation: in-process code is refused when the floor is above `in_process`; package modules get the stricter boundary and limits |
//! | `transform_output`, `redact` | applied to the output before it reaches the receipt, the caller and the audit |
//! | `deny` (after) | the side effect happened: a failed receipt (`PERMISSION_DENIED`, output withheld) |
//! | `log_only` | recorded only |
//!
//! The receipt's `governance` member records the verdicts, policy ids, audit event ids,
//! routes and the approval used.

use std::collections::BTreeMap;

use capability_policy::{ActionType, Actor, InterceptRequest};
use serde_json::{Map, Value};

/// Who acts ([`Actor`]: agent, tenant, scopes, environment, principal) and the context of
/// one call: its action type, labels, trace and costs.
#[derive(Clone, Debug, PartialEq)]
pub struct Caller {
    pub actor: Actor,
    /// One of Brane's 14 action types (default `tool_call`).
    pub action_type: ActionType,
    pub labels: BTreeMap<String, String>,
    pub trace_id: Option<String>,
    pub parent_action_id: Option<String>,
    pub cost_so_far_usd: f64,
    pub estimated_cost_usd: Option<f64>,
    /// Facts of the call added to the action's metadata (the policies' runtime metadata and
    /// the audit events), e.g. the W3C `traceparent` a client sent.
    pub metadata: Map<String, Value>,
}

impl Default for Caller {
    fn default() -> Self {
        Caller {
            actor: Actor::default(),
            action_type: ActionType::ToolCall,
            labels: BTreeMap::new(),
            trace_id: None,
            parent_action_id: None,
            cost_so_far_usd: 0.0,
            estimated_cost_usd: None,
            metadata: Map::new(),
        }
    }
}

impl From<Actor> for Caller {
    fn from(actor: Actor) -> Self {
        Caller {
            actor,
            ..Default::default()
        }
    }
}

impl Caller {
    /// Applies the caller to an intercept request.
    pub(crate) fn apply(&self, mut req: InterceptRequest) -> InterceptRequest {
        req = req.actor(self.actor.clone());
        for (k, v) in &self.labels {
            req = req.label(k.clone(), v.clone());
        }
        if let Some(t) = &self.trace_id {
            req = req.trace(t.clone());
        }
        if let Some(p) = &self.parent_action_id {
            req = req.parent(p.clone());
        }
        req = req.cost_so_far(self.cost_so_far_usd);
        if let Some(c) = self.estimated_cost_usd {
            req = req.estimated_cost(c);
        }
        for (k, v) in &self.metadata {
            req.metadata.insert(k.clone(), v.clone());
        }
        req
    }
}
