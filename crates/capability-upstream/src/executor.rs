//! The executor of upstream tools: a governed call of `mcp.<server>.<tool>` crosses to its
//! server here, after the host planned, authorized and decided it.
//!
//! * **plan**: refused (`INVALID_INPUT`, before policies and approvals) when the input
//!   carries a `__proto__` member, or does not validate against the tool's pinned input
//!   schema, or that schema does not compile ([`crate::arguments`]). Else the plan's `data`
//!   names the server, the tool and the hash of the definition the call is planned against
//!   (`{"mcp": {"server", "tool", "definitionHash"}}`), so the plan fingerprint — and an
//!   approval bound to it — covers the exact definition, and the input checked is the
//!   input forwarded.
//! * **execute**: refused when the tool is gone, quarantined, or its definition is no
//!   longer the planned one (an approval granted for one definition never runs another);
//!   refused when a policy's `sandbox` floor is above what the server runs behind (a
//!   sandboxed child is `process`; anything else is not isolated by this host, tier
//!   `in_process`). Then `tools/call` with the plan's input (a non-object input is sent as
//!   `{value: input}`), bounded by the tighter of the call's and the server's timeouts.
//!   The output is the result mapped as the reference maps it ([`map_tool_result`]); a
//!   result with `isError` fails the call with its text. The upstream's own result goes back
//!   as [`Executed::reply`] (content items such as images survive when policies changed
//!   nothing). Notes for the audit event: `latencyUs` (the round trip) and `toolOutcome`
//!   (`ok`, `tool_error`, `upstream_error`). A server that crashed, stalled or (a child)
//!   hung or flooded is restarted with backoff. The error of a call the server failed is
//!   its message only: a crashed server's stderr goes to the operator, never into the
//!   receipt, the audit event or the caller's answer.
//! * The boundary record is `{"boundary": "mcp-upstream", "server", "tool", "transport":
//!   "stdio" | "http", "sandboxed": bool}`: the host claims nothing else about a server it
//!   reaches over a protocol.

use std::sync::Arc;
use std::time::{Duration, Instant};

use capability_core::binder::CancelToken;
use capability_core::plan::PlanDetails;
use capability_core::receipt::{Receipt, Verification};
use capability_core::{CapabilityError, ErrorCode};
use capability_exec::{
    BoundaryReport, CapabilityView, Executed, ExecutionFailure, ExecutionRequest, Executor,
    HookError, HookResult, IsolationTier, McpUpstreamReport,
};
use serde_json::{Map, Value, json};

use crate::catalog::{UpstreamTool, Upstreams};
use crate::session::{UpstreamError, map_tool_result};

/// Runs the upstream tools of an [`Upstreams`] catalog (see the module docs).
#[derive(Clone, Debug)]
pub struct ToolExecutor {
    upstreams: Arc<Upstreams>,
}

impl ToolExecutor {
    pub fn new(upstreams: Arc<Upstreams>) -> Self {
        ToolExecutor { upstreams }
    }

    fn tool(&self, capability: &dyn CapabilityView) -> Result<Arc<UpstreamTool>, HookError> {
        self.upstreams.tool(capability.id()).ok_or_else(|| {
            HookError::Capability(CapabilityError::new(
                ErrorCode::NotFound,
                format!("no upstream lists the tool of {}", capability.id()),
            ))
        })
    }

    /// The tier the server of `tool` runs behind.
    fn tier(&self, tool: &UpstreamTool) -> IsolationTier {
        match self.upstreams.config().server(&tool.server) {
            Some(s) if s.sandbox => IsolationTier::Process,
            _ => IsolationTier::InProcess,
        }
    }

    fn boundary(&self, tool: &UpstreamTool) -> BoundaryReport {
        let server = self.upstreams.config().server(&tool.server);
        McpUpstreamReport {
            server: tool.server.clone(),
            tool: tool.tool.clone(),
            transport: if server.is_some_and(|s| s.url.is_some()) {
                "http"
            } else {
                "stdio"
            },
            sandboxed: server.is_some_and(|s| s.sandbox),
        }
        .into()
    }
}

/// The definition hash a plan was made against.
fn planned_hash(plan_data: Option<&Value>) -> Option<&str> {
    plan_data?.pointer("/mcp/definitionHash")?.as_str()
}

