//! Approvals bound to the exact plan: single use, expiry, binding to the input, forgery,
//! and survival across a restart of the SQLite store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::{cedar_engine, fixture_path, governor, returns};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use capability_policy::approvals::{ApprovalFilter, ApprovalRequest};
use capability_policy::clock::ManualClock;
use capability_policy::intercept::InterceptError;
use capability_policy::*;
use capability_test_support::approvals::CountingApprovals;
use serde_json::json;

const T0: i64 = 1_800_000_000_000;

fn delete_user() -> Arc<GovernedCapability> {
    Arc::new(GovernedCapability::new("delete_user", CapabilityKind::Tool).risk(RiskLevel::Critical))
}

fn action(input: serde_json::Value) -> AgentAction {
    AgentAction::new(ActionType::ToolCall, delete_user(), "ops-agent")
        .input(input)
        .tenant("acme")
        .plan_fingerprint("sha256:plan-1")
}

fn manager(store: Arc<dyn approvals::ApprovalStore>, clock: Arc<ManualClock>) -> ApprovalManager {
    ApprovalManager::new(store, HostKey::from_seed([7; 32])).with_clock(clock)
}

fn pending(m: &ApprovalManager, a: &AgentAction) -> ApprovalRecord {
    m.request(ApprovalRequest {
        action: a,
        reason: Some("delete_user requires approval".into()),
        policy_ids: vec!["delete_user_needs_approval".into()],
    })
    .unwrap()
}

#[test]
fn a_pending_approval_records_what_it_is_bound_to() {
    let clock = Arc::new(ManualClock::at(T0));
    let m = manager(Arc::new(MemoryStore::new()), clock);
    let a = action(json!({"user_id": "u1"}));
    let r = pending(&m, &a);
    assert!(r.approval_id.starts_with("apr_"));
    assert_eq!(r.status, ApprovalStatus::Pending);
    assert_eq!(r.plan_fingerprint.as_deref(), Some("sha256:plan-1"));
    assert_eq!(r.action_digest, a.digest());
    assert_eq!(r.requester, "ops-agent");
    assert_eq!(r.reason.as_deref(), Some("delete_user requires approval"));
    assert_eq!(r.expires_at, T0 + 24 * 3600 * 1000);
    assert_eq!(r.input, json!({"user_id": "u1"}));
    // Asking again for the same action finds the same pending approval.
    assert_eq!(
        pending(&m, &action(json!({"user_id": "u1"}))).approval_id,
        r.approval_id
    );
    assert_ne!(
        pending(&m, &action(json!({"user_id": "u2"}))).approval_id,
        r.approval_id
    );
}

#[test]
fn an_approved_token_works_once() {
    let clock = Arc::new(ManualClock::at(T0));
    let m = manager(Arc::new(MemoryStore::new()), clock);
    let a = action(json!({"user_id": "u1"}));
    let r = pending(&m, &a);
    let token = m
        .approve(&r.approval_id, "alice", Some("ticket OPS-9".into()))
        .unwrap();
    let granted = m.redeem_for(&token.0, &a).unwrap();
    assert_eq!(
        (granted.approval_id.as_str(), granted.approver.as_str()),
        (r.approval_id.as_str(), "alice")
    );
    let after = m.get(&r.approval_id).unwrap();
    assert_eq!(after.status, ApprovalStatus::Consumed);
    assert_eq!(after.decided_by.as_deref(), Some("alice"));
    // Replay is refused.
    assert!(matches!(
        m.redeem_for(&token.0, &a),
        Err(ApprovalError::Replayed)
    ));
    // And approving again is impossible.
    assert!(matches!(
        m.approve(&r.approval_id, "alice", None),
        Err(ApprovalError::NotPending {
            status: ApprovalStatus::Consumed,
            ..
        })
    ));
}

