//! [`FileStamp`]: how a watcher tells that a file changed on disk.
//!
//! A modification time alone misses a change made within one timestamp tick of the last
//! read (a pins file accepted and renamed over the old one at once); the stamp also holds
//! the device and inode (a rename puts another inode in place), the size and the status
//! change time, all with nanoseconds.

use std::path::Path;
use std::time::SystemTime;

/// What identifies one version of a file; two reads of an unchanged file give equal stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
    changed: (i64, i64),
}

impl FileStamp {
    /// The stamp of `path` now (`None` when it cannot be read: missing, no permission).
    pub fn of(path: &Path) -> Option<FileStamp> {
        let m = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let (dev, ino, changed) = {
            use std::os::unix::fs::MetadataExt as _;
            (m.dev(), m.ino(), (m.ctime(), m.ctime_nsec()))
        };
        #[cfg(not(unix))]
        let (dev, ino, changed) = (0, 0, (0, 0));
        Some(FileStamp {
            dev,
            ino,
            len: m.len(),
            modified: m.modified().ok(),
            changed,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_over_the_file_within_one_tick_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pins.json");
        std::fs::write(&path, "{}").unwrap();
        let first = FileStamp::of(&path).unwrap();
        assert_eq!(FileStamp::of(&path), Some(first));
        // Same size, written and renamed over at once.
        let next = dir.path().join("pins.json.tmp");
        std::fs::write(&next, "[]").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_ne!(FileStamp::of(&path), Some(first));
        assert_eq!(FileStamp::of(&dir.path().join("missing")), None);
    }
}
