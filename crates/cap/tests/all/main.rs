//! The integration tests of the `cap` command, one binary: one module per group of
//! commands, each running the built `cap` as a user would (arguments, exit codes, output).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod acquire;
mod binders;
mod common;
mod console;
mod documents;
mod governance;
mod mcp;
mod openapi;
mod packages;
mod runtime;
mod typescript;