#[test]
fn an_expired_token_or_pending_approval_is_refused() {
    let clock = Arc::new(ManualClock::at(T0));
    let m = manager(Arc::new(MemoryStore::new()), clock.clone()).with_token_ttl_ms(60_000);
    let a = action(json!({"user_id": "u1"}));
    let r = pending(&m, &a);
    let token = m.approve(&r.approval_id, "alice", None).unwrap();
    clock.advance(60_000);
    assert!(matches!(
        m.redeem_for(&token.0, &a),
        Err(ApprovalError::TokenExpired)
    ));
    assert_eq!(
        m.get(&r.approval_id).unwrap().status,
        ApprovalStatus::Approved
    );

    // A pending approval past its expiry cannot be approved, and is listed as expired.
    let m = m.with_pending_ttl_ms(1000);
    let b = action(json!({"user_id": "u2"}));
    let r2 = pending(&m, &b);
    clock.advance(1000);
    assert!(matches!(
        m.approve(&r2.approval_id, "alice", None),
        Err(ApprovalError::Expired { .. })
    ));
    assert_eq!(
        m.get(&r2.approval_id).unwrap().status,
        ApprovalStatus::Expired
    );
    let r3 = pending(&m, &action(json!({"user_id": "u3"})));
    clock.advance(5000);
    let expired = m
        .list(&ApprovalFilter {
            status: Some(ApprovalStatus::Expired),
            ..ApprovalFilter::default()
        })
        .unwrap();
    assert!(expired.iter().any(|x| x.approval_id == r3.approval_id));
}

#[test]
fn a_changed_input_or_plan_is_refused() {
    let clock = Arc::new(ManualClock::at(T0));
    let m = manager(Arc::new(MemoryStore::new()), clock);
    let a = action(json!({"user_id": "u1"}));
    let r = pending(&m, &a);
    let token = m.approve(&r.approval_id, "alice", None).unwrap();
    let changed = action(json!({"user_id": "u1", "cascade": true}));
    assert!(matches!(
        m.redeem_for(&token.0, &changed),
        Err(ApprovalError::ActionMismatch)
    ));
    let other_plan = action(json!({"user_id": "u1"})).plan_fingerprint("sha256:plan-2");
    assert!(matches!(
        m.redeem_for(&token.0, &other_plan),
        Err(ApprovalError::PlanMismatch { .. })
    ));
    let other_tenant = action(json!({"user_id": "u1"})).tenant("globex");
    assert!(matches!(
        m.redeem_for(&token.0, &other_tenant),
        Err(ApprovalError::ActionMismatch)
    ));
    // None of the refusals consumed it.
    assert!(m.redeem_for(&token.0, &a).is_ok());
}

#[test]
fn forged_tokens_are_refused() {
    let clock = Arc::new(ManualClock::at(T0));
    let store: Arc<MemoryStore> = Arc::new(MemoryStore::new());
    let m = manager(store.clone(), clock.clone());
    let a = action(json!({"user_id": "u1"}));
    let r = pending(&m, &a);
    let token = m.approve(&r.approval_id, "alice", None).unwrap();
    let parts: Vec<&str> = token.0.split('.').collect();
    assert_eq!(parts.len(), 3);

    // 1. Payload edited (later expiry) with the old signature.
    let mut payload: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    payload["expiresAt"] = json!(T0 * 2);
    let edited = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(capability_core::json::canonical_string(&payload)),
        parts[2]
    );
    assert!(matches!(
        m.redeem_for(&edited, &a),
        Err(ApprovalError::BadSignature)
    ));

    // 2. A token minted by another host's key for the same approval.
    let other_host =
        ApprovalManager::new(store.clone(), HostKey::from_seed([9; 32])).with_clock(clock.clone());
    let b = action(json!({"user_id": "u9"}));
    let rb = pending(&m, &b);
    let foreign = other_host
        .approve(&rb.approval_id, "mallory", None)
        .unwrap();
    assert!(matches!(
        m.redeem_for(&foreign.0, &b),
        Err(ApprovalError::BadSignature)
    ));

    // 3. Garbage.
    for bad in [
        "",
        "capapr1.x",
        "capapr2.a.b",
        "capapr1.!!.??",
        &format!("{}.{}.AAAA", parts[0], parts[1]),
    ] {
        assert!(
            matches!(m.redeem_for(bad, &a), Err(ApprovalError::Malformed { .. })),
            "{bad}"
        );
    }
    // The genuine token still works.
    assert!(m.redeem_for(&token.0, &a).is_ok());
}

