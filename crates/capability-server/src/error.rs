//! The HTTP error of the API: `{"error": {"code", "message", ...}}` with its status.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capability_core::{CapabilityError, ErrorCode};
use capability_host::guard::Refusal;
use capability_host::{AuthError, HostError};
use serde_json::{Value, json};

/// An error answer: `{"error": {"code", "message", ...}}` with its status. Each variant holds
/// an error of its own: the host's and a capability call's as they are, the server's own
/// refusals as small structs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// The host refused or failed (its status and code).
    #[error(transparent)]
    Host(#[from] HostError),
    /// A capability call failed (the status its code stands for).
    #[error(transparent)]
    Capability(Box<CapabilityError>),
    /// The request could not be read.
    #[error(transparent)]
    BadRequest(#[from] BadRequest),
    /// No valid credential.
    #[error(transparent)]
    Unauthorized(#[from] AuthError),
    /// The guard, a role, or CSRF refused it.
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    /// No such route.
    #[error(transparent)]
    NotFound(#[from] NotFound),
}

/// A request whose body or parameters could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub(crate) struct BadRequest {
    reason: String,
}

/// A request refused by the HTTP guard, the principal's role or the CSRF check.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub(crate) struct Forbidden {
    /// `FORBIDDEN`, or `CSRF` for a session request without its token.
    code: &'static str,
    reason: String,
}

impl Forbidden {
    /// The machine-readable code of the answer.
    pub fn code(&self) -> &'static str {
        self.code
    }
}

/// Nothing answers at the path asked for.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub(crate) struct NotFound {
    what: String,
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        ApiError::forbidden(r.to_string())
    }
}

impl ApiError {
    pub fn bad_request(reason: impl Into<String>) -> ApiError {
        BadRequest {
            reason: reason.into(),
        }
        .into()
    }

    pub fn not_found(what: impl Into<String>) -> ApiError {
        NotFound { what: what.into() }.into()
    }

    pub fn forbidden(reason: impl Into<String>) -> ApiError {
        Forbidden {
            code: "FORBIDDEN",
            reason: reason.into(),
        }
        .into()
    }

    /// A session request that changes state without its CSRF token.
    pub fn csrf(reason: impl Into<String>) -> ApiError {
        Forbidden {
            code: "CSRF",
            reason: reason.into(),
        }
        .into()
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
            ApiError::Unauthorized(AuthError::Throttled { .. }) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        }
    }

    pub fn code(&self) -> &str {
        match self {
            ApiError::Host(e) => e.code(),
            ApiError::Capability(e) => e.code.as_str(),
            ApiError::BadRequest(_) => "INVALID_INPUT",
            ApiError::Unauthorized(AuthError::Throttled { .. }) => "RATE_LIMITED",
            ApiError::Unauthorized(_) => "UNAUTHORIZED",
            ApiError::Forbidden(e) => e.code(),
            ApiError::NotFound(_) => "NOT_FOUND",
        }
    }

    /// The answer's `message`: the error's own (a capability error's `message`).
    pub fn message(&self) -> String {
        self.to_string()
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
        let mut r = (
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.body().to_string(),
        )
            .into_response();
        if let ApiError::Unauthorized(AuthError::Throttled { retry_after }) = &self {
            r.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(retry_after.as_secs().max(1)),
            );
        }
        r
    }
}
