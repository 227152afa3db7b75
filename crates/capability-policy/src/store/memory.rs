//! An in-memory store with the same semantics as the SQLite one.
//!
//! Events emitted through [`AuditSink`] are kept as they are and chained on the next read
//! (or append): the chain only has to exist when someone looks at it, and chaining later
//! gives the same records as chaining at once, since the order is fixed when they are
//! emitted.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::approvals::{ApprovalFilter, ApprovalRecord, ApprovalStatus, ApprovalStore};
use crate::audit::{
    AuditError, AuditEvent, AuditQuery, AuditRecord, AuditSink, AuditStore, GENESIS_HASH,
    TenantLink, chain_hash_text,
};

use super::StoreError;

#[derive(Default)]
struct Inner {
    records: Vec<AuditRecord>,
    /// Emitted events not chained yet, in order (see the module docs).
    pending: Vec<AuditEvent>,
    /// Ids of every event, chained or pending.
    ids: HashSet<String>,
    head: Option<(u64, String)>,
    /// The head of each tenant's chain.
    tenant_heads: std::collections::HashMap<String, (u64, String)>,
    approvals: Vec<ApprovalRecord>,
    /// The approval id of every change, the first at position 1.
    approval_changes: Vec<String>,
    checkpoints: u64,
}

impl Inner {
    /// Chains the pending events.
    fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        self.chain(pending.iter());
    }

    /// Chains events (ids already checked and recorded) after the head; returns the index
    /// of the first new record.
    fn chain<'a>(&mut self, events: impl Iterator<Item = &'a AuditEvent>) -> usize {
        let first = self.records.len();
        let (mut seq, mut prev) = self.head.take().unwrap_or((0, GENESIS_HASH.to_string()));
        let mut text = String::with_capacity(1024);
        for e in events {
            seq += 1;
            text.clear();
            e.write_canonical(&mut text);
            let hash = chain_hash_text(seq, &prev, &text);
            let tenant_link = e.tenant_id.as_ref().map(|t| {
                let link = TenantLink::after(t, self.tenant_heads.get(t), &text);
                self.tenant_heads
                    .insert(t.clone(), (link.seq, link.hash.clone()));
                link
            });
            let r = AuditRecord {
                seq,
                prev_hash: std::mem::replace(&mut prev, hash.clone()),
                hash,
                event: e.to_json(),
                tenant_link,
            };
            self.records.push(r);
        }
        if seq > 0 {
            self.head = Some((seq, prev));
        }
        first
    }
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
        self.with(|i| {
            i.settle();
            f(&mut i.records)
        });
    }

    /// Like [`MemoryStore::with`], with every emitted event chained first.
    fn settled<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        self.with(|i| {
            i.settle();
            f(i)
        })
    }
}

impl AuditStore for MemoryStore {
    fn append(&self, events: &[AuditEvent]) -> Result<Vec<AuditRecord>, StoreError> {
        self.settled(|i| {
            let mut batch = HashSet::new();
            for e in events {
                if i.ids.contains(&e.event_id) || !batch.insert(e.event_id.as_str()) {
                    return Err(StoreError::Duplicate {
                        event_id: e.event_id.clone(),
                    });
                }
            }
            i.ids.extend(events.iter().map(|e| e.event_id.clone()));
            let first = i.chain(events.iter());
            Ok(i.records[first..].to_vec())
        })
    }

