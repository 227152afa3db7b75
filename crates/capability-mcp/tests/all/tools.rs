//! The tools a server lists (the bootstrap tools, then the exposed capabilities) and a
//! projected call: governed, receipted, and an unknown tool is a tool error.

use std::sync::Arc;

use capability_host::{Actor, Host, HostConfig, Principal};
use capability_mcp::{McpServer, ServeOptions};
use serde_json::json;

fn server(options: ServeOptions) -> (tempfile::TempDir, McpServer) {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig {
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
    let operator = Principal::operator("o");
    assert!(s.host().receipt(&operator, receipt_id).is_ok());
    let unknown = s.call("text__normalize", json!({}), None, &actor);
    assert_eq!(unknown["isError"], true);
    assert_eq!(
        unknown["content"][0]["text"],
        "Unknown capability tool: text__normalize"
    );
}
