//! Redaction reaches every representation of a result, or the result is withheld (issue 30,
//! item 5): a pointer that leads into text (a secret in a sentence, or split across text
//! blocks) cannot be applied, so the output is not delivered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::governor;
use capability_policy::intercept::InterceptError;
use capability_policy::*;
use serde_json::{Value, json};

fn run(output: Value) -> Result<Value, InterceptError<String>> {
    let (g, _sink) = governor("agent", Environment::Prod);
    g.register_capability(GovernedCapability::new(
        "mcp.vault.get",
        CapabilityKind::McpTool,
    ));
    g.policies()
        .register(Policy::after("*", |_| Decision::redact(["/password"])).with_id("hide"));
    g.intercept(
        InterceptRequest::new("mcp.vault.get", ActionType::McpToolCall, json!({})),
        move |_| Ok(output),
    )
    .map(|r| r.output)
}

#[test]
fn a_pointer_into_text_withholds_the_output() {
    for output in [
        json!("password: hunter2"),
        json!(["{\"password\": \"hun", "ter2\"}"]),
        json!({"password": {"nested": "x"}, "note": "fine"}),
    ] {
        let shape = output.to_string();
        match run(output) {
            Ok(v) if shape.contains("nested") => {
                // A structured value at the pointer is redacted whole.
                assert_eq!(v["password"], pointer::REDACTED);
            }
            Err(InterceptError::Transform(e)) => {
                assert!(e.to_string().contains("withheld"), "{e}");
                assert!(!shape.contains("nested"));
            }
            other => panic!("{shape}: {other:?}"),
        }
    }
}

#[test]
fn structured_outputs_are_redacted_or_have_nothing_to_hide() {
    let v = run(json!({"password": "hunter2", "user": "ada"})).unwrap();
    assert_eq!(v, json!({"password": pointer::REDACTED, "user": "ada"}));
    let v = run(json!({"user": "ada", "texts": ["free text"]})).unwrap();
    assert_eq!(v, json!({"user": "ada", "texts": ["free text"]}));
    assert_eq!(run(json!("Echo: hello")).unwrap(), json!("Echo: hello"));
    assert!(pointer::hidden_in_text(&json!({"a": "the B is 7"}), "/a/b"));
    assert!(pointer::hidden_in_text(&json!([["a"], "k: 1"]), "/k"));
    assert!(pointer::hidden_in_text(
        &json!(["{\"pass", "word\": 1}"]),
        "/password"
    ));
    // Text that does not name the member has nothing to redact (an echo of other fields).
    assert!(!pointer::hidden_in_text(&json!("Echo: hello"), "/password"));
    assert!(!pointer::hidden_in_text(&json!({"a": "x y"}), "/a/b"));
    // An MCP result without structured content: the resource's text names it.
    let embedded = json!({"content": [{"type": "resource",
        "resource": {"uri": "file:///x", "text": "password = hunter2"}}]});
    assert!(pointer::hidden_in_text(&embedded, "/password"));
    assert!(!pointer::hidden_in_text(&embedded, "/token"));
    assert!(!pointer::hidden_in_text(&json!({"a": "x"}), "/a"));
    assert!(!pointer::hidden_in_text(
        &json!({"a": [{"b": 1}]}),
        "/a/*/b"
    ));
    assert!(!pointer::hidden_in_text(&json!({}), "/a/b"));
}
