//! What capability code throws, whichever boundary it ran behind.

use capability_core::CapabilityError;

/// What capability code throws: a [`CapabilityError`] (kept as is), or any other error (the
/// runtime wraps it as `EXECUTION_FAILED` and records `{name, message}` in the receipt).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    #[error("{message}")]
    Other { name: String, message: String },
}

impl HookError {
    /// A plain `Error` with a message.
    pub fn msg(message: impl Into<String>) -> Self {
        HookError::Other {
            name: "Error".into(),
            message: message.into(),
        }
    }

    /// A named error (e.g. `TypeError`).
    pub fn named(name: impl Into<String>, message: impl Into<String>) -> Self {
        HookError::Other {
            name: name.into(),
            message: message.into(),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            HookError::Capability(e) => &e.message,
            HookError::Other { message, .. } => message,
        }
    }
}

/// The result of a hook.
pub type HookResult<T> = Result<T, HookError>;
