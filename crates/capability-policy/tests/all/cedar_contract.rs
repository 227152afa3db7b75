//! The public Cedar contract: entities, context, default deny, fail-closed forbids,
//! validation diagnostics that name file and line, and the generated schema.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::{cedar_engine, verdict};
use capability_policy::cedar::{self, CedarError, PolicyFile, SchemaOptions};
use capability_policy::model::BraneEffect;
use capability_policy::*;
use serde_json::{Value, json};

fn refund() -> Arc<GovernedCapability> {
    Arc::new(
        GovernedCapability::new("refund_customer", CapabilityKind::Tool)
            .risk(RiskLevel::High)
            .effect(Effect::new(BraneEffect::Financial))
            .side_effect(SideEffect::new(BraneEffect::SendMessage))
            .declared_effect("network.connect")
            .scope("refunds:create")
            .owner("payments-team")
            .data_namespace("billing.refunds")
            .tenant("acme")
            .environment(Environment::Prod)
            .input_schema(json!({"type": "object", "properties": {
                "amount_usd": {"type": "number"}, "count": {"type": "integer"}
            }})),
    )
}

fn tool_call(input: Value) -> AgentAction {
    AgentAction::new(ActionType::ToolCall, refund(), "support-agent")
        .input(input)
        .tenant("acme")
        .environment(Environment::Prod)
        .scope("refunds:create")
        .label("team", "billing")
        .cost_so_far(0.75)
}

#[test]
fn every_contract_attribute_is_visible_to_policies() {
    let text = r#"
@id("all") permit(principal == Agent::"support-agent", action == Action::"tool_call", resource == Capability::"refund_customer")
when {
  principal.tenant == "acme" && principal.scopes.contains("refunds:create") &&
  resource.name == "refund_customer" && resource.kind == "tool" && resource.risk == "high" &&
  resource.riskLevel == 3 && resource.effects == ["financial", "send_message", "network.connect"] &&
  resource.scopes == ["refunds:create"] && resource.owner == "payments-team" &&
  resource.dataNamespace == "billing.refunds" && resource.tenant == "acme" &&
  resource.environment == "prod" &&
  context.environment == "prod" && context.tenant == "acme" && context.stage == "before_capability" &&
  context.labels.team == "billing" &&
  context.costSoFarUsd == decimal("0.75") && !(context has estimatedCostUsd) &&
  context.input.amount_usd == decimal("12.0") && context.input.count == 2 &&
  context.input.nested.flag && context.input.tags.contains("x") &&
  !(context.input has nothing) && !(context has output)
};
"#;
    let engine = cedar_engine("contract.cedar", text);
    let input = json!({"amount_usd": 12, "count": 2, "nested": {"flag": true}, "tags": ["x"], "nothing": null});
    let v = verdict(
        &engine,
        tool_call(input.clone()),
        Stage::BeforeCapability,
        None,
    );
    assert_eq!(
        v.kind,
        DecisionType::Allow,
        "{:?} {:?}",
        v.decision.reason,
        v.errors
    );
    assert_eq!(v.policy_ids(), ["all"]);
    // Any other agent falls to the default deny.
    let mut other = tool_call(input);
    other.agent_id = "other".into();
    let v = verdict(&engine, other, Stage::BeforeCapability, None);
    assert_eq!(
        (v.kind, v.decision.code.as_deref()),
        (DecisionType::Deny, Some("default_deny"))
    );
    assert_eq!(
        v.decision.reason.as_deref(),
        Some("no policy permits `tool_call` on `refund_customer`")
    );
}

