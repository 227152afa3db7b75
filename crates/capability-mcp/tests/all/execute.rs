//! One capability, one governed identity, whatever MCP path reaches it: `capability_execute`
//! and `capability_compose` are governed as the projected tool is (Cedar action
//! `mcp_tool_call`, the same labels), run only what `--expose` / `--expose-installed` allow
//! when given, and refuse arguments carrying `__proto__` (which the canonical form, and so
//! every hash, approval and receipt, leaves out) as the projected tool does.

use std::sync::Arc;

use capability_host::{Actor, Host, HostConfig, Principal};
use capability_mcp::{McpServer, ServeOptions};
use serde_json::{Value, json};

fn server(policy: &str, options: ServeOptions) -> (tempfile::TempDir, McpServer) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.cedar");
    std::fs::write(&file, policy).unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        policies: vec![file],
        ..HostConfig::default()
    })
    .unwrap();
    (dir, McpServer::new(Arc::new(host), options))
}

fn expose(patterns: &[&str]) -> ServeOptions {
    ServeOptions {
        expose: patterns.iter().map(|p| p.to_string()).collect(),
        ..ServeOptions::default()
    }
}

fn bot() -> Actor {
    Actor::agent("bot")
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn execute(s: &McpServer, id: &str, input: Value) -> Value {
    s.call(
        "capability_execute",
        json!({"id": id, "input": input}),
        None,
        &bot(),
    )
}

/// How many receipts the host holds.
fn receipts(s: &McpServer) -> usize {
    s.host().flush();
    s.host()
        .receipts(&Principal::operator("o"), &Default::default())
        .unwrap()
        .receipts
        .len()
}

const NO_SLUGS: &str = r#"
permit(principal, action, resource);

@id("no-slugs") @reason("bots may not slugify")
forbid(principal == Agent::"bot", action == Action::"mcp_tool_call",
       resource == Capability::"text/slugify");
"#;

/// A forbid on `mcp_tool_call` for a capability holds on every path: the projected tool,
/// `capability_execute` by id and by query, and a composition step.
#[test]
fn a_forbid_on_mcp_tool_call_holds_on_capability_execute() {
    let (_d, s) = server(NO_SLUGS, expose(&["text/*"]));
    let projected = s.call("text__slugify", json!({"text": "A B"}), None, &bot());
    assert_eq!(projected["isError"], true, "{projected}");
    assert!(text(&projected).contains("bots may not slugify"));
    for id in ["text/slugify", "slugify"] {
        let r = execute(&s, id, json!({"text": "A B"}));
        assert_eq!(r["isError"], true, "{id}: {r}");
        assert!(text(&r).contains("bots may not slugify"), "{id}: {r}");
    }
    let composed = s.call(
        "capability_compose",
        json!({"intent": "normalize text then slugify it", "input": {"text": "A B"}}),
        None,
        &bot(),
    );
    assert_eq!(composed["isError"], true, "{composed}");
    assert!(
        composed.to_string().contains("bots may not slugify"),
        "{composed}"
    );
    // The policy is about the bot: another agent runs it on both paths.
    let other = Actor::agent("carol");
    let r = s.call(
        "capability_execute",
        json!({"id": "text/slugify", "input": {"text": "A B"}}),
        None,
        &other,
    );
    assert_ne!(r["isError"], true, "{r}");
}

const SECRETS_NEED_A_HUMAN: &str = r#"
permit(principal, action, resource);

@id("secrets") @reason("secrets need a human") @decision("approval_required")
forbid(principal, action == Action::"mcp_tool_call", resource)
when { context.input has text && context.input.text like "*secret*" };
"#;

/// An approval required of `mcp_tool_call` is required of `capability_execute` and of a
/// composition's steps too.
#[test]
fn an_approval_on_mcp_tool_call_holds_on_capability_execute() {
    let (_d, s) = server(SECRETS_NEED_A_HUMAN, ServeOptions::default());
    let before = receipts(&s);
    let r = execute(&s, "text/slugify", json!({"text": "a secret plan"}));
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(
        r["structuredContent"]["approval"]["reason"], "secrets need a human",
        "{r}"
    );
    let composed = s.call(
        "capability_compose",
        json!({"intent": "normalize text then slugify it", "input": {"text": "a secret"}}),
        None,
        &bot(),
    );
    assert_eq!(
        composed["structuredContent"]["approval"]["reason"], "secrets need a human",
        "{composed}"
    );
    assert_eq!(receipts(&s), before, "something ran");
    let fine = execute(&s, "text/slugify", json!({"text": "a plan"}));
    assert_ne!(fine["isError"], true, "{fine}");
}

/// With `--expose`, `capability_execute` and `capability_compose` run only exposed
/// capabilities (by id or by a query that resolves to one); `--expose-installed`, or no
/// exposure flag, leaves every capability to the policies.
#[test]
fn capability_execute_runs_only_what_expose_allows() {
    let permit = "permit(principal, action, resource);";
    let (_d, s) = server(permit, expose(&["text/*"]));
    let before = receipts(&s);
    for id in ["data/sha256", "json/get"] {
        let r = execute(&s, id, json!({"text": "x", "value": {}, "path": "a"}));
        assert_eq!(r["isError"], true, "{id}: {r}");
        assert!(text(&r).contains("not exposed"), "{id}: {r}");
    }
    let by_query = execute(&s, "sha256 digest of text", json!({"text": "x"}));
    assert_eq!(by_query["isError"], true, "{by_query}");
    // A composition is made of exposed capabilities only: here none digests, a gap.
    let composed = s.call(
        "capability_compose",
        json!({"intent": "slugify text then sha256 digest", "input": {"text": "A B"}}),
        None,
        &bot(),
    );
    assert!(!composed.to_string().contains("data/sha256"), "{composed}");
    assert_ne!(
        composed["structuredContent"]["route"], "composition",
        "{composed}"
    );
    assert_eq!(receipts(&s), before, "a capability outside --expose ran");
    let ok = execute(&s, "text/slugify", json!({"text": "A B"}));
    assert_ne!(ok["isError"], true, "{ok}");

    for options in [
        ServeOptions {
            expose_all: true,
            ..ServeOptions::default()
        },
        ServeOptions::default(),
    ] {
        let (_d, s) = server(permit, options);
        let r = execute(&s, "data/sha256", json!({"value": "x"}));
        assert_ne!(r["isError"], true, "{r}");
    }
}

/// Arguments carrying `__proto__` are refused on the projected tool, on
/// `capability_execute` and on `capability_compose` before anything runs.
#[test]
fn proto_arguments_are_refused_on_every_mcp_path() {
    let (_d, s) = server("permit(principal, action, resource);", expose(&["text/*"]));
    let before = receipts(&s);
    let smuggled = json!({"text": "A B", "__proto__": {"text": "other"}});
    let nested = json!({"text": "A B", "options": [{"__proto__": {"polluted": true}}]});
    for input in [&smuggled, &nested] {
        let projected = s.call("text__slugify", input.clone(), None, &bot());
        assert_eq!(projected["isError"], true, "{projected}");
        assert_eq!(
            projected["_meta"]["errorCode"], "INVALID_INPUT",
            "{projected}"
        );
        let r = execute(&s, "text/slugify", input.clone());
        assert_eq!(r["isError"], true, "{r}");
        assert!(text(&r).contains("__proto__"), "{r}");
        let composed = s.call(
            "capability_compose",
            json!({"intent": "normalize text then slugify it", "input": input}),
            None,
            &bot(),
        );
        assert_eq!(composed["isError"], true, "{composed}");
    }
    assert_eq!(receipts(&s), before, "a document carrying __proto__ ran");
}
