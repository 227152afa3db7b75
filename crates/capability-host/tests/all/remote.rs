//! Actions decided here and executed by their callers: the two stages as two calls, budgets
//! whose totals outlive the process, and open actions that belong to their principal.

use std::path::Path;
use std::time::Duration;

use capability_host::budgets::BudgetConfig;
use capability_host::remote::ActionCapability;
use capability_host::{
    ActionDecided, ActionReport, ActionRequest, ActionType, GovernedCapability, Host, HostConfig,
    Principal,
};
use capability_policy::{Actor, CapabilityKind};
use serde_json::json;

fn open(dir: &Path, budgets: &str, timeout: Duration) -> Host {
    Host::open(HostConfig {
        home: Some(dir.join("home")),
        governed: vec![
            GovernedCapability::new("llm.big", CapabilityKind::Model),
            GovernedCapability::new("llm.small", CapabilityKind::Model),
        ],
        budgets: BudgetConfig::from_json(&serde_json::from_str(budgets).unwrap()).unwrap(),
        action_timeout: timeout,
        ..HostConfig::default()
    })
    .unwrap()
}

fn agent(id: &str, tenant: &str) -> Principal {
    Principal::agent(&Actor {
        agent_id: Some(id.into()),
        tenant: Some(tenant.into()),
        ..Actor::default()
    })
}

fn call(usd: f64) -> ActionRequest {
    let mut r = ActionRequest::new(ActionType::ModelCall, "llm.big", json!({"prompt": "p"}));
    r.estimated_cost_usd = Some(usd);
    r
}

fn output(output: serde_json::Value) -> ActionReport {
    ActionReport::Output {
        output,
        cost_usd: None,
        tokens: None,
    }
}

const TENANT_BUDGET: &str = r#"{"budgets": [{"id": "acme-daily", "per": "tenant",
  "windowSeconds": 86400, "limitUsd": 1.0, "actionTypes": ["model_call"],
  "onExceed": {"route": "llm.small"}}]}"#;

