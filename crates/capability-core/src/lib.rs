//! # capability-core
//!
//! The pure heart of the Capability 1.x implementation: documents, canonical JSON, hashing,
//! validators, effects, plans, protocol info and conformance. No I/O.

pub mod dates;
pub mod effects;
pub mod error;
pub mod js;
pub mod json;
pub mod published;
pub mod urls;
pub mod validate;

pub use error::{CapabilityError, ErrorCode};
