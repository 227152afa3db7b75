//! # capability-host
//!
//! The one embedding API of the runtime. A [`Host`] owns the capability [`Home`] (its layout
//! and permissions), one database with one writer for receipts, kept plans, audit events and
//! approvals, the policies (Cedar files and directories, the effect preset, the trust
//! policy, shadow mode), the executor that package code runs behind, and the capability
//! sources. The CLI, the MCP server, the MCP gateway and the HTTP server are thin surfaces
//! over it: they parse their protocol, call the host and render what it returns.
//!
//! The whole governed lifecycle — policy files, durable stores, an approval and its
//! resumption:
//!
//! ```
//! use capability_host::{Host, HostConfig, Outcome, Request};
//! # let dir = tempfile::tempdir()?;
//! # let policies = dir.path().join("policies.cedar");
//! std::fs::write(&policies, r#"permit(principal, action, resource);
//!   @decision("approval_required") @reason("secrets need a human")
//!   forbid(principal, action, resource) when { context.input.text like "*secret*" };"#)?;
//! let host = Host::open(HostConfig { home: Some(dir.path().join("home")),
//!     policies: vec![policies], ..HostConfig::default() })?;
//! let request = Request::new("text/slugify", serde_json::json!({"text": "a secret plan"}));
//! let Outcome::NeedsApproval(pending) = host.invoke(&request) else { panic!("no approval") };
//! let approval = pending.approval.as_ref().map(|a| a.approval_id.clone()).unwrap_or_default();
//! let token = host.approvals().approve(&approval, "alice", None)?;
//! let Outcome::Completed(receipt) = host.resume(&request, &token.0) else { panic!("not run") };
//! assert_eq!(receipt.output, Some(serde_json::json!({"slug": "a-secret-plan"})));
//! assert!(host.verify_audit()?.ok);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## API
//!
//! * [`Host::open`] with a [`HostConfig`]: creates the home on first use, opens the
//!   database, loads and checks the policies, selects the executor and registers every
//!   capability of the configured [`CapabilitySource`]s ([`Builtins`] by default,
//!   [`LocalPackage`]s).
//! * [`Host::invoke`] runs a [`Request`] through plan → effect authorization → policies →
//!   execution behind the executor → verification → receipt → audit, and returns an
//!   [`Outcome`]: `Completed` (the receipt), `NeedsApproval` (the pending approval; the plan
//!   is kept) or `Failed` (a typed [`CapabilityError`] whose `receipt_id` names the failed
//!   receipt when one was kept). [`Host::resume`] runs the exact plan an approval token was
//!   granted for, after checking that the request names the same capability and input.
//! * [`Host::plan`], [`Host::inspect`], [`Host::resolve`] and [`Host::find`] plan and
//!   discover without executing; [`Host::rollback`] undoes a reversible execution.
//! * Queries: [`Host::receipts`], [`Host::audit`], [`Host::verify_audit`],
//!   [`Host::approvals`].
//! * [`Host::tokens`]: the bearer tokens every HTTP surface authenticates callers with
//!   ([`tokens`]).
//!
//! ## Executors
//!
//! [`ExecutorChoice`]: `auto` (WASM for `.wasm` modules, the process sandbox for node,
//! python and native modules, an OCI engine when the sandbox cannot run and images are
//! configured), `process`, `wasm`, `oci` (docker or podman, images pinned by digest from
//! [`HostConfig::oci_images`]) and `in-process` (trusted host code only: package modules
//! are refused). The built-ins always run in process.

pub mod home;
pub mod installed;
pub mod sources;
pub mod tokens;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::Preset;
use capability_core::discovery::DiscoveryQuery;
use capability_core::discovery::Hit;
use capability_core::index::{IndexEntry, Resolution, discover_index, resolve};
use capability_core::plan::Plan;
use capability_core::receipt::Receipt;
use capability_core::{CapabilityError, ErrorCode};
use capability_journal::Database;
use capability_policy::approvals::ApprovalStore;
use capability_policy::audit::VerifyReport;
use capability_policy::{
    ApprovalManager, AuditSink, AuditStore, CedarPolicies, HostKey, MemoryStore, PolicyEngine,
    SqliteStore,
};
use capability_runtime::store::{Durability, MemoryReceiptStore, ReceiptStore};
use capability_runtime::trust::{TrustPolicy, assess_trust_of};
use capability_runtime::{CapabilityRuntime, ExecuteOptions, SqliteReceiptStore};
use capability_sandbox::ModuleExecutor;
use serde_json::{Value, json};

