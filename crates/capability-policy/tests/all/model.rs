//! Governance metadata: `metadata.governance` JSON, manifests, defaults and errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_policy::model::{BraneEffect, EffectType};
use capability_policy::*;
use serde_json::json;

#[test]
fn governance_reads_every_field_and_writes_it_back() {
    let doc = json!({
        "kind": "mcp_tool",
        "risk": "critical",
        "effect": {"type": "financial", "external": true, "reversible": false, "description": "moves money",
                   "dataNamespace": "billing", "metadata": {"k": 1}},
        "sideEffects": [
            {"type": "send_message", "canDisable": true, "disableInput": {"notify": false},
             "disableDescription": "set notify=false", "requiresApproval": true, "risk": "high"},
            {"type": "filesystem.write"}
        ],
        "scopes": ["refunds:create", {"name": "billing:read", "description": "read", "environment": "prod"}],
        "tenant": "acme", "environment": "staging", "dataNamespace": "billing.refunds",
        "owner": "payments-team", "description": "refunds",
        "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"},
        "metadata": {"tier": "gold"}
    });
    let g = Governance::from_json(&doc, "metadata.governance").unwrap();
    assert_eq!(g.kind, CapabilityKind::McpTool);
    assert_eq!(g.risk, RiskLevel::Critical);
    let effect = g.effect.as_ref().unwrap();
    assert_eq!(effect.kind, EffectType::Brane(BraneEffect::Financial));
    assert!(effect.external && !effect.reversible);
    assert_eq!(
        effect.risk,
        RiskLevel::Low,
        "an effect's risk defaults to low"
    );
    assert_eq!(g.side_effects[0].risk, RiskLevel::High);
    assert_eq!(
        g.side_effects[1].risk,
        RiskLevel::Medium,
        "a side effect's risk defaults to medium"
    );
    assert_eq!(
        g.side_effects[1].kind,
        EffectType::Declared("filesystem.write".into())
    );
    assert_eq!(g.scopes[1].environment, Some(Environment::Prod));
    assert_eq!(g.disableable_side_effects().len(), 1);
    assert_eq!(Governance::from_json(&g.to_json(), "x").unwrap(), g);
    assert_eq!(g.to_json()["scopes"][0], json!("refunds:create"));
}

#[test]
fn governance_defaults_are_brane_defaults() {
    let g = Governance::from_json(&json!({}), "g").unwrap();
    assert_eq!((g.kind, g.risk), (CapabilityKind::Tool, RiskLevel::Low));
    assert!(g.effect.is_none() && g.side_effects.is_empty() && g.scopes.is_empty());
    assert_eq!(g.to_json(), json!({"kind": "tool", "risk": "low"}));
}

#[test]
fn governance_errors_name_the_path_and_quote_the_value() {
    let cases = [
        (
            json!({"risk": "extreme"}),
            "g.risk: unknown risk level `extreme`; expected one of: none, low, medium, high, critical",
        ),
        (
            json!({"kind": "gadget"}),
            "g.kind: unknown capability kind `gadget`",
        ),
        (
            json!({"sideEffects": [{"type": "write"}, {"type": "database_query"}]}),
            "g.sideEffects[1].type: unknown effect type `database_query`",
        ),
        (
            json!({"sideEffects": [{}]}),
            "g.sideEffects[0]: missing field `type`",
        ),
        (
            json!({"owner": 7}),
            "g.owner: expected string, found number",
        ),
        (json!({"riskk": "low"}), "g: unknown field `riskk`"),
        (
            json!({"scopes": [{"description": "x"}]}),
            "g.scopes[0]: missing field `name`",
        ),
        (
            json!({"environment": "production"}),
            "g.environment: unknown environment `production`",
        ),
        (json!([]), "g: expected object, found array"),
    ];
    for (doc, expected) in cases {
        let err = Governance::from_json(&doc, "g").unwrap_err().to_string();
        assert!(err.starts_with(expected), "{err}\n  wanted: {expected}");
    }
}

