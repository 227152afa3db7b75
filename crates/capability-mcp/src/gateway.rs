//! The governing MCP gateway (`cap mcp-gateway`): every tool of every upstream MCP server
//! is a governed capability behind the host's policies, approvals, pins and audit.
//!
//! * Upstream tool `<tool>` of server `<server>` is the capability `mcp.<server>.<tool>`
//!   (Cedar `Capability::"mcp.<server>.<tool>"`, kind `mcp_tool`, action `mcp_tool_call`,
//!   `context.input` = the call's arguments), with the config's risk and the reference's
//!   import effects: the server's `effects`, `network.connect` for `openWorldHint`,
//!   `custom:mcp.destructive` for `destructiveHint`, `custom:mcp.opaque-effects` unless
//!   `effects_complete`.
//! * Downstream it is named `<server>__<tool>` (or `<tool>` with `prefix = false`), every
//!   character outside `[A-Za-z0-9_-]` replaced by `_`; a name longer than 64 characters, or one that two tools would share,
//!   becomes its first 55 characters, `_` and 8 hex digits of the SHA-256 of
//!   `<server>/<tool>` (always `^[a-zA-Z0-9_-]{1,64}$`).
//! * Downstream definitions carry no `outputSchema` (policies may redact or transform a
//!   result); the upstream's is in `_meta["mcp/outputSchema"]`.
//! * `tools/list` shows a caller the tools the config's `include`/`exclude` keep, that are
//!   not quarantined, and whose before-stage decision for that caller (with empty
//!   arguments) is not `deny`.
//! * A call is one [`Governor::intercept_with`](capability_host::Governor::intercept_with):
//!   all nine decisions apply to the arguments and the result (redaction pointers point
//!   into the result's `structuredContent`; the text content is re-rendered from it). An
//!   approval is bound to the caller, server, tool, the canonical hash of the arguments and
//!   the pinned definition hash (the plan fingerprint), single use.
//! * Audit: one event per call (a single-event request of the governor), whatever its
//!   fate: `executed`, `execution_failed` (the upstream crashed, timed out, sent garbage),
//!   `denied_after_execution`, `denied_before_execution` (a policy, a quarantined tool with
//!   code `quarantined`, a call over the principal's limit with code `rate_limited`) or
//!   `approval_required`. It names the principal, tenant, agent and capability, has the
//!   decision, `policy_ids` of both stages and `metadata.decisions.before` / `.after`,
//!   `metadata.mcpServer`, `mcpTool`, `definitionHash` and `argumentsSha256`; once the
//!   upstream was called, `metadata.latencyUs` (the upstream round trip in whole
//!   microseconds) and `metadata.toolOutcome` (`ok`, `tool_error` for a result with
//!   `isError`, `upstream_error` when the upstream failed). A valid W3C `traceparent` in
//!   the request's `_meta` gives the trace id and is kept as `metadata.traceparent`.
//!   Arguments are recorded (`input`) only with `record_arguments`, after the call's
//!   `redact` pointers masked what they point at. An unknown tool name is answered without
//!   an event (there is no capability to record).
//! * Pins ([`crate::pins`]): a changed definition is hidden and refused until accepted;
//!   upstream `list_changed` triggers a re-check.
//! * An upstream that crashes, hangs, answers too much or sends garbage gives the caller a
//!   tool error; it is restarted with backoff (1 s doubling to 30 s with each consecutive
//!   failure; a session that stayed up 60 s counts as healthy, and the next failure waits
//!   1 s again).
//! * A principal (its id, else the agent id) has at most `max_calls_per_principal` calls
//!   in flight (`--max-calls-per-principal`, as for `cap mcp-serve`); more are refused with
//!   a tool error.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use capability_core::json::canonical_hash;
use capability_host::{Actor, Host};
use capability_policy::audit::parse_traceparent;
use capability_policy::{
    ActionType, CapabilityKind, DecisionType, GovernedCapability, InterceptError, InterceptRequest,
    Intercepted, Interrupted, RiskLevel, Stage,
};
use capability_sandbox::{ChildSpec, Grants, ProcessSandbox};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::handler::Peers;
use crate::pins::{PinState, Pins, definition_hash, hidden_characters};
use crate::upstream::{HttpSession, McpSession, StdioSession, UpstreamError, map_tool_result};
use crate::{CallLimits, ServeOptions, error_result, take_approval_token};

/// The gateway config file (`gateway.toml`; see the README for the contract).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Cedar files or directories (relative to the config file).
    #[serde(default)]
    pub policy: Vec<PathBuf>,
    /// The pins file (default: `mcp-pins.json` in the home).
    pub pins: Option<PathBuf>,
    /// Record what policies would enforce without enforcing it.
    #[serde(default)]
    pub shadow: bool,
    /// How long one upstream call may take.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Record each call's arguments in its audit event (after the call's redactions); by
    /// default only their digest (`metadata.argumentsSha256`) is recorded.
    #[serde(default)]
    pub record_arguments: bool,
    #[serde(default, rename = "server")]
    pub servers: Vec<ServerConfig>,
    /// Policy files that apply to one tenant's callers only.
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<TenantConfig>,
}

/// Per-tenant policies: evaluated for callers of that tenant only, in addition to the
/// gateway's (with Cedar's default deny among them: they need their own `permit`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    pub policy: Vec<PathBuf>,
}

fn default_timeout_ms() -> u64 {
    30_000
}

