//! Host paths the guest must never see.
//!
//! The capability home holds `host.key` (the key that signs approval tokens), the receipt
//! database, journals and the audit log: a guest that reads it can forge approvals, one that
//! writes it can plant a key the host later trusts. It is resolved here exactly as
//! `capability-runtime`'s `home.rs` does (`$CAP_HOME`, else `$XDG_DATA_HOME/capability`, else
//! `$HOME/.local/share/capability`, else `./.capability`), without depending on that crate, and
//! protected together with the host's own additions ([`crate::SandboxConfig::protected`],
//! [`protect_host_path`]).
//!
//! Every host tree the sandbox mounts (system directories, `/etc` entries, interpreter
//! prefixes, the package, granted paths) is checked against the protected paths:
//!
//! * a mount source inside a protected path is refused;
//! * a protected path inside a read-only mount is masked (an empty read-only tmpfs, or
//!   `/dev/null` on a `nodev` bind for a file, is mounted over it) when it exists, and refused
//!   when it does not exist yet (it could appear during the run, unmasked);
//! * a protected path inside a writable mount is refused (the guest could rename its parent
//!   away from the mask and plant a new home).
//!
//! Whole home directories are never mounted: a package root or grant that is `/`, `/root`,
//! `/home`, a directory directly under `/home`, `$HOME` (or one of its ancestors) or the
//! effective user's passwd home directory — or that contains one of them — is refused.

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crate::error::SandboxError;

static REGISTERED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static EXPOSED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Adds a directory inside a protected path whose subtrees may be mounted **read-only**
/// (never writable), e.g. the home's content-addressed package store (`<home>/packages`),
/// so that an installed package can be the package root of a run. Nothing else of the
/// protected path becomes visible.
pub fn expose_read_only(path: impl Into<PathBuf>) {
    let path = resolve(&path.into());
    let mut list = EXPOSED.lock().unwrap_or_else(|e| e.into_inner());
    if !list.contains(&path) {
        list.push(path);
    }
}

fn exposed(source: &Path) -> bool {
    let list = EXPOSED.lock().map(|l| l.clone()).unwrap_or_default();
    list.iter()
        .any(|e| source.starts_with(e) && source != e.as_path())
}

/// Adds a host path that no process sandbox in this process may expose to a guest, e.g. an
/// explicit capability home (`cap --home DIR`). The default capability home is always
/// protected; see [`crate::SandboxConfig::protected`] for a per-sandbox list.
pub fn protect_host_path(path: impl Into<PathBuf>) {
    let path = path.into();
    let mut list = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    if !list.contains(&path) {
        list.push(path);
    }
}

/// The capability home, resolved as the host resolves it.
pub fn default_capability_home() -> PathBuf {
    capability_exec::home::resolve(None)
}

/// `p` made absolute and with symlinks resolved as far as it exists: the canonical path of its
/// deepest existing ancestor, followed by the components that do not exist (yet).
pub(crate) fn resolve(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| PathBuf::from("/").join(p))
    };
    // Lexically drop `.` and fold `..` so the split below sees plain names.
    let mut clean = PathBuf::from("/");
    for c in abs.components() {
        match c {
            Component::Normal(n) => clean.push(n),
            Component::ParentDir => {
                clean.pop();
            }
            _ => {}
        }
    }
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let mut cur = clean.clone();
    loop {
        if let Ok(real) = cur.canonicalize() {
            let mut out = real;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out;
        }
        match cur.file_name() {
            Some(name) => {
                rest.push(name.to_os_string());
                cur.pop();
            }
            None => return clean,
        }
    }
}

/// One protected host path.
#[derive(Clone, Debug)]
pub(crate) struct Protected {
    /// Resolved host path (see [`resolve`]).
    pub path: PathBuf,
    pub exists: bool,
    pub is_dir: bool,
    /// Why it is protected (`capability home`, `protected by the host`).
    pub why: &'static str,
}

/// The capability home plus the configured and registered paths.
pub(crate) fn protected_paths(configured: &[PathBuf]) -> Vec<Protected> {
    let registered = REGISTERED.lock().map(|l| l.clone()).unwrap_or_default();
    let mut out: Vec<Protected> = Vec::new();
    let home = std::iter::once((default_capability_home(), "capability home"));
    let others = configured
        .iter()
        .chain(registered.iter())
        .map(|p| (p.clone(), "protected by the host"));
    for (p, why) in home.chain(others) {
        let path = resolve(&p);
        if out.iter().any(|o| o.path == path) {
            continue;
        }
        let meta = std::fs::metadata(&path).ok();
        out.push(Protected {
            exists: meta.is_some(),
            is_dir: meta.as_ref().is_none_or(|m| m.is_dir()),
            path,
            why,
        });
    }
    out
}

