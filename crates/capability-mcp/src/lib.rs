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
//!   says what they need and that it is not built yet. `capability_execute` and the steps of
//!   `capability_compose` are governed exactly as the projected tool of the same capability
//!   (Cedar action `mcp_tool_call`, label `surface: mcp`): one capability has one governed
//!   identity whatever MCP path reaches it. With [`ServeOptions::expose`] or
//!   [`ServeOptions::expose_all`] given, they run only the capabilities those allow (the
//!   exposure is an allowlist for execution, not only for listing); with neither, every
//!   capability of the host, as the policies decide.
//! * Capabilities projected as tools ([`ServeOptions::expose`] ids or `*` globs,
//!   [`ServeOptions::expose_all`]) with the reference projection
//!   ([`capability_core::mcp::to_mcp_tool`]). A call is governed with the Cedar action
//!   `mcp_tool_call`; success gives `{content: [{type: "text", text: JSON of the output}],
//!   structuredContent: output, _meta: {receiptId, capabilityId}}`. When the exposed set
//!   changes ([`McpServer::set_host`]), connected clients get `tools/list_changed` (legacy
//!   sessions on their stream, 2026-07-28 clients through `subscriptions/listen`).
//! * Arguments carrying a `__proto__` member at any depth are refused (`INVALID_INPUT`)
//!   before anything is planned, on every tool: the canonical form that is hashed, approved
//!   and receipted leaves such members out, the capability would receive them.
//!
//! ## Callers and approvals
//!
//! The caller is a principal: over stdio the [`ServeOptions::stdio_actor`]; over HTTP the
//! holder of a bearer token (authenticated by the host, `Host::authenticate`; a missing,
//! unknown, expired or revoked token gets 401 with `WWW-Authenticate`, a token whose role
//! may not call tools 403; a host may let requests without a token act as a named agent,
//! [`ServeOptions::anonymous`]). Calls in flight per principal are limited by the host
//! (`HostConfig::max_calls_per_principal`). Approvals stay with the host: the reference's `approved: true` argument approves
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
//! `server/discover` and stateless requests; the host's HTTP guard (Host and Origin
//! validation, the request body limit: [`HttpLimits::guard`]); a limit on concurrent
//! sessions; on shutdown it stops taking requests, lets the calls in flight finish and
//! flushes every receipt.
//!
//! ## The gateway
//!
//! [`Gateway`] serves the tools of the host's MCP upstreams (`cap mcp-gateway`): the
//! protocol part only (lists, calls, notifications); the upstreams, their pins and every
//! decision about a call are the host's (see [`gateway`]).

pub mod gateway;
mod handler;
mod http;
mod lane;
mod stdio;
mod tools;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use capability_core::json::to_js_string;
use capability_core::mcp::{mcp_tool_name, to_mcp_tool};
use capability_core::{CapabilityError, ErrorCode};
use capability_host::{
    ActionType, Actor, Caller, Host, Outcome, Request, approval_document, error_document,
};
use serde_json::{Map, Value, json};

pub use gateway::{Gateway, GatewayServer};
pub use http::HttpLimits;

pub(crate) use capability_host::upstream::may_block;

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

/// Whether `options` project capability `id` as a tool.
fn projects(options: &ServeOptions, id: &str) -> bool {
    options.expose_all
        || options
            .expose
            .iter()
            .any(|p| capability_host::upstream::glob_match(p, id))
}