/// One upstream server.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// `[a-z0-9_-]+`.
    pub name: String,
    /// A stdio upstream, started as a child.
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment of the child (besides `PATH` and `HOME`, nothing is passed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A streamable-HTTP upstream (`http://` or `https://`).
    pub url: Option<String>,
    /// Headers sent to an HTTP upstream (its bearer token, say).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Run the child inside the process sandbox: its code read-only, a private `/tmp`, and
    /// only what `effects` (with `read` and `write`) grants; see the README.
    #[serde(default)]
    pub sandbox: bool,
    /// Effects its tools have (also granted to a sandboxed child: `network.connect`,
    /// `process.spawn`, `filesystem.read` with `read`, `filesystem.write` with `write`).
    #[serde(default)]
    pub effects: Vec<String>,
    /// Host paths a sandboxed child may read (relative to the config file; needs
    /// `filesystem.read` in `effects`).
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Host paths a sandboxed child may write (relative to the config file; needs
    /// `filesystem.write` in `effects`).
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// The declared effects are complete (no `custom:mcp.opaque-effects`).
    #[serde(default)]
    pub effects_complete: bool,
    /// Risk of its tools (`none` … `critical`; default `medium`).
    pub risk: Option<String>,
    /// Only these tools (names or `*` globs), before authorization.
    #[serde(default)]
    pub include: Vec<String>,
    /// Never these tools.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Overrides the gateway's `timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// Overrides the gateway's `record_arguments` for this server's tools.
    pub record_arguments: Option<bool>,
    /// Name downstream tools `<server>__<tool>` (the default); `false` keeps the tool's
    /// own name where it is valid and not taken.
    #[serde(default = "yes")]
    pub prefix: bool,
}

fn yes() -> bool {
    true
}

impl GatewayConfig {
    /// Reads and checks a config file; relative paths are taken from its directory.
    pub fn load(path: &Path) -> Result<GatewayConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut config: GatewayConfig =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let rebase = |p: &PathBuf| {
            if p.is_relative() {
                base.join(p)
            } else {
                p.clone()
            }
        };
        config.policy = config.policy.iter().map(rebase).collect();
        for t in &mut config.tenants {
            t.policy = t.policy.iter().map(rebase).collect();
        }
        config.pins = config.pins.as_ref().map(rebase);
        for s in &mut config.servers {
            s.read = s.read.iter().map(rebase).collect();
            s.write = s.write.iter().map(rebase).collect();
        }
        let mut seen = std::collections::BTreeSet::new();
        for s in &config.servers {
            let valid = !s.name.is_empty()
                && s.name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                });
            if !valid {
                return Err(format!("server name {:?} must match [a-z0-9_-]+", s.name));
            }
            if !seen.insert(s.name.clone()) {
                return Err(format!("server {} is configured twice", s.name));
            }
            match (&s.command, &s.url) {
                (Some(_), None) => {}
                (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {}
                (None, Some(url)) => {
                    return Err(format!(
                        "server {}: {url}: only http:// and https:// upstreams are supported",
                        s.name
                    ));
                }
                _ => {
                    return Err(format!(
                        "server {}: give exactly one of command and url",
                        s.name
                    ));
                }
            }
            check_sandbox(s)?;
            if let Some(r) = &s.risk {
                RiskLevel::parse(r).map_err(|e| format!("server {}: {e}", s.name))?;
            }
        }
        Ok(config)
    }
}

/// The `sandbox`, `read` and `write` keys of a server: consistent, and a host that can
/// sandbox when one is asked for.
fn check_sandbox(s: &ServerConfig) -> Result<(), String> {
    let name = &s.name;
    if !s.sandbox {
        if !s.read.is_empty() || !s.write.is_empty() {
            return Err(format!(
                "server {name}: read and write are grants of a sandboxed child: set sandbox = true"
            ));
        }
        return Ok(());
    }
    if s.command.is_none() {
        return Err(format!(
            "server {name}: sandbox = true runs a stdio server (command), not a url"
        ));
    }
    for (paths, effect, key) in [
        (&s.read, "filesystem.read", "read"),
        (&s.write, "filesystem.write", "write"),
    ] {
        if !paths.is_empty() && !s.effects.iter().any(|e| e == effect) {
            return Err(format!(
                "server {name}: {key} paths are granted only with {effect:?} in effects"
            ));
        }
    }
    ProcessSandbox::check_children().map_err(|e| format!("server {name}: sandbox = true, but {e}"))
}

/// What a sandboxed server runs: `command args` (and its code), `PATH`, `HOME=/tmp` and
/// `env`, with `effects` (and the `read` and `write` paths) as grants.
fn sandbox_spec(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    effects: &[String],
    read: &[PathBuf],
    write: &[PathBuf],
) -> Result<ChildSpec, UpstreamError> {
    let mut vars: Vec<(String, String)> = std::env::var("PATH")
        .ok()
        .map(|p| ("PATH".to_string(), p))
        .into_iter()
        .collect();
    vars.push(("HOME".into(), "/tmp".into()));
    vars.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut spec = ChildSpec::command(command, args, vars)
        .map_err(|e| UpstreamError::Spawn(format!("{command}: {e}")))?;
    spec.grants = Grants {
        effects: effects.iter().cloned().collect(),
        read_paths: read.to_vec(),
        write_paths: write.to_vec(),
        ..Grants::default()
    };
    Ok(spec)
}

/// The downstream name of `tool` of `server` (see the module docs); `taken` are the names
/// already given.
pub fn downstream_name(
    server: &str,
    tool: &str,
    prefix: bool,
    taken: &dyn Fn(&str) -> bool,
) -> String {
    let full = if prefix {
        format!("{server}__{tool}")
    } else {
        tool.to_string()
    };
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= 64 && !taken(&clean) {
        return clean;
    }
    let digest = hex::encode(Sha256::digest(format!("{server}/{tool}").as_bytes()));
    format!("{}_{}", &clean[..clean.len().min(55)], &digest[..8])
}

fn glob(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| crate::glob_match(p, name))
}

/// One upstream tool as the gateway knows it (shared: a call holds its tool).
#[derive(Clone, Debug)]
struct GatewayTool {
    server: String,
    tool: String,
    downstream: String,
    capability: String,
    definition: Value,
    hash: String,
    quarantined: bool,
    hidden: Vec<String>,
    /// Its input declares an `approvalToken` property (which is then the tool's argument,
    /// not the call's approval).
    declares_approval_token: bool,
}