/// Home directories that are never mounted as a whole.
fn user_homes() -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = ["/", "/root", "/home"].iter().map(PathBuf::from).collect();
    if let Ok(entries) = std::fs::read_dir("/home") {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                homes.push(e.path());
            }
        }
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        homes.push(PathBuf::from(h));
    }
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
        for line in passwd.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() >= 6 && f[2].parse::<u32>() == Ok(euid) && f[5].starts_with('/') {
                homes.push(PathBuf::from(f[5]));
            }
        }
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for h in homes {
        for p in [resolve(&h), h] {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Refuses a package root or grant that is (or contains) `/` or a user's whole home directory.
pub(crate) fn refuse_whole_home(path: &Path, what: &str) -> Result<(), SandboxError> {
    for home in user_homes() {
        if home.starts_with(path) {
            let detail = if home == path {
                format!(
                    "refusing to mount {what} {}: it is a whole home directory or the root",
                    path.display()
                )
            } else {
                format!(
                    "refusing to mount {what} {}: it contains the home directory {}",
                    path.display(),
                    home.display()
                )
            };
            return Err(SandboxError::Invalid { detail });
        }
    }
    Ok(())
}

/// What mounting `source` (resolved host path) at `inside` means for the protected paths:
/// the masks to mount (inside path, is_dir, protected host path, why), or a refusal.
pub(crate) fn masks_for(
    source: &Path,
    inside: &Path,
    writable: bool,
    protected: &[Protected],
) -> Result<Vec<(PathBuf, bool, PathBuf, &'static str)>, SandboxError> {
    let mut masks = Vec::new();
    for p in protected {
        if source.starts_with(&p.path) {
            if !writable && exposed(source) {
                continue;
            }
            return Err(SandboxError::Invalid {
                detail: format!(
                    "refusing to mount {}: it lies inside {} ({}), which the guest must never see",
                    source.display(),
                    p.path.display(),
                    p.why
                ),
            });
        }
        let Ok(rel) = p.path.strip_prefix(source) else {
            continue;
        };
        if writable {
            return Err(SandboxError::Invalid {
                detail: format!(
                    "refusing to mount {} writable: it contains {} ({})",
                    source.display(),
                    p.path.display(),
                    p.why
                ),
            });
        }
        if !p.exists {
            return Err(SandboxError::Invalid {
                detail: format!(
                    "refusing to mount {}: it would contain {} ({}), which does not exist yet and \
                     so cannot be masked; create it first or choose another location",
                    source.display(),
                    p.path.display(),
                    p.why
                ),
            });
        }
        masks.push((inside.join(rel), p.is_dir, p.path.clone(), p.why));
    }
    Ok(masks)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn prot(path: &str, exists: bool) -> Protected {
        Protected {
            path: PathBuf::from(path),
            exists,
            is_dir: true,
            why: "capability home",
        }
    }

    #[test]
    fn masks_and_refusals() {
        let p = [prot("/data/pkg/.capability", true)];
        let m = masks_for(Path::new("/data/pkg"), Path::new("/package"), false, &p).unwrap();
        assert_eq!(m[0].0, PathBuf::from("/package/.capability"));
        assert!(masks_for(Path::new("/data/pkg"), Path::new("/package"), true, &p).is_err());
        assert!(
            masks_for(
                Path::new("/data/pkg/.capability/db"),
                Path::new("/x"),
                false,
                &p
            )
            .is_err()
        );
        assert!(
            masks_for(Path::new("/data/other"), Path::new("/x"), true, &p)
                .unwrap()
                .is_empty()
        );
        let missing = [prot("/data/pkg/.capability", false)];
        let e = masks_for(Path::new("/data"), Path::new("/data"), false, &missing).unwrap_err();
        assert!(e.to_string().contains("/data/pkg/.capability"), "{e}");
    }

    #[test]
    fn resolve_keeps_missing_components() {
        let dir = std::env::temp_dir().canonicalize().unwrap();
        let p = resolve(&dir.join("does-not-exist-4711/./a/../b"));
        assert_eq!(p, dir.join("does-not-exist-4711/b"));
    }

    #[test]
    fn whole_homes_are_refused() {
        assert!(refuse_whole_home(Path::new("/"), "grant").is_err());
        assert!(refuse_whole_home(Path::new("/root"), "grant").is_err());
        assert!(refuse_whole_home(Path::new("/home"), "grant").is_err());
        assert!(refuse_whole_home(Path::new("/usr/share"), "grant").is_ok());
    }
}