#[test]
fn estimated_cost_and_output_appear_when_known() {
    let text = r#"
permit(principal, action, resource);
@id("budget") @reason("over budget")
forbid(principal, action, resource) when {
  context has estimatedCostUsd && context.costSoFarUsd.lessThan(decimal("100.0")) &&
  context.estimatedCostUsd.greaterThan(decimal("0.5"))
};
@id("leak") @reason("leak")
forbid(principal, action, resource) when { context has output && context.output like "*secret*" };
"#;
    let engine = cedar_engine("ctx.cedar", text);
    let mut a = tool_call(json!({}));
    assert_eq!(
        verdict(&engine, a.clone(), Stage::BeforeCapability, None).kind,
        DecisionType::Allow
    );
    a.estimated_cost_usd = Some(0.6);
    assert_eq!(
        verdict(&engine, a.clone(), Stage::BeforeCapability, None).kind,
        DecisionType::Deny
    );
    a.estimated_cost_usd = None;
    let after = |out: Value| verdict(&engine, a.clone(), Stage::AfterCapability, Some(out)).kind;
    assert_eq!(after(json!("the secret is 42")), DecisionType::Deny);
    assert_eq!(after(json!("nothing to see")), DecisionType::Allow);
    // The output is not part of the before-stage context even if the action carries one.
    let with_output = a.with_output(json!("secret"), None);
    assert_eq!(
        verdict(&engine, with_output, Stage::BeforeCapability, None).kind,
        DecisionType::Allow
    );
}

#[test]
fn default_deny_applies_before_execution_only() {
    let engine = cedar_engine(
        "only-forbid.cedar",
        "@id(\"f\") forbid(principal, action, resource == Capability::\"other\");",
    );
    assert_eq!(
        verdict(&engine, tool_call(json!({})), Stage::BeforeCapability, None).kind,
        DecisionType::Deny
    );
    let after = verdict(
        &engine,
        tool_call(json!({})),
        Stage::AfterCapability,
        Some(json!(1)),
    );
    assert_eq!(after.kind, DecisionType::Allow);
    assert!(after.decisions.is_empty());
    // No policy file at all: the governance layer allows.
    assert_eq!(
        verdict(
            &PolicyEngine::new(),
            tool_call(json!({})),
            Stage::BeforeCapability,
            None
        )
        .kind,
        DecisionType::Allow
    );
}

#[test]
fn a_forbid_that_errors_denies_and_a_permit_that_errors_grants_nothing() {
    let text = r#"
@id("open") permit(principal, action, resource) when { context.input.flag };
@id("limit") forbid(principal, action, resource) when { context.input.amount > 100 };
"#;
    let engine = cedar_engine("errors.cedar", text);
    // `amount` missing: the forbid errors → deny (fail closed), with the error recorded.
    let v = verdict(
        &engine,
        tool_call(json!({"flag": true})),
        Stage::BeforeCapability,
        None,
    );
    assert_eq!(
        (v.kind, v.decision.code.as_deref()),
        (DecisionType::Deny, Some("policy_error"))
    );
    assert!(
        v.decision
            .reason
            .as_deref()
            .unwrap()
            .starts_with("policy `limit` could not be evaluated"),
        "{:?}",
        v.decision.reason
    );
    assert!(!v.errors.is_empty());
    // `flag` missing: the permit errors and grants nothing → default deny.
    let v = verdict(
        &engine,
        tool_call(json!({"amount": 5})),
        Stage::BeforeCapability,
        None,
    );
    assert_eq!(v.decision.code.as_deref(), Some("default_deny"));
    let v = verdict(
        &engine,
        tool_call(json!({"amount": 5, "flag": true})),
        Stage::BeforeCapability,
        None,
    );
    assert_eq!(v.kind, DecisionType::Allow);
}

