//! The HTTP error of the API: `{"error": {"code", "message", ...}}` with its status.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capability_core::{CapabilityError, ErrorCode};
use capability_host::guard::Refusal;
use capability_host::{AuthError, HostError};
use serde_json::{Value, json};

/// An error answer: `{"error": {"code", "message", ...}}` with its status.
#[derive(Debug)]
pub enum ApiError {
    /// The host refused or failed (its status and code).
    Host(HostError),
    /// A capability call failed (the status its code stands for).
    Capability(Box<CapabilityError>),
    /// The request could not be read.
    BadRequest(String),
    /// No valid credential.
    Unauthorized(AuthError),
    /// The guard, a role, or CSRF refused it.
    Forbidden { code: &'static str, message: String },
    /// No such route or object.
    NotFound(String),
}

impl From<HostError> for ApiError {
    fn from(e: HostError) -> Self {
        ApiError::Host(e)
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        ApiError::Forbidden {
            code: "FORBIDDEN",
            message: r.to_string(),
        }
    }
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest(message.into())
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::NotFound(message.into())
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::Forbidden {
            code: "FORBIDDEN",
            message: message.into(),
        }
    }

    pub fn capability(e: CapabilityError) -> ApiError {
        ApiError::Capability(Box::new(e))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Host(e) => {
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            ApiError::Capability(e) => status_of(e.code),
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        }
    }

    pub fn code(&self) -> &str {
        match self {
            ApiError::Host(e) => e.code(),
            ApiError::Capability(e) => e.code.as_str(),
            ApiError::BadRequest(_) => "INVALID_INPUT",
            ApiError::Unauthorized(_) => "UNAUTHORIZED",
            ApiError::Forbidden { code, .. } => code,
            ApiError::NotFound(_) => "NOT_FOUND",
        }
    }

    pub fn message(&self) -> String {
        match self {
            ApiError::Host(e) => e.to_string(),
            ApiError::Capability(e) => e.message.clone(),
            ApiError::Unauthorized(e) => e.to_string(),
            ApiError::BadRequest(m)
            | ApiError::NotFound(m)
            | ApiError::Forbidden { message: m, .. } => m.clone(),
        }
    }

    fn body(&self) -> Value {
        match self {
            ApiError::Capability(e) => capability_host::error_document(e),
            _ => json!({"error": {"code": self.code(), "message": self.message()}}),
        }
    }
}

/// The HTTP status of a capability error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidInput
        | ErrorCode::InvalidManifest
        | ErrorCode::InvalidPlan
        | ErrorCode::InvalidPackageDeclaration => StatusCode::BAD_REQUEST,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::PermissionDenied | ErrorCode::ApprovalRequired => StatusCode::FORBIDDEN,
        ErrorCode::DuplicateCapability | ErrorCode::RollbackUnavailable => StatusCode::CONFLICT,
        ErrorCode::InvalidOutput
        | ErrorCode::ExecutionFailed
        | ErrorCode::VerifyFailed
        | ErrorCode::RollbackFailed => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.body().to_string(),
        )
            .into_response()
    }
}
