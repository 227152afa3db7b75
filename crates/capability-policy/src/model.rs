//! Brane's governance model: what is behind the door of a capability.
//!
//! A [`GovernedCapability`] is anything an agent can use (a tool, a model, memory, a database,
//! an MCP server, a secret, another agent, ...). Its [`Governance`] metadata (kind, risk,
//! primary effect, side effects, scopes, tenant, environment, data namespace, owner, schemas)
//! is what makes policy possible. Governance travels in a Capability 1.x manifest under
//! `metadata.governance` ([`GovernedCapability::from_manifest`]); things the runtime does not
//! execute (models, memory, secrets) are registered by plain name
//! ([`GovernedCapability::new`]).
//!
//! # `metadata.governance` JSON
//!
//! ```json
//! {
//!   "kind": "tool",
//!   "risk": "high",
//!   "effect": { "type": "financial", "external": true, "reversible": false },
//!   "sideEffects": [
//!     { "type": "send_message", "canDisable": true, "disableInput": { "notify": false } }
//!   ],
//!   "scopes": ["refunds:create", { "name": "billing:read", "description": "..." }],
//!   "tenant": "acme", "environment": "prod",
//!   "dataNamespace": "billing.refunds", "owner": "payments-team",
//!   "description": "Refund a customer", "inputSchema": {}, "outputSchema": {},
//!   "metadata": {}
//! }
//! ```
//!
//! Every field is optional: `kind` defaults to `tool`, `risk` to `low` (Brane's defaults).
//! Unknown fields are refused, so that a typo never silently drops a constraint. Effect types
//! are Brane's 14 names or a Capability 1.x effect (`network.connect`, `custom:...`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::names::{UnknownName, new_id, string_enum};

string_enum! {
    /// The 16 capability kinds.
    pub enum CapabilityKind ("capability kind") {
        Tool => "tool",
        Model => "model",
        Memory => "memory",
        Retrieval => "retrieval",
        Database => "database",
        ExternalApi => "external_api",
        McpServer => "mcp_server",
        McpTool => "mcp_tool",
        McpResource => "mcp_resource",
        McpPrompt => "mcp_prompt",
        Sandbox => "sandbox",
        Filesystem => "filesystem",
        Secret => "secret",
        ApprovalGroup => "approval_group",
        Agent => "agent",
        Workflow => "workflow",
    }
}

string_enum! {
    /// Risk classification, ordered from `none` to `critical`.
    pub enum RiskLevel ("risk level") {
        /// No meaningful risk.
        None => "none",
        /// Read-only, reversible, internal only.
        Low => "low",
        /// Writes to internal state or reads external data.
        Medium => "medium",
        /// External writes, financial actions, credential access, irreversible changes.
        High => "high",
        /// Destructive, broadly scoped, or impossible to audit after the fact.
        Critical => "critical",
    }
}

impl RiskLevel {
    /// `high` or `critical`.
    pub fn is_high(self) -> bool {
        self >= RiskLevel::High
    }
}

string_enum! {
    /// Deployment environments.
    pub enum Environment ("environment") {
        Dev => "dev",
        Staging => "staging",
        Prod => "prod",
    }
}

string_enum! {
    /// Brane's 14 effect types (also used for side effects).
    pub enum BraneEffect ("effect type") {
        None => "none",
        Read => "read",
        Write => "write",
        Delete => "delete",
        SendMessage => "send_message",
        ExternalApiCall => "external_api_call",
        Financial => "financial",
        CredentialAccess => "credential_access",
        CodeExecution => "code_execution",
        NetworkAccess => "network_access",
        DataExport => "data_export",
        StateChange => "state_change",
        HumanVisible => "human_visible",
        Irreversible => "irreversible",
    }
}

/// An effect type: one of Brane's 14 names, or a Capability 1.x effect
/// (`filesystem.write`, `custom:...`), which bridges the two vocabularies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EffectType {
    /// One of Brane's effect types.
    Brane(BraneEffect),
    /// A Capability 1.x effect name.
    Declared(String),
}

