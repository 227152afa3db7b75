//! The default receipt store: SQLite (WAL) under the capability home, with group commit.
//!
//! `put` appends the receipt as one JSON line to this process's journal file (a single
//! `write(2)`, no flush) and hands it to a writer thread, which commits receipts to SQLite in
//! batches (one transaction per batch) and empties the journal once everything in it is
//! committed. Each process holds an exclusive `flock` on its own journal; when a store opens,
//! it replays the journals of processes that died (their lock is gone) and deletes them. A
//! journaled line that cannot be read back as a receipt is never deleted with its journal:
//! it is kept byte for byte in `<home>/journal/quarantine/`, reported by
//! [`SqliteReceiptStore::recovery`] and counted by [`SqliteReceiptStore::quarantined`]. A
//! receipt nested deeper than a stored record may be read back
//! ([`capability_core::json::RECORD_DEPTH`]) is refused by `put`, before it is journaled.
//!
//! What survives what:
//! * a crash or `kill -9` of the process, an OOM kill, a panic: every receipt whose `put`
//!   returned (it is in the kernel's page cache, in the journal or in the database);
//! * power loss or a kernel crash: receipts committed to SQLite before its last WAL
//!   checkpoint are safe; the last moments may be lost, unless [`Durability::System`] is
//!   chosen, which flushes the journal to disk (`fdatasync`) on every `put`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use capability_core::plan::Plan;
use capability_core::receipt::Receipt;
use capability_journal::{Database, Job, Journal, Quarantine, Recovery, WriteFailure, WriterGone};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Listing, ReceiptQuery, ReceiptStore, StoreError};

