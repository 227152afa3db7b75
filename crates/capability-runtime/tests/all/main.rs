//! The integration tests of capability-runtime, one binary: one module per behaviour of the
//! governed runtime (lifecycle, built-ins, composition, discovery, evals, governance, trust,
//! stores, the in-process MCP adapter), many checked against the reference vectors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod builtins;
mod builtins_lifecycle;
mod composition;
mod composition_vectors;
mod discovery_vectors;
mod evals;
mod governance;
mod lifecycle;
mod mcp_adapter;
mod reference_discovery;
mod sqlite_store;
mod trust;
