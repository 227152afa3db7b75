//! Approvals for tests: [`CountingApprovals`], an in-memory store that counts its reads and
//! compare-and-sets (how many times a resumed plan reads its approval), and
//! [`pending_approval`], generated pending records (a webhook's payload, the console's pages).

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use capability_policy::approvals::{ApprovalFilter, ApprovalStore};
use capability_policy::store::{MemoryStore, StoreError};
use capability_policy::{ApprovalRecord, ApprovalStatus};
use serde_json::json;

/// The `i`th of a set of generated pending approvals (`apr_<i as 16 hex digits>`): of
/// `text/slugify`, by one of 50 agents in one of 10 tenants, with a secret in its input.
pub fn pending_approval(i: usize) -> ApprovalRecord {
    ApprovalRecord {
        approval_id: format!("apr_{i:016x}"),
        status: ApprovalStatus::Pending,
        plan_fingerprint: Some(format!("sha256:{i:064x}")),
        action_digest: format!("{i:064x}"),
        capability: "text/slugify".into(),
        action_type: "tool_call".into(),
        agent_id: format!("agent-{}", i % 50),
        tenant: Some(format!("tenant-{}", i % 10)),
        environment: "prod".into(),
        requester: format!("token:tok_{i:012x}"),
        reason: Some("secrets need a human".into()),
        policy_ids: vec!["policy0".into(), "secrets-need-approval".into()],
        input: json!({"text": format!("a secret plan number {i}"), "apiKey": "sk-123", "options": {"separator": "-", "lower": true}}),
        action_id: format!("act_{i}"),
        trace_id: format!("trc_{i}"),
        created_at: 1_700_000_000_000 + i as i64,
        expires_at: 1_900_000_000_000,
        decided_by: None,
        decided_at: None,
        note: None,
        token_nonce: None,
        token_expires_at: None,
        consumed_at: None,
    }
}

/// An approval store that counts its reads and compare-and-sets.
#[derive(Default)]
pub struct CountingApprovals {
    inner: MemoryStore,
    gets: AtomicUsize,
    updates: AtomicUsize,
}

impl CountingApprovals {
    /// (reads, compare-and-sets) so far.
    pub fn counts(&self) -> (usize, usize) {
        (self.gets.load(SeqCst), self.updates.load(SeqCst))
    }
}

impl ApprovalStore for CountingApprovals {
    fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        self.inner.insert_approval(record)
    }
    fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.gets.fetch_add(1, SeqCst);
        self.inner.get_approval(id)
    }
    fn list_approvals(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.inner.list_approvals(filter)
    }
    fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected: ApprovalStatus,
    ) -> Result<bool, StoreError> {
        self.updates.fetch_add(1, SeqCst);
        self.inner.update_approval(record, expected)
    }
    fn approval_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, ApprovalRecord)>, StoreError> {
        self.inner.approval_changes(after, limit)
    }
    fn approval_change_head(&self) -> Result<u64, StoreError> {
        self.inner.approval_change_head()
    }
}
