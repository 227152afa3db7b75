//! SQLite store: the audit chain (group commit through a writer thread) and approvals, in a
//! database file shared with other tables (the runtime's receipts). Tables are prefixed
//! `audit_` and `approval_`; nothing else in the file is touched.
//!
//! Settings: WAL journal, `synchronous=NORMAL`, a busy timeout. Writes go through the
//! database's one writer thread ([`capability_journal::Database`], shared with the other
//! stores in the file): every append waiting in its queue is written in one
//! `BEGIN IMMEDIATE` transaction in which each append reads the head, chains its events,
//! inserts them and moves the head; each caller returns once its batch committed.
//! Because the head is read inside the write transaction, several processes appending to the
//! same file still produce one chain.
//!
//! [`AuditSink::emit`] does not wait for the commit: it appends the event to this process's
//! journal (`<db dir>/journal/audit-*.jsonl`, one `write(2)`, no flush) and queues it, so an
//! emitted event survives a crash or `kill -9` of the process (the next store to open the
//! database replays the journals of dead processes into the chain). Reads wait until every
//! queued event is committed. A journaled line that cannot be read back as an event is never
//! deleted with its journal: it is kept byte for byte in `<db dir>/journal/quarantine/`,
//! reported by [`SqliteStore::recovery`] and counted by [`SqliteStore::quarantined`]. An
//! event nested deeper than a stored record may be read back
//! ([`capability_core::json::RECORD_DEPTH`]) is refused before it is journaled or written.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};

use capability_journal::{Database, Job, Journal, Quarantine, Recovery, WriteFailure};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::Value;

use crate::approvals::{ApprovalFilter, ApprovalRecord, ApprovalStatus, ApprovalStore};
use crate::audit::{
    AuditError, AuditEvent, AuditQuery, AuditRecord, AuditSink, AuditStore, GENESIS_HASH,
    TenantLink, chain_hash_text,
};

use super::StoreError;

/// Tuning for [`SqliteStore`].
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// Most events written in one transaction (the shared writer batches up to
    /// [`Database::MAX_BATCH`] appends; kept for compatibility).
    pub max_batch: usize,
    /// How long to wait for a lock held by another connection or process.
    pub busy_timeout_ms: u64,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            max_batch: 1024,
            busy_timeout_ms: 5000,
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS audit_events (
    seq INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    tenant TEXT,
    timestamp TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_by_tenant ON audit_events (tenant, seq);
CREATE TABLE IF NOT EXISTS audit_tenant_heads (
    tenant TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS approval_requests (
    approval_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    tenant TEXT,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approval_requests_by_status ON approval_requests (status, created_at);
CREATE TABLE IF NOT EXISTS approval_changes (
    position INTEGER PRIMARY KEY,
    approval_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    counter INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    created_at TEXT NOT NULL
);
";

/// The tenant-chain columns of `audit_events` (added to databases made before tenant
/// chains existed, in one immediate transaction, so that concurrent openers agree).
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let present: bool = tx.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('audit_events') WHERE name = 'tenant_seq'",
        [],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )?;
    if !present {
        tx.execute_batch(
            "ALTER TABLE audit_events ADD COLUMN tenant_seq INTEGER;
             ALTER TABLE audit_events ADD COLUMN tenant_prev_hash TEXT;
             ALTER TABLE audit_events ADD COLUMN tenant_hash TEXT;",
        )?;
    }
    tx.execute_batch(
        "CREATE INDEX IF NOT EXISTS audit_events_by_tenant_seq ON audit_events (tenant, tenant_seq);",
    )?;
    // The columns audit queries filter on (added to databases made before them, and filled
    // from the events once).
    let queryable: bool = tx.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('audit_events') WHERE name = 'decision'",
        [],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )?;
    if !queryable {
        tx.execute_batch(
            "ALTER TABLE audit_events ADD COLUMN agent_id TEXT;
             ALTER TABLE audit_events ADD COLUMN capability TEXT;
             ALTER TABLE audit_events ADD COLUMN decision TEXT;
             UPDATE audit_events SET agent_id = json_extract(event, '$.agent_id'),
                 capability = json_extract(event, '$.capability_name'),
                 decision = json_extract(event, '$.decision');",
        )?;
    }
    tx.execute_batch(
        "CREATE INDEX IF NOT EXISTS audit_events_by_agent ON audit_events (agent_id, seq);
         CREATE INDEX IF NOT EXISTS audit_events_by_capability ON audit_events (capability, seq);
         CREATE INDEX IF NOT EXISTS audit_events_by_decision ON audit_events (decision, seq);
         CREATE INDEX IF NOT EXISTS audit_events_by_time ON audit_events (timestamp);",
    )?;
    tx.commit()
}

