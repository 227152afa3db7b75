//! One SQLite database file with one writer thread, shared by every store that keeps its
//! tables in it (receipts, kept plans, audit events, approvals).
//!
//! Stores hand the writer [`Job`]s. The writer takes every job waiting in its queue (up to
//! [`Database::MAX_BATCH`]), runs them in one `BEGIN IMMEDIATE` transaction, commits, and
//! then tells each job how it went ([`Job::finish`]); when the batch fails, each job is
//! retried in a transaction of its own so that one bad record does not fail the others.
//!
//! After a commit the writer sleeps for [`Database::GROUP_WINDOW`] before it looks at its
//! queue again: jobs submitted meanwhile wait for the next batch without waking it. With
//! nothing queued it looks again after 1, 2, 4, ... 32 ms, and only after about 60 ms
//! without a job does it wait for the next one, which then wakes it: a writer that
//! is busy, or was a moment ago, costs submitters no wake-up at all (waking it for every
//! job made it commit one tiny batch per call and, on a small machine, preempt the very
//! callers that submitted; a wake-up of a thread on the other core costs the submitter
//! tens of microseconds on a VM). A longer window is not better on two cores: at 5 ms a
//! gateway call was faster but a `cap mcp-serve` call slower at p50 and p99 (the batches
//! commit in bursts that compete with the calls). Durability does not change: a store
//! journals its records before it submits them.
//! [`Database::call`] runs a closure on the writer's connection, outside any batch, and
//! waits for its result (approvals, kept plans, schema creation, journal replay); it wakes
//! a sleeping writer, so that it never waits for the window.
//!
//! Readers use connections of their own ([`Database::connect`]): WAL lets them read while
//! the writer writes.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, Transaction, TransactionBehavior};

/// Work for the writer, run inside a batch's transaction.
pub trait Job: Send {
    /// Writes the job's rows.
    fn write(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()>;
    /// Called once the job's rows are committed (`Ok`) or could not be (`Err`).
    fn finish(self: Box<Self>, result: Result<(), WriteFailure>);
}

/// Why a job's rows could not be committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteFailure {
    pub message: String,
    /// A constraint (unique key, check) was violated.
    pub constraint: bool,
}

impl std::fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<rusqlite::Error> for WriteFailure {
    fn from(e: rusqlite::Error) -> Self {
        let constraint = matches!(
            &e,
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation
        );
        WriteFailure {
            message: e.to_string(),
            constraint,
        }
    }
}

/// The database is gone (its writer stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterGone;

impl std::fmt::Display for WriterGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the database writer stopped")
    }
}

impl std::error::Error for WriterGone {}

type Call = Box<dyn FnOnce(&mut Connection) + Send>;

enum Msg {
    Job(Box<dyn Job>),
    Call(Call),
}

