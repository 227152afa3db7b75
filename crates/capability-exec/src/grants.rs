//! Grants: what a boundary may open, decided by the effects the runtime authorized.
//!
//! The rule is the same for every executor: the authorized effects are granted, and of the
//! host's own resources ([`HostGrants`]) each item is opened only when its effect is granted
//! — paths with `filesystem.read` / `filesystem.write`, environment variables with
//! `environment.read`, secrets with `secrets.read`. [`HostGrants::open`] applies it once;
//! executors translate the result into their own mechanism (bind mounts, preopens, ...).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The effect names a boundary gives meaning to (the Capability 1.x built-in effects that a
/// boundary can open or keep closed).
pub mod effects {
    pub const FILESYSTEM_READ: &str = "filesystem.read";
    pub const FILESYSTEM_WRITE: &str = "filesystem.write";
    pub const NETWORK_CONNECT: &str = "network.connect";
    pub const PROCESS_SPAWN: &str = "process.spawn";
    pub const ENVIRONMENT_READ: &str = "environment.read";
    pub const SECRETS_READ: &str = "secrets.read";
}

/// What the host is willing to open to a capability, each item only when the matching
/// effect was granted.
#[derive(Clone, Debug, Default)]
pub struct HostGrants {
    /// Opened read-only with `filesystem.read`.
    pub read_paths: Vec<PathBuf>,
    /// Opened read-write with `filesystem.write`.
    pub write_paths: Vec<PathBuf>,
    /// Passed with `environment.read`.
    pub env: BTreeMap<String, String>,
    /// Injected with `secrets.read`.
    pub secrets: BTreeMap<String, String>,
}

/// What one run may open: the granted effects and the host resources they unlock.
#[derive(Clone, Copy, Debug)]
pub struct Opened<'a> {
    /// The granted effects, as given.
    pub effects: &'a [String],
    /// Host paths to open read-only (empty without `filesystem.read`).
    pub read_paths: &'a [PathBuf],
    /// Host paths to open read-write (empty without `filesystem.write`).
    pub write_paths: &'a [PathBuf],
    /// Environment variables to pass (`None` without `environment.read`).
    pub env: Option<&'a BTreeMap<String, String>>,
    /// Secrets to inject (`None` without `secrets.read`).
    pub secrets: Option<&'a BTreeMap<String, String>>,
}

impl Opened<'_> {
    /// Whether `effect` was granted.
    pub fn has(&self, effect: &str) -> bool {
        self.effects.iter().any(|e| e == effect)
    }
}

impl HostGrants {
    /// What a run with these granted effects may open.
    pub fn open<'a>(&'a self, granted: &'a [String]) -> Opened<'a> {
        let has = |effect: &str| granted.iter().any(|e| e == effect);
        Opened {
            effects: granted,
            read_paths: if has(effects::FILESYSTEM_READ) {
                &self.read_paths
            } else {
                &[]
            },
            write_paths: if has(effects::FILESYSTEM_WRITE) {
                &self.write_paths
            } else {
                &[]
            },
            env: has(effects::ENVIRONMENT_READ).then_some(&self.env),
            secrets: has(effects::SECRETS_READ).then_some(&self.secrets),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_resources_open_only_with_their_effect() {
        let host = HostGrants {
            read_paths: vec!["/data".into()],
            write_paths: vec!["/out".into()],
            env: BTreeMap::from([("LANG".into(), "C".into())]),
            secrets: BTreeMap::from([("TOKEN".into(), "s".into())]),
        };
        let none = host.open(&[]);
        assert!(none.read_paths.is_empty() && none.write_paths.is_empty());
        assert!(none.env.is_none() && none.secrets.is_none());
        let granted = [
            effects::FILESYSTEM_READ.to_string(),
            effects::SECRETS_READ.to_string(),
        ];
        let some = host.open(&granted);
        assert_eq!(some.read_paths, host.read_paths.as_slice());
        assert!(some.write_paths.is_empty());
        assert!(some.env.is_none());
        assert_eq!(some.secrets, Some(&host.secrets));
        assert!(some.has(effects::SECRETS_READ) && !some.has(effects::NETWORK_CONNECT));
    }
}