/// How long an upstream must stay up, after its last start, for its backoff to begin again
/// at 1 s.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

struct Upstream {
    config: ServerConfig,
    session: Option<Arc<dyn McpSession>>,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
    /// When the current session was started.
    started_at: Option<Instant>,
    /// A start is under way (outside the upstreams lock): nobody starts another.
    starting: bool,
}

impl Upstream {
    fn new(config: ServerConfig) -> Self {
        Upstream {
            config,
            session: None,
            failures: 0,
            retry_at: None,
            last_error: None,
            started_at: None,
            starting: false,
        }
    }

    /// Records a failure; the next start waits `retry_after`, or the backoff (1 s doubling
    /// with each consecutive failure, at most 30 s). A session that stayed up
    /// [`HEALTHY_AFTER`] was healthy: the count of failures starts again.
    fn fail(&mut self, error: String, retry_after: Option<Duration>) {
        self.fail_at(error, retry_after, Instant::now());
    }

    fn fail_at(&mut self, error: String, retry_after: Option<Duration>, now: Instant) {
        if self
            .started_at
            .take()
            .is_some_and(|t| now.saturating_duration_since(t) >= HEALTHY_AFTER)
        {
            self.failures = 0;
        }
        self.last_error = Some(error);
        self.failures += 1;
        let backoff = Duration::from_secs(1 << self.failures.min(6).saturating_sub(1))
            .min(Duration::from_secs(30));
        self.retry_at = Some(now + retry_after.unwrap_or(backoff));
    }
}

