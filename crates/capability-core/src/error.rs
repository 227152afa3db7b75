//! The 13 reference error codes and the error type that carries them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The reference `CapabilityError.code` values, a locked public contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    InvalidManifest,
    InvalidInput,
    InvalidOutput,
    NotFound,
    DuplicateCapability,
    PermissionDenied,
    ApprovalRequired,
    InvalidPlan,
    ExecutionFailed,
    VerifyFailed,
    RollbackUnavailable,
    RollbackFailed,
    InvalidPackageDeclaration,
}

impl ErrorCode {
    /// Every code, in the reference's order.
    pub const ALL: [ErrorCode; 13] = [
        ErrorCode::InvalidManifest,
        ErrorCode::InvalidInput,
        ErrorCode::InvalidOutput,
        ErrorCode::NotFound,
        ErrorCode::DuplicateCapability,
        ErrorCode::PermissionDenied,
        ErrorCode::ApprovalRequired,
        ErrorCode::InvalidPlan,
        ErrorCode::ExecutionFailed,
        ErrorCode::VerifyFailed,
        ErrorCode::RollbackUnavailable,
        ErrorCode::RollbackFailed,
        ErrorCode::InvalidPackageDeclaration,
    ];

    /// The wire form, e.g. `INVALID_INPUT`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidManifest => "INVALID_MANIFEST",
            ErrorCode::InvalidInput => "INVALID_INPUT",
            ErrorCode::InvalidOutput => "INVALID_OUTPUT",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::DuplicateCapability => "DUPLICATE_CAPABILITY",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::ApprovalRequired => "APPROVAL_REQUIRED",
            ErrorCode::InvalidPlan => "INVALID_PLAN",
            ErrorCode::ExecutionFailed => "EXECUTION_FAILED",
            ErrorCode::VerifyFailed => "VERIFY_FAILED",
            ErrorCode::RollbackUnavailable => "ROLLBACK_UNAVAILABLE",
            ErrorCode::RollbackFailed => "ROLLBACK_FAILED",
            ErrorCode::InvalidPackageDeclaration => "INVALID_PACKAGE_DECLARATION",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `CapabilityError`: a code, a message and optional structured details.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct CapabilityError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<Value>,
    /// The failed receipt stored for this attempt, when there is one.
    pub receipt_id: Option<String>,
}

impl CapabilityError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        CapabilityError {
            code,
            message: message.into(),
            details: None,
            receipt_id: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn with_receipt(mut self, receipt_id: impl Into<String>) -> Self {
        self.receipt_id = Some(receipt_id.into());
        self
    }

    /// The form stored in receipts: `{name: "CapabilityError", message, code}`.
    pub fn serialized(&self) -> Value {
        json!({"name": "CapabilityError", "message": self.message, "code": self.code.as_str()})
    }
}
