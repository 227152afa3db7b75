//! The host's tests, one module per behaviour, in one binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use capability_host::{Host, HostConfig};

mod acquire;
mod actions;
mod approval_events;
mod audit_scope;
mod binders;
mod guard;
mod invoke;
mod limits;
mod openapi_lazy;
mod principals;
mod remote;
mod throttle;
mod tokens;
mod webhook;
mod witness;

/// A host on `<dir>/home` with the Cedar policy `policy` (in `<dir>/policy.cedar`).
pub fn host_with(dir: &Path, policy: Option<&str>) -> Host {
    let mut config = HostConfig {
        home: Some(dir.join("home")),
        ..HostConfig::default()
    };
    if let Some(text) = policy {
        let file = dir.join("policy.cedar");
        std::fs::write(&file, text).unwrap();
        config.policies = vec![file];
    }
    Host::open(config).unwrap()
}
