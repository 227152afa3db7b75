//! The runtime under the governance layer: the nine decisions acting on real executions,
//! approvals bound to the exact plan, and an audit event for every decision and outcome.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use capability_core::authorization::EffectPolicy;
use capability_core::receipt::Receipt;
use capability_core::receipt::ReceiptStatus;
use capability_core::{CapabilityError, ErrorCode};
use capability_policy::Actor;
use capability_policy::approvals::ApprovalStore;
use capability_policy::pointer::Mutation;
use capability_policy::{
    ApprovalManager, AuditOutcome, AuditStore, Decision, Governor, HostKey, IsolationTier,
    MemoryStore, Policy, SandboxRequirement, Stage,
};
use capability_runtime::{Caller, Capability, CapabilityRuntime, ExecuteOptions};
use capability_test_support::approvals::CountingApprovals;
use serde_json::{Value, json};

struct World {
    runtime: CapabilityRuntime,
    governor: Arc<Governor>,
    store: Arc<MemoryStore>,
    approvals: Arc<ApprovalManager>,
}

fn refund() -> Capability {
    Capability::builder(json!({
        "specVersion": "0.1", "id": "billing/refund", "version": "1.0.0", "name": "Refund",
        "description": "Refunds a customer.",
        "input": {"type": "object", "properties": {"amount": {"type": "number"}, "notify": {"type": "boolean"}},
                  "required": ["amount"], "additionalProperties": false},
        "output": {"type": "object"},
        "effects": [],
        "metadata": {"governance": {"kind": "tool", "risk": "high", "owner": "payments"}}
    }))
    .execute_json(|input, _| Ok(json!({"refunded": input["amount"], "card": "4111111111111111", "notify": input["notify"]})))
    .build()
    .unwrap()
}

fn small_refund() -> Capability {
    Capability::builder(json!({
        "specVersion": "0.1", "id": "billing/small-refund", "version": "1.0.0", "name": "Small refund",
        "description": "Refunds a small amount.", "effects": []
    }))
    .execute_json(|input, _| Ok(json!({"small": true, "amount": input["amount"]})))
    .build()
    .unwrap()
}

impl World {
    /// `billing/refund` of `input` with default options.
    fn refund(&self, input: Value) -> Result<Arc<Receipt>, CapabilityError> {
        self.runtime
            .invoke("billing/refund", input, &ExecuteOptions::default())
    }
}

fn world(policies: Vec<Policy>) -> World {
    let store = Arc::new(MemoryStore::new());
    let approvals = Arc::new(ApprovalManager::new(
        Arc::clone(&store) as Arc<dyn ApprovalStore>,
        HostKey::from_seed([9; 32]),
    ));
    let governor = Governor::new("support-agent")
        .audit(Arc::clone(&store) as Arc<dyn capability_policy::AuditSink>)
        .approvals(Arc::clone(&approvals));
    for p in policies {
        governor.policies().register(p);
    }
    let governor = Arc::new(governor);
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .governor(Arc::clone(&governor))
        .build();
    runtime.register(refund()).unwrap();
    runtime.register(small_refund()).unwrap();
    World {
        runtime,
        governor,
        store,
        approvals,
    }
}

fn outcomes(store: &MemoryStore) -> Vec<AuditOutcome> {
    store
        .tail(None, 100)
        .unwrap()
        .into_iter()
        .map(|e| AuditOutcome::parse(e.event["outcome"].as_str().unwrap()).unwrap())
        .collect()
}

#[test]
fn allow_executes_and_audits_every_step() {
    let w = world(vec![
        Policy::before("*", |_| Decision::allow()).named("allow-all"),
    ]);
    let r = w.refund(json!({"amount": 5})).unwrap();
    assert_eq!(r.status, ReceiptStatus::Succeeded);
    let gov = r.governance.as_ref().unwrap();
    assert_eq!(gov.before.as_ref().unwrap().decision, "allow");
    assert_eq!(gov.agent_id.as_deref(), Some("support-agent"));
    assert_eq!(
        outcomes(&w.store),
        [AuditOutcome::Allowed, AuditOutcome::Executed]
    );
    let events = w.store.tail(None, 10).unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.event["receipt_id"] == r.receipt_id.as_str())
    );
    assert!(
        events
            .iter()
            .all(|e| e.event["plan_fingerprint"].is_string())
    );
}

