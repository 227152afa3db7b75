//! The capability home: the one directory where the host keeps everything, and the one type
//! that names every path in it. The host keeps its database, journals and key there; the
//! acquisition code its package store, index cache and pinned keys; executors must never open
//! it to a guest. All of them resolve it the same way, so it lives at the bottom.
//!
//! ```text
//! <home>/                          mode 0700, created on first use by any command
//!   capability.db                  receipts, kept plans, audit events, approvals, tokens
//!                                  (SQLite, WAL; 0600)
//!   journal/                       per-process crash journals (0700; files 0600)
//!   host.key                       the ed25519 key that signs approval tokens (0600)
//!   openapi/                       OpenAPI documents kept with `cap openapi add`
//!   secrets.json                   named secrets, read only when `secrets.read` is granted
//!   packages/                      the package store (0700; refused unless it is this
//!                                  directory itself, this user's, not group/world-writable)
//!   packages/<sha512 hex>/         an installed package, unpacked (files 0444, dirs 0755)
//!   packages/<sha512 hex>.json     its installation record, listing every file and its
//!                                  SHA-256 (checked before every run, see `installed`)
//!   index-cache/                   capability index documents, revalidated with ETag
//!   indexes.json                   the index sources (`{"indexes": [url, ...]}`)
//!   registry-keys/                 npm registry signing keys, pinned per registry
//!   sigstore-trusted-root.json     a replacement Sigstore trusted root (optional)
//!   mcp-pins.json                  pinned MCP upstream tool definitions
//! ```
//!
//! Resolution order ([`resolve`]): an explicit path (`--home`), then `$CAP_HOME`, then
//! `$XDG_DATA_HOME/capability`, then `$HOME/.local/share/capability`, then `./.capability`.
//! Several processes may create the same new home at once: directories are created
//! idempotently and permissions narrowed, never widened.

use std::path::{Path, PathBuf};

/// Why a home could not be opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("capability home `{}`: {reason}", path.display())]
pub struct HomeError {
    path: PathBuf,
    reason: String,
}

impl HomeError {
    fn new(path: &Path, reason: impl Into<String>) -> Self {
        HomeError {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// The home directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What was wrong with it.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// The home directory a command would use (not created): `explicit`, else `$CAP_HOME`, else
/// `$XDG_DATA_HOME/capability`, else `$HOME/.local/share/capability`, else `./.capability`.
pub fn resolve(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(p) = env("CAP_HOME") {
        return p;
    }
    if let Some(p) = env("XDG_DATA_HOME") {
        return p.join("capability");
    }
    if let Some(p) = env("HOME") {
        return p.join(".local").join("share").join("capability");
    }
    PathBuf::from(".capability")
}

/// A capability home that exists (created when it did not), and the name of every path in
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

#[cfg(unix)]
fn create_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => {}
        Err(e) => return Err(e),
    }
    // A directory made before (or by a wider umask) is narrowed too.
    let meta = std::fs::metadata(path)?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn create_private_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)
}

