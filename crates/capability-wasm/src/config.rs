//! Engine configuration, the WASM part of per-run limits, and what grants the engine accepts.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use capability_exec::{BoundaryLimits, Grants, Limits, effects};

use crate::error::{WasmError, WasmErrorKind};

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

/// What only the WASM boundary limits: the part of [`Limits`] beside the wall clock,
/// memory, `/tmp` quota and stdout cap every boundary has. `Limits::<WasmLimits>::default()`
/// gives a guest 10 s, 128 MiB of memory, a 16 MiB `/tmp` and 4 MiB of stdout.
///
/// In [`Limits`]: `timeout` is enforced by epoch interruption (and by refusing sleeps past
/// it); `memory_bytes` is the largest linear memory (the pool slot bounds it too);
/// `tmp_bytes` is the quota of the private `/tmp` (`0` gives the guest no `/tmp` at all);
/// `output_bytes` is the largest reply the guest may write to stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WasmLimits {
    /// Fuel budget: roughly one unit per WebAssembly instruction.
    pub fuel: u64,
    /// Largest envelope written to the guest's stdin.
    pub stdin_bytes: u64,
    /// Stderr kept for diagnostics (the rest is dropped, not an error).
    pub stderr_bytes: u64,
    /// Most table elements (function pointers) a guest may grow a table to.
    pub table_elements: u64,
}

impl Default for WasmLimits {
    fn default() -> Self {
        WasmLimits::defaults().boundary
    }
}

impl BoundaryLimits for WasmLimits {
    fn defaults() -> Limits<WasmLimits> {
        Limits {
            timeout: Duration::from_secs(10),
            memory_bytes: 128 << 20,
            tmp_bytes: 16 << 20,
            output_bytes: 4 << 20,
            boundary: WasmLimits {
                fuel: 5_000_000_000,
                stdin_bytes: 4 << 20,
                stderr_bytes: 64 << 10,
                table_elements: 100_000,
            },
        }
    }
}

/// Checks that every opening is backed by its effect and that the paths can be preopened:
/// absolute and normalized (each shows at its host path), not the private `/tmp`, not twice,
/// directories.
pub(crate) fn check_grants(grants: &Grants, with_tmp: bool) -> Result<(), WasmError> {
    let bad = |m: String| Err(WasmError::new(WasmErrorKind::InvalidGrants, m));
    if !grants.read_paths.is_empty() && !grants.has(effects::FILESYSTEM_READ) {
        return bad("read directories granted without filesystem.read".into());
    }
    if !grants.write_paths.is_empty() && !grants.has(effects::FILESYSTEM_WRITE) {
        return bad("write directories granted without filesystem.write".into());
    }
    if !grants.env.is_empty() && !grants.has(effects::ENVIRONMENT_READ) {
        return bad("environment variables granted without environment.read".into());
    }
    let mut seen = BTreeSet::new();
    if with_tmp {
        seen.insert(TMP_GUEST_PATH.to_string());
    }
    for p in grants.read_paths.iter().chain(&grants.write_paths) {
        let g = p.display().to_string();
        let clean = g.starts_with('/')
            && (g == "/" || !g.ends_with('/'))
            && !g.contains('\0')
            && !g.split('/').any(|s| s == "." || s == "..");
        if !clean {
            return bad(format!(
                "granted path {g:?} must be absolute and normalized"
            ));
        }
        if !seen.insert(g.clone()) {
            return bad(format!(
                "granted path {g:?} is mounted twice (or is the private /tmp)"
            ));
        }
        if !p.is_dir() {
            return bad(format!("granted path {g:?} is not a directory"));
        }
    }
    for (k, v) in &grants.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return bad(format!("invalid environment variable name {k:?}"));
        }
    }
    Ok(())
}
