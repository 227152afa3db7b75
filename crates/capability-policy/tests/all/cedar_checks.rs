//! Policy errors found before the first call: policies are validated against the types of
//! each capability they can apply to (MCP upstream tools included), a comparison between a
//! `decimal` and a `Long` is reported with the policy id, the expression and its fix, and
//! the same fix is in the error of a call that reaches such a policy anyway.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::{self, cedar_engine};
use capability_policy::cedar::{self, Diagnostic, PolicyFile, SchemaOptions, Severity};
use capability_policy::*;
use serde_json::{Value, json};

/// The engine's verdict on `action` before the call.
fn verdict_before(engine: &PolicyEngine, action: AgentAction) -> Verdict {
    common::verdict(engine, action, Stage::BeforeCapability, None)
}

/// An MCP upstream tool as the gateway registers it: by name, with governance and the
/// tool's `inputSchema`.
fn mcp_tool(server: &str, tool: &str, input_schema: Value) -> GovernedCapability {
    let mut g = Governance::new(CapabilityKind::McpTool);
    g.risk = RiskLevel::Medium;
    g.input_schema = Some(input_schema);
    g.metadata.insert("server".into(), json!(server));
    GovernedCapability::with_governance(format!("mcp.{server}.{tool}"), g)
}

/// `mcp.calc.add` takes two JSON Schema numbers, `mcp.calc.count` an integer, `mcp.notes.add`
/// a string named `a`, and `delete_user` (a Brane registration) has no schema.
fn capabilities() -> Vec<GovernedCapability> {
    vec![
        mcp_tool(
            "calc",
            "add",
            json!({"type": "object", "required": ["a", "b"],
                   "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        ),
        mcp_tool(
            "calc",
            "count",
            json!({"type": "object", "required": ["a"],
                   "properties": {"a": {"type": "integer"}}}),
        ),
        mcp_tool(
            "notes",
            "add",
            json!({"type": "object", "required": ["a"],
                   "properties": {"a": {"type": "string"}}}),
        ),
        GovernedCapability::new("delete_user", CapabilityKind::Tool),
    ]
}

fn schema(caps: &[GovernedCapability]) -> cedar::GeneratedSchema {
    cedar::generate_schema(caps, &SchemaOptions::default()).unwrap()
}

fn check(text: &str) -> Vec<Diagnostic> {
    let caps = capabilities();
    cedar::check_sources(&[PolicyFile::new("limits.cedar", text)], &schema(&caps)).diagnostics
}

fn errors(text: &str) -> Vec<Diagnostic> {
    check(text)
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .collect()
}

fn call(capability: &str, input: Value) -> AgentAction {
    let cap = capabilities()
        .into_iter()
        .find(|c| c.name == capability)
        .unwrap();
    AgentAction::new(ActionType::McpToolCall, Arc::new(cap), "agent").input(input)
}

const ALLOW_ALL: &str = "permit(principal, action, resource);\n";

#[test]
fn a_decimal_compared_with_a_long_is_reported_with_the_policy_expression_and_fix() {
    let text = "@id(\"big-sum\")\nforbid(principal, action, resource == Capability::\"mcp.calc.add\")\nwhen { context.input.a > 100 };\n";
    let d = errors(text);
    assert_eq!(d.len(), 1, "{d:#?}");
    let d = &d[0];
    assert_eq!(
        (d.file.as_str(), d.line, d.column),
        ("limits.cedar", 3, 8),
        "points at the decimal operand"
    );
    assert_eq!(d.policy_id.as_deref(), Some("big-sum"));
    assert_eq!(d.expression.as_deref(), Some("context.input.a > 100"));
    assert_eq!(
        d.fix.as_deref(),
        Some(r#"context.input.a.greaterThan(decimal("100.0"))"#)
    );
    assert_eq!(d.capabilities, vec!["mcp.calc.add".to_string()]);
    assert!(
        d.message.contains("expected Long but saw decimal"),
        "{}",
        d.message
    );
    assert_eq!(
        d.to_string(),
        "limits.cedar:3:8: error: unexpected type: expected Long but saw decimal (for capability `mcp.calc.add`); in policy `big-sum`: `context.input.a > 100`; fix: `context.input.a.greaterThan(decimal(\"100.0\"))`"
    );
    // A policy without @id is reported under the id its decisions carry.
    let d = errors(
        "forbid(principal, action, resource == Capability::\"mcp.calc.add\")\nwhen { 10 <= context.input.b };\n",
    );
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].policy_id.as_deref(), Some("limits.cedar:1"));
    assert_eq!(d[0].expression.as_deref(), Some("10 <= context.input.b"));
    assert_eq!(
        d[0].fix.as_deref(),
        Some(r#"context.input.b.greaterThanOrEqual(decimal("10.0"))"#)
    );
}

#[test]
fn equality_between_a_decimal_and_a_long_is_reported_with_its_fix() {
    // `==` never errors in Cedar: it is silently false. Validation says so.
    let d = errors(
        "@id(\"exact\") forbid(principal, action, resource == Capability::\"mcp.calc.add\") when { context.input.a == 100 };",
    );
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].expression.as_deref(), Some("context.input.a == 100"));
    assert_eq!(
        d[0].fix.as_deref(),
        Some(r#"context.input.a == decimal("100.0")"#)
    );
    // A Long compared with a decimal literal gets the exact integer bound.
    let d = errors(
        "@id(\"count\") forbid(principal, action, resource == Capability::\"mcp.calc.count\") when { context.input.a >= decimal(\"2.5\") };",
    );
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(
        d[0].expression.as_deref(),
        Some(r#"context.input.a >= decimal("2.5")"#)
    );
    assert_eq!(d[0].fix.as_deref(), Some("context.input.a >= 3"));
}

#[test]
fn the_same_comparison_on_an_integer_is_accepted_and_evaluates() {
    let text = format!(
        "{ALLOW_ALL}@id(\"big-count\")\nforbid(principal, action, resource == Capability::\"mcp.calc.count\")\nwhen {{ context.input.a > 100 }};\n"
    );
    assert!(check(&text).is_empty(), "{:#?}", check(&text));
    let engine = cedar_engine("limits.cedar", &text);
    let v = verdict_before(&engine, call("mcp.calc.count", json!({"a": 150})));
    assert_eq!(v.kind, DecisionType::Deny);
    assert_eq!(v.decision.policy_id.as_deref(), Some("big-count"));
    assert_eq!(
        verdict_before(&engine, call("mcp.calc.count", json!({"a": 50}))).kind,
        DecisionType::Allow
    );
    // `150.0` is an integer for JSON Schema: a Long, as the schema says, not a decimal.
    let v = verdict_before(&engine, call("mcp.calc.count", json!({"a": 150.0})));
    assert_eq!(v.decision.policy_id.as_deref(), Some("big-count"));
    assert!(v.decision.code.is_none(), "{:?}", v.decision);
}

#[test]
fn the_suggested_fix_validates_and_evaluates() {
    let broken = "@id(\"big-sum\")\nforbid(principal, action, resource == Capability::\"mcp.calc.add\")\nwhen { context.input.a > 100 };\n";
    let d = errors(broken);
    let (expression, fix) = (d[0].expression.clone().unwrap(), d[0].fix.clone().unwrap());
    let fixed = format!("{ALLOW_ALL}{}", broken.replace(&expression, &fix));
    assert!(check(&fixed).is_empty(), "{:#?}", check(&fixed));
    let engine = cedar_engine("limits.cedar", &fixed);
    for (a, denied) in [
        (json!(150.5), true),
        // An integral value of a `number` field is a decimal too: same result as 150.0.
        (json!(150), true),
        (json!(100.0001), true),
        (json!(100), false),
        (json!(50), false),
        (json!(-3.25), false),
    ] {
        let v = verdict_before(&engine, call("mcp.calc.add", json!({"a": a, "b": 1})));
        assert_eq!(v.kind == DecisionType::Deny, denied, "a = {a}: {v:?}");
        if denied {
            assert_eq!(v.decision.policy_id.as_deref(), Some("big-sum"));
            assert!(v.decision.code.is_none(), "a = {a}: {:?}", v.decision);
        }
    }
}

#[test]
fn a_call_that_reaches_the_comparison_anyway_gets_the_fix_in_its_error() {
    // Loaded without checking: the forbid fails at evaluation and denies (fail closed), for
    // an integral value as much as for a fractional one (a `number` is always a decimal).
    for annotations in ["", "@decision(\"approval_required\") "] {
        let text = format!(
            "{ALLOW_ALL}@id(\"big-sum\") {annotations}forbid(principal, action, resource == Capability::\"mcp.calc.add\") when {{ context.input.a > 100 }};"
        );
        let engine = cedar_engine("limits.cedar", &text);
        for a in [json!(150.5), json!(50)] {
            let v = verdict_before(&engine, call("mcp.calc.add", json!({"a": a, "b": 1})));
            assert_eq!(v.kind, DecisionType::Deny, "{annotations}a = {a}");
            assert_eq!(v.decision.code.as_deref(), Some("policy_error"));
            let reason = v.decision.reason.clone().unwrap_or_default();
            assert!(
                reason.contains("type error: expected long, got decimal; `context.input.a` is a decimal: write `context.input.a.greaterThan(decimal(\"100.0\"))` instead of `context.input.a > 100`"),
                "{reason}"
            );
        }
    }
    // The Cedar error list names the fix too.
    let cedar = cedar::CedarPolicies::from_sources(&[PolicyFile::new(
        "limits.cedar",
        "permit(principal, action, resource) when { context.input.a.greaterThan(decimal(\"1.5\")) };",
    )])
    .unwrap();
    let out = cedar
        .evaluate(&PolicyContext::new(
            call("mcp.calc.count", json!({"a": 7})),
            Stage::BeforeCapability,
        ))
        .unwrap();
    assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
    assert!(
        out.errors[0].contains(
            "write `context.input.a > 1` instead of `context.input.a.greaterThan(decimal(\"1.5\"))`"
        ),
        "{}",
        out.errors[0]
    );
}

#[test]
fn each_capability_is_checked_with_its_own_types() {
    // `a` is a number for mcp.calc.add, an integer for mcp.calc.count and a string for
    // mcp.notes.add: the union schema cannot type it (the property is left out, and `has`
    // is then false), so validating against it finds nothing.
    let text = "@id(\"any-a\") forbid(principal, action, resource) when { context.input has a && context.input.a > 100 };";
    let caps = capabilities();
    let s = schema(&caps);
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("input.a") && w.contains("disagree")),
        "{:?}",
        s.warnings
    );
    let files = [PolicyFile::new("limits.cedar", text)];
    assert!(cedar::validate_sources(&files, Some(&s.schema)).is_ok());
    // Per capability, the number and the string are reported, each with its capability.
    let report = cedar::check_sources(&files, &s);
    let d = &report.diagnostics;
    assert_eq!(d.len(), 2, "{d:#?}");
    let by_cap = |name: &str| {
        d.iter()
            .find(|d| d.capabilities == vec![name.to_string()])
            .unwrap_or_else(|| panic!("{name}: {d:#?}"))
    };
    let number = by_cap("mcp.calc.add");
    assert!(number.message.contains("saw decimal"), "{}", number.message);
    assert_eq!(
        number.fix.as_deref(),
        Some(r#"context.input.a.greaterThan(decimal("100.0"))"#)
    );
    let string = by_cap("mcp.notes.add");
    assert!(string.message.contains("saw String"), "{}", string.message);
    assert_eq!(string.fix, None, "no number fix for a string");
    assert!(!report.is_ok());
    assert!(
        report.render().contains("1 policies, 2 errors, 0 warnings"),
        "{}",
        report.render()
    );

    // Required properties need no `has` (Cedar checks the optional ones).
    assert!(errors("forbid(principal, action, resource == Capability::\"mcp.calc.count\") when { context.input.a > 1 };").is_empty());
    let d = errors(
        "forbid(principal, action, resource == Capability::\"delete_user\") when { context.input.a > 1 };",
    );
    assert_eq!(
        d.len(),
        1,
        "a capability without schema is typed by the union: {d:#?}"
    );
}

#[test]
fn opening_conditions_on_the_resource_narrow_the_capabilities_checked() {
    // Only the calc server's tools can reach `context.input.a`: the string of mcp.notes.add
    // and the missing `a` of delete_user are not errors.
    let d = errors(
        "@id(\"calc\") forbid(principal, action, resource) when { resource.server == \"calc\" && context.input.a > 100 };",
    );
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].capabilities, vec!["mcp.calc.add".to_string()]);
    assert!(d[0].fix.is_some());
    let d = errors(
        "forbid(principal, action, resource) when { resource.name like \"mcp.calc.c*\" } when { context.input.a > 100 };",
    );
    assert!(d.is_empty(), "{d:#?}");
    // A condition on anything else first proves nothing: every capability is checked.
    let d = errors(
        "forbid(principal, action, resource) when { context.stage == \"x\" && resource.server == \"calc\" && context.input.a > 100 };",
    );
    let mut caps: Vec<String> = d.iter().flat_map(|d| d.capabilities.clone()).collect();
    caps.sort();
    caps.dedup();
    assert_eq!(
        caps,
        vec!["delete_user", "mcp.calc.add", "mcp.notes.add"],
        "{d:#?}"
    );
    // A problem every capability shows is not attributed to any.
    let d = errors(
        "forbid(principal, action, resource) when { resource.riskLevl > 1 && context.input has a };",
    );
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(d[0].capabilities.is_empty(), "{d:#?}");
}

