//! Packages installed with `cap install`: the content-addressed store of the home and the
//! [`Installed`] source that registers their capabilities (run only behind an isolation
//! boundary, never in process) with their acquisition provenance.
//!
//! ```text
//! <home>/packages/<sha512 hex>/        the unpacked tarball (read-only files)
//! <home>/packages/<sha512 hex>.json    its record: package, integrity, registry, tarball,
//!                                      index, capabilities, installedAt
//! ```
//!
//! The store directories are the only part of the home a sandbox may mount (read-only, one
//! package at a time; see `capability_sandbox::expose_read_only`).

use std::path::PathBuf;

use capability_core::index::IndexEntry;
use capability_core::{CapabilityError, ErrorCode};
use capability_runtime::capability::Capability;
use serde_json::Value;

use crate::Home;
use crate::sources::{CapabilitySource, PackageFile};

/// The store directory in a home.
pub const PACKAGES: &str = "packages";
/// The version of installed-package records.
pub const RECORD_VERSION: &str = "1";

/// `<home>/packages/<hex>`.
pub fn store_path(home: &Home, hex: &str) -> PathBuf {
    home.root().join(PACKAGES).join(hex)
}

/// `<home>/packages/<hex>.json`.
pub fn record_path(home: &Home, hex: &str) -> PathBuf {
    home.root().join(PACKAGES).join(format!("{hex}.json"))
}

/// One installed package.
#[derive(Clone, Debug)]
pub struct InstalledPackage {
    pub record: Value,
    pub package: PackageFile,
}

/// Every package installed in a home, the latest installation of a capability id winning.
#[derive(Clone, Debug, Default)]
pub struct Installed {
    packages: Vec<InstalledPackage>,
}

fn is_hex_name(s: &str) -> bool {
    s.len() == 128 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Installed {
    /// Reads the records of `<home>/packages` (a record that cannot be read, or whose store
    /// directory is missing, is skipped: it names nothing that can run).
    pub fn from_home(home: &Home) -> Installed {
        let dir = home.root().join(PACKAGES);
        let mut packages = Vec::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let Some(hex) = name.strip_suffix(".json").filter(|h| is_hex_name(h)) else {
                continue;
            };
            let Ok(bytes) = std::fs::read(entry.path()) else {
                continue;
            };
            let Ok(record) = capability_core::json::parse(&bytes) else {
                continue;
            };
            if record.get("recordVersion").and_then(Value::as_str) != Some(RECORD_VERSION)
                || record.get("store").and_then(Value::as_str) != Some(hex)
            {
                continue;
            }
            let Ok(package) = PackageFile::read(&store_path(home, hex).join("package.json")) else {
                continue;
            };
            packages.push(InstalledPackage { record, package });
        }
        let at = |p: &InstalledPackage| {
            p.record
                .get("installedAt")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        packages.sort_by_key(at);
        Installed { packages }
    }

    /// The installed packages, oldest installation first.
    pub fn packages(&self) -> &[InstalledPackage] {
        &self.packages
    }

    /// `(id, package)` pairs, one per id: the latest installation.
    fn exports(&self) -> Vec<(String, &InstalledPackage)> {
        let mut out: Vec<(String, &InstalledPackage)> = Vec::new();
        for p in &self.packages {
            for id in p.record["capabilities"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                out.retain(|(i, _)| i != id);
                out.push((id.to_string(), p));
            }
        }
        out
    }

    /// Whether nothing is installed.
    pub fn is_empty(&self) -> bool {
        self.packages.is_empty()
    }
}

impl CapabilitySource for Installed {
    fn name(&self) -> String {
        "installed packages".into()
    }

    fn capabilities(&self) -> Result<Vec<Capability>, CapabilityError> {
        self.exports()
            .into_iter()
            .map(|(id, p)| {
                let capability = p.package.capability(&id)?;
                let mut provenance = capability.provenance().cloned().unwrap_or(Value::Null);
                let r = &p.record;
                for (key, value) in [
                    ("packageIntegrity", r.pointer("/package/integrity")),
                    ("registry", r.get("registry")),
                    ("tarball", r.get("tarball")),
                    ("index", r.get("index")),
                    ("signatureKeyId", r.get("signatureKeyId")),
                    (
                        "registrySignatureVerified",
                        r.get("registrySignatureVerified"),
                    ),
                    ("attestation", r.get("attestation")),
                    ("provenanceVerified", r.get("provenanceVerified")),
                    ("repository", r.get("repository")),
                    ("commit", r.get("commit")),
                    ("provenanceAttestation", r.get("provenanceAttestation")),
                    ("installedAt", r.get("installedAt")),
                ] {
                    if let Some(v) = value.filter(|v| !v.is_null()) {
                        provenance[key] = v.clone();
                    }
                }
                Ok(capability.with_provenance(provenance))
            })
            .collect::<Result<Vec<_>, CapabilityError>>()
            .map_err(|e| {
                CapabilityError::new(
                    ErrorCode::InvalidPackageDeclaration,
                    format!("installed package: {}", e.message),
                )
            })
    }

    fn index_entries(&self) -> Vec<IndexEntry> {
        self.exports()
            .into_iter()
            .filter_map(|(id, p)| {
                let descriptor = p.package.exports.get(&id)?;
                Some(IndexEntry {
                    package_name: p.package.name.clone(),
                    package_version: p.package.version.clone(),
                    package_integrity: p
                        .record
                        .pointer("/package/integrity")
                        .and_then(Value::as_str)
                        .map(String::from),
                    source: "npm".into(),
                    repository: None,
                    manifest: serde_json::from_value(descriptor.get("manifest")?.clone()).ok()?,
                    module: descriptor.get("module")?.as_str()?.to_string(),
                    integrity: descriptor
                        .get("integrity")
                        .and_then(Value::as_str)
                        .map(String::from),
                })
            })
            .collect()
    }
}
