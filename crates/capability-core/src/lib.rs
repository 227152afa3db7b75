//! # capability-core
//!
//! The pure heart of the Capability 1.x implementation: documents, canonical JSON, hashing,
//! validators, effects, plans, protocol info and conformance. No I/O.

pub mod authorization;
pub mod binder;
pub mod conformance;
pub mod dates;
pub mod discovery;
pub mod documents;
pub mod effects;
pub mod error;
pub mod gap;
pub mod index;
pub mod js;
pub mod json;
pub mod manifest;
pub mod mcp;
pub mod plan;
pub mod protocol;
pub mod published;
pub mod receipt;
pub mod schema;
pub mod urls;
pub mod validate;

pub use error::{CapabilityError, ErrorCode};
pub use validate::{
    create_npm_cli_bridge_descriptor, validate_binding, validate_bridge, validate_gap,
    validate_index, validate_lock, validate_manifest, validate_package_declaration, validate_site,
};
