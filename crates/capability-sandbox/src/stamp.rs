//! What a file looked like on disk, to tell that it changed.
//!
//! A modification time alone misses a change made within the file system's timestamp tick
//! (coarse on many file systems): a rewrite renamed over the file in the same tick keeps the
//! time. The stamp adds the device, inode, size and change time, so a file replaced by a
//! rename (a new inode) or rewritten to another size is seen at once.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

/// A file's identity and times; `None` from [`FileStamp::of`] when it does not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
    ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of `path` now.
    pub fn of(path: &Path) -> Option<FileStamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_over_the_file_is_a_change_even_within_one_tick() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        assert_eq!(FileStamp::of(&path), None);
        std::fs::write(&path, "a").unwrap();
        let first = FileStamp::of(&path).unwrap();
        assert_eq!(FileStamp::of(&path).as_ref(), Some(&first));
        // Same size, same content length, written at once: only the inode tells.
        let tmp = dir.path().join("f.tmp");
        std::fs::write(&tmp, "b").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        let second = FileStamp::of(&path).unwrap();
        assert_ne!(first, second);
    }
}
