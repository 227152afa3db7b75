//! Engine configuration, per-run limits and grants.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{WasmError, WasmErrorKind};

/// Effects that change what the WASM boundary opens.
pub const FILESYSTEM_READ: &str = "filesystem.read";
pub const FILESYSTEM_WRITE: &str = "filesystem.write";
pub const ENVIRONMENT_READ: &str = "environment.read";
pub const NETWORK_CONNECT: &str = "network.connect";
pub const PROCESS_SPAWN: &str = "process.spawn";

/// The guest path of the private per-run scratch directory.
pub const TMP_GUEST_PATH: &str = "/tmp";

/// How a [`crate::WasmEngine`] is built. Fixed for the engine's life.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Pooled instance slots: the most runs that can be in flight at once. Default 64.
    pub max_instances: u32,
    /// Size of a pooled memory slot: no run may use more. Default 256 MiB.
    pub max_memory_bytes: u64,
    /// Bytes of each pooled memory kept resident between runs (reset in place rather than
    /// released and faulted in again). Default 2 MiB.
    pub memory_keep_resident: u64,
    /// Native stack available to guest code; unbounded recursion traps past it. Default 512 KiB.
    pub max_wasm_stack: usize,
    /// Epoch tick: timeouts are enforced to within one tick. Default 5 ms.
    pub epoch_tick: Duration,
    /// Where per-run scratch directories are created. Default `<temp dir>/capability-wasm`.
    pub scratch_root: PathBuf,
    /// Compiled modules kept in the cache (least recently used evicted). Default 64.
    pub cache_capacity: usize,
    /// Largest module accepted, in bytes. Default 64 MiB.
    pub max_module_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_instances: 64,
            max_memory_bytes: 256 << 20,
            memory_keep_resident: 2 << 20,
            max_wasm_stack: 512 << 10,
            epoch_tick: Duration::from_millis(5),
            scratch_root: std::env::temp_dir().join("capability-wasm"),
            cache_capacity: 64,
            max_module_bytes: 64 << 20,
        }
    }
}

/// Resource limits of one run. Every run reports them in its [`crate::BoundaryReport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock budget, enforced by epoch interruption (and by refusing sleeps past it).
    pub timeout: Duration,
    /// Fuel budget: roughly one unit per WebAssembly instruction.
    pub fuel: u64,
    /// Largest linear memory (and the pool slot bounds it too).
    pub memory_bytes: u64,
    /// Quota of the private `/tmp`; `0` gives the guest no `/tmp` at all.
    pub tmp_bytes: u64,
    /// Largest envelope written to the guest's stdin.
    pub stdin_bytes: u64,
    /// Largest reply the guest may write to stdout.
    pub stdout_bytes: u64,
    /// Stderr kept for diagnostics (the rest is dropped, not an error).
    pub stderr_bytes: u64,
    /// Most table elements (function pointers) a guest may grow a table to.
    pub table_elements: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(10),
            fuel: 5_000_000_000,
            memory_bytes: 128 << 20,
            tmp_bytes: 16 << 20,
            stdin_bytes: 4 << 20,
            stdout_bytes: 4 << 20,
            stderr_bytes: 64 << 10,
            table_elements: 100_000,
        }
    }
}

/// A host directory shown to the guest at a guest path. Both are chosen by the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
}

impl Preopen {
    pub fn new(host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        Preopen {
            host: host.into(),
            guest: guest.into(),
        }
    }
}

/// What the host authorized for this run. Nothing is open unless granted here.
///
/// * `read_dirs` are mounted read-only and need `filesystem.read`;
/// * `write_dirs` are mounted read-write and need `filesystem.write`;
/// * `env` is passed only with `environment.read` (the host's own environment never is);
/// * `network.connect` and `process.spawn` open nothing: WASI preview 1 has no socket
///   creation and no process API, so the report says they are unavailable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    pub effects: BTreeSet<String>,
    pub read_dirs: Vec<Preopen>,
    pub write_dirs: Vec<Preopen>,
    pub env: BTreeMap<String, String>,
}

impl Grants {
    /// No effects, nothing open.
    pub fn none() -> Self {
        Grants::default()
    }

    pub fn with_effect(mut self, effect: impl Into<String>) -> Self {
        self.effects.insert(effect.into());
        self
    }

    /// Adds a read-only preopen and the `filesystem.read` effect.
    pub fn read_dir(mut self, host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        self.effects.insert(FILESYSTEM_READ.to_string());
        self.read_dirs.push(Preopen::new(host, guest));
        self
    }

    /// Adds a read-write preopen and the `filesystem.write` effect.
    pub fn write_dir(mut self, host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        self.effects.insert(FILESYSTEM_WRITE.to_string());
        self.write_dirs.push(Preopen::new(host, guest));
        self
    }

    /// Adds an environment variable and the `environment.read` effect.
    pub fn env_var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.effects.insert(ENVIRONMENT_READ.to_string());
        self.env.insert(name.into(), value.into());
        self
    }

    pub fn has(&self, effect: &str) -> bool {
        self.effects.contains(effect)
    }

    /// Checks that every opening is backed by its effect and that guest paths are sane.
    pub(crate) fn check(&self, with_tmp: bool) -> Result<(), WasmError> {
        let bad = |m: String| Err(WasmError::new(WasmErrorKind::InvalidGrants, m));
        if !self.read_dirs.is_empty() && !self.has(FILESYSTEM_READ) {
            return bad("read directories granted without filesystem.read".into());
        }
        if !self.write_dirs.is_empty() && !self.has(FILESYSTEM_WRITE) {
            return bad("write directories granted without filesystem.write".into());
        }
        if !self.env.is_empty() && !self.has(ENVIRONMENT_READ) {
            return bad("environment variables granted without environment.read".into());
        }
        let mut seen = BTreeSet::new();
        if with_tmp {
            seen.insert(TMP_GUEST_PATH.to_string());
        }
        for p in self.read_dirs.iter().chain(&self.write_dirs) {
            let g = p.guest.as_str();
            let clean = g.starts_with('/')
                && (g == "/" || !g.ends_with('/'))
                && !g.contains('\0')
                && !g.split('/').any(|s| s == "." || s == "..");
            if !clean {
                return bad(format!("guest path {g:?} must be absolute and normalized"));
            }
            if !seen.insert(g.to_string()) {
                return bad(format!(
                    "guest path {g:?} is mounted twice (or is the private /tmp)"
                ));
            }
            if !p.host.is_dir() {
                return bad(format!(
                    "host path {:?} for {g:?} is not a directory",
                    p.host.display().to_string()
                ));
            }
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return bad(format!("invalid environment variable name {k:?}"));
            }
        }
        Ok(())
    }
}
