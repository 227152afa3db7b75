//! Installed packages are run only as they were installed.
//!
//! The acquisition code records, at install, every entry of the unpacked package
//! ([`PackageFiles`]: package-relative path → directory, regular file with its SHA-256, size
//! and execute bit, or symbolic link with its target) in the installation record. The source
//! that registers an installed package's capabilities then *seals* its package root
//! ([`seal_installed`]): from then on, in this process, every resolution of one of its
//! modules ([`resolve_module_path`](crate::resolve_module_path), which every executor of
//! package modules goes through before it reads or runs anything) first checks, with
//! [`check_installed`]:
//!
//! * that the store (`<home>/packages`) and the package directory are the home's own
//!   private directories ([`check_private_dir`]): real directories (not symbolic links),
//!   owned by this process's effective user, writable by neither group nor others;
//! * that the package tree is exactly what was installed: every recorded entry present with
//!   the same type, bytes, size and execute bit (files), or target (links); nothing added;
//!   no entry writable by group or others, nor owned by another user. The first difference
//!   refuses the run, naming the entry.
//!
//! The tree is walked without following links, and each file is opened without following
//! one (`O_NOFOLLOW`, `O_NONBLOCK`: a FIFO put in place of a file cannot block the walk) and
//! checked to be the entry that was examined. A file whose size differs is refused from its
//! size, before it is read, so the bytes hashed per run are at most what was installed.
//!
//! What it does not do: the check runs before the executor reads the package, not while it
//! runs; a writer that can change the store between the check and the run (the owner of the
//! home, or root) is not stopped by it. The files are kept read-only as defence in depth,
//! which neither of them needs to respect.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::integrity::hex;

/// The version of [`PackageFiles`] records.
pub const FILES_VERSION: &str = "1";

/// One entry of an installed package tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum PackageEntry {
    /// A directory.
    Dir,
    /// A regular file: the SHA-256 of its bytes (hex), its size and whether it is
    /// executable.
    File {
        sha256: String,
        size: u64,
        executable: bool,
    },
    /// A symbolic link and its target, as written.
    Symlink { target: String },
}

impl PackageEntry {
    fn kind(&self) -> &'static str {
        match self {
            PackageEntry::Dir => "a directory",
            PackageEntry::File { .. } => "a file",
            PackageEntry::Symlink { .. } => "a symbolic link",
        }
    }
}

/// Every entry of an unpacked package, by package-relative path (`/`-separated), as it was
/// installed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageFiles {
    /// [`FILES_VERSION`].
    pub files_version: String,
    pub entries: BTreeMap<String, PackageEntry>,
}

/// Why an installed package may not run (or could not be recorded).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackageCheckError {
    /// The store or the package directory is not the home's own private directory.
    #[error("the package store is refused: {} {reason}", path.display())]
    Store { path: PathBuf, reason: String },
    /// The package tree differs from what was installed.
    #[error("installed package {}: `{entry}` {change}", root.display())]
    Altered {
        root: PathBuf,
        entry: String,
        change: String,
    },
    /// The package has no trustworthy record of its files.
    #[error("installed package {}: {reason}", root.display())]
    Unverifiable { root: PathBuf, reason: String },
    /// The tree could not be read.
    #[error("installed package {}: {context}: {source}", root.display())]
    Io {
        root: PathBuf,
        context: String,
        #[source]
        source: io::Error,
    },
}

impl PackageCheckError {
    /// The package-relative entry at fault, when one is.
    pub fn entry(&self) -> Option<&str> {
        match self {
            PackageCheckError::Altered { entry, .. } => Some(entry),
            _ => None,
        }
    }
}