/// The columns every record query selects, in [`SqliteStore::query_records`]'s order.
const RECORD_COLUMNS: &str =
    "seq, prev_hash, hash, event, tenant, tenant_seq, tenant_prev_hash, tenant_hash";
/// The same for a read-only database made before tenant chains existed.
const LEGACY_RECORD_COLUMNS: &str = "seq, prev_hash, hash, event, NULL, NULL, NULL, NULL";

/// An event ready to be written: its canonical JSON text (serialized once, by the caller)
/// and the columns stored beside it.
struct Entry {
    event_id: String,
    tenant: Option<String>,
    timestamp: String,
    agent_id: String,
    capability: String,
    decision: &'static str,
    text: String,
}

impl Entry {
    fn new(e: &AuditEvent) -> Self {
        Entry {
            event_id: e.event_id.clone(),
            tenant: e.tenant_id.clone(),
            timestamp: e.timestamp.clone(),
            agent_id: e.agent_id.clone(),
            capability: e.capability_name.clone(),
            decision: e.decision.as_str(),
            text: e.to_canonical(),
        }
    }

    /// Refuses an event nested deeper than a stored record may be read back: journaled or
    /// chained, it could never be read again (and one unreadable row fails every query).
    fn readable_back(&self) -> Result<(), StoreError> {
        let depth = capability_journal::json_nesting(self.text.as_bytes());
        let limit = capability_core::json::RECORD_DEPTH;
        if depth > limit {
            return Err(StoreError::Corrupt {
                table: "audit_events",
                message: format!(
                    "event {} nests {depth} levels, deeper than the {limit} a stored record \
                     may: it would not be readable back, so it is not stored",
                    self.event_id
                ),
            });
        }
        Ok(())
    }

    fn owned(e: AuditEvent) -> Self {
        let text = e.to_canonical();
        Entry {
            decision: e.decision.as_str(),
            event_id: e.event_id,
            tenant: e.tenant_id,
            timestamp: e.timestamp,
            agent_id: e.agent_id,
            capability: e.capability_name,
            text,
        }
    }
}

/// Where a committed event went in the chain.
struct Chained {
    seq: u64,
    prev_hash: String,
    hash: String,
    tenant_link: Option<TenantLink>,
}

type Reply = mpsc::Sender<Result<Vec<Chained>, StoreError>>;

/// The journal and what of it is not committed yet.
struct Pending {
    journal: Option<Journal>,
    /// Journaled events not yet committed.
    count: usize,
    /// A journaled batch failed to commit: keep the journal for recovery.
    failed: bool,
}

const JOURNAL_PREFIX: &str = "audit";

/// An append for the database writer.
struct Append {
    entries: Vec<Entry>,
    /// `None` when nobody waits for the commit (emitted events).
    reply: Option<Reply>,
    /// Whether the events were journaled (emitted without waiting).
    journaled: bool,
    pending: Arc<Mutex<Pending>>,
    path: String,
    chained: Vec<Chained>,
}

impl Job for Append {
    fn write(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        self.chained = chain(tx, self.entries.iter())?;
        Ok(())
    }

    fn finish(self: Box<Self>, result: Result<(), WriteFailure>) {
        let Append {
            entries,
            reply,
            journaled,
            pending,
            path,
            chained,
        } = *self;
        if journaled {
            // Rotated, not truncated at every batch: see capability_journal's docs.
            let due = {
                let mut p = lock(&pending);
                if result.is_ok() {
                    p.count = p.count.saturating_sub(entries.len());
                } else {
                    p.failed = true;
                }
                p.count == 0
                    && !p.failed
                    && p.journal
                        .as_ref()
                        .is_some_and(|j| j.len() >= capability_journal::ROTATE_BYTES)
            };
            let seed = if due {
                lock(&pending).journal.as_ref().map(Journal::seed)
            } else {
                None
            };
            let next = seed.and_then(|s| s.create().ok());
            if let Some(next) = next {
                let old = {
                    let mut p = lock(&pending);
                    let idle = p.count == 0 && !p.failed;
                    match p.journal.as_mut() {
                        Some(j) if idle => Some(j.rotate(next)),
                        _ => {
                            let _ = next.remove();
                            None
                        }
                    }
                };
                if let Some(old) = old {
                    let _ = old.remove();
                }
            }
        }
        if let Some(reply) = reply {
            let _ = reply.send(
                result
                    .map(|()| chained)
                    .map_err(|e| to_store_error(e, &path, &entries)),
            );
        }
    }
}

