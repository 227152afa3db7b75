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