#[test]
fn checking_loaded_policies_follows_the_capabilities_registered_later() {
    let text = format!(
        "{ALLOW_ALL}@id(\"big-sum\") forbid(principal, action, resource == Capability::\"mcp.calc.add\") when {{ context.input.a > 100 }};"
    );
    let policies =
        cedar::CedarPolicies::from_sources(&[PolicyFile::new("limits.cedar", text.as_str())])
            .unwrap();
    // Before the upstream lists its tools, the policy names an unknown capability: said as
    // a warning, and `a` is typed by the union of what is registered (it is not there).
    let builtin = [GovernedCapability::new("delete_user", CapabilityKind::Tool)];
    let before = policies.check(&schema(&builtin));
    let warning = before
        .diagnostics
        .iter()
        .find(|d| d.severity == Severity::Warning)
        .unwrap_or_else(|| panic!("{}", before.render()));
    assert!(
        warning
            .message
            .starts_with("`mcp.calc.add` is not a registered capability"),
        "{warning}"
    );
    assert_eq!(warning.policy_id.as_deref(), Some("big-sum"));
    assert!(
        before.diagnostics.iter().all(|d| d.fix.is_none()),
        "{}",
        before.render()
    );
    // Once listed, the same loaded policies are reported with the fix.
    let after = policies.check(&schema(&capabilities()));
    assert!(!after.is_ok());
    assert_eq!(after.diagnostics.len(), 1, "{}", after.render());
    assert_eq!(after.diagnostics[0].policy_id.as_deref(), Some("big-sum"));
    assert!(after.diagnostics[0].fix.is_some());
    assert_eq!(
        after.diagnostics,
        cedar::check_sources(
            &[PolicyFile::new("limits.cedar", text)],
            &schema(&capabilities())
        )
        .diagnostics
    );
}