#[test]
fn policies_scoped_to_other_actions_or_resources_do_not_apply() {
    let text = r#"
permit(principal, action in [Action::"tool_call", Action::"model_call"], resource);
@id("not-this-action") forbid(principal, action == Action::"file_write", resource);
@id("not-this-resource") forbid(principal, action, resource == Capability::"other");
@id("entity-type") forbid(principal, action, resource is Agent);
"#;
    let engine = cedar_engine("scope.cedar", text);
    let v = verdict(&engine, tool_call(json!({})), Stage::BeforeCapability, None);
    assert_eq!(v.kind, DecisionType::Allow);
    let mut write = tool_call(json!({}));
    write.action_type = ActionType::FileWrite;
    let v = verdict(&engine, write, Stage::BeforeCapability, None);
    assert_eq!(v.decision.policy_id.as_deref(), Some("not-this-action"));
    let mut memory = tool_call(json!({}));
    memory.action_type = ActionType::MemoryRead;
    assert_eq!(
        verdict(&engine, memory, Stage::BeforeCapability, None)
            .decision
            .code
            .as_deref(),
        Some("default_deny")
    );
}

fn diagnostics(files: &[PolicyFile], schema: Option<&cedar_policy::Schema>) -> Vec<String> {
    cedar::validate_sources(files, schema)
        .diagnostics
        .iter()
        .map(|d| d.to_string())
        .collect()
}

#[test]
fn validation_names_file_line_and_column() {
    let files = [
        PolicyFile::new("good.cedar", "permit(principal, action, resource);\n"),
        PolicyFile::new(
            "syntax.cedar",
            "permit(principal, action, resource);\n\nforbid(principal, action resource);\n",
        ),
        PolicyFile::new(
            "annotations.cedar",
            "// header\n@decision(\"maybe\")\npermit(principal, action, resource);\n\n@decision(\"deny\")\npermit(principal, action, resource);\n\n@decision(\"redact\")\npermit(principal, action, resource);\n\n@priority(\"high\") forbid(principal, action, resource);\n",
        ),
    ];
    let d = diagnostics(&files, None);
    assert_eq!(d.len(), 5, "{d:#?}");
    assert!(
        d[0].starts_with("annotations.cedar:3:1: error: @decision: unknown decision `maybe`"),
        "{}",
        d[0]
    );
    assert_eq!(
        d[1],
        "annotations.cedar:6:1: error: @decision(\"deny\") on a permit: write `forbid` instead"
    );
    assert_eq!(
        d[2],
        "annotations.cedar:9:1: error: @decision(\"redact\") needs @redact(\"/pointer, ...\")"
    );
    assert_eq!(
        d[3],
        "annotations.cedar:11:19: error: @priority must be an integer, found `high`"
    );
    assert!(d[4].starts_with("syntax.cedar:3:"), "{}", d[4]);
    // Loading refuses the same files with the same messages.
    let err = CedarPolicies::from_sources(&files).unwrap_err();
    let CedarError::Invalid { diagnostics } = &err else {
        panic!("{err}")
    };
    assert_eq!(diagnostics.len(), 5);
    assert!(
        err.to_string()
            .starts_with("5 errors in policy files:\nannotations.cedar:3:1"),
        "{err}"
    );
}

#[test]
fn duplicate_ids_and_templates_are_refused() {
    let files = [
        PolicyFile::new("a.cedar", "@id(\"x\") permit(principal, action, resource);"),
        PolicyFile::new(
            "b.cedar",
            "\n@id(\"x\") forbid(principal, action, resource);\npermit(principal == ?principal, action, resource);",
        ),
    ];
    let d = diagnostics(&files, None);
    assert!(
        d.contains(
            &"b.cedar:2:10: error: duplicate policy id `x` (first used at a.cedar:1)".to_string()
        ),
        "{d:#?}"
    );
    assert!(
        d.iter()
            .any(|m| m.starts_with("b.cedar:3:1: error: templates")),
        "{d:#?}"
    );
}

