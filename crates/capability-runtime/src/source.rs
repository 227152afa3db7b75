//! Capability sources: where a host's capabilities come from.
//!
//! A [`CapabilitySource`] hands the host executable [`Capability`]s to register and,
//! optionally, index entries for discovery (`find`, `info`); a source of many capabilities
//! may name them without building them, to be built one at a time on first use
//! ([`CapabilitySource::deferred_ids`]). This crate has the built-ins
//! ([`Builtins`]) and local packages ([`LocalPackage`], read from a [`PackageFile`] without
//! importing anything); the acquisition crate has installed packages, and the host its
//! OpenAPI documents and MCP upstreams.

use std::path::{Path, PathBuf};

use capability_core::index::{IndexEntry, index_entries};
use capability_core::validate;
use capability_core::{CapabilityError, ErrorCode};
use serde_json::{Map, Value, json};

use crate::capability::{Capability, ModuleSource};

/// Where capabilities come from.
pub trait CapabilitySource: Send + Sync {
    /// A short name for errors (`builtins`, `package /path/package.json`).
    fn name(&self) -> String;

    /// The capabilities to register.
    fn capabilities(&self) -> Result<Vec<Capability>, CapabilityError>;

    /// Index entries for discovery; none by default.
    fn index_entries(&self) -> Vec<IndexEntry> {
        Vec::new()
    }

    /// The ids of this source's capabilities when it can name them without building them
    /// (cheaply: a host asks when it opens); `None`, the default, when it cannot. A host
    /// registers the capabilities of a source that names them *deferred* (see
    /// [`CapabilityRuntime::register_deferred`](crate::CapabilityRuntime::register_deferred)
    /// and [`crate::registry`]):
    ///
    /// * opening builds none of them, and never calls [`CapabilitySource::capabilities`];
    /// * [`CapabilitySource::capability`] builds one the first time it is looked up (by id,
    ///   or when every capability is listed), at most once per id; an error then is that
    ///   capability's error (the others are unaffected);
    /// * [`CapabilitySource::index_entries`] is asked for when discovery first needs the
    ///   entries, not when the host opens;
    /// * its capabilities must run natively or behind their own executor
    ///   ([`Capability::with_executor`]): a host builds the isolating executor of package
    ///   modules only for the capabilities it registers at once.
    fn deferred_ids(&self) -> Option<Vec<String>> {
        None
    }

    /// The capability `id` (one of [`CapabilitySource::deferred_ids`]), built now. By
    /// default the one of [`CapabilitySource::capabilities`] with that id (`NOT_FOUND` when
    /// there is none).
    fn capability(&self, id: &str) -> Result<Capability, CapabilityError> {
        self.capabilities()?
            .into_iter()
            .find(|c| c.id() == id)
            .ok_or_else(|| {
                CapabilityError::new(
                    ErrorCode::NotFound,
                    format!("{} has no capability {id}", self.name()),
                )
            })
    }
}

/// The 12 built-in capabilities (trusted host code, run in process) and the embedded index
/// that describes them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Builtins;

impl CapabilitySource for Builtins {
    fn name(&self) -> String {
        "builtins".into()
    }

    fn capabilities(&self) -> Result<Vec<Capability>, CapabilityError> {
        crate::defaults::builtin_capabilities()
    }

    fn index_entries(&self) -> Vec<IndexEntry> {
        index_entries(&crate::defaults::default_index())
    }
}

/// A `package.json` with a capability declaration, read without importing anything.
#[derive(Clone, Debug)]
pub struct PackageFile {
    pub path: PathBuf,
    pub doc: Value,
    pub name: String,
    pub version: String,
    pub exports: Map<String, Value>,
}

