//! Agent actions: one attempted use of a capability.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::model::{Environment, GovernedCapability, Labels};
use crate::names::{new_id, string_enum};

string_enum! {
    /// Brane's 14 action types (the Cedar action ids).
    pub enum ActionType ("action type") {
        ToolCall => "tool_call",
        ModelCall => "model_call",
        MemoryRead => "memory_read",
        MemoryWrite => "memory_write",
        Retrieval => "retrieval",
        DatabaseQuery => "database_query",
        ExternalApiCall => "external_api_call",
        McpToolCall => "mcp_tool_call",
        SandboxExecution => "sandbox_execution",
        FileRead => "file_read",
        FileWrite => "file_write",
        SecretAccess => "secret_access",
        AgentHandoff => "agent_handoff",
        HumanApproval => "human_approval",
    }
}

/// Who acts, for whom and where: the agent, its tenant, the scopes granted to it, the
/// environment and the human or service it acts for. One type carries this from the
/// surface that authenticated the caller (CLI flags, a bearer token, an MCP session) through
/// the runtime to the [`AgentAction`] the policies see and the audit event that records it.
/// Unset fields take the governor's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actor {
    /// The agent (`Agent::"<id>"` in Cedar).
    pub agent_id: Option<String>,
    pub tenant: Option<String>,
    /// Scopes granted to the agent for this call (added to the governor's).
    pub scopes: BTreeSet<String>,
    pub environment: Option<Environment>,
    /// The human or service the agent acts for.
    pub principal_id: Option<String>,
}

impl Actor {
    /// An actor that is the agent `agent_id`.
    pub fn agent(agent_id: impl Into<String>) -> Self {
        Actor {
            agent_id: Some(agent_id.into()),
            ..Default::default()
        }
    }

    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scopes.insert(scope.into());
        self
    }

    pub fn environment(mut self, environment: Environment) -> Self {
        self.environment = Some(environment);
        self
    }

    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal_id = Some(principal.into());
        self
    }
}

/// One attempted use of a capability by an agent, with everything a policy may look at.
///
/// Construct with [`AgentAction::new`] and the builder methods; ids and the timestamp are
/// generated (`act_<hex>`, `tr_<hex>`, ISO-8601 UTC with milliseconds).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentAction {
    pub action_type: ActionType,
    /// The full capability, not just its name.
    pub capability: Arc<GovernedCapability>,
    pub agent_id: String,
    pub tenant_id: Option<String>,
    /// The capability input (a JSON object for capabilities; anything for other actions).
    pub input: Value,
    pub action_id: String,
    pub trace_id: String,
    pub parent_action_id: Option<String>,
    /// ISO-8601 UTC (`2026-01-01T00:00:00.000Z`).
    pub timestamp: String,
    pub environment: Environment,
    pub principal_id: Option<String>,
    pub output: Option<Value>,
    pub input_summary: Option<String>,
    pub output_summary: Option<String>,
    pub cost_so_far_usd: f64,
    pub estimated_cost_usd: Option<f64>,
    pub latency_so_far_ms: Option<u64>,
    pub labels: Labels,
    pub metadata: Map<String, Value>,
    /// Scopes granted to the agent (what `agent_has_scope` checks).
    pub agent_scopes: BTreeSet<String>,
    /// The fingerprint of the Capability 1.x plan this action executes, when there is one.
    pub plan_fingerprint: Option<String>,
}

impl AgentAction {
    /// A new action with fresh ids, environment `dev`, empty input and no cost.
    pub fn new(
        action_type: ActionType,
        capability: Arc<GovernedCapability>,
        agent_id: impl Into<String>,
    ) -> Self {
        AgentAction {
            action_type,
            capability,
            agent_id: agent_id.into(),
            tenant_id: None,
            input: Value::Object(Map::new()),
            action_id: new_id("act"),
            trace_id: new_id("tr"),
            parent_action_id: None,
            timestamp: capability_core::js::now_iso(),
            environment: Environment::Dev,
            principal_id: None,
            output: None,
            input_summary: None,
            output_summary: None,
            cost_so_far_usd: 0.0,
            estimated_cost_usd: None,
            latency_so_far_ms: None,
            labels: Labels::new(),
            metadata: Map::new(),
            agent_scopes: BTreeSet::new(),
            plan_fingerprint: None,
        }
    }

