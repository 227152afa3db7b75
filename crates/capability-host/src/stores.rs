//! The stores of a host: receipts and kept plans, the audit log, approvals — one database
//! with one writer for all of them (or memory), behind the store traits, so that another
//! implementation (a shared database) can stand in for them.

use std::sync::Arc;

use capability_exec::home::Home;
use capability_journal::Database;
use capability_policy::approvals::ApprovalStore;
use capability_policy::{AuditSink, AuditStore, MemoryStore, SqliteStore};
use capability_runtime::SqliteReceiptStore;
use capability_runtime::store::{Durability, MemoryReceiptStore, ReceiptStore};

use crate::config::Storage;
use crate::error::DatabaseError;

pub(crate) struct Stores {
    pub receipts: Arc<dyn ReceiptStore>,
    pub audit: Arc<dyn AuditStore>,
    pub approvals: Arc<dyn ApprovalStore>,
    pub sink: Arc<dyn AuditSink>,
    pub database: Option<Arc<Database>>,
    /// What recovering dead processes' journals kept in quarantine, one warning each.
    pub warnings: Vec<String>,
}

impl Stores {
    pub(crate) fn open(home: &Home, storage: Storage) -> Result<Stores, DatabaseError> {
        let failed = |e: &dyn std::fmt::Display| DatabaseError::new(home.root(), e);
        let durability = match storage {
            Storage::ReadOnly => {
                let db =
                    Arc::new(Database::open_read_only(&home.database()).map_err(|e| failed(&e))?);
                let receipts =
                    SqliteReceiptStore::read_only(Arc::clone(&db)).map_err(|e| failed(&e))?;
                let store =
                    Arc::new(SqliteStore::read_only(Arc::clone(&db)).map_err(|e| failed(&e))?);
                return Ok(Stores {
                    receipts: Arc::new(receipts),
                    audit: Arc::clone(&store) as Arc<dyn AuditStore>,
                    approvals: Arc::clone(&store) as Arc<dyn ApprovalStore>,
                    sink: store,
                    database: Some(db),
                    warnings: Vec::new(),
                });
            }
            Storage::Memory => {
                let store = Arc::new(MemoryStore::new());
                return Ok(Stores {
                    receipts: Arc::new(MemoryReceiptStore::new()),
                    audit: Arc::clone(&store) as Arc<dyn AuditStore>,
                    approvals: Arc::clone(&store) as Arc<dyn ApprovalStore>,
                    sink: store,
                    database: None,
                    warnings: Vec::new(),
                });
            }
            Storage::DurableSync => Durability::System,
            Storage::Durable => Durability::Process,
        };
        let db = Arc::new(Database::open(&home.database()).map_err(|e| failed(&e))?);
        let receipts = SqliteReceiptStore::on(Arc::clone(&db), &home.journals(), durability)
            .map_err(|e| failed(&e))?;
        let store =
            Arc::new(SqliteStore::on(Arc::clone(&db), &home.journals()).map_err(|e| failed(&e))?);
        let mut warnings = receipts.recovery().warnings();
        warnings.extend(store.recovery().warnings());
        Ok(Stores {
            receipts: Arc::new(receipts),
            audit: Arc::clone(&store) as Arc<dyn AuditStore>,
            approvals: Arc::clone(&store) as Arc<dyn ApprovalStore>,
            sink: store,
            database: Some(db),
            warnings,
        })
    }
}

/// The records of dead processes' journals kept in a home's quarantine because they could
/// not be read: receipts and audit events, and the files that hold them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quarantined {
    pub receipts: usize,
    pub audit_events: usize,
    pub files: Vec<std::path::PathBuf>,
}

impl Quarantined {
    /// Counts them in `home` (nothing when it has no journals).
    pub fn in_home(home: &Home) -> std::io::Result<Quarantined> {
        let receipts = SqliteReceiptStore::quarantined(&home.journals())?;
        let audit = SqliteStore::quarantined(&home.journals())?;
        Ok(Quarantined {
            receipts: receipts.records(),
            audit_events: audit.records(),
            files: receipts
                .files
                .iter()
                .chain(&audit.files)
                .map(|f| f.path.clone())
                .collect(),
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "receipts": self.receipts,
            "auditEvents": self.audit_events,
            "files": self.files,
        })
    }
}
