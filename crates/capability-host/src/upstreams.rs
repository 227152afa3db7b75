//! MCP upstream servers as a source of the host ([`HostConfig::gateway`]): every tool an
//! upstream lists is registered as the capability `mcp.<server>.<tool>`, run by
//! `capability_upstream::ToolExecutor`, so a gateway call is [`Host::invoke`] like any
//! other: a plan whose fingerprint binds the pinned definition, effect authorization, the
//! policies (Cedar action `mcp_tool_call`, `resource.server` the upstream), the call, a
//! receipt and one audit event naming that receipt.
//!
//! What the host adds to such a call (the surfaces add nothing):
//!
//! * the effects the operator declared for the server (`effects`, and those the tool's
//!   annotations imply) count as approved: configuring the server approved them. The effect
//!   policy's `deny` still applies, and the policies decide every call;
//! * labels `mcp.server` and `mcp.tool` (policies read `context.labels`), and audit
//!   metadata `mcpServer`, `mcpTool`, `definitionHash`, `argumentsSha256` and, for a tool
//!   whose description hides characters, `hiddenCharacters`;
//! * one audit event per call (with both stages' decisions), the arguments recorded only
//!   with the config's `record_arguments` (after the call's redactions);
//! * a quarantined tool is refused before anything runs, with an audit event of code
//!   `quarantined`;
//! * arguments carrying a `__proto__` member, or invalid against the tool's pinned input
//!   schema (or under a schema that does not compile), are refused as `INVALID_INPUT` when
//!   the call is planned, before policies and approvals (the executor's plan:
//!   `capability_upstream::arguments`): what is hashed, approved and audited is what is
//!   forwarded.
//!
//! [`Host::sync_upstreams`] starts dead upstreams whose backoff passed, re-lists those that
//! said their tools changed, re-reads the pins, and re-registers what changed; surfaces call
//! it when they list tools and while they watch for changes.
//!
//! [`HostConfig::gateway`]: crate::HostConfig::gateway
//! [`Host::invoke`]: crate::Host::invoke

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use capability_core::CapabilityError;
use capability_policy::model::ModelError;
use capability_policy::{
    ActionType, Actor, DecisionType, GovernedCapability, InterceptRequest, Stage,
};
use capability_runtime::capability::Capability;
use capability_upstream::{ToolExecutor, UpstreamTool, Upstreams};
use serde_json::{Value, json};

use crate::Host;

