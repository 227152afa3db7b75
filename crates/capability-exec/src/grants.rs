//! Grants: what a boundary may open, decided by the effects the runtime authorized.
//!
//! The rule is the same for every executor: the authorized effects are granted, and of the
//! host's own resources ([`HostGrants`]) each item is opened only when its effect is granted
//! — paths with `filesystem.read` / `filesystem.write`, environment variables with
//! `environment.read`, secrets with `secrets.read`. [`HostGrants::grants`] applies it once and
//! gives the [`Grants`] of one run; each boundary translates them into its own mechanism
//! (bind mounts, preopens, container flags, ...).

use std::collections::{BTreeMap, BTreeSet};
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
/// effect was granted ([`HostGrants::grants`]).
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

impl HostGrants {
    /// The grants of a run with these authorized effects: the effects, and of the host's
    /// resources only those their effect opens.
    pub fn grants(&self, granted: &[String]) -> Grants {
        let effects: BTreeSet<String> = granted.iter().cloned().collect();
        let has = |effect: &str| effects.contains(effect);
        Grants {
            read_paths: if has(effects::FILESYSTEM_READ) {
                self.read_paths.clone()
            } else {
                Vec::new()
            },
            write_paths: if has(effects::FILESYSTEM_WRITE) {
                self.write_paths.clone()
            } else {
                Vec::new()
            },
            env: if has(effects::ENVIRONMENT_READ) {
                self.env.clone()
            } else {
                BTreeMap::new()
            },
            secrets: if has(effects::SECRETS_READ) {
                self.secrets.clone()
            } else {
                BTreeMap::new()
            },
            effects,
        }
    }
}

/// What one run is granted: the authorized effects, and the host resources they open. Each
/// list only takes effect when its effect is granted: `read_paths` with `filesystem.read`,
/// `write_paths` with `filesystem.write`, `env` with `environment.read`, `secrets` with
/// `secrets.read` (a boundary ignores, or refuses, a list without its effect). Paths are host
/// paths, chosen by the host; every boundary shows them at the same path inside.
///
/// What a boundary cannot open stays closed whatever the grant, and its report says so: a
/// WASI guest has no sockets, no processes and no channel for secrets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    pub effects: BTreeSet<String>,
    pub read_paths: Vec<PathBuf>,
    pub write_paths: Vec<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
}

impl Grants {
    /// No effects: no network, no files beyond what the boundary always gives (the package, a
    /// private `/tmp`), no environment, no secrets, no child processes.
    pub fn none() -> Self {
        Grants::default()
    }

    /// Adds an effect.
    pub fn effect(mut self, effect: impl Into<String>) -> Self {
        self.effects.insert(effect.into());
        self
    }

    /// Grants `filesystem.read` on `path`.
    pub fn read(mut self, path: impl Into<PathBuf>) -> Self {
        self.effects.insert(effects::FILESYSTEM_READ.to_string());
        self.read_paths.push(path.into());
        self
    }

    /// Grants `filesystem.write` (and read) on `path`.
    pub fn write(mut self, path: impl Into<PathBuf>) -> Self {
        self.effects.insert(effects::FILESYSTEM_WRITE.to_string());
        self.write_paths.push(path.into());
        self
    }

    /// Grants `environment.read` with one variable.
    pub fn env_var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.effects.insert(effects::ENVIRONMENT_READ.to_string());
        self.env.insert(name.into(), value.into());
        self
    }

    /// Grants `secrets.read` with one secret.
    pub fn secret(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.effects.insert(effects::SECRETS_READ.to_string());
        self.secrets.insert(name.into(), value.into());
        self
    }

    /// Whether `effect` is granted.
    pub fn has(&self, effect: &str) -> bool {
        self.effects.contains(effect)
    }

    /// Whether `network.connect` is granted.
    pub fn network(&self) -> bool {
        self.has(effects::NETWORK_CONNECT)
    }

    /// Whether `process.spawn` is granted.
    pub fn spawn(&self) -> bool {
        self.has(effects::PROCESS_SPAWN)
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
        assert_eq!(host.grants(&[]), Grants::none());
        let granted = [
            effects::FILESYSTEM_READ.to_string(),
            effects::SECRETS_READ.to_string(),
        ];
        let some = host.grants(&granted);
        assert_eq!(some.read_paths, host.read_paths);
        assert!(some.write_paths.is_empty());
        assert!(some.env.is_empty());
        assert_eq!(some.secrets, host.secrets);
        assert!(some.has(effects::SECRETS_READ) && !some.network() && !some.spawn());
        assert_eq!(
            some,
            Grants::none()
                .read("/data")
                .secret("TOKEN", "s")
                .effect(effects::FILESYSTEM_READ)
        );
    }
}
