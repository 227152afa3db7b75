//! # capability-host
//!
//! The one embedding API of the runtime, and the one place where governance happens. A
//! [`Host`] owns the capability [`Home`], the stores (receipts, kept plans, the audit log,
//! approvals, tokens; one database with one writer), the policies (Cedar files of the host
//! and of single tenants, the effect preset, the trust policy, shadow mode), the executors
//! package code runs behind, and the capability sources (built-ins, local packages,
//! installed packages, OpenAPI documents, MCP upstreams). The CLI, the MCP server, the MCP
//! gateway and the HTTP API and console are thin surfaces over it: they parse their
//! protocol, call the host and render what it returns. A surface never builds a store, a
//! governor or an executor, and never decides who may approve or read (see
//! `docs/architecture.md`).
//!
//! ## A governed call, an approval decided by a principal, the audit log
//!
//! ```
//! use capability_host::{ApprovalDecision, AuditFilter, Host, HostConfig, Outcome, Principal, Request};
//! # let dir = tempfile::tempdir()?;
//! # let policies = dir.path().join("policies.cedar");
//! std::fs::write(&policies, r#"permit(principal, action, resource);
//!   @decision("approval_required") @reason("secrets need a human")
//!   forbid(principal, action, resource) when { context.input.text like "*secret*" };"#)?;
//! let host = Host::open(HostConfig { home: Some(dir.path().join("home")),
//!     policies: vec![policies], ..HostConfig::default() })?;
//!
//! // An agent asks; the policy wants a human.
//! let request = Request::new("text/slugify", serde_json::json!({"text": "a secret plan"}))
//!     .by(capability_host::Actor::agent("bot"));
//! let Outcome::NeedsApproval(pending) = host.invoke(&request) else { panic!("no approval") };
//! let id = pending.approval.as_ref().map(|a| a.approval_id.clone()).unwrap_or_default();
//!
//! // The agent cannot decide its own request; the operator can.
//! let bot = Principal::agent(&capability_host::Actor::agent("bot"));
//! assert!(host.decide_approval(&bot, &id, ApprovalDecision::Approve, None).is_err());
//! let alice = Principal::operator("alice");
//! let decided = host.decide_approval(&alice, &id, ApprovalDecision::Approve, None)?;
//! let token = decided.token.map(|t| t.0).unwrap_or_default();
//!
//! // The agent's retry with the token runs exactly the approved plan, once.
//! let Outcome::Completed(done) = host.resume(&request, &token) else { panic!("not run") };
//! assert_eq!(done.receipt.output, Some(serde_json::json!({"slug": "a-secret-plan"})));
//!
//! // The audit log: every decision, queried by indexed columns, and a verified chain.
//! let page = host.audit_query(&alice, &AuditFilter {
//!     agent: Some("bot".into()), ..AuditFilter::default() }.query()?)?;
//! assert!(page.events.iter().any(|e| e.event["decision"] == "approval_required"));
//! assert!(host.verify_audit(&alice, None)?.ok);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## A gateway-style upstream source
//!
//! With a gateway config ([`HostConfig::gateway`]), every tool of every upstream MCP server
//! is a capability `mcp.<server>.<tool>` of the host (see [`upstreams`](mod@upstreams)); a
//! call of it is [`Host::invoke`] like any other and leaves a receipt. An embedder may give
//! its own transport ([`HostConfig::upstream_connect`]); here an in-process upstream that
//! adds two numbers:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use capability_host::upstream::{GatewayConfig, McpSession, UpstreamError};
//! use capability_host::{Host, HostConfig, Outcome, Request};
//! use serde_json::{Value, json};
//!
//! #[derive(Debug)]
//! struct Adder;
//! impl McpSession for Adder {
//!     fn request(&self, method: &str, params: Value, _: Duration) -> Result<Value, UpstreamError> {
//!         Ok(match method {
//!             "tools/list" => json!({"tools": [{"name": "add", "inputSchema": {"type": "object",
//!                 "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}]}),
//!             _ => {
//!                 let a = &params["arguments"];
//!                 let sum = a["a"].as_f64().unwrap_or(0.0) + a["b"].as_f64().unwrap_or(0.0);
//!                 json!({"content": [{"type": "text", "text": sum.to_string()}]})
//!             }
//!         })
//!     }
//!     fn dead(&self) -> Option<UpstreamError> { None }
//!     fn take_list_changed(&self) -> bool { false }
//!     fn kill(&self) {}
//! }
//!
//! # let dir = tempfile::tempdir()?;
//! let gateway: GatewayConfig = toml::from_str("[[server]]\nname = \"calc\"\ncommand = \"unused\"")?;
//! let host = Host::open(HostConfig {
//!     home: Some(dir.path().join("home")),
//!     gateway: Some(gateway),
//!     upstream_connect: Some(Arc::new(|_, _| Ok(Arc::new(Adder) as Arc<dyn McpSession>))),
//!     ..HostConfig::default()
//! })?;
//! let outcome = host.invoke(&Request::new("mcp.calc.add", json!({"a": 2, "b": 3})));
//! let Outcome::Completed(done) = outcome else { panic!("{outcome:?}") };
//! assert_eq!(done.receipt.capability.id, "mcp.calc.add");
//! assert_eq!(done.receipt.output, Some(json!(5)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## API
//!
//! * [`Host::open`] with a [`HostConfig`]: creates the home on first use, opens the
//!   database, loads and checks the policies, selects the executor and registers every
//!   capability of the sources.
//! * The lifecycle: [`Host::invoke`] runs a [`Request`] through plan → effect authorization
//!   → policies → execution behind its boundary → verification → receipt → audit, and
//!   returns an [`Outcome`]: `Completed` (the receipt), `NeedsApproval` (the pending
//!   approval; the plan is kept) or `Failed` (a typed [`CapabilityError`] whose `receipt_id`
//!   names the failed receipt when one was kept). [`Host::resume`] runs the exact plan an
//!   approval token was granted for. [`Host::plan`], [`Host::inspect`], [`Host::resolve`],
//!   [`Host::find`], [`Host::info`], [`Host::rollback`].
//! * Principals ([`principal`]): [`Host::authenticate`] maps a bearer token, a console login
//!   or a session to a [`Principal`]; the operator of the CLI is [`Principal::operator`].
//! * Services for principals: approvals ([`Host::approvals`], [`Host::approval`],
//!   [`Host::decide_approval`] — the one rule —, [`Host::approval_events`]), the audit log
//!   ([`Host::audit_query`], [`Host::verify_audit`], [`Host::export_audit`], ...), receipts
//!   ([`Host::receipts`], [`Host::receipt`], [`Host::export_receipts`]), policies
//!   ([`Host::policy_report`], [`Host::validate_policies`], [`Host::test_policies`],
//!   [`Host::policy_schema`]).
//! * Limits: [`HostConfig::max_calls_per_principal`] ([`limits`]); the HTTP surfaces' one
//!   guard ([`guard::HttpGuard`]).
//! * Acquisition ([`acquisition`]): [`Host::install`], [`Host::acquire`].
//! * MCP upstreams ([`upstreams`](mod@upstreams)): [`Host::sync_upstreams`],
//!   [`Host::upstream_tools`].
//!
//! Errors are [`HostError`] ([`error`]).
//!
//! ## Executors
//!
//! [`ExecutorChoice`]: `auto` (WASM for `.wasm` modules, the process sandbox for node,
//! python and native modules, an OCI engine when the sandbox cannot run and images are
//! configured), `process`, `wasm`, `oci` (docker or podman, images pinned by digest from
//! [`HostConfig::oci_images`]) and `in-process` (trusted host code only: package modules
//! are refused). The built-ins always run in process.

