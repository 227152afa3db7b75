//! Why discovery or acquisition failed.
//!
//! [`AcquireError`] is one enum; each variant holds a small error of its own (cedar's style:
//! private fields behind accessors, one-line messages that quote what was given or fetched).
//! Each small error keeps the case it stands for in a private enum whose message is the one
//! this crate has always printed: many are the reference's, word for word, capitals included
//! (`Failed to fetch capability index: HTTP 500 (<url>)`, `Capability federation exceeded 64
//! indexes`, `No capability matched: <query>`), and the CLI's users and tests read them.

use std::path::{Path, PathBuf};

use capability_core::index::IndexError as IndexDocumentError;
use capability_core::json::JsonError;
use capability_openapi::http::HttpError;

use crate::attestations::{BundleProblem, DocumentProblem, RootProblem};
use crate::signatures::KeysProblem;

/// Why discovery or acquisition failed: one line, naming what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// A network fetch failed (the URL and the reason).
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// An index or discovery document was refused.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The registry's answer was unusable.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A registry signature, the registry's key set, the Sigstore trusted root or a
    /// provenance attestation was refused.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// Bytes did not match a declared integrity.
    #[error(transparent)]
    Integrity(#[from] IntegrityError),
    /// The archive was refused.
    #[error(transparent)]
    Unpack(#[from] UnpackError),
    /// The lockfile was refused or does not match.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The package does not declare what the index says.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// A file of the home could not be read or written.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The package store is not the home's own private directory, or an unpacked package
    /// could not be recorded.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A network fetch failed: the URL and why (the HTTP status, when the server answered).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{fault}", document.map(|d| format!("Failed to fetch {d}: ")).unwrap_or_default())]
pub struct FetchError {
    /// What was being fetched, when the message names it (`capability index`).
    document: Option<&'static str>,
    fault: FetchFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FetchFault {
    #[error("{0}")]
    Client(HttpError),
    #[error("{url}: {error}")]
    Url { url: String, error: url::ParseError },
    #[error("{url}: only http and https URLs are fetched")]
    Scheme { url: String },
    #[error("{url}: the URL has no host")]
    NoHost { url: String },
    #[error("{url}: {error}")]
    Http { url: String, error: HttpError },
    /// The reference's form, after `Failed to fetch <document>: `.
    #[error("HTTP {status} ({url})")]
    Status { url: String, status: u16 },
    /// A search's answer (`cap world` reports it after the query).
    #[error("HTTP {status} for {url}")]
    SearchStatus { url: String, status: u16 },
    #[error("{url}: not JSON: {error}")]
    NotJson { url: String, error: JsonError },
    #[error("{url}: the fetch stopped")]
    Stopped { url: String },
}

impl FetchError {
    /// The URL fetched (`None` when the HTTP client itself could not start).
    pub fn url(&self) -> Option<&str> {
        match &self.fault {
            FetchFault::Client(_) => None,
            FetchFault::Url { url, .. }
            | FetchFault::Scheme { url }
            | FetchFault::NoHost { url }
            | FetchFault::Http { url, .. }
            | FetchFault::Status { url, .. }
            | FetchFault::SearchStatus { url, .. }
            | FetchFault::NotJson { url, .. }
            | FetchFault::Stopped { url } => Some(url),
        }
    }

    /// The status the server answered with, when it answered with one other than 2xx.
    pub fn status(&self) -> Option<u16> {
        match self.fault {
            FetchFault::Status { status, .. } | FetchFault::SearchStatus { status, .. } => {
                Some(status)
            }
            _ => None,
        }
    }

    /// The same failure, said to be the fetch of `document` (`capability index`).
    pub(crate) fn of(self, document: &'static str) -> Self {
        FetchError {
            document: Some(document),
            ..self
        }
    }
}

impl From<FetchFault> for FetchError {
    fn from(fault: FetchFault) -> Self {
        FetchError {
            document: None,
            fault,
        }
    }
}

/// An index, the home's list of indexes, a site or its discovery document was refused, or
/// no capability matched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{fault}")]
pub struct IndexError {
    fault: IndexFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IndexFault {
    #[error("offline: the capability index {url} is not in the index cache ({}); fetch it once without --offline", cache.display())]
    NotCached { url: String, cache: PathBuf },
    #[error("{error} ({url}{})", if *cached { ", cached" } else { "" })]
    Invalid {
        url: String,
        error: IndexDocumentError,
        cached: bool,
    },
    #[error("Invalid capability index: {url}: not JSON: {error}")]
    NotJson { url: String, error: JsonError },
    #[error("Capability federation exceeded {max} indexes")]
    TooMany { max: usize },
    #[error("No capability indexes were loaded")]
    NoneLoaded,
    #[error("{0}")]
    Merge(IndexDocumentError),
    #[error("{}: expected {{\"indexes\": [\"<url>\", ...]}}", path.display())]
    List { path: PathBuf },
    #[error("Invalid site URL {site:?}: {error}")]
    SiteUrl {
        site: String,
        error: url::ParseError,
    },
    #[error("Invalid site URL {site:?}: an absolute http(s) URL is required")]
    SiteNotHttp { site: String },
    #[error("Invalid capability discovery document at {url}: {}", issues.join("; "))]
    Discovery { url: String, issues: Vec<String> },
    #[error("No Capability discovery document found. Tried: {}", tried.join(", "))]
    NoDiscovery { tried: Vec<String> },
    #[error("{0}")]
    Resolve(IndexDocumentError),
    #[error("No capability matched: {query}")]
    NoMatch { query: String },
}

impl IndexError {
    /// The index, discovery document or site at fault, when one is.
    pub fn url(&self) -> Option<&str> {
        match &self.fault {
            IndexFault::NotCached { url, .. }
            | IndexFault::Invalid { url, .. }
            | IndexFault::NotJson { url, .. }
            | IndexFault::Discovery { url, .. } => Some(url),
            IndexFault::SiteUrl { site, .. } | IndexFault::SiteNotHttp { site } => Some(site),
            _ => None,
        }
    }

    /// The home's file at fault (`indexes.json`), when one is.
    pub fn path(&self) -> Option<&Path> {
        match &self.fault {
            IndexFault::List { path } => Some(path),
            _ => None,
        }
    }
}

impl From<IndexFault> for AcquireError {
    fn from(fault: IndexFault) -> Self {
        AcquireError::Index(IndexError { fault })
    }
}

/// The npm registry's answer for a package was unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{fault}")]
pub struct RegistryError {
    fault: RegistryFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RegistryFault {
    #[error("npm package {name} was not found at {registry}")]
    NotFound { name: String, registry: String },
    #[error("Failed to fetch npm package {name}: HTTP {status} ({url})")]
    Status {
        name: String,
        url: String,
        status: u16,
    },
    #[error("{url}: not JSON: {error}")]
    NotJson {
        name: String,
        url: String,
        error: JsonError,
    },
    #[error("{url} does not describe {name}")]
    OtherPackage { name: String, url: String },
    #[error("No version was supplied and {name} has no latest dist-tag")]
    NoLatest { name: String },
    #[error("npm package {name}@{version} was not found")]
    NoVersion { name: String, version: String },
    #[error("the registry's version document does not describe {name}@{version}")]
    OtherVersion { name: String, version: String },
    #[error("{name}@{version} has no dist.{field}")]
    NoDist {
        name: String,
        version: String,
        field: &'static str,
    },
    #[error("the tarball of {name}@{version} is at {tarball}, outside the registry {registry}")]
    TarballElsewhere {
        name: String,
        version: String,
        tarball: String,
        registry: String,
    },
    #[error("Failed to download {tarball}: HTTP {status}")]
    Download {
        name: String,
        version: String,
        tarball: String,
        status: u16,
    },
}

impl RegistryError {
    /// The package's name.
    pub fn package(&self) -> &str {
        match &self.fault {
            RegistryFault::NotFound { name, .. }
            | RegistryFault::Status { name, .. }
            | RegistryFault::NotJson { name, .. }
            | RegistryFault::OtherPackage { name, .. }
            | RegistryFault::NoLatest { name }
            | RegistryFault::NoVersion { name, .. }
            | RegistryFault::OtherVersion { name, .. }
            | RegistryFault::NoDist { name, .. }
            | RegistryFault::TarballElsewhere { name, .. }
            | RegistryFault::Download { name, .. } => name,
        }
    }

    /// The version, when one was asked for.
    pub fn version(&self) -> Option<&str> {
        match &self.fault {
            RegistryFault::NoVersion { version, .. }
            | RegistryFault::OtherVersion { version, .. }
            | RegistryFault::NoDist { version, .. }
            | RegistryFault::TarballElsewhere { version, .. }
            | RegistryFault::Download { version, .. } => Some(version),
            _ => None,
        }
    }

    /// The URL fetched (the packument's, or the tarball's), when the fault is its answer.
    pub fn url(&self) -> Option<&str> {
        match &self.fault {
            RegistryFault::Status { url, .. }
            | RegistryFault::NotJson { url, .. }
            | RegistryFault::OtherPackage { url, .. } => Some(url),
            RegistryFault::TarballElsewhere { tarball, .. }
            | RegistryFault::Download { tarball, .. } => Some(tarball),
            _ => None,
        }
    }
}

impl From<RegistryFault> for AcquireError {
    fn from(fault: RegistryFault) -> Self {
        AcquireError::Registry(RegistryError { fault })
    }
}

/// A registry signature, the registry's key set, the Sigstore trusted root or a provenance
/// attestation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{fault}")]
pub struct SignatureError {
    fault: SignatureFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignatureFault {
    #[error("the signing keys of {registry}: {problem}")]
    Keys {
        registry: String,
        problem: KeysProblem,
    },
    #[error("{location}: not JSON: {error}")]
    KeysNotJson {
        registry: String,
        location: String,
        error: JsonError,
    },
    #[error("{registry} no longer publishes signing keys, but its keys were pinned ({}); remove the pin only after checking why", pin.display())]
    Unpublished { registry: String, pin: PathBuf },
    #[error("the signing keys of {registry} changed since they were pinned ({}): refusing them; remove the pin only after checking the new keys", pin.display())]
    KeysChanged { registry: String, pin: PathBuf },
    #[error("{spec}: dist.signatures is not an array")]
    NotArray { spec: String },
    #[error("{spec} is signed by the unknown key {keyid:?}: the registry publishes no such key")]
    UnknownKey { spec: String, keyid: String },
    #[error(
        "{spec} is signed by the key {keyid}, which had expired when the version was published"
    )]
    ExpiredKey { spec: String, keyid: String },
    #[error("{spec}: the signature by {keyid} is malformed")]
    Malformed { spec: String, keyid: String },
    #[error("{spec}: the registry signature by {keyid} does not verify over {message:?}")]
    DoesNotVerify {
        spec: String,
        keyid: String,
        message: String,
    },
    #[error(
        "npm registry signature missing for {spec}: {registry} publishes no signing keys ({keys_url}), and signatures are required"
    )]
    NoKeys {
        spec: String,
        registry: String,
        keys_url: String,
    },
    #[error("npm registry signature missing for {spec}, and signatures are required")]
    Unsigned { spec: String },
    #[error("{}dist.attestations names no url", spec.as_ref().map(|s| format!("{s}: ")).unwrap_or_default())]
    NoAttestationsUrl { spec: Option<String> },
    #[error(
        "{spec}: verified provenance attestation required, but the version has no dist.attestations"
    )]
    ProvenanceRequired { spec: String },
    #[error("the Sigstore trusted root ({origin}): {problem}")]
    TrustedRoot {
        origin: String,
        problem: RootProblem,
    },
    #[error("the embedded Sigstore trusted root: {error}")]
    EmbeddedRoot { error: JsonError },
    #[error("the attestations are at {url}, outside the registry {registry}")]
    AttestationsElsewhere { url: String, registry: String },
    #[error("{url}: the attestations are not JSON: {error}")]
    AttestationsNotJson { url: String, error: JsonError },
    #[error("the provenance attestations of {spec}: {problem}")]
    Attestations {
        spec: String,
        problem: DocumentProblem,
    },
    #[error("the {what} of {spec}: {problem}")]
    Bundle {
        what: &'static str,
        spec: String,
        problem: BundleProblem,
    },
}

