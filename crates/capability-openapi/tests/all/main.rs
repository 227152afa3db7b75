//! The integration tests of capability-openapi, one binary: one module per behaviour (the
//! reference import, the HTTP executor against loopback servers, `https://`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_executor;
mod import;
mod tls;