pub mod acquisition;
pub mod actions;
pub mod approvals;
pub mod audit;
pub mod binders;
pub mod budgets;
mod config;
pub mod error;
pub mod events;
pub mod guard;
pub mod limits;
pub mod packages;
pub mod policies;
pub mod principal;
pub mod receipts;
pub mod remote;
pub mod sources;
pub mod stores;
pub mod throttle;
pub mod tokens;
pub mod upstreams;
pub mod webhook;
pub mod witness;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use capability_core::discovery::{DiscoveryQuery, Hit};
use capability_core::index::{IndexEntry, discover_index, resolve};
use capability_core::plan::Plan;
use capability_core::receipt::Receipt;
use capability_core::{CapabilityError, ErrorCode};
use capability_journal::Database;
use capability_policy::approvals::ApprovalStore;
use capability_policy::{
    ApprovalManager, AuditStore, CedarPolicies, ForTenant, HostKey, InterceptRequest, PolicyEngine,
};
use capability_runtime::capability::Implementation;
use capability_runtime::store::ReceiptStore;
use capability_runtime::trust::{TrustPolicy, assess_trust_of};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_sandbox::ModuleExecutor;
use serde_json::{Value, json};

pub use capability_acquire::{InstallOptions, InstallRecord, Installation, Installed};
pub use capability_core::CapabilityError as Error;
pub use capability_exec::home::{self, Home, HomeError};
pub use capability_policy::approvals::{ApprovalFilter, ApprovalRecord, ApprovalStatus};
pub use capability_policy::{
    ActionType, Actor, ApprovalDecision, AuditQuery, AuditRecord, Decided, Environment, Governor,
    VerifyReport,
};
pub use capability_runtime::capability::Capability;
pub use capability_runtime::source::{Builtins, CapabilitySource, LocalPackage, PackageFile};
// What surfaces use of the layers below, through the host (see `docs/architecture.md`):
// discovery and acquisition tools, OpenAPI import, the runtime's pure functions and
// document builders, the trust vocabulary.
pub use capability_acquire as acquire;
pub use capability_openapi as openapi;
pub use capability_policy::{
    CapabilityRegistry as GovernedRegistry, Governance, GovernedCapability, cedar, fixtures,
};
pub use capability_runtime::registry::CapabilityRegistry;
pub use capability_runtime::{Caller, Completed, Outcome, PendingApproval};
pub use capability_runtime::{builtins, composition, defaults, evals, trust};
pub use capability_sandbox::stamp::FileStamp;
pub use capability_sandbox::{HostGrants, OciImages};
pub use capability_upstream as upstream;

