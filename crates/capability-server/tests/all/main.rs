//! The integration tests of capability-server, one binary: the HTTP API and the console on
//! 127.0.0.1, one module per behaviour (the API, the console, refusals, the webhook).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod actions;
mod api;
mod console;
mod errors;
mod fixture;
mod webhook;