impl EffectType {
    /// Parses a Brane effect type or a Capability 1.x effect.
    pub fn parse(value: &str) -> Result<Self, UnknownName> {
        if let Ok(b) = BraneEffect::parse(value) {
            return Ok(EffectType::Brane(b));
        }
        if capability_core::effects::is_capability_effect(value) {
            return Ok(EffectType::Declared(value.to_string()));
        }
        Err(UnknownName {
            what: "effect type",
            value: value.to_string(),
            expected: format!(
                "{}, or a Capability 1.x effect such as `network.connect` or `custom:name`",
                BraneEffect::ALL
                    .iter()
                    .map(|e| e.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            EffectType::Brane(b) => b.as_str(),
            EffectType::Declared(s) => s,
        }
    }
}

impl From<BraneEffect> for EffectType {
    fn from(b: BraneEffect) -> Self {
        EffectType::Brane(b)
    }
}

impl std::fmt::Display for EffectType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A malformed governance document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// A closed vocabulary did not contain the value.
    #[error("{path}: {source}")]
    Name {
        /// Where in the document.
        path: String,
        /// The bad value.
        source: UnknownName,
    },
    /// A field had the wrong JSON type.
    #[error("{path}: expected {expected}, found {found}")]
    Type {
        /// Where in the document.
        path: String,
        /// The JSON type wanted.
        expected: &'static str,
        /// The JSON type given.
        found: &'static str,
    },
    /// A field that the model does not know.
    #[error("{path}: unknown field `{field}`")]
    UnknownField {
        /// The object holding the field.
        path: String,
        /// The field name.
        field: String,
    },
    /// A required field is missing.
    #[error("{path}: missing field `{field}`")]
    Missing {
        /// The object missing the field.
        path: String,
        /// The field name.
        field: &'static str,
    },
    /// A capability name that is empty.
    #[error("capability name must not be empty")]
    EmptyName,
}

/// A named permission required by a capability (or granted to an agent).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Scope {
    pub name: String,
    pub description: Option<String>,
    pub data_namespace: Option<String>,
    pub environment: Option<Environment>,
    pub owner: Option<String>,
    pub metadata: Map<String, Value>,
}

impl Scope {
    /// A scope with only a name.
    pub fn new(name: impl Into<String>) -> Self {
        Scope {
            name: name.into(),
            ..Scope::default()
        }
    }
}

/// The primary expected outcome of using a capability.
#[derive(Clone, Debug, PartialEq)]
pub struct Effect {
    pub kind: EffectType,
    pub description: Option<String>,
    /// Defaults to `low`.
    pub risk: RiskLevel,
    pub external: bool,
    /// Defaults to `true`.
    pub reversible: bool,
    pub data_namespace: Option<String>,
    pub metadata: Map<String, Value>,
}

impl Effect {
    /// An effect with Brane's defaults (risk `low`, internal, reversible).
    pub fn new(kind: impl Into<EffectType>) -> Self {
        Effect {
            kind: kind.into(),
            description: None,
            risk: RiskLevel::Low,
            external: false,
            reversible: true,
            data_namespace: None,
            metadata: Map::new(),
        }
    }
}

/// A secondary consequence of using a capability, possibly disableable through its input.
#[derive(Clone, Debug, PartialEq)]
pub struct SideEffect {
    pub kind: EffectType,
    pub description: Option<String>,
    /// Defaults to `medium` (Brane's default, unlike [`Effect`]'s `low`).
    pub risk: RiskLevel,
    pub external: bool,
    pub reversible: bool,
    pub can_disable: bool,
    /// The input values that switch this side effect off (e.g. `{"notify": false}`).
    pub disable_input: Option<Map<String, Value>>,
    pub disable_description: Option<String>,
    pub requires_approval: bool,
    pub data_namespace: Option<String>,
    pub metadata: Map<String, Value>,
}

impl SideEffect {
    /// A side effect with Brane's defaults (risk `medium`, not disableable).
    pub fn new(kind: impl Into<EffectType>) -> Self {
        SideEffect {
            kind: kind.into(),
            description: None,
            risk: RiskLevel::Medium,
            external: false,
            reversible: true,
            can_disable: false,
            disable_input: None,
            disable_description: None,
            requires_approval: false,
            data_namespace: None,
            metadata: Map::new(),
        }
    }