pub use acquisition::Acquired;
pub use approvals::{ApprovalList, approval_document, approval_json};
pub use audit::{AuditFilter, AuditPage, ExportFormat};
pub use binders::{BindingExecuted, BindingOutcome, BindingRun};
pub use budgets::BudgetConfig;
pub use capability_exec::ExecutorChoice;
pub use config::{DEFAULT_AGENT, HostConfig, Request, Storage, TenantPolicies, policy_files};
pub use error::HostError;
pub use events::{ApprovalChange, ApprovalEvents};
pub use limits::LimitReached;
pub use principal::{Access, Credential, Principal};
pub use receipts::{ReceiptFilter, ReceiptList};
pub use remote::{ActionClosed, ActionDecided, ActionReport, ActionRequest};
pub use sources::OpenApiSource;
pub use tokens::{AuthError, Role, TokenRecord, TokenSpec, Tokens};

use error::{PolicyError, SourceError, StoreError};

/// How the host builds its module executor when it first needs one.
#[derive(Clone)]
struct ModuleConfig {
    executor: ExecutorChoice,
    timeout: Option<Duration>,
    memory_mb: Option<u64>,
    grants: HostGrants,
    oci_images: OciImages,
    sandbox_pool: usize,
}

impl ModuleConfig {
    /// The isolating executor of package modules (`None` for `in-process`, which refuses
    /// them).
    fn build(&self) -> Option<ModuleExecutor> {
        use capability_sandbox::{Limits, ProcessLimits, WasmLimits};
        let choice = self.executor;
        if choice == ExecutorChoice::InProcess {
            return None;
        }
        let mut limits = Limits::<ProcessLimits>::default();
        let mut wasm_limits = Limits::<WasmLimits>::default();
        if let Some(t) = self.timeout {
            limits.timeout = t;
            wasm_limits.timeout = t;
        }
        if let Some(mb) = self.memory_mb {
            limits.memory_bytes = mb.saturating_mul(1 << 20);
            wasm_limits.memory_bytes = mb.saturating_mul(1 << 20);
        }
        let mut executor = ModuleExecutor::new(choice)
            .with_host_grants(self.grants.clone())
            .with_limits(limits);
        if self.sandbox_pool > 0 {
            executor = executor.with_pool(self.sandbox_pool);
        }
        // The WASM executor is available wherever wasmtime runs; without it .wasm modules
        // are refused (they never run elsewhere).
        if let Ok(wasm) = capability_sandbox::WasmExecutor::new() {
            executor = executor.with_wasm(
                wasm.with_host_grants(self.grants.clone())
                    .with_limits(wasm_limits),
            );
        }
        let images = &self.oci_images;
        let has_images =
            images.node.is_some() || images.python.is_some() || images.native.is_some();
        if choice == ExecutorChoice::Oci || (choice == ExecutorChoice::Auto && has_images) {
            executor = executor.with_oci(images.clone());
        }
        Some(executor)
    }
}

/// The host: see the crate docs.
pub struct Host {
    home: Home,
    runtime: CapabilityRuntime,
    receipts: Arc<dyn ReceiptStore>,
    audit: Arc<dyn AuditStore>,
    approvals: Arc<ApprovalManager>,
    approval_store: Arc<dyn ApprovalStore>,
    database: Option<Arc<Database>>,
    governor: Arc<capability_policy::Governor>,
    entries: RwLock<Arc<Vec<IndexEntry>>>,
    /// The sources registered deferred whose index entries are not read yet, each with the
    /// position its entries take in `entries` (see [`Host::index_entries`]).
    deferred_entries: Mutex<Vec<(usize, Arc<dyn CapabilitySource>)>>,
    trust: Option<TrustPolicy>,
    timeout: Option<Duration>,
    tokens: OnceLock<Tokens>,
    module_config: ModuleConfig,
    /// The module executor, once package code is registered.
    modules: OnceLock<Arc<ModuleExecutor>>,
    policy_files: Vec<PathBuf>,
    limits: limits::CallLimits,
    feed: Arc<events::Feed>,
    upstreams: Option<Arc<upstream::Upstreams>>,
    upstream_registered: upstreams::Registered,
    upstream_tool_problems: Mutex<Vec<(String, String)>>,
    /// Actions decided here and executed by their callers, until their results.
    open_actions: remote::OpenActions,
    budgets: Arc<budgets::Ledger>,
    /// Failed sign-ins and bearer tokens per address and login.
    throttle: throttle::Throttle,
    /// What opening the stores kept in quarantine (see [`Host::recovery_warnings`]).
    recovery_warnings: Vec<String>,
    /// The witness that keeps checkpoints of the audit log, when one is named.
    anchor: Option<Arc<witness::Anchor>>,
    /// The metabolic binders software is bound with ([`binders`](mod@binders)).
    binders: Option<Arc<capability_core::binder::MetabolicBinderRegistry>>,
    /// Execution receipts of bindings.
    metabolic: binders::MetabolicStore,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // What this host wrote is anchored before it goes (one-shot commands included).
        if let Some(anchor) = &self.anchor
            && self.database.is_some()
        {
            let _ = anchor.close();
        }
        self.feed.stop();
        if let Some(u) = &self.upstreams {
            u.shutdown();
        }
    }
}

