//! What a host is opened with ([`HostConfig`]) and what one call asks ([`Request`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::Preset;
use capability_policy::Actor;
use capability_runtime::Caller;
use capability_runtime::source::{Builtins, CapabilitySource};
use capability_runtime::trust::TrustPolicy;
use capability_sandbox::{HostGrants, OciImages};
use capability_upstream::{Connect, GatewayConfig};
use serde_json::Value;

use capability_exec::ExecutorChoice;

use crate::error::{HostError, PolicyError};

/// The agent the host acts as when a request names none.
pub const DEFAULT_AGENT: &str = "cap-cli";

/// Where receipts, audit events and approvals are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Storage {
    /// In the home's database (the default), safe from process crashes.
    #[default]
    Durable,
    /// In the home's database, flushed to disk on every receipt (safe from power loss).
    DurableSync,
    /// In memory only (the home is still created for the host key).
    Memory,
    /// An existing home read as it is, for queries (a home this process cannot write:
    /// a read-only mount, another user's files). Nothing is created, recovered or written;
    /// a call that would write fails.
    ReadOnly,
}

/// Policy files that apply to one tenant's callers only, in addition to the host's (Cedar's
/// default deny is among them: they need their own `permit`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantPolicies {
    pub tenant: String,
    /// Cedar files, or directories of `*.cedar` files.
    pub policies: Vec<PathBuf>,
}

/// Everything a host is opened with.
#[derive(Clone)]
pub struct HostConfig {
    /// The capability home (default: resolved from the environment, see [`crate::home`]).
    pub home: Option<PathBuf>,
    pub storage: Storage,
    /// The effect policy (default `permissive`, as the reference's CLI).
    pub preset: Preset,
    /// Cedar policy files, or directories of `*.cedar` files (sorted by name). With policy
    /// files, Cedar's default deny applies; without, the governance layer allows and audits.
    pub policies: Vec<PathBuf>,
    /// Policies of single tenants.
    pub tenants: Vec<TenantPolicies>,
    /// Record what policies would enforce without enforcing it.
    pub shadow: bool,
    /// A trust policy module capabilities must satisfy before they run.
    pub trust: Option<TrustPolicy>,
    pub executor: ExecutorChoice,
    /// Wall-clock limit of one execution.
    pub timeout: Option<Duration>,
    /// Memory limit of one sandboxed execution, in MiB.
    pub memory_mb: Option<u64>,
    /// What the host opens to package code when the matching effect is granted.
    pub grants: HostGrants,
    /// Images for the OCI executor, pinned by digest.
    pub oci_images: OciImages,
    /// Where capabilities come from (default: the built-ins). The OpenAPI documents and the
    /// packages installed in the home are always sources too.
    pub sources: Vec<Arc<dyn CapabilitySource>>,
    /// Upstream MCP servers whose tools are capabilities `mcp.<server>.<tool>` (a gateway
    /// config: its `policy`, `tenant` and `shadow` settings apply to the whole host).
    pub gateway: Option<GatewayConfig>,
    /// How the sessions of upstream servers start (default: children over stdio, or
    /// streamable HTTP; an embedder may give its own transport).
    pub upstream_connect: Option<Arc<Connect>>,
    /// The agent when a request names none.
    pub default_agent: String,
    /// Pre-started single-use sandboxes kept for grant-less node and python runs (0: none);
    /// for long-running surfaces (see `capability_sandbox::SandboxPool`).
    pub sandbox_pool: usize,
    /// Most calls a principal may have in flight at once (none: unlimited); over it a call
    /// is refused and audited.
    pub max_calls_per_principal: Option<usize>,
    /// Governed capabilities the callers execute themselves (declared as
    /// [`crate::Host::declare`] does, before policies are checked).
    pub governed: Vec<capability_policy::GovernedCapability>,
    /// Cost budgets across calls (policies of the engine; see [`crate::budgets`]).
    pub budgets: crate::budgets::BudgetConfig,
    /// How long an action decided for its caller waits for its result before it is
    /// closed as abandoned ([`crate::remote`]).
    pub action_timeout: Duration,
    /// Most actions one principal may hold open at once.
    pub max_open_actions_per_principal: usize,
    /// Where signed checkpoints of the audit log are kept, outside the home
    /// ([`crate::witness`]); `None`: the log is not anchored (`cap doctor` warns).
    pub audit_witness: Option<crate::witness::Witness>,
    /// The metabolic binders ([`crate::binders`]): each registered binder is a governed
    /// capability of kind `sandbox`; `None`: bindings cannot be run here.
    pub binders: Option<Arc<capability_core::binder::MetabolicBinderRegistry>>,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            home: None,
            storage: Storage::Durable,
            preset: Preset::Permissive,
            policies: Vec::new(),
            tenants: Vec::new(),
            shadow: false,
            trust: None,
            executor: ExecutorChoice::Auto,
            timeout: None,
            memory_mb: None,
            grants: HostGrants::default(),
            oci_images: OciImages::default(),
            sources: vec![Arc::new(Builtins)],
            gateway: None,
            upstream_connect: None,
            default_agent: DEFAULT_AGENT.into(),
            sandbox_pool: 0,
            max_calls_per_principal: None,
            governed: Vec::new(),
            budgets: crate::budgets::BudgetConfig::default(),
            action_timeout: crate::remote::DEFAULT_RESULT_TIMEOUT,
            max_open_actions_per_principal: crate::remote::DEFAULT_MAX_OPEN_PER_PRINCIPAL,
            audit_witness: None,
            binders: None,
        }
    }
}

impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("home", &self.home)
            .field("storage", &self.storage)
            .field("preset", &self.preset)
            .field("policies", &self.policies)
            .field("tenants", &self.tenants)
            .field("shadow", &self.shadow)
            .field("executor", &self.executor)
            .field(
                "sources",
                &self.sources.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .field("gateway", &self.gateway.is_some())
            .finish_non_exhaustive()
    }
}

impl HostConfig {
    /// The policy files of the host and of each tenant, with the gateway config's added.
    pub(crate) fn all_policies(&self) -> (Vec<PathBuf>, Vec<TenantPolicies>) {
        let mut policies = self.policies.clone();
        let mut tenants = self.tenants.clone();
        if let Some(g) = &self.gateway {
            policies.extend(g.policy.iter().cloned());
            tenants.extend(g.tenants.iter().map(|t| TenantPolicies {
                tenant: t.name.clone(),
                policies: t.policy.clone(),
            }));
        }
        (policies, tenants)
    }

    /// Shadow mode, from the config or the gateway config.
    pub(crate) fn shadow(&self) -> bool {
        self.shadow || self.gateway.as_ref().is_some_and(|g| g.shadow)
    }
}

/// One call of a capability.
#[derive(Clone, Debug)]
pub struct Request {
    /// The capability id.
    pub capability: String,
    pub input: Value,
    /// Who acts and the call's context.
    pub caller: Caller,
    /// The caller approves effects that the effect policy puts behind approval (the
    /// reference's `--approve`; policy approvals always need a human).
    pub approve_effects: bool,
    /// Wall-clock limit for this call (the tighter of this and the host's applies).
    pub timeout: Option<Duration>,
    /// Caller metadata, copied into the receipt.
    pub metadata: Option<Value>,
    /// A W3C `traceparent` the caller sent: when valid, its trace id becomes the call's and
    /// the header is kept in the audit event (`metadata.traceparent`).
    pub traceparent: Option<String>,
}

impl Request {
    pub fn new(capability: impl Into<String>, input: Value) -> Self {
        Request {
            capability: capability.into(),
            input,
            caller: Caller::default(),
            approve_effects: false,
            timeout: None,
            metadata: None,
            traceparent: None,
        }
    }

    /// The same request made by `actor`.
    pub fn by(mut self, actor: Actor) -> Self {
        self.caller.actor = actor;
        self
    }
}

/// `*.cedar` files from files and directories: a directory contributes its `*.cedar` files
/// (not recursively), sorted by name, and must hold at least one; a file is taken as given.
pub fn policy_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, HostError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| PolicyError::in_file(p, format!("cannot read it: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|e| e.extension().is_some_and(|x| x == "cedar"))
                .collect();
            entries.sort();
            if entries.is_empty() {
                return Err(PolicyError::in_file(p, "the directory holds no .cedar file").into());
            }
            out.extend(entries);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}