#[test]
fn schema_validation_errors_point_at_the_expression() {
    let caps = [refund()];
    let schema =
        cedar::generate_schema(caps.iter().map(|c| c.as_ref()), &SchemaOptions::default()).unwrap();
    let text = "permit(principal, action, resource);\n\n@id(\"typo\")\nforbid(principal, action, resource)\nwhen { resource.riskLevl > 2 };\n\n@id(\"unguarded\")\nforbid(principal, action, resource) when { context.input.amount_usd.greaterThan(decimal(\"1.0\")) };\n";
    let d = diagnostics(&[PolicyFile::new("p.cedar", text)], Some(&schema.schema));
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(
        d[0].starts_with(
            "p.cedar:5:8: error: attribute `riskLevl` on entity type `Capability` not found"
        ),
        "{}",
        d[0]
    );
    assert!(
        d[0].contains("riskLevel"),
        "suggests the right name: {}",
        d[0]
    );
    assert!(d[1].starts_with("p.cedar:8:44: error: "), "{}", d[1]);
    assert!(d[1].contains("amount_usd"), "{}", d[1]);
    let report = cedar::validate_sources(&[PolicyFile::new("p.cedar", text)], Some(&schema.schema));
    assert!(!report.is_ok());
    assert_eq!(report.diagnostics[0].policy_id.as_deref(), Some("typo"));
    // Without a schema the same file is fine.
    assert!(diagnostics(&[PolicyFile::new("p.cedar", text)], None).is_empty());
}

#[test]
fn the_generated_schema_unions_capability_inputs() {
    let a = GovernedCapability::new("a", CapabilityKind::Tool).input_schema(json!({
        "type": "object", "required": ["q"],
        "properties": {
            "q": {"type": "string"}, "n": {"type": "integer"}, "price": {"type": "number"},
            "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
            "tags": {"type": "array", "items": {"type": "string"}},
            "either": {"type": ["string", "integer"]},
            "clash": {"type": "string"}
        }
    }));
    let b = GovernedCapability::new("b", CapabilityKind::Tool)
        .input_schema(json!({"type": "object", "properties": {"clash": {"type": "integer"}, "q": {"type": "string"}}}))
        .output_schema(json!({"type": "object", "properties": {"rows": {"type": "array", "items": {"type": "object"}}}}));
    let c = GovernedCapability::new("c", CapabilityKind::Model);
    let s = cedar::generate_schema(
        [&a, &b, &c],
        &SchemaOptions {
            label_keys: vec!["team".into()],
        },
    )
    .unwrap();
    let input = &s.json[""]["commonTypes"]["Input"]["attributes"];
    assert_eq!(input["q"], json!({"type": "String", "required": false}));
    assert_eq!(input["n"], json!({"type": "Long", "required": false}));
    assert_eq!(
        input["price"],
        json!({"type": "Extension", "name": "decimal", "required": false})
    );
    assert_eq!(
        input["opts"]["attributes"]["deep"],
        json!({"type": "Boolean", "required": false})
    );
    assert_eq!(input["tags"]["element"], json!({"type": "String"}));
    assert!(input.get("either").is_none() && input.get("clash").is_none());
    assert!(
        s.warnings.iter().any(|w| w.contains("either")),
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("clash") && w.contains("disagree")),
        "{:?}",
        s.warnings
    );
    assert_eq!(
        s.json[""]["commonTypes"]["Labels"]["attributes"]["team"]["type"],
        json!("String")
    );
    assert_eq!(s.json[""]["actions"].as_object().unwrap().len(), 14);
    for needle in [
        "entity Agent",
        "entity Capability",
        "action \"tool_call\"",
        "type Context",
        "costSoFarUsd: decimal",
    ] {
        assert!(s.text.contains(needle), "{needle} in\n{}", s.text);
    }
    // Both formats parse back.
    assert!(cedar::parse_schema(&s.text).is_ok());
    assert!(cedar::parse_schema(&s.json.to_string()).is_ok());
    assert!(cedar::parse_schema("entity {").is_err());
}

#[test]
fn loading_reports_unreadable_paths() {
    let err = CedarPolicies::from_paths(&["/nonexistent/policies.cedar"]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot read `/nonexistent/policies.cedar`"),
        "{err}"
    );
}

