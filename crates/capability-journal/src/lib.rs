//! # capability-journal
//!
//! The durability trick behind the receipt store and the audit log: a record is appended
//! to this process's journal file with one `write(2)` (no flush) before the call returns, so
//! it is in the kernel's page cache and survives a crash or `kill -9` of the process; a
//! writer thread then commits records to the database in batches. A journal whose records
//! are all committed is not emptied at every batch (an `ftruncate` under the lock that orders
//! appends stalls callers whenever the filesystem is busy): once it passes
//! [`ROTATE_BYTES`], the writer swaps in a fresh journal it created outside that lock and
//! deletes the old one after releasing it. Replay is idempotent, so committed records left
//! in a journal cost recovery time, never correctness.
//!
//! Each process holds an exclusive `flock` on its own journal. A journal is created under a
//! name recovery ignores, locked, then published, so a live journal is never visible
//! unlocked. [`recover`] replays the journals whose lock is free (their process died) and
//! deletes them. A line the store cannot read back (a torn last line, when the process died
//! mid-write; corrupted bytes; a record nested deeper than the reader accepts) is never
//! deleted with its journal: it is kept byte for byte in the journal directory's
//! [`quarantine`], named in the [`Recovery`] that `recover` returns, and counted by
//! [`quarantine::quarantined`] (for `cap doctor` and `audit verify`). A writer should refuse
//! a record its reader could not read back ([`json_nesting`] measures the nesting).
//!
//! Journals of different stores share a directory and are told apart by a prefix.
//!
//! [`Database`] is the other half: one SQLite file with one writer thread that every store
//! in it shares (see [`db`]).

pub mod db;
pub mod quarantine;

/// Where and how a journal is created (see [`Journal::seed`]).
#[derive(Clone, Debug)]
pub struct JournalSeed {
    dir: PathBuf,
    prefix: String,
    sync: bool,
}

impl JournalSeed {
    /// Creates and locks a new journal ([`Journal::create`]).
    pub fn create(&self) -> io::Result<Journal> {
        Journal::create(&self.dir, &self.prefix, self.sync)
    }
}

/// The size past which a fully committed journal is replaced by a fresh one.
pub const ROTATE_BYTES: u64 = 4 << 20;
pub use db::{Database, Job, WriteFailure, WriterGone};
pub use quarantine::{Quarantine, QuarantineFile, quarantined};

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// This process's journal for one store.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    prefix: String,
    sync: bool,
    /// Bytes appended since the journal was created or emptied.
    len: u64,
}

