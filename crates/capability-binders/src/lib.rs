//! # capability-binders
//!
//! Metabolic binders for software that was never written as a capability (the standard's
//! NEED → DISCOVER → MINE → BIND EXACT ARTIFACT → AUTHORIZE → ISOLATE/EXECUTE → RECEIPT):
//!
//! * [`pypi`]: `capability/pypi-wheel`. A package index (JSON API, PEP 691 or PEP 503) is
//!   asked for a release; the exact wheel is chosen before download, downloaded by the
//!   runtime, its sha256 checked against the index and again before every run. The wheel is
//!   mined without importing it (Python's `ast`, inside the process sandbox), forged into a
//!   manifest and `capability.python.json`, and its function runs in the process sandbox with
//!   the unpacked wheel read-only, no network and no installation.
//! * [`oci`]: `capability/oci-command`. A tag is resolved to its manifest digest through the
//!   registry's HTTP API (no engine needed to inspect); the image runs by digest through
//!   podman or docker with the reference's hardening.
//! * [`wasm`]: `capability/wasm-module`. A WASM module pinned by sha256, from a file or an
//!   HTTP(S) URL, run on the WASM engine with WASI preopens only as granted.
//!
//! Every binder implements `capability_core::binder::MetabolicBinder`;
//! [`default_registry`] registers them in a `MetabolicBinderRegistry`, the gate that
//! validates each binding after `bind` and before `execute`, refuses incomplete authority
//! without approval and wraps every execution in a `MetabolicExecutionReceipt` 1.0.

pub mod oci;
pub mod pypi;
pub mod wasm;

use std::path::PathBuf;
use std::sync::Arc;

use capability_core::binder::{
    BinderError, METABOLIC_BINDING_VERSION, MetabolicBinder, MetabolicBinderRegistry,
};
use serde_json::{Map, Value, json};

/// What the default binders need: where they keep verified artifacts, the package index,
/// and which registries may be spoken to over plain HTTP.
#[derive(Clone, Debug)]
pub struct BinderConfig {
    /// `<home>/binders`: verified wheels and forges (`pypi/`), modules (`wasm/`).
    pub cache_dir: PathBuf,
    pub pypi: pypi::PypiConfig,
    pub oci: oci::OciOptions,
}

impl BinderConfig {
    /// The configuration of a home's binders: `index_url` as `--index-url` (else
    /// `$CAP_PYPI_URL`, `$PIP_INDEX_URL`, pip's configuration, PyPI), the loopback
    /// registries named insecure, the platform of multi-platform images (`os/arch`).
    pub fn new(
        cache_dir: PathBuf,
        index_url: Option<&str>,
        insecure_registries: &[String],
        platform: Option<&str>,
    ) -> Result<BinderConfig, BinderError> {
        let pypi = pypi::PypiConfig::new(
            pypi::index::resolve_index_url(index_url),
            cache_dir.join("pypi"),
        );
        let oci = oci_options(insecure_registries, platform)?;
        Ok(BinderConfig {
            cache_dir,
            pypi,
            oci,
        })
    }
}

/// OCI options with these insecure loopback registries and platform (default: this
/// machine's).
pub fn oci_options(
    insecure_registries: &[String],
    platform: Option<&str>,
) -> Result<oci::OciOptions, BinderError> {
    let mut options = oci::OciOptions {
        insecure_registries: insecure_registries.to_vec(),
        ..oci::OciOptions::default()
    };
    if let Some(p) = platform {
        options.platform = oci::Platform::parse(p).map_err(|e| BinderError(e.to_string()))?;
    }
    Ok(options)
}

/// The fields every binder's `MetabolicBinding` 1.0 starts with, in this order:
/// `bindingVersion`, `binderId` and `substrate` (`binder`'s), `locator`, `immutableArtifact`,
/// `createdAt` (now), `authority` (`{complete: false, effects, note}`: a metabolised
/// artifact's effects are never proven complete) and `evidence`. The caller appends its own
/// fields (`inspection`, `module`, ...) and wraps the map in `Value::Object`.
pub(crate) fn binding(
    binder: &dyn MetabolicBinder,
    locator: &str,
    immutable_artifact: &str,
    effects: &[&str],
    note: &str,
    evidence: Vec<String>,
) -> Map<String, Value> {
    let mut b = Map::new();
    b.insert("bindingVersion".into(), METABOLIC_BINDING_VERSION.into());
    b.insert("binderId".into(), binder.id().into());
    b.insert("substrate".into(), binder.substrate().into());
    b.insert("locator".into(), locator.into());
    b.insert("immutableArtifact".into(), immutable_artifact.into());
    b.insert("createdAt".into(), capability_core::js::now_iso().into());
    b.insert(
        "authority".into(),
        json!({"complete": false, "effects": effects, "note": note}),
    );
    b.insert("evidence".into(), evidence.into());
    b
}

/// The PyPI, OCI and WASM binders in one registry (in that order).
pub fn default_registry(config: &BinderConfig) -> Result<MetabolicBinderRegistry, BinderError> {
    let mut registry = MetabolicBinderRegistry::new();
    registry.register(Arc::new(pypi::PypiBinder::new(config.pypi.clone())))?;
    registry.register(Arc::new(oci::OciBinder::new(config.oci.clone())))?;
    registry.register(Arc::new(wasm::WasmBinder::new(
        config.cache_dir.join("wasm"),
    )))?;
    Ok(registry)
}

/// The binders this implementation has, for `cap coverage`: what each binds and the
/// boundary of its first execution.
pub fn coverage() -> Value {
    json!([
        {
            "binder": pypi::BINDER_ID,
            "substrate": pypi::SUBSTRATE,
            "discovery": "explicit",
            "artifact": "<name>@<version>#sha256:<wheel digest>, and every wheel of its dependency closure",
            "firstExecution": "process-sandbox",
            "network": "none",
            "notes": "Universal and interpreter-matching platform wheels; sha256 checked on download and before every run; mined with ast inside the sandbox; observed effects recorded."
        },
        {
            "binder": oci::BINDER_ID,
            "substrate": oci::SUBSTRATE,
            "discovery": "explicit",
            "artifact": "<registry>/<repository>@sha256:<manifest digest>",
            "firstExecution": "oci-container",
            "network": "none unless asked",
            "notes": "Resolved through the registry's HTTP API without an engine; run by digest with podman or docker, read-only, no capabilities, user 65534; a moved tag is refused."
        },
        {
            "binder": wasm::WASM_BINDER_ID,
            "substrate": wasm::WASM_SUBSTRATE,
            "discovery": "explicit",
            "artifact": "sha256:<module digest>",
            "firstExecution": "wasm",
            "network": "none",
            "notes": "A WASI preview 1 module from a file or URL; WASI preopens only as granted."
        }
    ])
}
