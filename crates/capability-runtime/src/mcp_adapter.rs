//! The in-process MCP adapter: the registered capabilities as MCP tools, called through the
//! governed runtime (the reference `createMcpAdapter`).
//!
//! * [`list_tools`] gives `{tools: [...]}`, one [`to_mcp_tool`] projection per registered
//!   capability, in registration order.
//! * [`call_tool`] finds the capability whose projected name is `name` and runs
//!   [`CapabilityRuntime::invoke`] with `arguments` (default `{}`) and `approved`; every call
//!   is planned, authorized and receipted. Success gives `{content: [{type: "text", text:
//!   JSON.stringify(output ?? null)}], structuredContent: output, _meta: {receiptId,
//!   capabilityId}}`.
//! * Errors are results, never `Err`: `{isError: true, content: [{type: "text", text:
//!   <message>}]}`. An unknown name gives `Unknown capability tool: <name>`. Beyond the
//!   reference, a name that two registered ids project to (`a/b.c` and `a/b/c`) is refused
//!   as `Ambiguous capability tool: <name> (<id>, <id>)` instead of silently picking one, and
//!   a runtime error carries `_meta: {capabilityId, errorCode, receiptId?}` so that a host
//!   can tell `APPROVAL_REQUIRED` from a failure without parsing the text.

use std::sync::Arc;

use capability_core::json::to_js_string;
use capability_core::mcp::{mcp_tool_name, to_mcp_tool};
use serde_json::{Map, Value, json};

use crate::capability::Capability;
use crate::runtime::{CapabilityRuntime, ExecuteOptions};

/// `{tools: [...]}`: every registered capability projected as an MCP tool.
pub fn list_tools(runtime: &CapabilityRuntime) -> Value {
    let tools: Vec<Value> = runtime
        .registry()
        .list()
        .iter()
        .map(|c| to_mcp_tool(c.manifest()))
        .collect();
    json!({ "tools": tools })
}

fn error_result(text: String, meta: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("isError".into(), Value::Bool(true));
    m.insert("content".into(), json!([{"type": "text", "text": text}]));
    if let Some(meta) = meta {
        m.insert("_meta".into(), meta);
    }
    Value::Object(m)
}

/// Calls the tool `name` (see the module documentation for the result shapes).
pub fn call_tool(
    runtime: &CapabilityRuntime,
    name: &str,
    arguments: Option<Value>,
    approved: bool,
) -> Value {
    let matches: Vec<Arc<Capability>> = runtime
        .registry()
        .list()
        .into_iter()
        .filter(|c| mcp_tool_name(c.id()) == name)
        .collect();
    let capability = match matches.as_slice() {
        [] => return error_result(format!("Unknown capability tool: {name}"), None),
        [one] => one,
        many => {
            let ids: Vec<&str> = many.iter().map(|c| c.id()).collect();
            return error_result(
                format!("Ambiguous capability tool: {name} ({})", ids.join(", ")),
                None,
            );
        }
    };
    let id = capability.id();
    let options = ExecuteOptions {
        approved,
        ..ExecuteOptions::default()
    };
    match runtime.invoke(id, arguments.unwrap_or_else(|| json!({})), &options) {
        Ok(receipt) => {
            let output = receipt.output.clone().unwrap_or(Value::Null);
            let mut m = Map::new();
            m.insert(
                "content".into(),
                json!([{"type": "text", "text": to_js_string(&output)}]),
            );
            m.insert("structuredContent".into(), output);
            m.insert(
                "_meta".into(),
                json!({"receiptId": receipt.receipt_id, "capabilityId": id}),
            );
            Value::Object(m)
        }
        Err(e) => {
            let mut meta = json!({"capabilityId": id, "errorCode": e.code.as_str()});
            if let Some(receipt_id) = &e.receipt_id {
                meta["receiptId"] = json!(receipt_id);
            }
            error_result(e.message, Some(meta))
        }
    }
}
