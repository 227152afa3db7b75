//! The integration tests of capability-openapi, one binary: one module per behaviour (the
//! reference import, the HTTP executor against loopback servers, the request sent as
//! planned, the documents kept in a home, `https://`, documents built one operation at a
//! time).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod credential_echo;
mod fuzz;
mod http_executor;
mod import;
mod lazy;
mod request_target;
mod store;
mod tls;
