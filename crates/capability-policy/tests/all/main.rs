//! The integration tests of capability-policy, one binary: one module per behaviour of the
//! governance layer (decisions, Cedar, approvals, the audit log, Brane parity, scenarios).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod approvals;
mod audit_log;
mod brane_parity;
mod cedar_checks;
mod cedar_contract;
mod cedar_numbers;
mod common;
mod decisions;
mod fuzz;
mod model;
mod open_action;
mod redaction;
mod scenarios_cedar;
mod scenarios_rust;
mod single_event;