impl SignatureError {
    /// The package version concerned (`name@version`), when one is.
    pub fn package(&self) -> Option<&str> {
        match &self.fault {
            SignatureFault::NotArray { spec }
            | SignatureFault::UnknownKey { spec, .. }
            | SignatureFault::ExpiredKey { spec, .. }
            | SignatureFault::Malformed { spec, .. }
            | SignatureFault::DoesNotVerify { spec, .. }
            | SignatureFault::NoKeys { spec, .. }
            | SignatureFault::Unsigned { spec }
            | SignatureFault::ProvenanceRequired { spec }
            | SignatureFault::Attestations { spec, .. }
            | SignatureFault::Bundle { spec, .. } => Some(spec),
            SignatureFault::NoAttestationsUrl { spec } => spec.as_deref(),
            _ => None,
        }
    }

    /// The registry whose keys or attestations are concerned, when the fault names it.
    pub fn registry(&self) -> Option<&str> {
        match &self.fault {
            SignatureFault::Keys { registry, .. }
            | SignatureFault::KeysNotJson { registry, .. }
            | SignatureFault::Unpublished { registry, .. }
            | SignatureFault::KeysChanged { registry, .. }
            | SignatureFault::NoKeys { registry, .. }
            | SignatureFault::AttestationsElsewhere { registry, .. } => Some(registry),
            _ => None,
        }
    }
}