/// The SQLite-backed store.
pub struct SqliteStore {
    path: String,
    db: Arc<Database>,
    conn: Mutex<Connection>,
    pending: Arc<Mutex<Pending>>,
    /// [`RECORD_COLUMNS`], or [`LEGACY_RECORD_COLUMNS`] on an old read-only database.
    columns: &'static str,
    /// What opening the store recovered from the journals of dead processes.
    recovery: Recovery,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database file with default options.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) the database file, with a writer of its own.
    pub fn open_with(path: &Path, options: SqliteOptions) -> Result<Self, StoreError> {
        let name = path.display().to_string();
        let db = |e: rusqlite::Error| StoreError::Database {
            path: name.clone(),
            message: e.to_string(),
        };
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Database {
                path: name.clone(),
                message: e.to_string(),
            })?;
        }
        let database = Database::open_with(
            path,
            std::time::Duration::from_millis(options.busy_timeout_ms),
        )
        .map_err(db)?;
        let journal_dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join(capability_exec::home::Home::JOURNALS);
        Self::on(Arc::new(database), &journal_dir)
    }

    /// The store on a shared database (one writer for every store in the file), with its
    /// journal in `journal_dir`; replays the audit journals of dead processes first.
    /// Replay is idempotent: events already in the chain (the process died between the
    /// commit and emptying its journal) are skipped.
    pub fn on(database: Arc<Database>, journal_dir: &Path) -> Result<Self, StoreError> {
        let name = database.path().display().to_string();
        let io = |e: std::io::Error| StoreError::Database {
            path: name.clone(),
            message: format!("audit journal: {e}"),
        };
        let dir = journal_dir.to_path_buf();
        let replay_name = name.clone();
        let recovery = database
            .call(move |conn| -> Result<Recovery, StoreError> {
                let db = |e: rusqlite::Error| StoreError::Database {
                    path: replay_name.clone(),
                    message: e.to_string(),
                };
                capability_journal::db::create_schema(conn, SCHEMA).map_err(db)?;
                migrate(conn).map_err(db)?;
                capability_journal::recover(
                    &dir,
                    JOURNAL_PREFIX,
                    // A line that is not an event (a torn last line, when the process died
                    // mid-write; corrupted bytes; an event nested deeper than a record may
                    // be) is kept in quarantine, not replayed.
                    |line| -> Result<Entry, String> {
                        let v = capability_core::json::parse_record(line.as_bytes())
                            .map_err(|e| e.to_string())?;
                        AuditEvent::from_json(&v)
                            .map(Entry::owned)
                            .map_err(|e| e.to_string())
                    },
                    |entries| replay(conn, &entries),
                )
                .map_err(|e| match e {
                    capability_journal::RecoverError::Io(e) => StoreError::Database {
                        path: replay_name.clone(),
                        message: format!("audit journal: {e}"),
                    },
                    capability_journal::RecoverError::Replay(e) => StoreError::Database {
                        path: replay_name.clone(),
                        message: format!("replaying an audit journal: {}", e.message),
                    },
                })
            })
            .map_err(|_| StoreError::WriterGone)??;
        let conn = database.connect().map_err(|e| StoreError::Database {
            path: name.clone(),
            message: e.to_string(),
        })?;
        let journal = Journal::create(journal_dir, JOURNAL_PREFIX, false).map_err(io)?;
        let pending = Arc::new(Mutex::new(Pending {
            journal: Some(journal),
            count: 0,
            failed: false,
        }));
        Ok(SqliteStore {
            path: name,
            db: database,
            conn: Mutex::new(conn),
            pending,
            columns: RECORD_COLUMNS,
            recovery,
        })
    }

    /// A store over a database opened read-only (a home this process cannot write):
    /// queries work; nothing is recovered or journaled, and writes fail.
    pub fn read_only(database: Arc<Database>) -> Result<Self, StoreError> {
        let name = database.path().display().to_string();
        let conn = database.connect().map_err(|e| StoreError::Database {
            path: name.clone(),
            message: e.to_string(),
        })?;
        let columns = if conn
            .prepare("SELECT tenant_seq FROM audit_events LIMIT 0")
            .is_ok()
        {
            RECORD_COLUMNS
        } else {
            LEGACY_RECORD_COLUMNS
        };
        Ok(SqliteStore {
            path: name,
            db: database,
            conn: Mutex::new(conn),
            pending: Arc::new(Mutex::new(Pending {
                journal: None,
                count: 0,
                failed: false,
            })),
            columns,
            recovery: Recovery::default(),
        })
    }

    /// What opening this store recovered from the audit journals of dead processes: how many
    /// journals and events, and which unreadable lines were kept in quarantine (each
    /// [`capability_journal::Quarantined::warning`] names its file, for the caller to print).
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The unreadable audit records kept in the quarantine of `journal_dir` (a home's
    /// `journal/`), by every recovery so far (until an operator removes them): events that
    /// never joined the chain, which `audit verify` cannot see in the database.
    pub fn quarantined(journal_dir: &Path) -> std::io::Result<Quarantine> {
        capability_journal::quarantined(journal_dir, Some(JOURNAL_PREFIX))
    }

    /// The database this store writes through.
    pub fn database(&self) -> &Arc<Database> {
        &self.db
    }

    /// The database path.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn db(&self, e: rusqlite::Error) -> StoreError {
        StoreError::Database {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Appends without waiting for the commit: the events are journaled (safe from a
    /// process crash once this returns) and queued for the writer thread.
    pub fn append_nowait(&self, events: Vec<AuditEvent>) -> Result<(), StoreError> {
        self.journal_and_queue(events.iter().map(Entry::new).collect())
    }

    /// Journals entries (their canonical text, the same bytes the writer stores) and queues
    /// them for the writer thread.
    fn journal_and_queue(&self, entries: Vec<Entry>) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        entries.iter().try_for_each(Entry::readable_back)?;
        {
            let mut pending = lock(&self.pending);
            let Some(journal) = pending.journal.as_mut() else {
                return Err(StoreError::WriterGone);
            };
            for e in &entries {
                journal
                    .append(e.text.as_bytes())
                    .map_err(|err| StoreError::Database {
                        path: self.path.clone(),
                        message: format!("audit journal: {err}"),
                    })?;
            }
            pending.count += entries.len();
        }
        self.send(entries, None, true)
    }

    /// Waits until every event queued so far is committed.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush().map_err(|_| StoreError::WriterGone)
    }

    fn send(
        &self,
        entries: Vec<Entry>,
        reply: Option<Reply>,
        journaled: bool,
    ) -> Result<(), StoreError> {
        self.db
            .submit(Box::new(Append {
                entries,
                reply,
                journaled,
                pending: Arc::clone(&self.pending),
                path: self.path.clone(),
                chained: Vec::new(),
            }))
            .map_err(|_| StoreError::WriterGone)
    }

    /// `SELECT <the record columns> FROM audit_events <rest>`.
    fn query_records(
        &self,
        rest: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<AuditRecord>, StoreError> {
        self.flush()?;
        let conn = lock(&self.conn);
        let sql = format!("SELECT {} FROM audit_events {rest}", self.columns);
        let mut stmt = conn.prepare_cached(&sql).map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map(params, |row| {
                let link = match (
                    row.get::<_, Option<String>>(4)?,
                    row.get::<_, Option<i64>>(5)?,
                    row.get::<_, Option<String>>(6)?,
                    row.get::<_, Option<String>>(7)?,
                ) {
                    (Some(tenant), Some(seq), Some(prev_hash), Some(hash)) => Some(TenantLink {
                        tenant,
                        seq: u64::try_from(seq).unwrap_or(0),
                        prev_hash,
                        hash,
                    }),
                    _ => None,
                };
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    link,
                ))
            })
            .map_err(|e| self.db(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, prev_hash, hash, event, tenant_link) = row.map_err(|e| self.db(e))?;
            out.push(AuditRecord {
                seq: u64::try_from(seq).unwrap_or(0),
                prev_hash,
                hash,
                event: parse_event(&event)?,
                tenant_link,
            });
        }
        Ok(out)
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        let _ = self.db.flush();
        let mut pending = lock(&self.pending);
        if pending.count == 0
            && !pending.failed
            && let Some(j) = pending.journal.take()
        {
            let _ = j.remove();
        }
    }
}

