//! Bindings executed under the host's governance: Cedar decides, approvals are the host's,
//! the registry's approval gate holds, every execution leaves a stored receipt and an audit
//! outcome naming it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use capability_core::binder::{
    BinderDiscovery, BinderError, BinderExecution, BinderStatus, CancelToken, MetabolicBinder,
    MetabolicBinderRegistry,
};
use capability_host::{
    ApprovalDecision, AuditFilter, BindingOutcome, BindingRun, Host, HostConfig, Principal,
};
use serde_json::{Value, json};

/// A binder whose "artifact" is a number: `execute` adds it to the input's `n`, or fails when
/// the input asks to.
#[derive(Default)]
struct Adder {
    runs: AtomicUsize,
}

impl MetabolicBinder for Adder {
    fn id(&self) -> &str {
        "test/adder"
    }
    fn substrate(&self) -> &str {
        "test"
    }
    fn discovery(&self) -> BinderDiscovery {
        BinderDiscovery::Explicit
    }
    fn description(&self) -> &str {
        "adds a bound number"
    }
    fn bind(&self, request: &Value) -> Result<Value, BinderError> {
        let k = request["k"].as_i64().unwrap_or(1);
        Ok(json!({
            "bindingVersion": "1.0",
            "binderId": "test/adder",
            "substrate": "test",
            "locator": format!("adder:{k}"),
            "immutableArtifact": format!("adder@{k}"),
            "createdAt": "2026-12-03T00:00:00.000Z",
            "authority": {"complete": false, "effects": ["custom:external.opaque-effects"]},
            "evidence": ["k"],
            "k": k,
        }))
    }
    fn executable(&self) -> bool {
        true
    }
    fn execute(
        &self,
        binding: &Value,
        input: &Value,
        _: &CancelToken,
    ) -> Result<BinderExecution, BinderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let failed = input["fail"] == json!(true);
        let sum = input["n"].as_i64().unwrap_or(0) + binding["k"].as_i64().unwrap_or(0);
        Ok(BinderExecution {
            status: if failed {
                BinderStatus::Failed
            } else {
                BinderStatus::Succeeded
            },
            output: (!failed).then(|| json!({"sum": sum})),
            isolation: Some("none".into()),
            upstream_receipt: Some(json!({"sum": sum, "failed": failed})),
            metadata: None,
        })
    }
}

fn host(dir: &std::path::Path, policy: &str) -> (Host, Arc<Adder>) {
    let adder = Arc::new(Adder::default());
    let mut registry = MetabolicBinderRegistry::new();
    registry.register(adder.clone()).unwrap();
    let file = dir.join("policy.cedar");
    std::fs::write(&file, policy).unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.join("home")),
        policies: vec![file],
        binders: Some(Arc::new(registry)),
        ..HostConfig::default()
    })
    .unwrap();
    (host, adder)
}

fn bot() -> Principal {
    Principal::agent(&capability_host::Actor::agent("bot"))
}

fn executed(outcome: BindingOutcome) -> Box<capability_host::BindingExecuted> {
    match outcome {
        BindingOutcome::Executed(done) => done,
        other => panic!("not executed: {other:?}"),
    }
}

