//! # capability-mcp
//!
//! The MCP server surface of the runtime (`cap mcp-serve`): any MCP client discovers and
//! runs capabilities through a [`Host`], and every `tools/call` is governed by it — planned,
//! effect-authorized, checked against the Cedar policies, executed behind the isolation
//! boundary, receipted and audited. The protocol library (rmcp, pinned exactly) stays inside
//! this crate.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use capability_host::{Host, HostConfig};
//! use capability_mcp::{McpServer, ServeOptions};
//! let host = Arc::new(Host::open(HostConfig::default()).map_err(std::io::Error::other)?);
//! let server = McpServer::new(host, ServeOptions::default());
//! server.serve_stdio().await            // or: server.serve_http(listener, shutdown).await
//! # }
//! ```
//!
//! ## Tools
//!
//! * The 13 bootstrap tools of the reference, in its order, with its names, titles, schemas
//!   and annotations ([`capability_core::mcp::bootstrap_tools`]). Results are
//!   `{content: [{type: "text", text: <value as pretty JSON>}], structuredContent: value}`;
//!   errors are `{error: message}` with `isError: true`. `capability_search`,
//!   `capability_inspect`, `capability_execute`, `capability_coverage`,
//!   `capability_compose` and `capability_doctor` work; the others answer a tool error that
//!   says what they need and that it is not built yet.
//! * Capabilities projected as tools ([`ServeOptions::expose`] ids or `*` globs,
//!   [`ServeOptions::expose_all`]) with the reference projection
//!   ([`capability_core::mcp::to_mcp_tool`]). A call is governed with the Cedar action
//!   `mcp_tool_call`; success gives `{content: [{type: "text", text: JSON of the output}],
//!   structuredContent: output, _meta: {receiptId, capabilityId}}`. When the exposed set
//!   changes ([`McpServer::set_host`]), connected clients get `tools/list_changed` (legacy
//!   sessions on their stream, 2026-07-28 clients through `subscriptions/listen`).
//!
//! ## Callers and approvals
//!
//! The caller is a principal: over stdio the [`ServeOptions::stdio_actor`]; over HTTP the
//! holder of a bearer token ([`capability_host::Tokens`]; a missing, unknown, expired or
//! revoked token gets 401 with `WWW-Authenticate`, a token whose role may not call tools
//! 403; a host may let requests without a token act as a named agent,
//! [`ServeOptions::anonymous`]). Approvals stay with the host: the reference's `approved: true` argument approves
//! nothing unless the host opted in ([`ServeOptions::allow_agent_approval`]). A call that
//! needs a human answers `isError: true` with structured content `{approval: {id, reason,
//! expiresAt, planFingerprint, ...}}`; once a human approved (`cap approvals approve <id>`),
//! the agent's retry of the same call carrying the token (the `approvalToken` argument, or
//! `_meta.approvalToken`) runs exactly the approved plan.
//!
//! ## HTTP
//!
//! [`McpServer::serve_http`] mounts rmcp's streamable HTTP service in axum: protocol
//! revisions 2025-06-18 and 2025-11-25 with `initialize` and sessions, 2026-07-28 with
//! `server/discover` and stateless requests; Host validation against loopback names (plus
//! [`HttpLimits::allowed_hosts`]) and Origin validation ([`HttpLimits::allowed_origins`];
//! a browser Origin is refused unless listed); a request body limit; limits on concurrent
//! sessions and on concurrent calls per principal; on shutdown it stops taking requests,
//! lets the calls in flight finish and flushes every receipt.

pub mod gateway;
mod handler;
mod http;
pub mod pins;
mod stdio;
mod tools;
pub mod upstream;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use capability_core::json::to_js_string;
use capability_core::mcp::{mcp_tool_name, to_mcp_tool};
use capability_host::{Actor, Caller, Host, Outcome, Request, approval_document, error_document};
use serde_json::{Map, Value, json};

pub use gateway::{Gateway, GatewayConfig};
pub use http::HttpLimits;