impl From<SignatureFault> for AcquireError {
    fn from(fault: SignatureFault) -> Self {
        AcquireError::Signature(SignatureError { fault })
    }
}

/// Downloaded bytes did not match an integrity declared for them, or the declaration is not
/// one that may vouch for them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{fault}")]
pub struct IntegrityError {
    fault: IntegrityFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IntegrityFault {
    #[error("{by} integrity {declared:?}: {reason}")]
    Unreadable {
        by: String,
        declared: String,
        reason: String,
    },
    #[error("{by} integrity {declared:?} is not sha512")]
    NotSha512 { by: String, declared: String },
    #[error("integrity mismatch: the downloaded bytes are {observed} but {by} declares {declared}")]
    Mismatch {
        by: String,
        declared: String,
        observed: String,
    },
}

impl IntegrityError {
    /// The declared integrity.
    pub fn declared(&self) -> &str {
        match &self.fault {
            IntegrityFault::Unreadable { declared, .. }
            | IntegrityFault::NotSha512 { declared, .. }
            | IntegrityFault::Mismatch { declared, .. } => declared,
        }
    }

    /// Who declared it (`the packument`, `the index`, `the lock`).
    pub fn declared_by(&self) -> &str {
        match &self.fault {
            IntegrityFault::Unreadable { by, .. }
            | IntegrityFault::NotSha512 { by, .. }
            | IntegrityFault::Mismatch { by, .. } => by,
        }
    }