#[test]
fn an_execution_is_governed_stored_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (host, adder) = host(dir.path(), "permit(principal, action, resource);");
    let binding = host.bind(&bot(), "test/adder", &json!({"k": 5})).unwrap();
    let approved = BindingRun {
        approved: true,
        ..BindingRun::default()
    };

    let done = executed(
        host.execute_binding(&bot(), &binding, &json!({"n": 2}), &approved)
            .unwrap(),
    );
    assert_eq!(done.status, BinderStatus::Succeeded);
    assert_eq!(done.output, Some(json!({"sum": 7})));
    let id = done.receipt["receiptId"].as_str().unwrap().to_string();
    assert_eq!(done.receipt["receiptVersion"], "1.0");
    assert_eq!(done.receipt["immutableArtifact"], "adder@5");
    assert_eq!(
        done.receipt["upstreamReceipt"],
        json!({"sum": 7, "failed": false})
    );

    // A failed execution is stored too.
    let failed = executed(
        host.execute_binding(&bot(), &binding, &json!({"fail": true}), &approved)
            .unwrap(),
    );
    assert_eq!(failed.status, BinderStatus::Failed);
    assert_eq!(adder.runs.load(Ordering::SeqCst), 2);

    // Stored, readable by an operator, newest first.
    let alice = Principal::operator("alice");
    let stored = host.metabolic_receipts(&alice, 10).unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1]["receiptId"], json!(id));
    assert_eq!(stored[0]["status"], "failed");
    assert_eq!(host.metabolic_receipt(&alice, &id).unwrap(), done.receipt);

    // Audited: the outcome names the receipt.
    let page = host
        .audit_query(
            &alice,
            &AuditFilter {
                capability: Some("test/adder".into()),
                ..AuditFilter::default()
            }
            .query()
            .unwrap(),
        )
        .unwrap();
    assert!(
        page.events
            .iter()
            .any(|e| e.event["metadata"]["metabolicReceiptId"] == json!(id)),
        "{:?}",
        page.events.iter().map(|e| &e.event).collect::<Vec<_>>()
    );
    assert!(host.verify_audit(&alice, None).unwrap().ok);

    // Reopened, the receipts are still there.
    drop(host);
    let (host, _) = self::host(dir.path(), "permit(principal, action, resource);");
    assert_eq!(host.metabolic_receipts(&alice, 10).unwrap().len(), 2);
}

#[test]
fn incomplete_authority_needs_consent_and_policy_decides_first() {
    let dir = tempfile::tempdir().unwrap();
    let (host, adder) = host(
        dir.path(),
        r#"permit(principal, action, resource);
@reason("artifact 9 is blocked")
forbid(principal, action, resource) when { context.input.binding.immutableArtifact == "adder@9" };
@decision("approval_required") @reason("big numbers need a human")
forbid(principal, action, resource) when { context.input.input.n > 100 };"#,
    );
    let binding = host.bind(&bot(), "test/adder", &json!({"k": 1})).unwrap();

    // Without consent the registry refuses: nothing runs, nothing is stored.
    let refused = host
        .execute_binding(&bot(), &binding, &json!({"n": 1}), &BindingRun::default())
        .unwrap_err();
    assert!(
        refused.to_string().contains("explicit approval"),
        "{refused}"
    );
    assert_eq!(adder.runs.load(Ordering::SeqCst), 0);

    // Policy denies by artifact before anything runs.
    let blocked = host.bind(&bot(), "test/adder", &json!({"k": 9})).unwrap();
    let consent = BindingRun {
        approved: true,
        ..BindingRun::default()
    };
    match host
        .execute_binding(&bot(), &blocked, &json!({"n": 1}), &consent)
        .unwrap()
    {
        BindingOutcome::Denied { reason } => assert_eq!(reason, "artifact 9 is blocked"),
        other => panic!("{other:?}"),
    }
    assert_eq!(adder.runs.load(Ordering::SeqCst), 0);

    // Policy wants a human: the token of the approval runs the call once, and counts as
    // consent.
    let approval = match host
        .execute_binding(&bot(), &binding, &json!({"n": 500}), &consent)
        .unwrap()
    {
        BindingOutcome::NeedsApproval { approval, reason } => {
            assert_eq!(reason, "big numbers need a human");
            approval.unwrap()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(adder.runs.load(Ordering::SeqCst), 0);
    assert!(
        host.decide_approval(
            &bot(),
            &approval.approval_id,
            ApprovalDecision::Approve,
            None
        )
        .is_err(),
        "the agent approved its own call"
    );
    let decided = host
        .decide_approval(
            &Principal::operator("alice"),
            &approval.approval_id,
            ApprovalDecision::Approve,
            None,
        )
        .unwrap();
    let token = decided.token.unwrap().0;
    let with_token = BindingRun {
        approved: false,
        approval_token: Some(token.clone()),
    };
    let done = executed(
        host.execute_binding(&bot(), &binding, &json!({"n": 500}), &with_token)
            .unwrap(),
    );
    assert_eq!(done.output, Some(json!({"sum": 501})));
    assert!(
        host.execute_binding(&bot(), &binding, &json!({"n": 500}), &with_token)
            .is_err(),
        "a token was used twice"
    );
    assert_eq!(adder.runs.load(Ordering::SeqCst), 1);
}