#[test]
fn deny_before_refuses_without_running_or_a_receipt() {
    let w = world(vec![
        Policy::before("billing/*", |ctx| {
            if ctx.arg("amount").and_then(Value::as_f64).unwrap_or(0.0) > 100.0 {
                Decision::deny("Refund above $100 requires a human")
            } else {
                Decision::allow()
            }
        })
        .named("refund-limit"),
    ]);
    let err = w.refund(json!({"amount": 500})).unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    assert_eq!(err.message, "Refund above $100 requires a human");
    assert_eq!(err.details.as_ref().unwrap()["policy"], "refund-limit");
    assert!(
        w.runtime
            .list_receipts(&Default::default())
            .unwrap()
            .is_empty()
    );
    assert_eq!(outcomes(&w.store), [AuditOutcome::DeniedBeforeExecution]);
    // Effect authorization still comes first: a denied effect never reaches the policies.
    assert!(
        w.runtime
            .invoke(
                "billing/refund",
                json!({"amount": 5}),
                &ExecuteOptions::default()
            )
            .is_ok()
    );
}

#[test]
fn approval_is_bound_to_the_exact_plan_and_used_once() {
    let w = world(vec![Policy::before("billing/refund", |ctx| {
        if ctx.approval.is_some() {
            Decision::allow()
        } else {
            Decision::approval_required("Refunds need a human")
        }
    })]);
    let caller = Caller::from(Actor::agent("agent-7").tenant("acme"));
    let options = ExecuteOptions {
        caller: Some(caller),
        ..Default::default()
    };
    let plan = w
        .runtime
        .plan("billing/refund", json!({"amount": 250}))
        .unwrap();
    let err = w.runtime.execute(&plan, &options).unwrap_err();
    assert_eq!(err.code, ErrorCode::ApprovalRequired);
    let approval = &err.details.as_ref().unwrap()["approval"];
    assert_eq!(approval["planFingerprint"], plan.fingerprint);
    assert_eq!(approval["requester"], "agent-7");
    assert!(approval["expiresAt"].as_i64().unwrap() > 0);
    // The plan is kept for the approved retry.
    assert_eq!(
        w.runtime
            .pending_plan(&plan.fingerprint)
            .unwrap()
            .unwrap()
            .fingerprint,
        plan.fingerprint
    );

    let id = approval["approvalId"].as_str().unwrap();
    let token = w.approvals.approve(id, "manager@acme", None).unwrap().0;
    let with_token = ExecuteOptions {
        approval_token: Some(token.clone()),
        ..options.clone()
    };
    // A different plan (same input, new fingerprint) is refused with this token.
    let other = w
        .runtime
        .plan("billing/refund", json!({"amount": 250}))
        .unwrap();
    assert_eq!(
        w.runtime.execute(&other, &with_token).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    // The approved plan runs once.
    let r = w.runtime.execute(&plan, &with_token).unwrap();
    assert_eq!(
        r.governance
            .as_ref()
            .unwrap()
            .approval
            .as_ref()
            .unwrap()
            .approver,
        "manager@acme"
    );
    let replay = w.runtime.execute(&plan, &with_token).unwrap_err();
    assert_eq!(replay.code, ErrorCode::PermissionDenied);
    assert!(
        replay.message.contains("approval refused"),
        "{}",
        replay.message
    );
    // A forged token is refused.
    let forged = ExecuteOptions {
        approval_token: Some(format!("{token}x")),
        ..options
    };
    assert_eq!(
        w.runtime.execute(&plan, &forged).unwrap_err().code,
        ErrorCode::PermissionDenied
    );
    assert!(outcomes(&w.store).contains(&AuditOutcome::ApprovalRequired));
}

#[test]
fn redact_and_transform_output_shape_what_is_delivered_and_kept() {
    let w = world(vec![
        Policy::after("billing/refund", |_| Decision::redact(["/card"])),
        Policy::after("billing/refund", |_| {
            Decision::transform_output(vec![Mutation::set("/reviewed", json!(true))])
        }),
    ]);
    let r = w.refund(json!({"amount": 5})).unwrap();
    let out = r.output.as_ref().unwrap();
    assert_eq!(out["card"], "[REDACTED]");
    assert_eq!(out["reviewed"], true);
    assert_eq!(
        r.output_hash.as_deref(),
        Some(capability_core::json::canonical_hash(out).as_str())
    );
    assert_eq!(r.governance.as_ref().unwrap().redacted, ["/card"]);
    assert!(
        !serde_json::to_string(&*r)
            .unwrap()
            .contains("4111111111111111")
    );
}

#[test]
fn transform_input_is_revalidated_and_replanned() {
    let w = world(vec![Policy::before("billing/refund", |_| {
        Decision::transform_input(vec![Mutation::set("/notify", json!(false))])
    })]);
    let plan = w
        .runtime
        .plan("billing/refund", json!({"amount": 5}))
        .unwrap();
    let r = w
        .runtime
        .execute(&plan, &ExecuteOptions::default())
        .unwrap();
    assert_eq!(r.input, json!({"amount": 5, "notify": false}));
    assert_ne!(
        r.plan_id, plan.plan_id,
        "the transformed input was planned again"
    );
    assert_eq!(r.output.as_ref().unwrap()["notify"], false);

    let bad = world(vec![Policy::before("billing/refund", |_| {
        Decision::transform_input(vec![Mutation::set("/unexpected", json!(1))])
    })]);
    let err = bad.refund(json!({"amount": 5})).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput, "{err:?}");
    assert!(
        bad.runtime
            .list_receipts(&Default::default())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn route_runs_the_target_capability_authorized_again() {
    let w = world(vec![
        Policy::before("billing/refund", |ctx| {
            if ctx.arg("amount").and_then(Value::as_f64).unwrap_or(0.0) < 10.0 {
                Decision::route("billing/small-refund")
            } else {
                Decision::allow()
            }
        }),
        Policy::before("billing/small-refund", |_| {
            Decision::allow().with_reason("small refunds are fine")
        }),
    ]);
    let r = w.refund(json!({"amount": 3})).unwrap();
    assert_eq!(r.capability.id, "billing/small-refund");
    assert_eq!(r.output, Some(json!({"small": true, "amount": 3})));
    assert_eq!(
        r.governance.as_ref().unwrap().routed_from,
        ["billing/refund"]
    );
}

#[test]
fn sandbox_floor_refuses_in_process_code_and_log_only_is_recorded() {
    let w = world(vec![Policy::before("billing/refund", |_| {
        Decision::sandbox(SandboxRequirement::tier(IsolationTier::Process))
    })]);
    let err = w.refund(json!({"amount": 5})).unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    assert!(err.message.contains("runs in process"), "{}", err.message);

    let w = world(vec![Policy::before("billing/refund", |_| {
        Decision::log_only("would deny refunds on Fridays")
    })]);
    let r = w.refund(json!({"amount": 5})).unwrap();
    assert_eq!(r.status, ReceiptStatus::Succeeded);
}

#[test]
fn deny_after_execution_keeps_a_failed_receipt_and_withholds_the_output() {
    let w = world(vec![Policy::after("billing/refund", |ctx| {
        if ctx
            .output
            .as_ref()
            .is_some_and(|o| o.to_string().contains("4111"))
        {
            Decision::deny("Possible card number in output")
        } else {
            Decision::allow()
        }
    })]);
    let err = w.refund(json!({"amount": 5})).unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    let r = w
        .runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(r.status, ReceiptStatus::Failed);
    assert!(r.output.is_none());
    assert_eq!(
        r.error.as_ref().unwrap().message,
        "Output denied by policy: Possible card number in output"
    );
    assert_eq!(
        outcomes(&w.store).last(),
        Some(&AuditOutcome::DeniedAfterExecution)
    );
}

#[test]
fn shadow_mode_records_without_enforcing() {
    let w = world(vec![Policy::before("*", |_| {
        Decision::deny("everything is denied")
    })]);
    w.governor.policies().set_shadow_mode(true);
    let r = w.refund(json!({"amount": 5})).unwrap();
    assert_eq!(r.status, ReceiptStatus::Succeeded);
    let events = w.store.tail(None, 10).unwrap();
    assert!(
        events.iter().any(|e| !e.event["shadow"].is_null()),
        "{events:?}"
    );
    let _ = Stage::BeforeCapability;
}

#[test]
fn a_resumed_plan_with_a_decoded_token_reads_its_approval_once() {
    let store = Arc::new(CountingApprovals::default());
    let approvals = Arc::new(ApprovalManager::new(
        Arc::clone(&store) as Arc<dyn ApprovalStore>,
        HostKey::from_seed([9; 32]),
    ));
    let governor = Governor::new("support-agent").approvals(Arc::clone(&approvals));
    governor
        .policies()
        .register(Policy::before("billing/refund", |ctx| {
            if ctx.approval.is_some() {
                Decision::allow()
            } else {
                Decision::approval_required("Refunds need a human")
            }
        }));
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .governor(Arc::new(governor))
        .build();
    runtime.register(refund()).unwrap();
    let plan = runtime
        .plan("billing/refund", json!({"amount": 250}))
        .unwrap();
    let err = runtime
        .execute(&plan, &ExecuteOptions::default())
        .unwrap_err();
    let id = err.details.as_ref().unwrap()["approval"]["approvalId"]
        .as_str()
        .unwrap()
        .to_string();
    let token = approvals.approve(&id, "manager@acme", None).unwrap();

    // As a host resumes: the token decoded once (to find the plan), then handed down.
    let verified = approvals.decode(&token.0).unwrap();
    assert_eq!(verified.plan_fingerprint(), Some(plan.fingerprint.as_str()));
    let options = ExecuteOptions {
        verified_approval: Some(verified),
        ..Default::default()
    };
    let (gets, updates) = store.counts();
    let r = runtime.execute(&plan, &options).unwrap();
    assert_eq!(
        r.governance
            .as_ref()
            .unwrap()
            .approval
            .as_ref()
            .unwrap()
            .approver,
        "manager@acme"
    );
    assert_eq!(store.counts(), (gets + 1, updates + 1));
    // Single use.
    let replay = runtime.execute(&plan, &options).unwrap_err();
    assert_eq!(replay.code, ErrorCode::PermissionDenied);
    assert!(
        replay.message.contains("already used"),
        "{}",
        replay.message
    );
}

/// An audit sink that cannot write events of one outcome.
struct AuditFailsOn(AuditOutcome);

impl capability_policy::AuditSink for AuditFailsOn {
    fn emit(
        &self,
        event: &capability_policy::AuditEvent,
    ) -> Result<(), capability_policy::audit::AuditError> {
        if event.outcome == self.0 {
            return Err(capability_policy::audit::AuditError::Malformed {
                message: "disk full".into(),
            });
        }
        Ok(())
    }
}

#[test]
fn a_governance_failure_after_the_capability_ran_keeps_its_receipt() {
    for (outcome, fails) in [
        (AuditOutcome::Executed, false),
        (AuditOutcome::ExecutionFailed, true),
    ] {
        let governor = Governor::new("support-agent").audit(Arc::new(AuditFailsOn(outcome)));
        let runtime = CapabilityRuntime::builder()
            .policy(EffectPolicy::permissive())
            .governor(Arc::new(governor))
            .build();
        let capability = Capability::builder(json!({
            "specVersion": "0.1", "id": "x/maybe", "version": "1.0.0", "name": "Maybe",
            "description": "Fails when asked to.", "effects": []
        }))
        .execute_json(move |_, _| {
            if fails {
                Err(capability_runtime::HookError::named("RangeError", "boom"))
            } else {
                Ok(json!({"ok": true}))
            }
        })
        .build()
        .unwrap();
        runtime.register(capability).unwrap();
        let err = runtime
            .invoke("x/maybe", json!({}), &ExecuteOptions::default())
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ExecutionFailed);
        assert_eq!(
            err.message,
            "governance failed: audit event is malformed: disk full"
        );
        let receipts = runtime
            .list_receipts(&capability_runtime::ReceiptQuery::default())
            .unwrap();
        assert_eq!(receipts.len(), 1, "{outcome:?}: the evidence of what ran");
        let expected = if fails {
            ReceiptStatus::Failed
        } else {
            ReceiptStatus::Succeeded
        };
        assert_eq!(receipts[0].status, expected);
    }
}

/// An execution's error text is not delivered past a redaction (issue 30, item 5): when it
/// names what an after-stage `redact` hides, the agent, the receipt and the audit log get a
/// withheld text instead.
#[test]
fn an_error_text_naming_a_redacted_member_is_withheld() {
    let w = world(vec![
        Policy::after("vault/*", |_| Decision::redact(["/password"])).with_id("hide"),
    ]);
    for (id, message) in [
        ("vault/leaky", "upstream said: password=hunter2-secret"),
        ("vault/plain", "the vault is sealed"),
    ] {
        let cap = Capability::builder(json!({
            "specVersion": "0.1", "id": id, "version": "1.0.0", "name": "Vault",
            "description": "Reads a secret.", "effects": []
        }))
        .execute_json(move |_, _| Err(capability_runtime::HookError::msg(message)))
        .build()
        .unwrap();
        w.runtime.register(cap).unwrap();
    }
    let err = w
        .runtime
        .invoke("vault/leaky", json!({}), &ExecuteOptions::default())
        .unwrap_err();
    let receipt = w
        .runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    let everything = format!(
        "{err:?} {} {}",
        serde_json::to_string(receipt.as_ref()).unwrap(),
        serde_json::to_string(
            &w.store
                .tail(None, 100)
                .unwrap()
                .iter()
                .map(|r| &r.event)
                .collect::<Vec<_>>()
        )
        .unwrap()
    );
    assert!(!everything.contains("hunter2"), "{everything}");
    assert!(receipt.error.as_ref().unwrap().message.contains("withheld"));
    // A text that does not name it is kept.
    let err = w
        .runtime
        .invoke("vault/plain", json!({}), &ExecuteOptions::default())
        .unwrap_err();
    let receipt = w
        .runtime
        .get_receipt(err.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        receipt.error.as_ref().unwrap().message,
        "the vault is sealed"
    );
}