#[test]
fn requesters_cannot_approve_themselves_and_denials_stick() {
    let clock = Arc::new(ManualClock::at(T0));
    let m = manager(Arc::new(MemoryStore::new()), clock);
    let a = action(json!({"user_id": "u1"})).principal("bob");
    let r = pending(&m, &a);
    assert_eq!(r.requester, "bob");
    assert!(matches!(
        m.approve(&r.approval_id, "bob", None),
        Err(ApprovalError::SelfApproval { .. })
    ));
    assert!(matches!(
        m.approve(&r.approval_id, "ops-agent", None),
        Err(ApprovalError::SelfApproval { .. })
    ));
    assert!(matches!(
        m.approve(&r.approval_id, " ", None),
        Err(ApprovalError::NoApprover)
    ));
    let denied = m.deny(&r.approval_id, "carol", Some("no".into())).unwrap();
    assert_eq!(denied.status, ApprovalStatus::Denied);
    assert!(matches!(
        m.approve(&r.approval_id, "alice", None),
        Err(ApprovalError::NotPending { .. })
    ));
    assert!(matches!(
        m.get("apr_missing"),
        Err(ApprovalError::NotFound { .. })
    ));
}

#[test]
fn pending_approvals_and_consumption_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state/capability.db");
    let key_path = dir.path().join("keys/host.key");
    let a = action(json!({"user_id": "u1"}));
    let (id, token) = {
        let store = Arc::new(SqliteStore::open(&db).unwrap());
        let key = HostKey::load_or_generate(&key_path).unwrap();
        let m = ApprovalManager::new(store, key);
        let r = pending(&m, &a);
        (r.approval_id, m)
    }
    .pipe(|(id, m)| (id.clone(), m.approve(&id, "alice", None).unwrap()));
    // Reopen the database and reload the key: the approval and its token are still good.
    {
        let store = Arc::new(SqliteStore::open(&db).unwrap());
        let m = ApprovalManager::new(store, HostKey::load(&key_path).unwrap());
        let r = m.get(&id).unwrap();
        assert_eq!(r.status, ApprovalStatus::Approved);
        assert_eq!(r.input, json!({"user_id": "u1"}));
        m.redeem_for(&token.0, &a).unwrap();
    }
    // Consumed stays consumed after another restart.
    let store = Arc::new(SqliteStore::open(&db).unwrap());
    let m = ApprovalManager::new(store, HostKey::load(&key_path).unwrap());
    assert!(matches!(
        m.redeem_for(&token.0, &a),
        Err(ApprovalError::Replayed)
    ));
    // A pending one survives too.
    let b = action(json!({"user_id": "u2"}));
    let pending_id = pending(&m, &b).approval_id;
    drop(m);
    let store = Arc::new(SqliteStore::open(&db).unwrap());
    let m = ApprovalManager::new(store, HostKey::load(&key_path).unwrap());
    let listed = m
        .list(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            ..ApprovalFilter::default()
        })
        .unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|r| r.approval_id.clone())
            .collect::<Vec<_>>(),
        [pending_id]
    );
}

trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<T> Pipe for T {}

#[test]
fn the_host_key_round_trips_through_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k/host.key");
    let key = HostKey::generate().unwrap();
    key.save(&path).unwrap();
    let loaded = HostKey::load(&path).unwrap();
    assert_eq!(loaded.public_key_base64(), key.public_key_base64());
    assert_eq!(loaded.key_id().len(), 16);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    std::fs::write(&path, "not base64!").unwrap();
    assert!(
        HostKey::load(&path)
            .unwrap_err()
            .to_string()
            .contains("is not base64")
    );
    assert_ne!(
        HostKey::generate().unwrap().public_key_base64(),
        key.public_key_base64()
    );
}

