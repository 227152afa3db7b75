//! `cap install`: resolve against the federation, check the registry signature of the exact
//! version (see [`crate::signatures`]), fetch the exact tarball, check it and its provenance
//! attestations when it has any (see [`crate::attestations`]), unpack
//! it into `<home>/packages/<sha512 hex>/`, inspect the inert manifests, write the
//! installed-package record (`<home>/packages/<sha512 hex>.json`, which the host loads as
//! the `Installed` source) and return the reference lockfile.
//!
//! Nothing is kept unless every check passed: the archive is unpacked into a staging
//! directory that is renamed into place only at the end, and removed on any failure.
//!
//! The store must be the home's own private directory: `<home>/packages` is created 0700,
//! and it, the staging directory and the package directory must be real directories (not
//! links), owned by this user, writable by neither group nor others, or the install is
//! refused. Every entry of the unpacked package is recorded with its SHA-256 in the record
//! (see [`crate::store`]); a package already in the store is kept only when it is exactly
//! what the verified tarball unpacks to, and replaced by that otherwise.

use std::path::{Path, PathBuf};

use capability_core::documents::CapabilityLock;
use capability_core::index::{IndexEntry, create_lock, index_entries, resolve, resolve_lock};
use capability_exec::home::Home;
use capability_exec::installed::{PackageFiles, check_private_dir};
use capability_runtime::source::PackageFile;
use serde_json::Value;

use crate::AcquireError;
use crate::attestations::{self, Subject, TrustedRoot};
use crate::error::{
    IndexFault, IoError, LockFault, PackageError, PackageFault, RegistryFault, SignatureFault,
};
use crate::federation::{Bounds, IndexCache, configured_indexes, federate};
use crate::fetch::{FetchConfig, Fetcher};
use crate::integrity::{check_declared, observe};
use crate::registry::{packument, registry_url, version_document};
use crate::signatures::{self, KeySet};
use crate::store::{InstallRecord, RECORD_VERSION, RecordPackage};
use crate::unpack::{Limits, unpack};

/// How to install.
#[derive(Clone, Debug, Default)]
pub struct InstallOptions {
    /// `--index` URLs (else `CAPABILITY_INDEX`, else the lock's index with `locked`).
    pub indexes: Vec<String>,
    /// Documents merged before the fetched ones (the embedded index).
    pub embedded: Vec<Value>,
    /// `--registry`.
    pub registry: Option<String>,
    pub bounds: Bounds,
    pub fetch: FetchConfig,
    pub limits: Limits,
    /// `--locked`: reproduce exactly this lock.
    pub locked: Option<CapabilityLock>,
    /// `--require-signatures` (or a trust policy requiring a registry signature): refuse a
    /// version without a signature verified against the registry's keys.
    pub require_signatures: bool,
    /// `--offline`: the indexes come from the home's index cache only.
    pub offline: bool,
    /// Where the crawl and the downloads are reported (nowhere by default).
    pub progress: crate::progress::Reporter,
    /// A trust policy requiring verified provenance: refuse a version without provenance
    /// attestations (a version that has them is always verified, see
    /// [`crate::attestations`]).
    pub require_provenance: bool,
}

/// What was installed.
#[derive(Clone, Debug)]
pub struct Installation {
    /// The installed-package record (also written to `<home>/packages/<sha512 hex>.json`).
    pub record: InstallRecord,
    /// The lockfile (`lockVersion: "1"`).
    pub lock: CapabilityLock,
    /// `<home>/packages/<sha512 hex>`.
    pub store: PathBuf,
}

impl Installation {
    /// The installed capability's id.
    pub fn capability_id(&self) -> &str {
        &self.lock.capability.id
    }
}

fn remove_tree(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            // Files are read-only; removing them needs their directories writable.
            crate::unpack::make_writable(path);
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Creates `path` as a directory with mode 0700 (the parent must exist); an existing one is
/// left as it is (and checked by the caller).
fn create_private_dir(path: &Path) -> Result<(), AcquireError> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match builder.create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(IoError::file(path, &e)),
    }
}

/// The store directory `<home>/packages`, created private when missing, and refused unless
/// it is the home's own private directory.
fn private_store(home: &Home) -> Result<PathBuf, AcquireError> {
    let packages = home.packages();
    create_private_dir(&packages)?;
    check_private_dir(&packages)?;
    Ok(packages)
}

/// Whether `store` holds exactly the package `files` records, in a private directory.
fn holds(store: &Path, files: &PackageFiles) -> bool {
    check_private_dir(store)
        .and_then(|()| files.verify(store))
        .is_ok()
}

