//! Actions the caller executes: declared, governed by the host's policies (Cedar and added
//! ones), audited in the host's chain, approved by the host's one rule.

use capability_host::actions::governance::{
    CapabilityKind, Decision, Execution, InterceptError, InterceptRequest, Policy, Stage,
};
use capability_host::{ActionType, ApprovalDecision, AuditFilter, GovernedCapability, Principal};
use serde_json::{Value, json};

use crate::host_with;

fn request(name: &str, input: Value) -> InterceptRequest {
    InterceptRequest::new(name, ActionType::ToolCall, input).agent("bot")
}

#[test]
fn a_declared_action_is_governed_by_cedar_and_added_policies_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(
        dir.path(),
        Some(
            r#"permit(principal, action, resource);
@id("no-drop") @reason("dropping is not allowed")
forbid(principal, action, resource) when { resource.name == "db.drop" };"#,
        ),
    );
    host.declare(GovernedCapability::new("db.drop", CapabilityKind::Database))
        .unwrap();
    host.declare(GovernedCapability::new("db.read", CapabilityKind::Database))
        .unwrap();
    let id = host.add_policy(Policy::before("db.read", |ctx| {
        if ctx.arg_str("table") == Some("secrets") {
            Decision::deny("not that table")
        } else {
            Decision::allow()
        }
    }));
    let mut ran = 0;
    let denied = host
        .intercept(
            request("db.drop", json!({})),
            |_| -> Result<Value, String> {
                ran += 1;
                Ok(json!("dropped"))
            },
        )
        .unwrap_err();
    assert_eq!(
        denied.denial().and_then(|d| d.reason()),
        Some("dropping is not allowed")
    );
    let denied = host
        .intercept(
            request("db.read", json!({"table": "secrets"})),
            |_| -> Result<Value, String> {
                ran += 1;
                Ok(json!([]))
            },
        )
        .unwrap_err();
    assert_eq!(
        denied.denial().and_then(|d| d.reason()),
        Some("not that table")
    );
    assert_eq!(ran, 0);
    let done = host
        .intercept(
            request("db.read", json!({"table": "users"})),
            |exec| -> Result<Value, String> {
                ran += 1;
                Ok(json!({"rows": 1, "table": exec.input["table"]}))
            },
        )
        .unwrap();
    assert_eq!(done.output, json!({"rows": 1, "table": "users"}));
    assert_eq!(ran, 1);
    // Removed, the added policy no longer denies.
    assert!(host.remove_policy(&id));
    assert!(
        host.intercept(
            request("db.read", json!({"table": "secrets"})),
            |_| -> Result<Value, String> { Ok(json!([])) }
        )
        .is_ok()
    );
    let operator = Principal::operator("alice");
    let page = host
        .audit_query(
            &operator,
            &AuditFilter {
                agent: Some("bot".into()),
                ..AuditFilter::default()
            }
            .query()
            .unwrap(),
        )
        .unwrap();
    let outcomes: Vec<&str> = page
        .events
        .iter()
        .map(|r| r.event["outcome"].as_str().unwrap_or_default())
        .collect();
    assert!(outcomes.contains(&"denied_before_execution") && outcomes.contains(&"executed"));
    assert!(host.verify_audit(&operator, None).unwrap().ok);
}

#[test]
fn an_executable_capability_cannot_be_redeclared() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(dir.path(), None);
    let err = host
        .declare(GovernedCapability::new(
            "text/slugify",
            CapabilityKind::Tool,
        ))
        .unwrap_err();
    assert!(err.to_string().contains("executes"), "{err}");
}

#[test]
fn approval_of_an_action_is_decided_by_another_principal_and_redeemed_once() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(dir.path(), None);
    host.declare(GovernedCapability::new("wire", CapabilityKind::Tool))
        .unwrap();
    host.add_policy(Policy::before("wire", |_| {
        Decision::approval_required("a human")
    }));
    let run = |_: &Execution<'_>| -> Result<Value, String> { Ok(json!("sent")) };
    let Err(InterceptError::ApprovalRequired { approval, .. }) =
        host.intercept(request("wire", json!({"usd": 5})), run)
    else {
        panic!("no approval required");
    };
    let id = approval.unwrap().approval_id;
    let bot = Principal::agent(&capability_host::Actor::agent("bot"));
    assert!(
        host.decide_approval(&bot, &id, ApprovalDecision::Approve, None)
            .is_err()
    );
    let token = host
        .decide_approval(
            &Principal::operator("alice"),
            &id,
            ApprovalDecision::Approve,
            None,
        )
        .unwrap()
        .token
        .unwrap()
        .0;
    let mut again = request("wire", json!({"usd": 5}));
    again.approval_token = Some(token.clone());
    assert_eq!(
        host.intercept(again.clone(), run).unwrap().output,
        json!("sent")
    );
    assert!(matches!(
        host.intercept(again, run),
        Err(InterceptError::Approval(_))
    ));
}

#[test]
fn evaluate_sees_the_output_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(dir.path(), None);
    host.declare(GovernedCapability::new("model", CapabilityKind::Model))
        .unwrap();
    host.add_policy(Policy::after("model", |ctx| match &ctx.output {
        Some(o) if o.to_string().contains("API_KEY") => Decision::deny("secret in output"),
        _ => Decision::allow(),
    }));
    let req = request("model", json!({}));
    let clean = host
        .evaluate(&req, Stage::AfterCapability, Some(json!("hi")))
        .unwrap();
    let leaky = host
        .evaluate(&req, Stage::AfterCapability, Some(json!("API_KEY=1")))
        .unwrap();
    assert!(!clean.is_denied() && leaky.is_denied());
    let operator = Principal::operator("alice");
    let page = host
        .audit_query(&operator, &AuditFilter::default().query().unwrap())
        .unwrap();
    assert!(page.events.is_empty());
}
