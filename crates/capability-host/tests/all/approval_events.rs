//! Approval changes as a stream: a subscriber hears of every approval created or decided,
//! by this host or by another one on the same home (another process: the CLI in a
//! terminal), in order, without polling.

use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use capability_host::{
    Actor, ApprovalChange, ApprovalDecision, ApprovalEvents, ApprovalStatus, Outcome, Principal,
    Request,
};
use serde_json::json;

const WITHIN: Duration = Duration::from_secs(10);

const POLICY: &str = r#"permit(principal, action, resource);
@decision("approval_required") forbid(principal, action, resource) when { context.input.text like "*secret*" };"#;

/// The changes of `events`, forwarded by a thread that waits on the stream (it is woken by
/// writes, not polled, so each arrives as soon as it is recorded).
fn forward(mut events: ApprovalEvents) -> Receiver<ApprovalChange> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        while let Ok(change) = events.blocking_recv() {
            if tx.send(change).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn changes_made_here_and_by_another_host_on_the_home_arrive_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), Some(POLICY));
    let events = forward(host.approval_events());

    // Created here.
    let request = Request::new("text/slugify", json!({"text": "a secret"})).by(Actor::agent("bot"));
    let Outcome::NeedsApproval(pending) = host.invoke(&request) else {
        panic!("approval expected")
    };
    let id = pending.approval.unwrap().approval_id;
    let created = events.recv_timeout(WITHIN).unwrap();
    assert_eq!(created.record.approval_id, id);
    assert_eq!(created.record.status, ApprovalStatus::Pending);

    // Decided by another host on the same home: this one learns of it from the database.
    let other = crate::host_with(dir.path(), Some(POLICY));
    other
        .decide_approval(
            &Principal::operator("alice"),
            &id,
            ApprovalDecision::Deny,
            Some("no".into()),
        )
        .unwrap();
    let decided = events.recv_timeout(WITHIN).unwrap();
    assert_eq!(decided.record.approval_id, id);
    assert_eq!(decided.record.status, ApprovalStatus::Denied);
    assert!(decided.position > created.position);
    // Each change once.
    assert!(events.recv_timeout(Duration::from_millis(200)).is_err());
}