/// Unpacks and checks the package in a private staging directory of `packages`, records
/// its files, and puts it in place at `store`: an existing package directory is kept when
/// it holds exactly what was unpacked, and replaced otherwise (it was altered, or a link).
fn unpack_into_store(
    bytes: &[u8],
    packages: &Path,
    store: &Path,
    entry: &IndexEntry,
    limits: Limits,
) -> Result<PackageFiles, AcquireError> {
    let staging = packages.join(format!(".staging-{}", uuid::Uuid::new_v4()));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(&staging)
        .map_err(|e| IoError::file(&staging, &e))?;
    let staged = check_private_dir(&staging)
        .map_err(AcquireError::from)
        .and_then(|()| unpack(bytes, &staging, limits))
        .and_then(|_| check_package(&staging, entry))
        .and_then(|()| PackageFiles::scan(&staging).map_err(AcquireError::from));
    let files = match staged {
        Ok(files) => files,
        Err(e) => {
            remove_tree(&staging);
            return Err(e);
        }
    };
    if std::fs::symlink_metadata(store).is_ok() {
        if holds(store, &files) {
            remove_tree(&staging);
            return Ok(files);
        }
        let old = packages.join(format!(".replaced-{}", uuid::Uuid::new_v4()));
        if let Err(e) = std::fs::rename(store, &old) {
            remove_tree(&staging);
            return Err(IoError::file(store, &e));
        }
        remove_tree(&old);
    }
    if let Err(e) = std::fs::rename(&staging, store) {
        remove_tree(&staging);
        // Another install put the same package in place meanwhile.
        if !holds(store, &files) {
            return Err(IoError::file(store, &e));
        }
    }
    Ok(files)
}