fn exposed_of(host: &Host, options: &ServeOptions) -> Exposed {
    let mut exposed = Exposed::default();
    for capability in host.capabilities() {
        let id = capability.id();
        if !projects(options, id) {
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
pub(crate) fn error_result(text: String, structured: Option<Value>, meta: Option<Value>) -> Value {
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

/// The tool result of a call the host refused or that failed: the message (for a failed
/// execution, the cause's), `{error: {...}}` as structured content, and in `_meta` the
/// capability, the error code (a refusal's own code, such as `QUARANTINED` or
/// `RATE_LIMITED`, when it has one) and the failed receipt.
pub(crate) fn failure_result(
    e: &CapabilityError,
    capability: &str,
    mut meta: Map<String, Value>,
) -> Value {
    let details = e.details.as_ref();
    let code = details
        .and_then(|d| d.get("code"))
        .and_then(Value::as_str)
        .filter(|c| matches!(*c, "quarantined" | "rate_limited"))
        .map(str::to_ascii_uppercase)
        .unwrap_or_else(|| e.code.as_str().to_string());
    let text = details
        .and_then(|d| d.pointer("/cause/message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| error_text(e));
    meta.insert("capabilityId".into(), json!(capability));
    meta.insert("errorCode".into(), json!(code));
    if let Some(r) = &e.receipt_id {
        meta.insert("receiptId".into(), json!(r));
    }
    error_result(text, Some(error_document(e)), Some(Value::Object(meta)))
}

/// An error's message, with the validation issues of refused input (`path: message`) when
/// its message does not already give them.
pub(crate) fn error_text(e: &CapabilityError) -> String {
    let issues: Vec<String> = match (&e.code, e.details.as_ref()) {
        (ErrorCode::InvalidInput, Some(Value::Array(issues))) => issues
            .iter()
            .filter_map(|i| {
                let path = i.get("path")?.as_str()?;
                let message = i.get("message")?.as_str()?;
                Some(format!("{path}: {message}"))
            })
            .filter(|i| !e.message.contains(i.as_str()))
            .collect(),
        _ => Vec::new(),
    };
    if issues.is_empty() {
        e.message.clone()
    } else {
        format!("{}: {}", e.message, issues.join("; "))
    }
}

/// The tool result of a call that waits for a human: the host's approval document.
pub(crate) fn approval_result(doc: Value, id: &str) -> Value {
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

/// The approval token a call carries: the `approvalToken` argument (removed from the
/// arguments, unless the tool's own input declares such a property) or
/// `_meta.approvalToken`.
pub(crate) fn take_approval_token(
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

/// A W3C `traceparent` in a request's `_meta` (the host checks it).
pub(crate) fn traceparent(meta: Option<&Value>) -> Option<String> {
    meta.and_then(|m| m.get("traceparent"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Runs a request through the host: a fresh invocation, or the resumption of an approved
/// plan when a token is given (redeeming it waits for the store's writer).
pub(crate) fn governed(host: &Host, request: &Request, token: Option<&str>) -> Outcome {
    match token {
        Some(t) => may_block(|| host.resume(request, t)),
        None => host.invoke(request),
    }
}

impl McpServer {
    pub fn new(host: Arc<Host>, options: ServeOptions) -> McpServer {
        let exposed = exposed_of(&host, &options);
        McpServer {
            inner: Arc::new(Inner {
                host: RwLock::new(host),
                options,
                exposed: RwLock::new(Arc::new(exposed)),
                peers: handler::Peers::default(),
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

    /// Whether `capability_execute` and `capability_compose` may run capability `id`: with
    /// `--expose` or `--expose-installed` given, only what they allow (see the crate docs);
    /// with neither, every capability (the policies decide).
    pub fn may_execute(&self, id: &str) -> bool {
        let options = &self.inner.options;
        (options.expose.is_empty() && !options.expose_all) || projects(options, id)
    }

    /// Calls a tool as `actor` and returns the MCP tool result (never a protocol error:
    /// unknown tools and failures are tool errors). Blocking: it runs the capability.
    pub fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
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
        let declares = |key: &str| host.input_declares(&id, key);
        let token = take_approval_token(&mut arguments, meta, declares("approvalToken"));
        let asked =
            !declares("approved") && arguments.remove("approved") == Some(Value::Bool(true));
        let mut request = Request::new(id.clone(), Value::Object(arguments));
        request.caller = Caller {
            actor: actor.clone(),
            action_type: ActionType::McpToolCall,
            ..Caller::default()
        };
        request.caller.labels.insert("surface".into(), "mcp".into());
        request.approve_effects = asked && self.inner.options.allow_agent_approval;
        request.traceparent = traceparent(meta);
        match governed(&host, &request, token.as_deref()) {
            Outcome::Completed(done) => {
                let receipt = done.receipt;
                let output = receipt.output.clone().unwrap_or(Value::Null);
                json!({
                    "content": [{"type": "text", "text": to_js_string(&output)}],
                    "structuredContent": output,
                    "_meta": {"receiptId": receipt.receipt_id, "capabilityId": id},
                })
            }
            Outcome::NeedsApproval(p) => approval_result(approval_document(&p), &id),
            Outcome::Failed(e) => failure_result(&e, &id, Map::new()),
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
    fn list(&self, _actor: &Actor) -> Vec<rmcp::model::Tool> {
        self.tools()
            .into_iter()
            .filter_map(|t| serde_json::from_value(t).ok())
            .collect()
    }
    fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
        McpServer::call(self, name, arguments, meta, actor)
    }
    fn peers(&self) -> &handler::Peers {
        &self.inner.peers
    }
}
