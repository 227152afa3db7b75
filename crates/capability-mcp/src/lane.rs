//! `tools/call` answered beside rmcp, by both transports' lanes (stdio: [`crate::stdio`];
//! streamable HTTP: `http::lane`): what a call the lanes take looks like, and the answer
//! rmcp would write for it.
//!
//! A lane takes a call only when it knows every part of it ([`call_of`]); anything else is
//! rmcp's. The surface call and the conversion of its result are the handler's own
//! ([`crate::handler::tool_call`]) and the answer follows the rules rmcp applies for a peer
//! that negotiated its revision with `initialize` ([`answer`]), so a client cannot tell
//! which path answered.

use rmcp::model::{
    CallToolResponse, CallToolResult, ErrorData, RequestId, ServerJsonRpcMessage, ServerResult,
};
use serde_json::{Map, Value};

/// A `tools/call` a lane answers.
#[derive(Debug, PartialEq)]
pub(crate) struct Call {
    pub id: RequestId,
    pub name: String,
    pub arguments: Map<String, Value>,
    pub meta: Map<String, Value>,
}

/// The call in a `tools/call` message, when a lane knows every part of it: an id, a string
/// `name`, an object `arguments` (or none), an object `_meta` without protocol fields (a
/// request that declares its own revision is rmcp's), and nothing else. The caller checked
/// `jsonrpc` and `method`.
pub(crate) fn call_of(msg: &mut Map<String, Value>) -> Option<Call> {
    if msg
        .keys()
        .any(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "method" | "params"))
    {
        return None;
    }
    let id: RequestId = serde_json::from_value(msg.remove("id")?).ok()?;
    let Value::Object(mut params) = msg.remove("params")? else {
        return None;
    };
    if params
        .keys()
        .any(|k| !matches!(k.as_str(), "name" | "arguments" | "_meta"))
    {
        return None;
    }
    let Value::String(name) = params.remove("name")? else {
        return None;
    };
    let arguments = match params.remove("arguments") {
        None => Map::new(),
        Some(Value::Object(a)) => a,
        Some(_) => return None,
    };
    let meta = match params.remove("_meta") {
        None => Map::new(),
        Some(Value::Object(m)) if !m.keys().any(|k| k.starts_with("io.modelcontextprotocol/")) => m,
        Some(_) => return None,
    };
    Some(Call {
        id,
        name,
        arguments,
        meta,
    })
}

/// The answer to a call, as rmcp writes one to a peer that negotiated with `initialize` (no
/// `resultType`, an object-only `structuredContent`): one JSON-RPC message.
pub(crate) fn answer(id: RequestId, result: Result<CallToolResult, ErrorData>) -> Vec<u8> {
    let message = match result {
        Ok(result) => {
            let mut result = ServerResult::from(CallToolResponse::Complete(result));
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            ServerJsonRpcMessage::response(result, id)
        }
        Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
    };
    serde_json::to_vec(&message).unwrap_or_else(|e| {
        // Serializing rmcp's own types does not fail; should it, the client gets an error.
        let error = ErrorData::internal_error(format!("cannot write the answer: {e}"), None);
        serde_json::to_vec(&ServerJsonRpcMessage::error(error, None)).unwrap_or_default()
    })
}
