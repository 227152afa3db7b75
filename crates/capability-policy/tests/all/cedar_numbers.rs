//! Values Cedar cannot represent never make a policy less strict: a number beyond Cedar's
//! `Long` or `decimal` range, or with more than 4 decimal places, is present in the request
//! (as a string of its digits), so a guard that compares it cannot be evaluated and a
//! `forbid` denies; costs are rounded up. The README's own pattern,
//! `context.input has amount && context.input.amount > 1000`, is the first case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::{cedar_engine, verdict};
use capability_policy::*;
use serde_json::{Value, json};

const GUARD: &str = r#"@id("allow") permit(principal, action, resource);
@id("big-amount") @reason("amount too large")
forbid(principal, action, resource) when { context.input has amount && context.input.amount > 1000 };
@id("small-refund") @reason("negative refunds")
forbid(principal, action, resource) when { context.input has refund && context.input.refund < -1000 };
@id("usd-guard") @reason("usd too large")
forbid(principal, action, resource) when { context.input has usd && context.input.usd.greaterThan(decimal("1000.0")) };
@id("costly") @reason("too expensive")
forbid(principal, action, resource) when { context has estimatedCostUsd && context.estimatedCostUsd.greaterThan(decimal("5.0")) };
@id("nested") @reason("nested amount")
forbid(principal, action, resource) when { context.input has order && context.input.order has total && context.input.order.total > 1000 };
"#;

fn cap(schema: Option<Value>) -> Arc<GovernedCapability> {
    let mut c = GovernedCapability::new("pay", CapabilityKind::Tool);
    if let Some(s) = schema {
        c = c.input_schema(s);
    }
    Arc::new(c)
}

fn decide(engine: &PolicyEngine, cap: &Arc<GovernedCapability>, input: Value) -> Verdict {
    let action = AgentAction::new(ActionType::ToolCall, Arc::clone(cap), "bot").input(input);
    verdict(engine, action, Stage::BeforeCapability, None)
}

/// Numbers as JSON text, parsed as a request body would be.
fn input(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn numbers_beyond_cedar_never_pass_a_numeric_guard() {
    let engine = cedar_engine("guard.cedar", GUARD);
    let untyped = cap(None);
    let typed = cap(Some(json!({"type": "object", "properties": {
        "amount": {"type": "integer"}, "usd": {"type": "number"}, "refund": {"type": "integer"}
    }})));
    let number_typed = cap(Some(json!({"type": "object", "properties": {
        "amount": {"type": "number"}
    }})));
    for c in [&untyped, &typed] {
        for text in [
            r#"{"amount": 1e300}"#,
            r#"{"amount": 10000000000000000000}"#,
            r#"{"amount": 1e16}"#,
            r#"{"amount": 1000.00001}"#,
            r#"{"amount": 1.7976931348623157e308}"#,
            r#"{"refund": -1e300}"#,
            r#"{"refund": -10000000000000000000}"#,
            r#"{"usd": 1e300}"#,
            r#"{"usd": 922337203685477.5808}"#,
            r#"{"usd": 1000.00001}"#,
            r#"{"order": {"total": 1e300, "lines": [1, 1e300]}}"#,
        ] {
            let v = decide(&engine, c, input(text));
            assert!(v.is_denied(), "{} {text}: {:?}", c.name, v.decision);
        }
    }
    // A schema that types the amount as a decimal: the same.
    for text in [r#"{"amount": 1e300}"#, r#"{"amount": 1e16}"#] {
        let v = decide(&engine, &number_typed, input(text));
        assert!(v.is_denied(), "{text}: {:?}", v.decision);
    }
    // The values the guard is about still decide as before.
    for (text, denied) in [
        (r#"{"amount": 1001}"#, true),
        (r#"{"amount": 999}"#, false),
        (r#"{"amount": 1000}"#, false),
        (r#"{"amount": 1000.5}"#, false), // a decimal where a Long is compared: Cedar errs...
        (r#"{"usd": 0.30000000000000004}"#, false),
        (r#"{"usd": 1000.0001}"#, true),
        (r#"{"usd": 999.9999}"#, false),
        (r#"{"usd": 0.1}"#, false),
        (r#"{"order": {"total": 1000000}}"#, true),
        (r#"{"order": {"total": 2, "lines": [1e300]}}"#, false),
        (r#"{}"#, false),
    ] {
        let v = decide(&engine, &untyped, input(text));
        // ...and a forbid that errs denies: 1000.5 against `> 1000` is refused, not passed.
        let expect = denied || text.contains("1000.5");
        assert_eq!(v.is_denied(), expect, "{text}: {:?}", v.decision);
    }
}

#[test]
fn a_refusal_says_why_the_number_could_not_be_compared() {
    let engine = cedar_engine("guard.cedar", GUARD);
    let v = decide(&engine, &cap(None), input(r#"{"amount": 1e300}"#));
    let reason = v.decision.reason.clone().unwrap_or_default();
    assert_eq!(v.decision.code.as_deref(), Some("policy_error"), "{reason}");
    assert!(reason.contains("big-amount"), "{reason}");
    assert!(reason.contains("cannot represent"), "{reason}");
}

#[test]
fn permits_grant_nothing_on_a_number_they_cannot_compare() {
    let engine = cedar_engine(
        "permit.cedar",
        r#"@id("small") permit(principal, action, resource) when { context.input.amount < 100 };"#,
    );
    for (text, allowed) in [
        (r#"{"amount": 5}"#, true),
        (r#"{"amount": -1e300}"#, false),
        (r#"{"amount": -10000000000000000000}"#, false),
        (r#"{"amount": 5.00001}"#, false),
    ] {
        let v = decide(&engine, &cap(None), input(text));
        assert_eq!(v.allows(), allowed, "{text}: {:?}", v.decision);
    }
}

#[test]
fn costs_are_rounded_up_and_never_left_out() {
    let engine = cedar_engine("guard.cedar", GUARD);
    for (estimate, denied) in [
        (5.0, false),
        (5.00001, true),
        (4.99999, false),
        (1e300, true),
        (f64::MAX, true),
        (0.0, false),
    ] {
        let action = AgentAction::new(ActionType::ModelCall, cap(None), "bot")
            .input(json!({}))
            .estimated_cost(estimate);
        let v = verdict(&engine, action, Stage::BeforeCapability, None);
        assert_eq!(v.is_denied(), denied, "{estimate}: {:?}", v.decision);
    }
}

#[test]
fn strings_keys_and_depth_reach_cedar_as_they_are() {
    let engine = cedar_engine(
        "strings.cedar",
        r#"@id("allow") permit(principal, action, resource);
@id("odd") forbid(principal, action, resource) when { context.input has name && context.input.name == "a\u{200b}b\u{1F600}\"" };
@id("key") forbid(principal, action, resource) when { context.input has "not an identifier" && context.input["not an identifier"] == 1 };
@id("deep-long") forbid(principal, action, resource) when { context.input has a && context.input.a has b && context.input.a.b has d && context.input.a.b.d > 10 };
"#,
    );
    for (value, denied) in [
        (json!({"name": "a\u{200b}b\u{1F600}\""}), true),
        (json!({"name": "ab\u{1F600}\""}), false),
        (json!({"not an identifier": 1}), true),
        (json!({"not an identifier": 2}), false),
        (json!({"a": {"b": {"d": 1e300}}}), true),
        (json!({"a": {"b": {"d": 11}}}), true),
        (json!({"a": {"b": {"d": 9}}}), false),
    ] {
        let v = decide(&engine, &cap(None), value.clone());
        assert_eq!(v.is_denied(), denied, "{value}: {:?}", v.decision);
    }
}