#[test]
fn nullable_numbers_are_decimals_at_runtime_as_in_the_schema() {
    // `["number", "null"]` is a decimal in the schema; an integral value must be one too,
    // or the validated policy would fail on `150` and work on `150.5`.
    let cap = mcp_tool(
        "pay",
        "refund",
        json!({"type": "object", "properties": {"usd": {"type": ["number", "null"]}}}),
    );
    let text = format!(
        "{ALLOW_ALL}@id(\"big\") forbid(principal, action, resource) when {{ context.input has usd && context.input.usd.greaterThan(decimal(\"100.0\")) }};"
    );
    let caps = [cap.clone()];
    assert!(
        cedar::check_sources(&[PolicyFile::new("p.cedar", text.as_str())], &schema(&caps))
            .diagnostics
            .is_empty()
    );
    let engine = cedar_engine("p.cedar", &text);
    let cap = Arc::new(cap);
    for (usd, kind) in [
        (json!(150), DecisionType::Deny),
        (json!(150.5), DecisionType::Deny),
        (json!(50), DecisionType::Allow),
        (Value::Null, DecisionType::Allow),
    ] {
        let v = verdict_before(
            &engine,
            AgentAction::new(ActionType::McpToolCall, Arc::clone(&cap), "agent")
                .input(json!({"usd": usd})),
        );
        assert_eq!(v.kind, kind, "usd = {usd}: {v:?}");
        assert!(v.decision.code.is_none(), "usd = {usd}: {:?}", v.decision);
    }
    // Its own schema types `usd` as an optional decimal; unknown names have none.
    let s = schema(&caps);
    let own = s.capability_json("mcp.pay.refund").unwrap();
    assert_eq!(
        own[""]["commonTypes"]["Input"]["attributes"]["usd"],
        json!({"type": "Extension", "name": "decimal", "required": false})
    );
    assert!(cedar::parse_schema(&own.to_string()).is_ok());
    assert!(s.capability_json("mcp.pay.other").is_none());
}
