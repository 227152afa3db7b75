//! # capability-upstream
//!
//! Upstream MCP servers as a capability source and an executor below the host: what
//! `cap mcp-gateway` puts in front of its clients, and `cap exec mcp.<server>.<tool>
//! --gateway` calls directly. The host registers every upstream tool as the capability
//! `mcp.<server>.<tool>` and runs a call like any other (plan, effect authorization,
//! policies, the call as the execution step, receipt, audit); this crate holds what is
//! specific to MCP upstreams:
//!
//! * [`config`]: the gateway config (`gateway.toml`): servers (stdio commands, sandboxed or
//!   not, or streamable-HTTP URLs), their effects, grants, risks, timeouts, tool filters,
//!   and the gateway's and each tenant's policy files;
//! * [`session`]: clients of one server over stdio or streamable HTTP ([`McpSession`]),
//!   safe against servers that crash, hang, flood or send garbage;
//! * [`pins`]: tool definitions pinned on first sight (every member), a changed one
//!   quarantined until a human accepts it by the hash they reviewed;
//! * [`arguments`]: what a call's arguments must be before anything is decided about them
//!   (no `__proto__` member, valid against the pinned input schema);
//! * [`catalog`]: the [`Upstreams`] catalog (sessions restarted with backoff, tools listed,
//!   pinned and named);
//! * [`executor`]: [`ToolExecutor`], the execution step of a governed upstream call;
//! * [`import`]: `cap mcp-import` (the reference's `capabilitiesFromMcpTools`).
//!
//! ```no_run
//! use std::sync::Arc;
//! use capability_upstream::{GatewayConfig, ToolExecutor, Upstreams};
//! let config = GatewayConfig::load("gateway.toml".as_ref())?;
//! let upstreams = Arc::new(Upstreams::new(config, "mcp-pins.json".as_ref(), None)?);
//! upstreams.refresh(true); // start the servers, list and pin their tools
//! for tool in upstreams.tools().iter() {
//!     // The host registers `tool.manifest(true)` run by `ToolExecutor::new(upstreams)`.
//!     println!("{} ({})", tool.capability, tool.downstream);
//! }
//! # let _ = ToolExecutor::new(Arc::clone(&upstreams));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod arguments;
pub mod catalog;
pub mod config;
pub mod executor;
pub mod import;
pub mod pins;
pub mod session;

pub use arguments::{InputSchema, check_no_proto, proto_member, proto_member_of, refuse_proto};
pub use catalog::{Unavailable, UpstreamTool, Upstreams, downstream_name, glob_match};
pub use config::{ConfigError, Connect, GatewayConfig, ServerConfig, TenantConfig, start};
pub use executor::ToolExecutor;
pub use import::{capabilities_from_mcp_tools, import_stdio};
pub use pins::{PinState, Pins, PinsError};
pub use session::{
    HttpSession, McpSession, StdioSession, ToolError, UpstreamError, map_tool_result,
};

/// Runs `f`, which may block for long (waiting for an upstream, starting one): on a worker
/// of a multi-threaded Tokio runtime the worker's other tasks move to another thread
/// meanwhile (`block_in_place`); elsewhere `f` just runs. A call runs in place on the
/// worker that read it and goes through this only where it waits, so that a quick call
/// costs no hand-off between threads.
pub fn may_block<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}
