//! Where a package module is on the host: its path stays inside the package root, before any
//! executor reads it. Every executor of package modules resolves them here.

use std::path::{Component, Path, PathBuf};

use capability_core::{CapabilityError, ErrorCode};

use crate::hook::HookError;
use crate::installed::PackageCheckError;
use crate::integrity::IntegrityError;

/// A package module whose path was checked: both paths canonical, the file inside the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModulePath {
    /// The package root.
    pub package_root: PathBuf,
    /// The module file (a regular file inside `package_root`).
    pub file: PathBuf,
}

/// Why a package module was refused before anything read it (or while its bytes were read).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleError {
    /// The module path leaves the package root (or is malformed).
    #[error("module path {module:?} escapes the package root: {reason}")]
    Escape { module: String, reason: String },
    /// Nothing, or not a regular file, at the module path.
    #[error("module {path:?} not found or not a regular file")]
    NotFound { path: PathBuf },
    /// The package root (or the module) could not be examined.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The module's bytes: an integrity mismatch, an unsupported integrity string, a file
    /// above the size limit, or a read failure.
    #[error(transparent)]
    Bytes(#[from] IntegrityError),
    /// An installed package whose store or files are not what was installed (see
    /// [`crate::installed`]): nothing of it is read or run.
    #[error("{0}; nothing of the package is run")]
    Installed(#[from] PackageCheckError),
}

impl ModuleError {
    /// What the capability "threw", the same for every executor: a path escape, an integrity
    /// failure or an oversized module is `INVALID_PACKAGE_DECLARATION`; a missing or
    /// unreadable file is a named error.
    pub fn to_hook_error(&self, capability: &str) -> HookError {
        let invalid = |message: String| {
            HookError::Capability(CapabilityError::new(
                ErrorCode::InvalidPackageDeclaration,
                message,
            ))
        };
        match self {
            ModuleError::Escape { .. } => {
                invalid(format!("Export {capability} escapes package root: {self}"))
            }
            ModuleError::Bytes(
                IntegrityError::Mismatch { .. } | IntegrityError::Unsupported { .. },
            ) => HookError::Capability(
                CapabilityError::new(
                    ErrorCode::InvalidPackageDeclaration,
                    format!("Integrity check failed for {capability}"),
                )
                .with_details(serde_json::json!({"reason": self.to_string()})),
            ),
            ModuleError::Bytes(IntegrityError::TooLarge { .. }) => {
                invalid(format!("Module of {capability} refused: {self}"))
            }
            ModuleError::Installed(_) => {
                invalid(format!("Installed package of {capability} refused: {self}"))
            }
            ModuleError::NotFound { .. } => HookError::named("ModuleNotFound", self.to_string()),
            ModuleError::Io { .. } | ModuleError::Bytes(_) => {
                HookError::named("ModuleIo", self.to_string())
            }
        }
    }
}

/// Resolves `module` (a package-relative path such as `./dist/add.js`) inside
/// `package_root`.
///
/// Refuses: a path not starting with `./`, an absolute path, any `..` component, a NUL byte,
/// the root itself, a path whose symlinks lead outside the package root, and anything but a
/// regular file. When `package_root` is an installed package sealed by the code that
/// registered it ([`crate::installed::seal_installed`]), its store, its directory and its
/// whole tree are first checked against what was installed
/// ([`crate::installed::check_installed`]).
pub fn resolve_module_path(package_root: &Path, module: &str) -> Result<ModulePath, ModuleError> {
    let escape = |reason: &str| ModuleError::Escape {
        module: module.to_string(),
        reason: reason.to_string(),
    };
    if module.contains('\0') {
        return Err(escape("it contains a NUL byte"));
    }
    let rest = module
        .strip_prefix("./")
        .ok_or_else(|| escape("it must start with ./"))?;
    let rel = Path::new(rest);
    for component in rel.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(escape("it contains a `..` component")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(escape("it is absolute"));
            }
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(escape("it names the package root itself"));
    }
    crate::installed::check_installed(package_root)?;
    let root = package_root
        .canonicalize()
        .map_err(|source| ModuleError::Io {
            context: format!("package root {package_root:?}"),
            source,
        })?;
    let joined = root.join(rel);
    let real = match joined.canonicalize() {
        Ok(real) => real,
        Err(_) => {
            // A dangling symlink or a missing file. Tell them apart for a precise error.
            if std::fs::symlink_metadata(&joined).is_ok() {
                return Err(escape(
                    "it is a symlink that does not resolve inside the package",
                ));
            }
            return Err(ModuleError::NotFound { path: joined });
        }
    };
    if !real.starts_with(&root) {
        return Err(escape(&format!(
            "it resolves to {} outside the package root",
            real.display()
        )));
    }
    let meta = std::fs::metadata(&real).map_err(|source| ModuleError::Io {
        context: format!("{real:?}"),
        source,
    })?;
    if !meta.is_file() {
        return Err(ModuleError::NotFound { path: real });
    }
    Ok(ModulePath {
        package_root: root,
        file: real,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn module_paths_stay_inside_the_package() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("dist")).unwrap();
        std::fs::write(dir.path().join("dist/m.js"), b"x").unwrap();
        let ok = resolve_module_path(dir.path(), "./dist/m.js").unwrap();
        assert_eq!(ok.file, ok.package_root.join("dist/m.js"));
        for (module, reason) in [
            ("dist/m.js", "it must start with ./"),
            ("./../m.js", "it contains a `..` component"),
            ("./", "it names the package root itself"),
            ("./a\0b", "it contains a NUL byte"),
        ] {
            match resolve_module_path(dir.path(), module) {
                Err(ModuleError::Escape { reason: r, .. }) => assert_eq!(r, reason, "{module}"),
                other => panic!("{module}: {other:?}"),
            }
        }
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("out.js")).unwrap();
        assert!(matches!(
            resolve_module_path(dir.path(), "./out.js"),
            Err(ModuleError::Escape { .. })
        ));
        assert!(matches!(
            resolve_module_path(dir.path(), "./dist"),
            Err(ModuleError::NotFound { .. })
        ));
        assert!(matches!(
            resolve_module_path(dir.path(), "./missing.js"),
            Err(ModuleError::NotFound { .. })
        ));
    }

    #[test]
    fn module_errors_read_the_same_for_every_executor() {
        let escape = ModuleError::Escape {
            module: "./../x".into(),
            reason: "it contains a `..` component".into(),
        };
        assert_eq!(
            escape.to_hook_error("demo/x").message(),
            "Export demo/x escapes package root: module path \"./../x\" escapes the package \
             root: it contains a `..` component"
        );
        let mismatch = ModuleError::Bytes(IntegrityError::Mismatch {
            expected: "sha256-a".into(),
            actual: "sha256-b".into(),
        });
        let HookError::Capability(e) = mismatch.to_hook_error("demo/x") else {
            panic!("a capability error");
        };
        assert_eq!(e.code, ErrorCode::InvalidPackageDeclaration);
        assert_eq!(e.message, "Integrity check failed for demo/x");
    }
}
