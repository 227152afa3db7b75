//! Module digests and `integrity` strings.
//!
//! The rules are `capability-exec`'s, shared by every module kind (the process sandbox checks
//! `.js`, `.py` and native modules with the same checker):
//! * `sha256-<64 hex>` or `<64 hex>`: compared case-insensitively;
//! * `sha256-<base64>` or `<base64>`: the standard base64 of the SHA-256 digest, padded or
//!   not;
//! * `sha512-<base64>`: the standard base64 of the SHA-512 digest (the reference always
//!   fails sha512; we verify it, as Subresource Integrity does);
//! * several whitespace-separated tokens: the strongest algorithm decides.

use sha2::{Digest, Sha256};

use crate::error::{WasmError, WasmErrorKind};

/// SHA-256 of the exact module bytes: the compiled-module cache key.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Checks `bytes` against an integrity string. `Ok(())` when it matches.
pub fn verify_integrity(bytes: &[u8], integrity: &str) -> Result<(), WasmError> {
    capability_exec::verify_integrity(bytes, integrity).map_err(integrity_error)
}

/// The engine's error for a refused module: a mismatch or a malformed string.
pub(crate) fn integrity_error(e: capability_exec::IntegrityError) -> WasmError {
    let message = match e {
        capability_exec::IntegrityError::Mismatch { .. } => format!("module {e}"),
        other => other.to_string(),
    };
    WasmError::new(WasmErrorKind::Integrity, message)
}