    /// The integrity observed over the bytes (`sha512-<base64>`), when they were compared.
    pub fn observed(&self) -> Option<&str> {
        match &self.fault {
            IntegrityFault::Mismatch { observed, .. } => Some(observed),
            _ => None,
        }
    }
}

impl From<IntegrityFault> for AcquireError {
    fn from(fault: IntegrityFault) -> Self {
        AcquireError::Integrity(IntegrityError { fault })
    }
}

/// A package archive was refused (nothing of it is kept).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refused archive: {fault}")]
pub struct UnpackError {
    fault: UnpackFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnpackFault {
    #[error("the entry {entry:?} contains `..`")]
    ParentDir { entry: String },
    #[error("the entry {entry:?} is an absolute path")]
    Absolute { entry: String },
    #[error("the entry {entry:?} goes through a link or a file")]
    ThroughLink { entry: String },
    #[error("it expands past the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("not a readable gzip tar archive: {reason}")]
    Unreadable { reason: String },
    #[error("it has more than {limit} entries")]
    TooManyEntries { limit: usize },
    #[error("the entry {entry:?} appears twice")]
    Duplicate { entry: String },
    #[error("the link {entry:?} points to {target:?}, outside the package")]
    LinkOutside { entry: String, target: String },
    #[error(
        "the link {entry:?} points to {target:?}, which resolves outside the package through the link {through:?}"
    )]
    LinkChainOutside {
        entry: String,
        target: String,
        through: String,
    },
    #[error(
        "the link {entry:?} points to {target:?}, which does not resolve within {limit} links (a loop or a chain too long)"
    )]
    LinkLoop {
        entry: String,
        target: String,
        limit: usize,
    },
    #[error("its links take more than {limit} steps to resolve")]
    LinksTooComplex { limit: usize },
    #[error("the hard link {entry:?} points to {target:?}, which is not a file of the package")]
    HardLinkOutside { entry: String, target: String },
    #[error("the entry {entry:?} is a device file")]
    Device { entry: String },
    #[error("the entry {entry:?} is a FIFO")]
    Fifo { entry: String },
    #[error("the entry {entry:?} has an unsupported type ({kind})")]
    Unsupported { entry: String, kind: String },
    #[cfg_attr(unix, allow(dead_code))]
    #[error("links are not supported here ({entry})")]
    NoLinks { entry: String },
}

