//! The binders against real servers on loopback: a package index (pypiserver), an OCI
//! registry (docker-registry) and HTTP servers of the tests' own.

mod oci;
mod pypi_forge;
mod pypi_index;
mod wasm;