/// The Cedar policies of the host and of its tenants, loaded into one engine.
fn policy_engine(config: &HostConfig) -> Result<(PolicyEngine, Vec<PathBuf>), HostError> {
    let (policies, tenants) = config.all_policies();
    let engine = PolicyEngine::new();
    let files = policy_files(&policies)?;
    let mut all = files.clone();
    if !files.is_empty() {
        let cedar = CedarPolicies::from_paths(&files).map_err(PolicyError::new)?;
        engine.add_source(Arc::new(cedar));
    }
    for tenant in &tenants {
        let files = policy_files(&tenant.policies)?;
        let cedar = CedarPolicies::from_paths(&files)
            .map_err(|e| PolicyError::new(format!("tenant {}: {e}", tenant.tenant)))?;
        engine.add_source(Arc::new(ForTenant::new(
            tenant.tenant.clone(),
            Arc::new(cedar),
        )));
        all.extend(files);
    }
    engine.set_shadow_mode(config.shadow());
    Ok((engine, all))
}

impl Host {
    /// Opens the host (see the crate docs).
    pub fn open(config: HostConfig) -> Result<Host, HostError> {
        let home = if config.storage == Storage::ReadOnly {
            Home::existing(&home::resolve(config.home.as_deref()))?
        } else {
            Home::open_default(config.home.as_deref())?
        };
        // Whatever home was chosen (`--home` included), no sandbox ever mounts it.
        capability_sandbox::protect_host_path(home.root().to_path_buf());
        let key = if config.storage == Storage::ReadOnly {
            // Tokens it signed can be checked; without a key nothing here signs anything.
            HostKey::load(&home.host_key()).or_else(|_| HostKey::generate())
        } else {
            HostKey::load_or_generate(&home.host_key())
        }
        .map_err(|e| StoreError::new("host key", e))?;
        let mut stores = stores::Stores::open(&home, config.storage)?;
        let recovery_warnings = std::mem::take(&mut stores.warnings);
        let feed = events::Feed::new(
            (config.storage != Storage::Memory).then(|| home.root().to_path_buf()),
        );
        let approval_store: Arc<dyn ApprovalStore> =
            Arc::new(events::Observed::new(stores.approvals, Arc::clone(&feed)));
        let approvals = Arc::new(ApprovalManager::new(Arc::clone(&approval_store), key));
        let anchor = match &config.audit_witness {
            Some(w) => Some(witness::Anchor::new(
                w.clone(),
                home.root(),
                Arc::clone(&stores.audit),
                Arc::clone(&approvals),
            )?),
            None => None,
        };
        if let Some(a) = &anchor
            && matches!(config.storage, Storage::Durable | Storage::DurableSync)
        {
            a.run_periodically();
        }
        let (engine, policy_files) = policy_engine(&config)?;
        let governor = Arc::new(
            capability_policy::Governor::new(config.default_agent.clone())
                .engine(Arc::new(engine))
                .audit(stores.sink)
                .approvals(Arc::clone(&approvals)),
        );
        let budgets = budgets::Ledger::new(config.budgets.clone());
        if !budgets.is_empty() {
            budgets.rebuild(&budgets::spent_records(stores.audit.as_ref(), &budgets)?);
            governor
                .policies()
                .add_source(Arc::clone(&budgets) as Arc<dyn capability_policy::PolicySource>);
        }
        let runtime = CapabilityRuntime::builder()
            .policy(config.preset.policy())
            .store(Arc::clone(&stores.receipts))
            .governor(Arc::clone(&governor))
            .build();
        let upstreams = match &config.gateway {
            Some(gateway) => {
                gateway.check()?;
                Some(Arc::new(upstream::Upstreams::new(
                    gateway.clone(),
                    &home.mcp_pins(),
                    config.upstream_connect.clone(),
                )?))
            }
            None => None,
        };
        let metabolic = binders::MetabolicStore::new(stores.database.clone());
        let host = Host {
            runtime,
            receipts: stores.receipts,
            audit: stores.audit,
            approvals,
            approval_store,
            database: stores.database,
            governor,
            entries: RwLock::new(Arc::new(Vec::new())),
            deferred_entries: Mutex::new(Vec::new()),
            trust: config.trust.clone(),
            timeout: config.timeout,
            tokens: OnceLock::new(),
            module_config: ModuleConfig {
                executor: config.executor,
                timeout: config.timeout,
                memory_mb: config.memory_mb,
                grants: config.grants.clone(),
                oci_images: config.oci_images.clone(),
                sandbox_pool: config.sandbox_pool,
            },
            modules: OnceLock::new(),
            policy_files,
            limits: limits::CallLimits::new(config.max_calls_per_principal),
            feed,
            upstreams,
            upstream_registered: upstreams::Registered::default(),
            upstream_tool_problems: Mutex::new(Vec::new()),
            open_actions: remote::OpenActions::new(
                config.action_timeout,
                config.max_open_actions_per_principal,
            ),
            budgets,
            throttle: throttle::Throttle::default(),
            recovery_warnings,
            anchor,
            binders: config.binders.clone(),
            metabolic,
            home,
        };
        host.register_sources(&config.sources)?;
        for capability in &config.governed {
            host.declare(capability.clone())?;
        }
        host.declare_binders();
        host.sync_upstreams(true);
        Ok(host)
    }