/// Installs the capability `query` names (an id exactly, or a query resolved as the
/// reference does), or exactly what `options.locked` names.
pub fn install(
    home: &Home,
    query: &str,
    options: &InstallOptions,
) -> Result<Installation, AcquireError> {
    let fetcher = Fetcher::new(options.fetch.clone())?.with_progress(options.progress.clone());
    let mut roots = configured_indexes(&options.indexes, Some(home))?;
    let locked = match &options.locked {
        Some(lock) => {
            let lock = lock.to_value();
            capability_core::index::assert_valid_lock(&lock).map_err(LockFault::Invalid)?;
            Some(lock)
        }
        None => None,
    };
    let locked = locked.as_ref();
    if let Some(lock) = locked
        && roots.is_empty()
        && let Some(url) = lock.pointer("/index/url").and_then(Value::as_str)
    {
        roots.push(url.to_string());
    }
    let cache = IndexCache::in_home(home, options.offline);
    let network = federate(
        &fetcher,
        &roots,
        &options.embedded,
        options.bounds,
        Some(&cache),
    )?;
    let index_url = roots
        .first()
        .cloned()
        .unwrap_or_else(|| "embedded:index".into());
    let digest = network.digest_of(&index_url).unwrap_or_else(|| {
        capability_core::json::canonical_hash(&Value::Array(options.embedded.clone()))
    });
    let entries = index_entries(&network.index);
    let entry: IndexEntry = match locked {
        Some(lock) => {
            let locked_url = lock
                .pointer("/index/url")
                .and_then(Value::as_str)
                .unwrap_or("");
            let locked_digest = lock
                .pointer("/index/digest")
                .and_then(Value::as_str)
                .unwrap_or("");
            if locked_url != index_url {
                return Err(LockFault::OtherIndex {
                    locked: locked_url.to_string(),
                    index: index_url,
                }
                .into());
            }
            if locked_digest != digest {
                return Err(LockFault::IndexChanged {
                    index: index_url,
                    digest,
                    locked: locked_digest.to_string(),
                }
                .into());
            }
            resolve_lock(&entries, lock)
                .map_err(LockFault::Resolve)?
                .entry
                .clone()
        }
        None => {
            let r = resolve(&entries, query).map_err(IndexFault::Resolve)?;
            if capability_core::validate::is_capability_id(query) && r.entry.manifest.id != query {
                return Err(IndexFault::NoMatch {
                    query: query.to_string(),
                }
                .into());
            }
            r.entry.clone()
        }
    };
    if entry.source != "npm" {
        let fault = PackageFault::NotNpm {
            origin: entry.source.clone(),
        };
        return Err(PackageError::new(entry.package_ref(), fault).into());
    }
    let (name, version) = (entry.package_name.as_str(), entry.package_version.as_str());
    let registry = registry_url(options.registry.as_deref());
    let no_dist = |field: &'static str| RegistryFault::NoDist {
        name: name.to_string(),
        version: version.to_string(),
        field,
    };
    let packument = packument(&fetcher, &registry, name)?;
    let doc = version_document(&packument, name, Some(version))?;
    let declared = doc
        .pointer("/dist/integrity")
        .and_then(Value::as_str)
        .ok_or_else(|| no_dist("integrity"))?;
    let (signature_key, keys) = check_signatures(
        home,
        &fetcher,
        &registry,
        &packument,
        doc,
        (name, version, declared),
        options.require_signatures,
    )?;
    let tarball = doc
        .pointer("/dist/tarball")
        .and_then(Value::as_str)
        .ok_or_else(|| no_dist("tarball"))?;
    let same_origin = |a: &str, b: &str| match (url::Url::parse(a), url::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    };
    if !same_origin(tarball, &registry) {
        return Err(RegistryFault::TarballElsewhere {
            name: name.to_string(),
            version: version.to_string(),
            tarball: tarball.to_string(),
            registry,
        }
        .into());
    }
    let fetched = fetcher.tarball(tarball)?;
    if !(200..300).contains(&fetched.status) {
        return Err(RegistryFault::Download {
            name: name.to_string(),
            version: version.to_string(),
            tarball: tarball.to_string(),
            status: fetched.status,
        }
        .into());
    }
    let bytes = fetched.body;
    let observed = observe(&bytes);
    check_declared(&bytes, declared, "the packument")?;
    if let Some(indexed) = &entry.package_integrity {
        check_declared(&bytes, indexed, "the index")?;
    }
    if let Some(lock) = locked {
        match lock.pointer("/package/integrity").and_then(Value::as_str) {
            Some(i) => check_declared(&bytes, i, "the lock")?,
            None => {
                return Err(LockFault::NoIntegrity.into());
            }
        }
    }
    let provenance = check_provenance(
        home,
        &fetcher,
        &registry,
        doc,
        keys.as_ref(),
        (name, version, &observed.hex),
        options.require_provenance,
    )?;

    let store = home.package(&observed.hex);
    let packages = private_store(home)?;
    let files = unpack_into_store(&bytes, &packages, &store, &entry, options.limits)?;
    // A package installed before for another of its capabilities keeps those.
    let mut capabilities = InstallRecord::read(home, &observed.hex)
        .map(|old| old.capabilities)
        .unwrap_or_default();
    if !capabilities.contains(&entry.manifest.id) {
        capabilities.push(entry.manifest.id.clone());
    }
    let record = InstallRecord {
        record_version: RECORD_VERSION.into(),
        package: RecordPackage {
            name: name.into(),
            version: version.into(),
            integrity: observed.sri.clone(),
        },
        store: observed.hex.clone(),
        registry: registry.clone(),
        tarball: tarball.into(),
        index: index_url.clone(),
        capabilities,
        registry_signature_verified: signature_key.is_some(),
        signature_key_id: signature_key,
        provenance_verified: provenance.is_some(),
        attestation: provenance.as_ref().map(|p| p.url.clone()),
        repository: provenance.as_ref().and_then(|p| p.identity().repository),
        commit: provenance.as_ref().and_then(|p| p.identity().commit),
        provenance_attestation: provenance.as_ref().map(attestations::Verified::to_json),
        installed_at: capability_core::js::now_iso(),
        files: Some(files),
    };
    write_record(&home.package_record(&observed.hex), &record)?;
    if let Some(keys) = &keys {
        crate::signatures::pin(home, &registry, keys)?;
    }
    let lock = create_lock(
        &index_url,
        &digest,
        &entry,
        Some(&observed.sri),
        &capability_core::js::now_iso(),
    );
    let lock: CapabilityLock = serde_json::from_value(lock).map_err(|e| LockFault::Unreadable {
        reason: e.to_string(),
    })?;
    Ok(Installation {
        record,
        lock,
        store,
    })
}

