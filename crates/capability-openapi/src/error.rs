//! The errors of importing a document.

use capability_core::CapabilityError;

/// Why a document could not be imported.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// The reference's `TypeError`s: `message` is the reference's text (`OpenAPI 3.1 document
    /// required`, `OpenAPI document must provide a server URL or options.baseUrl`); `detail`
    /// says what was found.
    #[error("{message}{}", detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    Document {
        message: String,
        detail: Option<String>,
    },
    /// An imported manifest does not validate (`INVALID_MANIFEST`, as the reference).
    #[error("{0}")]
    Manifest(CapabilityError),
    /// The text could not be read as JSON or YAML.
    #[error("{0}")]
    Read(String),
    /// A `$ref` that is external, unresolved or cyclic where the operation needs its target.
    #[error("{0}")]
    Reference(String),
    /// Operations that would be served under the same capability id (operation ids that
    /// differ only in case or punctuation): the runtime can register only one of them, so
    /// the document cannot be served as written.
    #[error("{0}")]
    Conflict(String),
}

/// The reference's message for a document that is not OpenAPI 3.1 (kept for 3.x documents
/// this crate does not read, and for Swagger 2.0).
pub const VERSION_REQUIRED: &str = "OpenAPI 3.1 document required";
/// The reference's message for a document without a server URL.
pub const SERVER_REQUIRED: &str = "OpenAPI document must provide a server URL or options.baseUrl";

impl ImportError {
    pub(crate) fn unsupported(detail: String) -> Self {
        ImportError::Document {
            message: VERSION_REQUIRED.into(),
            detail: Some(detail),
        }
    }

    /// The reference's name for the error: `TypeError` or `CapabilityError`.
    pub fn name(&self) -> &'static str {
        match self {
            ImportError::Manifest(_) => "CapabilityError",
            _ => "TypeError",
        }
    }

    /// The message without the detail (the reference's text).
    pub fn message(&self) -> String {
        match self {
            ImportError::Document { message, .. } => message.clone(),
            ImportError::Manifest(e) => e.message.clone(),
            ImportError::Read(m) | ImportError::Reference(m) | ImportError::Conflict(m) => {
                m.clone()
            }
        }
    }
}