/// The gateway: upstream sessions, the governed tools and the downstream surface.
pub struct Gateway {
    host: Arc<Host>,
    config: GatewayConfig,
    serve: ServeOptions,
    upstreams: Mutex<Vec<Upstream>>,
    /// Signalled when a start (outside the lock) ends.
    started: std::sync::Condvar,
    tools: Mutex<Vec<Arc<GatewayTool>>>,
    pins: Mutex<Pins>,
    pub(crate) peers: Peers,
    calls: CallLimits,
    connect: Box<Connect>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

fn effects_of(server: &ServerConfig, tool: &Value) -> Vec<String> {
    let hint = |k: &str| tool.pointer(&format!("/annotations/{k}")) == Some(&Value::Bool(true));
    let mut effects: Vec<String> = Vec::new();
    let mut add = |e: &str| {
        if !effects.iter().any(|x| x == e) {
            effects.push(e.to_string());
        }
    };
    for e in &server.effects {
        add(e);
    }
    if hint("openWorldHint") {
        add("network.connect");
    }
    if hint("destructiveHint") {
        add("custom:mcp.destructive");
    }
    if !server.effects_complete {
        add("custom:mcp.opaque-effects");
    }
    effects
}

/// The least time an upstream's `initialize` handshake is given, whatever the call timeout:
/// an interpreter that imports an SDK can take seconds to start on a busy machine, and a
/// tight call timeout must not turn that into a failed start and a backoff.
const HANDSHAKE_TIMEOUT_FLOOR: Duration = Duration::from_secs(10);

fn timeout_of(config: &GatewayConfig, server: &ServerConfig) -> Duration {
    Duration::from_millis(server.timeout_ms.unwrap_or(config.timeout_ms).max(1))
}

fn child_env(server: &ServerConfig) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    env.extend(server.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// How the gateway starts the session of an upstream (given the handshake's timeout):
/// [`Gateway::open`] starts a child over stdio (or in the sandbox) or connects over HTTP;
/// [`Gateway::open_with`] takes another (an embedder's own transport, a benchmark's
/// in-process upstream).
pub type Connect =
    dyn Fn(&ServerConfig, Duration) -> Result<Arc<dyn McpSession>, UpstreamError> + Send + Sync;

/// Starts the session of an upstream (a child over stdio, or an HTTP server).
pub fn start(
    server: &ServerConfig,
    timeout: Duration,
) -> Result<Arc<dyn McpSession>, UpstreamError> {
    match (&server.command, &server.url) {
        (Some(command), _) if server.sandbox => Ok(Arc::new(StdioSession::start_sandboxed(
            &sandbox_spec(
                command,
                &server.args,
                &server.env,
                &server.effects,
                &server.read,
                &server.write,
            )?,
            timeout,
        )?)),
        (Some(command), _) => Ok(Arc::new(StdioSession::start(
            command,
            &server.args,
            &child_env(server),
            timeout,
        )?)),
        (None, Some(url)) => Ok(Arc::new(HttpSession::start(
            url,
            server
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            timeout,
        )?)),
        (None, None) => Err(UpstreamError::Spawn("no command and no url".into())),
    }
}

/// What a governed upstream call gave back besides its output.
struct Called {
    raw: Value,
    /// `raw` mapped as the reference maps a tool result (what the governor was given).
    mapped: Value,
    latency_ms: u128,
}

impl Gateway {
    /// Starts every upstream, lists and pins its tools and registers them with the host's
    /// governor. An upstream that cannot start is reported and retried later.
    pub fn open(
        host: Arc<Host>,
        config: GatewayConfig,
        serve: ServeOptions,
    ) -> Result<Gateway, String> {
        Gateway::open_with(host, config, serve, Box::new(start))
    }

    /// [`Gateway::open`] with upstream sessions started by `connect`.
    pub fn open_with(
        host: Arc<Host>,
        config: GatewayConfig,
        serve: ServeOptions,
        connect: Box<Connect>,
    ) -> Result<Gateway, String> {
        let pins_path = config
            .pins
            .clone()
            .unwrap_or_else(|| host.home().root().join("mcp-pins.json"));
        let pins = Pins::open(&pins_path)?;
        for tenant in &config.tenants {
            let files = capability_host::policy_files(&tenant.policy).map_err(|e| e.to_string())?;
            let cedar = capability_policy::CedarPolicies::from_paths(&files)
                .map_err(|e| format!("tenant {}: {e}", tenant.name))?;
            host.governor()
                .policies()
                .add_source(Arc::new(capability_policy::ForTenant::new(
                    tenant.name.clone(),
                    Arc::new(cedar),
                )));
        }
        let upstreams = config.servers.iter().cloned().map(Upstream::new).collect();
        let gateway = Gateway {
            host,
            config,
            upstreams: Mutex::new(upstreams),
            started: std::sync::Condvar::new(),
            tools: Mutex::new(Vec::new()),
            pins: Mutex::new(pins),
            peers: Peers::default(),
            calls: CallLimits::new(serve.http.max_calls_per_principal),
            serve,
            connect,
        };
        gateway.refresh(true);
        Ok(gateway)
    }

    pub fn host(&self) -> Arc<Host> {
        Arc::clone(&self.host)
    }

    pub fn serve_options(&self) -> &ServeOptions {
        &self.serve
    }

    /// The downstream tool name of the capability `mcp.<server>.<tool>`.
    pub fn downstream_of(&self, capability: &str) -> Option<String> {
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|t| t.capability == capability)
            .map(|t| t.downstream.clone())
    }

    /// Upstreams that are down and why.
    pub fn problems(&self) -> Vec<(String, String)> {
        self.upstreams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(|u| u.last_error.clone().map(|e| (u.config.name.clone(), e)))
            .collect()
    }

    /// Makes sure every upstream runs (restarting dead ones whose backoff passed) and
    /// re-lists those that are new or said their tools changed. Returns whether the tool
    /// set changed. Upstreams are started outside the upstreams lock, so a slow start
    /// delays no call to another upstream.
    fn refresh(&self, force: bool) -> bool {
        let mut relist: Vec<(ServerConfig, Arc<dyn McpSession>)> = Vec::new();
        let mut to_start: Vec<ServerConfig> = Vec::new();
        {
            let mut upstreams = self
                .upstreams
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for u in upstreams.iter_mut() {
                if let Some(s) = &u.session
                    && let Some(e) = s.dead()
                {
                    u.session = None;
                    u.fail(e.to_string(), None);
                }
                if u.session.is_none() {
                    if !u.starting && u.retry_at.is_none_or(|t| Instant::now() >= t) {
                        u.starting = true;
                        to_start.push(u.config.clone());
                    }
                    continue;
                }
                if let Some(s) = &u.session
                    && (force || s.take_list_changed())
                {
                    relist.push((u.config.clone(), Arc::clone(s)));
                }
            }
        }
        for server in to_start {
            let handshake = timeout_of(&self.config, &server).max(HANDSHAKE_TIMEOUT_FLOOR);
            let started = (self.connect)(&server, handshake);
            let mut upstreams = self
                .upstreams
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(u) = upstreams.iter_mut().find(|u| u.config.name == server.name) else {
                continue;
            };
            u.starting = false;
            match started {
                Ok(s) => {
                    u.session = Some(Arc::clone(&s));
                    u.started_at = Some(Instant::now());
                    u.last_error = None;
                    relist.push((server, s));
                }
                Err(e) => u.fail(e.to_string(), None),
            }
            drop(upstreams);
            self.started.notify_all();
        }
        let mut changed = false;
        for (server, session) in relist {
            let listed = match session.list_tools(timeout_of(&self.config, &server)) {
                Ok(l) => l,
                Err(e) => {
                    self.mark_failed(&server.name, &e);
                    continue;
                }
            };
            changed |= self.replace_tools(&server, listed);
        }
        changed
    }

    fn mark_failed(&self, server: &str, e: &UpstreamError) {
        let mut upstreams = self
            .upstreams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(u) = upstreams.iter_mut().find(|u| u.config.name == server) {
            if let Some(s) = u.session.take() {
                crate::may_block(|| s.kill());
            }
            u.fail(e.to_string(), Some(Duration::from_secs(1)));
        }
    }

    /// Replaces a server's tools with what it listed (pinning, registering); whether the
    /// set changed.
    fn replace_tools(&self, server: &ServerConfig, listed: Vec<Value>) -> bool {
        let mut pins = self.pins.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = pins.reload();
        let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
        let before: Vec<(String, String, bool)> = tools
            .iter()
            .filter(|t| t.server == server.name)
            .map(|t| (t.tool.clone(), t.hash.clone(), t.quarantined))
            .collect();
        tools.retain(|t| t.server != server.name);
        let mut added = Vec::new();
        for def in listed {
            let Some(name) = def.get("name").and_then(Value::as_str).map(str::to_string) else {
                continue;
            };
            let state = pins.check(&server.name, &def).unwrap_or(PinState::Pinned);
            let capability = format!("mcp.{}.{}", server.name, name);
            let taken = |n: &str| {
                tools
                    .iter()
                    .chain(added.iter())
                    .any(|t: &Arc<GatewayTool>| t.downstream == n)
            };
            let downstream = downstream_name(&server.name, &name, server.prefix, &taken);
            let hidden = hidden_characters(
                &[def.get("description"), def.get("title")]
                    .iter()
                    .filter_map(|v| v.and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            let mut governance = capability_policy::Governance::new(CapabilityKind::McpTool);
            governance.risk = server
                .risk
                .as_deref()
                .and_then(|r| RiskLevel::parse(r).ok())
                .unwrap_or(RiskLevel::Medium);
            governance.description = def
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_string);
            governance.input_schema = def.get("inputSchema").cloned();
            // `resource.server` in Cedar: the upstream.
            governance
                .metadata
                .insert("server".into(), json!(server.name));
            let mut registered =
                GovernedCapability::with_governance(capability.clone(), governance);
            registered.declared_effects = effects_of(server, &def);
            self.host.governor().register_capability(registered);
            let declares_approval_token = def
                .pointer("/inputSchema/properties/approvalToken")
                .is_some();
            added.push(Arc::new(GatewayTool {
                server: server.name.clone(),
                tool: name,
                downstream,
                capability,
                hash: definition_hash(&def),
                quarantined: matches!(state, PinState::Changed { .. }),
                hidden,
                definition: def,
                declares_approval_token,
            }));
        }
        let after: Vec<(String, String, bool)> = added
            .iter()
            .map(|t| (t.tool.clone(), t.hash.clone(), t.quarantined))
            .collect();
        tools.extend(added);
        before != after
    }

    /// Re-checks pins (a human may have accepted some) for every known tool.
    fn recheck_pins(&self) {
        let mut pins = self.pins.lock().unwrap_or_else(PoisonError::into_inner);
        if pins.reload().is_err() {
            return;
        }
        let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
        for t in tools.iter_mut() {
            if t.quarantined && matches!(pins.check(&t.server, &t.definition), Ok(PinState::Pinned))
            {
                Arc::make_mut(t).quarantined = false;
            }
        }
    }

    /// The configuration of the upstream named `name`.
    fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.config.servers.iter().find(|s| s.name == name)
    }

    fn visible_by_config(&self, t: &GatewayTool) -> bool {
        self.server(&t.server).is_some_and(|s| {
            (s.include.is_empty() || glob(&s.include, &t.tool)) && !glob(&s.exclude, &t.tool)
        })
    }

    fn request(&self, t: &GatewayTool, arguments: Value, actor: &Actor) -> InterceptRequest {
        let mut req =
            InterceptRequest::new(t.capability.clone(), ActionType::McpToolCall, arguments)
                .actor(actor.clone())
                .label("surface", "mcp-gateway")
                .label("mcp.server", t.server.clone())
                .label("mcp.tool", t.tool.clone());
        req.metadata.insert("mcpServer".into(), json!(t.server));
        req.metadata.insert("mcpTool".into(), json!(t.tool));
        req.metadata.insert("definitionHash".into(), json!(t.hash));
        if !t.hidden.is_empty() {
            req.metadata
                .insert("hiddenCharacters".into(), json!(t.hidden));
        }
        req
    }

    /// The tools `actor` may see.
    pub fn list(&self, actor: &Actor) -> Vec<Value> {
        if self.refresh(false) {
            // Another caller's list will see the same change; tell connected clients.
        }
        self.recheck_pins();
        let tools = self
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let governor = self.host.governor();
        tools
            .iter()
            .filter(|t| !t.quarantined && self.visible_by_config(t))
            .filter(|t| {
                let req = self.request(t, json!({}), actor);
                match governor.evaluate(&req, Stage::BeforeCapability) {
                    Ok(verdict) => self.config.shadow || verdict.kind != DecisionType::Deny,
                    Err(_) => false,
                }
            })
            .map(|t| {
                let mut def = t.definition.clone();
                if let Value::Object(m) = &mut def {
                    m.insert("name".into(), json!(t.downstream));
                    // Policies may redact or transform results, so the gateway does not
                    // promise the upstream's output schema; it is kept in `_meta`.
                    let output_schema = m.remove("outputSchema");
                    let mut meta = m
                        .get("_meta")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    meta.insert("capability/id".into(), json!(t.capability));
                    meta.insert("mcp/server".into(), json!(t.server));
                    meta.insert("mcp/tool".into(), json!(t.tool));
                    meta.insert("mcp/definitionHash".into(), json!(t.hash));
                    if let Some(o) = output_schema {
                        meta.insert("mcp/outputSchema".into(), o);
                    }
                    m.insert("_meta".into(), Value::Object(meta));
                }
                def
            })
            .collect()
    }

    /// The live session of `server`; one that is not live is waited for (restarted if its
    /// backoff has passed, or being started elsewhere) inside [`crate::may_block`].
    fn session(&self, server: &str) -> Result<Arc<dyn McpSession>, String> {
        let live = self
            .upstreams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|u| u.config.name == server && !u.starting)
            .and_then(|u| u.session.clone())
            .filter(|s| s.dead().is_none());
        match live {
            Some(session) => Ok(session),
            None => crate::may_block(|| self.revive(server)),
        }
    }