#[test]
fn the_governor_holds_then_releases_an_approved_action_exactly_once() {
    let text = std::fs::read_to_string(fixture_path(
        "scenarios/s08_destructive_tool_needs_approval.cedar",
    ))
    .unwrap();
    let clock = Arc::new(ManualClock::at(T0));
    let store = Arc::new(MemoryStore::new());
    let approvals = Arc::new(manager(store.clone(), clock));
    let (g, sink) = governor("ops-agent", Environment::Prod);
    let g = g
        .engine(cedar_engine("s08.cedar", &text))
        .approvals(approvals.clone())
        .tenant("acme");
    g.register_capability(
        GovernedCapability::new("delete_user", CapabilityKind::Tool).risk(RiskLevel::Critical),
    );
    let req = || {
        InterceptRequest::new(
            "delete_user",
            ActionType::ToolCall,
            json!({"user_id": "u1"}),
        )
        .plan_fingerprint("sha256:plan-1")
    };
    let mut runs = 0;
    let err = g
        .intercept(req(), |_| {
            runs += 1;
            Ok::<_, String>(json!("deleted"))
        })
        .unwrap_err();
    let InterceptError::ApprovalRequired {
        approval: Some(record),
        ..
    } = err
    else {
        panic!("expected a pending approval, got {err}")
    };
    assert_eq!(runs, 0);
    assert_eq!(record.policy_ids, ["delete_user_needs_approval"]);
    let held = sink.events().pop().unwrap();
    assert_eq!(held.outcome, AuditOutcome::ApprovalRequired);
    assert_eq!(
        held.approval_id.as_deref(),
        Some(record.approval_id.as_str())
    );

    let token = approvals
        .approve(&record.approval_id, "alice", None)
        .unwrap();
    // A changed input does not ride on the approval.
    let changed = InterceptRequest::new(
        "delete_user",
        ActionType::ToolCall,
        json!({"user_id": "u2"}),
    )
    .plan_fingerprint("sha256:plan-1")
    .approval_token(token.0.clone());
    assert!(matches!(
        g.intercept(changed, returns(json!("deleted"))),
        Err(InterceptError::Approval(ApprovalError::ActionMismatch))
    ));
    let r = g
        .intercept(req().approval_token(token.0.clone()), |_| {
            runs += 1;
            Ok::<_, String>(json!("deleted"))
        })
        .unwrap();
    assert_eq!((r.output.clone(), runs), (json!("deleted"), 1));
    assert!(r.before.as_ref().unwrap().approval_satisfied);
    let executed = sink.events().pop().unwrap();
    assert_eq!(executed.outcome, AuditOutcome::Executed);
    assert_eq!(
        executed.approval_id.as_deref(),
        Some(record.approval_id.as_str())
    );
    // Replaying the token is refused and audited.
    let replay = g.intercept(req().approval_token(token.0), returns(json!("deleted")));
    assert!(matches!(
        replay,
        Err(InterceptError::Approval(ApprovalError::Replayed))
    ));
    let refused = sink.events().pop().unwrap();
    assert_eq!(refused.outcome, AuditOutcome::DeniedBeforeExecution);
    assert_eq!(refused.code.as_deref(), Some("approval_invalid"));
}