/// The registry-signature check of `name@version` (`declared` is its `dist.integrity`): the
/// key id of its verified signature (`None`: unsigned, or the registry publishes no keys)
/// and the key set to pin.
fn check_signatures(
    home: &Home,
    fetcher: &Fetcher,
    registry: &str,
    packument: &Value,
    doc: &Value,
    (name, version, declared): (&str, &str, &str),
    required: bool,
) -> Result<(Option<String>, Option<KeySet>), AcquireError> {
    let spec = format!("{name}@{version}");
    let fetched = signatures::fetch_keys(fetcher, registry);
    let keys = signatures::effective_keys(home, registry, fetched)?;
    let signed = doc.pointer("/dist/signatures");
    let Some(keys) = keys else {
        if required {
            return Err(SignatureFault::NoKeys {
                spec,
                registry: registry.to_string(),
                keys_url: signatures::keys_url(registry),
            }
            .into());
        }
        return Ok((None, None));
    };
    let published = packument
        .pointer(&format!(
            "/time/{}",
            version.replace('~', "~0").replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let key = signatures::verify(&keys, name, version, declared, signed, published)?;
    if key.is_none() && required {
        return Err(SignatureFault::Unsigned { spec }.into());
    }
    Ok((key, Some(keys)))
}

/// The provenance check of `name@version` (`sha512_hex` over its downloaded tarball): `None`
/// when the version has no `dist.attestations` (refused when `required`); else its
/// attestations, fetched and verified against the trusted root and the registry's `keys`.
fn check_provenance(
    home: &Home,
    fetcher: &Fetcher,
    registry: &str,
    doc: &Value,
    keys: Option<&KeySet>,
    (name, version, sha512_hex): (&str, &str, &str),
    required: bool,
) -> Result<Option<attestations::Verified>, AcquireError> {
    let url = match doc.get("dist") {
        Some(dist) => {
            attestations::attestations_url(dist).map_err(|_| SignatureFault::NoAttestationsUrl {
                spec: Some(format!("{name}@{version}")),
            })?
        }
        None => None,
    };
    let Some(url) = url else {
        if required {
            return Err(SignatureFault::ProvenanceRequired {
                spec: format!("{name}@{version}"),
            }
            .into());
        }
        return Ok(None);
    };
    let root = TrustedRoot::load(home)?;
    let document = attestations::fetch(fetcher, registry, &url)?;
    let subject = Subject {
        name,
        version,
        sha512_hex,
    };
    attestations::verify_document(&document, &url, &root, keys, subject).map(Some)
}

/// The unpacked package must declare exactly what the index says (read inertly).
fn check_package(root: &Path, entry: &IndexEntry) -> Result<(), AcquireError> {
    let failed =
        |fault: PackageFault| AcquireError::from(PackageError::new(entry.package_ref(), fault));
    let pkg = PackageFile::read(&root.join("package.json"))
        .map_err(|e| failed(PackageFault::Declaration { reason: e.message }))?;
    if pkg.name != entry.package_name || pkg.version != entry.package_version {
        return Err(failed(PackageFault::OtherPackage {
            name: pkg.name,
            version: pkg.version,
        }));
    }
    let id = &entry.manifest.id;
    let descriptor = pkg
        .exports
        .get(id)
        .and_then(Value::as_object)
        .ok_or_else(|| failed(PackageFault::NotExported { id: id.clone() }))?;
    let manifest: Option<capability_core::manifest::Manifest> = descriptor
        .get("manifest")
        .cloned()
        .and_then(|m| serde_json::from_value(m).ok());
    if manifest.as_ref() != Some(&entry.manifest) {
        return Err(failed(PackageFault::ManifestDiffers { id: id.clone() }));
    }
    let module = descriptor
        .get("module")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if module != entry.module {
        return Err(failed(PackageFault::ModuleDiffers {
            id: id.clone(),
            module: module.to_string(),
            indexed: entry.module.clone(),
        }));
    }
    let declared = [
        entry.integrity.as_deref(),
        descriptor.get("integrity").and_then(Value::as_str),
    ];
    if declared.iter().any(Option::is_some) {
        let path = root.join(module.trim_start_matches("./"));
        let bytes = std::fs::read(&path).map_err(|e| {
            failed(PackageFault::ModuleUnreadable {
                module: module.to_string(),
                reason: e.to_string(),
            })
        })?;
        for integrity in declared.into_iter().flatten() {
            capability_exec::integrity::verify_integrity(&bytes, integrity).map_err(|e| {
                failed(PackageFault::ModuleIntegrity {
                    module: module.to_string(),
                    reason: e.to_string(),
                })
            })?;
        }
    }
    Ok(())
}

fn write_record(path: &Path, record: &InstallRecord) -> Result<(), AcquireError> {
    let failed = |e: std::io::Error| IoError::file(path, &e);
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    let text = serde_json::to_string_pretty(record).map_err(|e| IoError::encode(&e))?;
    std::fs::write(&tmp, text + "\n").map_err(failed)?;
    std::fs::rename(&tmp, path).map_err(failed)
}