fn refused(message: String) -> ExecutionFailure {
    HookError::Capability(CapabilityError::new(ErrorCode::PermissionDenied, message)).into()
}

impl Executor for ToolExecutor {
    fn name(&self) -> &str {
        "mcp-upstream"
    }

    fn plan(
        &self,
        capability: &dyn CapabilityView,
        input: &Value,
        _cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>> {
        let tool = self.tool(capability)?;
        tool.input
            .check(&format!("{}/{}", tool.server, tool.tool), input)?;
        Ok(Some(PlanDetails {
            data: Some(json!({"mcp": {
                "server": tool.server,
                "tool": tool.tool,
                "definitionHash": tool.hash,
            }})),
            ..PlanDetails::default()
        }))
    }

    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
        let tool = self.tool(request.capability)?;
        if tool.quarantined {
            return Err(refused(format!(
                "the definition of {}/{} changed since it was pinned; it is quarantined until a \
                 human reviews it (`cap mcp-pins list`) and accepts it with `cap mcp-pins \
                 accept {} {} --hash <its pending hash>`",
                tool.server, tool.tool, tool.server, tool.tool
            )));
        }
        if planned_hash(request.plan.data.as_ref()) != Some(tool.hash.as_str()) {
            return Err(refused(format!(
                "the definition of {}/{} is not the one this call was planned (and approved) \
                 against",
                tool.server, tool.tool
            )));
        }
        request.require_tier(self.tier(&tool))?;
        let isolation = self.boundary(&tool);
        let config = self.upstreams.config();
        let server = config.server(&tool.server);
        let mut timeout = server.map_or(Duration::from_secs(30), |s| config.timeout_of(s));
        if let Some(t) = request.timeout {
            timeout = timeout.min(t);
        }
        let session = self.upstreams.session(&tool.server).map_err(|e| {
            ExecutionFailure::new(HookError::named("UpstreamUnavailable", e.to_string()), None)
        })?;
        let started = Instant::now();
        let answer = session.call_tool(&tool.tool, &request.plan.input, timeout);
        let latency = started.elapsed();
        let mut notes = Map::new();
        notes.insert(
            "latencyUs".into(),
            json!(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX)),
        );
        let outcome = match &answer {
            Ok(raw) if raw.get("isError") == Some(&Value::Bool(true)) => "tool_error",
            Ok(_) => "ok",
            Err(_) => "upstream_error",
        };
        notes.insert("toolOutcome".into(), json!(outcome));
        let failed = |error: HookError, notes: Map<String, Value>| ExecutionFailure {
            error,
            isolation: Some(isolation.clone()),
            notes,
        };
        let raw = match answer {
            Ok(raw) => raw,
            Err(e) => {
                // A child that hung or overflowed is restarted; an HTTP upstream is dropped
                // only when it cannot be reached (one slow call is its own).
                let child = server.is_some_and(|s| s.command.is_some());
                let broken = match e {
                    UpstreamError::Exited { .. }
                    | UpstreamError::Unreachable(_)
                    | UpstreamError::Stalled => true,
                    UpstreamError::TooLarge | UpstreamError::Timeout(_) => child,
                    _ => false,
                };
                if broken {
                    self.upstreams.mark_failed(&tool.server, &e);
                }
                return Err(failed(
                    HookError::named("UpstreamError", e.to_string()),
                    notes,
                ));
            }
        };
        match map_tool_result(&raw) {
            Ok(output) => Ok(Executed {
                output,
                isolation,
                notes,
                reply: Some(raw),
            }),
            Err(e) => Err(failed(
                HookError::named("McpToolError", e.to_string()),
                notes,
            )),
        }
    }

    fn verify(
        &self,
        _request: &ExecutionRequest<'_>,
        _output: &Value,
    ) -> HookResult<Option<Verification>> {
        Ok(None)
    }

    fn can_rollback(&self, _capability: &dyn CapabilityView) -> bool {
        false
    }

    fn rollback(&self, _request: &ExecutionRequest<'_>, _receipt: &Receipt) -> HookResult<Value> {
        Err(HookError::msg(
            "an upstream MCP tool call cannot be rolled back",
        ))
    }
}
