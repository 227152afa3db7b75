//! The crate's one error type, [`WasmError`]: a [`WasmErrorKind`] plus a lowercase one-line
//! message that quotes what went wrong, ready for a failed receipt.

use capability_core::ErrorCode;
use capability_exec::GuestError;
use serde::{Deserialize, Serialize};

/// Why a run could not start or was stopped. Serializes as camelCase (`"outOfFuel"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum WasmErrorKind {
    /// The engine configuration is unusable (or wasmtime refused it).
    Config,
    /// The bytes are not a valid WebAssembly module (or are too large, or are a component).
    InvalidModule,
    /// The module bytes do not match the declared `integrity`, or it is malformed.
    Integrity,
    /// The manifest embedded in the module differs from the inert manifest.
    ManifestMismatch,
    /// The module imports something the host does not provide (e.g. a socket call).
    Link,
    /// The grants are inconsistent (a preopen without its effect, a bad guest path, ...).
    InvalidGrants,
    /// The limits are inconsistent with the engine (e.g. memory above the pool's slot size).
    InvalidLimits,
    /// The invocation cannot be encoded within the stdin cap.
    InvalidInvocation,
    /// Every pooled instance slot is in use.
    Capacity,
    /// A host-side I/O failure (scratch directory, module file).
    Io,
    /// The fuel (instruction) budget ran out.
    OutOfFuel,
    /// The wall-clock timeout passed (epoch deadline), or the guest asked to sleep past it.
    Timeout,
    /// The guest tried to grow its memory (or tables) past the limit.
    MemoryLimit,
    /// The guest exhausted the call stack (unbounded recursion).
    StackOverflow,
    /// The guest tried to use more than its private `/tmp` quota.
    TmpQuota,
    /// The guest wrote more than the stdout cap.
    StdoutLimit,
    /// The guest trapped for another reason (unreachable, out-of-bounds access, ...).
    Trap,
    /// The guest exited with a non-zero status without an error reply.
    Exit,
    /// The guest's stdout was not exactly one valid reply object.
    Protocol,
    /// The guest replied `{"error": ...}`.
    Guest,
    /// A failure inside the host that should not happen.
    Internal,
}

impl WasmErrorKind {
    /// The wire form, e.g. `outOfFuel`.
    pub fn as_str(self) -> &'static str {
        match self {
            WasmErrorKind::Config => "config",
            WasmErrorKind::InvalidModule => "invalidModule",
            WasmErrorKind::Integrity => "integrity",
            WasmErrorKind::ManifestMismatch => "manifestMismatch",
            WasmErrorKind::Link => "link",
            WasmErrorKind::InvalidGrants => "invalidGrants",
            WasmErrorKind::InvalidLimits => "invalidLimits",
            WasmErrorKind::InvalidInvocation => "invalidInvocation",
            WasmErrorKind::Capacity => "capacity",
            WasmErrorKind::Io => "io",
            WasmErrorKind::OutOfFuel => "outOfFuel",
            WasmErrorKind::Timeout => "timeout",
            WasmErrorKind::MemoryLimit => "memoryLimit",
            WasmErrorKind::StackOverflow => "stackOverflow",
            WasmErrorKind::TmpQuota => "tmpQuota",
            WasmErrorKind::StdoutLimit => "stdoutLimit",
            WasmErrorKind::Trap => "trap",
            WasmErrorKind::Exit => "exit",
            WasmErrorKind::Protocol => "protocol",
            WasmErrorKind::Guest => "guest",
            WasmErrorKind::Internal => "internal",
        }
    }

    /// True when the guest was stopped by a limit the host enforced.
    pub fn is_limit(self) -> bool {
        matches!(
            self,
            WasmErrorKind::OutOfFuel
                | WasmErrorKind::Timeout
                | WasmErrorKind::MemoryLimit
                | WasmErrorKind::StackOverflow
                | WasmErrorKind::TmpQuota
                | WasmErrorKind::StdoutLimit
        )
    }
}

impl std::fmt::Display for WasmErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of the WASM executor: a kind, a message, and for guest errors the guest's code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WasmError {
    kind: WasmErrorKind,
    message: String,
    guest: Option<GuestError>,
}

impl WasmError {
    pub(crate) fn new(kind: WasmErrorKind, message: impl Into<String>) -> Self {
        WasmError {
            kind,
            message: message.into(),
            guest: None,
        }
    }

    pub(crate) fn guest(error: GuestError) -> Self {
        WasmError {
            kind: WasmErrorKind::Guest,
            message: error.message.clone(),
            guest: Some(error),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> WasmErrorKind {
        self.kind
    }

    /// A one-line lowercase description (the guest's own message for [`WasmErrorKind::Guest`]).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The guest's error reply, when the kind is [`WasmErrorKind::Guest`].
    pub fn guest_error(&self) -> Option<&GuestError> {
        self.guest.as_ref()
    }

    /// `{"kind", "message", "code", "guestCode"?}`: the error as a failed receipt records it.
    pub fn to_value(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "kind": self.kind.as_str(),
            "message": self.message,
            "code": self.error_code().as_str(),
        });
        if let Some(code) = self.guest.as_ref().and_then(|g| g.code.as_ref()) {
            v["guestCode"] = serde_json::Value::String(code.clone());
        }
        v
    }

    /// The reference error code a failed receipt should carry: `INVALID_MANIFEST` /
    /// `INVALID_PACKAGE_DECLARATION` for bad artifacts, `PERMISSION_DENIED` for bad grants,
    /// `EXECUTION_FAILED` otherwise — also for a guest's error: a guest's code (even one of
    /// the reference codes, such as `APPROVAL_REQUIRED`) is the guest's, reported as
    /// `guestCode`, never the host's.
    pub fn error_code(&self) -> ErrorCode {
        match self.kind {
            WasmErrorKind::ManifestMismatch => ErrorCode::InvalidManifest,
            WasmErrorKind::Integrity | WasmErrorKind::InvalidModule | WasmErrorKind::Link => {
                ErrorCode::InvalidPackageDeclaration
            }
            WasmErrorKind::InvalidGrants => ErrorCode::PermissionDenied,
            _ => ErrorCode::ExecutionFailed,
        }
    }
}
