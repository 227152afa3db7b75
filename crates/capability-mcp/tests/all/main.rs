//! The integration tests of capability-mcp, one binary: the MCP server in this process over
//! streamable HTTP on 127.0.0.1, driven by raw requests and by real clients (the MCP Inspector
//! CLI and the official conformance suite, from `tools/mcp`), one module per behaviour.
//!
//! The transports through the `cap` command (stdio, signals, flags) are tested with `cap`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod clients;
mod execute;
mod gateway;
mod http_gate;
mod http_lane;
mod http_sessions;
mod http_slow;
mod serve;
mod stdio_refusals;
mod tools;