/// The one rule of `Decider::check`, each comparison alone: the request's requester or
/// agent against the decider's name, principal id and agent id; and the tenant scope.
#[test]
fn the_one_rule_compares_every_name_of_the_decider() {
    let clock = Arc::new(ManualClock::at(T0));
    let m = manager(Arc::new(MemoryStore::new()), clock);
    // Requested by principal `token:t1` through agent `ops-agent`, tenant acme.
    let a = action(json!({"user_id": "u2"}))
        .principal("token:t1")
        .tenant("acme");
    let r = pending(&m, &a);
    assert_eq!(
        (r.requester.as_str(), r.agent_id.as_str()),
        ("token:t1", "ops-agent")
    );
    let own = |d: Decider| matches!(d.check(&r), Err(ApprovalError::SelfApproval { .. }));
    // By principal id: the requester is the decider's id.
    assert!(own(Decider::named("alice").also_known_as("token:t1")));
    // By name: the requester, or the agent, is the decider's name.
    assert!(own(Decider::named("token:t1")));
    assert!(own(Decider::named("ops-agent")));
    // By agent id: the agent is the decider's agent.
    assert!(own(Decider::named("dave").also_known_as("ops-agent")));
    // Anyone else may, for the approval's tenant only.
    assert!(Decider::named("carol").check(&r).is_ok());
    assert!(
        Decider::named("carol")
            .for_tenants(["acme".to_string()])
            .check(&r)
            .is_ok()
    );
    assert!(matches!(
        Decider::named("carol")
            .for_tenants(["globex".to_string()])
            .check(&r),
        Err(ApprovalError::OtherTenant { .. })
    ));
    // `decide` applies the rule.
    assert!(matches!(
        m.decide(
            &r.approval_id,
            &Decider::named("dave").also_known_as("ops-agent"),
            ApprovalDecision::Approve,
            None
        ),
        Err(ApprovalError::SelfApproval { .. })
    ));
    let decided = m
        .decide(
            &r.approval_id,
            &Decider::named("carol"),
            ApprovalDecision::Approve,
            None,
        )
        .unwrap();
    assert!(decided.token.is_some());
    assert_eq!(decided.record.decided_by.as_deref(), Some("carol"));
}

/// A governor holding `delete_user` for approval (unless approved).
fn held_governor(approvals: Arc<ApprovalManager>) -> Governor {
    let (g, _) = governor("ops-agent", Environment::Prod);
    let g = g.approvals(approvals).tenant("acme");
    g.register_capability(
        GovernedCapability::new("delete_user", CapabilityKind::Tool).risk(RiskLevel::Critical),
    );
    g.policies().register(Policy::before("delete_user", |ctx| {
        if ctx.approval.is_some() {
            Decision::allow()
        } else {
            Decision::approval_required("a human decides")
        }
    }));
    g
}

fn delete_u1() -> InterceptRequest {
    InterceptRequest::new(
        "delete_user",
        ActionType::ToolCall,
        json!({"user_id": "u1"}),
    )
    .plan_fingerprint("sha256:plan-1")
}

/// The approval a held call asked for, approved by alice: its token.
fn approved(g: &Governor, m: &ApprovalManager) -> approvals::ApprovalToken {
    let Err(InterceptError::ApprovalRequired {
        approval: Some(record),
        ..
    }) = g.intercept(delete_u1(), returns(json!("deleted")))
    else {
        panic!("the call must be held for approval");
    };
    m.approve(&record.approval_id, "alice", None).unwrap()
}

#[test]
fn a_released_call_reads_the_approval_once_and_consumes_it_with_one_compare_and_set() {
    let store = Arc::new(CountingApprovals::default());
    let m = Arc::new(manager(store.clone(), Arc::new(ManualClock::at(T0))));
    let g = held_governor(m.clone());
    let token = approved(&g, &m);

    let (gets, updates) = store.counts();
    let r = g
        .intercept(
            delete_u1().approval_token(token.0.clone()),
            returns(json!("deleted")),
        )
        .unwrap();
    let granted = r.approval.unwrap();
    assert_eq!(granted.approver, "alice");
    assert_eq!(store.counts(), (gets + 1, updates + 1));
    assert_eq!(
        m.get(&granted.approval_id).unwrap().status,
        ApprovalStatus::Consumed
    );

    // A replay reads the record once more, finds it consumed and writes nothing.
    let (gets, updates) = store.counts();
    let replay = g.intercept(
        delete_u1().approval_token(token.0),
        returns(json!("deleted")),
    );
    assert!(matches!(
        replay,
        Err(InterceptError::Approval(ApprovalError::Replayed))
    ));
    assert_eq!(store.counts(), (gets + 1, updates));
}

