//! The integration tests of capability-acquire, one binary: one module per behaviour of
//! acquisition (indexes and the world search, fetching with progress, registry keys and
//! signatures, provenance attestations, integrity, safe unpacking, installing), against
//! servers on 127.0.0.1 from capability-test-support.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod attestations;
mod error;
mod install;
mod integrity;
mod probe;
mod progress;
mod registry;
mod signatures;
mod store;
mod unpack;
mod world;
