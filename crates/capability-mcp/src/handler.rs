//! The rmcp server handler: protocol in, [`McpServer`] calls out.

use std::sync::{Mutex, PoisonError};

use capability_host::Actor;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ResultType, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value};

use crate::{INSTRUCTIONS, SERVER_NAME};

/// Who an HTTP request acts as (set by the gate once the host authenticated it).
#[derive(Clone, Debug)]
pub(crate) struct Authenticated(pub Actor);

/// Where the handler is reached from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    Stdio,
    Http,
}

/// Connected clients that receive `notifications/tools/list_changed`: legacy sessions
/// (after `initialize`) and 2026-07-28 `subscriptions/listen` streams.
#[derive(Default)]
pub(crate) struct Peers(Mutex<Vec<Peer<RoleServer>>>, Mutex<Vec<SubscriptionSink>>);

impl Peers {
    fn add(&self, peer: Peer<RoleServer>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(peer);
    }

    fn listen(&self, sink: SubscriptionSink) {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sink);
    }

    fn unlisten(&self, id: &rmcp::model::RequestId) {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|s| s.id() != id);
    }

    pub(crate) async fn notify_tool_list_changed(&self) {
        let peers: Vec<Peer<RoleServer>> = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut alive = Vec::with_capacity(peers.len());
        for peer in peers {
            if peer.notify_tool_list_changed().await.is_ok() {
                alive.push(peer);
            }
        }
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = alive;
        let sinks: Vec<SubscriptionSink> = self
            .1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for sink in sinks {
            if sink.notify_tool_list_changed().await.is_err() {
                self.unlisten(sink.id());
            }
        }
    }
}

/// What a transport serves: the MCP server or the gateway.
pub(crate) trait Surface: Clone + Send + Sync + 'static {
    fn options(&self) -> &crate::ServeOptions;
    /// The host whose tokens authenticate HTTP callers.
    fn host(&self) -> std::sync::Arc<capability_host::Host>;
    /// The tools `actor` sees (blocking).
    fn list(&self, actor: &Actor) -> Vec<Tool>;
    /// A tool call as `actor` (blocking); always a tool result.
    fn call(&self, name: &str, arguments: Value, meta: Option<&Value>, actor: &Actor) -> Value;
    /// `call` blocks only inside [`crate::may_block`] (else only for CPU work and short
    /// writes), so that it may run in place on a runtime worker.
    const CALLS_IN_PLACE: bool = false;
    fn peers(&self) -> &Peers;
    /// No call is in flight.
    fn idle(&self) -> bool {
        self.host().calls_in_flight() == 0
    }
}

#[derive(Clone)]
pub(crate) struct Handler<S: Surface> {
    pub surface: S,
    pub transport: Transport,
}

fn internal(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(e.to_string(), None)
}

/// Whether this thread is a worker of a multi-threaded runtime (where
/// `tokio::task::block_in_place` may be called).
pub(crate) fn multi_threaded() -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
}

/// Runs blocking work (a capability may run sandboxed code for seconds): on this thread
/// under `block_in_place` on a multi-threaded runtime (the worker's core, with its other
/// tasks, moves to another thread meanwhile), else on the blocking pool.
async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, McpError> {
    if multi_threaded() {
        Ok(tokio::task::block_in_place(f))
    } else {
        tokio::task::spawn_blocking(f).await.map_err(internal)
    }
}

impl<S: Surface> Handler<S> {
    fn actor(&self, context: &RequestContext<RoleServer>) -> Result<Actor, McpError> {
        match self.transport {
            Transport::Stdio => Ok(self.surface.options().stdio_actor.clone()),
            Transport::Http => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|p| p.extensions.get::<Authenticated>())
                .map(|p| p.0.clone())
                .ok_or_else(|| McpError::invalid_request("unauthenticated request", None)),
        }
    }
}

/// A `tools/call` of `surface` as `actor`, as a tool result (`resultType: complete`): in
/// place when the surface allows it, else where blocking is allowed. Both stdio paths
/// (rmcp's handler and the lane of [`crate::stdio`]) and HTTP come here.
pub(crate) async fn tool_call<S: Surface>(
    surface: &S,
    actor: Actor,
    name: String,
    arguments: Map<String, Value>,
    meta: Map<String, Value>,
) -> Result<CallToolResult, McpError> {
    let arguments = Value::Object(arguments);
    let meta = Some(Value::Object(meta));
    let result = if S::CALLS_IN_PLACE && multi_threaded() {
        surface.call(&name, arguments, meta.as_ref(), &actor)
    } else {
        let surface = surface.clone();
        blocking(move || surface.call(&name, arguments, meta.as_ref(), &actor)).await?
    };
    let mut result: CallToolResult = serde_json::from_value(result).map_err(internal)?;
    result.result_type = Some(ResultType::COMPLETE);
    Ok(result)
}

impl<S: Surface> ServerHandler for Handler<S> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
        // The answer to an `initialize` asking for a revision this server does not know.
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let actor = self.actor(&context)?;
        let surface = self.surface.clone();
        let tools = blocking(move || surface.list(&actor)).await?;
        let mut result = ListToolsResult::with_all_items(tools);
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let actor = self.actor(&context)?;
        // rmcp hands the request's `_meta` over in the context.
        let meta = match request.meta {
            Some(m) if !m.0.0.is_empty() => m.0.0,
            _ => context.meta.0.0.clone(),
        };
        let arguments = request.arguments.unwrap_or_default();
        let result = tool_call(&self.surface, actor, request.name.into(), arguments, meta).await?;
        Ok(CallToolResponse::Complete(result))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.surface.peers().add(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        let mut accepted = rmcp::model::SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let sink = context.sink().clone();
        let id = sink.id().clone();
        self.surface.peers().listen(sink);
        context.cancelled().await;
        self.surface.peers().unlisten(&id);
        Ok(())
    }
}