#[test]
fn budget_totals_are_rebuilt_from_the_store_when_the_host_opens_again() {
    let dir = tempfile::tempdir().unwrap();
    let a = agent("a1", "acme");
    {
        let host = open(dir.path(), TENANT_BUDGET, Duration::from_secs(60));
        let d = host.decide_action(&a, call(0.5)).unwrap();
        assert_eq!(d.decision(), "allow");
        let closed = host
            .report_action(
                &a,
                d.action_id(),
                ActionReport::Output {
                    output: json!("ok"),
                    cost_usd: Some(0.9),
                    tokens: None,
                },
            )
            .unwrap();
        assert_eq!(closed.outcome, "executed");
        host.flush();
    }
    // A new process: the $0.90 spent in tenant acme is still counted (another agent of the
    // same tenant), so $0.20 more is routed; tenant beta starts at zero.
    let host = open(dir.path(), TENANT_BUDGET, Duration::from_secs(60));
    let d = host.decide_action(&agent("a2", "acme"), call(0.2)).unwrap();
    assert_eq!(d.decision(), "route", "{}", d.to_json());
    assert_eq!(d.to_json()["capability"], "llm.small");
    let d = host.decide_action(&agent("b1", "beta"), call(0.2)).unwrap();
    assert_eq!(d.decision(), "allow");
    // Without budgets configured nothing is counted.
    drop(host);
    let host = open(dir.path(), r#"{"budgets": []}"#, Duration::from_secs(60));
    let d = host.decide_action(&agent("a2", "acme"), call(0.2)).unwrap();
    assert_eq!(d.decision(), "allow");
}

#[test]
fn budget_files_with_mistakes_are_refused_with_the_mistake_named() {
    for (text, why) in [
        (
            r#"{"budgets": [{"per": "agent", "windowSeconds": 1, "limitUsd": 1}]}"#,
            "`id`",
        ),
        (
            r#"{"budgets": [{"id": "x", "per": "team", "windowSeconds": 1, "limitUsd": 1}]}"#,
            "`per`",
        ),
        (
            r#"{"budgets": [{"id": "x", "per": "agent", "windowSeconds": 0, "limitUsd": 1}]}"#,
            "windowSeconds",
        ),
        (
            r#"{"budgets": [{"id": "x", "per": "agent", "windowSeconds": 1, "limitUsd": -1}]}"#,
            "limitUsd",
        ),
        (
            r#"{"budgets": [{"id": "x", "per": "agent", "windowSeconds": 1, "limitUsd": 1, "actionTypes": ["fly"]}]}"#,
            "fly",
        ),
        (
            r#"{"budgets": [{"id": "x", "per": "agent", "windowSeconds": 1, "limitUsd": 1, "onExceed": "explode"}]}"#,
            "onExceed",
        ),
        (
            r#"{"budgets": [{"id": "x", "per": "agent", "windowSeconds": 1, "limitUsd": 1, "limit": 2}]}"#,
            "`limit`",
        ),
        (
            r#"{"budgets": [{"id": "x", "per": "agent", "windowSeconds": 1, "limitUsd": 1}, {"id": "x", "per": "agent", "windowSeconds": 1, "limitUsd": 1}]}"#,
            "twice",
        ),
        (r#"[]"#, "budgets"),
    ] {
        let e = BudgetConfig::from_json(&serde_json::from_str(text).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{text}: {e}");
    }
}

#[test]
fn open_actions_belong_to_their_principal_and_expire_as_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let host = open(dir.path(), r#"{"budgets": []}"#, Duration::from_millis(50));
    let a = agent("a1", "acme");
    let d = host.decide_action(&a, call(0.0)).unwrap();
    let ActionDecided::Open { action_id, .. } = &d else {
        panic!("{}", d.to_json())
    };
    assert_eq!(host.open_action_count(), 1);
    let other = agent("a2", "acme");
    let e = host
        .report_action(&other, action_id, output(json!(1)))
        .unwrap_err();
    assert_eq!(e.status(), 404);
    // The operator (an admin) may decide actions too; its action expires as well.
    let approver = Principal::operator("root");
    assert!(
        host.decide_action(&approver, call(0.0)).is_ok(),
        "the operator is an admin"
    );
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(host.close_abandoned_actions(), 2);
    assert_eq!(host.open_action_count(), 0);
    let e = host
        .report_action(&a, action_id, output(json!(1)))
        .unwrap_err();
    assert_eq!(e.status(), 404);
    // An inline description is declared on first use, and cannot redefine it afterwards.
    let mut inline = call(0.0);
    inline.capability = ActionCapability::Inline(Box::new(GovernedCapability::new(
        "tool.echo",
        CapabilityKind::Tool,
    )));
    assert_eq!(host.decide_action(&a, inline).unwrap().decision(), "allow");
    let mut redefined = call(0.0);
    redefined.capability = ActionCapability::Inline(Box::new(
        GovernedCapability::new("tool.echo", CapabilityKind::Tool)
            .risk(capability_policy::RiskLevel::Critical),
    ));
    assert_eq!(host.decide_action(&a, redefined).unwrap_err().status(), 400);
    // An input the canonical form would not show whole is refused.
    let mut proto = call(0.0);
    proto.input = serde_json::json!({"prompt": "p", "__proto__": {"prompt": "q"}});
    let e = host.decide_action(&a, proto).unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.to_string().contains("__proto__"), "{e}");
}

#[test]
fn a_principal_holds_a_bounded_number_of_open_actions() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        governed: vec![GovernedCapability::new("llm.big", CapabilityKind::Model)],
        max_open_actions_per_principal: 2,
        ..HostConfig::default()
    })
    .unwrap();
    let a = agent("a1", "acme");
    let first = host.decide_action(&a, call(0.0)).unwrap();
    host.decide_action(&a, call(0.0)).unwrap();
    let e = host.decide_action(&a, call(0.0)).unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.to_string().contains("2 open actions"), "{e}");
    // Another principal has its own slots.
    host.decide_action(&agent("a2", "acme"), call(0.0)).unwrap();
    // Closing one frees its slot; a request refused before the stage holds none.
    host.report_action(
        &a,
        first.action_id(),
        ActionReport::Error {
            message: "gave up".into(),
            error_type: None,
            cost_usd: None,
        },
    )
    .unwrap();
    let mut unknown = call(0.0);
    unknown.capability = ActionCapability::Named("nope".into());
    for _ in 0..3 {
        assert_eq!(
            host.decide_action(&a, unknown.clone())
                .unwrap_err()
                .status(),
            404
        );
    }
    host.decide_action(&a, call(0.0)).unwrap();
    assert_eq!(host.decide_action(&a, call(0.0)).unwrap_err().status(), 400);
    assert_eq!(host.open_action_count(), 3);
}