    /// Makes the side effect disableable by the given input values.
    pub fn disabled_by(mut self, input: Map<String, Value>) -> Self {
        self.can_disable = true;
        self.disable_input = Some(input);
        self
    }
}

/// Governance metadata of one capability (the `metadata.governance` object).
#[derive(Clone, Debug, PartialEq)]
pub struct Governance {
    pub kind: CapabilityKind,
    pub risk: RiskLevel,
    pub effect: Option<Effect>,
    pub side_effects: Vec<SideEffect>,
    /// Scopes an agent must hold to use the capability.
    pub scopes: Vec<Scope>,
    pub tenant: Option<String>,
    pub environment: Option<Environment>,
    pub data_namespace: Option<String>,
    pub owner: Option<String>,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
    pub output_schema: Option<Value>,
    pub metadata: Map<String, Value>,
}

impl Governance {
    /// Governance of the given kind with Brane's defaults (risk `low`, nothing else).
    pub fn new(kind: CapabilityKind) -> Self {
        Governance {
            kind,
            risk: RiskLevel::Low,
            effect: None,
            side_effects: Vec::new(),
            scopes: Vec::new(),
            tenant: None,
            environment: None,
            data_namespace: None,
            owner: None,
            description: None,
            input_schema: None,
            output_schema: None,
            metadata: Map::new(),
        }
    }

    /// `true` if risk is `high` or `critical`.
    pub fn is_high_risk(&self) -> bool {
        self.risk.is_high()
    }

    /// `true` if there is at least one side effect.
    pub fn has_side_effects(&self) -> bool {
        !self.side_effects.is_empty()
    }

    /// The side effects that can be switched off, in order.
    pub fn disableable_side_effects(&self) -> Vec<&SideEffect> {
        self.side_effects.iter().filter(|s| s.can_disable).collect()
    }

    /// Reads a `metadata.governance` object. `path` names it in errors.
    pub fn from_json(value: &Value, path: &str) -> Result<Self, ModelError> {
        let mut r = Reader::open(value, path)?;
        let kind = match r.str("kind")? {
            Some(k) => CapabilityKind::parse(&k).map_err(|e| r.name_error("kind", e))?,
            None => CapabilityKind::Tool,
        };
        let mut g = Governance::new(kind);
        if let Some(risk) = r.str("risk")? {
            g.risk = RiskLevel::parse(&risk).map_err(|e| r.name_error("risk", e))?;
        }
        if let Some(effect) = r.take("effect") {
            g.effect = Some(effect_from_json(&effect, &r.sub("effect"))?);
        }
        if let Some(list) = r.array("sideEffects")? {
            for (i, item) in list.iter().enumerate() {
                g.side_effects.push(side_effect_from_json(
                    item,
                    &format!("{path}.sideEffects[{i}]"),
                )?);
            }
        }
        if let Some(list) = r.array("scopes")? {
            for (i, item) in list.iter().enumerate() {
                g.scopes
                    .push(scope_from_json(item, &format!("{path}.scopes[{i}]"))?);
            }
        }
        g.tenant = r.str("tenant")?;
        if let Some(env) = r.str("environment")? {
            g.environment =
                Some(Environment::parse(&env).map_err(|e| r.name_error("environment", e))?);
        }
        g.data_namespace = r.str("dataNamespace")?;
        g.owner = r.str("owner")?;
        g.description = r.str("description")?;
        g.input_schema = r.take("inputSchema");
        g.output_schema = r.take("outputSchema");
        g.metadata = r.object("metadata")?.unwrap_or_default();
        r.finish()?;
        Ok(g)
    }

    /// Writes the `metadata.governance` object (defaults included, absent options omitted).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert("risk".into(), self.risk.as_str().into());
        if let Some(e) = &self.effect {
            m.insert("effect".into(), effect_to_json(e));
        }
        if !self.side_effects.is_empty() {
            m.insert(
                "sideEffects".into(),
                Value::Array(self.side_effects.iter().map(side_effect_to_json).collect()),
            );
        }
        if !self.scopes.is_empty() {
            m.insert(
                "scopes".into(),
                Value::Array(self.scopes.iter().map(scope_to_json).collect()),
            );
        }
        put_opt(&mut m, "tenant", &self.tenant);
        if let Some(env) = self.environment {
            m.insert("environment".into(), env.as_str().into());
        }
        put_opt(&mut m, "dataNamespace", &self.data_namespace);
        put_opt(&mut m, "owner", &self.owner);
        put_opt(&mut m, "description", &self.description);
        if let Some(s) = &self.input_schema {
            m.insert("inputSchema".into(), s.clone());
        }
        if let Some(s) = &self.output_schema {
            m.insert("outputSchema".into(), s.clone());
        }
        if !self.metadata.is_empty() {
            m.insert("metadata".into(), Value::Object(self.metadata.clone()));
        }
        Value::Object(m)
    }
}