    fn query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.settled(|i| {
            if !query.time_ordered() {
                return i
                    .records
                    .iter()
                    .rev()
                    .filter(|r| query.before.is_none_or(|b| r.seq < b) && query.matches(r))
                    .take(query.limit)
                    .cloned()
                    .collect();
            }
            // Newest by (timestamp, seq), as the SQLite store orders a time range.
            let key = |r: &AuditRecord| {
                let time = r.event.get("timestamp").and_then(|v| v.as_str());
                (time.unwrap_or_default().to_string(), r.seq)
            };
            let cursor = query
                .before
                .and_then(|b| i.records.iter().find(|r| r.seq == b))
                .map(key);
            let mut out: Vec<(_, &AuditRecord)> = i
                .records
                .iter()
                .filter(|r| query.matches(r))
                .map(|r| (key(r), r))
                .filter(|(k, _)| match (&cursor, query.before) {
                    (Some(c), _) => k < c,
                    (None, Some(_)) => false,
                    (None, None) => true,
                })
                .collect();
            out.sort_by(|a, b| b.0.cmp(&a.0));
            out.into_iter()
                .take(query.limit)
                .map(|(_, r)| r.clone())
                .collect()
        }))
    }

    fn tail(&self, tenant: Option<&str>, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.settled(|i| {
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
        Ok(self.settled(|i| {
            i.records
                .iter()
                .find(|r| r.event_id() == Some(event_id))
                .cloned()
        }))
    }

    fn records(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.settled(|i| {
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
        Ok(self.settled(|i| i.head.clone()))
    }

    fn tenant_records(
        &self,
        tenant: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self.settled(|i| {
            let mut v: Vec<AuditRecord> = i
                .records
                .iter()
                .filter(|r| {
                    r.tenant_link
                        .as_ref()
                        .is_some_and(|l| l.tenant == tenant && l.seq >= from_seq)
                })
                .cloned()
                .collect();
            v.sort_by_key(|r| r.tenant_link.as_ref().map_or(0, |l| l.seq));
            v.truncate(limit);
            v
        }))
    }

    fn tenant_head(&self, tenant: &str) -> Result<Option<(u64, String)>, StoreError> {
        Ok(self.settled(|i| i.tenant_heads.get(tenant).cloned()))
    }

    fn tenant_link_before(
        &self,
        tenant: &str,
        before: u64,
    ) -> Result<Option<TenantLink>, StoreError> {
        Ok(self.settled(|i| {
            i.records
                .iter()
                .rev()
                .filter(|r| r.seq < before)
                .find_map(|r| r.tenant_link.as_ref().filter(|l| l.tenant == tenant))
                .cloned()
        }))
    }

    fn record_checkpoint(&self, _: u64, _: &str, _: &str) -> Result<u64, StoreError> {
        Ok(self.settled(|i| {
            i.checkpoints += 1;
            i.checkpoints
        }))
    }

    fn checkpoints_issued(&self) -> Result<u64, StoreError> {
        Ok(self.settled(|i| i.checkpoints))
    }
}

impl AuditSink for MemoryStore {
    fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        self.emit_owned(event.clone())
    }

    /// Records the event; it is chained on the next read (see the module docs).
    fn emit_owned(&self, event: AuditEvent) -> Result<(), AuditError> {
        self.with(|i| {
            if !i.ids.insert(event.event_id.clone()) {
                return Err(StoreError::Duplicate {
                    event_id: event.event_id,
                });
            }
            i.pending.push(event);
            Ok(())
        })?;
        Ok(())
    }
}

impl ApprovalStore for MemoryStore {
    fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        self.with(|i| {
            i.approvals.push(record.clone());
            i.approval_changes.push(record.approval_id.clone());
        });
        Ok(())
    }

    fn approval_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, ApprovalRecord)>, StoreError> {
        Ok(self.with(|i| {
            let start = usize::try_from(after).unwrap_or(usize::MAX);
            i.approval_changes
                .iter()
                .enumerate()
                .skip(start)
                .take(limit)
                .filter_map(|(n, id)| {
                    let record = i.approvals.iter().find(|a| &a.approval_id == id)?;
                    Some((n as u64 + 1, record.clone()))
                })
                .collect()
        }))
    }

    fn approval_change_head(&self) -> Result<u64, StoreError> {
        Ok(self.with(|i| i.approval_changes.len() as u64))
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
                    i.approval_changes.push(record.approval_id.clone());
                    true
                }
                _ => false,
            }
        }))
    }
}
