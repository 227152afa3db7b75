//! The errors of this crate.
//!
//! [`SandboxError`] is what a run (or a child's start) fails with. The host facts probed
//! before any run have small errors of their own (cedar's style: private fields behind
//! accessors, lowercase one-line messages that quote what was probed): [`InterpreterError`]
//! (node or python3 cannot be used), [`LandlockUnavailable`] and [`ChildrenUnavailable`] (no
//! namespaces for a sandboxed child). They are `Clone`, since the sandbox probes each fact
//! once and keeps the answer (an underlying io error is shared behind an `Arc`).
//! [`EngineError`] says why a container engine (docker, podman) did not answer its probe.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
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

/// Why an interpreter (node or python3) cannot be used: it is not on `PATH`, or not an
/// executable, or it did not answer (python's probe, `node --version` for `doctor`).
#[derive(Clone, Debug, thiserror::Error)]
#[error(transparent)]
pub struct InterpreterError {
    fault: InterpreterFault,
}

#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum InterpreterFault {
    #[error("{program} was not found on PATH")]
    NotOnPath { program: &'static str },
    /// The path could not be resolved (canonicalised).
    #[error("{runtime} at {}: {source}", path.display())]
    Unresolved {
        runtime: &'static str,
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("{runtime} at {} is not an executable file", path.display())]
    NotExecutable {
        runtime: &'static str,
        path: PathBuf,
    },
    #[error("{} did not answer", path.display())]
    NoAnswer { path: PathBuf },
    #[error("{} did not report sys.executable", path.display())]
    NoExecutable { path: PathBuf },
    #[error("{} --version failed", path.display())]
    NoVersion { path: PathBuf },
}

impl From<InterpreterFault> for InterpreterError {
    fn from(fault: InterpreterFault) -> Self {
        InterpreterError { fault }
    }
}

impl InterpreterError {
    /// The interpreter at fault, unless none was found.
    pub fn path(&self) -> Option<&Path> {
        match &self.fault {
            InterpreterFault::NotOnPath { .. } => None,
            InterpreterFault::Unresolved { path, .. }
            | InterpreterFault::NotExecutable { path, .. }
            | InterpreterFault::NoAnswer { path }
            | InterpreterFault::NoExecutable { path }
            | InterpreterFault::NoVersion { path } => Some(path),
        }
    }

    /// True when no interpreter was found on `PATH` (none was configured).
    pub fn not_found(&self) -> bool {
        matches!(self.fault, InterpreterFault::NotOnPath { .. })
    }
}

/// Why landlock cannot be used here: the kernel's answer to the ABI query (`ENOSYS` without
/// landlock, `EOPNOTSUPP` when it is disabled at boot), rendered as the io error renders.
#[derive(Clone, Debug, thiserror::Error)]
#[error(transparent)]
pub struct LandlockUnavailable {
    source: Arc<std::io::Error>,
}

impl LandlockUnavailable {
    pub(crate) fn new(error: std::io::Error) -> Self {
        LandlockUnavailable {
            source: Arc::new(error),
        }
    }

    /// The errno of the query, when the kernel gave one.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// The query's error.
    pub fn io_error(&self) -> &std::io::Error {
        &self.source
    }
}

/// Why sandboxed children cannot run here: the user, mount and pid namespaces they need
/// cannot be created (the probe's verdict is quoted).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the process sandbox is unavailable: user, mount and pid namespaces cannot be created here ({probe})"
)]
pub struct ChildrenUnavailable {
    probe: String,
}

impl ChildrenUnavailable {
    pub(crate) fn new(probe: impl Into<String>) -> Self {
        ChildrenUnavailable {
            probe: probe.into(),
        }
    }

    /// What the namespace probe reported.
    pub fn probe(&self) -> &str {
        &self.probe
    }
}

/// Why a container engine CLI (docker, podman) cannot be used: it is not on `PATH`, it could
/// not be run, it did not answer `version` in time (it was killed, with its process group),
/// or it answered with a failure. [`crate::probe_engine`], [`crate::probe_cli`] and
/// [`crate::detect_engine`] return it; [`crate::OciExecutor::detect`] and `doctor` show its
/// message. `command` is the command line that was run (`<cli> version --format ...`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("{cli} not found on PATH")]
    NotFound { cli: String },
    #[error("{command} could not be started: {source}")]
    Start {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} did not answer within {} ms (killed)", budget.as_millis())]
    Timeout { command: String, budget: Duration },
    #[error("{command}: waiting for it failed: {source}")]
    Wait {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The CLI succeeded but printed no version (no engine behind it).
    #[error("{command} reported no engine version")]
    NoVersion { command: String },
    /// The CLI failed; `message` is the last line of its stderr (shortened), possibly empty.
    #[error("{command} failed ({status}){}", failure_tail(message))]
    Failed {
        command: String,
        status: ExitStatus,
        message: String,
    },
    /// The probe's thread panicked.
    #[error("the {cli} probe panicked")]
    Panicked { cli: &'static str },
    /// The engine named by [`crate::OCI_ENGINE_ENV`] (`value`) did not answer.
    #[error("{}={value}: {error}", crate::oci::OCI_ENGINE_ENV)]
    Chosen {
        value: String,
        #[source]
        error: Box<EngineError>,
    },
    /// Neither docker nor podman answered: each one's reason.
    #[error("{docker}; {podman}")]
    NoneAnswers {
        docker: Box<EngineError>,
        podman: Box<EngineError>,
    },
}

fn failure_tail(message: &str) -> String {
    if message.is_empty() {
        " and printed nothing".into()
    } else {
        format!(": {message}")
    }
}