/// A capability under governance: a registry name plus its governance metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct GovernedCapability {
    /// `cap_<hex>`, generated at construction.
    pub id: String,
    /// Registry key and Cedar resource id: the manifest `id` for Capability 1.x
    /// capabilities, the plain name (`mcp.github.create_pr`) otherwise.
    pub name: String,
    pub governance: Governance,
    /// The Capability 1.x effects the manifest declares (`network.connect`, ...).
    pub declared_effects: Vec<String>,
}

impl GovernedCapability {
    /// A plain-name registration (Brane style), for things the runtime does not execute.
    pub fn new(name: impl Into<String>, kind: CapabilityKind) -> Self {
        GovernedCapability {
            id: new_id("cap"),
            name: name.into(),
            governance: Governance::new(kind),
            declared_effects: Vec::new(),
        }
    }

    /// A capability with the given governance.
    pub fn with_governance(name: impl Into<String>, governance: Governance) -> Self {
        GovernedCapability {
            id: new_id("cap"),
            name: name.into(),
            governance,
            declared_effects: Vec::new(),
        }
    }

    /// Reads a Capability 1.x manifest: `id` names the capability, `metadata.governance`
    /// (optional) holds the governance, `effects` the declared effects, `input`/`output` the
    /// schemas when governance does not give its own.
    pub fn from_manifest(manifest: &Value) -> Result<Self, ModelError> {
        let Some(obj) = manifest.as_object() else {
            return Err(ModelError::Type {
                path: "manifest".into(),
                expected: "object",
                found: json_type(manifest),
            });
        };
        let name = match obj.get("id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::String(_)) => return Err(ModelError::EmptyName),
            Some(other) => {
                return Err(ModelError::Type {
                    path: "manifest.id".into(),
                    expected: "string",
                    found: json_type(other),
                });
            }
            None => {
                return Err(ModelError::Missing {
                    path: "manifest".into(),
                    field: "id",
                });
            }
        };
        let governance_value = obj
            .get("metadata")
            .and_then(|m| m.as_object())
            .and_then(|m| m.get("governance"));
        let mut governance = match governance_value {
            Some(v) => Governance::from_json(v, "metadata.governance")?,
            None => Governance::new(CapabilityKind::Tool),
        };
        if governance.description.is_none() {
            governance.description = obj
                .get("description")
                .and_then(|d| d.as_str())
                .map(str::to_string);
        }
        if governance.input_schema.is_none() {
            governance.input_schema = obj.get("input").cloned();
        }
        if governance.output_schema.is_none() {
            governance.output_schema = obj.get("output").cloned();
        }
        // An imported OpenAPI operation: its HTTP facts become resource attributes
        // (`resource.method`, `path`, `operationId`, `server`).
        if let Some(meta) = obj.get("metadata").and_then(Value::as_object)
            && let Some(operation) = meta.get("openapiOperationId")
        {
            for (fact, key) in [("method", "method"), ("path", "path"), ("server", "server")] {
                if let Some(v) = meta.get(key).filter(|v| v.is_string()) {
                    governance.metadata.insert(fact.into(), v.clone());
                }
            }
            if operation.is_string() {
                governance
                    .metadata
                    .insert("operationId".into(), operation.clone());
            }
        }
        let declared_effects = obj
            .get("effects")
            .and_then(|e| e.as_array())
            .map(|list| {
                list.iter()
                    .filter_map(|e| e.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Ok(GovernedCapability {
            id: new_id("cap"),
            name,
            governance,
            declared_effects,
        })
    }

    /// Reads a capability in Brane's shape (its `Capability` serialized: `name`, `type`,
    /// `risk`, `effect`, `side_effects`, `scopes`, `tenant_id`, `environment`,
    /// `data_namespace`, `owner`, `description`, `input_schema`, `output_schema`,
    /// `metadata`; Brane's `id` is ignored, a new one is made). The camelCase names of
    /// `metadata.governance` (`kind`, `sideEffects`, `dataNamespace`, ...) are read too.
    pub fn from_brane_json(value: &Value) -> Result<Self, ModelError> {
        let Some(obj) = value.as_object() else {
            return Err(ModelError::Type {
                path: "capability".into(),
                expected: "object",
                found: json_type(value),
            });
        };
        let name = match obj.get("name") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => return Err(ModelError::EmptyName),
            Some(other) => {
                return Err(ModelError::Type {
                    path: "capability.name".into(),
                    expected: "string",
                    found: json_type(other),
                });
            }
            None => {
                return Err(ModelError::Missing {
                    path: "capability".into(),
                    field: "name",
                });
            }
        };
        let mut governance = Map::new();
        for (k, v) in obj {
            let key = match k.as_str() {
                "name" | "id" => continue,
                "type" => "kind",
                "tenant_id" => "tenant",
                other => camel(other),
            };
            let v = match key {
                "effect" => camel_keys(v),
                "sideEffects" | "scopes" => match v {
                    Value::Array(items) => Value::Array(items.iter().map(camel_keys).collect()),
                    other => other.clone(),
                },
                _ => v.clone(),
            };
            governance.insert(key.to_string(), v);
        }
        let governance = Governance::from_json(&Value::Object(governance), "capability")?;
        Ok(GovernedCapability::with_governance(name, governance))
    }

    pub fn risk(mut self, risk: RiskLevel) -> Self {
        self.governance.risk = risk;
        self
    }
    pub fn effect(mut self, effect: Effect) -> Self {
        self.governance.effect = Some(effect);
        self
    }
    pub fn side_effect(mut self, side_effect: SideEffect) -> Self {
        self.governance.side_effects.push(side_effect);
        self
    }
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.governance.scopes.push(Scope::new(scope));
        self
    }
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.governance.tenant = Some(tenant.into());
        self
    }
    pub fn environment(mut self, environment: Environment) -> Self {
        self.governance.environment = Some(environment);
        self
    }
    pub fn data_namespace(mut self, ns: impl Into<String>) -> Self {
        self.governance.data_namespace = Some(ns.into());
        self
    }
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.governance.owner = Some(owner.into());
        self
    }
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.governance.description = Some(description.into());
        self
    }
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.governance.input_schema = Some(schema);
        self
    }
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.governance.output_schema = Some(schema);
        self
    }
    pub fn metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.governance.metadata.insert(key.into(), value);
        self
    }
    pub fn declared_effect(mut self, effect: impl Into<String>) -> Self {
        self.declared_effects.push(effect.into());
        self
    }

    pub fn kind(&self) -> CapabilityKind {
        self.governance.kind
    }
    pub fn risk_level(&self) -> RiskLevel {
        self.governance.risk
    }
    pub fn is_high_risk(&self) -> bool {
        self.governance.is_high_risk()
    }
    pub fn has_side_effects(&self) -> bool {
        self.governance.has_side_effects()
    }
    pub fn disableable_side_effects(&self) -> Vec<&SideEffect> {
        self.governance.disableable_side_effects()
    }

    /// Names of the scopes the capability requires.
    pub fn required_scopes(&self) -> impl Iterator<Item = &str> {
        self.governance.scopes.iter().map(|s| s.name.as_str())
    }

    /// Every effect name: the primary effect, the side effects, then the declared effects,
    /// without duplicates. This is the Cedar resource's `effects` attribute.
    pub fn effect_names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |s: &str| {
            if !out.iter().any(|o| o == s) {
                out.push(s.to_string());
            }
        };
        if let Some(e) = &self.governance.effect {
            push(e.kind.as_str());
        }
        for s in &self.governance.side_effects {
            push(s.kind.as_str());
        }
        for d in &self.declared_effects {
            push(d);
        }
        out
    }

    /// The input that switches off every disableable side effect of the given types (all of
    /// them when `types` is empty): the merge of their `disable_input` maps.
    pub fn disable_input_for(&self, types: &[&str]) -> Map<String, Value> {
        let mut out = Map::new();
        for s in self.disableable_side_effects() {
            if (types.is_empty() || types.contains(&s.kind.as_str()))
                && let Some(input) = &s.disable_input
            {
                for (k, v) in input {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        out
    }
}

/// Labels as Brane has them: string to string, ordered.
pub type Labels = BTreeMap<String, String>;

// ---- JSON reading helpers -------------------------------------------------------------

pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn put_opt(m: &mut Map<String, Value>, key: &str, v: &Option<String>) {
    if let Some(v) = v {
        m.insert(key.into(), Value::String(v.clone()));
    }
}

struct Reader {
    path: String,
    map: Map<String, Value>,
}

impl Reader {
    fn open(value: &Value, path: &str) -> Result<Self, ModelError> {
        match value {
            Value::Object(m) => Ok(Reader {
                path: path.to_string(),
                map: m.clone(),
            }),
            other => Err(ModelError::Type {
                path: path.to_string(),
                expected: "object",
                found: json_type(other),
            }),
        }
    }

    fn sub(&self, field: &str) -> String {
        format!("{}.{field}", self.path)
    }

    fn name_error(&self, field: &str, source: UnknownName) -> ModelError {
        ModelError::Name {
            path: self.sub(field),
            source,
        }
    }

    fn take(&mut self, field: &str) -> Option<Value> {
        match self.map.remove(field) {
            Some(Value::Null) | None => None,
            Some(v) => Some(v),
        }
    }

    fn str(&mut self, field: &str) -> Result<Option<String>, ModelError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(ModelError::Type {
                path: self.sub(field),
                expected: "string",
                found: json_type(&other),
            }),
        }
    }

    fn bool(&mut self, field: &str, default: bool) -> Result<bool, ModelError> {
        match self.take(field) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(b),
            Some(other) => Err(ModelError::Type {
                path: self.sub(field),
                expected: "boolean",
                found: json_type(&other),
            }),
        }
    }

    fn array(&mut self, field: &str) -> Result<Option<Vec<Value>>, ModelError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(ModelError::Type {
                path: self.sub(field),
                expected: "array",
                found: json_type(&other),
            }),
        }
    }

    fn object(&mut self, field: &str) -> Result<Option<Map<String, Value>>, ModelError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(other) => Err(ModelError::Type {
                path: self.sub(field),
                expected: "object",
                found: json_type(&other),
            }),
        }
    }

    fn effect_type(&mut self, field: &'static str) -> Result<EffectType, ModelError> {
        match self.str(field)? {
            Some(t) => EffectType::parse(&t).map_err(|e| self.name_error(field, e)),
            None => Err(ModelError::Missing {
                path: self.path.clone(),
                field,
            }),
        }
    }

    fn risk(&mut self, default: RiskLevel) -> Result<RiskLevel, ModelError> {
        match self.str("risk")? {
            Some(r) => RiskLevel::parse(&r).map_err(|e| self.name_error("risk", e)),
            None => Ok(default),
        }
    }

    fn finish(self) -> Result<(), ModelError> {
        match self.map.keys().next() {
            Some(k) => Err(ModelError::UnknownField {
                path: self.path,
                field: k.clone(),
            }),
            None => Ok(()),
        }
    }
}