/// Creates `path` as an empty file with mode 0600 unless it exists, and narrows an existing
/// one to 0600.
#[cfg(unix)]
fn ensure_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::metadata(path)?;
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn ensure_private_file(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

impl Home {
    /// The database file.
    pub const DATABASE: &'static str = "capability.db";
    /// The journal directory.
    pub const JOURNALS: &'static str = "journal";
    /// The host key file.
    pub const HOST_KEY: &'static str = "host.key";
    /// The directory of OpenAPI documents.
    pub const OPENAPI: &'static str = "openapi";
    /// The named secrets file.
    pub const SECRETS: &'static str = "secrets.json";
    /// The installed-package store.
    pub const PACKAGES: &'static str = "packages";
    /// The index document cache.
    pub const INDEX_CACHE: &'static str = "index-cache";
    /// The index sources file.
    pub const INDEXES: &'static str = "indexes.json";
    /// The pinned registry keys.
    pub const REGISTRY_KEYS: &'static str = "registry-keys";
    /// A replacement Sigstore trusted root.
    pub const SIGSTORE_TRUSTED_ROOT: &'static str = "sigstore-trusted-root.json";
    /// Pinned MCP upstream tool definitions.
    pub const MCP_PINS: &'static str = "mcp-pins.json";

    /// Opens the home at `root`, creating it (mode 0700) and its journal directory when
    /// missing, and the database file with mode 0600.
    pub fn open(root: &Path) -> Result<Home, HomeError> {
        let failed = |e: std::io::Error| HomeError::new(root, e.to_string());
        if let Ok(meta) = std::fs::symlink_metadata(root)
            && meta.file_type().is_symlink()
            && std::fs::metadata(root).is_err()
        {
            let target = std::fs::read_link(root).unwrap_or_default();
            return Err(HomeError::new(
                root,
                format!(
                    "it is a symbolic link to `{}`, which does not exist",
                    target.display()
                ),
            ));
        }
        if root.exists() && !root.is_dir() {
            return Err(HomeError::new(root, "it exists and is not a directory"));
        }
        create_private_dir(root).map_err(failed)?;
        create_private_dir(&root.join(Home::JOURNALS)).map_err(failed)?;
        ensure_private_file(&root.join(Home::DATABASE)).map_err(failed)?;
        Ok(Home {
            root: root.to_path_buf(),
        })
    }

    /// [`Home::open`] on the home resolved from `explicit` and the environment.
    pub fn open_default(explicit: Option<&Path>) -> Result<Home, HomeError> {
        Home::open(&resolve(explicit))
    }

    /// An existing home, as it is (nothing created or changed): for reading a home this
    /// process cannot write.
    pub fn existing(root: &Path) -> Result<Home, HomeError> {
        if !root.join(Home::DATABASE).is_file() {
            return Err(HomeError::new(root, "it holds no database"));
        }
        Ok(Home {
            root: root.to_path_buf(),
        })
    }

    /// The layout of a home at `root`, whether or not it exists (nothing is created): for
    /// code that only names paths in it.
    pub fn at(root: &Path) -> Home {
        Home {
            root: root.to_path_buf(),
        }
    }

    /// Whether this process can create files in the directory `root`.
    pub fn writable(root: &Path) -> bool {
        let probe = root.join(format!(".write-probe-{}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
        {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
                true
            }
            Err(_) => false,
        }
    }

    /// The home directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `capability.db`.
    pub fn database(&self) -> PathBuf {
        self.root.join(Home::DATABASE)
    }

    /// `journal/`.
    pub fn journals(&self) -> PathBuf {
        self.root.join(Home::JOURNALS)
    }

    /// `host.key`.
    pub fn host_key(&self) -> PathBuf {
        self.root.join(Home::HOST_KEY)
    }

    /// `openapi/`.
    pub fn openapi(&self) -> PathBuf {
        self.root.join(Home::OPENAPI)
    }

    /// `secrets.json`.
    pub fn secrets(&self) -> PathBuf {
        self.root.join(Home::SECRETS)
    }

    /// `packages/`: the installed-package store (the one part of the home a sandbox may
    /// mount, read-only, one package at a time).
    pub fn packages(&self) -> PathBuf {
        self.root.join(Home::PACKAGES)
    }

    /// `packages/<hex>`: an unpacked package.
    pub fn package(&self, sha512_hex: &str) -> PathBuf {
        self.packages().join(sha512_hex)
    }

    /// `packages/<hex>.json`: a package's installation record.
    pub fn package_record(&self, sha512_hex: &str) -> PathBuf {
        self.packages().join(format!("{sha512_hex}.json"))
    }

    /// `index-cache/`.
    pub fn index_cache(&self) -> PathBuf {
        self.root.join(Home::INDEX_CACHE)
    }

    /// `indexes.json`.
    pub fn indexes(&self) -> PathBuf {
        self.root.join(Home::INDEXES)
    }

    /// `registry-keys/`.
    pub fn registry_keys(&self) -> PathBuf {
        self.root.join(Home::REGISTRY_KEYS)
    }

    /// `sigstore-trusted-root.json`.
    pub fn sigstore_trusted_root(&self) -> PathBuf {
        self.root.join(Home::SIGSTORE_TRUSTED_ROOT)
    }

    /// `mcp-pins.json`.
    pub fn mcp_pins(&self) -> PathBuf {
        self.root.join(Home::MCP_PINS)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_new_home_is_private_and_an_existing_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("h");
        let home = Home::open(&root).unwrap();
        assert!(home.database().is_file() && home.journals().is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&root), 0o700);
            assert_eq!(mode(&home.database()), 0o600);
        }
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let e = Home::open(&file).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        assert!(Home::existing(&dir.path().join("none")).is_err());
        assert!(Home::existing(&root).is_ok());
    }

    #[test]
    fn every_path_is_inside_the_home() {
        let home = Home::at(Path::new("/h"));
        for p in [
            home.database(),
            home.journals(),
            home.host_key(),
            home.openapi(),
            home.secrets(),
            home.package("ab"),
            home.package_record("ab"),
            home.index_cache(),
            home.indexes(),
            home.registry_keys(),
            home.sigstore_trusted_root(),
            home.mcp_pins(),
        ] {
            assert!(p.starts_with("/h/"), "{}", p.display());
        }
        assert_eq!(home.package_record("ab"), Path::new("/h/packages/ab.json"));
    }
}