impl UnpackError {
    /// The archive entry refused (its package-relative path, or its path in the archive),
    /// when one entry is at fault.
    pub fn entry(&self) -> Option<&str> {
        match &self.fault {
            UnpackFault::ParentDir { entry }
            | UnpackFault::Absolute { entry }
            | UnpackFault::ThroughLink { entry }
            | UnpackFault::Duplicate { entry }
            | UnpackFault::LinkOutside { entry, .. }
            | UnpackFault::LinkChainOutside { entry, .. }
            | UnpackFault::LinkLoop { entry, .. }
            | UnpackFault::HardLinkOutside { entry, .. }
            | UnpackFault::Device { entry }
            | UnpackFault::Fifo { entry }
            | UnpackFault::Unsupported { entry, .. }
            | UnpackFault::NoLinks { entry } => Some(entry),
            _ => None,
        }
    }
}

impl From<UnpackFault> for AcquireError {
    fn from(fault: UnpackFault) -> Self {
        AcquireError::Unpack(UnpackError { fault })
    }
}

/// A lockfile was refused, or the index or package no longer match it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{fault}")]
pub struct LockError {
    fault: LockFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LockFault {
    #[error("{0}")]
    Invalid(IndexDocumentError),
    #[error("the lock names the index {locked}, not {index}")]
    OtherIndex { locked: String, index: String },
    #[error(
        "the index at {index} changed since the lock was written (digest {digest}, locked {locked})"
    )]
    IndexChanged {
        index: String,
        digest: String,
        locked: String,
    },
    #[error("{0}")]
    Resolve(IndexDocumentError),
    #[error("the lock names no package integrity: it cannot be reproduced exactly")]
    NoIntegrity,
    #[error("the lock just written does not read: {reason}")]
    Unreadable { reason: String },
}