#[test]
fn a_manifest_carries_governance_in_metadata() {
    let manifest = json!({
        "specVersion": "1.0", "id": "billing/refund", "version": "1.0.0", "name": "Refund",
        "description": "Refund a customer",
        "input": {"type": "object", "properties": {"amount_usd": {"type": "number"}}},
        "output": {"type": "object"},
        "effects": ["network.connect", "custom:payments.refund"],
        "metadata": {"governance": {"risk": "high", "effect": {"type": "financial"}, "owner": "payments"}}
    });
    let c = GovernedCapability::from_manifest(&manifest).unwrap();
    assert_eq!(c.name, "billing/refund");
    assert!(c.id.starts_with("cap_"));
    assert_eq!(c.risk_level(), RiskLevel::High);
    assert_eq!(
        c.governance.description.as_deref(),
        Some("Refund a customer")
    );
    assert_eq!(
        c.governance.input_schema.as_ref().unwrap()["properties"]["amount_usd"]["type"],
        json!("number")
    );
    assert_eq!(
        c.effect_names(),
        ["financial", "network.connect", "custom:payments.refund"]
    );
    // No governance: defaults; bad governance: an error naming metadata.governance.
    let plain = GovernedCapability::from_manifest(&json!({"id": "text/slugify"})).unwrap();
    assert_eq!(
        (plain.kind(), plain.risk_level()),
        (CapabilityKind::Tool, RiskLevel::Low)
    );
    let bad = json!({"id": "x/y", "metadata": {"governance": {"risk": "huge"}}});
    assert!(
        GovernedCapability::from_manifest(&bad)
            .unwrap_err()
            .to_string()
            .starts_with("metadata.governance.risk: unknown risk level `huge`")
    );
    assert!(
        GovernedCapability::from_manifest(&json!({"name": "n"}))
            .unwrap_err()
            .to_string()
            .contains("missing field `id`")
    );
}

#[test]
fn plain_name_registration_for_things_the_runtime_does_not_execute() {
    for (name, kind) in [
        ("model.gpt_4", CapabilityKind::Model),
        ("memory.support_cases", CapabilityKind::Memory),
        ("secret.stripe_api_key", CapabilityKind::Secret),
        ("agent.billing_specialist", CapabilityKind::Agent),
    ] {
        let c = GovernedCapability::new(name, kind);
        assert_eq!((c.name.as_str(), c.kind()), (name, kind));
    }
    assert_eq!(CapabilityKind::ALL.len(), 16);
    assert_eq!(ActionType::ALL.len(), 14);
    assert_eq!(DecisionType::ALL.len(), 9);
    assert_eq!(model::BraneEffect::ALL.len(), 14);
    assert!(RiskLevel::None < RiskLevel::Low && RiskLevel::High < RiskLevel::Critical);
}

#[test]
fn the_action_digest_covers_what_the_action_does() {
    let cap = std::sync::Arc::new(GovernedCapability::new("t", CapabilityKind::Tool));
    let a =
        AgentAction::new(ActionType::ToolCall, cap.clone(), "agent").input(json!({"b": 1, "a": 2}));
    let same =
        AgentAction::new(ActionType::ToolCall, cap.clone(), "agent").input(json!({"a": 2, "b": 1}));
    assert_eq!(
        a.digest(),
        same.digest(),
        "ids, time and key order do not matter"
    );
    assert_eq!(a.digest().len(), 64);
    for other in [
        a.clone().input(json!({"a": 2, "b": 2})),
        a.clone().tenant("acme"),
        a.clone().environment(Environment::Prod),
        a.clone().principal("p"),
        AgentAction::new(ActionType::ModelCall, cap, "agent").input(json!({"b": 1, "a": 2})),
    ] {
        assert_ne!(other.digest(), a.digest());
    }
}
