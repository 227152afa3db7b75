//! What a run of package code needs besides the shared vocabulary: the module, its kind, and
//! what only this boundary limits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use capability_exec::{BoundaryLimits, Limits, RunOutcome, SandboxReport};
use serde::Serialize;
use serde_json::Value;

use crate::error::SandboxError;

/// What a run of this crate's boundaries returns.
pub(crate) type Outcome = RunOutcome<SandboxError, SandboxReport>;

/// A module-backed capability as a package declares it: the `package.json` `capability` export
/// descriptor `{module, manifest, integrity?}` resolved against the package root.
#[derive(Clone, Debug)]
pub struct ModuleSpec {
    /// The package directory (the one holding `package.json`).
    pub package_root: PathBuf,
    /// The directory mounted read-only into the sandbox (at `/package`). Defaults to
    /// `package_root`; set it to an npm install root so that `node_modules` dependencies next to
    /// the package resolve. It must contain `package_root`.
    pub install_root: Option<PathBuf>,
    /// Package-relative module path, `./...`.
    pub module: String,
    /// Optional module integrity: sha256 (hex or base64, optional `sha256-` prefix) or
    /// `sha512-<base64>` (SRI). Checked on the exact module bytes before anything runs.
    pub integrity: Option<String>,
    /// The inert manifest from the package metadata. The manifest the module itself exports
    /// must have the same canonical hash.
    pub manifest: Value,
}

impl ModuleSpec {
    /// Builds a spec from a `package.json` `capability.exports` entry. Legacy string exports are
    /// refused: they carry no inert manifest, so they are not safe to acquire.
    pub fn from_export(
        package_root: impl Into<PathBuf>,
        capability_id: &str,
        export: &Value,
    ) -> Result<Self, SandboxError> {
        let invalid = |detail: String| SandboxError::Invalid { detail };
        let obj = match export {
            Value::Object(o) => o,
            Value::String(_) => {
                return Err(invalid(format!(
                    "export {capability_id:?} is a legacy module path without an inert manifest"
                )));
            }
            _ => {
                return Err(invalid(format!(
                    "export {capability_id:?} must be a module path or descriptor"
                )));
            }
        };
        let module = obj
            .get("module")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("export {capability_id:?} has no module string")))?;
        let manifest = obj
            .get("manifest")
            .cloned()
            .ok_or_else(|| invalid(format!("export {capability_id:?} has no manifest")))?;
        if manifest.get("id").and_then(Value::as_str) != Some(capability_id) {
            return Err(invalid(format!(
                "{capability_id}: manifest id must equal export id"
            )));
        }
        let integrity = match obj.get("integrity") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(invalid(format!(
                    "{capability_id}: integrity must be a string"
                )));
            }
        };
        Ok(ModuleSpec {
            package_root: package_root.into(),
            install_root: None,
            module: module.to_string(),
            integrity,
            manifest,
        })
    }

    /// The manifest id, or `"<unknown>"`.
    pub fn id(&self) -> &str {
        self.manifest
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("<unknown>")
    }
}

/// How a module runs, implied by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleKind {
    /// `.js`, `.mjs`, `.cjs`: node, through the embedded shim.
    Node,
    /// `.py`: python3, through the embedded shim.
    Python,
    /// `.wasm`: not run here; use the WASM executor (`capability-wasm`).
    Wasm,
    /// Anything else: an executable speaking the native protocol.
    Native,
}

impl ModuleKind {
    /// Classifies a module path by its extension.
    pub fn of(module: &str) -> ModuleKind {
        let ext = Path::new(module)
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("js" | "mjs" | "cjs") => ModuleKind::Node,
            Some("py") => ModuleKind::Python,
            Some("wasm") => ModuleKind::Wasm,
            _ => ModuleKind::Native,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ModuleKind::Node => "node",
            ModuleKind::Python => "python",
            ModuleKind::Wasm => "wasm",
            ModuleKind::Native => "native",
        }
    }
}

/// What only the process sandbox (and an OCI container) limits: the part of [`Limits`] beside
/// the wall clock, memory, `/tmp` size and output cap every boundary has.
/// `Limits::<ProcessLimits>::default()` suits a short tool call: 30 s, 1 GiB, a 64 MiB `/tmp`,
/// 16 MiB of output.
///
/// In [`Limits`]: `timeout` is the wall clock (the whole process tree is killed when it
/// passes); `memory_bytes` is the memory of the whole sandbox — a cgroup (v2 `memory.max`, or
/// v1 `memory.limit_in_bytes` + `memory.memsw.limit_in_bytes`) when the host offers one,
/// counting shared memory, SysV segments, memfds and /tmp pages too; otherwise RLIMIT_AS with
/// SysV shared memory and memfds refused; RLIMIT_DATA is set as well, so that plain
/// allocations fail with ENOMEM (the boundary report says which mechanism held it, see
/// `ISOLATION.md`); `tmp_bytes` is the size of the private writable `/tmp` (tmpfs);
/// `output_bytes` is the largest protocol response accepted on stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessLimits {
    /// CPU time (user + system) of the guest process. Default 10 s.
    pub cpu_time: Duration,
    /// Processes (and threads) in the sandbox. Default 64.
    pub max_pids: u32,
    /// Open file descriptors per process. Default 256.
    pub max_open_files: u64,
    /// Largest file the guest may write. Default 64 MiB.
    pub max_file_size: u64,
    /// Largest module file accepted, checked on the host from the file's size before it is
    /// read (and while it is hashed). Default 256 MiB
    /// ([`capability_exec::DEFAULT_MAX_MODULE_BYTES`]).
    pub max_module_bytes: u64,
}

impl Default for ProcessLimits {
    fn default() -> Self {
        ProcessLimits::defaults().boundary
    }
}

impl BoundaryLimits for ProcessLimits {
    fn defaults() -> Limits<ProcessLimits> {
        Limits {
            timeout: Duration::from_secs(30),
            memory_bytes: 1 << 30,
            tmp_bytes: 64 << 20,
            output_bytes: 16 << 20,
            boundary: ProcessLimits {
                cpu_time: Duration::from_secs(10),
                max_pids: 64,
                max_open_files: 256,
                max_file_size: 64 << 20,
                max_module_bytes: capability_exec::DEFAULT_MAX_MODULE_BYTES,
            },
        }
    }
}