    /// Registers every capability of the configured sources, the OpenAPI documents kept in
    /// the home and the packages installed in it (an id another source provides is left to
    /// it). The capabilities of a source that names them without building them
    /// ([`CapabilitySource::deferred_ids`]: the OpenAPI documents) are registered deferred,
    /// each built the first time it is looked up, and its index entries are read the first
    /// time discovery needs them ([`Host::index_entries`]): opening a home that keeps a
    /// document of 10,000 operations builds none of them. The module executor (and its WASM
    /// engine, ~10 ms to create) is built only when package code is registered.
    fn register_sources(&self, sources: &[Arc<dyn CapabilitySource>]) -> Result<(), HostError> {
        /// A source's capabilities: built now, or the ids of those registered deferred.
        enum Loaded {
            Now(Vec<Capability>, Vec<IndexEntry>),
            Deferred(Vec<String>),
        }
        let kept: Vec<Arc<dyn CapabilitySource>> = OpenApiSource::from_home(&self.home)
            .map_err(|e| SourceError::new("openapi", e))?
            .into_iter()
            .map(|s| Arc::new(s) as Arc<dyn CapabilitySource>)
            .collect();
        let mut loaded = Vec::new();
        for source in sources.iter().chain(&kept) {
            let capabilities = match source.deferred_ids() {
                Some(ids) => Loaded::Deferred(ids),
                None => Loaded::Now(
                    source
                        .capabilities()
                        .map_err(|e| SourceError::new(source.name(), e))?,
                    source.index_entries(),
                ),
            };
            loaded.push((source, capabilities));
        }
        let has_modules = loaded.iter().any(|(_, l)| {
            matches!(l, Loaded::Now(caps, _)
                if caps.iter().any(|c| matches!(c.implementation(), Implementation::Module(_))))
        });
        if has_modules {
            self.ensure_module_executor()?;
        }
        // Where the entries of the sources registered deferred go: after those of the sources
        // before them, as if they had been read now.
        let mut at = self
            .entries
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        let mut entries = Vec::new();
        let mut deferred_entries = Vec::new();
        for (source, capabilities) in loaded {
            match capabilities {
                Loaded::Now(capabilities, index) => {
                    for capability in capabilities {
                        self.runtime
                            .register(capability)
                            .map_err(|e| SourceError::new(source.name(), e))?;
                    }
                    at += index.len();
                    entries.extend(index);
                }
                Loaded::Deferred(ids) => {
                    for id in ids {
                        let from = Arc::clone(source);
                        let resolve = id.clone();
                        self.runtime
                            .register_deferred(id, Box::new(move || from.capability(&resolve)))
                            .map_err(|e| SourceError::new(source.name(), e))?;
                    }
                    deferred_entries.push((at, Arc::clone(source)));
                }
            }
        }
        self.add_index_entries(entries);
        self.deferred_entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(deferred_entries);
        // Packages installed with `cap install` (their store is the one part of the home a
        // sandbox may mount, read-only).
        capability_sandbox::expose_read_only(self.home.packages());
        self.register_installed()
    }

    /// Builds the module executor and gives it to the runtime, once.
    fn ensure_module_executor(&self) -> Result<(), HostError> {
        if self.modules.get().is_some() || self.runtime.has_module_executor() {
            return Ok(());
        }
        if let Some(executor) = self.module_config.build() {
            let executor = Arc::new(executor);
            if self.modules.set(Arc::clone(&executor)).is_ok() {
                self.runtime.set_module_executor(executor);
            }
        }
        Ok(())
    }

    fn add_index_entries(&self, entries: impl IntoIterator<Item = IndexEntry>) {
        let mut guard = self
            .entries
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = (**guard).clone();
        next.extend(entries);
        *guard = Arc::new(next);
    }

    /// With a sandbox pool ([`HostConfig::sandbox_pool`]): starts a spare for each node,
    /// python and native module capability, up to the pool's capacity, so that even their first runs
    /// find one; how many were started.
    pub fn prewarm_pool(&self) -> usize {
        let Some(modules) = self.modules.get() else {
            return 0;
        };
        let capacity = modules.pool().map_or(0, |p| p.capacity());
        let mut started = 0;
        // Module capabilities are never deferred: what is not built yet (OpenAPI
        // operations) stays unbuilt.
        for capability in self.runtime.registry().built() {
            if started >= capacity {
                break;
            }
            if modules.prewarm(capability.as_ref()) {
                started += 1;
            }
        }
        started
    }

    /// The capability home.
    pub fn home(&self) -> &Home {
        &self.home
    }

    /// The runtime underneath (registry, plans, composition).
    pub fn runtime(&self) -> &CapabilityRuntime {
        &self.runtime
    }

    /// The one database of the durable stores (`None` with [`Storage::Memory`]): a
    /// surface that drains flushes it.
    pub fn database(&self) -> Option<&Arc<Database>> {
        self.database.as_ref()
    }

    /// Waits until every receipt and audit event written so far is in the database.
    pub fn flush(&self) {
        if let Some(db) = &self.database {
            let _ = db.flush();
        }
    }

    /// How many calls are in flight now (a surface that drains waits for 0).
    pub fn calls_in_flight(&self) -> usize {
        self.limits.in_flight()
    }