fn parse_event(text: &str) -> Result<Value, StoreError> {
    capability_core::json::parse_record(text.as_bytes()).map_err(|e| StoreError::Corrupt {
        table: "audit_events",
        message: e.to_string(),
    })
}

fn to_store_error(e: WriteFailure, path: &str, entries: &[Entry]) -> StoreError {
    if e.constraint
        && let Some(ev) = entries.first()
    {
        return StoreError::Duplicate {
            event_id: ev.event_id.clone(),
        };
    }
    StoreError::Database {
        path: path.to_string(),
        message: e.message,
    }
}

/// Chains `entries` after the head (and each tenant's after its tenant head) and moves the
/// heads, inside the caller's transaction.
fn chain<'a>(
    tx: &Connection,
    entries: impl ExactSizeIterator<Item = &'a Entry>,
) -> rusqlite::Result<Vec<Chained>> {
    // Cached statements: a batch is often one event, and parsing the SQL cost as much.
    let head: Option<(i64, String)> = tx
        .prepare_cached("SELECT seq, hash FROM audit_head WHERE id = 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (mut seq, mut prev) = match head {
        Some((s, h)) => (u64::try_from(s).unwrap_or(0), h),
        None => (0, GENESIS_HASH.to_string()),
    };
    // The heads of the tenants in this batch, read once and written back at the end.
    let mut tenant_heads: std::collections::BTreeMap<String, Option<(u64, String)>> =
        std::collections::BTreeMap::new();
    let mut records = Vec::with_capacity(entries.len());
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO audit_events (seq, event_id, tenant, timestamp, prev_hash, hash, event,
                                       tenant_seq, tenant_prev_hash, tenant_hash,
                                       agent_id, capability, decision)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?;
        let mut read_head =
            tx.prepare_cached("SELECT seq, hash FROM audit_tenant_heads WHERE tenant = ?1")?;
        for e in entries {
            seq += 1;
            let hash = chain_hash_text(seq, &prev, &e.text);
            let tenant_link = match &e.tenant {
                Some(t) => {
                    if !tenant_heads.contains_key(t) {
                        let h: Option<(i64, String)> = read_head
                            .query_row([t], |r| Ok((r.get(0)?, r.get(1)?)))
                            .optional()?;
                        let h = h.map(|(s, h)| (u64::try_from(s).unwrap_or(0), h));
                        tenant_heads.insert(t.clone(), h);
                    }
                    let slot = tenant_heads.entry(t.clone()).or_default();
                    let link = TenantLink::after(t, slot.as_ref(), &e.text);
                    *slot = Some((link.seq, link.hash.clone()));
                    Some(link)
                }
                None => None,
            };
            insert.execute(params![
                i64::try_from(seq).unwrap_or(i64::MAX),
                e.event_id,
                e.tenant,
                e.timestamp,
                prev,
                hash,
                e.text,
                tenant_link
                    .as_ref()
                    .map(|l| i64::try_from(l.seq).unwrap_or(i64::MAX)),
                tenant_link.as_ref().map(|l| l.prev_hash.as_str()),
                tenant_link.as_ref().map(|l| l.hash.as_str()),
                e.agent_id,
                e.capability,
                e.decision,
            ])?;
            records.push(Chained {
                seq,
                prev_hash: std::mem::replace(&mut prev, hash.clone()),
                hash,
                tenant_link,
            });
        }
    }
    tx.prepare_cached(
        "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?1, ?2)
         ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
    )?
    .execute(params![i64::try_from(seq).unwrap_or(i64::MAX), prev])?;
    let mut write_head = tx.prepare_cached(
        "INSERT INTO audit_tenant_heads (tenant, seq, hash) VALUES (?1, ?2, ?3)
         ON CONFLICT (tenant) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
    )?;
    for (tenant, head) in &tenant_heads {
        if let Some((s, h)) = head {
            write_head.execute(params![tenant, i64::try_from(*s).unwrap_or(i64::MAX), h])?;
        }
    }
    Ok(records)
}

