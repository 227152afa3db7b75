//! The integration tests of capability-journal, one binary: one module per behaviour
//! (the quarantine of records recovery cannot read).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod quarantine;