/// Runs `f`, which may block for long (waiting for an upstream, starting one, a store that
/// waits for its writer): on a worker of a multi-threaded runtime the worker's other tasks
/// move to another thread meanwhile (`block_in_place`); elsewhere `f` just runs. The
/// gateway's calls run in place on the worker and go through this only where they wait, so
/// that a quick call costs no hand-off between threads.
pub(crate) fn may_block<R>(f: impl FnOnce() -> R) -> R {
    if handler::multi_threaded() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// How the server is set up.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Capability ids, or globs with `*`, to project as tools (repeatable).
    pub expose: Vec<String>,
    /// Project every capability the host has (`--expose-installed`).
    pub expose_all: bool,
    /// Let the reference's `approved: true` argument approve effects (off by default: an
    /// agent never approves its own call).
    pub allow_agent_approval: bool,
    /// Who calls over stdio.
    pub stdio_actor: Actor,
    /// Who an HTTP request without a bearer token acts as; `None` (the default) answers
    /// such requests 401. A presented token is always checked.
    pub anonymous: Option<Actor>,
    pub http: HttpLimits,
}

/// The name the server gives itself.
pub const SERVER_NAME: &str = "capability-network";

/// The instructions the server gives clients.
pub const INSTRUCTIONS: &str = "Governed capabilities: search with capability_search, inspect \
    with capability_inspect, run with capability_execute or a projected capability tool. Every \
    call is authorized by the host's policies and leaves a receipt. A call that needs approval \
    returns an approval id: a human approves it with `cap approvals approve <id>`, then retry \
    the same call with the token as `approvalToken`.";

/// The MCP server: tools and governed calls over a [`Host`] (cheap to clone).
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    host: RwLock<Arc<Host>>,
    options: ServeOptions,
    /// Projected tool name → capability ids (more than one: ambiguous).
    exposed: RwLock<Arc<Exposed>>,
    peers: handler::Peers,
    calls: CallLimits,
}