#[cfg(unix)]
fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Refuses `path` unless it is a real directory (not a symbolic link), owned by this
/// process's effective user and writable by neither its group nor others.
pub fn check_private_dir(path: &Path) -> Result<(), PackageCheckError> {
    let refused = |reason: String| PackageCheckError::Store {
        path: path.to_path_buf(),
        reason,
    };
    let meta =
        std::fs::symlink_metadata(path).map_err(|e| refused(format!("cannot be examined: {e}")))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).unwrap_or_default();
        return Err(refused(format!(
            "is a symbolic link (to {}); it must be a directory of the home itself",
            target.display()
        )));
    }
    if !meta.is_dir() {
        return Err(refused("is not a directory".into()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let me = effective_uid();
        if meta.uid() != me {
            return Err(refused(format!(
                "is owned by uid {}, not by this user (uid {me})",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(refused(format!(
                "is writable by its group or by others (mode {:o}); it must be private (chmod go-w)",
                meta.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// Bytes read at a time while hashing.
const BLOCK: usize = 64 << 10;

/// Opens a regular file without following a link and without blocking on a FIFO, and checks
/// that it is the file `expected` describes (same device and inode).
#[cfg(unix)]
fn open_entry(path: &Path, expected: &std::fs::Metadata) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::MetadataExt as _;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() || meta.dev() != expected.dev() || meta.ino() != expected.ino() {
        return Err(io::Error::other("it changed while it was examined"));
    }
    Ok(file)
}

#[cfg(not(unix))]
fn open_entry(path: &Path, _expected: &std::fs::Metadata) -> io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// SHA-256 of at most `limit + 1` bytes of `file`, and how many were read.
fn hash(file: std::fs::File, limit: u64) -> io::Result<(String, u64)> {
    let mut reader = file.take(limit.saturating_add(1));
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; BLOCK];
    let mut size = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        size = size.saturating_add(n as u64);
        sha.update(buf.get(..n).unwrap_or_default());
    }
    Ok((hex(&sha.finalize()), size))
}

/// Walks a package tree, recording it (`expected` is `None`) or checking it against what was
/// recorded (stopping at the first difference).
struct Walk<'a> {
    root: &'a Path,
    expected: Option<&'a PackageFiles>,
    found: BTreeMap<String, PackageEntry>,
}

impl Walk<'_> {
    fn io(&self, context: String, source: io::Error) -> PackageCheckError {
        PackageCheckError::Io {
            root: self.root.to_path_buf(),
            context,
            source,
        }
    }

    fn altered(&self, entry: &str, change: String) -> PackageCheckError {
        PackageCheckError::Altered {
            root: self.root.to_path_buf(),
            entry: entry.to_string(),
            change,
        }
    }

    fn dir(&mut self, rel: &str) -> Result<(), PackageCheckError> {
        let path = if rel.is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(rel)
        };
        let listing =
            std::fs::read_dir(&path).map_err(|e| self.io(format!("reading `{rel}/`"), e))?;
        let mut names = Vec::new();
        for item in listing {
            let item = item.map_err(|e| self.io(format!("reading `{rel}/`"), e))?;
            let name = item.file_name();
            let Some(name) = name.to_str() else {
                let shown = format!("{rel}/{}", name.to_string_lossy());
                return Err(self.altered(&shown, "has a name that is not UTF-8".into()));
            };
            names.push(name.to_string());
        }
        names.sort();
        for name in names {
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            self.entry(&child)?;
        }
        Ok(())
    }

    fn entry(&mut self, rel: &str) -> Result<(), PackageCheckError> {
        let path = self.root.join(rel);
        let meta = std::fs::symlink_metadata(&path).map_err(|e| self.io(format!("`{rel}`"), e))?;
        let expected = match self.expected {
            Some(files) => match files.entries.get(rel) {
                Some(e) => Some(e),
                None => return Err(self.altered(rel, "was added after install".into())),
            },
            None => None,
        };
        #[cfg(unix)]
        if !meta.file_type().is_symlink() {
            use std::os::unix::fs::MetadataExt as _;
            if meta.uid() != effective_uid() {
                return Err(self.altered(rel, format!("is owned by uid {}", meta.uid())));
            }
            if meta.mode() & 0o022 != 0 {
                return Err(self.altered(
                    rel,
                    format!(
                        "is writable by its group or by others (mode {:o})",
                        meta.mode() & 0o7777
                    ),
                ));
            }
        }
        let kind = meta.file_type();
        let found = if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| self.io(format!("`{rel}`"), e))?;
            let Some(target) = target.to_str() else {
                return Err(self.altered(rel, "is a link whose target is not UTF-8".into()));
            };
            PackageEntry::Symlink {
                target: target.to_string(),
            }
        } else if kind.is_dir() {
            PackageEntry::Dir
        } else if kind.is_file() {
            let executable = {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt as _;
                    meta.permissions().mode() & 0o111 != 0
                }
                #[cfg(not(unix))]
                {
                    false
                }
            };
            match expected {
                Some(PackageEntry::File {
                    size,
                    executable: was,
                    ..
                }) => {
                    if *size != meta.len() {
                        return Err(self.altered(
                            rel,
                            format!(
                                "was changed after install ({size} bytes installed, {} now)",
                                meta.len()
                            ),
                        ));
                    }
                    if *was != executable {
                        return Err(self.altered(
                            rel,
                            "had its execute permission changed after install".into(),
                        ));
                    }
                }
                Some(other) => {
                    return Err(self.altered(
                        rel,
                        format!("was {} when installed and is a file now", other.kind()),
                    ));
                }
                None => {}
            }
            let file = open_entry(&path, &meta).map_err(|e| self.io(format!("`{rel}`"), e))?;
            let (sha256, size) =
                hash(file, meta.len()).map_err(|e| self.io(format!("`{rel}`"), e))?;
            PackageEntry::File {
                sha256,
                size,
                executable,
            }
        } else {
            return Err(self.altered(
                rel,
                "is neither a file, a directory nor a link (a device, FIFO or socket)".into(),
            ));
        };
        if let Some(expected) = expected
            && *expected != found
        {
            let change = match (expected, &found) {
                (
                    PackageEntry::File { sha256: was, .. },
                    PackageEntry::File { sha256: now, .. },
                ) => {
                    format!("was changed after install (sha256 {was} installed, {now} now)")
                }
                (PackageEntry::Symlink { target: was }, PackageEntry::Symlink { target: now }) => {
                    format!("was a link to `{was}` when installed and points to `{now}` now")
                }
                (was, now) => format!(
                    "was {} when installed and is {} now",
                    was.kind(),
                    now.kind()
                ),
            };
            return Err(self.altered(rel, change));
        }
        let is_dir = found == PackageEntry::Dir;
        self.found.insert(rel.to_string(), found);
        if is_dir {
            self.dir(rel)?;
        }
        Ok(())
    }
}

impl PackageFiles {
    /// Records the package tree at `root` (a private directory, see [`check_private_dir`]).
    /// A device, FIFO or socket, a name that is not UTF-8, or an entry writable by group or
    /// others or owned by another user is refused.
    pub fn scan(root: &Path) -> Result<PackageFiles, PackageCheckError> {
        check_private_dir(root)?;
        let mut walk = Walk {
            root,
            expected: None,
            found: BTreeMap::new(),
        };
        walk.dir("")?;
        Ok(PackageFiles {
            files_version: FILES_VERSION.into(),
            entries: walk.found,
        })
    }

    /// Checks the package tree at `root` against this record: the first entry added,
    /// missing or changed (type, bytes, size, execute bit, link target) is refused, naming
    /// it.
    pub fn verify(&self, root: &Path) -> Result<(), PackageCheckError> {
        if self.files_version != FILES_VERSION {
            return Err(PackageCheckError::Unverifiable {
                root: root.to_path_buf(),
                reason: format!(
                    "its file record has version {:?}, not {FILES_VERSION:?}",
                    self.files_version
                ),
            });
        }
        check_private_dir(root)?;
        let mut walk = Walk {
            root,
            expected: Some(self),
            found: BTreeMap::new(),
        };
        walk.dir("")?;
        if let Some(missing) = self.entries.keys().find(|k| !walk.found.contains_key(*k)) {
            return Err(walk.altered(missing, "was removed after install".into()));
        }
        Ok(())
    }

    /// `sha256-<hex>` of the canonical JSON of this list (keys sorted, as
    /// `capability_core::json::canonical_hash`): what a receipt of one of its capabilities
    /// cites, reproducible from the record's `files` member.
    pub fn digest(&self) -> String {
        let value = serde_json::to_value(self).unwrap_or_default();
        format!("sha256-{}", capability_core::json::canonical_hash(&value))
    }

    /// The number of regular files and their total size.
    pub fn totals(&self) -> (usize, u64) {
        self.entries.values().fold((0, 0), |(n, bytes), e| match e {
            PackageEntry::File { size, .. } => (n + 1, bytes.saturating_add(*size)),
            _ => (n, bytes),
        })
    }
}

/// A sealed package root: what it must hold, or why it may not run at all.
#[derive(Debug)]
struct Seal {
    /// The package root as registered (absolute, not canonical).
    package: PathBuf,
    /// Its canonical path when it was sealed.
    canonical: Option<PathBuf>,
    /// The store directory it is in.
    store: PathBuf,
    expected: Result<Arc<PackageFiles>, String>,
}

static SEALS: Mutex<Vec<Arc<Seal>>> = Mutex::new(Vec::new());

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Seals the installed package at `package_root` (in the store directory `store`): every
/// later resolution of one of its modules in this process checks it first (see the module
/// docs). `expected` is what was installed, or why the package may not run (its record has
/// no file list, the store is refused...). Sealing a root again replaces its seal.
pub fn seal_installed(package_root: &Path, store: &Path, expected: Result<PackageFiles, String>) {
    let package = absolute(package_root);
    let seal = Arc::new(Seal {
        canonical: package.canonicalize().ok(),
        store: absolute(store),
        expected: expected.map(Arc::new),
        package,
    });
    let mut seals = SEALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seals.retain(|s| s.package != seal.package);
    seals.push(seal);
}

/// The seal of the package `package_root` is in (it, or a directory of it), if any.
fn seal_of(package_root: &Path) -> Option<Arc<Seal>> {
    let given = absolute(package_root);
    let canonical = package_root.canonicalize().ok();
    let seals = SEALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seals
        .iter()
        .find(|s| {
            given.starts_with(&s.package)
                || matches!(
                    (&canonical, &s.canonical),
                    (Some(c), Some(sc)) if c.starts_with(sc)
                )
        })
        .cloned()
}

/// When `package_root` is (in) a sealed installed package: checks its store, its directory
/// and its whole tree against what was installed. `Ok(false)`: not an installed package
/// (nothing to check); `Ok(true)`: checked.
pub fn check_installed(package_root: &Path) -> Result<bool, PackageCheckError> {
    let Some(seal) = seal_of(package_root) else {
        return Ok(false);
    };
    let expected = match &seal.expected {
        Ok(files) => files,
        Err(reason) => {
            return Err(PackageCheckError::Unverifiable {
                root: seal.package.clone(),
                reason: reason.clone(),
            });
        }
    };
    check_private_dir(&seal.store)?;
    check_private_dir(&seal.package)?;
    expected.verify(&seal.package)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pkg");
        std::fs::create_dir_all(root.join("lib")).unwrap();
        std::fs::write(root.join("package.json"), b"{}").unwrap();
        std::fs::write(root.join("lib/m.js"), b"export default 1;\n").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("lib/m.js", root.join("m.js")).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            for p in [root.clone(), root.join("lib")] {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            for p in [root.join("package.json"), root.join("lib/m.js")] {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
            }
        }
        (dir, root)
    }

    #[test]
    fn a_recorded_tree_verifies_and_every_change_is_named() {
        let (_dir, root) = tree();
        let files = PackageFiles::scan(&root).unwrap();
        assert_eq!(
            files.entries.keys().collect::<Vec<_>>(),
            ["lib", "lib/m.js", "m.js", "package.json"]
        );
        files.verify(&root).unwrap();
        let json = serde_json::to_value(&files).unwrap();
        assert_eq!(json["entries"]["lib"], serde_json::json!({"type": "dir"}));
        assert_eq!(json["entries"]["m.js"]["target"], "lib/m.js");
        assert!(files.digest().starts_with("sha256-"));
        assert_eq!(files.totals(), (2, 20));

        std::fs::write(root.join("extra.js"), b"x").unwrap();
        let e = files.verify(&root).unwrap_err();
        assert_eq!(e.entry(), Some("extra.js"), "{e}");
        assert!(e.to_string().contains("was added after install"), "{e}");
        std::fs::remove_file(root.join("extra.js")).unwrap();
        std::fs::remove_file(root.join("package.json")).unwrap();
        let e = files.verify(&root).unwrap_err();
        assert!(e.to_string().contains("`package.json` was removed"), "{e}");
    }
}
