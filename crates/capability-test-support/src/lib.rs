//! # capability-test-support
//!
//! What the workspace's tests and benches share, written once. A dev-dependency only: no
//! product crate depends on it.
//!
//! | module | what |
//! | --- | --- |
//! | [`measure`] | percentiles of individually timed calls, and paired runs that alternate two calls so that both see the same machine |
//! | [`http`] | loopback HTTP: a server from an axum router or from a route table, a free port, the URL a server child announces, a raw HTTP/1.1 client |
//! | [`tls`] | `https://` on loopback: a test certificate authority and a TLS terminator in front of a plain server |
//! | [`registry`] | a fake npm registry on loopback ([`registry::Registry`]), crafted tarballs and indexes, verdaccio |
//! | [`pypi`] | wheels built in Rust, sdists, and pypiserver on loopback |
//! | [`oci`] | docker-registry on loopback, podman, a scratch image of a static guest pushed to it |
//! | [`mcp`] | the MCP clients of `tools/mcp` (Python client, Inspector CLI, conformance suite) and a raw `POST /mcp` |
//! | [`process`] | the processes alive on this machine |
//! | [`vectors`] | the reference vectors and other files of `testdata/` |
//! | [`fuzz`] | the configuration of the property-based fuzz tests |
//! | [`capabilities`] | the `Add` capability the reference's tests use |
//! | [`approvals`] | an approval store that counts its reads, generated pending approvals |
//! | [`governed`] | the governed-invoke workload: 48 capabilities under 100 Cedar policies |
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod approvals;
pub mod capabilities;
pub mod fuzz;
pub mod governed;
pub mod http;
pub mod mcp;
pub mod measure;
pub mod oci;
pub mod process;
pub mod pypi;
pub mod registry;
pub mod tls;
pub mod vectors;
