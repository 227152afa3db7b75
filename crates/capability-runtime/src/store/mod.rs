//! Receipt stores: every execution attempt leaves a receipt, and the store keeps it.
//!
//! * [`MemoryReceiptStore`]: in memory, for tests and embedders that persist elsewhere.
//! * [`SqliteReceiptStore`]: the default, an embedded SQLite database under the capability
//!   home, fronted by a per-process append-only journal so that a receipt is safe from a
//!   process crash the moment `put` returns, without a disk flush on the hot path.

mod sqlite;

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, RwLock};

use capability_core::plan::Plan;
use capability_core::receipt::{Receipt, ReceiptStatus};

pub use sqlite::{Durability, SqliteReceiptStore};

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("receipt store i/o failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("receipt database failed: {0}")]
    Database(String),
    #[error("stored receipt is corrupt: {0}")]
    Corrupt(String),
}

/// A receipt query: filters are AND-ed; results are newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptQuery {
    pub capability: Option<String>,
    pub status: Option<ReceiptStatus>,
    /// Inclusive lower bound on `startedAt` (ISO-8601).
    pub since: Option<String>,
    /// Exclusive upper bound on `startedAt` (ISO-8601).
    pub until: Option<String>,
    pub limit: Option<usize>,
    /// Only receipts listed after this one (its `receiptId`) in the list's order (newest
    /// first): the cursor of the next page. A receipt id that is not stored lists nothing.
    pub before: Option<String>,
}

impl ReceiptQuery {
    /// Whether a receipt passes the filters.
    pub fn matches(&self, r: &Receipt) -> bool {
        self.capability
            .as_ref()
            .is_none_or(|c| *c == r.capability.id)
            && self.status.is_none_or(|s| s == r.status)
            && self
                .since
                .as_ref()
                .is_none_or(|s| r.started_at.as_str() >= s.as_str())
            && self
                .until
                .as_ref()
                .is_none_or(|u| r.started_at.as_str() < u.as_str())
    }
}

/// Where receipts are kept.
pub trait ReceiptStore: Send + Sync {
    /// Inserts or replaces (by `receiptId`) a receipt.
    fn put(&self, receipt: Arc<Receipt>) -> Result<(), StoreError>;
    /// The receipt with that id.
    fn get(&self, receipt_id: &str) -> Result<Option<Arc<Receipt>>, StoreError>;
    /// Receipts matching the query, newest first. A stored receipt that cannot be read is
    /// left out (see [`ReceiptStore::list_checked`] for which), never failing the list.
    fn list(&self, query: &ReceiptQuery) -> Result<Vec<Arc<Receipt>>, StoreError>;
    /// [`ReceiptStore::list`], and what was left out because it could not be read.
    fn list_checked(&self, query: &ReceiptQuery) -> Result<Listing, StoreError> {
        Ok(Listing {
            receipts: self.list(query)?,
            skipped: Vec::new(),
        })
    }
    /// Keeps a plan (by fingerprint) while its approval is pending.
    fn put_plan(&self, plan: &Plan) -> Result<(), StoreError>;
    /// The plan kept under that fingerprint.
    fn get_plan(&self, fingerprint: &str) -> Result<Option<Plan>, StoreError>;
}

/// The receipts of a query, and the stored ones that could not be read.
#[derive(Debug, Default)]
pub struct Listing {
    pub receipts: Vec<Arc<Receipt>>,
    /// One message per stored receipt left out (its id, when readable, and why).
    pub skipped: Vec<String>,
}

/// Writes the receipts matching a query as JSON lines: how many, and what was skipped
/// because it could not be read.
pub fn export_jsonl(
    store: &dyn ReceiptStore,
    query: &ReceiptQuery,
    out: &mut dyn Write,
) -> Result<(usize, Vec<String>), StoreError> {
    // A page at a time, each after the last of the one before: memory stays that of a page
    // however many receipts there are.
    const PAGE: usize = 1000;
    let (mut count, mut skipped) = (0, Vec::new());
    let mut page_query = query.clone();
    loop {
        let want = query.limit.map_or(PAGE, |l| (l - count).min(PAGE));
        if want == 0 {
            break;
        }
        page_query.limit = Some(want);
        let listing = store.list_checked(&page_query)?;
        skipped.extend(listing.skipped);
        let Some(last) = listing.receipts.last() else {
            break;
        };
        page_query.before = Some(last.receipt_id.clone());
        let n = listing.receipts.len();
        let mut text = String::new();
        for r in &listing.receipts {
            text.clear();
            text.push_str(&capability_core::json::to_js_string(&r.to_value()));
            text.push('\n');
            out.write_all(text.as_bytes())?;
        }
        count += n;
        if n < want {
            break;
        }
    }
    Ok((count, skipped))
}

/// Receipt ids are random UUIDs made by the runtime, so a fast non-keyed hash is safe here.
#[derive(Clone, Copy, Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.0 =
                (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
}

type IdMap<V> = HashMap<String, V, std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
struct MemoryInner {
    /// Position of each receipt in `order`.
    by_id: IdMap<usize>,
    /// Receipts in insertion order (a replaced receipt keeps its place).
    order: Vec<Arc<Receipt>>,
    plans: HashMap<String, Plan>,
}

/// Receipts in memory.
#[derive(Default)]
pub struct MemoryReceiptStore {
    inner: RwLock<MemoryInner>,
}

impl std::fmt::Debug for MemoryReceiptStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryReceiptStore").finish()
    }
}

impl MemoryReceiptStore {
    pub fn new() -> Self {
        MemoryReceiptStore::default()
    }
}

impl ReceiptStore for MemoryReceiptStore {
    fn put(&self, receipt: Arc<Receipt>) -> Result<(), StoreError> {
        let mut inner = self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match inner.by_id.get(&receipt.receipt_id).copied() {
            Some(i) => inner.order[i] = receipt,
            None => {
                let i = inner.order.len();
                inner.by_id.insert(receipt.receipt_id.clone(), i);
                inner.order.push(receipt);
            }
        }
        Ok(())
    }

    fn get(&self, receipt_id: &str) -> Result<Option<Arc<Receipt>>, StoreError> {
        let inner = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(inner
            .by_id
            .get(receipt_id)
            .map(|&i| Arc::clone(&inner.order[i])))
    }

    fn list(&self, query: &ReceiptQuery) -> Result<Vec<Arc<Receipt>>, StoreError> {
        let inner = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<Arc<Receipt>> = inner
            .order
            .iter()
            .rev()
            .filter(|r| query.matches(r))
            .cloned()
            .collect();
        out.sort_by(|a, b| b.started_at.cmp(&a.started_at));
        if let Some(before) = &query.before {
            match out.iter().position(|r| r.receipt_id == *before) {
                Some(i) => drop(out.drain(..=i)),
                None => out.clear(),
            }
        }
        if let Some(limit) = query.limit {
            out.truncate(limit);
        }
        Ok(out)
    }

    fn put_plan(&self, plan: &Plan) -> Result<(), StoreError> {
        let mut inner = self
            .inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.plans.insert(plan.fingerprint.clone(), plan.clone());
        Ok(())
    }

    fn get_plan(&self, fingerprint: &str) -> Result<Option<Plan>, StoreError> {
        let inner = self
            .inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(inner.plans.get(fingerprint).cloned())
    }
}