    /// The request's caller, with what the host knows of the capability: the facts of an
    /// HTTP operation as labels (`context.labels.method`, `path`, `operationId`, `server`),
    /// those of an upstream MCP tool (see [`upstreams`](mod@upstreams)), and a valid
    /// `traceparent`. They come from the registered capability, never from the caller: a
    /// caller's labels of those names are replaced.
    fn options(&self, request: &Request) -> ExecuteOptions {
        let timeout = match (request.timeout, self.timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut caller = request.caller.clone();
        let mut options = ExecuteOptions {
            approved: request.approve_effects,
            metadata: request.metadata.clone(),
            timeout,
            ..Default::default()
        };
        if let Some(tp) = &request.traceparent
            && let Some((trace, _)) = capability_policy::audit::parse_traceparent(tp)
        {
            caller.trace_id = Some(trace.to_string());
            caller.metadata.insert("traceparent".into(), json!(tp));
        }
        if let Some(facts) = self.upstream_facts(&request.capability, &request.input) {
            caller.labels.extend(facts.labels);
            caller.metadata.extend(facts.metadata);
            caller.action_type = capability_policy::ActionType::McpToolCall;
            options.single_event = true;
            options.record_input = facts.record_input;
            // The operator declared the server's effects in the gateway config: that
            // approves them (the effect policy's `deny` still applies; policies decide).
            options.approved = true;
        } else if let Some(capability) = self
            .runtime
            .registry()
            .get(&request.capability)
            .filter(|c| matches!(c.implementation(), Implementation::Executor(_)))
        {
            // An OpenAPI operation's HTTP facts, read in place (not the whole metadata
            // object copied on every call).
            if let Some(meta) = capability
                .manifest()
                .metadata
                .as_ref()
                .filter(|m| m.get("openapiOperationId").is_some())
            {
                for (label, key) in [
                    ("method", "method"),
                    ("path", "path"),
                    ("operationId", "openapiOperationId"),
                    ("server", "server"),
                ] {
                    let value = meta.get(key).and_then(Value::as_str).unwrap_or_default();
                    caller.labels.insert(label.into(), value.into());
                }
            }
        }
        options.caller = Some(caller);
        options
    }

    /// Refuses a module capability the trust policy does not accept.
    fn check_trust(&self, id: &str) -> Result<(), CapabilityError> {
        let Some(policy) = &self.trust else {
            return Ok(());
        };
        let capability = self.runtime.registry().require(id)?;
        if capability.is_native() {
            return Ok(());
        }
        let assessment = assess_trust_of(&capability, policy);
        if assessment.accepted {
            return Ok(());
        }
        Err(CapabilityError::new(
            ErrorCode::PermissionDenied,
            format!("the trust policy does not accept {id}"),
        )
        .with_details(serde_json::to_value(&assessment).unwrap_or(Value::Null)))
    }

    /// A call the host refuses before its lifecycle (over the principal's limit, a
    /// quarantined tool): audited as `denied_before_execution` with `code`, answered
    /// `PERMISSION_DENIED` with `details.code`.
    fn refuse(&self, request: &Request, reason: String, code: &str) -> Outcome {
        let caller = self.options(request).caller.unwrap_or_default();
        let mut req = InterceptRequest::new(
            request.capability.clone(),
            caller.action_type,
            request.input.clone(),
        )
        .actor(caller.actor.clone());
        req.labels.extend(caller.labels.clone());
        req.metadata.extend(caller.metadata.clone());
        if let Some(t) = &caller.trace_id {
            req.trace_id = Some(t.clone());
        }
        let audited = self.governor.refuse(&req, &reason, code);
        let mut details = json!({"code": code});
        if let Err(e) = audited {
            details["audit"] = json!(format!("not audited: {e}"));
        }
        Outcome::Failed(
            CapabilityError::new(ErrorCode::PermissionDenied, reason).with_details(details),
        )
    }

    /// What every call goes through first: the principal's limit, an upstream tool that is
    /// unknown yet (the upstreams are looked at again) or quarantined, the trust policy.
    fn admit(&self, request: &Request) -> Result<limits::CallSlot<'_>, Outcome> {
        let slot = match self.limits.acquire(&request.caller.actor) {
            Ok(slot) => slot,
            Err(limit) => return Err(self.refuse(request, limit.to_string(), "rate_limited")),
        };
        if let Some(upstreams) = &self.upstreams
            && request.capability.starts_with("mcp.")
        {
            let mut tool = upstreams.tool(&request.capability);
            if tool.as_ref().is_none_or(|t| t.quarantined) {
                // A human may have accepted the pin, or the upstream came back.
                capability_upstream::may_block(|| self.sync_upstreams(false));
                tool = upstreams.tool(&request.capability);
            }
            if let Some(t) = tool.filter(|t| t.included && t.quarantined) {
                let message = format!(
                    "The definition of {}/{} changed since it was pinned; it is quarantined until a human reviews it (`cap mcp-pins list`) and accepts it with `cap mcp-pins accept {} {} --hash <its pending hash>`",
                    t.server, t.tool, t.server, t.tool
                );
                return Err(self.refuse(request, message, "quarantined"));
            }
        }
        // What is hashed, approved and receipted is the canonical form, which leaves
        // `__proto__` members out: an input that carries one would run with more than was
        // approved. Refused here for every surface (and by `Host::plan`).
        if let Err(e) = capability_upstream::check_no_proto(&request.input) {
            return Err(Outcome::Failed(e));
        }
        if let Err(e) = self.check_trust(&request.capability) {
            return Err(Outcome::Failed(e));
        }
        Ok(slot)
    }