/// Chains the journaled events that are not in the chain yet.
fn replay(conn: &mut Connection, entries: &[Entry]) -> Result<(), WriteFailure> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut fresh = Vec::with_capacity(entries.len());
    {
        let mut known = tx.prepare_cached("SELECT 1 FROM audit_events WHERE event_id = ?1")?;
        for e in entries {
            if !known.exists([&e.event_id])? {
                fresh.push(e);
            }
        }
    }
    if !fresh.is_empty() {
        chain(&tx, fresh.into_iter())?;
    }
    tx.commit()?;
    Ok(())
}

impl AuditStore for SqliteStore {
    fn append(&self, events: &[AuditEvent]) -> Result<Vec<AuditRecord>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let entries: Vec<Entry> = events.iter().map(Entry::new).collect();
        entries.iter().try_for_each(Entry::readable_back)?;
        let (reply, rx) = mpsc::channel();
        self.send(entries, Some(reply), false)?;
        let chained = rx.recv().map_err(|_| StoreError::WriterGone)??;
        Ok(chained
            .into_iter()
            .zip(events)
            .map(|(c, e)| AuditRecord {
                seq: c.seq,
                prev_hash: c.prev_hash,
                hash: c.hash,
                event: e.to_json(),
                tenant_link: c.tenant_link,
            })
            .collect())
    }

    fn query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        if self.columns == LEGACY_RECORD_COLUMNS {
            // A read-only database made before the query columns: filter the events.
            let mut out = Vec::new();
            let mut before = query.before;
            while out.len() < query.limit {
                let mut rest = String::from("WHERE 1");
                if let Some(b) = before {
                    rest.push_str(&format!(" AND seq < {b}"));
                }
                rest.push_str(" ORDER BY seq DESC LIMIT 1000");
                let page = self.query_records(&rest, &[])?;
                let Some(last) = page.last() else { break };
                before = Some(last.seq);
                out.extend(page.into_iter().filter(|r| query.matches(r)));
            }
            out.truncate(query.limit);
            return Ok(out);
        }
        let before = query.before.map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        // A time range is walked in the time index's order, (timestamp, seq), from its end
        // (or the cursor's record) back: sorting the whole range by seq first would cost
        // what the range holds. Without one, by seq (the primary key or a filter's index).
        let time_ordered = query.time_ordered();
        // The cursor's place in time order, and the range's one upper bound (the planner
        // uses one of two): the cursor's time when it is below `until`.
        let cursor_time: Option<String> = match before {
            Some(b) if time_ordered => {
                self.flush()?;
                let conn = lock(&self.conn);
                conn.prepare_cached("SELECT timestamp FROM audit_events WHERE seq = ?1")
                    .and_then(|mut s| s.query_row([b], |r| r.get(0)).optional())
                    .map_err(|e| self.db(e))?
            }
            _ => None,
        };
        if before.is_some() && time_ordered && cursor_time.is_none() {
            // The cursor's record is gone: nothing is known to be older than it.
            return Ok(Vec::new());
        }
        let until = match (&query.until, &cursor_time) {
            (Some(u), Some(c)) if u > c => None,
            (u, _) => u.as_ref(),
        };
        let mut rest = String::from("WHERE 1");
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::new();
        for (column, op, value) in [
            ("tenant", "=", query.tenant.as_ref()),
            ("agent_id", "=", query.agent.as_ref()),
            ("capability", "=", query.capability.as_ref()),
            ("decision", "=", query.decision.as_ref()),
            ("timestamp", ">=", query.since.as_ref()),
            ("timestamp", "<", until),
            ("timestamp", "<=", cursor_time.as_ref()),
        ] {
            if let Some(v) = value {
                values.push(v);
                rest.push_str(&format!(" AND {column} {op} ?{}", values.len()));
            }
        }
        if let Some(b) = &before {
            values.push(b);
            let n = values.len();
            match &cursor_time {
                Some(_) => rest.push_str(&format!(" AND (timestamp < ?{} OR seq < ?{n})", n - 1)),
                None => rest.push_str(&format!(" AND seq < ?{n}")),
            }
        }
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        values.push(&limit);
        let order = if time_ordered {
            "timestamp DESC, seq DESC"
        } else {
            "seq DESC"
        };
        rest.push_str(&format!(" ORDER BY {order} LIMIT ?{}", values.len()));
        self.query_records(&rest, &values)
    }

    fn tail(&self, tenant: Option<&str>, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut v = match tenant {
            Some(t) => self.query_records(
                "WHERE tenant = ?1 ORDER BY seq DESC LIMIT ?2",
                &[&t, &limit],
            )?,
            None => self.query_records("ORDER BY seq DESC LIMIT ?1", &[&limit])?,
        };
        v.reverse();
        Ok(v)
    }

    fn get(&self, event_id: &str) -> Result<Option<AuditRecord>, StoreError> {
        Ok(self
            .query_records("WHERE event_id = ?1", &[&event_id])?
            .pop())
    }

    fn records(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.query_records("WHERE seq >= ?1 ORDER BY seq LIMIT ?2", &[&from, &limit])
    }

    fn tenant_records(
        &self,
        tenant: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        if self.columns == LEGACY_RECORD_COLUMNS {
            return Ok(Vec::new());
        }
        let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.query_records(
            "WHERE tenant = ?1 AND tenant_seq >= ?2 ORDER BY tenant_seq LIMIT ?3",
            &[&tenant, &from, &limit],
        )
    }

    fn tenant_head(&self, tenant: &str) -> Result<Option<(u64, String)>, StoreError> {
        if self.columns == LEGACY_RECORD_COLUMNS {
            return Ok(None);
        }
        self.flush()?;
        let conn = lock(&self.conn);
        conn.query_row(
            "SELECT seq, hash FROM audit_tenant_heads WHERE tenant = ?1",
            [tenant],
            |r| Ok((u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0), r.get(1)?)),
        )
        .optional()
        .map_err(|e| self.db(e))
    }

    fn tenant_link_before(
        &self,
        tenant: &str,
        before: u64,
    ) -> Result<Option<TenantLink>, StoreError> {
        if self.columns == LEGACY_RECORD_COLUMNS {
            return Ok(None);
        }
        let before = i64::try_from(before).unwrap_or(i64::MAX);
        // Served by `audit_events_by_tenant` (tenant, seq).
        Ok(self
            .query_records(
                "WHERE tenant = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT 1",
                &[&tenant, &before],
            )?
            .pop()
            .and_then(|r| r.tenant_link))
    }

    fn record_checkpoint(&self, seq: u64, hash: &str, created_at: &str) -> Result<u64, StoreError> {
        let (hash, created_at) = (hash.to_string(), created_at.to_string());
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        let counter = self
            .db
            .call(move |conn| {
                conn.query_row(
                    "INSERT INTO audit_checkpoints (counter, seq, hash, created_at)
                     SELECT COALESCE(MAX(counter), 0) + 1, ?1, ?2, ?3 FROM audit_checkpoints
                     RETURNING counter",
                    params![seq, hash, created_at],
                    |r| r.get::<_, i64>(0),
                )
            })
            .map_err(|_| StoreError::WriterGone)?
            .map_err(|e| self.db(e))?;
        Ok(u64::try_from(counter).unwrap_or(0))
    }

    fn checkpoints_issued(&self) -> Result<u64, StoreError> {
        let conn = lock(&self.conn);
        let n: i64 = conn
            .query_row(
                "SELECT COALESCE(MAX(counter), 0) FROM audit_checkpoints",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.db(e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.flush()?;
        let conn = lock(&self.conn);
        conn.query_row("SELECT seq, hash FROM audit_head WHERE id = 1", [], |r| {
            Ok((u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0), r.get(1)?))
        })
        .optional()
        .map_err(|e| self.db(e))
    }
}