fn effect_from_json(v: &Value, path: &str) -> Result<Effect, ModelError> {
    let mut r = Reader::open(v, path)?;
    let mut e = Effect::new(r.effect_type("type")?);
    e.description = r.str("description")?;
    e.risk = r.risk(RiskLevel::Low)?;
    e.external = r.bool("external", false)?;
    e.reversible = r.bool("reversible", true)?;
    e.data_namespace = r.str("dataNamespace")?;
    e.metadata = r.object("metadata")?.unwrap_or_default();
    r.finish()?;
    Ok(e)
}

fn effect_to_json(e: &Effect) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), e.kind.as_str().into());
    put_opt(&mut m, "description", &e.description);
    m.insert("risk".into(), e.risk.as_str().into());
    m.insert("external".into(), e.external.into());
    m.insert("reversible".into(), e.reversible.into());
    put_opt(&mut m, "dataNamespace", &e.data_namespace);
    if !e.metadata.is_empty() {
        m.insert("metadata".into(), Value::Object(e.metadata.clone()));
    }
    Value::Object(m)
}

fn side_effect_from_json(v: &Value, path: &str) -> Result<SideEffect, ModelError> {
    let mut r = Reader::open(v, path)?;
    let mut s = SideEffect::new(r.effect_type("type")?);
    s.description = r.str("description")?;
    s.risk = r.risk(RiskLevel::Medium)?;
    s.external = r.bool("external", false)?;
    s.reversible = r.bool("reversible", true)?;
    s.can_disable = r.bool("canDisable", false)?;
    s.disable_input = r.object("disableInput")?;
    s.disable_description = r.str("disableDescription")?;
    s.requires_approval = r.bool("requiresApproval", false)?;
    s.data_namespace = r.str("dataNamespace")?;
    s.metadata = r.object("metadata")?.unwrap_or_default();
    r.finish()?;
    Ok(s)
}

