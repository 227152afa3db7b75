//! Safe unpacking of npm tarballs (`.tgz`, every path under one top directory, `package/`).
//!
//! Refused: absolute paths, `..`, a link whose target leaves the package (or any hard link
//! to something that is not an earlier regular file of the package), an entry written
//! through a link, device files and FIFOs, sparse files, duplicate entries, more than
//! [`Limits::max_entries`] entries, and an archive whose decompressed stream exceeds
//! [`Limits::max_unpacked_bytes`] (a gzip bomb stops there, before it is expanded further).
//! Files are written read-only, without set-id bits; nothing is executed.

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use crate::AcquireError;
use crate::error::{IoFault, UnpackFault};

/// Bounds on what an archive may expand to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_unpacked_bytes: u64,
    pub max_entries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_unpacked_bytes: 256 << 20,
            max_entries: 20_000,
        }
    }
}

/// What was unpacked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unpacked {
    pub files: usize,
    pub bytes: u64,
}

struct Limited<R> {
    inner: R,
    read: u64,
    limit: u64,
    exceeded: bool,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.limit {
            self.exceeded = true;
            return Err(io::Error::other("expansion limit"));
        }
        Ok(n)
    }
}

/// The package-relative path of an archive path: its first component (`package/`) dropped;
/// `None` for the top directory itself.
fn relative(raw: &Path) -> Result<Option<PathBuf>, AcquireError> {
    let shown = raw.display().to_string();
    let mut parts = Vec::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => parts.push(n.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(UnpackFault::ParentDir { entry: shown }.into());
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(UnpackFault::Absolute { entry: shown }.into());
            }
        }
    }
    if parts.len() <= 1 {
        return Ok(None);
    }
    Ok(Some(parts[1..].iter().collect()))
}

/// Whether a symlink at `link` (package-relative) pointing to `target` stays in the package.
fn link_inside(link: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: Vec<&std::ffi::OsStr> = Vec::new();
    for c in link.parent().into_iter().flat_map(Path::components) {
        if let Component::Normal(n) = c {
            depth.push(n);
        }
    }
    for c in target.components() {
        match c {
            Component::Normal(n) => depth.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Refuses an entry whose path goes through a link already written.
fn no_link_ancestors(dest: &Path, rel: &Path) -> Result<(), AcquireError> {
    let mut at = dest.to_path_buf();
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            at.push(c);
            if let Ok(meta) = std::fs::symlink_metadata(&at)
                && !meta.is_dir()
            {
                return Err(UnpackFault::ThroughLink {
                    entry: rel.display().to_string(),
                }
                .into());
            }
        }
    }
    Ok(())
}

fn io_error(e: io::Error) -> AcquireError {
    IoFault::Unpacking {
        reason: e.to_string(),
    }
    .into()
}

/// Unpacks gzip-compressed tar `bytes` into `dest` (an empty directory).
pub fn unpack(bytes: &[u8], dest: &Path, limits: Limits) -> Result<Unpacked, AcquireError> {
    let mut limited = Limited {
        inner: flate2::read::GzDecoder::new(bytes),
        read: 0,
        limit: limits.max_unpacked_bytes,
        exceeded: false,
    };
    let result = unpack_stream(&mut limited, dest, limits);
    if limited.exceeded {
        return Err(UnpackFault::TooLarge {
            limit: limits.max_unpacked_bytes,
        }
        .into());
    }
    result
}

fn unpack_stream(reader: impl Read, dest: &Path, limits: Limits) -> Result<Unpacked, AcquireError> {
    use tar::EntryType as T;
    let bad = |e: io::Error| {
        AcquireError::from(UnpackFault::Unreadable {
            reason: e.to_string(),
        })
    };
    let mut archive = tar::Archive::new(reader);
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut files: HashSet<PathBuf> = HashSet::new();
    let mut out = Unpacked::default();
    let mut count = 0usize;
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        count += 1;
        if count > limits.max_entries {
            return Err(UnpackFault::TooManyEntries {
                limit: limits.max_entries,
            }
            .into());
        }
        let kind = entry.header().entry_type();
        if matches!(kind, T::XGlobalHeader) {
            continue;
        }
        let raw = entry.path().map_err(bad)?.into_owned();
        let Some(rel) = relative(&raw)? else {
            continue;
        };
        let shown = rel.display().to_string();
        if !seen.insert(rel.clone()) {
            return Err(UnpackFault::Duplicate { entry: shown }.into());
        }
        no_link_ancestors(dest, &rel)?;
        let target = dest.join(&rel);
        let make_parent = |t: &Path| match t.parent() {
            Some(p) => std::fs::create_dir_all(p).map_err(io_error),
            None => Ok(()),
        };
        match kind {
            T::Directory => std::fs::create_dir_all(&target).map_err(io_error)?,
            T::Regular | T::Continuous => {
                make_parent(&target)?;
                let executable = entry.header().mode().unwrap_or(0o644) & 0o111 != 0;
                let mut file = create_file(&target, executable)?;
                out.bytes += io::copy(&mut entry, &mut file).map_err(bad)?;
                out.files += 1;
                files.insert(rel);
            }
            T::Symlink => {
                let link = entry.link_name().map_err(bad)?.unwrap_or_default();
                if !link_inside(&rel, &link) {
                    return Err(UnpackFault::LinkOutside {
                        entry: shown,
                        target: link.display().to_string(),
                    }
                    .into());
                }
                make_parent(&target)?;
                symlink(&link, &target)?;
            }
            T::Link => {
                let link = entry.link_name().map_err(bad)?.unwrap_or_default();
                let source = relative(&link)?;
                let Some(source) = source.filter(|s| files.contains(s)) else {
                    return Err(UnpackFault::HardLinkOutside {
                        entry: shown,
                        target: link.display().to_string(),
                    }
                    .into());
                };
                make_parent(&target)?;
                std::fs::copy(dest.join(&source), &target).map_err(io_error)?;
                out.files += 1;
                files.insert(rel);
            }
            T::Char | T::Block => {
                return Err(UnpackFault::Device { entry: shown }.into());
            }
            T::Fifo => return Err(UnpackFault::Fifo { entry: shown }.into()),
            other => {
                return Err(UnpackFault::Unsupported {
                    entry: shown,
                    kind: format!("{other:?}"),
                }
                .into());
            }
        }
    }
    Ok(out)
}

#[cfg(unix)]
fn create_file(path: &Path, executable: bool) -> Result<std::fs::File, AcquireError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if executable { 0o555 } else { 0o444 })
        .open(path)
        .map_err(io_error)
}

#[cfg(not(unix))]
fn create_file(path: &Path, _executable: bool) -> Result<std::fs::File, AcquireError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error)
}

#[cfg(unix)]
fn symlink(link: &Path, at: &Path) -> Result<(), AcquireError> {
    std::os::unix::fs::symlink(link, at).map_err(io_error)
}

#[cfg(not(unix))]
fn symlink(_link: &Path, at: &Path) -> Result<(), AcquireError> {
    Err(UnpackFault::NoLinks {
        entry: at.display().to_string(),
    }
    .into())
}