    /// Runs a request through the whole governed lifecycle.
    pub fn invoke(&self, request: &Request) -> Outcome {
        let _slot = match self.admit(request) {
            Ok(slot) => slot,
            Err(refused) => return refused,
        };
        let options = self.options(request);
        self.runtime
            .invoke_outcome(&request.capability, request.input.clone(), &options)
    }

    /// Runs the exact plan the approval `token` was granted for. The request must name the
    /// same capability and input (a changed input is refused, and the refusal audited); the
    /// token is single use.
    pub fn resume(&self, request: &Request, token: &str) -> Outcome {
        // A token refused here is audited as the governor audits one it refuses.
        let refused = |m: String| {
            self.refuse(
                request,
                format!("approval refused: {m}"),
                "approval_invalid",
            )
        };
        let _slot = match self.admit(request) {
            Ok(slot) => slot,
            Err(refused) => return refused,
        };
        // The one signature check of the call: the governor is handed the verified token.
        let verified = match self.approvals.decode(token) {
            Ok(v) => v,
            Err(e) => return refused(e.to_string()),
        };
        let Some(fingerprint) = verified.plan_fingerprint() else {
            return refused("the token is not bound to a plan".into());
        };
        let plan = match self.runtime.pending_plan(fingerprint) {
            Ok(Some(plan)) => plan,
            Ok(None) => return refused(format!("no pending plan {fingerprint}")),
            Err(e) => return Outcome::Failed(e),
        };
        if plan.capability.id != request.capability {
            return refused(format!(
                "it was granted for {}, not {}",
                plan.capability.id, request.capability
            ));
        }
        if capability_core::json::canonical_hash(&plan.input)
            != capability_core::json::canonical_hash(&request.input)
        {
            return refused("the input differs from the approved plan".into());
        }
        let mut options = self.options(request);
        options.verified_approval = Some(verified);
        self.runtime.execute_outcome(&plan, &options)
    }

    /// Plans a call (the plan hook of a module runs behind the executor with no effect).
    pub fn plan(&self, id: &str, input: Value) -> Result<Plan, CapabilityError> {
        capability_upstream::check_no_proto(&input)?;
        self.runtime.plan(id, input)
    }

    /// Every registered capability, by id.
    pub fn capabilities(&self) -> Vec<Arc<Capability>> {
        self.runtime.registry().list()
    }

    /// Whether the input schema of capability `id` declares `property` (a surface's own
    /// arguments, such as `approvalToken`, are then the capability's input).
    pub fn input_declares(&self, id: &str, property: &str) -> bool {
        self.runtime.registry().get(id).is_some_and(|c| {
            c.manifest()
                .input
                .as_ref()
                .and_then(|i| i.get("properties"))
                .is_some_and(|p| p.get(property).is_some())
        })
    }

    /// The inert view of a registered capability.
    pub fn inspect(&self, id: &str) -> Result<Value, CapabilityError> {
        self.runtime.inspect(id)
    }

    /// The capability an argument names: a registered id exactly; else an id-shaped
    /// argument is not found (never a similar capability); anything else is a query
    /// resolved against the sources' index entries as the reference does.
    pub fn resolve(&self, id_or_query: &str) -> Result<String, CapabilityError> {
        if self.runtime.registry().get(id_or_query).is_some() {
            return Ok(id_or_query.to_string());
        }
        let not_found = |m: String| CapabilityError::new(ErrorCode::NotFound, m);
        if capability_core::validate::is_capability_id(id_or_query)
            || id_or_query.starts_with("mcp.")
        {
            return Err(not_found(format!("Capability not found: {id_or_query}")));
        }
        resolve(&self.index_entries(), id_or_query)
            .map(|r| r.entry.manifest.id.clone())
            .map_err(|e| not_found(e.to_string()))
    }