#[derive(Default, PartialEq)]
struct Exposed {
    tools: Vec<Value>,
    by_name: HashMap<String, Vec<String>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

/// Whether `id` matches `pattern` (`*` matches any run of characters, `/` included).
fn glob_match(pattern: &str, id: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == id;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !id.starts_with(first) || id.len() < first.len() + last.len() || !id.ends_with(last) {
        return false;
    }
    let mut rest = &id[first.len()..id.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

fn exposed_of(host: &Host, options: &ServeOptions) -> Exposed {
    let mut exposed = Exposed::default();
    for capability in host.runtime().registry().list() {
        let id = capability.id();
        let wanted = options.expose_all || options.expose.iter().any(|p| glob_match(p, id));
        if !wanted {
            continue;
        }
        let name = mcp_tool_name(id);
        let ids = exposed.by_name.entry(name).or_default();
        if ids.is_empty() {
            exposed.tools.push(to_mcp_tool(capability.manifest()));
        }
        ids.push(id.to_string());
    }
    exposed
}

/// `{isError: true, content: [{type: "text", text}]}` plus structured content and `_meta`.
fn error_result(text: String, structured: Option<Value>, meta: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("content".into(), json!([{"type": "text", "text": text}]));
    if let Some(s) = structured {
        m.insert("structuredContent".into(), s);
    }
    m.insert("isError".into(), Value::Bool(true));
    if let Some(meta) = meta {
        m.insert("_meta".into(), meta);
    }
    Value::Object(m)
}

/// What a governed call gave, before it is rendered as a tool result.
enum Governed {
    Completed(Arc<capability_core::receipt::Receipt>),
    NeedsApproval(Value),
    Failed(capability_core::CapabilityError),
}

/// The approval token a call carries: the `approvalToken` argument (removed from the
/// arguments, unless the capability's own input declares such a property) or
/// `_meta.approvalToken`.
fn take_approval_token(
    arguments: &mut Map<String, Value>,
    meta: Option<&Value>,
    input_declares: bool,
) -> Option<String> {
    let from_args = if input_declares {
        None
    } else {
        arguments
            .remove("approvalToken")
            .and_then(|v| v.as_str().map(str::to_string))
    };
    from_args.or_else(|| {
        meta.and_then(|m| m.get("approvalToken"))
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

impl McpServer {
    pub fn new(host: Arc<Host>, options: ServeOptions) -> McpServer {
        let exposed = exposed_of(&host, &options);
        let calls = CallLimits::new(options.http.max_calls_per_principal);
        McpServer {
            inner: Arc::new(Inner {
                host: RwLock::new(host),
                options,
                exposed: RwLock::new(Arc::new(exposed)),
                peers: handler::Peers::default(),
                calls,
            }),
        }
    }

    /// The host calls go to now.
    pub fn host(&self) -> Arc<Host> {
        Arc::clone(
            &self
                .inner
                .host
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    pub fn options(&self) -> &ServeOptions {
        &self.inner.options
    }

    /// Replaces the host (new or changed capability sources); calls in flight finish on the
    /// old one. Returns whether the exposed tools changed, in which case every connected
    /// client is sent `notifications/tools/list_changed`.
    pub async fn set_host(&self, host: Arc<Host>) -> bool {
        let exposed = Arc::new(exposed_of(&host, &self.inner.options));
        *self
            .inner
            .host
            .write()
            .unwrap_or_else(PoisonError::into_inner) = host;
        let changed = {
            let mut current = self
                .inner
                .exposed
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let changed = **current != *exposed;
            *current = exposed;
            changed
        };
        if changed {
            self.inner.peers.notify_tool_list_changed().await;
        }
        changed
    }

    fn exposed(&self) -> Arc<Exposed> {
        Arc::clone(
            &self
                .inner
                .exposed
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Every tool: the 13 bootstrap tools, then the projected capabilities.
    pub fn tools(&self) -> Vec<Value> {
        let mut tools = capability_core::mcp::bootstrap_tools();
        tools.extend(self.exposed().tools.iter().cloned());
        tools
    }

    /// Calls a tool as `actor` and returns the MCP tool result (never a protocol error:
    /// unknown tools and failures are tool errors). Blocking: it runs the capability.
    pub fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
        let _slot = match self.inner.calls.acquire(actor) {
            Ok(slot) => slot,
            Err(refused) => return refused,
        };
        let arguments = match arguments {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if capability_core::mcp::BOOTSTRAP_TOOL_NAMES.contains(&name) {
            return tools::call_bootstrap(self, name, arguments, meta, actor);
        }
        self.call_projected(name, arguments, meta, actor)
    }

    fn call_projected(
        &self,
        name: &str,
        mut arguments: Map<String, Value>,
        meta: Option<&Value>,
        actor: &Actor,
    ) -> Value {
        let exposed = self.exposed();
        let id = match exposed.by_name.get(name).map(Vec::as_slice) {
            None | Some([]) => {
                return error_result(format!("Unknown capability tool: {name}"), None, None);
            }
            Some([one]) => one.clone(),
            Some(many) => {
                return error_result(
                    format!("Ambiguous capability tool: {name} ({})", many.join(", ")),
                    None,
                    None,
                );
            }
        };
        let host = self.host();
        // `approvalToken` and `approved` are the call's, not the capability's input, unless
        // its input schema declares them.
        let capability = host.runtime().registry().get(&id);
        let declares = |key: &str| {
            capability.as_ref().is_some_and(|c| {
                c.manifest()
                    .input
                    .as_ref()
                    .and_then(|i| i.get("properties"))
                    .is_some_and(|p| p.get(key).is_some())
            })
        };
        let token = take_approval_token(&mut arguments, meta, declares("approvalToken"));
        let asked =
            !declares("approved") && arguments.remove("approved") == Some(Value::Bool(true));
        let approved = asked && self.inner.options.allow_agent_approval;
        let caller = Caller {
            actor: actor.clone(),
            action_type: capability_host::ActionType::McpToolCall,
            ..Caller::default()
        };
        let input = Value::Object(arguments);
        match self.governed(&host, &id, input, caller, approved, token.as_deref()) {
            Governed::Completed(receipt) => {
                let output = receipt.output.clone().unwrap_or(Value::Null);
                json!({
                    "content": [{"type": "text", "text": to_js_string(&output)}],
                    "structuredContent": output,
                    "_meta": {"receiptId": receipt.receipt_id, "capabilityId": id},
                })
            }
            Governed::NeedsApproval(doc) => approval_result(doc, &id),
            Governed::Failed(e) => {
                let mut meta = json!({"capabilityId": id, "errorCode": e.code.as_str()});
                if let Some(r) = &e.receipt_id {
                    meta["receiptId"] = json!(r);
                }
                error_result(e.message.clone(), Some(error_document(&e)), Some(meta))
            }
        }
    }

    /// Runs a capability through the host: a fresh invocation, or the resumption of an
    /// approved plan when a token is given.
    fn governed(
        &self,
        host: &Host,
        id: &str,
        input: Value,
        caller: Caller,
        approve_effects: bool,
        token: Option<&str>,
    ) -> Governed {
        let mut request = Request::new(id, input);
        request.caller = caller;
        request.caller.labels.insert("surface".into(), "mcp".into());
        request.approve_effects = approve_effects;
        let outcome = match token {
            Some(t) => host.resume(&request, t),
            None => host.invoke(&request),
        };
        match outcome {
            Outcome::Completed(r) => Governed::Completed(r),
            Outcome::NeedsApproval(p) => Governed::NeedsApproval(approval_document(&p)),
            Outcome::Failed(e) => Governed::Failed(e),
        }
    }
}

impl handler::Surface for McpServer {
    fn options(&self) -> &ServeOptions {
        &self.inner.options
    }
    fn host(&self) -> Arc<Host> {
        McpServer::host(self)
    }
    fn list(&self, _actor: &Actor) -> Vec<Value> {
        self.tools()
    }
    fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
        McpServer::call(self, name, arguments, meta, actor)
    }
    fn peers(&self) -> &handler::Peers {
        &self.inner.peers
    }
    fn idle(&self) -> bool {
        self.inner.calls.idle()
    }
}

/// The gateway as a transport's surface (shared, cheap to clone).
#[derive(Clone, Debug)]
pub struct GatewayServer(pub Arc<Gateway>);

impl handler::Surface for GatewayServer {
    fn options(&self) -> &ServeOptions {
        self.0.serve_options()
    }
    fn host(&self) -> Arc<Host> {
        self.0.host()
    }
    fn list(&self, actor: &Actor) -> Vec<Value> {
        self.0.list(actor)
    }
    fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
        self.0.call(name, arguments, meta, actor)
    }
    const CALLS_IN_PLACE: bool = true;
    fn peers(&self) -> &handler::Peers {
        &self.0.peers
    }
    fn idle(&self) -> bool {
        self.0.idle()
    }
}

impl GatewayServer {
    /// Serves the gateway over stdio (watching upstreams for changes meanwhile).
    pub async fn serve_stdio(&self) -> std::io::Result<()> {
        let watch = tokio::spawn(Arc::clone(&self.0).watch());
        let r = http::serve_stdio(self).await;
        watch.abort();
        r
    }

    /// Serves the gateway over streamable HTTP until `shutdown`.
    pub async fn serve_http(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let watch = tokio::spawn(Arc::clone(&self.0).watch());
        let r = http::serve_http(self, listener, shutdown).await;
        watch.abort();
        r
    }
}

/// The tool result of a call that waits for a human.
fn approval_result(doc: Value, id: &str) -> Value {
    let approval_id = doc
        .pointer("/approval/id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let reason = doc
        .pointer("/approval/reason")
        .and_then(Value::as_str)
        .unwrap_or("policy")
        .to_string();
    error_result(
        format!(
            "Approval required ({reason}). A human approves it with `cap approvals approve \
             {approval_id}`; then retry the same call with the token as `approvalToken`."
        ),
        Some(doc),
        Some(
            json!({"capabilityId": id, "errorCode": "APPROVAL_REQUIRED", "approvalId": approval_id}),
        ),
    )
}

/// Calls in flight per principal (the principal id, else the agent id), at most `limit`
/// each (`--max-calls-per-principal`, shared by `cap mcp-serve` and `cap mcp-gateway`).
pub(crate) struct CallLimits {
    limit: usize,
    in_flight: Mutex<HashMap<String, usize>>,
}

impl CallLimits {
    pub(crate) fn new(limit: usize) -> Self {
        CallLimits {
            limit: limit.max(1),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for one call of `actor`, or the tool error that refuses it.
    pub(crate) fn acquire(&self, actor: &Actor) -> Result<Slot<'_>, Value> {
        let key = actor
            .principal_id
            .clone()
            .or_else(|| actor.agent_id.clone())
            .unwrap_or_default();
        self.acquire_key(key).ok_or_else(|| {
            error_result(
                format!(
                    "too many calls in flight for this principal (limit {}); retry later",
                    self.limit
                ),
                Some(json!({"error": "rate limited"})),
                None,
            )
        })
    }

    fn acquire_key(&self, key: String) -> Option<Slot<'_>> {
        let mut map = self.lock();
        let n = map.entry(key.clone()).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Slot { limits: self, key })
    }

    /// No call is in flight.
    pub(crate) fn idle(&self) -> bool {
        self.lock().is_empty()
    }
}

/// One call in flight for a principal.
pub(crate) struct Slot<'a> {
    limits: &'a CallLimits,
    key: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut map = self.limits.lock();
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("text/*", "text/slugify"));
        assert!(glob_match("*", "a/b"));
        assert!(glob_match("*/sha256", "data/sha256"));
        assert!(glob_match("t*t/*fy", "text/slugify"));
        assert!(!glob_match("text/*", "data/sha256"));
        assert!(!glob_match("text/slugify", "text/slugify2"));
        assert!(!glob_match("a*a", "a"));
    }

    fn server(options: ServeOptions) -> (tempfile::TempDir, McpServer) {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::open(capability_host::HostConfig {
            home: Some(dir.path().join("home")),
            ..Default::default()
        })
        .unwrap();
        (dir, McpServer::new(Arc::new(host), options))
    }

    #[test]
    fn tools_are_the_bootstrap_tools_then_the_exposed_capabilities() {
        let (_d, s) = server(ServeOptions {
            expose: vec!["text/*".into()],
            ..Default::default()
        });
        let names: Vec<String> = s
            .tools()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names.len(), 15);
        assert_eq!(names[0], "capability_need");
        assert_eq!(names[12], "capability_doctor");
        assert_eq!(names[13..], ["text__normalize", "text__slugify"]);
    }

    #[test]
    fn a_projected_call_is_governed_and_receipted() {
        let (_d, s) = server(ServeOptions {
            expose: vec!["text/slugify".into()],
            ..Default::default()
        });
        let actor = Actor::agent("bot");
        let r = s.call(
            "text__slugify",
            json!({"text": "Hello World"}),
            None,
            &actor,
        );
        assert_eq!(r["structuredContent"], json!({"slug": "hello-world"}));
        let receipt_id = r["_meta"]["receiptId"].as_str().unwrap();
        assert!(s.host().receipts().get(receipt_id).unwrap().is_some());
        let unknown = s.call("text__normalize", json!({}), None, &actor);
        assert_eq!(unknown["isError"], true);
        assert_eq!(
            unknown["content"][0]["text"],
            "Unknown capability tool: text__normalize"
        );
    }

    #[test]
    fn calls_per_principal_are_limited() {
        let mut options = ServeOptions::default();
        options.http.max_calls_per_principal = 1;
        let (_d, s) = server(options);
        let calls = &s.inner.calls;
        let held = calls.acquire(&Actor::agent("p")).unwrap();
        assert!(!calls.idle());
        let refused = calls.acquire(&Actor::agent("p")).err().unwrap();
        assert_eq!(refused["isError"], true);
        assert!(calls.acquire(&Actor::agent("q")).is_ok());
        drop(held);
        assert!(calls.acquire(&Actor::agent("p")).is_ok());
        assert!(calls.idle());
    }
}
