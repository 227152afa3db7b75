//! The governing MCP gateway's surface (`cap mcp-gateway`): the tools of the host's MCP
//! upstreams, served over stdio or streamable HTTP. This module does protocol work only —
//! lists, calls, notifications; the upstreams, their pins and every decision about a call
//! are the host's (`capability_host::upstreams`):
//!
//! * `tools/list` shows a caller the tools [`Host::upstream_tools`] gives it, each under its
//!   downstream name (`<server>__<tool>`, see `capability_host::upstream::catalog`), without
//!   `outputSchema` (policies may redact or transform a result; the upstream's is in
//!   `_meta["mcp/outputSchema"]`), with `_meta` naming the capability, the server, the tool
//!   and the pinned definition hash.
//! * `tools/call` of arguments carrying a `__proto__` member (at any depth) is refused as
//!   `INVALID_INPUT` before the host sees it (the canonical form that is hashed, approved and
//!   audited leaves it out, the upstream would receive it); arguments invalid against the
//!   tool's pinned input schema are refused by the host when it plans the call.
//! * `tools/call` is [`Host::invoke`] of `mcp.<server>.<tool>` (or [`Host::resume`] with the
//!   `approvalToken` argument or `_meta.approvalToken`): plan, effect authorization,
//!   policies, the upstream call, a receipt and one audit event. The answer is the
//!   upstream's own result when policies changed nothing (its content items as they were),
//!   else the delivered output as text and structured content; `_meta` names the
//!   capability, the definition hash, the receipt and the action. A call that waits for a
//!   human answers the host's approval document. A W3C `traceparent` in `_meta` is handed
//!   to the host. An unknown tool name is a tool error (no capability, no audit event).
//! * While serving, [`Gateway::watch`] asks the host to look at the upstreams every 250 ms
//!   (an upstream said its tools changed, a dead one may restart, a pin may have been
//!   accepted) and tells connected clients when the tools changed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capability_core::json::to_js_string;
use capability_host::upstream::UpstreamTool;
use capability_host::{ActionType, Actor, Caller, Host, Outcome, Request, approval_document};
use rmcp::model::Tool;
use serde_json::{Map, Value, json};

use crate::handler::Peers;
use crate::{
    ServeOptions, approval_result, error_result, failure_result, governed, may_block,
    take_approval_token, traceparent,
};