    pub fn input(mut self, input: Value) -> Self {
        self.input = input;
        self
    }
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant.into());
        self
    }
    pub fn environment(mut self, environment: Environment) -> Self {
        self.environment = environment;
        self
    }
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal_id = Some(principal.into());
        self
    }
    pub fn trace(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = trace_id.into();
        self
    }
    pub fn parent(mut self, parent_action_id: impl Into<String>) -> Self {
        self.parent_action_id = Some(parent_action_id.into());
        self
    }
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
    pub fn meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.agent_scopes.insert(scope.into());
        self
    }
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.agent_scopes.extend(scopes.into_iter().map(Into::into));
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
    pub fn plan_fingerprint(mut self, fingerprint: impl Into<String>) -> Self {
        self.plan_fingerprint = Some(fingerprint.into());
        self
    }
    pub fn input_summary(mut self, summary: impl Into<String>) -> Self {
        self.input_summary = Some(summary.into());
        self
    }

    /// `true` when the environment is `prod`.
    pub fn is_prod(&self) -> bool {
        self.environment == Environment::Prod
    }

    /// A copy carrying the output. Like Brane, the summary is replaced (by `None` when none
    /// is given); ids and timestamp are kept.
    pub fn with_output(&self, output: Value, summary: Option<String>) -> Self {
        let mut a = self.clone();
        a.output = Some(output);
        a.output_summary = summary;
        a
    }

    /// SHA-256 of the canonical JSON of what the action does: action type, capability,
    /// agent, tenant, environment, principal and input. Approvals bind to it, so that a
    /// changed input (or any other of these) cannot reuse an approval.
    pub fn digest(&self) -> String {
        use capability_core::json::{sha256_hex, write_canonical, write_json_string};
        fn opt(out: &mut String, v: Option<&str>) {
            match v {
                Some(s) => write_json_string(out, s),
                None => out.push_str("null"),
            }
        }
        // The keys are plain ASCII, so canonical order is byte order: written in that order
        // (a test compares with the generic canonical writer).
        let mut out = String::with_capacity(256);
        out.push_str("{\"actionType\":");
        write_json_string(&mut out, self.action_type.as_str());
        out.push_str(",\"agentId\":");
        write_json_string(&mut out, &self.agent_id);
        out.push_str(",\"capability\":");
        write_json_string(&mut out, &self.capability.name);
        out.push_str(",\"environment\":");
        write_json_string(&mut out, self.environment.as_str());
        out.push_str(",\"input\":");
        write_canonical(&mut out, &self.input);
        out.push_str(",\"principal\":");
        opt(&mut out, self.principal_id.as_deref());
        out.push_str(",\"tenant\":");
        opt(&mut out, self.tenant_id.as_deref());
        out.push('}');
        sha256_hex(out.as_bytes())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::CapabilityKind;
    use serde_json::json;

    #[test]
    fn the_digest_is_the_hash_of_the_canonical_json_of_what_the_action_does() {
        let cap = Arc::new(GovernedCapability::new("mcp.s.t", CapabilityKind::McpTool));
        let generic = |a: &AgentAction| {
            capability_core::json::canonical_hash(&json!({
                "actionType": a.action_type.as_str(),
                "capability": a.capability.name,
                "agentId": a.agent_id,
                "tenant": a.tenant_id,
                "environment": a.environment.as_str(),
                "principal": a.principal_id,
                "input": a.input,
            }))
        };
        let plain = AgentAction::new(ActionType::McpToolCall, Arc::clone(&cap), "bot");
        assert_eq!(plain.digest(), generic(&plain));
        let full = AgentAction::new(ActionType::ToolCall, cap, "agent \"q\" é")
            .tenant("acme")
            .principal("alice")
            .environment(Environment::Prod)
            .input(json!({"b": [1, 2.5, "x"], "a": {"2": null, "10": true}, "é": "\u{1}"}));
        assert_eq!(full.digest(), generic(&full));
        assert_ne!(full.digest(), plain.digest());
    }
}