pub use capability_policy::{ActionType, Actor, Governor};
pub use capability_runtime::{Caller, Outcome, PendingApproval};
pub use capability_sandbox::{ExecutorChoice, HostGrants, OciImages};
pub use home::Home;
pub use sources::{Builtins, CapabilitySource, LocalPackage, OpenApiSource, PackageFile};
pub use tokens::{AuthError, Role, TokenRecord, TokenSpec, Tokens};

/// The agent the host acts as when a request names none.
pub const DEFAULT_AGENT: &str = "cap-cli";

/// Why the host could not be opened or a query could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("capability home `{path}`: {message}")]
    Home { path: PathBuf, message: String },
    #[error("cannot open the database in `{path}`: {message}")]
    Database { path: PathBuf, message: String },
    #[error("policy: {0}")]
    Policy(String),
    #[error("{0}")]
    Source(CapabilityError),
    #[error("store: {0}")]
    Store(String),
    #[error("host key: {0}")]
    Key(String),
}

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

/// Everything a host is opened with.
#[derive(Clone)]
pub struct HostConfig {
    /// The capability home (default: resolved from the environment, see [`home`]).
    pub home: Option<PathBuf>,
    pub storage: Storage,
    /// The effect policy (default `permissive`, as the reference's CLI).
    pub preset: Preset,
    /// Cedar policy files, or directories of `*.cedar` files (sorted by name). With policy
    /// files, Cedar's default deny applies; without, the governance layer allows and audits.
    pub policies: Vec<PathBuf>,
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
    /// Where capabilities come from (default: the built-ins).
    pub sources: Vec<Arc<dyn CapabilitySource>>,
    /// The agent when a request names none.
    pub default_agent: String,
    /// Pre-started single-use sandboxes kept for grant-less node and python runs (0: none);
    /// for long-running surfaces (see `capability_sandbox::SandboxPool`).
    pub sandbox_pool: usize,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            home: None,
            storage: Storage::Durable,
            preset: Preset::Permissive,
            policies: Vec::new(),
            shadow: false,
            trust: None,
            executor: ExecutorChoice::Auto,
            timeout: None,
            memory_mb: None,
            grants: HostGrants::default(),
            oci_images: OciImages::default(),
            sources: vec![Arc::new(Builtins)],
            default_agent: DEFAULT_AGENT.into(),
            sandbox_pool: 0,
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
            .field("shadow", &self.shadow)
            .field("executor", &self.executor)
            .field(
                "sources",
                &self.sources.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
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
                .map_err(|e| HostError::Policy(format!("cannot read {}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|e| e.extension().is_some_and(|x| x == "cedar"))
                .collect();
            entries.sort();
            if entries.is_empty() {
                return Err(HostError::Policy(format!(
                    "{} holds no .cedar file",
                    p.display()
                )));
            }
            out.extend(entries);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The host: see the crate docs.
pub struct Host {
    home: Home,
    runtime: CapabilityRuntime,
    receipts: Arc<dyn ReceiptStore>,
    audit: Arc<dyn AuditStore>,
    approvals: Arc<ApprovalManager>,
    database: Option<Arc<Database>>,
    governor: Arc<Governor>,
    entries: Vec<IndexEntry>,
    trust: Option<TrustPolicy>,
    timeout: Option<Duration>,
    tokens: std::sync::OnceLock<Tokens>,
    /// The module executor, to warm its sandbox pool.
    modules: Option<Arc<ModuleExecutor>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

fn store_err(e: impl std::fmt::Display) -> HostError {
    HostError::Store(e.to_string())
}

fn module_executor(config: &HostConfig) -> Result<Option<ModuleExecutor>, CapabilityError> {
    let choice = config.executor;
    if choice == ExecutorChoice::InProcess {
        return Ok(None);
    }
    let mut limits = capability_sandbox::Limits::<capability_sandbox::ProcessLimits>::default();
    let mut wasm_limits = capability_sandbox::Limits::<capability_sandbox::WasmLimits>::default();
    if let Some(t) = config.timeout {
        limits.timeout = t;
        wasm_limits.timeout = t;
    }
    if let Some(mb) = config.memory_mb {
        limits.memory_bytes = mb.saturating_mul(1 << 20);
        wasm_limits.memory_bytes = mb.saturating_mul(1 << 20);
    }
    let mut executor = ModuleExecutor::new(choice)
        .with_host_grants(config.grants.clone())
        .with_limits(limits);
    if config.sandbox_pool > 0 {
        executor = executor.with_pool(config.sandbox_pool);
    }
    // The WASM executor is available wherever wasmtime runs; without it .wasm modules are
    // refused (they never run elsewhere).
    if let Ok(wasm) = capability_sandbox::WasmExecutor::new() {
        executor = executor.with_wasm(
            wasm.with_host_grants(config.grants.clone())
                .with_limits(wasm_limits),
        );
    }
    let images = &config.oci_images;
    let has_images = images.node.is_some() || images.python.is_some() || images.native.is_some();
    if choice == ExecutorChoice::Oci || (choice == ExecutorChoice::Auto && has_images) {
        executor = executor.with_oci(images.clone());
    }
    Ok(Some(executor))
}

/// The stores of a host: receipts and plans, the audit log, approvals.
struct Stores {
    receipts: Arc<dyn ReceiptStore>,
    audit: Arc<dyn AuditStore>,
    approvals: Arc<dyn ApprovalStore>,
    sink: Arc<dyn AuditSink>,
    database: Option<Arc<Database>>,
}

impl Stores {
    fn open(home: &Home, storage: Storage) -> Result<Stores, HostError> {
        let durability = match storage {
            Storage::ReadOnly => {
                let failed = |message: String| HostError::Database {
                    path: home.root().to_path_buf(),
                    message,
                };
                let db = Arc::new(
                    Database::open_read_only(&home.database())
                        .map_err(|e| failed(e.to_string()))?,
                );
                let receipts = SqliteReceiptStore::read_only(Arc::clone(&db))
                    .map_err(|e| failed(e.to_string()))?;
                let store = Arc::new(
                    SqliteStore::read_only(Arc::clone(&db)).map_err(|e| failed(e.to_string()))?,
                );
                return Ok(Stores {
                    receipts: Arc::new(receipts),
                    audit: Arc::clone(&store) as Arc<dyn AuditStore>,
                    approvals: Arc::clone(&store) as Arc<dyn ApprovalStore>,
                    sink: store,
                    database: Some(db),
                });
            }
            Storage::Memory => {
                let store = Arc::new(MemoryStore::new());
                return Ok(Stores {
                    receipts: Arc::new(MemoryReceiptStore::new()),
                    audit: Arc::clone(&store) as Arc<dyn AuditStore>,
                    approvals: Arc::clone(&store) as Arc<dyn ApprovalStore>,
                    sink: store,
                    database: None,
                });
            }
            Storage::DurableSync => Durability::System,
            Storage::Durable => Durability::Process,
        };
        let failed = |message: String| HostError::Database {
            path: home.root().to_path_buf(),
            message,
        };
        let db = Arc::new(Database::open(&home.database()).map_err(|e| failed(e.to_string()))?);
        let receipts = SqliteReceiptStore::on(Arc::clone(&db), &home.journals(), durability)
            .map_err(|e| failed(e.to_string()))?;
        let store = Arc::new(
            SqliteStore::on(Arc::clone(&db), &home.journals())
                .map_err(|e| failed(e.to_string()))?,
        );
        Ok(Stores {
            receipts: Arc::new(receipts),
            audit: Arc::clone(&store) as Arc<dyn AuditStore>,
            approvals: Arc::clone(&store) as Arc<dyn ApprovalStore>,
            sink: store,
            database: Some(db),
        })
    }
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
        .map_err(|e| HostError::Key(e.to_string()))?;
        let stores = Stores::open(&home, config.storage)?;
        let approvals = Arc::new(ApprovalManager::new(stores.approvals, key));
        let engine = PolicyEngine::new();
        let files = policy_files(&config.policies)?;
        if !files.is_empty() {
            let cedar =
                CedarPolicies::from_paths(&files).map_err(|e| HostError::Policy(e.to_string()))?;
            engine.add_source(Arc::new(cedar));
        }
        engine.set_shadow_mode(config.shadow);
        let governor = Arc::new(
            Governor::new(config.default_agent.clone())
                .engine(Arc::new(engine))
                .audit(stores.sink)
                .approvals(Arc::clone(&approvals)),
        );
        // Every source's capabilities, before the runtime exists: the module executor (and
        // its WASM engine, ~10 ms to create) is built only when package code is registered.
        let mut loaded = Vec::new();
        let mut entries = Vec::new();
        // The OpenAPI documents kept in the home are sources of every host on it.
        let kept: Vec<Arc<dyn CapabilitySource>> = OpenApiSource::from_home(&home)
            .map_err(HostError::Source)?
            .into_iter()
            .map(|s| Arc::new(s) as Arc<dyn CapabilitySource>)
            .collect();
        for source in config.sources.iter().chain(&kept) {
            let capabilities = source.capabilities().map_err(HostError::Source)?;
            loaded.push((source.name(), capabilities));
            entries.extend(source.index_entries());
        }
        // Packages installed with `cap install` (their store is the one part of the home a
        // sandbox may mount, read-only); an id another source provides is left to it.
        capability_sandbox::expose_read_only(home.root().join(installed::PACKAGES));
        let installed = installed::Installed::from_home(&home);
        if !installed.is_empty() {
            let taken: std::collections::BTreeSet<String> = loaded
                .iter()
                .flat_map(|(_, caps)| caps.iter().map(|c| c.manifest().id.clone()))
                .collect();
            let capabilities: Vec<capability_runtime::capability::Capability> = installed
                .capabilities()
                .map_err(HostError::Source)?
                .into_iter()
                .filter(|c| !taken.contains(&c.manifest().id))
                .collect();
            entries.extend(
                installed
                    .index_entries()
                    .into_iter()
                    .filter(|e| !taken.contains(&e.manifest.id)),
            );
            loaded.push((installed.name(), capabilities));
        }
        let has_modules = loaded.iter().flat_map(|(_, caps)| caps).any(|c| {
            matches!(
                c.implementation(),
                capability_runtime::capability::Implementation::Module(_)
            )
        });
        let mut builder = CapabilityRuntime::builder()
            .policy(config.preset.policy())
            .store(Arc::clone(&stores.receipts))
            .governor(Arc::clone(&governor));
        let mut modules = None;
        if has_modules
            && let Some(executor) = module_executor(&config).map_err(HostError::Source)?
        {
            let executor = Arc::new(executor);
            builder = builder
                .executor(Arc::clone(&executor) as Arc<dyn capability_runtime::executor::Executor>);
            modules = Some(executor);
        }
        let runtime = builder.build();
        for (name, capabilities) in loaded {
            for capability in capabilities {
                runtime.register(capability).map_err(|e| {
                    HostError::Source(CapabilityError::new(
                        e.code,
                        format!("{name}: {}", e.message),
                    ))
                })?;
            }
        }
        Ok(Host {
            home,
            runtime,
            receipts: stores.receipts,
            audit: stores.audit,
            approvals,
            database: stores.database,
            governor,
            entries,
            trust: config.trust,
            timeout: config.timeout,
            tokens: std::sync::OnceLock::new(),
            modules,
        })
    }

    /// With a sandbox pool ([`HostConfig::sandbox_pool`]): starts a spare for each node and
    /// python module capability, up to the pool's capacity, so that even their first runs
    /// find one; how many were started.
    pub fn prewarm_pool(&self) -> usize {
        let Some(modules) = &self.modules else {
            return 0;
        };
        let capacity = modules.pool().map_or(0, |p| p.capacity());
        let mut started = 0;
        for capability in self.runtime.registry().list() {
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

    /// The governance layer (policies, approvals, audit) that every call goes through; a
    /// surface governs actions the runtime does not execute (an upstream MCP tool call)
    /// with [`Governor::intercept_with`], after registering them by name.
    pub fn governor(&self) -> &Arc<Governor> {
        &self.governor
    }

    /// The one database of the durable stores (`None` with [`Storage::Memory`]).
    pub fn database(&self) -> Option<&Arc<Database>> {
        self.database.as_ref()
    }

    fn options(&self, request: &Request) -> ExecuteOptions {
        let timeout = match (request.timeout, self.timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        ExecuteOptions {
            approved: request.approve_effects,
            metadata: request.metadata.clone(),
            timeout,
            caller: Some(self.caller(request)),
            ..Default::default()
        }
    }

    /// The request's caller, with the facts of an HTTP operation as labels that policies
    /// read (`context.labels.method`, `path`, `operationId`, `server`). They come from the
    /// registered operation, never from the caller: a caller's labels of those names are
    /// replaced.
    fn caller(&self, request: &Request) -> Caller {
        let mut caller = request.caller.clone();
        let Some(capability) = self.runtime.registry().get(&request.capability) else {
            return caller;
        };
        if !matches!(
            capability.implementation(),
            capability_runtime::capability::Implementation::Executor(_)
        ) {
            return caller;
        }
        let Some(meta) = capability.manifest().metadata.as_ref() else {
            return caller;
        };
        if meta.get("openapiOperationId").is_none() {
            return caller;
        }
        for (label, key) in [
            ("method", "method"),
            ("path", "path"),
            ("operationId", "openapiOperationId"),
            ("server", "server"),
        ] {
            let value = meta.get(key).and_then(Value::as_str).unwrap_or_default();
            caller.labels.insert(label.into(), value.into());
        }
        caller
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

    /// Runs a request through the whole governed lifecycle.
    pub fn invoke(&self, request: &Request) -> Outcome {
        if let Err(e) = self.check_trust(&request.capability) {
            return Outcome::Failed(e);
        }
        self.runtime.invoke_outcome(
            &request.capability,
            request.input.clone(),
            &self.options(request),
        )
    }

    /// Runs the exact plan the approval `token` was granted for. The request must name the
    /// same capability and input (a changed input is refused); the token is single use.
    pub fn resume(&self, request: &Request, token: &str) -> Outcome {
        let refused = |m: String| {
            Outcome::Failed(CapabilityError::new(
                ErrorCode::PermissionDenied,
                format!("approval refused: {m}"),
            ))
        };
        let claims = match self.approvals.decode(token) {
            Ok(c) => c,
            Err(e) => return refused(e.to_string()),
        };
        let Some(fingerprint) = claims.plan_fingerprint else {
            return refused("the token is not bound to a plan".into());
        };
        let plan = match self.runtime.pending_plan(&fingerprint) {
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
        if let Err(e) = self.check_trust(&request.capability) {
            return Outcome::Failed(e);
        }
        let mut options = self.options(request);
        options.approval_token = Some(token.to_string());
        self.runtime.execute_outcome(&plan, &options)
    }

    /// Plans a call (the plan hook of a module runs behind the executor with no effect).
    pub fn plan(&self, id: &str, input: Value) -> Result<Plan, CapabilityError> {
        self.runtime.plan(id, input)
    }

    /// The inert view of a registered capability.
    pub fn inspect(&self, id: &str) -> Result<Value, CapabilityError> {
        self.runtime.inspect(id)
    }

    /// The capability an argument names: an id-shaped argument must be registered exactly
    /// (never a similar one); anything else is a query resolved against the sources'
    /// index entries as the reference does.
    pub fn resolve(&self, id_or_query: &str) -> Result<String, CapabilityError> {
        let not_found = |m: String| CapabilityError::new(ErrorCode::NotFound, m);
        if capability_core::validate::is_capability_id(id_or_query) {
            return match self.runtime.registry().get(id_or_query) {
                Some(_) => Ok(id_or_query.to_string()),
                None => Err(not_found(format!("Capability not found: {id_or_query}"))),
            };
        }
        resolve(&self.entries, id_or_query)
            .map(|r| r.entry.manifest.id.clone())
            .map_err(|e| not_found(e.to_string()))
    }

    /// The sources' index entries (built-ins, installed packages, ...).
    pub fn index_entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// Lexical discovery over the sources' index entries (the reference's scores).
    pub fn find(&self, query: &DiscoveryQuery) -> Vec<Hit<&IndexEntry>> {
        discover_index(&self.entries, query)
    }

    /// The index entry an id or query resolves to, with its score and reasons.
    pub fn info(&self, id_or_query: &str) -> Result<Resolution<'_>, CapabilityError> {
        resolve(&self.entries, id_or_query)
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

    /// The receipt store.
    pub fn receipts(&self) -> &Arc<dyn ReceiptStore> {
        &self.receipts
    }

    /// The audit log.
    pub fn audit(&self) -> &Arc<dyn AuditStore> {
        &self.audit
    }

    /// Verifies the audit chain (and every tenant's links on the way).
    pub fn verify_audit(&self) -> Result<VerifyReport, HostError> {
        capability_policy::audit::verify_store(self.audit.as_ref()).map_err(store_err)
    }

    /// Verifies one tenant's audit chain from that tenant's records alone.
    pub fn verify_audit_tenant(&self, tenant: &str) -> Result<VerifyReport, HostError> {
        capability_policy::audit::verify_tenant(self.audit.as_ref(), tenant).map_err(store_err)
    }

    /// A signed checkpoint of the audit chain's head (see [`capability_policy::checkpoint`]),
    /// to be kept elsewhere and given to [`Host::verify_audit_against`] later.
    pub fn audit_checkpoint(&self) -> Result<Value, String> {
        let now = capability_core::js::iso_from_millis(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        );
        capability_policy::checkpoint::take(self.audit.as_ref(), self.approvals.key(), &now)
            .map_err(|e| e.to_string())
    }

    /// Verifies the audit chain and that it still extends a checkpoint signed by this home's
    /// key (truncation, a rebuilt chain and an older database all fail).
    pub fn verify_audit_against(
        &self,
        checkpoint: &Value,
    ) -> Result<capability_policy::checkpoint::CheckpointReport, String> {
        let checkpoint =
            capability_policy::checkpoint::Checkpoint::verify(checkpoint, self.approvals.key())
                .map_err(|e| e.to_string())?;
        capability_policy::checkpoint::verify_against(self.audit.as_ref(), checkpoint)
            .map_err(|e| e.to_string())
    }

    /// Approvals: list, show, approve (the token), deny.
    pub fn approvals(&self) -> &Arc<ApprovalManager> {
        &self.approvals
    }

    /// The bearer tokens of the HTTP surfaces (a durable home only).
    pub fn tokens(&self) -> Result<&Tokens, HostError> {
        if let Some(tokens) = self.tokens.get() {
            return Ok(tokens);
        }
        let Some(db) = &self.database else {
            return Err(HostError::Store(
                "tokens need a durable home (not in-memory storage)".into(),
            ));
        };
        let tokens = Tokens::open(Arc::clone(db))?;
        Ok(self.tokens.get_or_init(|| tokens))
    }
}

/// Which isolation boundaries work on this host, and the kernel features found (every
/// probe is bounded in time).
pub fn doctor() -> capability_sandbox::DoctorReport {
    capability_sandbox::doctor(capability_sandbox::ProcessSandbox::global())
}

/// The `{"approval": {...}}` document of a pending approval, as the surfaces print it.
pub fn approval_document(pending: &PendingApproval) -> Value {
    let record = pending
        .approval
        .as_ref()
        .map(|a| a.to_json())
        .unwrap_or(Value::Null);
    let mut approval = json!({
        "id": record.get("approvalId"),
        "reason": pending.reason,
        "expiresAt": record.get("expiresAtIso"),
        "planFingerprint": pending.plan.fingerprint,
    });
    if let (Value::Object(a), Value::Object(r)) = (&mut approval, &record) {
        for key in [
            "capability",
            "agentId",
            "tenant",
            "requester",
            "input",
            "policyIds",
            "status",
        ] {
            if let Some(v) = r.get(key) {
                a.insert(key.into(), v.clone());
            }
        }
    }
    json!({ "approval": approval })
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