fn side_effect_to_json(s: &SideEffect) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), s.kind.as_str().into());
    put_opt(&mut m, "description", &s.description);
    m.insert("risk".into(), s.risk.as_str().into());
    m.insert("external".into(), s.external.into());
    m.insert("reversible".into(), s.reversible.into());
    m.insert("canDisable".into(), s.can_disable.into());
    if let Some(d) = &s.disable_input {
        m.insert("disableInput".into(), Value::Object(d.clone()));
    }
    put_opt(&mut m, "disableDescription", &s.disable_description);
    m.insert("requiresApproval".into(), s.requires_approval.into());
    put_opt(&mut m, "dataNamespace", &s.data_namespace);
    if !s.metadata.is_empty() {
        m.insert("metadata".into(), Value::Object(s.metadata.clone()));
    }
    Value::Object(m)
}

fn scope_from_json(v: &Value, path: &str) -> Result<Scope, ModelError> {
    if let Value::String(s) = v {
        return Ok(Scope::new(s.clone()));
    }
    let mut r = Reader::open(v, path)?;
    let Some(name) = r.str("name")? else {
        return Err(ModelError::Missing {
            path: path.to_string(),
            field: "name",
        });
    };
    let mut s = Scope::new(name);
    s.description = r.str("description")?;
    s.data_namespace = r.str("dataNamespace")?;
    if let Some(env) = r.str("environment")? {
        s.environment = Some(Environment::parse(&env).map_err(|e| r.name_error("environment", e))?);
    }
    s.owner = r.str("owner")?;
    s.metadata = r.object("metadata")?.unwrap_or_default();
    r.finish()?;
    Ok(s)
}

