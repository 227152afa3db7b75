//! The in-process MCP adapter (the reference's core test 11, extended): tool listing, calls
//! through the governed runtime, and errors as `isError` results.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::authorization::EffectPolicy;
use capability_runtime::CapabilityRuntime;
use capability_runtime::mcp_adapter::{call_tool, list_tools};
use capability_test_support::capabilities::add;
use serde_json::json;

fn runtime() -> CapabilityRuntime {
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .build();
    runtime.register(add("math/add", json!([]))).unwrap();
    runtime
}

#[test]
fn list_tools_projects_every_registered_capability() {
    let runtime = runtime();
    runtime
        .register(add("math/add-and-email", json!(["email.send"])))
        .unwrap();
    let listed = list_tools(&runtime);
    let tools = listed["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["name"], "math__add");
    assert_eq!(tools[0]["_meta"]["capability/id"], "math/add");
    assert_eq!(tools[0]["_meta"]["capability/version"], "1.0.0");
    assert_eq!(tools[0]["outputSchema"]["required"], json!(["result"]));
    assert_eq!(tools[1]["name"], "math__add-and-email");
    assert_eq!(tools[1]["annotations"]["destructiveHint"], true);
}

#[test]
fn call_tool_runs_through_the_runtime_and_returns_the_receipt() {
    let runtime = runtime();
    let result = call_tool(&runtime, "math__add", Some(json!({"a": 40, "b": 2})), false);
    assert!(result.get("isError").is_none(), "{result}");
    assert_eq!(result["structuredContent"], json!({"result": 42}));
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": "{\"result\":42}"}])
    );
    assert_eq!(result["_meta"]["capabilityId"], "math/add");
    let receipt_id = result["_meta"]["receiptId"].as_str().unwrap();
    let receipt = runtime.get_receipt(receipt_id).unwrap().unwrap();
    assert_eq!(receipt.output, Some(json!({"result": 42})));
}

#[test]
fn unknown_tools_are_error_results() {
    let runtime = runtime();
    let result = call_tool(&runtime, "math__subtract", None, false);
    assert_eq!(
        result,
        json!({"isError": true, "content": [{"type": "text", "text": "Unknown capability tool: math__subtract"}]})
    );
    // The capability id itself is not a tool name.
    let result = call_tool(&runtime, "math/add", Some(json!({"a": 1, "b": 2})), false);
    assert_eq!(
        result["content"][0]["text"],
        "Unknown capability tool: math/add"
    );
}

#[test]
fn runtime_errors_are_error_results_with_their_code() {
    let runtime = runtime();
    runtime
        .register(add("math/add-and-email", json!(["email.send"])))
        .unwrap();
    let result = call_tool(
        &runtime,
        "math__add-and-email",
        Some(json!({"a": 1, "b": 2})),
        false,
    );
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["content"][0]["text"],
        "approval required for: email.send"
    );
    assert_eq!(result["_meta"]["errorCode"], "APPROVAL_REQUIRED");
    let approved = call_tool(
        &runtime,
        "math__add-and-email",
        Some(json!({"a": 1, "b": 2})),
        true,
    );
    assert_eq!(approved["structuredContent"], json!({"result": 3}));

    // Missing arguments default to {} and fail input validation.
    let result = call_tool(&runtime, "math__add", None, false);
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["content"][0]["text"],
        "Input failed schema validation"
    );
    assert_eq!(result["_meta"]["errorCode"], "INVALID_INPUT");
}

#[test]
fn colliding_tool_names_are_refused_as_ambiguous() {
    let runtime = runtime();
    runtime.register(add("a/b.c", json!([]))).unwrap();
    runtime.register(add("a/b/c", json!([]))).unwrap();
    let result = call_tool(&runtime, "a__b__c", Some(json!({"a": 1, "b": 2})), false);
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["content"][0]["text"],
        "Ambiguous capability tool: a__b__c (a/b.c, a/b/c)"
    );
}