    fn revive(&self, server: &str) -> Result<Arc<dyn McpSession>, String> {
        let alive = {
            let upstreams = self
                .upstreams
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            upstreams
                .iter()
                .find(|u| u.config.name == server)
                .and_then(|u| u.session.as_ref())
                .is_some_and(|s| s.dead().is_none())
        };
        if !alive {
            // Restart a dead upstream now if its backoff has passed.
            self.refresh(false);
        }
        let mut upstreams = self
            .upstreams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A start of this upstream under way elsewhere: wait for it (only this upstream's
        // callers wait; the lock is free meanwhile).
        let wait = upstreams
            .iter()
            .find(|u| u.config.name == server)
            .map_or(HANDSHAKE_TIMEOUT_FLOOR, |u| {
                timeout_of(&self.config, &u.config).max(HANDSHAKE_TIMEOUT_FLOOR)
            });
        let deadline = Instant::now() + wait;
        while upstreams
            .iter()
            .any(|u| u.config.name == server && u.starting)
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            upstreams = self
                .started
                .wait_timeout(upstreams, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let u = upstreams
            .iter()
            .find(|u| u.config.name == server)
            .ok_or_else(|| format!("no upstream {server}"))?;
        u.session.clone().ok_or_else(|| {
            format!(
                "upstream {server} is unavailable ({}); it is restarted with backoff",
                u.last_error.clone().unwrap_or_else(|| "not started".into())
            )
        })
    }

    /// Calls a downstream tool as `actor`; always a tool result. Blocking. A principal
    /// with `max_calls_per_principal` calls in flight is refused with a tool error.
    pub fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
        match self.calls.acquire(actor) {
            Ok(_slot) => self.call_inner(name, arguments, meta, actor),
            Err(refused) => {
                // The refused call of a known tool is audited as well.
                if let Some(t) = self.find(name) {
                    let req = self.call_request(&t, arguments, meta, actor);
                    let _ = self.host.governor().refuse(
                        &req,
                        "too many calls in flight for this principal",
                        "rate_limited",
                    );
                }
                refused
            }
        }
    }

    /// The known tool named `name` downstream.
    fn find(&self, name: &str) -> Option<Arc<GatewayTool>> {
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|t| t.downstream == name)
            .map(Arc::clone)
    }

