//! The integration tests of capability-sandbox, one binary: one module per behaviour of the
//! process sandbox (hostile guests, one per attack surface), the runners, the OCI executor,
//! sandboxed children, and package acquisition.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod child;
mod common;
mod doctor;
mod fixture_add;
mod hooks;
mod hostile_env;
mod hostile_filesystem;
mod hostile_grants;
mod hostile_home;
mod hostile_info;
mod hostile_limits;
mod hostile_memory;
mod hostile_network;
mod hostile_process;
mod oci;
mod one_sandbox_per_run;
mod package_acquisition;
mod run_cleanup;
mod runtime_receipts;