    /// The sources' index entries (built-ins, installed packages, ...). Those of the sources
    /// registered deferred (the OpenAPI documents) are read the first time they are asked
    /// for, and kept, in the place they would have had.
    pub fn index_entries(&self) -> Arc<Vec<IndexEntry>> {
        let mut deferred = self
            .deferred_entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !deferred.is_empty() {
            let mut guard = self
                .entries
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut next = (**guard).clone();
            // Last first, so that each position is still the one it was taken at.
            for (at, source) in deferred.drain(..).rev() {
                let at = at.min(next.len());
                next.splice(at..at, source.index_entries());
            }
            *guard = Arc::new(next);
        }
        drop(deferred);
        Arc::clone(
            &self
                .entries
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Lexical discovery over the sources' index entries (the reference's scores).
    pub fn find(&self, query: &DiscoveryQuery) -> Vec<Hit<IndexEntry>> {
        let entries = self.index_entries();
        discover_index(&entries, query)
            .into_iter()
            .map(|h| Hit {
                item: h.item.clone(),
                score: h.score,
                reasons: h.reasons,
            })
            .collect()
    }

    /// The index entry an id or query resolves to, with its score and reasons, as JSON
    /// (`{package, capability, score, reasons}`).
    pub fn info(&self, id_or_query: &str) -> Result<Value, CapabilityError> {
        let entries = self.index_entries();
        resolve(&entries, id_or_query)
            .map(|r| r.to_json())
            .map_err(|e| CapabilityError::new(ErrorCode::NotFound, e.to_string()))
    }

    /// Rolls back a successful execution of a reversible capability.
    pub fn rollback(
        &self,
        receipt_id: &str,
        approve_effects: bool,
    ) -> Result<Arc<Receipt>, CapabilityError> {
        let options = ExecuteOptions {
            approved: approve_effects,
            ..Default::default()
        };
        self.runtime.rollback(receipt_id, &options)
    }

    /// The bearer tokens of the HTTP surfaces (a durable home only).
    pub fn tokens(&self) -> Result<&Tokens, HostError> {
        if let Some(tokens) = self.tokens.get() {
            return Ok(tokens);
        }
        let Some(db) = &self.database else {
            return Err(StoreError::new(
                "tokens",
                "tokens need a durable home (not in-memory storage)",
            )
            .into());
        };
        let tokens = Tokens::open(Arc::clone(db))?;
        Ok(self.tokens.get_or_init(|| tokens))
    }

    /// The principal a credential proves (a missing, unknown, expired or revoked token, or
    /// a wrong login, is refused alike for every surface).
    pub fn authenticate(&self, credential: Credential<'_>) -> Result<Principal, AuthError> {
        self.authenticate_from(credential, None)
    }

    /// [`Host::authenticate`] of a caller at `from` (its network address, when the surface
    /// knows it): failed logins and bearer tokens are throttled per address and per login
    /// (see [`throttle`](mod@throttle)); a throttled attempt is refused with
    /// [`AuthError::Throttled`] before anything is checked.
    pub fn authenticate_from(
        &self,
        credential: Credential<'_>,
        from: Option<std::net::IpAddr>,
    ) -> Result<Principal, AuthError> {
        let attempt = match &credential {
            Credential::Login { name, .. } => Some(throttle::Attempt::Login(name)),
            Credential::Bearer(_) => Some(throttle::Attempt::Token),
            // A session's token id comes from the server's own session table.
            Credential::Session { .. } => None,
        };
        if let Some(a) = &attempt
            && let Some(retry_after) = self.throttle.check(a, from)
        {
            return Err(AuthError::Throttled { retry_after });
        }
        let tokens = self.tokens().map_err(|_| AuthError::Unavailable)?;
        let record = match credential {
            Credential::Bearer(secret) => tokens.authenticate(secret),
            Credential::Login { name, password } => tokens.login(name, password),
            Credential::Session { token_id } => tokens.by_id(token_id),
        };
        match (&record, &attempt) {
            (Ok(_), Some(a)) => self.throttle.succeeded(a, from),
            (Err(AuthError::Unavailable), _) | (_, None) => {}
            (Err(_), Some(a)) => self.throttle.failed(a, from),
        }
        Ok(Principal::from_token(&record?))
    }

    /// One warning per dead process's journal whose unreadable records opening this host
    /// kept in quarantine (naming the file), for the surface to show its operator.
    pub fn recovery_warnings(&self) -> &[String] {
        &self.recovery_warnings
    }

    /// Gives the audit witness a checkpoint of the log's head now, if it moved (a host also
    /// does when it closes, and periodically while it runs); the seq anchored.
    pub fn anchor_audit(&self) -> Result<Option<u64>, HostError> {
        match &self.anchor {
            Some(a) => a
                .anchor()
                .map_err(|e| StoreError::new("audit witness", e).into()),
            None => Ok(None),
        }
    }

    /// The audit witness, when one is named.
    pub fn audit_witness(&self) -> Option<&witness::Witness> {
        self.anchor.as_deref().map(witness::Anchor::witness)
    }

    /// The unreadable records kept in this home's quarantine so far.
    pub fn quarantined(&self) -> std::io::Result<stores::Quarantined> {
        stores::Quarantined::in_home(&self.home)
    }

    /// Whether a principal authenticated earlier still is: its token is neither revoked nor
    /// expired (principals without a token, the operator and a stdio agent, always are). A
    /// surface that holds a stream or session open asks this before each event it sends, and
    /// periodically, so that a revocation ends every stream of that principal (also one
    /// revoked by another process on the same home).
    pub fn still_authenticated(&self, principal: &Principal) -> bool {
        match principal.token_id() {
            None => true,
            Some(id) => self.tokens().is_ok_and(|tokens| tokens.by_id(id).is_ok()),
        }
    }
}

/// Which isolation boundaries work on this host, and the kernel features found (every
/// probe is bounded in time).
pub fn doctor() -> capability_sandbox::DoctorReport {
    capability_sandbox::doctor(capability_sandbox::ProcessSandbox::global())
}

/// The `{"error": {"code", "message", "receiptId"?, "details"?}}` document of a failure.
pub fn error_document(e: &CapabilityError) -> Value {
    let mut err = json!({"code": e.code.as_str(), "message": e.message});
    if let Some(id) = &e.receipt_id {
        err["receiptId"] = json!(id);
    }
    if let Some(details) = &e.details {
        err["details"] = details.clone();
    }
    json!({ "error": err })
}
