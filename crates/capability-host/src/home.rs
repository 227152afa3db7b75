//! The capability home: where everything the host keeps lives.
//!
//! ```text
//! <home>/                 mode 0700, created on first use by any command
//!   capability.db         receipts, kept plans, audit events, approvals (SQLite, WAL; 0600)
//!   journal/              per-process crash journals (0700; files 0600)
//!   host.key              the ed25519 key that signs approval tokens (0600)
//! ```
//!
//! Resolution order: an explicit path (`--home`), then `$CAP_HOME`, then
//! `$XDG_DATA_HOME/capability`, then `$HOME/.local/share/capability`, then `./.capability`.
//! Several processes may create the same new home at once: directories are created
//! idempotently, the database schema with `IF NOT EXISTS` under SQLite's locks, and the key
//! is linked into place only when none exists (one key wins, every process uses it).

use std::path::{Path, PathBuf};

use crate::HostError;

/// The database file in a home.
pub const DATABASE: &str = "capability.db";
/// The journal directory in a home.
pub const JOURNALS: &str = "journal";
/// The host key file in a home.
pub const HOST_KEY: &str = "host.key";
/// The directory of OpenAPI documents added with `cap openapi add`.
pub const OPENAPI: &str = "openapi";
/// Named secrets (a JSON object), read only when `secrets.read` is granted.
pub const SECRETS: &str = "secrets.json";

/// A capability home that exists (created when it did not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

/// The home directory a command would use (not created).
pub fn resolve(explicit: Option<&Path>) -> PathBuf {
    capability_runtime::home::capability_home(explicit)
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
    /// Opens the home at `root`, creating it (mode 0700) and its journal directory when
    /// missing, and the database file with mode 0600.
    pub fn open(root: &Path) -> Result<Home, HostError> {
        let failed = |e: std::io::Error| HostError::Home {
            path: root.to_path_buf(),
            message: e.to_string(),
        };
        if let Ok(meta) = std::fs::symlink_metadata(root)
            && meta.file_type().is_symlink()
            && std::fs::metadata(root).is_err()
        {
            let target = std::fs::read_link(root).unwrap_or_default();
            return Err(HostError::Home {
                path: root.to_path_buf(),
                message: format!(
                    "it is a symbolic link to `{}`, which does not exist",
                    target.display()
                ),
            });
        }
        if root.exists() && !root.is_dir() {
            return Err(HostError::Home {
                path: root.to_path_buf(),
                message: "it exists and is not a directory".into(),
            });
        }
        create_private_dir(root).map_err(failed)?;
        create_private_dir(&root.join(JOURNALS)).map_err(failed)?;
        ensure_private_file(&root.join(DATABASE)).map_err(failed)?;
        Ok(Home {
            root: root.to_path_buf(),
        })
    }

    /// An existing home, as it is (nothing created or changed): for reading a home this
    /// process cannot write.
    pub fn existing(root: &Path) -> Result<Home, HostError> {
        if !root.join(DATABASE).is_file() {
            return Err(HostError::Home {
                path: root.to_path_buf(),
                message: "it holds no database".into(),
            });
        }
        Ok(Home {
            root: root.to_path_buf(),
        })
    }

    /// Whether this process can create files in the home.
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

    /// [`Home::open`] on the home resolved from `explicit` and the environment.
    pub fn open_default(explicit: Option<&Path>) -> Result<Home, HostError> {
        Home::open(&resolve(explicit))
    }

    /// The home directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `capability.db`.
    pub fn database(&self) -> PathBuf {
        self.root.join(DATABASE)
    }

    /// `journal/`.
    pub fn journals(&self) -> PathBuf {
        self.root.join(JOURNALS)
    }

    /// `host.key`.
    pub fn host_key(&self) -> PathBuf {
        self.root.join(HOST_KEY)
    }

    /// `openapi/`: the OpenAPI documents kept in the home.
    pub fn openapi(&self) -> PathBuf {
        self.root.join(OPENAPI)
    }

    /// `secrets.json`: named secrets for credentials.
    pub fn secrets(&self) -> PathBuf {
        self.root.join(SECRETS)
    }
}
