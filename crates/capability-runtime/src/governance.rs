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

use capability_policy::{ActionType, Environment, InterceptRequest};

/// Who acts, for whom and where: the principal and context of an execution.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Principal {
    /// The agent (`Agent::"<id>"` in Cedar); default: the governor's agent.
    pub agent_id: Option<String>,
    pub tenant: Option<String>,
    /// Scopes granted to the agent for this call.
    pub scopes: Vec<String>,
    /// `dev`, `staging` or `prod`.
    pub environment: Option<String>,
    /// The human or service the agent acts for.
    pub principal_id: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// One of Brane's 14 action types (default `tool_call`).
    pub action_type: Option<String>,
    pub trace_id: Option<String>,
    pub parent_action_id: Option<String>,
    pub cost_so_far_usd: f64,
    pub estimated_cost_usd: Option<f64>,
}

impl Principal {
    /// The action type, or an error naming the bad value.
    pub fn action_type(&self) -> Result<ActionType, String> {
        match &self.action_type {
            None => Ok(ActionType::ToolCall),
            Some(s) => ActionType::parse(s).map_err(|e| e.to_string()),
        }
    }

    /// The environment, or an error naming the bad value.
    pub fn environment(&self) -> Result<Option<Environment>, String> {
        self.environment
            .as_deref()
            .map(Environment::parse)
            .transpose()
            .map_err(|e| e.to_string())
    }

    /// Applies the principal to an intercept request.
    pub(crate) fn apply(&self, mut req: InterceptRequest) -> Result<InterceptRequest, String> {
        if let Some(a) = &self.agent_id {
            req = req.agent(a.clone());
        }
        if let Some(t) = &self.tenant {
            req = req.tenant(t.clone());
        }
        if let Some(e) = self.environment()? {
            req = req.environment(e);
        }
        if let Some(p) = &self.principal_id {
            req = req.principal(p.clone());
        }
        for s in &self.scopes {
            req = req.scope(s.clone());
        }
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
        Ok(req)
    }
}