#[test]
fn cached_context_free_results_follow_every_input_they_depend_on() {
    // `prod-high` and `scopes` read no per-call data, so their matches are cached by agent,
    // capability, action, environment, tenant and stage; `amount` is evaluated every time.
    let text = r#"
permit(principal, action, resource);
@id("prod-high") forbid(principal, action, resource) when { context.environment == "prod" && resource.riskLevel >= 3 };
@id("scopes") forbid(principal, action, resource) unless { principal.scopes.containsAll(resource.scopes) };
@id("acme-only") forbid(principal, action, resource) when { context.tenant != "acme" };
@id("amount") forbid(principal, action, resource) when { context.input has amount && context.input.amount > 10 };
"#;
    let engine = cedar_engine("cache.cedar", text);
    let base = || tool_call(json!({"amount": 1}));
    let kind = |a: AgentAction| {
        verdict(&engine, a, Stage::BeforeCapability, None)
            .decision
            .policy_id
    };
    for _ in 0..3 {
        assert_eq!(kind(base()), Some("prod-high".to_string()));
        let dev = verdict(
            &engine,
            base().environment(Environment::Dev),
            Stage::BeforeCapability,
            None,
        );
        assert_eq!(dev.kind, DecisionType::Allow);
    }
    let dev = || base().environment(Environment::Dev);
    assert_eq!(
        verdict(&engine, dev(), Stage::BeforeCapability, None).kind,
        DecisionType::Allow
    );
    assert_eq!(
        kind(dev().input(json!({"amount": 11}))),
        Some("amount".to_string())
    );
    assert_eq!(
        verdict(&engine, dev(), Stage::BeforeCapability, None).kind,
        DecisionType::Allow
    );
    let mut no_scope = dev();
    no_scope.agent_scopes.clear();
    assert_eq!(kind(no_scope), Some("scopes".to_string()));
    assert_eq!(kind(dev().tenant("globex")), Some("acme-only".to_string()));
    assert_eq!(
        verdict(&engine, dev(), Stage::BeforeCapability, None).kind,
        DecisionType::Allow
    );
}

/// A refund limit for the fixture shape the `fixtures` module documents. With no input schema
/// the integer amounts are Cedar `Long`s, hence `>`; `refund_decimal` gets a schema from its
/// fixture so that the README's `decimal` comparison applies.
const REFUND_LIMIT: &str = r#"
permit(principal, action, resource);

@id("refund-limit") @reason("Refund above $100 requires approval")
@decision("approval_required")
forbid(principal, action == Action::"tool_call", resource == Capability::"refund_customer")
when { context.input has amount_usd && context.input.amount_usd > 100 };

@id("refund-limit-decimal") @reason("Refund above $100 requires approval")
@decision("approval_required")
forbid(principal, action == Action::"tool_call", resource == Capability::"refund_decimal")
when { context.input has amount_usd && context.input.amount_usd.greaterThan(decimal("100.0")) };

@id("attributes") @reason("unexpected capability attributes")
forbid(principal, action, resource == Capability::"refund_customer")
unless {
  resource.name == "refund_customer" && resource.kind == "tool" && resource.risk == "low" &&
  resource.riskLevel == 1 && resource.effects == [] && resource.scopes == [] &&
  resource.owner == "" && resource.dataNamespace == "" && resource.tenant == "" &&
  resource.environment == ""
};

@id("given-attributes") @reason("the fixture's attributes were not used")
forbid(principal, action, resource == Capability::"wire_transfer")
unless {
  resource.kind == "external_api" && resource.risk == "high" && resource.effects == ["financial"] &&
  resource.scopes == ["payments:send"] && resource.owner == "treasury" &&
  resource.dataNamespace == "" && resource.tenant == "" && resource.environment == ""
};
"#;