    /// The governed request of a call of `t`: the approval token taken out of the
    /// arguments or `_meta`, the digest of the rest, the plan fingerprint an approval binds
    /// to, the caller's trace context; audited with one event.
    fn call_request(
        &self,
        t: &GatewayTool,
        arguments: Value,
        meta: Option<&Value>,
        actor: &Actor,
    ) -> InterceptRequest {
        let mut arguments = match arguments {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let token = take_approval_token(&mut arguments, meta, t.declares_approval_token);
        let arguments = Value::Object(arguments);
        let digest = canonical_hash(&arguments);
        let mut req = self.request(t, arguments, actor);
        req.plan_fingerprint = Some(canonical_hash(&json!({
            "server": t.server, "tool": t.tool,
            "arguments": digest, "definition": t.hash,
        })));
        req.metadata.insert("argumentsSha256".into(), json!(digest));
        // A valid W3C `traceparent` makes its trace id the call's; the header (with the
        // caller's span) is kept for the OTLP export.
        if let Some((tp, trace)) = meta
            .and_then(|m| m.get("traceparent"))
            .and_then(Value::as_str)
            .and_then(|tp| parse_traceparent(tp).map(|(trace, _)| (tp, trace)))
        {
            req.trace_id = Some(trace.to_string());
            req.metadata.insert("traceparent".into(), json!(tp));
        }
        req.approval_token = token;
        req.record_input = self
            .server(&t.server)
            .and_then(|s| s.record_arguments)
            .unwrap_or(self.config.record_arguments);
        req.single_event = true;
        req
    }

    pub(crate) fn idle(&self) -> bool {
        self.calls.idle()
    }

    fn call_inner(
        &self,
        name: &str,
        arguments: Value,
        meta: Option<&Value>,
        actor: &Actor,
    ) -> Value {
        // Upstream changes are picked up by `watch` (and by `list`); a call only re-reads
        // the pins when its tool is quarantined, so that an accepted pin counts at once.
        let mut found = self.find(name);
        if found.as_ref().is_none_or(|t| t.quarantined) {
            found = crate::may_block(|| {
                self.refresh(false);
                self.recheck_pins();
                self.find(name)
            });
        }
        let Some(t) = found.filter(|t| self.visible_by_config(t)) else {
            return error_result(format!("Unknown tool: {name}"), None, None);
        };
        let req = self.call_request(&t, arguments, meta, actor);
        if t.quarantined {
            let message = format!(
                "The definition of {}/{} changed since it was pinned; it is quarantined until a human accepts it with `cap mcp-pins accept {} {}`",
                t.server, t.tool, t.server, t.tool
            );
            if let Err(e) = self.host.governor().refuse(&req, &message, "quarantined") {
                return error_result(format!("{message} (not audited: {e})"), None, None);
            }
            return error_result(
                message,
                Some(json!({"error": "quarantined", "server": t.server, "tool": t.tool})),
                Some(
                    json!({"capabilityId": t.capability, "definitionHash": t.hash,
                            "errorCode": "QUARANTINED"}),
                ),
            );
        }
        let timeout = self
            .server(&t.server)
            .map(|s| timeout_of(&self.config, s))
            .unwrap_or(Duration::from_secs(30));
        // Redeeming an approval waits for the store's writer; the rest of the lifecycle is
        // CPU work and a journal append, in place.
        let governed = |req| self.governed(req, &t, timeout);
        let intercepted = if req.approval_token.is_some() {
            crate::may_block(|| governed(req))
        } else {
            governed(req)
        };
        self.answer(&t, intercepted)
    }

    /// The governed lifecycle of a call of `t`: the upstream call between the policy stages.
    fn governed(
        &self,
        req: InterceptRequest,
        t: &Arc<GatewayTool>,
        timeout: Duration,
    ) -> Intercepted<Called, String> {
        self.host.governor().intercept_with(req, |exec| {
            // A `route` may have moved the call to another upstream tool.
            let target = if exec.capability.name == t.capability {
                Arc::clone(t)
            } else {
                self.tools
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .find(|x| x.capability == exec.capability.name)
                    .map(Arc::clone)
                    .ok_or_else(|| format!("routed to an unknown tool {}", exec.capability.name))?
            };
            let session = self.session(&target.server)?;
            let started = Instant::now();
            let answer = session.call_tool(&target.tool, exec.input, timeout);
            let latency = started.elapsed();
            exec.note("latencyUs", json!(latency.as_micros() as u64));
            exec.note(
                "toolOutcome",
                json!(match &answer {
                    Ok(raw) if raw.get("isError") == Some(&Value::Bool(true)) => "tool_error",
                    Ok(_) => "ok",
                    Err(_) => "upstream_error",
                }),
            );
            let raw = answer.map_err(|e| {
                let message = e.to_string();
                // A child that hung or overflowed is restarted; an HTTP upstream is
                // dropped only when it cannot be reached (one slow call is its own).
                let child = self
                    .server(&target.server)
                    .is_some_and(|s| s.command.is_some());
                let broken = match e {
                    UpstreamError::Exited { .. } | UpstreamError::Stalled => true,
                    UpstreamError::TooLarge | UpstreamError::Timeout(_) => child,
                    _ => false,
                };
                if broken {
                    self.mark_failed(&target.server, &e);
                }
                message
            })?;
            let latency_ms = latency.as_millis();
            let mapped = map_tool_result(&raw)?;
            let called = Called {
                raw,
                mapped: mapped.clone(),
                latency_ms,
            };
            Ok((mapped, called))
        })
    }

    /// The tool result of a governed call of `t`.
    fn answer(&self, t: &GatewayTool, intercepted: Intercepted<Called, String>) -> Value {
        let mut meta = json!({"capabilityId": t.capability, "definitionHash": t.hash});
        match intercepted.map_err(Interrupted::into_error) {
            Ok((done, called)) => {
                let called = Some(called);
                if let Some(c) = &called {
                    meta["latencyMs"] = json!(c.latency_ms as u64);
                }
                meta["actionId"] = json!(done.action.action_id);
                let untouched = called.as_ref().is_some_and(|c| c.mapped == done.output);
                let mut result = match (untouched, called) {
                    (true, Some(c)) => c.raw,
                    _ => {
                        let text = capability_core::json::to_js_string(&done.output);
                        let mut r = json!({"content": [{"type": "text", "text": text}]});
                        if done.output.is_object() {
                            r["structuredContent"] = done.output.clone();
                        }
                        r
                    }
                };
                if let Value::Object(m) = &mut result {
                    m.insert("_meta".into(), meta);
                }
                result
            }
            Err(InterceptError::Denied(denial)) => {
                meta["errorCode"] = json!("PERMISSION_DENIED");
                meta["policyId"] = json!(denial.decision.policy_id);
                error_result(
                    denial.reason().unwrap_or("denied by policy").to_string(),
                    Some(json!({"error": denial.reason().unwrap_or("denied by policy")})),
                    Some(meta),
                )
            }
            Err(InterceptError::ApprovalRequired {
                approval,
                decision,
                action,
            }) => {
                let record = approval.map(|a| a.to_json()).unwrap_or(Value::Null);
                let doc = json!({"approval": {
                    "id": record.get("approvalId"),
                    "reason": decision.reason,
                    "expiresAt": record.get("expiresAtIso"),
                    "planFingerprint": action.plan_fingerprint,
                    "capability": t.capability,
                    "policyId": decision.policy_id,
                }});
                crate::approval_result(doc, &t.capability)
            }
            Err(InterceptError::Execution { error, .. }) => {
                meta["errorCode"] = json!("EXECUTION_FAILED");
                error_result(
                    error,
                    Some(json!({"error": "upstream call failed"})),
                    Some(meta),
                )
            }
            Err(other) => {
                meta["errorCode"] = json!("PERMISSION_DENIED");
                error_result(other.to_string(), None, Some(meta))
            }
        }
    }

    /// Polls upstreams for `list_changed` and pin acceptance; tells connected clients when
    /// the tools changed.
    pub async fn watch(self: Arc<Self>) {
        let mut last: Vec<(String, bool)> = Vec::new();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let me = Arc::clone(&self);
            let now = tokio::task::spawn_blocking(move || {
                me.refresh(false);
                me.recheck_pins();
                me.tools
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .map(|t| (format!("{}:{}", t.downstream, t.hash), t.quarantined))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            if now != last {
                if !last.is_empty() {
                    self.peers.notify_tool_list_changed().await;
                }
                last = now;
            }
        }
    }
}

/// `cap mcp-import`: the reference's `capabilitiesFromMcpTools` over a stdio server; with
/// `sandbox` (the effects granted) the server runs inside the process sandbox, as a
/// gateway's `sandbox = true` server does.
pub fn import_stdio(
    command: &str,
    args: &[String],
    namespace: Option<&str>,
    version: Option<&str>,
    effects_complete: bool,
    sandbox: Option<&[String]>,
) -> Result<Vec<Value>, String> {
    let timeout = Duration::from_secs(30);
    let session = match sandbox {
        Some(effects) => {
            ProcessSandbox::check_children()?;
            let spec = sandbox_spec(command, args, &BTreeMap::new(), effects, &[], &[])
                .map_err(|e| e.to_string())?;
            StdioSession::start_sandboxed(&spec, timeout)
        }
        None => {
            let env: Vec<(String, String)> = std::env::vars().collect();
            StdioSession::start(command, args, &env, timeout)
        }
    }
    .map_err(|e| e.to_string())?;
    let tools = session
        .list_tools(Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    session.kill();
    Ok(capabilities_from_mcp_tools(
        &tools,
        namespace,
        version,
        &["process.spawn".to_string(), "environment.read".to_string()],
        effects_complete,
        Some("stdio"),
    ))
}

use capability_core::manifest::legacy_slugify as slugify;

/// Whether `v` starts with `\d+.\d+.\d+`.
fn starts_with_semver(v: &str) -> bool {
    let mut rest = v;
    for i in 0..3 {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        if i < 2 {
            match rest.strip_prefix('.') {
                Some(r) => rest = r,
                None => return false,
            }
        }
    }
    true
}

/// The reference `capabilitiesFromMcpTools` (manifests; see §2.17 of the reference).
pub fn capabilities_from_mcp_tools(
    tools: &[Value],
    namespace: Option<&str>,
    version: Option<&str>,
    base_effects: &[String],
    effects_complete: bool,
    transport: Option<&str>,
) -> Vec<Value> {
    let ns = slugify(namespace.unwrap_or("mcp"));
    let version = version.filter(|v| starts_with_semver(v)).unwrap_or("0.0.0");
    let mut seen: HashMap<String, ()> = HashMap::new();
    tools
        .iter()
        .filter_map(|tool| {
            let name = tool.get("name").and_then(Value::as_str)?;
            let id = format!("{ns}/{}", slugify(name));
            if seen.insert(id.clone(), ()).is_some() {
                return None;
            }
            let hint = |k: &str| tool.pointer(&format!("/annotations/{k}")) == Some(&Value::Bool(true));
            let mut effects: Vec<String> = Vec::new();
            let mut add = |e: &str| {
                if !effects.iter().any(|x| x == e) {
                    effects.push(e.to_string());
                }
            };
            for e in base_effects {
                add(e);
            }
            if hint("openWorldHint") {
                add("network.connect");
            }
            if hint("destructiveHint") {
                add("custom:mcp.destructive");
            }
            if !effects_complete {
                add("custom:mcp.opaque-effects");
            }
            let input = tool
                .get("inputSchema")
                .filter(|v| v.is_object())
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            let mut manifest = json!({
                "specVersion": "0.1",
                "id": id,
                "version": version,
                "name": tool.get("title").and_then(Value::as_str).unwrap_or(name),
                "description": tool.get("description").and_then(Value::as_str).map(str::to_string)
                    .unwrap_or_else(|| format!("Imported MCP tool {name}")),
                "input": input,
            });
            if let Some(o) = tool.get("outputSchema").filter(|v| v.is_object()) {
                manifest["output"] = o.clone();
            }
            manifest["effects"] = json!(effects);
            manifest["behavior"] = json!({"deterministic": false, "idempotent": hint("idempotentHint"), "reversible": false});
            let mut tags = vec![json!("mcp"), json!("imported")];
            if let Some(t) = transport {
                tags.push(json!(t));
            }
            manifest["tags"] = Value::Array(tags);
            manifest["metadata"] = json!({
                "mcpTool": tool,
                "transport": transport.unwrap_or("host-provided"),
                "authorityComplete": effects_complete,
            });
            Some(manifest)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_keys_are_checked_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let load = |body: &str| {
            let path = dir.path().join("gateway.toml");
            std::fs::write(&path, format!("[[server]]\nname = \"s\"\n{body}")).unwrap();
            GatewayConfig::load(&path)
        };
        let refused = |body: &str, why: &str| {
            let e = load(body).unwrap_err();
            assert!(e.contains(why), "{body}: {e}");
        };
        refused(
            "command = \"node\"\nread = [\"data\"]\n",
            "set sandbox = true",
        );
        refused(
            "command = \"node\"\nsandbox = true\nread = [\"data\"]\n",
            "\"filesystem.read\" in effects",
        );
        refused(
            "command = \"node\"\nsandbox = true\neffects = [\"filesystem.read\"]\nwrite = [\"out\"]\n",
            "\"filesystem.write\" in effects",
        );
        refused(
            "url = \"http://127.0.0.1:1/mcp\"\nsandbox = true\n",
            "not a url",
        );
        let config = load(
            "command = \"node\"\nsandbox = true\neffects = [\"filesystem.read\"]\nread = [\"data\"]\n",
        )
        .unwrap();
        // Relative grants are taken from the config's directory.
        assert_eq!(config.servers[0].read, vec![dir.path().join("data")]);
    }

    #[test]
    fn backoff_doubles_and_starts_again_after_a_healthy_session() {
        let config: ServerConfig = toml::from_str("name = \"s\"\ncommand = \"x\"").unwrap();
        let mut u = Upstream::new(config);
        let t0 = Instant::now();
        let waits: Vec<u64> = (0..7)
            .map(|_| {
                u.fail_at("down".into(), None, t0);
                (u.retry_at.unwrap() - t0).as_secs()
            })
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        // Restarted, up less than a minute: still backing off.
        u.started_at = Some(t0);
        u.fail_at("down".into(), None, t0 + Duration::from_secs(59));
        assert_eq!(u.failures, 8);
        // Up a minute: healthy, so the next failure waits 1 s.
        u.started_at = Some(t0);
        let later = t0 + HEALTHY_AFTER;
        u.fail_at("down".into(), None, later);
        assert_eq!(u.failures, 1);
        assert_eq!(u.retry_at, Some(later + Duration::from_secs(1)));
        // An explicit wait wins over the backoff.
        u.fail_at("down".into(), Some(Duration::from_secs(7)), later);
        assert_eq!(u.retry_at, Some(later + Duration::from_secs(7)));
    }

    #[test]
    fn downstream_names_are_valid_and_collision_free() {
        let none = |_: &str| false;
        assert_eq!(
            downstream_name("everything", "get-sum", true, &none),
            "everything__get-sum"
        );
        assert_eq!(
            downstream_name("fs", "read.file", true, &none),
            "fs__read_file"
        );
        assert_eq!(
            downstream_name("fs", "read.file", false, &none),
            "read_file"
        );
        let long = downstream_name("s", &"x".repeat(100), true, &none);
        assert_eq!(long.len(), 64);
        let taken = |n: &str| n == "fs__read_file";
        let other = downstream_name("fs", "read/file", true, &taken);
        assert_ne!(other, "fs__read_file");
        let re = |n: &str| {
            n.len() <= 64
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        assert!(re(&long) && re(&other));
    }

    #[test]
    fn import_follows_the_reference_example() {
        // §8.9: stdio tool `Send.Mail` (destructive, open world), namespace `My Server`,
        // version `2.1.0-beta`.
        let tool = json!({"name": "Send.Mail", "annotations": {"destructiveHint": true, "openWorldHint": true}});
        let caps = capabilities_from_mcp_tools(
            &[tool],
            Some("My Server"),
            Some("2.1.0-beta"),
            &["process.spawn".into(), "environment.read".into()],
            false,
            Some("stdio"),
        );
        let m = &caps[0];
        assert_eq!(m["id"], "my-server/send.mail");
        assert_eq!(m["version"], "2.1.0-beta");
        assert_eq!(
            m["effects"],
            json!([
                "process.spawn",
                "environment.read",
                "network.connect",
                "custom:mcp.destructive",
                "custom:mcp.opaque-effects"
            ])
        );
        assert_eq!(m["tags"], json!(["mcp", "imported", "stdio"]));
        assert_eq!(m["description"], "Imported MCP tool Send.Mail");
        let v =
            capabilities_from_mcp_tools(&[json!({"name": "a"})], None, Some("v1"), &[], true, None);
        assert_eq!(v[0]["version"], "0.0.0");
        assert_eq!(v[0]["id"], "mcp/a");
    }
}
