//! The request and result types of a run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::error::SandboxError;
use crate::report::BoundaryReport;

/// The effect names this crate gives meaning to (the Capability 1.x built-in effects that a
/// process boundary can open or keep closed); shared with every executor.
pub use capability_exec::effects;

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

/// What the host grants this run. Each list only takes effect when its effect is granted:
/// `read_paths` with `filesystem.read`, `write_paths` with `filesystem.write`, `env` with
/// `environment.read`, `secrets` with `secrets.read`. Paths are host paths, chosen by the host;
/// they appear at the same path inside the sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants {
    pub effects: BTreeSet<String>,
    pub read_paths: Vec<PathBuf>,
    pub write_paths: Vec<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
}

impl Grants {
    /// No effects: no network, no files beyond the package and a private tmp, no environment,
    /// no secrets, no child processes.
    pub fn none() -> Self {
        Grants::default()
    }

    /// Adds an effect.
    pub fn effect(mut self, effect: &str) -> Self {
        self.effects.insert(effect.to_string());
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
    pub fn env_var(mut self, name: &str, value: &str) -> Self {
        self.effects.insert(effects::ENVIRONMENT_READ.to_string());
        self.env.insert(name.to_string(), value.to_string());
        self
    }

    /// Grants `secrets.read` with one secret.
    pub fn secret(mut self, name: &str, value: &str) -> Self {
        self.effects.insert(effects::SECRETS_READ.to_string());
        self.secrets.insert(name.to_string(), value.to_string());
        self
    }

    pub fn has(&self, effect: &str) -> bool {
        self.effects.contains(effect)
    }

    pub fn network(&self) -> bool {
        self.has(effects::NETWORK_CONNECT)
    }

    pub fn spawn(&self) -> bool {
        self.has(effects::PROCESS_SPAWN)
    }
}

/// Resource limits. [`Limits::default`] suits a short tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit; the whole process tree is killed when it passes. Default 30 s.
    pub wall_timeout: Duration,
    /// CPU time (user + system) of the guest process. Default 10 s.
    pub cpu_time: Duration,
    /// Memory of the whole sandbox: a cgroup (v2 `memory.max`, or v1
    /// `memory.limit_in_bytes` + `memory.memsw.limit_in_bytes`) when the host offers one,
    /// counting shared memory, SysV segments, memfds and /tmp pages too; otherwise RLIMIT_AS
    /// with SysV shared memory and memfds refused. RLIMIT_DATA is set as well, so that plain
    /// allocations fail with ENOMEM. The boundary report says which mechanism held it (see
    /// `ISOLATION.md`). Default 1 GiB.
    pub memory_bytes: u64,
    /// Processes (and threads) in the sandbox. Default 64.
    pub max_pids: u32,
    /// Open file descriptors per process. Default 256.
    pub max_open_files: u64,
    /// Largest file the guest may write. Default 64 MiB.
    pub max_file_size: u64,
    /// Size of the private writable `/tmp`. Default 64 MiB.
    pub tmp_size: u64,
    /// Largest protocol response accepted on stdout. Default 16 MiB.
    pub max_output_bytes: usize,
    /// Largest module file accepted, checked on the host from the file's size before it is
    /// read (and while it is hashed). Default 256 MiB
    /// ([`capability_exec::DEFAULT_MAX_MODULE_BYTES`]).
    pub max_module_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            wall_timeout: Duration::from_secs(30),
            cpu_time: Duration::from_secs(10),
            memory_bytes: 1 << 30,
            max_pids: 64,
            max_open_files: 256,
            max_file_size: 64 << 20,
            tmp_size: 64 << 20,
            max_output_bytes: 16 << 20,
            max_module_bytes: capability_exec::DEFAULT_MAX_MODULE_BYTES,
        }
    }
}

/// The capability hook a run calls. Plan, verify and rollback cross the same boundary as
/// execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Plan,
    Execute,
    Verify,
    Rollback,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Plan => "plan",
            Op::Execute => "execute",
            Op::Verify => "verify",
            Op::Rollback => "rollback",
        }
    }
}

/// One call into a capability.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub op: Op,
    pub input: Value,
    /// The plan the runtime made (for execute, verify and rollback).
    pub plan: Option<Value>,
    /// The execution output (for verify).
    pub output: Option<Value>,
    /// The receipt being rolled back (for rollback).
    pub receipt: Option<Value>,
}

impl Invocation {
    pub fn execute(input: Value) -> Self {
        Invocation {
            op: Op::Execute,
            input,
            plan: None,
            output: None,
            receipt: None,
        }
    }

    pub fn plan(input: Value) -> Self {
        Invocation {
            op: Op::Plan,
            ..Invocation::execute(input)
        }
    }

    pub fn verify(input: Value, output: Value) -> Self {
        Invocation {
            op: Op::Verify,
            output: Some(output),
            ..Invocation::execute(input)
        }
    }

    pub fn rollback(input: Value, receipt: Value) -> Self {
        Invocation {
            op: Op::Rollback,
            receipt: Some(receipt),
            ..Invocation::execute(input)
        }
    }

    pub fn with_plan(mut self, plan: Value) -> Self {
        self.plan = Some(plan);
        self
    }
}

/// The result of a run that entered the boundary.
#[derive(Debug)]
pub struct RunOutcome {
    /// The hook's output, or why the run failed (guest error, limit, protocol violation,
    /// manifest mismatch, ...).
    pub result: Result<Value, SandboxError>,
    /// False when the capability has no hook for the op (`plan` then yields `{}`, `verify`
    /// yields `null`).
    pub hook_present: bool,
    /// The boundary used and the limits actually applied, for the receipt.
    pub boundary: BoundaryReport,
    /// Wall time from spawn to exit.
    pub duration: Duration,
    /// The end of the guest's stderr (at most 64 KiB), for diagnostics. Not part of the result.
    pub stderr: String,
}