fn scope_to_json(s: &Scope) -> Value {
    if s.description.is_none()
        && s.data_namespace.is_none()
        && s.environment.is_none()
        && s.owner.is_none()
        && s.metadata.is_empty()
    {
        return Value::String(s.name.clone());
    }
    let mut m = Map::new();
    m.insert("name".into(), s.name.clone().into());
    put_opt(&mut m, "description", &s.description);
    put_opt(&mut m, "dataNamespace", &s.data_namespace);
    if let Some(env) = s.environment {
        m.insert("environment".into(), env.as_str().into());
    }
    put_opt(&mut m, "owner", &s.owner);
    if !s.metadata.is_empty() {
        m.insert("metadata".into(), Value::Object(s.metadata.clone()));
    }
    Value::Object(m)
}

/// Brane's snake_case member names as the camelCase ones of `metadata.governance`.
fn camel(key: &str) -> &str {
    match key {
        "side_effects" => "sideEffects",
        "data_namespace" => "dataNamespace",
        "input_schema" => "inputSchema",
        "output_schema" => "outputSchema",
        "can_disable" => "canDisable",
        "disable_input" => "disableInput",
        "disable_description" => "disableDescription",
        "requires_approval" => "requiresApproval",
        other => other,
    }
}

/// An effect, side effect or scope object with its own member names in camelCase (the
/// values, `metadata` and `disable_input` included, are kept as they are).
fn camel_keys(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (camel(k).to_string(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}
