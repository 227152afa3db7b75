//! Policies written as Rust closures, their targets and stages, and the context they see.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::action::AgentAction;
use crate::decision::Decision;
use crate::model::{GovernedCapability, SideEffect};
use crate::names::{new_id, string_enum};

string_enum! {
    /// When a policy runs.
    pub enum Stage ("policy stage") {
        /// Before execution: may deny, ask for approval, transform the input, route,
        /// sandbox, and schedule output redaction/transformation.
        BeforeCapability => "before_capability",
        /// After a successful execution, with the output: may deny the output, redact it or
        /// transform it.
        AfterCapability => "after_capability",
        /// After a failed execution: observes (its decisions are recorded).
        OnError => "on_error",
    }
}

/// Which capabilities a policy applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `*`: every capability.
    Any,
    /// An exact capability name.
    Exact(String),
    /// A glob: `*` matches any run of characters (dots included), `?` one character.
    /// `mcp.*` matches `mcp.github.create_pr`.
    Glob(String),
}

impl Target {
    /// Parses a target string: `*`, a glob (contains `*` or `?`), or an exact name.
    pub fn parse(s: &str) -> Self {
        if s == "*" {
            Target::Any
        } else if s.contains(['*', '?']) {
            Target::Glob(s.to_string())
        } else {
            Target::Exact(s.to_string())
        }
    }

    /// Whether the target covers this capability name.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Target::Any => true,
            Target::Exact(n) => n == name,
            Target::Glob(g) => glob_match(g.as_bytes(), name.as_bytes()),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Any => f.write_str("*"),
            Target::Exact(s) | Target::Glob(s) => f.write_str(s),
        }
    }
}

impl From<&str> for Target {
    fn from(s: &str) -> Self {
        Target::parse(s)
    }
}

/// Glob matching: `*` matches any run of bytes, `?` any one byte.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    wildcard_match(pattern, text, |&c| c == b'*', |&c, b| c == b'?' || c == b)
}

/// Iterative wildcard matching with backtracking on the last star (linear in practice):
/// `is_star` tells the tokens that match any run of bytes, `matches` whether a token
/// matches one byte.
pub(crate) fn wildcard_match<T>(
    pattern: &[T],
    text: &[u8],
    is_star: impl Fn(&T) -> bool,
    matches: impl Fn(&T, u8) -> bool,
) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(tok) if is_star(tok) => {
                star = Some((p, t));
                p += 1;
            }
            Some(tok) if matches(tok, text[t]) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(is_star)
}

/// A policy that could not produce a decision (its closure failed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PolicyFault {
    pub message: String,
}

impl PolicyFault {
    pub fn new(message: impl Into<String>) -> Self {
        PolicyFault {
            message: message.into(),
        }
    }
}

type PolicyFn = dyn Fn(&PolicyContext) -> Result<Decision, PolicyFault> + Send + Sync;

/// A policy: a function from [`PolicyContext`] to [`Decision`] plus its metadata.
#[derive(Clone)]
pub struct Policy {
    /// `pol_<hex>` unless set.
    pub id: String,
    pub name: Option<String>,
    pub version: Option<String>,
    pub description: Option<String>,
    pub target: Target,
    pub stage: Stage,
    /// Lower runs first; ties keep registration order.
    pub priority: i64,
    pub enabled: bool,
    /// Where the policy came from (a file, a crate), for people.
    pub source: Option<String>,
    function: Arc<PolicyFn>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("target", &self.target)
            .field("stage", &self.stage)
            .field("priority", &self.priority)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl Policy {
    /// A policy from an infallible closure.
    pub fn new<F>(stage: Stage, target: impl Into<Target>, f: F) -> Self
    where
        F: Fn(&PolicyContext) -> Decision + Send + Sync + 'static,
    {
        Self::fallible(stage, target, move |ctx| Ok(f(ctx)))
    }

    /// A policy from a closure that may fail; a failure denies the action (fail closed).
    pub fn fallible<F>(stage: Stage, target: impl Into<Target>, f: F) -> Self
    where
        F: Fn(&PolicyContext) -> Result<Decision, PolicyFault> + Send + Sync + 'static,
    {
        Policy {
            id: new_id("pol"),
            name: None,
            version: None,
            description: None,
            target: target.into(),
            stage,
            priority: 0,
            enabled: true,
            source: None,
            function: Arc::new(f),
        }
    }

    /// A `before_capability` policy.
    pub fn before<F>(target: impl Into<Target>, f: F) -> Self
    where
        F: Fn(&PolicyContext) -> Decision + Send + Sync + 'static,
    {
        Self::new(Stage::BeforeCapability, target, f)
    }

    /// An `after_capability` policy.
    pub fn after<F>(target: impl Into<Target>, f: F) -> Self
    where
        F: Fn(&PolicyContext) -> Decision + Send + Sync + 'static,
    {
        Self::new(Stage::AfterCapability, target, f)
    }

    /// An `on_error` policy.
    pub fn on_error<F>(target: impl Into<Target>, f: F) -> Self
    where
        F: Fn(&PolicyContext) -> Decision + Send + Sync + 'static,
    {
        Self::new(Stage::OnError, target, f)
    }

    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }
    pub fn priority(mut self, priority: i64) -> Self {
        self.priority = priority;
        self
    }
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The name shown in decisions: the name, else the id.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }

    /// Whether this policy runs for that capability at that stage.
    pub fn applies(&self, capability: &str, stage: Stage) -> bool {
        self.enabled && self.stage == stage && self.target.matches(capability)
    }

    /// Runs the policy function (without annotation).
    pub fn call(&self, ctx: &PolicyContext) -> Result<Decision, PolicyFault> {
        (self.function)(ctx)
    }

    /// Brane's `annotate`: stamps the policy's id, and its name/version unless the decision
    /// set its own non-empty values.
    pub fn annotate(&self, mut d: Decision) -> Decision {
        d.policy_id = Some(self.id.clone());
        if d.policy_name.as_deref().is_none_or(str::is_empty) {
            d.policy_name = Some(self.display_name().to_string());
        }
        if d.policy_version.as_deref().is_none_or(str::is_empty) {
            d.policy_version = self.version.clone();
        }
        d
    }
}