impl AuditSink for SqliteStore {
    /// Journals the event and returns without waiting for the commit (see the module docs).
    fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        self.journal_and_queue(vec![Entry::new(event)])?;
        Ok(())
    }

    fn emit_owned(&self, event: AuditEvent) -> Result<(), AuditError> {
        self.journal_and_queue(vec![Entry::owned(event)])?;
        Ok(())
    }
}

fn record_from_text(text: &str) -> Result<ApprovalRecord, StoreError> {
    capability_core::json::from_record(text).map_err(|e| StoreError::Corrupt {
        table: "approval_requests",
        message: e.to_string(),
    })
}

fn record_text(r: &ApprovalRecord) -> Result<String, StoreError> {
    serde_json::to_string(r).map_err(|e| StoreError::Corrupt {
        table: "approval_requests",
        message: e.to_string(),
    })
}

impl ApprovalStore for SqliteStore {
    fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        let text = record_text(record)?;
        let (id, status, tenant) = (
            record.approval_id.clone(),
            record.status.as_str(),
            record.tenant.clone(),
        );
        let (created, expires) = (record.created_at, record.expires_at);
        self.db
            .call(move |conn| {
                let tx = conn.transaction()?;
                tx.execute(
                    "INSERT INTO approval_requests (approval_id, status, tenant, created_at, expires_at, record)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![id, status, tenant, created, expires, text],
                )?;
                tx.execute(
                    "INSERT INTO approval_changes (approval_id) VALUES (?1)",
                    params![id],
                )?;
                tx.commit()
            })
            .map_err(|_| StoreError::WriterGone)?
            .map_err(|e| self.db(e))?;
        Ok(())
    }

    fn approval_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, ApprovalRecord)>, StoreError> {
        let conn = lock(&self.conn);
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = conn
            .prepare_cached(
                "SELECT c.position, r.record FROM approval_changes c
                 JOIN approval_requests r ON r.approval_id = c.approval_id
                 WHERE c.position > ?1 ORDER BY c.position LIMIT ?2",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map(params![after, limit], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.db(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (position, text) = row.map_err(|e| self.db(e))?;
            // A record that cannot be read is left out (the list reports it).
            if let Ok(record) = record_from_text(&text) {
                out.push((u64::try_from(position).unwrap_or(0), record));
            }
        }
        Ok(out)
    }

    fn approval_change_head(&self) -> Result<u64, StoreError> {
        let conn = lock(&self.conn);
        let head: i64 = conn
            .query_row(
                "SELECT COALESCE(MAX(position), 0) FROM approval_changes",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.db(e))?;
        Ok(u64::try_from(head).unwrap_or(0))
    }

    fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let conn = lock(&self.conn);
        let text: Option<String> = conn
            .query_row(
                "SELECT record FROM approval_requests WHERE approval_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.db(e))?;
        text.map(|t| record_from_text(&t)).transpose()
    }

    fn list_approvals(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, StoreError> {
        Ok(self.list_approvals_checked(filter)?.0)
    }

    fn list_approvals_checked(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<(Vec<ApprovalRecord>, Vec<String>), StoreError> {
        let conn = lock(&self.conn);
        let limit = filter
            .limit
            .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let mut stmt = conn
            .prepare_cached(
                "SELECT approval_id, record FROM approval_requests
                 WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR tenant = ?2)
                 ORDER BY created_at DESC, rowid DESC LIMIT ?3",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map(
                params![filter.status.map(|s| s.as_str()), filter.tenant, limit],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, rusqlite::types::Value>(1)?,
                    ))
                },
            )
            .map_err(|e| self.db(e))?;
        let (mut out, mut skipped) = (Vec::new(), Vec::new());
        for row in rows {
            // One unreadable record is reported and skipped; the others are listed.
            match row {
                Ok((id, rusqlite::types::Value::Text(text))) => match record_from_text(&text) {
                    Ok(r) => out.push(r),
                    Err(e) => skipped.push(format!("approval {id}: {e}")),
                },
                Ok((id, _)) => skipped.push(format!("approval {id}: the record is not text")),
                Err(e) => skipped.push(format!("an approval row cannot be read: {e}")),
            }
        }
        Ok((out, skipped))
    }

    fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected: ApprovalStatus,
    ) -> Result<bool, StoreError> {
        let text = record_text(record)?;
        let (status, expires, id) = (
            record.status.as_str(),
            record.expires_at,
            record.approval_id.clone(),
        );
        let expected = expected.as_str();
        let changed = self
            .db
            .call(move |conn| {
                let tx = conn.transaction()?;
                let changed = tx.execute(
                    "UPDATE approval_requests SET status = ?1, expires_at = ?2, record = ?3
                     WHERE approval_id = ?4 AND status = ?5",
                    params![status, expires, text, id, expected],
                )?;
                if changed == 1 {
                    tx.execute(
                        "INSERT INTO approval_changes (approval_id) VALUES (?1)",
                        params![id],
                    )?;
                }
                tx.commit().map(|()| changed)
            })
            .map_err(|_| StoreError::WriterGone)?
            .map_err(|e| self.db(e))?;
        Ok(changed == 1)
    }
}
