//! Safe unpacking of npm tarballs (`.tgz`, every path under one top directory, `package/`).
//!
//! Refused: absolute paths, `..`, a link whose target leaves the package (or any hard link
//! to something that is not an earlier regular file of the package), an entry written
//! through a link, device files and FIFOs, sparse files, duplicate entries, more than
//! [`Limits::max_entries`] entries, and an archive whose decompressed stream exceeds
//! [`Limits::max_unpacked_bytes`] (a gzip bomb stops there, before it is expanded further).
//! Files are written read-only (0444, or 0555 when executable), without set-id bits, and
//! directories 0755 (never writable by group or others); nothing is executed.
//!
//! # Links
//!
//! A symbolic link is checked twice. When its entry comes, its target is checked lexically
//! against the link's own directory. When the whole archive is read, every link is resolved
//! fully against the package's own tree (never the host's file system), as the kernel would
//! resolve it: each component that is itself a link of the package is replaced by that
//! link's target, at most [`MAX_LINK_HOPS`] times. A link whose resolution leaves the package
//! root at any step (`a/b/x -> y/../..` where `a/b/y -> ../..`: each passes the lexical
//! check, but `x` is the package's parent's parent), whatever the order of the entries, or
//! that loops or chains past the bound, refuses the archive.
//!
//! Nothing of a refused archive is kept: what was written is removed (the destination
//! directory too, when this call created it).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
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

/// The most links one resolution may go through (the kernel's bound, `ELOOP`).
pub const MAX_LINK_HOPS: usize = 40;

/// The most steps (path components) resolving all the links of one archive may take: a
/// bound on the work a crafted archive can ask for (real packages hold few links, if any).
pub const MAX_LINK_STEPS: usize = 1 << 18;

/// What the package's own tree holds at a package-relative path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File,
    Link(PathBuf),
}

/// One step of a resolution.
enum Step {
    Root,
    Up,
    Name(OsString),
}

fn steps(path: &Path) -> Vec<Step> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Step::Name(n.to_os_string())),
            Component::ParentDir => Some(Step::Up),
            Component::RootDir | Component::Prefix(_) => Some(Step::Root),
            Component::CurDir => None,
        })
        .collect()
}

/// Why a link of the package does not resolve inside it.
enum Unresolved {
    /// It leaves the package root; `through` is the last link followed, if any.
    Outside { through: Option<PathBuf> },
    /// More than [`MAX_LINK_HOPS`] links (a loop, or a chain too long).
    Loop,
    /// The archive's links together take more than [`MAX_LINK_STEPS`] steps to resolve.
    TooComplex,
}

