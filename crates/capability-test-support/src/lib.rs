//! # capability-test-support
//!
//! What the workspace's tests and benches share, written once: measurement ([`measure`]:
//! percentiles of individually timed calls, and paired runs that alternate two calls so that
//! both see the same machine), workloads ([`governed`]). A dev-dependency only: no product
//! crate depends on it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod governed;
pub mod measure;