/// How much a returned `put` is protected against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Safe from process crashes; no disk flush per receipt (the default).
    #[default]
    Process,
    /// Also safe from power loss: the journal is flushed to disk on every `put`.
    System,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS receipts (
    id TEXT PRIMARY KEY,
    capability_id TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    ended_at TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS receipts_by_capability ON receipts (capability_id, started_at);
CREATE INDEX IF NOT EXISTS receipts_by_start ON receipts (started_at);
CREATE TABLE IF NOT EXISTS pending_plans (
    fingerprint TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    body TEXT NOT NULL
);
";

/// The prefix of receipt journals in the journal directory.
const JOURNAL_PREFIX: &str = "receipts";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn db_err(e: rusqlite::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

/// Refuses a record (serialized as `text`, named by `what`) nested deeper than a stored
/// record may be read back: journaled or committed, it could never be read again.
fn readable_back(text: &[u8], what: impl FnOnce() -> String) -> Result<(), StoreError> {
    let depth = capability_journal::json_nesting(text);
    let limit = capability_core::json::RECORD_DEPTH;
    if depth > limit {
        return Err(StoreError::Corrupt(format!(
            "{} nests {depth} levels, deeper than the {limit} a stored record may: \
             it would not be readable back, so it is not stored",
            what()
        )));
    }
    Ok(())
}

fn gone(_: WriterGone) -> StoreError {
    StoreError::Database("the database writer stopped".into())
}

const INSERT: &str =
    "INSERT OR REPLACE INTO receipts (id, capability_id, status, started_at, ended_at, body)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

fn insert(conn: &Connection, r: &Receipt) -> rusqlite::Result<()> {
    let body = serde_json::to_string(r)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    conn.prepare_cached(INSERT)?.execute(params![
        r.receipt_id,
        r.capability.id,
        r.status.as_str(),
        r.started_at,
        r.ended_at,
        body
    ])?;
    Ok(())
}

struct Shared {
    journal: Mutex<Option<Journal>>,
    pending: Mutex<HashMap<String, Arc<Receipt>>>,
    idle: Condvar,
    /// Set when a receipt could not be committed: the journal is then kept for recovery.
    dirty: Mutex<Option<String>>,
}

/// One receipt for the database writer.
struct Put {
    receipt: Arc<Receipt>,
    shared: Arc<Shared>,
}

impl Job for Put {
    fn write(&mut self, tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
        insert(tx, &self.receipt)
    }

    fn finish(self: Box<Self>, result: Result<(), WriteFailure>) {
        let shared = &self.shared;
        if let Err(e) = result {
            *lock(&shared.dirty) = Some(e.message);
        }
        {
            let mut pending = lock(&shared.pending);
            if pending
                .get(&self.receipt.receipt_id)
                .is_some_and(|p| Arc::ptr_eq(p, &self.receipt))
            {
                pending.remove(&self.receipt.receipt_id);
            }
        }
        // Empty the journal once all it holds is in the database. The journal lock orders
        // this against `put`, which writes the journal and registers the receipt as pending
        // under the same lock.
        // Rotated, not truncated at every batch: see capability_journal's docs.
        // Only when nothing is pending: under steady traffic a receipt is nearly always
        // pending, and a fresh journal made only to be removed again costs two file
        // operations per batch.
        if lock(&shared.dirty).is_none() {
            let seed = {
                let journal = lock(&shared.journal);
                let idle = lock(&shared.pending).is_empty();
                journal
                    .as_ref()
                    .filter(|j| idle && j.len() >= capability_journal::ROTATE_BYTES)
                    .map(Journal::seed)
            };
            let next = seed.and_then(|s| s.create().ok());
            if let Some(next) = next {
                let old = {
                    let mut journal = lock(&shared.journal);
                    let pending = lock(&shared.pending);
                    match journal.as_mut() {
                        Some(j) if pending.is_empty() => Some(j.rotate(next)),
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
        shared.idle.notify_all();
    }
}

/// The default, durable receipt store.
pub struct SqliteReceiptStore {
    shared: Arc<Shared>,
    db: Arc<Database>,
    reader: Mutex<Connection>,
    /// What opening the store recovered from the journals of dead processes.
    recovery: Recovery,
}

impl std::fmt::Debug for SqliteReceiptStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteReceiptStore")
            .field("db", &self.db.path())
            .finish()
    }
}

impl SqliteReceiptStore {
    /// Opens (creating if needed) the store in `home` (`home/capability.db` and
    /// `home/journal/`), recovering the journals of processes that died.
    pub fn open(home: &Path) -> Result<SqliteReceiptStore, StoreError> {
        SqliteReceiptStore::open_with(home, Durability::default())
    }

    /// [`SqliteReceiptStore::open`] with a durability level.
    pub fn open_with(
        home: &Path,
        durability: Durability,
    ) -> Result<SqliteReceiptStore, StoreError> {
        std::fs::create_dir_all(home)?;
        let home = capability_exec::home::Home::at(home);
        let db = Database::open(&home.database()).map_err(db_err)?;
        SqliteReceiptStore::on(Arc::new(db), &home.journals(), durability)
    }

    /// The store on a shared database (its writer is shared with the other stores in the
    /// file), with its journal in `journal_dir`; recovers the receipt journals of dead
    /// processes first.
    pub fn on(
        db: Arc<Database>,
        journal_dir: &Path,
        durability: Durability,
    ) -> Result<SqliteReceiptStore, StoreError> {
        let dir = journal_dir.to_path_buf();
        let recovery = db
            .call(move |conn| -> Result<Recovery, StoreError> {
                capability_journal::db::create_schema(conn, SCHEMA).map_err(db_err)?;
                capability_journal::recover(
                    &dir,
                    JOURNAL_PREFIX,
                    // A line that is not a receipt (a torn last line, when the process died
                    // mid-write; corrupted bytes; a receipt nested deeper than a record may
                    // be) is kept in quarantine, not replayed.
                    capability_core::json::from_record::<Receipt>,
                    // Replay is idempotent: a receipt committed before the crash is written
                    // again with the same id.
                    |receipts| {
                        let tx = conn.transaction().map_err(db_err)?;
                        for r in &receipts {
                            insert(&tx, r).map_err(db_err)?;
                        }
                        tx.commit().map_err(db_err)
                    },
                )
                .map_err(|e| match e {
                    capability_journal::RecoverError::Io(e) => StoreError::Io(e),
                    capability_journal::RecoverError::Replay(e) => e,
                })
            })
            .map_err(gone)??;
        let reader = db.connect().map_err(db_err)?;
        let journal = Journal::create(
            journal_dir,
            JOURNAL_PREFIX,
            durability == Durability::System,
        )?;
        let shared = Arc::new(Shared {
            journal: Mutex::new(Some(journal)),
            pending: Mutex::new(HashMap::new()),
            idle: Condvar::new(),
            dirty: Mutex::new(None),
        });
        Ok(SqliteReceiptStore {
            shared,
            db,
            reader: Mutex::new(reader),
            recovery,
        })
    }

    /// A store over a database opened read-only ([`Database::open_read_only`], a home this
    /// process cannot write): queries work; nothing is recovered or journaled, and a put
    /// fails to commit.
    pub fn read_only(db: Arc<Database>) -> Result<SqliteReceiptStore, StoreError> {
        let reader = db.connect().map_err(db_err)?;
        Ok(SqliteReceiptStore {
            shared: Arc::new(Shared {
                journal: Mutex::new(None),
                pending: Mutex::new(HashMap::new()),
                idle: Condvar::new(),
                dirty: Mutex::new(None),
            }),
            db,
            reader: Mutex::new(reader),
            recovery: Recovery::default(),
        })
    }

    /// What opening this store recovered from the receipt journals of dead processes: how
    /// many journals and receipts, and which unreadable lines were kept in quarantine (each
    /// [`capability_journal::Quarantined::warning`] names its file, for the caller to print).
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The unreadable receipt records kept in the quarantine of `journal_dir` (a home's
    /// `journal/`), by every recovery so far (until an operator removes them).
    pub fn quarantined(journal_dir: &Path) -> std::io::Result<Quarantine> {
        capability_journal::quarantined(journal_dir, Some(JOURNAL_PREFIX))
    }

    /// The database file.
    pub fn db_path(&self) -> &Path {
        self.db.path()
    }

    /// The database this store writes through.
    pub fn database(&self) -> &Arc<Database> {
        &self.db
    }

    /// Waits until every receipt put so far is committed to the database.
    pub fn flush(&self) -> Result<(), StoreError> {
        let mut pending = lock(&self.shared.pending);
        while !pending.is_empty() {
            let (guard, timeout) = self
                .shared
                .idle
                .wait_timeout(pending, Duration::from_secs(30))
                .unwrap_or_else(PoisonError::into_inner);
            pending = guard;
            if timeout.timed_out() {
                break;
            }
        }
        match lock(&self.shared.dirty).as_ref() {
            Some(e) => Err(StoreError::Database(e.clone())),
            None => Ok(()),
        }
    }
}

impl ReceiptStore for SqliteReceiptStore {
    fn put_plan(&self, plan: &Plan) -> Result<(), StoreError> {
        // Rare (one per approval request): written through the writer, waited for.
        self.put_plan_row(plan)
    }

    fn get_plan(&self, fingerprint: &str) -> Result<Option<Plan>, StoreError> {
        let conn = lock(&self.reader);
        let body: Option<String> = conn
            .query_row(
                "SELECT body FROM pending_plans WHERE fingerprint = ?1",
                [fingerprint],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        body.map(|b| {
            capability_core::json::from_record::<Plan>(&b)
                .map_err(|e| StoreError::Corrupt(e.to_string()))
        })
        .transpose()
    }

    fn put(&self, receipt: Arc<Receipt>) -> Result<(), StoreError> {
        let line = serde_json::to_vec(&*receipt).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        readable_back(&line, || format!("receipt {}", receipt.receipt_id))?;
        {
            let mut journal = lock(&self.shared.journal);
            match journal.as_mut() {
                Some(j) => j.append(&line)?,
                None => return Err(StoreError::Database("the receipt store is closed".into())),
            }
            lock(&self.shared.pending).insert(receipt.receipt_id.clone(), Arc::clone(&receipt));
        }
        self.db
            .submit(Box::new(Put {
                receipt,
                shared: Arc::clone(&self.shared),
            }))
            .map_err(gone)
    }

    fn get(&self, receipt_id: &str) -> Result<Option<Arc<Receipt>>, StoreError> {
        if let Some(r) = lock(&self.shared.pending).get(receipt_id) {
            return Ok(Some(Arc::clone(r)));
        }
        let conn = lock(&self.reader);
        let body: Option<String> = conn
            .query_row(
                "SELECT body FROM receipts WHERE id = ?1",
                [receipt_id],
                |row| row.get(0),
            )
            .optional()
            .map_err(db_err)?;
        body.map(|b| {
            capability_core::json::from_record::<Receipt>(&b)
                .map(Arc::new)
                .map_err(|e| StoreError::Corrupt(format!("{receipt_id}: {e}")))
        })
        .transpose()
    }

    fn list(&self, query: &ReceiptQuery) -> Result<Vec<Arc<Receipt>>, StoreError> {
        Ok(self.list_checked(query)?.receipts)
    }

    fn list_checked(&self, query: &ReceiptQuery) -> Result<Listing, StoreError> {
        self.flush()?;
        let conn = lock(&self.reader);
        // Only the filters given, so that the planner can use an index for each:
        // `receipts_by_capability` (capability, started_at) or `receipts_by_start`, both in
        // the list's order (started_at, rowid), from the cursor back.
        let cursor: Option<(String, i64)> = match &query.before {
            Some(id) => {
                let found = conn
                    .prepare_cached("SELECT started_at, rowid FROM receipts WHERE id = ?1")
                    .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                    .map_err(db_err)?;
                if found.is_none() {
                    return Ok(Listing::default());
                }
                found
            }
            None => None,
        };
        // One upper bound on the start (the planner uses one): the cursor's when it is
        // below `until`.
        let until = match (&query.until, &cursor) {
            (Some(u), Some((c, _))) if u > c => None,
            (u, _) => u.as_ref(),
        };
        let status = query.status.map(|s| s.as_str().to_string());
        let mut sql = String::from("SELECT id, body FROM receipts WHERE 1");
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::new();
        for (column, op, value) in [
            ("capability_id", "=", query.capability.as_ref()),
            ("status", "=", status.as_ref()),
            ("started_at", ">=", query.since.as_ref()),
            ("started_at", "<", until),
            ("started_at", "<=", cursor.as_ref().map(|(c, _)| c)),
        ] {
            if let Some(v) = value {
                values.push(v);
                sql.push_str(&format!(" AND {column} {op} ?{}", values.len()));
            }
        }
        if let Some((_, rowid)) = &cursor {
            values.push(rowid);
            let n = values.len();
            sql.push_str(&format!(" AND (started_at < ?{} OR rowid < ?{n})", n - 1));
        }
        let limit = query
            .limit
            .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        values.push(&limit);
        sql.push_str(&format!(
            " ORDER BY started_at DESC, rowid DESC LIMIT ?{}",
            values.len()
        ));
        let mut stmt = conn.prepare_cached(&sql).map_err(db_err)?;
        let rows = stmt
            .query_map(values.as_slice(), |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, rusqlite::types::Value>(1)?,
                ))
            })
            .map_err(db_err)?;
        let mut out = Listing::default();
        for row in rows {
            // One unreadable row (not text, not JSON, not a receipt) is reported and skipped.
            let (id, body) = match row {
                Ok((id, rusqlite::types::Value::Text(body))) => (id, body),
                Ok((id, _)) => {
                    out.skipped
                        .push(format!("receipt {id}: the stored body is not text"));
                    continue;
                }
                Err(e) => {
                    out.skipped
                        .push(format!("a receipt row cannot be read: {e}"));
                    continue;
                }
            };
            match capability_core::json::from_record::<Receipt>(&body) {
                Ok(r) => out.receipts.push(Arc::new(r)),
                Err(e) => out.skipped.push(format!("receipt {id}: {e}")),
            }
        }
        Ok(out)
    }
}

impl SqliteReceiptStore {
    fn put_plan_row(&self, plan: &Plan) -> Result<(), StoreError> {
        let body = serde_json::to_string(plan).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        readable_back(body.as_bytes(), || format!("plan {}", plan.fingerprint))?;
        let (fingerprint, created_at) = (plan.fingerprint.clone(), plan.created_at.clone());
        self.db
            .call(move |conn| {
                conn.execute(
                    "INSERT OR REPLACE INTO pending_plans (fingerprint, created_at, body) VALUES (?1, ?2, ?3)",
                    params![fingerprint, created_at, body],
                )
            })
            .map_err(gone)?
            .map_err(db_err)?;
        Ok(())
    }
}

impl Drop for SqliteReceiptStore {
    fn drop(&mut self) {
        let _ = self.db.flush();
        let clean = lock(&self.shared.dirty).is_none() && lock(&self.shared.pending).is_empty();
        if clean && let Some(j) = lock(&self.shared.journal).take() {
            let _ = j.remove();
        }
    }
}
