//! The default receipt store: SQLite (WAL) under the capability home, with group commit.
//!
//! `put` appends the receipt as one JSON line to this process's journal file (a single
//! `write(2)`, no flush) and hands it to a writer thread, which commits receipts to SQLite in
//! batches (one transaction per batch) and empties the journal once everything in it is
//! committed. Each process holds an exclusive `flock` on its own journal; when a store opens,
//! it replays the journals of processes that died (their lock is gone) and deletes them.
//!
//! What survives what:
//! * a crash or `kill -9` of the process, an OOM kill, a panic: every receipt whose `put`
//!   returned (it is in the kernel's page cache, in the journal or in the database);
//! * power loss or a kernel crash: receipts committed to SQLite before its last WAL
//!   checkpoint are safe; the last moments may be lost, unless [`Durability::System`] is
//!   chosen, which flushes the journal to disk (`fdatasync`) on every `put`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use capability_core::plan::Plan;
use capability_core::receipt::Receipt;
use capability_journal::Journal;
use rusqlite::{Connection, OptionalExtension, params};

use super::{ReceiptQuery, ReceiptStore, StoreError};

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

const MAX_BATCH: usize = 1024;

/// The prefix of receipt journals in the journal directory.
const JOURNAL_PREFIX: &str = "receipts";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn db_err(e: rusqlite::Error) -> StoreError {
    StoreError::Database(e.to_string())
}

fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(db_err)?;
    conn.busy_timeout(Duration::from_secs(10)).map_err(db_err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(db_err)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(db_err)?;
    Ok(conn)
}

fn insert_batch(conn: &mut Connection, batch: &[Arc<Receipt>]) -> Result<(), StoreError> {
    let tx = conn.transaction().map_err(db_err)?;
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT OR REPLACE INTO receipts (id, capability_id, status, started_at, ended_at, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(db_err)?;
        for r in batch {
            let body =
                serde_json::to_string(&**r).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            stmt.execute(params![
                r.receipt_id,
                r.capability.id,
                r.status.as_str(),
                r.started_at,
                r.ended_at,
                body
            ])
            .map_err(db_err)?;
        }
    }
    tx.commit().map_err(db_err)
}

struct Shared {
    journal: Mutex<Option<Journal>>,
    pending: Mutex<HashMap<String, Arc<Receipt>>>,
    idle: Condvar,
    /// Set when a batch could not be committed: the journal is then kept for recovery.
    dirty: Mutex<Option<String>>,
}

enum Msg {
    Put(Arc<Receipt>),
    Shutdown,
}

/// The default, durable receipt store.
pub struct SqliteReceiptStore {
    shared: Arc<Shared>,
    tx: Sender<Msg>,
    writer: Mutex<Option<JoinHandle<()>>>,
    reader: Mutex<Connection>,
    db_path: PathBuf,
}