#[test]
fn fixtures_for_unregistered_capabilities_run_with_documented_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("refunds.cedar");
    std::fs::write(&policy, REFUND_LIMIT).unwrap();
    let cases = dir.path().join("refunds.json");
    // The shape documented in `capability_policy::fixtures`, with no registry behind it.
    std::fs::write(
        &cases,
        r#"[{
          "name": "refund under the limit is allowed",
          "action": {
            "capability": "refund_customer", "actionType": "tool_call", "agentId": "support-agent",
            "tenant": "acme", "scopes": ["refunds:create"], "environment": "prod",
            "input": {"amount_usd": 50}
          },
          "expect": "allow"
        }, {
          "name": "refund over the limit needs approval",
          "action": {
            "capability": "refund_customer", "actionType": "tool_call", "agentId": "support-agent",
            "tenant": "acme", "scopes": ["refunds:create"], "environment": "prod",
            "input": {"amount_usd": 250}
          },
          "expect": "approval_required"
        }, {
          "name": "given attributes are used, defaults fill the rest",
          "action": {
            "capability": "wire_transfer", "actionType": "tool_call", "agentId": "support-agent",
            "governance": {"kind": "external_api", "risk": "high", "effect": {"type": "financial"},
                           "scopes": ["payments:send"], "owner": "treasury"}
          },
          "expect": "allow"
        }, {
          "name": "an input schema from the fixture types the input",
          "action": {
            "capability": "refund_decimal", "actionType": "tool_call", "agentId": "support-agent",
            "governance": {"inputSchema": {"type": "object", "properties": {"amount_usd": {"type": "number"}}}},
            "input": {"amount_usd": 250}
          },
          "expect": "approval_required"
        }]"#,
    )
    .unwrap();
    let report =
        fixtures::test_policy_files(&[&policy], &cases, &CapabilityRegistry::new()).unwrap();
    let text = report.render();
    assert!(report.ok(), "{text}");
    assert!(text.ends_with("4 passed, 0 failed\n"), "{text}");
    assert!(
        text.contains(
            "ok     refund under the limit is allowed (before_capability): allow\n  \
             defaults: kind=tool, risk=low, effects=[], scopes=[], owner=\"\", \
             dataNamespace=\"\", tenant=\"\", environment=\"\" (`refund_customer` is not registered)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "ok     given attributes are used, defaults fill the rest (before_capability): allow\n  \
             defaults: dataNamespace=\"\", tenant=\"\", environment=\"\"\n"
        ),
        "{text}"
    );
    assert_eq!(
        report.results[0].defaults,
        [
            "kind",
            "risk",
            "effects",
            "scopes",
            "owner",
            "dataNamespace",
            "tenant",
            "environment"
        ]
    );
    assert_eq!(
        report.results[2].defaults,
        ["dataNamespace", "tenant", "environment"]
    );
    assert_eq!(
        (report.results[2].source, report.results[0].source),
        (
            fixtures::CapabilitySource::Fixture,
            fixtures::CapabilitySource::Defaults
        )
    );
    assert_eq!(report.results[3].defaults.len(), 8);

    // A registered capability keeps its registered governance and uses no defaults.
    let registry = CapabilityRegistry::new();
    registry.register(
        GovernedCapability::new("refund_customer", CapabilityKind::Tool).risk(RiskLevel::High),
    );
    let report = fixtures::test_policy_files(&[&policy], &cases, &registry).unwrap();
    let r = &report.results[0];
    assert_eq!(
        (r.actual.clone(), r.policy_ids.clone()),
        (Ok(DecisionType::Deny), vec!["attributes".to_string()])
    );
    assert!(r.defaults.is_empty(), "{:?}", r.defaults);
    assert_eq!(r.source, fixtures::CapabilitySource::Registry);
    assert!(
        !report
            .render()
            .contains("`refund_customer` is not registered"),
        "{}",
        report.render()
    );
}