impl Journal {
    /// Creates and locks `dir/<prefix>-<pid>-<uuid>.jsonl`. With `sync`, every append is
    /// also flushed to disk (`fdatasync`), which survives power loss too.
    pub fn create(dir: &Path, prefix: &str, sync: bool) -> io::Result<Journal> {
        fs::create_dir_all(dir)?;
        let stem = format!("{prefix}-{}-{}", std::process::id(), uuid::Uuid::new_v4());
        let staging = dir.join(format!("{stem}.new"));
        let path = dir.join(format!("{stem}.jsonl"));
        let mut options = OpenOptions::new();
        options.create(true).append(true).read(true);
        #[cfg(unix)]
        {
            // Journals hold receipts (inputs and outputs) and audit events: owner only.
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let file = options.open(&staging)?;
        file.try_lock()
            .map_err(|e| io::Error::other(e.to_string()))?;
        fs::rename(&staging, &path)?;
        Ok(Journal {
            file,
            path,
            dir: dir.to_path_buf(),
            prefix: prefix.to_string(),
            sync,
            len: 0,
        })
    }

    /// What [`Journal::rotate`]'s replacement is made from (same directory, prefix and sync):
    /// take it under the lock that orders appends, create the journal outside it.
    pub fn seed(&self) -> JournalSeed {
        JournalSeed {
            dir: self.dir.clone(),
            prefix: self.prefix.clone(),
            sync: self.sync,
        }
    }

    /// A new journal beside this one.
    pub fn successor(&self) -> io::Result<Journal> {
        self.seed().create()
    }

    /// Puts `next` in this journal's place and returns the old one, whose records must all be
    /// committed elsewhere; the caller deletes it ([`Journal::remove`]) once it no longer holds
    /// the lock that orders appends. Nothing is lost if the process dies in between: the old
    /// journal is replayed (idempotently) by the next recovery.
    pub fn rotate(&mut self, next: Journal) -> Journal {
        std::mem::replace(self, next)
    }

    /// Bytes appended since the journal was created or emptied.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was appended since the journal was created or emptied.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one record (a line; the newline is added) with a single write.
    pub fn append(&mut self, record: &[u8]) -> io::Result<()> {
        let mut line = Vec::with_capacity(record.len() + 1);
        line.extend_from_slice(record);
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.len += line.len() as u64;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Empties the journal (everything in it is committed elsewhere).
    pub fn truncate(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.len = 0;
        Ok(())
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Deletes the journal (on a clean shutdown, when everything is committed).
    pub fn remove(self) -> io::Result<()> {
        fs::remove_file(&self.path)
    }
}

/// What a [`recover`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Journals of dead processes replayed and deleted by this call.
    pub journals: usize,
    /// Records read and committed.
    pub records: usize,
    /// The journals that held records that could not be read: where those are kept.
    pub quarantined: Vec<Quarantined>,
}

impl Recovery {
    /// Records moved to quarantine by this call.
    pub fn quarantined_records(&self) -> usize {
        self.quarantined.iter().map(|q| q.records).sum()
    }

    /// One warning per journal that held unreadable records ([`Quarantined::warning`]).
    pub fn warnings(&self) -> Vec<String> {
        self.quarantined.iter().map(Quarantined::warning).collect()
    }
}

/// The unreadable records of one recovered journal, kept in quarantine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The journal they were in (deleted once they were kept).
    pub journal: PathBuf,
    /// The quarantine file that holds them, byte for byte, one per line.
    pub file: PathBuf,
    /// How many.
    pub records: usize,
    /// Why each could not be read (`line <n>: <reason>`), in journal order.
    pub problems: Vec<String>,
}

impl Quarantined {
    /// `<n> unreadable record(s) of journal <journal> kept in <file> (<first problem>)`.
    pub fn warning(&self) -> String {
        let plural = if self.records == 1 { "" } else { "s" };
        let first = self
            .problems
            .first()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        format!(
            "{} unreadable record{plural} of journal {} kept in {}{first}",
            self.records,
            self.journal.display(),
            self.file.display()
        )
    }
}

/// Replays every journal with `prefix` in `dir` whose process is gone: each line is given to
/// `read`; the records it read are handed to `commit` together, in journal order; the lines
/// it could not read (and lines that are not UTF-8) are kept in the quarantine
/// ([`quarantine`]); then the journal is deleted. A journal whose `commit` fails, or whose
/// unreadable lines cannot be kept, is left in place (and the error returned). Journals of
/// live processes are left alone. Empty lines are no records and are ignored.
///
/// Several processes may recover the same directory at once: a journal is claimed by its
/// lock, and deleted while the lock is held, so whoever gets the lock after that finds the
/// path gone (or naming another file) and leaves it; a journal that vanishes at any step was
/// recovered by someone else, never an error.
pub fn recover<T, P: std::fmt::Display, E>(
    dir: &Path,
    prefix: &str,
    mut read: impl FnMut(&str) -> Result<T, P>,
    mut commit: impl FnMut(Vec<T>) -> Result<(), E>,
) -> Result<Recovery, RecoverError<E>> {
    let mut recovery = Recovery::default();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(recovery),
        Err(e) => return Err(RecoverError::Io(e)),
    };
    let head = format!("{prefix}-");
    for entry in entries {
        let path = match entry {
            Ok(entry) => entry.path(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(RecoverError::Io(e)),
        };
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with(&head) || !name.ends_with(".jsonl") {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
            continue; // gone: recovered by someone else
        };
        let Some(one) = recover_one(dir, &path, file, &mut read, &mut commit)? else {
            continue;
        };
        recovery.journals += usize::from(one.removed);
        recovery.records += one.records;
        recovery.quarantined.extend(one.quarantined);
    }
    Ok(recovery)
}

/// What recovering one journal did.
struct RecoveredJournal {
    records: usize,
    quarantined: Option<Quarantined>,
    /// Whether this call deleted the journal.
    removed: bool,
}

/// The longest reason kept for one unreadable line.
const PROBLEM_CHARS: usize = 200;

/// Recovers one journal opened as `file` from `path` in `dir`: `None` when it is not this
/// call's to recover (its process is alive, or another recovery took it first).
fn recover_one<T, P: std::fmt::Display, E>(
    dir: &Path,
    path: &Path,
    file: File,
    read: &mut impl FnMut(&str) -> Result<T, P>,
    commit: &mut impl FnMut(Vec<T>) -> Result<(), E>,
) -> Result<Option<RecoveredJournal>, RecoverError<E>> {
    if file.try_lock().is_err() {
        return Ok(None); // its process is alive, or another recovery holds it
    }
    // Between the open and the lock another recovery may have replayed and deleted it (the
    // lock was free again once it closed the file): then the path is gone, or names a new
    // file, and this one is not ours.
    if !same_file(path, &file).map_err(RecoverError::Io)? {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    (&file).read_to_end(&mut bytes).map_err(RecoverError::Io)?;
    let mut records = Vec::new();
    let mut kept = Vec::new();
    let mut problems = Vec::new();
    let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let last = lines.len().saturating_sub(1);
    for (i, line) in lines.into_iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        let problem = match std::str::from_utf8(line) {
            Ok(text) => match read(text) {
                Ok(record) => {
                    records.push(record);
                    continue;
                }
                Err(p) => p.to_string(),
            },
            Err(_) => "not UTF-8".to_string(),
        };
        let mut problem: String = problem.chars().take(PROBLEM_CHARS).collect();
        // Only the last line can lack its newline: its process died while writing it.
        if i == last {
            problem.push_str("; the last line is incomplete (its process died writing it)");
        }
        problems.push(format!("line {}: {problem}", i + 1));
        kept.extend_from_slice(line);
        kept.push(b'\n');
    }
    let count = records.len();
    if !records.is_empty() {
        commit(records).map_err(RecoverError::Replay)?;
    }
    let quarantined = if kept.is_empty() {
        None
    } else {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("journal");
        let file = quarantine::keep(dir, name, &kept).map_err(RecoverError::Io)?;
        Some(Quarantined {
            journal: path.to_path_buf(),
            file,
            records: problems.len(),
            problems,
        })
    };
    let removed = match fs::remove_file(path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(RecoverError::Io(e)),
    };
    Ok(Some(RecoveredJournal {
        records: count,
        quarantined,
        removed,
    }))
}

/// How deeply arrays and objects nest in the JSON text `record` (a scalar is 0, `[]` is 1),
/// counted over the bytes without parsing (brackets inside strings do not count). A store
/// compares it with its reader's limit before it journals a record, so that nothing is
/// journaled that could not be read back.
pub fn json_nesting(record: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in record {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether `path` still names the file open as `file` (false when it is gone).
fn same_file(path: &Path, file: &File) -> io::Result<bool> {
    let on_disk = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let open = file.metadata()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        Ok(on_disk.dev() == open.dev() && on_disk.ino() == open.ino() && open.nlink() > 0)
    }
    #[cfg(not(unix))]
    {
        Ok(on_disk.len() == open.len())
    }
}

/// Why recovery stopped.
#[derive(Debug)]
pub enum RecoverError<E> {
    Io(io::Error),
    Replay(E),
}

impl<E: std::fmt::Display> std::fmt::Display for RecoverError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoverError::Io(e) => write!(f, "journal recovery failed: {e}"),
            RecoverError::Replay(e) => write!(f, "journal replay failed: {e}"),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for RecoverError<E> {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    /// Reads every line as itself.
    fn every(line: &str) -> Result<String, String> {
        Ok(line.to_string())
    }

    #[test]
    fn a_dead_journal_is_replayed_in_order_and_a_live_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut live = Journal::create(dir.path(), "t", false).unwrap();
        live.append(b"live").unwrap();
        // A journal whose process died: an unlocked file with a torn last line.
        fs::write(dir.path().join("t-1-dead.jsonl"), "one\ntwo\nthr").unwrap();
        fs::write(dir.path().join("other-1-dead.jsonl"), "not mine\n").unwrap();
        let mut seen = Vec::new();
        let r = recover(dir.path(), "t", every, |lines| {
            seen.extend(lines);
            Ok::<(), String>(())
        })
        .unwrap();
        assert_eq!((r.journals, r.records), (1, 3));
        assert!(r.quarantined.is_empty());
        assert_eq!(seen, ["one", "two", "thr"]);
        assert!(!dir.path().join("t-1-dead.jsonl").exists());
        assert!(live.path().exists(), "a live journal is not taken");
        assert!(
            dir.path().join("other-1-dead.jsonl").exists(),
            "other prefixes are not taken"
        );
        live.truncate().unwrap();
        assert_eq!(fs::read(live.path()).unwrap(), b"");
        assert!(live.is_empty());
        live.append(b"committed").unwrap();
        assert_eq!(live.len(), 10);
        let next = live.successor().unwrap();
        let old = live.rotate(next);
        assert_ne!(old.path(), live.path());
        assert!(live.is_empty());
        assert_eq!(fs::read(old.path()).unwrap(), b"committed\n");
        // The old journal stays locked until it is removed: recovery leaves it alone.
        let r = recover(dir.path(), "t", every, |_| Ok::<(), String>(())).unwrap();
        assert_eq!(r.journals, 0);
        let old_path = old.path().to_path_buf();
        old.remove().unwrap();
        assert!(!old_path.exists());
        let p = live.path().to_path_buf();
        live.remove().unwrap();
        assert!(!p.exists());
    }

    #[test]
    fn a_journal_recovered_between_open_and_lock_is_left_alone() {
        // This call opened the journal; another recovery then replayed and deleted it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t-1-dead.jsonl");
        fs::write(&path, "once\n").unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        fs::remove_file(&path).unwrap();
        let mut seen = Vec::new();
        let mut read = every;
        let mut commit = |lines: Vec<String>| {
            seen.extend(lines);
            Ok::<(), String>(())
        };
        assert!(
            recover_one(dir.path(), &path, file, &mut read, &mut commit)
                .unwrap()
                .is_none()
        );
        // ... or a new journal took the name meanwhile: not ours either, and left in place.
        fs::write(&path, "first\n").unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        fs::remove_file(&path).unwrap();
        fs::write(&path, "second\n").unwrap();
        assert!(
            recover_one(dir.path(), &path, file, &mut read, &mut commit)
                .unwrap()
                .is_none()
        );
        assert!(path.exists());
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[test]
    fn concurrent_recoveries_replay_each_journal_once_and_never_fail() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let journals = 16;
            for j in 0..journals {
                fs::write(
                    dir.path().join(format!("t-{j}-dead.jsonl")),
                    format!("{j}-a\n{j}-b\n"),
                )
                .unwrap();
            }
            let barrier = std::sync::Barrier::new(8);
            let seen = std::sync::Mutex::new(Vec::new());
            let recovered: usize = std::thread::scope(|s| {
                let workers: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            recover(dir.path(), "t", every, |lines| {
                                seen.lock().unwrap().extend(lines);
                                Ok::<(), String>(())
                            })
                            .unwrap_or_else(|e| panic!("round {round}: {e}"))
                            .journals
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().unwrap()).sum()
            });
            assert_eq!(recovered, journals, "round {round}");
            let mut seen = seen.into_inner().unwrap();
            seen.sort();
            let mut expected: Vec<String> = (0..journals)
                .flat_map(|j| [format!("{j}-a"), format!("{j}-b")])
                .collect();
            expected.sort();
            assert_eq!(seen, expected, "round {round}: each line replayed once");
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    /// Fuzzing of journal files as recovery reads them (any bytes: torn lines, invalid
    /// UTF-8, no final newline), with a reader that refuses lines holding `#`: recovery never
    /// fails or panics, commits the lines read in order, keeps every other non-empty line
    /// byte for byte in quarantine, and removes the journal. 64 cases with a fixed seed;
    /// longer, by hand: `PROPTEST_CASES=100000 cargo test -p capability-journal --lib fuzz`.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;
        use proptest::test_runner::{Config, RngSeed};

        fn config() -> Config {
            let mut c = Config::default();
            if std::env::var_os("PROPTEST_CASES").is_none() {
                c.cases = 64;
            }
            if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
                c.rng_seed = RngSeed::Fixed(0x10_4a1);
            }
            c.failure_persistence = None;
            c
        }

