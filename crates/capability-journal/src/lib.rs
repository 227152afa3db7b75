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
//! deletes them; a torn last line (the process died mid-write) is skipped by the caller's
//! parser.
//!
//! Journals of different stores share a directory and are told apart by a prefix.
//!
//! [`Database`] is the other half: one SQLite file with one writer thread that every store
//! in it shares (see [`db`]).

pub mod db;

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

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
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

/// Replays every journal with `prefix` in `dir` whose process is gone: `replay` receives its
/// lines in order; the journal is deleted once `replay` succeeded. Journals of live
/// processes are left alone. Returns how many journals were recovered (by this call).
///
/// Several processes may recover the same directory at once: a journal is claimed by its
/// lock, and deleted while the lock is held, so whoever gets the lock after that finds the
/// path gone (or naming another file) and leaves it; a journal that vanishes at any step was
/// recovered by someone else, never an error.
pub fn recover<E>(
    dir: &Path,
    prefix: &str,
    mut replay: impl FnMut(Vec<String>) -> Result<(), E>,
) -> Result<usize, RecoverError<E>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(RecoverError::Io(e)),
    };
    let mut recovered = 0;
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
        if recover_one(&path, file, &mut replay)? {
            recovered += 1;
        }
    }
    Ok(recovered)
}

/// Recovers one journal opened as `file` from `path`: false when it is not this call's to
/// recover (its process is alive, or another recovery took it first).
fn recover_one<E>(
    path: &Path,
    file: File,
    replay: &mut impl FnMut(Vec<String>) -> Result<(), E>,
) -> Result<bool, RecoverError<E>> {
    if file.try_lock().is_err() {
        return Ok(false); // its process is alive, or another recovery holds it
    }
    // Between the open and the lock another recovery may have replayed and deleted it (the
    // lock was free again once it closed the file): then the path is gone, or names a new
    // file, and this one is not ours.
    if !same_file(path, &file).map_err(RecoverError::Io)? {
        return Ok(false);
    }
    let mut lines = Vec::new();
    for line in BufReader::new(&file).lines() {
        match line {
            Ok(l) => lines.push(l),
            Err(_) => break, // a torn, non-UTF-8 tail
        }
    }
    if !lines.is_empty() {
        replay(lines).map_err(RecoverError::Replay)?;
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RecoverError::Io(e)),
    }
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

    #[test]
    fn a_dead_journal_is_replayed_in_order_and_a_live_one_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut live = Journal::create(dir.path(), "t", false).unwrap();
        live.append(b"live").unwrap();
        // A journal whose process died: an unlocked file with a torn last line.
        fs::write(dir.path().join("t-1-dead.jsonl"), "one\ntwo\nthr").unwrap();
        fs::write(dir.path().join("other-1-dead.jsonl"), "not mine\n").unwrap();
        let mut seen = Vec::new();
        let n = recover(dir.path(), "t", |lines| {
            seen.extend(lines);
            Ok::<(), String>(())
        })
        .unwrap();
        assert_eq!(n, 1);
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
        let n = recover(dir.path(), "t", |_| Ok::<(), String>(())).unwrap();
        assert_eq!(n, 0);
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
        let mut replay = |lines: Vec<String>| {
            seen.extend(lines);
            Ok::<(), String>(())
        };
        assert!(!recover_one(&path, file, &mut replay).unwrap());
        // ... or a new journal took the name meanwhile: not ours either, and left in place.
        fs::write(&path, "first\n").unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        fs::remove_file(&path).unwrap();
        fs::write(&path, "second\n").unwrap();
        assert!(!recover_one(&path, file, &mut replay).unwrap());
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
                            recover(dir.path(), "t", |lines| {
                                seen.lock().unwrap().extend(lines);
                                Ok::<(), String>(())
                            })
                            .unwrap_or_else(|e| panic!("round {round}: {e}"))
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
    /// UTF-8, no final newline): recovery never fails or panics, replays the complete UTF-8
    /// lines in order and removes the journal. 64 cases with a fixed seed; longer, by hand:
    /// `PROPTEST_CASES=100000 cargo test -p capability-journal --lib fuzz`.
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

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn any_journal_content_is_recovered(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
                let dir = tempfile::tempdir().unwrap();
                fs::write(dir.path().join("t-1-dead.jsonl"), &bytes).unwrap();
                let mut seen = Vec::new();
                let n = recover(dir.path(), "t", |lines| {
                    seen.extend(lines);
                    Ok::<(), String>(())
                })
                .unwrap();
                prop_assert_eq!(n, 1);
                prop_assert!(!dir.path().join("t-1-dead.jsonl").exists());
                // The lines replayed are the file's lines up to the first that is not UTF-8.
                // (A line ended by "\r\n" loses both; a last line without "\n" keeps its "\r".)
                let mut expected = Vec::new();
                let segments: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
                let last = segments.len() - 1;
                for (i, line) in segments.into_iter().enumerate() {
                    if i == last && line.is_empty() {
                        break;
                    }
                    match std::str::from_utf8(line) {
                        Ok(l) if i < last => expected.push(l.strip_suffix('\r').unwrap_or(l).to_string()),
                        Ok(l) => expected.push(l.to_string()),
                        Err(_) => break,
                    }
                }
                prop_assert_eq!(seen, expected);
            }
        }
    }

    #[test]
    fn a_failed_replay_keeps_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("t-1-dead.jsonl"), "x\n").unwrap();
        let r = recover(dir.path(), "t", |_| Err::<(), &str>("db locked"));
        assert!(matches!(r, Err(RecoverError::Replay("db locked"))));
        assert!(dir.path().join("t-1-dead.jsonl").exists());
    }
}
