//! Receipts as every surface serves them: queried by capability, status and time, shown
//! one at a time, exported as JSON lines. Reads need a principal that may read
//! ([`Access::Read`](crate::Access::Read)).

use std::io::Write;
use std::sync::Arc;

use capability_core::receipt::{Receipt, ReceiptStatus};
pub use capability_runtime::store::ReceiptQuery;
use capability_runtime::store::export_jsonl;

use crate::Host;
use crate::error::{Forbidden, HostError, InvalidRequest, NotFound, StoreError};
use crate::principal::{Access, Principal};

/// The largest page a query returns.
pub const MAX_PAGE: usize = 10_000;

/// Receipt filters as a surface receives them (text), checked into a [`ReceiptQuery`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptFilter {
    pub capability: Option<String>,
    /// `succeeded`, `failed`, `rolled_back` or `rollback_failed`.
    pub status: Option<String>,
    /// ISO-8601: started at or after.
    pub since: Option<String>,
    /// ISO-8601: started before.
    pub until: Option<String>,
    /// At most this many (newest first; at most [`MAX_PAGE`]).
    pub limit: Option<usize>,
}

impl ReceiptFilter {
    /// The query, or why the filters are not valid.
    pub fn query(&self) -> Result<ReceiptQuery, InvalidRequest> {
        let text = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        let status = match text(&self.status) {
            None => None,
            Some(s) => Some(ReceiptStatus::parse(&s).ok_or_else(|| {
                InvalidRequest::new(format!(
                    "unknown receipt status {s:?} (succeeded, failed, rolled_back, rollback_failed)"
                ))
            })?),
        };
        for (key, value) in [("since", &self.since), ("until", &self.until)] {
            if let Some(t) = text(value)
                && !capability_core::dates::is_date_string(&t)
            {
                return Err(InvalidRequest::new(format!(
                    "{key} must be an ISO 8601 date, not {t:?}"
                )));
            }
        }
        if self.limit == Some(0) {
            return Err(InvalidRequest::new("limit must be a positive integer"));
        }
        Ok(ReceiptQuery {
            capability: text(&self.capability),
            status,
            since: text(&self.since),
            until: text(&self.until),
            limit: self.limit.map(|l| l.min(MAX_PAGE)),
            before: None,
        })
    }
}

/// Receipts, and the stored records that could not be read.
#[derive(Clone, Debug, Default)]
pub struct ReceiptList {
    pub receipts: Vec<Arc<Receipt>>,
    /// One message per stored record left out because it could not be read.
    pub skipped: Vec<String>,
}

fn may_read(principal: &Principal) -> Result<(), Forbidden> {
    if principal.may(Access::Read) {
        Ok(())
    } else {
        Err(Forbidden::new(
            principal.name(),
            format!("(role {}) may not read receipts", principal.role().as_str()),
        ))
    }
}

fn receipts_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::new("receipts", e)
}

impl Host {
    /// Receipts that match `query`, newest first.
    pub fn receipts(
        &self,
        principal: &Principal,
        query: &ReceiptQuery,
    ) -> Result<ReceiptList, HostError> {
        may_read(principal)?;
        let listing = self.receipts.list_checked(query).map_err(receipts_err)?;
        Ok(ReceiptList {
            receipts: listing.receipts,
            skipped: listing.skipped,
        })
    }

    /// One receipt.
    pub fn receipt(&self, principal: &Principal, id: &str) -> Result<Arc<Receipt>, HostError> {
        may_read(principal)?;
        self.receipts
            .get(id)
            .map_err(receipts_err)?
            .ok_or_else(|| NotFound::new("receipt", id).into())
    }

    /// Writes the receipts that match `query` as JSON lines; how many were written, and the
    /// stored records skipped because they could not be read.
    pub fn export_receipts(
        &self,
        principal: &Principal,
        query: &ReceiptQuery,
        out: &mut dyn Write,
    ) -> Result<(usize, Vec<String>), HostError> {
        may_read(principal)?;
        export_jsonl(self.receipts.as_ref(), query, out).map_err(|e| receipts_err(e).into())
    }
}