        fn strategy() -> impl Strategy<Value = Vec<u8>> {
            // Bytes drawn often from newlines and `#`, so that files have many lines and
            // many of them are refused.
            prop::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'#'), Just(b'\r'), any::<u8>()],
                0..4096,
            )
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn any_journal_content_is_recovered_or_quarantined(bytes in strategy()) {
                let dir = tempfile::tempdir().unwrap();
                fs::write(dir.path().join("t-1-dead.jsonl"), &bytes).unwrap();
                let mut seen = Vec::new();
                let r = recover(
                    dir.path(),
                    "t",
                    |l| if l.contains('#') { Err("has #") } else { Ok(l.to_string()) },
                    |lines| {
                        seen.extend(lines);
                        Ok::<(), String>(())
                    },
                )
                .unwrap();
                prop_assert_eq!(r.journals, 1);
                prop_assert!(!dir.path().join("t-1-dead.jsonl").exists());
                let mut expected = Vec::new();
                let mut kept = Vec::new();
                for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    match std::str::from_utf8(line) {
                        Ok(l) if !l.contains('#') => expected.push(l.to_string()),
                        _ => {
                            kept.extend_from_slice(line);
                            kept.push(b'\n');
                        }
                    }
                }
                prop_assert_eq!(r.records, expected.len());
                prop_assert_eq!(seen, expected);
                let file = dir.path().join("quarantine").join("t-1-dead.jsonl");
                if kept.is_empty() {
                    prop_assert!(r.quarantined.is_empty());
                    prop_assert!(!file.exists());
                } else {
                    prop_assert_eq!(fs::read(&file).unwrap(), kept.clone());
                    let lines = kept.iter().filter(|&&b| b == b'\n').count();
                    prop_assert_eq!(r.quarantined_records(), lines);
                    prop_assert_eq!(quarantined(dir.path(), Some("t")).unwrap().records(), lines);
                }
            }
        }
    }

    #[test]
    fn a_failed_replay_keeps_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("t-1-dead.jsonl"), "x\n").unwrap();
        let r = recover(dir.path(), "t", every, |_| Err::<(), &str>("db locked"));
        assert!(matches!(r, Err(RecoverError::Replay("db locked"))));
        assert!(dir.path().join("t-1-dead.jsonl").exists());
    }
}
