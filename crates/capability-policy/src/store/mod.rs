//! Storage of the audit log and approvals: SQLite ([`SqliteStore`]) and memory
//! ([`MemoryStore`]), both implementing [`crate::audit::AuditStore`],
//! [`crate::approvals::ApprovalStore`] and [`crate::audit::AuditSink`].

mod memory;
mod sqlite;

pub use memory::MemoryStore;
pub use sqlite::{SqliteOptions, SqliteStore};

/// Storage failures.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database reported an error.
    #[error("audit/approval store at `{path}`: {message}")]
    Database { path: String, message: String },
    /// A stored row could not be read back.
    #[error("corrupt row in `{table}`: {message}")]
    Corrupt {
        table: &'static str,
        message: String,
    },
    /// The writer thread is gone.
    #[error("the audit writer stopped")]
    WriterGone,
    /// An event id that is already in the log.
    #[error("event `{event_id}` is already in the audit log")]
    Duplicate { event_id: String },
}
