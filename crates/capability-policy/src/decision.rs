//! Decisions: what one policy says about one action.

use serde_json::{Map, Value};

use crate::names::{UnknownName, new_id, string_enum};
use crate::pointer::Mutation;

string_enum! {
    /// The nine decision types. See the crate documentation for what each one does and how
    /// decisions from several policies combine.
    pub enum DecisionType ("decision") {
        Allow => "allow",
        Deny => "deny",
        ApprovalRequired => "approval_required",
        Redact => "redact",
        TransformInput => "transform_input",
        TransformOutput => "transform_output",
        Route => "route",
        Sandbox => "sandbox",
        LogOnly => "log_only",
    }
}

// The isolation vocabulary lives with the executors that honour it; it is re-exported here
// so that `capability_policy::decision::{IsolationTier, SandboxRequirement}` keep their paths.
pub use capability_exec::{IsolationTier, SandboxRequirement};

/// The result of one policy. Parameters that only some types use (`redact`, `mutations`,
/// `route_to`, `sandbox`) are empty for the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub kind: DecisionType,
    pub reason: Option<String>,
    /// `dec_<hex>`.
    pub decision_id: String,
    /// Filled in by the engine.
    pub action_id: Option<String>,
    /// Filled in by the engine (the policy's id).
    pub policy_id: Option<String>,
    /// Filled in from the policy unless the decision names itself (Brane's `annotate`).
    pub policy_name: Option<String>,
    pub policy_version: Option<String>,
    /// A machine-readable code (Brane's `deny(code=...)`).
    pub code: Option<String>,
    /// `redact`: JSON pointers to mask in the output (and in the audit record).
    pub redact: Vec<String>,
    /// `transform_input` / `transform_output`: mutations, applied in order.
    pub mutations: Vec<Mutation>,
    /// `route`: the capability to use instead.
    pub route_to: Option<String>,
    /// `sandbox`: the isolation the execution needs.
    pub sandbox: Option<SandboxRequirement>,
    /// `log_only`: the decision this one would have been if enforced, when given.
    pub would_be: Option<DecisionType>,
    pub metadata: Map<String, Value>,
}

impl Decision {
    /// A decision of the given type with nothing else set.
    pub fn new(kind: DecisionType) -> Self {
        Decision {
            kind,
            reason: None,
            decision_id: new_id("dec"),
            action_id: None,
            policy_id: None,
            policy_name: None,
            policy_version: None,
            code: None,
            redact: Vec::new(),
            mutations: Vec::new(),
            route_to: None,
            sandbox: None,
            would_be: None,
            metadata: Map::new(),
        }
    }

    /// `allow`.
    pub fn allow() -> Self {
        Self::new(DecisionType::Allow)
    }

    /// `deny`, with its (mandatory) reason.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::new(DecisionType::Deny).with_reason(reason)
    }

    /// `approval_required`, with the reason shown to the approver.
    pub fn approval_required(reason: impl Into<String>) -> Self {
        Self::new(DecisionType::ApprovalRequired).with_reason(reason)
    }

    /// `redact` of the given JSON pointers (`*` segments match every element).
    pub fn redact<I, S>(pointers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut d = Self::new(DecisionType::Redact);
        d.redact = pointers.into_iter().map(Into::into).collect();
        d
    }

    /// `transform_input` with the given mutations.
    pub fn transform_input(mutations: Vec<Mutation>) -> Self {
        let mut d = Self::new(DecisionType::TransformInput);
        d.mutations = mutations;
        d
    }

    /// `transform_input` that sets each member of `values` (e.g. a side effect's
    /// `disable_input`).
    pub fn set_input(values: &Map<String, Value>) -> Self {
        Self::transform_input(
            values
                .iter()
                .map(|(k, v)| Mutation::set(format!("/{}", escape(k)), v.clone()))
                .collect(),
        )
    }

    /// `transform_output` with the given mutations.
    pub fn transform_output(mutations: Vec<Mutation>) -> Self {
        let mut d = Self::new(DecisionType::TransformOutput);
        d.mutations = mutations;
        d
    }

    /// `route` to another capability (which is authorized again).
    pub fn route(capability: impl Into<String>) -> Self {
        let mut d = Self::new(DecisionType::Route);
        d.route_to = Some(capability.into());
        d
    }

    /// `sandbox` with the given requirement.
    pub fn sandbox(requirement: SandboxRequirement) -> Self {
        let mut d = Self::new(DecisionType::Sandbox);
        d.sandbox = Some(requirement);
        d
    }

    /// `log_only`: recorded, never enforced.
    pub fn log_only(reason: impl Into<String>) -> Self {
        Self::new(DecisionType::LogOnly).with_reason(reason)
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }
    /// Names the decision itself; the engine keeps a non-empty name/version.
    pub fn with_policy(mut self, name: impl Into<String>, version: Option<String>) -> Self {
        self.policy_name = Some(name.into());
        self.policy_version = version;
        self
    }
    pub fn with_would_be(mut self, kind: DecisionType) -> Self {
        self.would_be = Some(kind);
        self
    }
    pub fn with_meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// Brane's `allowed`: execution may proceed (`allow`, `log_only`, `redact`,
    /// `transform_input`, `transform_output`, `route`, `sandbox`).
    pub fn allowed(&self) -> bool {
        !matches!(
            self.kind,
            DecisionType::Deny | DecisionType::ApprovalRequired
        )
    }

    /// `deny`.
    pub fn denied(&self) -> bool {
        self.kind == DecisionType::Deny
    }

    /// `approval_required`.
    pub fn requires_approval(&self) -> bool {
        self.kind == DecisionType::ApprovalRequired
    }

    /// The JSON form, as recorded in audit events.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), self.kind.as_str().into());
        m.insert("decisionId".into(), self.decision_id.clone().into());
        let opt = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        m.insert("reason".into(), opt(&self.reason));
        m.insert("policyId".into(), opt(&self.policy_id));
        m.insert("policyName".into(), opt(&self.policy_name));
        m.insert("policyVersion".into(), opt(&self.policy_version));
        if let Some(c) = &self.code {
            m.insert("code".into(), c.clone().into());
        }
        if !self.redact.is_empty() {
            m.insert(
                "redact".into(),
                Value::Array(self.redact.iter().cloned().map(Value::String).collect()),
            );
        }
        if !self.mutations.is_empty() {
            m.insert(
                "mutations".into(),
                Value::Array(self.mutations.iter().map(Mutation::to_json).collect()),
            );
        }
        if let Some(r) = &self.route_to {
            m.insert("routeTo".into(), r.clone().into());
        }
        if let Some(s) = &self.sandbox {
            m.insert("sandbox".into(), s.to_json());
        }
        if let Some(w) = self.would_be {
            m.insert("wouldBe".into(), w.as_str().into());
        }
        if !self.metadata.is_empty() {
            m.insert("metadata".into(), Value::Object(self.metadata.clone()));
        }
        Value::Object(m)
    }
}

/// Parses a decision type name (convenience for callers holding strings).
pub fn parse_decision_type(s: &str) -> Result<DecisionType, UnknownName> {
    DecisionType::parse(s)
}

/// Escapes a member name for use in a JSON pointer.
pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}
