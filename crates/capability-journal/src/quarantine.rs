//! Where the records recovery could not read are kept: `<journal dir>/quarantine/`.
//!
//! A dead process's journal can hold a line its store cannot read back (corrupted bytes, a
//! record nested deeper than the reader's limit, a line torn by a crash mid-write). Such a
//! line is never deleted with the journal: [`recover`](crate::recover) copies it, byte for
//! byte, into a quarantine file named after the journal, and only then deletes the journal.
//!
//! A quarantine file holds the unreadable lines of one journal, each followed by `\n` (the
//! journal's own framing), so it counts one record per line ([`quarantined`]). It is written
//! under a staging name and renamed into place, so it is whole or absent. Its name is the
//! journal's (`<prefix>-<pid>-<uuid>.jsonl`): a recovery that stopped after quarantining but
//! before deleting the journal writes the same bytes under the same name the next time, which
//! is recognised and not written twice. Should a different journal ever have had the same
//! name, its records go to `<name>.1`, `<name>.2`, ...; nothing in quarantine is overwritten.
//!
//! Nothing removes quarantine files: they are for an operator to inspect (`cap doctor` and
//! `audit verify` count them) and delete.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The name of the quarantine directory inside a journal directory.
pub const QUARANTINE: &str = "quarantine";

/// The quarantine directory of the journal directory `dir`.
pub fn quarantine_dir(dir: &Path) -> PathBuf {
    dir.join(QUARANTINE)
}

/// The records kept in a journal directory's quarantine ([`quarantined`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quarantine {
    /// One entry per quarantine file, by path.
    pub files: Vec<QuarantineFile>,
}

impl Quarantine {
    /// Records kept, over all files.
    pub fn records(&self) -> usize {
        self.files.iter().map(|f| f.records).sum()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.records() == 0
    }
}

/// One quarantine file and how many records (lines) it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantineFile {
    pub path: PathBuf,
    pub records: usize,
}

/// The records kept in quarantine in the journal directory `dir` (a home's
/// `<home>/journal`), from the journals whose names start with `<prefix>-` (`receipts`,
/// `audit`), or from all journals with `None`. An absent quarantine directory holds none.
pub fn quarantined(dir: &Path, prefix: Option<&str>) -> io::Result<Quarantine> {
    let qdir = quarantine_dir(dir);
    let entries = match fs::read_dir(&qdir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Quarantine::default()),
        Err(e) => return Err(e),
    };
    let head = prefix.map(|p| format!("{p}-"));
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // Staging files (a quarantine being written) start with a dot.
        if name.starts_with('.') || head.as_ref().is_some_and(|h| !name.starts_with(h.as_str())) {
            continue;
        }
        if !entry.file_type()?.is_file() {
            continue;
        }
        let path = entry.path();
        let records = count_lines(&path)?;
        files.push(QuarantineFile { path, records });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Quarantine { files })
}

/// Lines in a file: its `\n`s, and a last line without one.
fn count_lines(path: &Path) -> io::Result<usize> {
    let mut file = fs::File::open(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut lines, mut last) = (0usize, b'\n');
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let chunk = &buf[..n];
        lines += chunk.iter().filter(|&&b| b == b'\n').count();
        if let Some(&b) = chunk.last() {
            last = b;
        }
    }
    Ok(lines + usize::from(last != b'\n'))
}

/// Keeps `bytes` (the unreadable lines of the journal named `journal`, each ended by `\n`)
/// in the quarantine of `dir`; returns the file that holds them. The caller holds the
/// journal's lock, so nobody else writes quarantine files of this name meanwhile.
pub(crate) fn keep(dir: &Path, journal: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    let qdir = quarantine_dir(dir);
    create_private_dir(&qdir)?;
    let mut n = 0u64;
    loop {
        let name = if n == 0 {
            journal.to_string()
        } else {
            format!("{journal}.{n}")
        };
        let path = qdir.join(&name);
        match fs::read(&path) {
            // Kept already: an earlier recovery of this journal stopped before deleting it.
            Ok(existing) if existing == bytes => return Ok(path),
            Ok(_) => n += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                write_whole(&qdir.join(format!(".{name}.tmp")), &path, bytes)?;
                return Ok(path);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes `bytes` to `staging`, flushes them to disk and renames the file to `path`.
fn write_whole(staging: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        // Quarantined records are receipts and audit events, like the journals: owner only.
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(staging)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(staging, path)
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}
