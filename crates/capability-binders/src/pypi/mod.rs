//! `capability/pypi-wheel`: a Python function or console script of a published wheel, bound
//! to the wheel's exact bytes and run in the process sandbox.
//!
//! The pieces, in the order a forge uses them:
//!
//! * [`index`]: the package index client ([`Index`]): the JSON API (`/pypi/<name>[/<v>]/json`)
//!   when the index serves it, else the PEP 691 JSON or PEP 503 HTML simple API; the exact
//!   wheel is chosen before download ([`tags`]: universal wheels, and platform wheels whose
//!   tags the sandbox's interpreter accepts); downloads are sha256-checked against the index.
//! * [`resolve`]: the exact dependency closure of a wheel from the same index (hash-pinned,
//!   wheels only), or a refusal naming what is missing ([`pep`]: PEP 440 versions and
//!   specifiers, PEP 508 requirements and markers).
//! * [`mine`]: the candidates of a wheel (console scripts, public top-level functions) read
//!   without importing it: Python's `ast` inside the process sandbox.
//! * [`forge`]: the reference's manifest and `capability.python.json` in a directory with the
//!   verified wheels.
//! * [`run`]: one execution in the process sandbox (wheels re-hashed, unpacked read-only, no
//!   network, no installation), with the effects the guest was seen to attempt.
//! * [`binder`]: [`PypiBinder`], the `MetabolicBinder` over all of it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

pub mod binder;
pub mod forge;
pub mod index;
pub mod mine;
pub mod pep;
pub mod resolve;
pub mod run;
pub mod tags;

pub use binder::PypiBinder;
pub use index::Index;

/// The binder's id in the registry.
pub const BINDER_ID: &str = "capability/pypi-wheel";
/// The binder's substrate.
pub const SUBSTRATE: &str = "pypi";
/// `CAPABILITY_PYPI_BINDER_VERSION` of the reference.
pub const BINDER_VERSION: &str = "0.2";
/// The index used when nothing names one.
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org/simple/";

/// Where the binder finds packages and keeps what it downloaded.
#[derive(Clone, Debug)]
pub struct PypiConfig {
    /// The index: a simple API root (`https://pypi.org/simple/`, `http://127.0.0.1:8087/simple/`,
    /// devpi's `…/+simple/`). Its JSON API is tried at the same origin first.
    pub index_url: String,
    /// Names may resolve to private and loopback addresses (IP literals always may).
    pub allow_private: bool,
    /// One request.
    pub timeout: Duration,
    /// Verified wheels, kept by sha256 (`<cache_dir>/<sha256>/<filename>`).
    pub cache_dir: PathBuf,
}

/// One wheel file as the index describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelRef {
    pub filename: String,
    /// Absolute (relative links are resolved against the page they came from).
    pub url: String,
    /// Lowercase hex.
    pub sha256: String,
    pub size: Option<u64>,
}

impl WheelRef {
    /// `{filename, url, sha256, size?}` (the reference's `wheel`).
    pub fn to_json(&self) -> Value {
        let mut v = json!({"filename": self.filename, "url": self.url, "sha256": self.sha256});
        if let Some(size) = self.size {
            v["size"] = json!(size);
        }
        v
    }
}

/// A release and the exact wheel chosen for it: the reference's `PyPiInspection`.
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    /// The project name as the index spells it.
    pub name: String,
    pub version: String,
    pub summary: Option<String>,
    pub requires_python: Option<String>,
    pub project_urls: BTreeMap<String, String>,
    pub wheel: WheelRef,
    /// Known vulnerabilities as the JSON API lists them (empty from a simple API).
    pub vulnerabilities: Vec<Value>,
    /// The wheel's tag triple that matched (`py3-none-any`, `cp311-abi3-manylinux_2_17_x86_64`).
    pub tag: String,
}

impl Inspection {
    /// `{name, version, summary?, requiresPython?, projectUrls, wheel, vulnerabilities}`.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::Map::new();
        v.insert("name".into(), json!(self.name));
        v.insert("version".into(), json!(self.version));
        if let Some(s) = &self.summary {
            v.insert("summary".into(), json!(s));
        }
        if let Some(r) = &self.requires_python {
            v.insert("requiresPython".into(), json!(r));
        }
        v.insert("projectUrls".into(), json!(self.project_urls));
        v.insert("wheel".into(), self.wheel.to_json());
        v.insert(
            "vulnerabilities".into(),
            Value::Array(self.vulnerabilities.clone()),
        );
        Value::Object(v)
    }

    /// `<name>@<version>#sha256:<hex>`: the binding's immutable artifact.
    pub fn immutable_artifact(&self) -> String {
        format!(
            "{}@{}#sha256:{}",
            self.name, self.version, self.wheel.sha256
        )
    }
}

/// What went wrong, by kind (the CLI prints the message; tests match the kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PypiErrorKind {
    /// The index could not be reached or answered an error.
    Index,
    /// No such project or release.
    NotFound,
    /// The release has no wheel this binder may use (sdist only, no matching tags, no sha256).
    NoWheel,
    /// The release is yanked.
    Yanked,
    /// Bytes that do not match the digest the index (or the forge) recorded.
    Digest,
    /// The dependency closure cannot be bound.
    Dependency,
    /// A malformed wheel, index page, version or requirement.
    Invalid,
    /// The sandbox refused or failed to run the miner or the function.
    Sandbox,
    /// A local file could not be read or written.
    Io,
}

/// A PyPI binder failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PypiError {
    pub kind: PypiErrorKind,
    pub message: String,
}

impl PypiError {
    pub fn new(kind: PypiErrorKind, message: impl Into<String>) -> Self {
        PypiError {
            kind,
            message: message.into(),
        }
    }
}