/// Resolves the link at `link` (package-relative) fully against `tree`: every component
/// that is a link of the package is followed, components that are not in the tree are taken
/// as they are written (the kernel would fail on them, never leave the package through them).
/// Each step spends one of `budget`.
fn resolve_link(
    tree: &HashMap<PathBuf, Node>,
    link: &Path,
    budget: &mut usize,
) -> Result<(), Unresolved> {
    let Some(Node::Link(target)) = tree.get(link) else {
        return Ok(());
    };
    // Where the resolution is, package-relative (the link's parents are real directories:
    // no entry is written through a link).
    let mut here = link.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut pending: VecDeque<Step> = steps(target).into();
    let mut hops = 1usize;
    let mut through: Option<PathBuf> = None;
    while let Some(step) = pending.pop_front() {
        *budget = budget.checked_sub(1).ok_or(Unresolved::TooComplex)?;
        match step {
            Step::Root => return Err(Unresolved::Outside { through }),
            Step::Up => {
                if !here.pop() {
                    return Err(Unresolved::Outside { through });
                }
            }
            Step::Name(name) => {
                here.push(name);
                if let Some(Node::Link(next)) = tree.get(&here) {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(Unresolved::Loop);
                    }
                    through = Some(here.clone());
                    here.pop();
                    for s in steps(next).into_iter().rev() {
                        pending.push_front(s);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every link of the package, resolved fully against the package's tree.
fn check_links(tree: &HashMap<PathBuf, Node>) -> Result<(), AcquireError> {
    let mut links: Vec<(&PathBuf, &PathBuf)> = tree
        .iter()
        .filter_map(|(p, n)| match n {
            Node::Link(target) => Some((p, target)),
            _ => None,
        })
        .collect();
    links.sort();
    let mut budget = MAX_LINK_STEPS;
    for (link, target) in links {
        let entry = link.display().to_string();
        let target = target.display().to_string();
        match resolve_link(tree, link, &mut budget) {
            Ok(()) => {}
            Err(Unresolved::Outside { through: None }) => {
                return Err(UnpackFault::LinkOutside { entry, target }.into());
            }
            Err(Unresolved::Outside {
                through: Some(through),
            }) => {
                return Err(UnpackFault::LinkChainOutside {
                    entry,
                    target,
                    through: through.display().to_string(),
                }
                .into());
            }
            Err(Unresolved::Loop) => {
                return Err(UnpackFault::LinkLoop {
                    entry,
                    target,
                    limit: MAX_LINK_HOPS,
                }
                .into());
            }
            Err(Unresolved::TooComplex) => {
                return Err(UnpackFault::LinksTooComplex {
                    limit: MAX_LINK_STEPS,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// Records `rel`'s parent directories in the tree.
fn parents_are_dirs(tree: &mut HashMap<PathBuf, Node>, rel: &Path) {
    let mut at = PathBuf::new();
    if let Some(parent) = rel.parent() {
        for c in parent.components() {
            at.push(c);
            tree.entry(at.clone()).or_insert(Node::Dir);
        }
    }
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

/// Unpacks gzip-compressed tar `bytes` into `dest` (an empty directory, created when
/// missing). On refusal nothing is kept: `dest` is emptied, and removed when this call
/// created it.
pub fn unpack(bytes: &[u8], dest: &Path, limits: Limits) -> Result<Unpacked, AcquireError> {
    let existed = std::fs::symlink_metadata(dest).is_ok();
    let mut limited = Limited {
        inner: flate2::read::GzDecoder::new(bytes),
        read: 0,
        limit: limits.max_unpacked_bytes,
        exceeded: false,
    };
    let mut result = unpack_stream(&mut limited, dest, limits);
    if limited.exceeded {
        result = Err(UnpackFault::TooLarge {
            limit: limits.max_unpacked_bytes,
        }
        .into());
    }
    if result.is_err() {
        discard(dest, existed);
    }
    result
}

/// Removes what a refused unpack wrote into `dest` (and `dest` itself when it did not
/// exist before). Directories are made writable first: a refusal found after the tree was
/// made read-only still leaves nothing.
fn discard(dest: &Path, existed: bool) {
    if !std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_dir()) {
        return;
    }
    make_writable(dest);
    if !existed {
        let _ = std::fs::remove_dir_all(dest);
        return;
    }
    for entry in std::fs::read_dir(dest).into_iter().flatten().flatten() {
        let path = entry.path();
        let _ = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
    }
}

/// Makes every directory under `dir` (not following links) writable and searchable by its
/// owner, so that the tree can be removed.
pub(crate) fn make_writable(dir: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::symlink_metadata(dir)
            && meta.is_dir()
            && meta.permissions().mode() & 0o700 != 0o700
        {
            let mode = meta.permissions().mode() | 0o700;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
        }
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            make_writable(&entry.path());
        }
    }
}

/// The mode of the unpacked package's directories: readable by all (a sandbox may run the
/// package under another user), writable by none but the owner, whatever the umask. Not
/// 0555: the host removes a package its trust policy refuses with `remove_dir_all`, which a
/// user other than root cannot do in a directory without write permission.
#[cfg(unix)]
const DIR_MODE: u32 = 0o755;

/// Gives every directory of the unpacked tree (and `dest`) [`DIR_MODE`], whatever the umask.
fn settle_dirs(dest: &Path, tree: &HashMap<PathBuf, Node>) -> Result<(), AcquireError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let dirs = std::iter::once(dest.to_path_buf()).chain(
            tree.iter()
                .filter(|(_, n)| **n == Node::Dir)
                .map(|(p, _)| dest.join(p)),
        );
        for dir in dirs {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(DIR_MODE))
                .map_err(io_error)?;
        }
    }
    #[cfg(not(unix))]
    let _ = (dest, tree);
    Ok(())
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
    let mut tree: HashMap<PathBuf, Node> = HashMap::new();
    std::fs::create_dir_all(dest).map_err(io_error)?;
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
        parents_are_dirs(&mut tree, &rel);
        let target = dest.join(&rel);
        let make_parent = |t: &Path| match t.parent() {
            Some(p) => std::fs::create_dir_all(p).map_err(io_error),
            None => Ok(()),
        };
        match kind {
            T::Directory => {
                std::fs::create_dir_all(&target).map_err(io_error)?;
                tree.insert(rel, Node::Dir);
            }
            T::Regular | T::Continuous => {
                make_parent(&target)?;
                let executable = entry.header().mode().unwrap_or(0o644) & 0o111 != 0;
                let mut file = create_file(&target, executable)?;
                out.bytes += io::copy(&mut entry, &mut file).map_err(bad)?;
                out.files += 1;
                tree.insert(rel.clone(), Node::File);
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
                tree.insert(rel, Node::Link(link.into_owned()));
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
                tree.insert(rel.clone(), Node::File);
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
    check_links(&tree)?;
    settle_dirs(dest, &tree)?;
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
