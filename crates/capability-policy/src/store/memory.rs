//! An in-memory store with the same semantics as the SQLite one.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::approvals::{ApprovalFilter, ApprovalRecord, ApprovalStatus, ApprovalStore};
use crate::audit::{
    AuditError, AuditEvent, AuditRecord, AuditSink, AuditStore, GENESIS_HASH, chain_hash,
};

use super::StoreError;

#[derive(Default)]
struct Inner {
    records: Vec<AuditRecord>,
    ids: HashSet<String>,
    head: Option<(u64, String)>,
    approvals: Vec<ApprovalRecord>,
}

/// Audit log and approvals in memory (lost on drop).
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        match self.inner.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// Direct access to the stored records, to simulate tampering in tests.
    pub fn tamper(&self, f: impl FnOnce(&mut Vec<AuditRecord>)) {
        self.with(|i| f(&mut i.records));
    }
}

impl AuditStore for MemoryStore {
    fn append(&self, events: &[AuditEvent]) -> Result<Vec<AuditRecord>, StoreError> {
        self.with(|i| {
            let mut batch = HashSet::new();
            for e in events {
                if i.ids.contains(&e.event_id) || !batch.insert(e.event_id.as_str()) {
                    return Err(StoreError::Duplicate {
                        event_id: e.event_id.clone(),
                    });
                }
            }
            let (mut seq, mut prev) = i.head.clone().unwrap_or((0, GENESIS_HASH.to_string()));
            let mut out = Vec::with_capacity(events.len());
            for e in events {
                seq += 1;
                let event = e.to_json();
                let hash = chain_hash(seq, &prev, &event);
                let r = AuditRecord {
                    seq,
                    prev_hash: prev.clone(),
                    hash: hash.clone(),
                    event,
                };
                prev = hash;
                i.ids.insert(e.event_id.clone());
                i.records.push(r.clone());
                out.push(r);
            }
            if !events.is_empty() {
                i.head = Some((seq, prev));
            }
            Ok(out)
        })
    }

    fn tail(&self, tenant: Option<&str>, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.with(|i| {
            let mut out: Vec<AuditRecord> = i
                .records
                .iter()
                .rev()
                .filter(|r| {
                    tenant.is_none_or(|t| {
                        r.event.get("tenant_id").and_then(|v| v.as_str()) == Some(t)
                    })
                })
                .take(limit)
                .cloned()
                .collect();
            out.reverse();
            out
        }))
    }

    fn get(&self, event_id: &str) -> Result<Option<AuditRecord>, StoreError> {
        Ok(self.with(|i| {
            i.records
                .iter()
                .find(|r| r.event_id() == Some(event_id))
                .cloned()
        }))
    }

    fn records(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.with(|i| {
            let mut v: Vec<AuditRecord> = i
                .records
                .iter()
                .filter(|r| r.seq >= from_seq)
                .cloned()
                .collect();
            v.sort_by_key(|r| r.seq);
            v.truncate(limit);
            v
        }))
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        Ok(self.with(|i| i.head.clone()))
    }
}

impl AuditSink for MemoryStore {
    fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        self.append(std::slice::from_ref(event))?;
        Ok(())
    }
}

impl ApprovalStore for MemoryStore {
    fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        self.with(|i| i.approvals.push(record.clone()));
        Ok(())
    }

    fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(self.with(|i| i.approvals.iter().find(|a| a.approval_id == id).cloned()))
    }

    fn list_approvals(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, StoreError> {
        Ok(self.with(|i| {
            let mut v: Vec<ApprovalRecord> = i
                .approvals
                .iter()
                .rev()
                .filter(|a| filter.status.is_none_or(|s| a.status == s))
                .filter(|a| {
                    filter
                        .tenant
                        .as_ref()
                        .is_none_or(|t| a.tenant.as_ref() == Some(t))
                })
                .cloned()
                .collect();
            if let Some(l) = filter.limit {
                v.truncate(l);
            }
            v
        }))
    }

    fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected: ApprovalStatus,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|i| {
            match i
                .approvals
                .iter_mut()
                .find(|a| a.approval_id == record.approval_id)
            {
                Some(slot) if slot.status == expected => {
                    *slot = record.clone();
                    true
                }
                _ => false,
            }
        }))
    }
}
