//! The integration tests of capability-core, one binary: one module per behaviour, most of
//! them checking every case of a reference vector file (`testdata/vectors/`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod authorization;
mod binding_validation;
mod bridge_validation;
mod canonical_json;
mod document_round_trips;
mod fuzz;
mod gap_schema;
mod index_validation;
mod lock_validation;
mod manifest_validation;
mod mcp_projection;
mod package_declaration;
mod plan_fingerprint;
mod protocol;
mod published_schemas;
mod site_validation;
mod validation_support;