impl LockError {
    /// The index the install used, when the lock does not match it.
    pub fn index_url(&self) -> Option<&str> {
        match &self.fault {
            LockFault::OtherIndex { index, .. } | LockFault::IndexChanged { index, .. } => {
                Some(index)
            }
            _ => None,
        }
    }
}

impl From<LockFault> for AcquireError {
    fn from(fault: LockFault) -> Self {
        AcquireError::Lock(LockError { fault })
    }
}

/// A downloaded package does not declare what the index says (or is not an npm package).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageError {
    package: String,
    fault: PackageFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PackageFault {
    #[error("comes from {origin:?}: only npm packages are installed")]
    NotNpm { origin: String },
    #[error("{reason}")]
    Declaration { reason: String },
    #[error("the tarball holds {name}@{version}")]
    OtherPackage { name: String, version: String },
    #[error("the package does not export {id} with a manifest")]
    NotExported { id: String },
    #[error("the package's manifest of {id} differs from the index's")]
    ManifestDiffers { id: String },
    #[error("the package's module of {id} is {module:?}, the index says {indexed:?}")]
    ModuleDiffers {
        id: String,
        module: String,
        indexed: String,
    },
    #[error("{module}: {reason}")]
    ModuleUnreadable { module: String, reason: String },
    #[error("module {module}: {reason}")]
    ModuleIntegrity { module: String, reason: String },
}

impl PackageError {
    pub(crate) fn new(package: impl Into<String>, fault: PackageFault) -> Self {
        PackageError {
            package: package.into(),
            fault,
        }
    }

    /// The package (`name@version`, as the index names it).
    pub fn package(&self) -> &str {
        &self.package
    }
}

impl std::fmt::Display for PackageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fault {
            // `<package> comes from "git": ...`
            PackageFault::NotNpm { .. } => write!(f, "{} {}", self.package, self.fault),
            fault => write!(f, "{}: {fault}", self.package),
        }
    }
}

impl std::error::Error for PackageError {}

/// A file of the home (the package store, a record, a pin, the index cache) could not be
/// read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{fault}")]
pub struct IoError {
    fault: IoFault,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IoFault {
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("unpacking: {reason}")]
    Unpacking { reason: String },
    #[error("{reason}")]
    Encode { reason: String },
}

impl IoError {
    /// The file at fault, when the error names one.
    pub fn path(&self) -> Option<&Path> {
        match &self.fault {
            IoFault::File { path, .. } => Some(path),
            _ => None,
        }
    }

    /// `error` reading or writing `path`.
    pub(crate) fn file(path: &Path, error: &std::io::Error) -> AcquireError {
        IoFault::File {
            path: path.to_path_buf(),
            reason: error.to_string(),
        }
        .into()
    }

    /// A record that could not be written as JSON.
    pub(crate) fn encode(error: &serde_json::Error) -> AcquireError {
        IoFault::Encode {
            reason: error.to_string(),
        }
        .into()
    }
}

impl From<IoFault> for AcquireError {
    fn from(fault: IoFault) -> Self {
        AcquireError::Io(IoError { fault })
    }
}

/// The package store (`<home>/packages`, a staging directory, a package directory) is not
/// the home's own private directory (a symbolic link, another user's, writable by group or
/// others), or an unpacked package could not be recorded file by file. Nothing is installed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct StoreError {
    path: Option<PathBuf>,
    reason: String,
}

impl StoreError {
    /// The directory refused, when a directory is.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl From<capability_exec::installed::PackageCheckError> for AcquireError {
    fn from(e: capability_exec::installed::PackageCheckError) -> Self {
        use capability_exec::installed::PackageCheckError as E;
        let path = match &e {
            E::Store { path, .. } => Some(path.clone()),
            _ => None,
        };
        AcquireError::Store(StoreError {
            path,
            reason: e.to_string(),
        })
    }
}

impl From<FetchFault> for AcquireError {
    fn from(fault: FetchFault) -> Self {
        AcquireError::Fetch(fault.into())
    }
}
