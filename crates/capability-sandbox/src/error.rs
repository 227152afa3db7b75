//! The one error type of this crate.

use std::path::PathBuf;
use std::time::Duration;

use capability_exec::GuestError;

/// Everything that can go wrong when running package code behind a boundary.
///
/// [`crate::run_module`] returns it as `Err` when the run was refused before any code ran
/// (integrity, path escape, unavailable boundary, ...); once the boundary was entered, failures
/// come back inside [`crate::RunOutcome::result`], next to the boundary report. Messages are
/// lowercase one-liners that quote the offending input; [`SandboxError::kind`] is a stable
/// snake_case tag for receipts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The guest ran and reported an error of its own (including kernel refusals it observed,
    /// such as `EACCES` from landlock or `ENETUNREACH` without a network).
    #[error("guest error: {0}")]
    Guest(GuestError),
    #[error("execution exceeded the wall-clock limit of {} ms; the sandbox was killed", limit.as_millis())]
    Timeout { limit: Duration },
    #[error("execution exceeded the cpu-time limit of {} ms", limit.as_millis())]
    CpuLimit { limit: Duration },
    #[error("execution exceeded the memory limit of {limit} bytes: {detail}")]
    MemoryLimit { limit: u64, detail: String },
    #[error("execution exceeded the process limit of {limit}; the sandbox was killed")]
    PidLimit { limit: u32 },
    #[error("a file write exceeded the file-size limit of {limit} bytes")]
    FileSizeLimit { limit: u64 },
    #[error("guest output exceeded the limit of {limit} bytes")]
    OutputLimit { limit: u64 },
    #[error("guest was killed by signal {signal} ({name}){}", tail(stderr))]
    Killed {
        signal: i32,
        name: &'static str,
        stderr: String,
    },
    #[error(
        "guest exited with status {status} without a valid response{}",
        tail(stderr)
    )]
    Crashed { status: i32, stderr: String },
    #[error("integrity mismatch for module {module:?}: expected {expected}, computed {actual}")]
    IntegrityMismatch {
        module: String,
        expected: String,
        actual: String,
    },
    #[error(
        "unsupported integrity value {integrity:?}: expected sha256 (hex or base64, optional `sha256-` prefix) or `sha512-<base64>`"
    )]
    UnsupportedIntegrity { integrity: String },
    #[error("module {module:?} is {size} bytes, above the {limit} byte limit for module files")]
    ModuleTooLarge {
        module: String,
        size: u64,
        limit: u64,
    },
    #[error("module path {module:?} escapes the package root: {reason}")]
    PathEscape { module: String, reason: String },
    #[error("module {path:?} not found or not a regular file")]
    ModuleNotFound { path: PathBuf },
    #[error(
        "loaded manifest for {id:?} does not match inert package metadata (canonical hash {loaded} != {expected})"
    )]
    ManifestMismatch {
        id: String,
        expected: String,
        loaded: String,
    },
    #[error("module {module:?} does not export a capability: {detail}")]
    NotACapability { module: String, detail: String },
    #[error("protocol violation: {detail}")]
    ProtocolViolation { detail: String },
    #[error("module {module:?} is a WebAssembly module: use the wasm executor")]
    UseWasmExecutor { module: String },
    #[error("boundary {boundary} is unavailable: {reason}")]
    Unavailable {
        boundary: &'static str,
        reason: String,
    },
    #[error("sandbox setup failed at {stage}: {detail}")]
    Setup { stage: &'static str, detail: String },
    #[error("could not spawn the sandbox: {detail}")]
    Spawn { detail: String },
    #[error("invalid request: {detail}")]
    Invalid { detail: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn tail(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() {
        return String::new();
    }
    // Keep the message one line: the last non-empty stderr line says most.
    let last = trimmed
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let last: String = last.chars().take(300).collect();
    format!(": {last}")
}

impl SandboxError {
    /// A stable snake_case tag for receipts and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxError::Guest(_) => "guest_error",
            SandboxError::Timeout { .. } => "timeout",
            SandboxError::CpuLimit { .. } => "cpu_limit",
            SandboxError::MemoryLimit { .. } => "memory_limit",
            SandboxError::PidLimit { .. } => "pid_limit",
            SandboxError::FileSizeLimit { .. } => "file_size_limit",
            SandboxError::OutputLimit { .. } => "output_limit",
            SandboxError::Killed { .. } => "killed",
            SandboxError::Crashed { .. } => "crashed",
            SandboxError::IntegrityMismatch { .. } => "integrity_mismatch",
            SandboxError::UnsupportedIntegrity { .. } => "unsupported_integrity",
            SandboxError::ModuleTooLarge { .. } => "module_too_large",
            SandboxError::PathEscape { .. } => "path_escape",
            SandboxError::ModuleNotFound { .. } => "module_not_found",
            SandboxError::ManifestMismatch { .. } => "manifest_mismatch",
            SandboxError::NotACapability { .. } => "not_a_capability",
            SandboxError::ProtocolViolation { .. } => "protocol_violation",
            SandboxError::UseWasmExecutor { .. } => "use_wasm_executor",
            SandboxError::Unavailable { .. } => "unavailable",
            SandboxError::Setup { .. } => "setup",
            SandboxError::Spawn { .. } => "spawn",
            SandboxError::Invalid { .. } => "invalid",
            SandboxError::Io { .. } => "io",
        }
    }

    /// The guest's error when this is [`SandboxError::Guest`].
    pub fn guest(&self) -> Option<&GuestError> {
        match self {
            SandboxError::Guest(g) => Some(g),
            _ => None,
        }
    }

    /// True when a resource limit stopped the run (timeout, cpu, memory, pids, file size,
    /// output size).
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            SandboxError::Timeout { .. }
                | SandboxError::CpuLimit { .. }
                | SandboxError::MemoryLimit { .. }
                | SandboxError::PidLimit { .. }
                | SandboxError::FileSizeLimit { .. }
                | SandboxError::OutputLimit { .. }
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SandboxError::Io {
            context: context.into(),
            source,
        }
    }
}