impl std::fmt::Debug for SqliteReceiptStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteReceiptStore")
            .field("db", &self.db_path)
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
        let journal_dir = home.join("journal");
        let db_path = home.join("capability.db");
        let mut writer_conn = open_connection(&db_path)?;
        writer_conn.execute_batch(SCHEMA).map_err(db_err)?;
        capability_journal::recover(&journal_dir, JOURNAL_PREFIX, |lines| {
            // A torn last line (the process died mid-write) does not parse and is skipped.
            let batch: Vec<Arc<Receipt>> = lines
                .iter()
                .filter_map(|l| serde_json::from_str::<Receipt>(l).ok())
                .map(Arc::new)
                .collect();
            insert_batch(&mut writer_conn, &batch)
        })
        .map_err(|e| match e {
            capability_journal::RecoverError::Io(e) => StoreError::Io(e),
            capability_journal::RecoverError::Replay(e) => e,
        })?;
        let reader = open_connection(&db_path)?;

        let journal = Journal::create(
            &journal_dir,
            JOURNAL_PREFIX,
            durability == Durability::System,
        )?;
        let shared = Arc::new(Shared {
            journal: Mutex::new(Some(journal)),
            pending: Mutex::new(HashMap::new()),
            idle: Condvar::new(),
            dirty: Mutex::new(None),
        });
        let (tx, rx) = mpsc::channel();
        let writer_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("receipt-writer".into())
            .spawn(move || writer_loop(writer_conn, rx, writer_shared))?;
        Ok(SqliteReceiptStore {
            shared,
            tx,
            writer: Mutex::new(Some(writer)),
            reader: Mutex::new(reader),
            db_path,
        })
    }

    /// The database file.
    pub fn db_path(&self) -> &Path {
        &self.db_path
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

fn writer_loop(mut conn: Connection, rx: Receiver<Msg>, shared: Arc<Shared>) {
    let mut shutdown = false;
    while !shutdown {
        let mut batch = match rx.recv() {
            Ok(Msg::Put(r)) => vec![r],
            Ok(Msg::Shutdown) | Err(_) => break,
        };
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Msg::Put(r)) => batch.push(r),
                Ok(Msg::Shutdown) => {
                    shutdown = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let committed = insert_batch(&mut conn, &batch);
        if let Err(e) = &committed {
            *lock(&shared.dirty) = Some(e.to_string());
        }
        {
            let mut pending = lock(&shared.pending);
            for r in &batch {
                if pending
                    .get(&r.receipt_id)
                    .is_some_and(|p| Arc::ptr_eq(p, r))
                {
                    pending.remove(&r.receipt_id);
                }
            }
        }
        // Empty the journal once all it holds is in the database. The journal lock orders
        // this against `put`, which writes the journal and registers the receipt as pending
        // under the same lock.
        if lock(&shared.dirty).is_none() {
            let mut journal = lock(&shared.journal);
            let pending = lock(&shared.pending);
            if pending.is_empty()
                && let Some(j) = journal.as_mut()
            {
                let _ = j.truncate();
            }
            drop(pending);
            drop(journal);
        }
        shared.idle.notify_all();
    }
    shared.idle.notify_all();
}

impl ReceiptStore for SqliteReceiptStore {
    fn put_plan(&self, plan: &Plan) -> Result<(), StoreError> {
        // Rare (one per approval request): written directly, durably, on the reader
        // connection.
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
            serde_json::from_str::<Plan>(&b).map_err(|e| StoreError::Corrupt(e.to_string()))
        })
        .transpose()
    }

    fn put(&self, receipt: Arc<Receipt>) -> Result<(), StoreError> {
        let line = serde_json::to_vec(&*receipt).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        {
            let mut journal = lock(&self.shared.journal);
            match journal.as_mut() {
                Some(j) => j.append(&line)?,
                None => return Err(StoreError::Database("the receipt store is closed".into())),
            }
            lock(&self.shared.pending).insert(receipt.receipt_id.clone(), Arc::clone(&receipt));
        }
        self.tx
            .send(Msg::Put(receipt))
            .map_err(|_| StoreError::Database("the receipt writer stopped".into()))
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
            serde_json::from_str::<Receipt>(&b)
                .map(Arc::new)
                .map_err(|e| StoreError::Corrupt(format!("{receipt_id}: {e}")))
        })
        .transpose()
    }

    fn list(&self, query: &ReceiptQuery) -> Result<Vec<Arc<Receipt>>, StoreError> {
        self.flush()?;
        let conn = lock(&self.reader);
        let mut stmt = conn
            .prepare_cached(
                "SELECT body FROM receipts
                 WHERE (?1 IS NULL OR capability_id = ?1)
                   AND (?2 IS NULL OR status = ?2)
                   AND (?3 IS NULL OR started_at >= ?3)
                   AND (?4 IS NULL OR started_at < ?4)
                 ORDER BY started_at DESC, rowid DESC
                 LIMIT ?5",
            )
            .map_err(db_err)?;
        let limit = query
            .limit
            .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        let rows = stmt
            .query_map(
                params![
                    query.capability,
                    query.status.map(|s| s.as_str()),
                    query.since,
                    query.until,
                    limit
                ],
                |row| row.get::<_, String>(0),
            )
            .map_err(db_err)?;
        let mut out = Vec::new();
        for body in rows {
            let body = body.map_err(db_err)?;
            out.push(Arc::new(
                serde_json::from_str::<Receipt>(&body)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            ));
        }
        Ok(out)
    }
}

impl SqliteReceiptStore {
    fn put_plan_row(&self, plan: &Plan) -> Result<(), StoreError> {
        let body = serde_json::to_string(plan).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let conn = lock(&self.reader);
        conn.execute(
            "INSERT OR REPLACE INTO pending_plans (fingerprint, created_at, body) VALUES (?1, ?2, ?3)",
            params![plan.fingerprint, plan.created_at, body],
        )
        .map_err(db_err)?;
        Ok(())
    }
}

impl Drop for SqliteReceiptStore {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Shutdown);
        if let Some(handle) = lock(&self.writer).take() {
            let _ = handle.join();
        }
        let clean = lock(&self.shared.dirty).is_none() && lock(&self.shared.pending).is_empty();
        if clean && let Some(j) = lock(&self.shared.journal).take() {
            let _ = j.remove();
        }
    }
}