/// The gateway: the host's upstream tools as MCP tools (see the module docs).
pub struct Gateway {
    host: Arc<Host>,
    serve: ServeOptions,
    pub(crate) peers: Peers,
    /// Each listed tool as callers see it, by downstream name, made once per catalog entry
    /// (the entry it was made from beside it).
    rendered: Mutex<HashMap<String, (Arc<UpstreamTool>, Tool)>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

/// A tool's definition as a caller sees it (see the module docs).
fn definition(t: &UpstreamTool) -> Value {
    let mut def = t.definition.clone();
    if let Value::Object(m) = &mut def {
        m.insert("name".into(), json!(t.downstream));
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
}

impl Gateway {
    /// The gateway over a host opened with a gateway config.
    pub fn new(host: Arc<Host>, serve: ServeOptions) -> Gateway {
        Gateway {
            host,
            serve,
            peers: Peers::default(),
            rendered: Mutex::default(),
        }
    }

    pub fn host(&self) -> Arc<Host> {
        Arc::clone(&self.host)
    }

    pub fn serve_options(&self) -> &ServeOptions {
        &self.serve
    }

    /// The tools `actor` may see, as `tools/list` answers them. A definition rmcp cannot
    /// read as a tool (an `inputSchema` that is not an object) is left out.
    pub fn list(&self, actor: &Actor) -> Vec<Tool> {
        may_block(|| self.host.sync_upstreams(false));
        let visible = self.host.upstream_tools(actor);
        let mut rendered = self.rendered.lock().unwrap_or_else(PoisonError::into_inner);
        // Entries of tools gone from the catalog go when they outnumber what is listed.
        if rendered.len() > 2 * visible.len() + 1024 {
            let names: HashSet<&str> = visible.iter().map(|t| t.downstream.as_str()).collect();
            rendered.retain(|name, _| names.contains(name.as_str()));
        }
        visible
            .iter()
            .filter_map(|t| match rendered.get(&t.downstream) {
                Some((made_from, tool)) if Arc::ptr_eq(made_from, t) => Some(tool.clone()),
                _ => {
                    let tool: Tool = serde_json::from_value(definition(t)).ok()?;
                    rendered.insert(t.downstream.clone(), (Arc::clone(t), tool.clone()));
                    Some(tool)
                }
            })
            .collect()
    }

    /// Calls a downstream tool as `actor`; always a tool result. Blocking (inside
    /// [`may_block`] where it waits).
    pub fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
        let mut tool = self.host.upstream_tool(name);
        if tool.is_none() {
            // A tool listed since (or an upstream back from a restart).
            may_block(|| self.host.sync_upstreams(false));
            tool = self.host.upstream_tool(name);
        }
        let Some(tool) = tool else {
            return error_result(format!("Unknown tool: {name}"), None, None);
        };
        let mut arguments = match arguments {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let token = take_approval_token(&mut arguments, meta, tool.declares("approvalToken"));
        let mut request = Request::new(tool.capability.clone(), Value::Object(arguments));
        request.caller = Caller {
            actor: actor.clone(),
            action_type: ActionType::McpToolCall,
            ..Caller::default()
        };
        request
            .caller
            .labels
            .insert("surface".into(), "mcp-gateway".into());
        request.traceparent = traceparent(meta);
        let mut meta = Map::new();
        meta.insert("capabilityId".into(), json!(tool.capability));
        meta.insert("definitionHash".into(), json!(tool.hash));
        match governed(&self.host, &request, token.as_deref()) {
            Outcome::Completed(done) => {
                let receipt = &done.receipt;
                meta.insert("receiptId".into(), json!(receipt.receipt_id));
                if let Some(action) = receipt
                    .governance
                    .as_ref()
                    .and_then(|g| g.action_id.as_ref())
                {
                    meta.insert("actionId".into(), json!(action));
                }
                meta.insert("durationMs".into(), json!(receipt.duration_ms));
                let mut result = match done.reply {
                    Some(raw) => raw,
                    None => {
                        let output = receipt.output.clone().unwrap_or(Value::Null);
                        let mut r =
                            json!({"content": [{"type": "text", "text": to_js_string(&output)}]});
                        if output.is_object() {
                            r["structuredContent"] = output;
                        }
                        r
                    }
                };
                if let Value::Object(m) = &mut result {
                    m.insert("_meta".into(), Value::Object(meta));
                }
                result
            }
            Outcome::NeedsApproval(p) => approval_result(approval_document(&p), &tool.capability),
            Outcome::Failed(e) => failure_result(&e, &tool.capability, meta),
        }
    }

    /// Asks the host to look at the upstreams every 250 ms; tells connected clients when
    /// the tools changed, and reports on stderr the policies that no longer type-check
    /// against the tools (checked again at each change).
    pub async fn watch(self: Arc<Self>) {
        let mut reported: Vec<String> = Vec::new();
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let host = Arc::clone(&self.host);
            let checked = tokio::task::spawn_blocking(move || {
                let changed = host.sync_upstreams(false);
                let problems = changed.then(|| host.check_policies());
                (changed, problems)
            })
            .await;
            let Ok((changed, problems)) = checked else {
                continue;
            };
            if let Some(problems) = problems {
                let now: Vec<String> = match problems {
                    Ok(report) => report.diagnostics.iter().map(|d| d.to_string()).collect(),
                    Err(e) => vec![format!("cannot check the policies: {e}")],
                };
                for line in now.iter().filter(|l| !reported.contains(l)) {
                    eprintln!("mcp-gateway: policy: {line}");
                }
                reported = now;
            }
            if changed {
                self.peers.notify_tool_list_changed().await;
            }
        }
    }
}

/// The gateway as a transport's surface (shared, cheap to clone).
#[derive(Clone, Debug)]
pub struct GatewayServer(pub Arc<Gateway>);

impl crate::handler::Surface for GatewayServer {
    fn options(&self) -> &ServeOptions {
        self.0.serve_options()
    }
    fn host(&self) -> Arc<Host> {
        self.0.host()
    }
    fn list(&self, actor: &Actor) -> Vec<Tool> {
        self.0.list(actor)
    }
    fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value {
        self.0.call(name, arguments, meta, actor)
    }
    const CALLS_IN_PLACE: bool = true;
    fn peers(&self) -> &Peers {
        &self.0.peers
    }
}

impl GatewayServer {
    /// Serves the gateway over stdio (watching upstreams for changes meanwhile).
    pub async fn serve_stdio(&self) -> std::io::Result<()> {
        let watch = tokio::spawn(Arc::clone(&self.0).watch());
        let r = crate::http::serve_stdio(self).await;
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
        let r = crate::http::serve_http(self, listener, shutdown).await;
        watch.abort();
        r
    }
}
