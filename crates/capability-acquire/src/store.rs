//! The installed-package store of a home, and the [`Installed`] source that registers its
//! capabilities (run only behind an isolation boundary, never in process) with their
//! acquisition provenance.
//!
//! ```text
//! <home>/packages/                     the store: 0700, the home's own directory
//! <home>/packages/<sha512 hex>/        the unpacked tarball (files 0444/0555, dirs 0755)
//! <home>/packages/<sha512 hex>.json    its InstallRecord, with every file of the package
//! ```
//!
//! The store directories are the only part of the home a sandbox may mount (read-only, one
//! package at a time; see `capability_sandbox::expose_read_only`).
//!
//! # The store is not trusted after install
//!
//! The record lists every entry of the unpacked package with the SHA-256 of each file
//! ([`PackageFiles`], taken from the tarball just verified, never from what was in the store
//! before), and a receipt of one of its capabilities cites that list's digest
//! (`packageFiles`) beside the tarball's integrity. [`Installed::from_home`] seals each
//! package root it loads (`capability_exec::installed::seal_installed`): every resolution
//! of one of its modules, so every run of it by any executor, first checks that
//! `<home>/packages` and the package directory are the home's own private directories (not
//! links, owned by this user, not writable by group or others) and that the package tree is
//! exactly what was installed, and refuses the run naming the first entry that is not. A
//! record without the list (written before it existed), or a store that is not private when
//! the packages are loaded, seals the package as one that may not run, saying why.

use capability_core::index::IndexEntry;
use capability_core::{CapabilityError, ErrorCode};
use capability_exec::home::Home;
use capability_exec::installed::{PackageFiles, check_private_dir, seal_installed};
use capability_runtime::capability::Capability;
use capability_runtime::source::{CapabilitySource, PackageFile};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The version of installed-package records.
pub const RECORD_VERSION: &str = "1";

/// The package an installation record names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordPackage {
    pub name: String,
    pub version: String,
    /// The SRI of the observed tarball (`sha512-...`).
    pub integrity: String,
}

/// What `<home>/packages/<hex>.json` records of an installation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallRecord {
    /// [`RECORD_VERSION`].
    pub record_version: String,
    pub package: RecordPackage,
    /// The store directory's name: the sha512 of the tarball, hex.
    pub store: String,
    pub registry: String,
    pub tarball: String,
    /// The index the capability was resolved in.
    pub index: String,
    /// The capability ids installed from this package.
    pub capabilities: Vec<String>,
    /// The key id of the registry signature that was verified.
    pub signature_key_id: Option<String>,
    pub registry_signature_verified: bool,
    pub provenance_verified: bool,
    /// The URL of the verified provenance attestations.
    pub attestation: Option<String>,
    /// The source repository and commit the provenance names.
    pub repository: Option<String>,
    pub commit: Option<String>,
    /// The verified attestation's summary.
    pub provenance_attestation: Option<Value>,
    pub installed_at: String,
    /// Every entry of the unpacked package, each file with its SHA-256 (absent from records
    /// written before it was recorded: such a package is not run, see the module docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<PackageFiles>,
}

impl InstallRecord {
    /// `name@version`.
    pub fn package_ref(&self) -> String {
        format!("{}@{}", self.package.name, self.package.version)
    }

    /// Reads a record file; `None` when it is missing, unreadable, of another version or
    /// does not name `sha512_hex` as its store.
    pub fn read(home: &Home, sha512_hex: &str) -> Option<InstallRecord> {
        let bytes = std::fs::read(home.package_record(sha512_hex)).ok()?;
        let record: InstallRecord = serde_json::from_slice(&bytes).ok()?;
        (record.record_version == RECORD_VERSION && record.store == sha512_hex).then_some(record)
    }

    /// The provenance members a receipt of one of its capabilities records.
    fn provenance_members(&self) -> Vec<(&'static str, Value)> {
        let s = |v: &str| Value::String(v.to_string());
        let mut out = vec![
            ("packageIntegrity", s(&self.package.integrity)),
            ("registry", s(&self.registry)),
            ("tarball", s(&self.tarball)),
            ("index", s(&self.index)),
        ];
        if let Some(k) = &self.signature_key_id {
            out.push(("signatureKeyId", s(k)));
        }
        out.push((
            "registrySignatureVerified",
            Value::Bool(self.registry_signature_verified),
        ));
        if let Some(a) = &self.attestation {
            out.push(("attestation", s(a)));
        }
        out.push(("provenanceVerified", Value::Bool(self.provenance_verified)));
        if let Some(r) = &self.repository {
            out.push(("repository", s(r)));
        }
        if let Some(c) = &self.commit {
            out.push(("commit", s(c)));
        }
        if let Some(p) = &self.provenance_attestation {
            out.push(("provenanceAttestation", p.clone()));
        }
        out.push(("installedAt", s(&self.installed_at)));
        if let Some(files) = &self.files {
            out.push(("packageFiles", s(&files.digest())));
        }
        out
    }
}

/// One installed package.
#[derive(Clone, Debug)]
pub struct InstalledPackage {
    pub record: InstallRecord,
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
    /// Reads the records of the home's store (a record that cannot be read, or whose store
    /// directory is missing, is skipped: it names nothing that can run), and seals each
    /// package it loads: its modules run only from the home's own private store and only
    /// as they were installed (see the module docs).
    pub fn from_home(home: &Home) -> Installed {
        let store = home.packages();
        let refused = check_private_dir(&store).err().map(|e| e.to_string());
        let mut packages = Vec::new();
        for entry in std::fs::read_dir(home.packages())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().to_string();
            let Some(hex) = name.strip_suffix(".json").filter(|h| is_hex_name(h)) else {
                continue;
            };
            let Some(record) = InstallRecord::read(home, hex) else {
                continue;
            };
            let Ok(package) = PackageFile::read(&home.package(hex).join("package.json")) else {
                continue;
            };
            let expected = match (&refused, &record.files) {
                (Some(reason), _) => Err(reason.clone()),
                (None, None) => Err(
                    "its install record lists no files (it was installed by an older version): \
                     install it again"
                        .to_string(),
                ),
                (None, Some(files)) => Ok(files.clone()),
            };
            seal_installed(&home.package(hex), &store, expected);
            packages.push(InstalledPackage { record, package });
        }
        packages.sort_by(|a, b| a.record.installed_at.cmp(&b.record.installed_at));
        Installed { packages }
    }

    /// The installed packages, oldest installation first.
    pub fn packages(&self) -> &[InstalledPackage] {
        &self.packages
    }

    /// `(id, package)` pairs, one per id: the latest installation.
    fn exports(&self) -> Vec<(&str, &InstalledPackage)> {
        let mut out: Vec<(&str, &InstalledPackage)> = Vec::new();
        for p in &self.packages {
            for id in &p.record.capabilities {
                out.retain(|(i, _)| *i != id);
                out.push((id, p));
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
                let capability = p.package.capability(id)?;
                let mut provenance = capability.provenance().cloned().unwrap_or(Value::Null);
                for (key, value) in p.record.provenance_members() {
                    provenance[key] = value;
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
                let descriptor = p.package.exports.get(id)?;
                Some(IndexEntry {
                    package_name: p.package.name.clone(),
                    package_version: p.package.version.clone(),
                    package_integrity: Some(p.record.package.integrity.clone()),
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
