//! The integration tests of capability-wasm, one binary: one module per behaviour of the WASM
//! executor (the capability ABI, loading, the executor trait, hostile guests).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod abi;
mod common;
mod executor;
mod hostile;
mod loading;
