//! # capability-runtime
//!
//! The governed runtime: registry, plan, authorize, execute, verify, receipt, rollback.

pub mod builtins;