/// An approval that was verified for this action (set by the interceptor or runtime after
/// checking a token); it satisfies `approval_required` decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantedApproval {
    pub approval_id: String,
    pub approver: String,
}

/// What a policy sees: the action (with its capability), the arguments, the output in the
/// after stage, and runtime metadata.
#[derive(Clone, Debug)]
pub struct PolicyContext {
    pub action: AgentAction,
    /// Arguments; when empty, [`PolicyContext::arg`] reads the action input (Brane).
    pub args: Map<String, Value>,
    pub output: Option<Value>,
    pub runtime_metadata: Map<String, Value>,
    pub stage: Stage,
    /// Set when a valid approval for this exact action was presented.
    pub approval: Option<GrantedApproval>,
    /// The error message, in the `on_error` stage.
    pub error: Option<String>,
}

impl PolicyContext {
    /// A context for the action at the given stage, with the action's output (if any).
    pub fn new(action: AgentAction, stage: Stage) -> Self {
        let output = action.output.clone();
        PolicyContext {
            action,
            args: Map::new(),
            output,
            runtime_metadata: Map::new(),
            stage,
            approval: None,
            error: None,
        }
    }

    pub fn with_args(mut self, args: Map<String, Value>) -> Self {
        self.args = args;
        self
    }
    pub fn with_output(mut self, output: Value) -> Self {
        self.output = Some(output);
        self
    }
    pub fn with_runtime_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.runtime_metadata = metadata;
        self
    }
    pub fn with_approval(mut self, approval: GrantedApproval) -> Self {
        self.approval = Some(approval);
        self
    }

    /// The capability.
    pub fn capability(&self) -> &GovernedCapability {
        &self.action.capability
    }
    /// Brane's alias of [`PolicyContext::capability`].
    pub fn tool(&self) -> &GovernedCapability {
        self.capability()
    }
    pub fn agent_id(&self) -> &str {
        &self.action.agent_id
    }
    pub fn principal_id(&self) -> Option<&str> {
        self.action.principal_id.as_deref()
    }
    /// The action's tenant (not the capability's).
    pub fn tenant_id(&self) -> Option<&str> {
        self.action.tenant_id.as_deref()
    }
    pub fn is_prod(&self) -> bool {
        self.action.is_prod()
    }
    pub fn is_high_risk(&self) -> bool {
        self.capability().is_high_risk()
    }
    pub fn has_side_effects(&self) -> bool {
        self.capability().has_side_effects()
    }
    pub fn disableable_side_effects(&self) -> Vec<&SideEffect> {
        self.capability().disableable_side_effects()
    }

    /// An argument by **key presence**: from `args` if the key is there (even when its value
    /// is `null`), else from the action input, else `None`.
    pub fn arg(&self, key: &str) -> Option<&Value> {
        if let Some(v) = self.args.get(key) {
            return Some(v);
        }
        self.action.input.as_object().and_then(|m| m.get(key))
    }

    /// [`PolicyContext::arg`] with a default used only when the key is absent.
    pub fn arg_or<'a>(&'a self, key: &str, default: &'a Value) -> &'a Value {
        self.arg(key).unwrap_or(default)
    }

    /// A string argument (absent, or not a string → `None`).
    pub fn arg_str(&self, key: &str) -> Option<&str> {
        self.arg(key).and_then(Value::as_str)
    }

    /// A numeric argument as a double (absent, or not a number → `None`).
    pub fn arg_f64(&self, key: &str) -> Option<f64> {
        self.arg(key).and_then(Value::as_f64)
    }

    /// Whether the **agent** was granted the scope (exact, case-sensitive).
    ///
    /// Changed from Brane 0.1.0a2, which compared against the capability's *required*
    /// scopes; use [`PolicyContext::capability_requires_scope`] for that.
    pub fn agent_has_scope(&self, scope: &str) -> bool {
        self.action.agent_scopes.contains(scope)
    }

    /// Whether the capability declares the scope as required.
    pub fn capability_requires_scope(&self, scope: &str) -> bool {
        self.capability().required_scopes().any(|s| s == scope)
    }

    /// The scopes the capability requires.
    pub fn required_scopes(&self) -> Vec<&str> {
        self.capability().required_scopes().collect()
    }

    /// The required scopes the agent lacks, in declaration order.
    pub fn missing_scopes(&self) -> Vec<&str> {
        self.capability()
            .required_scopes()
            .filter(|s| !self.agent_has_scope(s))
            .collect()
    }

    /// Whether the agent holds every scope the capability requires.
    pub fn agent_has_required_scopes(&self) -> bool {
        self.missing_scopes().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let t = Target::parse("mcp.*");
        assert!(t.matches("mcp.github.create_pr"));
        assert!(t.matches("mcp."));
        assert!(!t.matches("tool.mcp.x"));
        assert!(Target::parse("*.read").matches("fs.read"));
        assert!(Target::parse("a?c").matches("abc"));
        assert!(!Target::parse("a?c").matches("ac"));
        assert!(Target::parse("a*b*c").matches("axxbyyc"));
        assert!(!Target::parse("a*b*c").matches("axxbyy"));
        assert!(Target::parse("*").matches(""));
        assert!(!Target::parse("exact").matches("exact2"));
    }
}