#[test]
fn a_token_the_host_verified_is_not_decoded_again_and_is_still_single_use() {
    let store = Arc::new(CountingApprovals::default());
    let m = Arc::new(manager(store.clone(), Arc::new(ManualClock::at(T0))));
    let g = held_governor(m.clone());
    let token = approved(&g, &m);
    let verified = m.decode(&token.0).unwrap();
    assert_eq!(verified.plan_fingerprint(), Some("sha256:plan-1"));

    // The request's text is not read when it carries a verified token: not even a
    // malformed one is decoded.
    let (gets, updates) = store.counts();
    let r = g
        .intercept(
            delete_u1()
                .verified_approval(verified.clone())
                .approval_token("not a token"),
            returns(json!("deleted")),
        )
        .unwrap();
    assert_eq!(
        r.approval.unwrap().approval_id,
        verified.approval_id().to_string()
    );
    assert_eq!(store.counts(), (gets + 1, updates + 1));
    // Still single use.
    let replay = g.intercept(
        delete_u1().verified_approval(verified.clone()),
        returns(json!("deleted")),
    );
    assert!(matches!(
        replay,
        Err(InterceptError::Approval(ApprovalError::Replayed))
    ));
    // Still bound to the plan and the action.
    let other_plan = g.intercept(
        delete_u1()
            .plan_fingerprint("sha256:plan-2")
            .verified_approval(verified.clone()),
        returns(json!("deleted")),
    );
    assert!(matches!(
        other_plan,
        Err(InterceptError::Approval(ApprovalError::PlanMismatch { .. }))
    ));
}

#[test]
fn a_token_verified_by_another_hosts_manager_is_refused() {
    let clock = Arc::new(ManualClock::at(T0));
    let store = Arc::new(MemoryStore::new());
    let ours = Arc::new(manager(store.clone(), clock.clone()));
    let theirs = Arc::new(
        ApprovalManager::new(store.clone(), HostKey::from_seed([8; 32])).with_clock(clock),
    );
    // Their host held the same call and approved it with its own key.
    let token = approved(&held_governor(theirs.clone()), &theirs);
    let foreign = theirs.decode(&token.0).unwrap();
    assert!(matches!(
        ours.decode(&token.0),
        Err(ApprovalError::BadSignature)
    ));
    let g = held_governor(ours);
    let r = g.intercept(
        delete_u1().verified_approval(foreign),
        returns(json!("deleted")),
    );
    assert!(matches!(
        r,
        Err(InterceptError::Approval(ApprovalError::BadSignature))
    ));
}

#[test]
fn a_token_verified_twice_is_redeemed_once_and_not_after_its_expiry() {
    let clock = Arc::new(ManualClock::at(T0));
    let m = manager(Arc::new(MemoryStore::new()), clock.clone());
    let a = action(json!({"user_id": "u1"}));
    let token = m
        .approve(&pending(&m, &a).approval_id, "alice", None)
        .unwrap();
    let verify = || {
        m.verify_decoded(
            m.decode(&token.0).unwrap(),
            a.plan_fingerprint.as_deref(),
            &a.digest(),
        )
        .unwrap()
    };
    // Two calls verified the same token before either redeemed it: the compare-and-set
    // lets one through.
    let (first, second) = (verify(), verify());
    assert_eq!(first.record().status, ApprovalStatus::Approved);
    assert_eq!(m.redeem_verified(first).unwrap().approver, "alice");
    assert!(matches!(
        m.redeem_verified(second),
        Err(ApprovalError::Replayed)
    ));

    // A verified token that expires before it is redeemed is refused, and not consumed.
    let b = action(json!({"user_id": "u2"}));
    let token = m
        .approve(&pending(&m, &b).approval_id, "alice", None)
        .unwrap();
    let verified = m
        .verify_decoded(
            m.decode(&token.0).unwrap(),
            b.plan_fingerprint.as_deref(),
            &b.digest(),
        )
        .unwrap();
    let id = verified.record().approval_id.clone();
    clock.advance(15 * 60 * 1000);
    assert!(matches!(
        m.redeem_verified(verified),
        Err(ApprovalError::TokenExpired)
    ));
    assert_eq!(m.get(&id).unwrap().status, ApprovalStatus::Approved);
}