impl PackageFile {
    /// Reads a package.json and checks its capability declaration.
    pub fn read(path: &Path) -> Result<PackageFile, CapabilityError> {
        let invalid = |m: String| CapabilityError::new(ErrorCode::InvalidPackageDeclaration, m);
        let bytes = std::fs::read(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        let doc = capability_core::json::parse(&bytes)
            .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
        let text = |k: &str| {
            doc.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (name, version) = (text("name"), text("version"));
        let Some(declaration) = doc.get("capability") else {
            return Err(invalid(format!(
                "{} has no capability declaration",
                path.display()
            )));
        };
        let issues = validate::validate_package_declaration(declaration);
        if !issues.is_empty() {
            return Err(invalid(format!(
                "INVALID_PACKAGE_DECLARATION: {}: {}",
                path.display(),
                issues.join("; ")
            )));
        }
        let exports = declaration
            .get("exports")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        Ok(PackageFile {
            path: path.to_path_buf(),
            doc,
            name,
            version,
            exports,
        })
    }

    /// The package's export `id` as a module-backed capability (it runs only behind an
    /// isolation boundary), with its provenance.
    pub fn capability(&self, id: &str) -> Result<Capability, CapabilityError> {
        let export = self.exports.get(id).ok_or_else(|| {
            CapabilityError::new(
                ErrorCode::NotFound,
                format!("Package does not export capability: {id}"),
            )
        })?;
        let Value::Object(descriptor) = export else {
            return Err(CapabilityError::new(
                ErrorCode::InvalidPackageDeclaration,
                format!(
                    "Export {id} is a legacy module path: it has no inert manifest and cannot be acquired safely"
                ),
            ));
        };
        let root = std::path::absolute(&self.path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("."));
        let source = ModuleSource {
            package_root: root.clone(),
            module: descriptor
                .get("module")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            integrity: descriptor
                .get("integrity")
                .and_then(Value::as_str)
                .map(String::from),
        };
        let manifest = descriptor.get("manifest").cloned().unwrap_or(Value::Null);
        let mut provenance = json!({
            "source": format!("file://{}", root.join(source.module.trim_start_matches("./")).display()),
            "packageRoot": root.display().to_string(),
            "packageName": self.name,
            "packageVersion": self.version,
        });
        if let Some(repo) = self.doc.get("repository") {
            let repo = repo.get("url").unwrap_or(repo);
            if repo.is_string() {
                provenance["repository"] = repo.clone();
            }
        }
        if let Some(i) = &source.integrity {
            provenance["integrity"] = json!(i);
        }
        Ok(Capability::module(&manifest, source)?.with_provenance(provenance))
    }
}

/// Capabilities exported by a local `package.json` (all of its descriptor exports, or the
/// ones named).
#[derive(Clone, Debug)]
pub struct LocalPackage {
    package: PackageFile,
    only: Option<Vec<String>>,
}

impl LocalPackage {
    /// Every descriptor export of the package.
    pub fn open(path: &Path) -> Result<LocalPackage, CapabilityError> {
        Ok(LocalPackage {
            package: PackageFile::read(path)?,
            only: None,
        })
    }

    /// Only the export `id` (`NOT_FOUND` when the package does not export it).
    pub fn export(path: &Path, id: &str) -> Result<LocalPackage, CapabilityError> {
        let package = PackageFile::read(path)?;
        package.capability(id)?;
        Ok(LocalPackage {
            package,
            only: Some(vec![id.to_string()]),
        })
    }

    /// The package file.
    pub fn package(&self) -> &PackageFile {
        &self.package
    }
}

impl CapabilitySource for LocalPackage {
    fn name(&self) -> String {
        format!("package {}", self.package.path.display())
    }

    fn capabilities(&self) -> Result<Vec<Capability>, CapabilityError> {
        match &self.only {
            Some(ids) => ids.iter().map(|id| self.package.capability(id)).collect(),
            None => self
                .package
                .exports
                .iter()
                .filter(|(_, e)| e.get("manifest").is_some())
                .map(|(id, _)| self.package.capability(id))
                .collect(),
        }
    }
}
