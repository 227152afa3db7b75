//! Why the host could not be opened, or could not answer a call of its service API.
//!
//! [`HostError`] is one enum; each variant holds a small error of its own (cedar's style:
//! private fields with accessors, lowercase one-line messages that quote the input). A
//! surface maps the variant to its protocol: [`HostError::status`] gives the HTTP status a
//! surface answers with.

use std::path::{Path, PathBuf};

use capability_core::CapabilityError;

pub use capability_acquire::AcquireError;
pub use capability_exec::home::HomeError;
pub use capability_policy::ApprovalError;
pub use capability_upstream::{ConfigError, PinsError};

pub use crate::tokens::AuthError;

/// Every error of the host's API (see the module docs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    #[error(transparent)]
    Home(#[from] HomeError),
    #[error(transparent)]
    Database(#[from] DatabaseError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Acquire(#[from] AcquireError),
    #[error(transparent)]
    Trust(#[from] TrustRefused),
    #[error(transparent)]
    Approval(#[from] ApprovalError),
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    #[error(transparent)]
    NotFound(#[from] NotFound),
    #[error(transparent)]
    Invalid(#[from] InvalidRequest),
    #[error(transparent)]
    Gateway(#[from] ConfigError),
    #[error(transparent)]
    Pins(#[from] PinsError),
}

impl HostError {
    /// The HTTP status a surface answers this error with.
    pub fn status(&self) -> u16 {
        match self {
            HostError::Auth(_) => 401,
            HostError::Forbidden(_) | HostError::Trust(_) => 403,
            HostError::NotFound(_) => 404,
            HostError::Invalid(_) => 400,
            HostError::Approval(e) => match e {
                ApprovalError::NotFound { .. } => 404,
                ApprovalError::NotPending { .. } | ApprovalError::Expired { .. } => 409,
                ApprovalError::SelfApproval { .. } | ApprovalError::OtherTenant { .. } => 403,
                ApprovalError::NoApprover | ApprovalError::Malformed { .. } => 400,
                ApprovalError::BadSignature
                | ApprovalError::PlanMismatch { .. }
                | ApprovalError::ActionMismatch
                | ApprovalError::Denied { .. } => 403,
                ApprovalError::TokenExpired | ApprovalError::Replayed => 409,
                _ => 500,
            },
            _ => 500,
        }
    }

    /// A short machine-readable code (`NOT_FOUND`, `FORBIDDEN`, `SELF_APPROVAL`, ...).
    pub fn code(&self) -> &'static str {
        match self {
            HostError::Auth(_) => "UNAUTHORIZED",
            HostError::Forbidden(_) => "FORBIDDEN",
            HostError::Trust(_) => "PERMISSION_DENIED",
            HostError::NotFound(_) => "NOT_FOUND",
            HostError::Invalid(_) => "INVALID_INPUT",
            HostError::Approval(e) => match e {
                ApprovalError::NotFound { .. } => "NOT_FOUND",
                ApprovalError::NotPending { .. } | ApprovalError::Expired { .. } => "NOT_PENDING",
                ApprovalError::SelfApproval { .. } => "SELF_APPROVAL",
                ApprovalError::OtherTenant { .. } => "FORBIDDEN",
                ApprovalError::NoApprover | ApprovalError::Malformed { .. } => "INVALID_INPUT",
                ApprovalError::BadSignature
                | ApprovalError::PlanMismatch { .. }
                | ApprovalError::ActionMismatch
                | ApprovalError::Denied { .. }
                | ApprovalError::TokenExpired
                | ApprovalError::Replayed => "APPROVAL_INVALID",
                _ => "INTERNAL",
            },
            _ => "INTERNAL",
        }
    }
}

/// The database of the home could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the database in `{}`: {reason}", path.display())]
pub struct DatabaseError {
    path: PathBuf,
    reason: String,
}

impl DatabaseError {
    pub(crate) fn new(path: &Path, reason: impl std::fmt::Display) -> Self {
        DatabaseError {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }

    /// The home whose database it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A policy file (or the set of them) was refused.
#[derive(Debug, thiserror::Error)]
#[error("policy{}: {reason}", path.as_ref().map(|p| format!(" `{}`", p.display())).unwrap_or_default())]
pub struct PolicyError {
    path: Option<PathBuf>,
    reason: String,
}

impl PolicyError {
    pub(crate) fn new(reason: impl std::fmt::Display) -> Self {
        PolicyError {
            path: None,
            reason: reason.to_string(),
        }
    }

    pub(crate) fn in_file(path: &Path, reason: impl std::fmt::Display) -> Self {
        PolicyError {
            path: Some(path.to_path_buf()),
            reason: reason.to_string(),
        }
    }

    /// The file, when one file is at fault.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What was wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// A capability source could not give its capabilities.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {error}")]
pub struct SourceError {
    source_name: String,
    error: CapabilityError,
}

impl SourceError {
    pub(crate) fn new(source_name: impl Into<String>, error: CapabilityError) -> Self {
        SourceError {
            source_name: source_name.into(),
            error,
        }
    }

    /// The source (`builtins`, `package /path/package.json`, `openapi petstore`, ...).
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// The capability error it gave.
    pub fn error(&self) -> &CapabilityError {
        &self.error
    }
}

/// A store (receipts, audit, approvals, tokens) failed.
#[derive(Debug, thiserror::Error)]
#[error("{store}: {reason}")]
pub struct StoreError {
    store: &'static str,
    reason: String,
}

impl StoreError {
    pub(crate) fn new(store: &'static str, reason: impl std::fmt::Display) -> Self {
        StoreError {
            store,
            reason: reason.to_string(),
        }
    }

    /// Which store (`receipts`, `audit log`, `approvals`, `tokens`, ...).
    pub fn store(&self) -> &str {
        self.store
    }
}

/// The trust policy refused a capability.
#[derive(Debug, thiserror::Error)]
#[error("Capability trust check failed for `{capability}`: {} (nothing was kept)", failures.join("; "))]
pub struct TrustRefused {
    capability: String,
    failures: Vec<String>,
}

impl TrustRefused {
    pub(crate) fn new(capability: impl Into<String>, failures: Vec<String>) -> Self {
        TrustRefused {
            capability: capability.into(),
            failures,
        }
    }

    /// The refused capability.
    pub fn capability(&self) -> &str {
        &self.capability
    }

    /// Each check it failed.
    pub fn failures(&self) -> &[String] {
        &self.failures
    }
}

/// A principal asked for what its role or tenants do not allow.
#[derive(Debug, thiserror::Error)]
#[error("`{principal}` {reason}")]
pub struct Forbidden {
    principal: String,
    reason: String,
}

impl Forbidden {
    pub(crate) fn new(principal: impl Into<String>, reason: impl Into<String>) -> Self {
        Forbidden {
            principal: principal.into(),
            reason: reason.into(),
        }
    }

    /// The principal's name.
    pub fn principal(&self) -> &str {
        &self.principal
    }
}

/// Something asked for does not exist (or is not visible to the principal: the two answer
/// alike).
#[derive(Debug, thiserror::Error)]
#[error("{kind} `{id}` does not exist")]
pub struct NotFound {
    kind: &'static str,
    id: String,
}

impl NotFound {
    pub(crate) fn new(kind: &'static str, id: impl Into<String>) -> Self {
        NotFound {
            kind,
            id: id.into(),
        }
    }

    /// `receipt`, `audit event`, `approval`, `capability`, `token`, ...
    pub fn kind(&self) -> &str {
        self.kind
    }

    /// The id asked for.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A request to the service API was malformed (a bad filter, an unknown format).
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct InvalidRequest {
    reason: String,
}

impl InvalidRequest {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        InvalidRequest {
            reason: reason.into(),
        }
    }
}
