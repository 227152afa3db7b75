//! Integrity of downloaded bytes: the sha512 observed over the bytes is the only integrity
//! that is recorded; declared ones (the packument's, the index's) are compared with it.

use base64::Engine as _;
use sha2::{Digest as _, Sha512};

use crate::AcquireError;
use crate::error::IntegrityFault;

/// The observed integrity of some bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// `sha512-<base64>` (Subresource Integrity form, as npm writes it).
    pub sri: String,
    /// The 128 hex digits (the store directory's name).
    pub hex: String,
}

/// sha512 over `bytes`.
pub fn observe(bytes: &[u8]) -> Observed {
    let digest = Sha512::digest(bytes);
    Observed {
        sri: format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(digest)
        ),
        hex: hex::encode(digest),
    }
}

/// Compares the bytes with a declared integrity (`what` names who declared it). A declared
/// integrity weaker than sha512 is refused: the observation is sha512 and nothing weaker
/// may vouch for it.
pub fn check_declared(bytes: &[u8], declared: &str, what: &str) -> Result<(), AcquireError> {
    let parsed = capability_exec::integrity::Integrity::parse(declared).map_err(|e| {
        IntegrityFault::Unreadable {
            by: what.to_string(),
            declared: declared.to_string(),
            reason: e.to_string(),
        }
    })?;
    if parsed.algorithm() != capability_exec::integrity::DigestAlgorithm::Sha512 {
        return Err(IntegrityFault::NotSha512 {
            by: what.to_string(),
            declared: declared.to_string(),
        }
        .into());
    }
    parsed.verify(bytes).map_err(|_| {
        IntegrityFault::Mismatch {
            by: what.to_string(),
            declared: declared.to_string(),
            observed: observe(bytes).sri,
        }
        .into()
    })
}