/// One database file and its single writer thread.
pub struct Database {
    path: PathBuf,
    busy_timeout: Duration,
    /// Opened read-only: the URI every connection uses (writes fail).
    read_only: Option<String>,
    tx: Mutex<Option<Sender<Msg>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The name of the writer thread (one per open database).
pub const WRITER_THREAD: &str = "capability-db-writer";

fn configure(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<()> {
    conn.busy_timeout(busy_timeout)?;
    // Switching a new file to WAL takes an exclusive lock, and SQLite answers "database is
    // locked" at once, without its busy handler, when another connection is switching it
    // too (several processes opening a new home at once): retry within the busy timeout.
    let started = std::time::Instant::now();
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < busy_timeout =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => break other?,
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(())
}

impl Database {
    /// Most jobs committed in one transaction.
    pub const MAX_BATCH: usize = 1024;

    /// How long the writer lets jobs gather after a commit before it takes the next batch
    /// (a [`Database::call`] cuts it short).
    pub const GROUP_WINDOW: Duration = Duration::from_millis(1);

    /// Opens (creating if needed) the database file and starts its writer.
    pub fn open(path: &Path) -> rusqlite::Result<Database> {
        Database::open_with(path, Duration::from_secs(10))
    }

    /// [`Database::open`] with a busy timeout (how long to wait for another process's lock).
    pub fn open_with(path: &Path, busy_timeout: Duration) -> rusqlite::Result<Database> {
        Database::open_windowed(path, busy_timeout, Database::GROUP_WINDOW)
    }

    fn open_windowed(
        path: &Path,
        busy_timeout: Duration,
        window: Duration,
    ) -> rusqlite::Result<Database> {
        let conn = Connection::open(path)?;
        configure(&conn, busy_timeout)?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || writer_loop(conn, rx, window))
            .map_err(|e| {
                rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(format!(
                    "cannot start the database writer: {e}"
                ))))
            })?;
        Ok(Database {
            path: path.to_path_buf(),
            busy_timeout,
            read_only: None,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Opens an existing database that this process cannot write (a read-only home):
    /// `mode=ro`, which reads a WAL left by a writer, or, when its `-shm` cannot be made in
    /// a read-only directory, `immutable=1` (then there is no WAL to miss: its files exist
    /// whenever it holds anything). Every write fails.
    pub fn open_read_only(path: &Path) -> rusqlite::Result<Database> {
        use rusqlite::OpenFlags;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let name = path
            .to_string_lossy()
            .replace('%', "%25")
            .replace('?', "%3f")
            .replace('#', "%23");
        let mut last = None;
        for uri in [
            format!("file:{name}?mode=ro"),
            format!("file:{name}?immutable=1"),
        ] {
            let attempt = Connection::open_with_flags(&uri, flags).and_then(|conn| {
                conn.busy_timeout(Duration::from_secs(10))?;
                conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                    r.get::<_, i64>(0)
                })?;
                Ok(conn)
            });
            match attempt {
                Ok(conn) => {
                    let (tx, rx) = mpsc::channel();
                    let thread = std::thread::Builder::new()
                        .name(WRITER_THREAD.into())
                        .spawn(move || writer_loop(conn, rx, Database::GROUP_WINDOW))
                        .map_err(|e| {
                            rusqlite::Error::ToSqlConversionFailure(Box::new(
                                std::io::Error::other(format!(
                                    "cannot start the database writer: {e}"
                                )),
                            ))
                        })?;
                    return Ok(Database {
                        path: path.to_path_buf(),
                        busy_timeout: Duration::from_secs(10),
                        read_only: Some(uri),
                        tx: Mutex::new(Some(tx)),
                        thread: Mutex::new(Some(thread)),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(rusqlite::Error::InvalidQuery))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the database was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only.is_some()
    }

    /// A new connection for reading (same settings as the writer's).
    pub fn connect(&self) -> rusqlite::Result<Connection> {
        if let Some(uri) = &self.read_only {
            use rusqlite::OpenFlags;
            let conn = Connection::open_with_flags(
                uri,
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(self.busy_timeout)?;
            return Ok(conn);
        }
        let conn = Connection::open(&self.path)?;
        configure(&conn, self.busy_timeout)?;
        Ok(conn)
    }

    fn send(&self, msg: Msg) -> Result<(), WriterGone> {
        match self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            Some(tx) => tx.send(msg).map_err(|_| WriterGone),
            None => Err(WriterGone),
        }
    }

    /// Queues a job for the next batch; returns at once.
    pub fn submit(&self, job: Box<dyn Job>) -> Result<(), WriterGone> {
        self.send(Msg::Job(job))
    }

    /// Runs `f` on the writer's connection (after everything queued before it) and waits for
    /// its result.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> R + Send + 'static,
    ) -> Result<R, WriterGone> {
        let (reply, rx) = mpsc::channel();
        self.send(Msg::Call(Box::new(move |conn| {
            let _ = reply.send(f(conn));
        })))?;
        self.wake_writer();
        rx.recv().map_err(|_| WriterGone)
    }

    /// Waits until every job queued so far has been committed (or failed).
    pub fn flush(&self) -> Result<(), WriterGone> {
        self.call(|_| ())
    }

    /// Ends the writer's group window now.
    fn wake_writer(&self) {
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            t.thread().unpark();
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Runs schema statements in one `BEGIN IMMEDIATE` transaction. Several processes opening a
/// new database at once then wait for each other's write lock (the busy timeout) instead of
/// one failing with "database is locked" when its statement's read snapshot went stale before
/// it could write (WAL does not retry that).
pub fn create_schema(conn: &mut Connection, sql: &str) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(sql)?;
    tx.commit()
}

fn run_batch(conn: &mut Connection, jobs: &mut [Box<dyn Job>]) -> Result<(), WriteFailure> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in jobs.iter_mut() {
        job.write(&tx)?;
    }
    tx.commit()?;
    Ok(())
}

fn commit(conn: &mut Connection, mut jobs: Vec<Box<dyn Job>>) {
    if jobs.is_empty() {
        return;
    }
    match run_batch(conn, &mut jobs) {
        Ok(()) => jobs.into_iter().for_each(|j| j.finish(Ok(()))),
        Err(e) if jobs.len() == 1 => jobs.into_iter().for_each(|j| j.finish(Err(e.clone()))),
        Err(_) => {
            // One bad job must not fail the others: each on its own.
            for job in jobs {
                let mut one = vec![job];
                let result = run_batch(conn, &mut one);
                one.into_iter().for_each(|j| j.finish(result.clone()));
            }
        }
    }
}

/// Once the writer's naps while no job comes would reach this long (after about 60 ms
/// without a job), it waits on its queue instead.
const IDLE_NAP_MAX: Duration = Duration::from_millis(64);

fn writer_loop(mut conn: Connection, rx: Receiver<Msg>, window: Duration) {
    // A submitter wakes the writer only after it was idle for a while: it looks at its
    // queue after each window, then at growing intervals, without waiting on the channel
    // (a receiver that waits costs each submitter a futex wake-up, a thread switch on the
    // other core, on the hot path of every call). After about 60 ms without a job it waits
    // on the channel, and the next job wakes it once. A call wakes it at once.
    let mut nap = window;
    loop {
        let first = match rx.try_recv() {
            Ok(msg) => msg,
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) if nap < IDLE_NAP_MAX => {
                std::thread::park_timeout(nap);
                nap = (nap * 2).min(IDLE_NAP_MAX);
                continue;
            }
            Err(TryRecvError::Empty) => match rx.recv() {
                Ok(msg) => msg,
                Err(_) => return,
            },
        };
        nap = window;
        let mut next = Some(first);
        let mut jobs: Vec<Box<dyn Job>> = Vec::new();
        while let Some(msg) = next.take() {
            match msg {
                Msg::Job(j) => jobs.push(j),
                Msg::Call(f) => {
                    // Calls run in order: commit what was queued before them first.
                    commit(&mut conn, std::mem::take(&mut jobs));
                    f(&mut conn);
                }
            }
            if jobs.len() < Database::MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        let committed = !jobs.is_empty();
        commit(&mut conn, jobs);
        if committed {
            // Let the next batch gather (a call cuts the window short).
            std::thread::park_timeout(window);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Insert {
        value: i64,
        done: Arc<AtomicUsize>,
        failed: Arc<AtomicUsize>,
    }

    impl Insert {
        fn boxed(value: i64, done: &Arc<AtomicUsize>, failed: &Arc<AtomicUsize>) -> Box<Insert> {
            Box::new(Insert {
                value,
                done: Arc::clone(done),
                failed: Arc::clone(failed),
            })
        }
    }

    fn count(db: &Database) -> i64 {
        db.call(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .unwrap()
            .unwrap()
    }

    impl Job for Insert {
        fn write(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [self.value])?;
            Ok(())
        }
        fn finish(self: Box<Self>, result: Result<(), WriteFailure>) {
            match result {
                Ok(()) => self.done.fetch_add(1, Ordering::SeqCst),
                Err(_) => self.failed.fetch_add(1, Ordering::SeqCst),
            };
        }
    }

    /// Jobs are committed without anyone asking: the writer's timer takes every batch.
    #[test]
    fn submitted_jobs_are_committed_without_a_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let db = Database::open(&path).unwrap();
        db.call(|c| c.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)"))
            .unwrap()
            .unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        for value in 0..500 {
            db.submit(Insert::boxed(value, &done, &failed)).unwrap();
        }
        let reader = db.connect().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut count: i64 = 0;
        while count < 500 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            count = reader
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap();
        }
        assert_eq!(count, 500);
        assert_eq!(done.load(Ordering::SeqCst), 500);
        assert_eq!(failed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_bad_job_fails_alone_and_calls_see_earlier_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&dir.path().join("t.db")).unwrap();
        db.call(|c| c.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)"))
            .unwrap()
            .unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        for value in [1, 2, 2, 3] {
            db.submit(Insert::boxed(value, &done, &failed)).unwrap();
        }
        assert_eq!(count(&db), 3);
        assert_eq!(done.load(Ordering::SeqCst), 3);
        assert_eq!(failed.load(Ordering::SeqCst), 1);
    }

    /// A call made while the writer lets a batch gather does not wait for the window.
    #[test]
    fn a_call_cuts_the_group_window_short() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let window = Duration::from_secs(120);
        let db = Database::open_windowed(&path, Duration::from_secs(10), window).unwrap();
        let started = std::time::Instant::now();
        db.call(|c| c.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)"))
            .unwrap()
            .unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        db.submit(Insert::boxed(1, &done, &failed)).unwrap();
        // The idle writer commits the job at once, then sleeps for its window.
        while done.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < window / 2,
                "the first job was not committed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        db.submit(Insert::boxed(2, &done, &failed)).unwrap();
        assert_eq!(count(&db), 2, "the call saw the job queued before it");
        assert!(
            started.elapsed() < window / 2,
            "the call waited for the window"
        );
        // Dropping the database ends the window as well.
        drop(db);
        assert!(
            started.elapsed() < window / 2,
            "the drop waited for the window"
        );
    }
}