/// Why an upstream tool's definition was not registered (its message is kept in
/// [`Host::upstream_problems`]).
#[derive(Debug, thiserror::Error)]
enum ToolRefused {
    /// The runtime refused the tool's manifest.
    #[error(transparent)]
    Manifest(#[from] CapabilityError),
    /// The tool's governance metadata does not read.
    #[error(transparent)]
    Governance(#[from] ModelError),
}

/// What the host registered of the upstream tools, and the listings made from them.
#[derive(Default)]
pub(crate) struct Registered {
    /// Capability id to the definition hash registered.
    tools: Mutex<BTreeMap<String, String>>,
    /// Bumped at the end of every registration pass.
    version: AtomicU64,
    /// The recent callers' visible tools ([`Host::upstream_tools`]), oldest first.
    visible: Mutex<Vec<Visible>>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("tools", &lock(&self.tools).len())
            .field("version", &self.version.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// How many callers' listings are kept.
const VISIBLE_CALLERS: usize = 64;

/// One caller's listing and what it was made from.
struct Visible {
    actor: Actor,
    generation: u64,
    registered: u64,
    catalog: Arc<Vec<Arc<UpstreamTool>>>,
    tools: Arc<Vec<Arc<UpstreamTool>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Host {
    /// The upstream catalog, when the host was opened with a gateway config.
    pub fn upstreams(&self) -> Option<&Arc<Upstreams>> {
        self.upstreams.as_ref()
    }

    /// Starts, re-lists and re-pins upstreams as needed and registers what changed (see the
    /// module docs); whether the tools changed. Problems registering a tool (a definition
    /// the runtime refuses) are kept in [`Host::upstream_problems`].
    pub fn sync_upstreams(&self, force: bool) -> bool {
        let Some(upstreams) = &self.upstreams else {
            return false;
        };
        let changed = upstreams.refresh(force);
        if changed || force {
            self.register_upstream_tools(upstreams);
        }
        changed
    }

    /// Upstreams that are down and tools that could not be registered, with why.
    pub fn upstream_problems(&self) -> Vec<(String, String)> {
        let mut out = self
            .upstreams
            .as_ref()
            .map(|u| u.problems())
            .unwrap_or_default();
        out.extend(lock(&self.upstream_tool_problems).iter().cloned());
        out
    }

    /// The upstream tools `actor` may see: kept by the config's `include`/`exclude`, not
    /// quarantined, and not denied to `actor` by the before-stage policies for a call with
    /// empty arguments (in shadow mode, every kept tool).
    ///
    /// Each recent caller's answer is kept while the policies' generation
    /// (`PolicyEngine::generation`: no closure policy, only deterministic sources), the
    /// catalog and the registered tools stay the same, so a listing costs one policy
    /// evaluation per tool only when one of them changed (or for a caller not seen since).
    pub fn upstream_tools(&self, actor: &Actor) -> Arc<Vec<Arc<UpstreamTool>>> {
        let Some(upstreams) = &self.upstreams else {
            return Arc::default();
        };
        let engine = self.governor.policies();
        // Read before what they guard: a change made meanwhile makes the answer stale, and
        // it is then kept under the numbers from before, which no later call will match.
        let generation = engine.generation();
        let registered = self.upstream_registered.version.load(Ordering::Acquire);
        let catalog = upstreams.tools();
        let listing = &self.upstream_registered;
        if let Some(generation) = generation
            && let Some(hit) = lock(&listing.visible).iter().find(|v| {
                v.generation == generation
                    && v.registered == registered
                    && Arc::ptr_eq(&v.catalog, &catalog)
                    && v.actor == *actor
            })
        {
            return Arc::clone(&hit.tools);
        }
        let shadow = engine.shadow_mode();
        let tools: Arc<Vec<Arc<UpstreamTool>>> = Arc::new(
            catalog
                .iter()
                .filter(|t| t.included && !t.quarantined)
                .filter(|t| {
                    let req = InterceptRequest::new(
                        t.capability.clone(),
                        ActionType::McpToolCall,
                        json!({}),
                    )
                    .actor(actor.clone())
                    .label("mcp.server", t.server.clone())
                    .label("mcp.tool", t.tool.clone());
                    match self.governor.evaluate(&req, Stage::BeforeCapability) {
                        Ok(verdict) => shadow || verdict.kind != DecisionType::Deny,
                        Err(_) => false,
                    }
                })
                .cloned()
                .collect(),
        );
        if let Some(generation) = generation {
            let mut visible = lock(&listing.visible);
            visible.retain(|v| {
                v.generation == generation
                    && v.registered == registered
                    && Arc::ptr_eq(&v.catalog, &catalog)
                    && v.actor != *actor
            });
            if visible.len() >= VISIBLE_CALLERS {
                visible.remove(0);
            }
            visible.push(Visible {
                actor: actor.clone(),
                generation,
                registered,
                catalog,
                tools: Arc::clone(&tools),
            });
        }
        tools
    }

    /// The upstream tool named `name` downstream (kept by the config; quarantined or not).
    pub fn upstream_tool(&self, name: &str) -> Option<Arc<UpstreamTool>> {
        let upstreams = self.upstreams.as_ref()?;
        upstreams.downstream(name).filter(|t| t.included)
    }

    /// Registers the catalog's tools that are new or changed, and unregisters those that are
    /// gone or excluded.
    fn register_upstream_tools(&self, upstreams: &Arc<Upstreams>) {
        let tools = upstreams.tools();
        let mut registered = lock(&self.upstream_registered.tools);
        let mut problems = Vec::new();
        let keep: Vec<&Arc<UpstreamTool>> = tools.iter().filter(|t| t.included).collect();
        let kept: HashSet<&str> = keep.iter().map(|t| t.capability.as_str()).collect();
        for id in registered.keys().cloned().collect::<Vec<_>>() {
            if !kept.contains(id.as_str()) {
                self.runtime.registry().unregister(&id);
                self.governor.capabilities().unregister(&id);
                registered.remove(&id);
            }
        }
        for tool in keep {
            if registered.get(&tool.capability) == Some(&tool.hash) {
                continue;
            }
            match self.register_upstream_tool(upstreams, tool) {
                Ok(()) => {
                    registered.insert(tool.capability.clone(), tool.hash.clone());
                }
                Err(e) => problems.push((tool.capability.clone(), e.to_string())),
            }
        }
        *lock(&self.upstream_tool_problems) = problems;
        self.upstream_registered
            .version
            .fetch_add(1, Ordering::Release);
    }

    fn register_upstream_tool(
        &self,
        upstreams: &Arc<Upstreams>,
        tool: &UpstreamTool,
    ) -> Result<(), ToolRefused> {
        let executor = Arc::new(ToolExecutor::new(Arc::clone(upstreams)));
        // A tool whose input schema does not compile is registered without it; its calls
        // are refused when planned (its arguments cannot be checked).
        let manifest = tool.manifest(true);
        let capability = Capability::host_defined(&manifest, executor.clone())
            .or_else(|_| Capability::host_defined(&tool.manifest(false), executor))?;
        let transport = upstreams
            .config()
            .server(&tool.server)
            .map_or("stdio", |s| if s.url.is_some() { "http" } else { "stdio" });
        let capability = capability.with_provenance(json!({
            "source": format!("mcp:{}", tool.server),
            "mcpServer": tool.server,
            "mcpTool": tool.tool,
            "definitionHash": tool.hash,
            "transport": transport,
        }));
        let governed = GovernedCapability::from_manifest(&manifest)?;
        self.runtime.registry().replace(capability);
        self.governor.register_capability(governed);
        Ok(())
    }

    /// The facts of an upstream tool that the host adds to a call of it (see the module
    /// docs): labels, audit metadata, whether its arguments are recorded.
    pub(crate) fn upstream_facts(&self, capability: &str, input: &Value) -> Option<UpstreamFacts> {
        let upstreams = self.upstreams.as_ref()?;
        let tool = upstreams.tool(capability)?;
        let record_input = upstreams
            .config()
            .server(&tool.server)
            .is_some_and(|s| upstreams.config().records_arguments(s));
        let mut metadata = serde_json::Map::new();
        metadata.insert("mcpServer".into(), json!(tool.server));
        metadata.insert("mcpTool".into(), json!(tool.tool));
        metadata.insert("definitionHash".into(), json!(tool.hash));
        metadata.insert(
            "argumentsSha256".into(),
            json!(capability_core::json::canonical_hash(input)),
        );
        if !tool.hidden.is_empty() {
            metadata.insert("hiddenCharacters".into(), json!(tool.hidden));
        }
        Some(UpstreamFacts {
            labels: vec![
                ("mcp.server".into(), tool.server.clone()),
                ("mcp.tool".into(), tool.tool.clone()),
            ],
            metadata,
            record_input,
        })
    }
}

/// What the host adds to a call of an upstream tool.
pub(crate) struct UpstreamFacts {
    pub labels: Vec<(String, String)>,
    pub metadata: serde_json::Map<String, Value>,
    pub record_input: bool,
}
