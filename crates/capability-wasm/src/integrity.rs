//! Module digests and `integrity` strings.
//!
//! Accepted forms (the reference's `verifySha256Integrity`, plus SRI sha512):
//! * `sha256-<64 hex>` or `<64 hex>`: compared case-insensitively;
//! * `sha256-<base64>` or `<base64>`: the standard base64 of the SHA-256 digest, exactly;
//! * `sha512-<base64>`: the standard base64 of the SHA-512 digest (the reference always
//!   fails sha512; we verify it, as Subresource Integrity does).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256, Sha512};

use crate::error::{WasmError, WasmErrorKind};

/// SHA-256 of the exact module bytes: the compiled-module cache key.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Checks `bytes` against an integrity string. `Ok(())` when it matches.
pub fn verify_integrity(bytes: &[u8], integrity: &str) -> Result<(), WasmError> {
    let fail = |m: String| Err(WasmError::new(WasmErrorKind::Integrity, m));
    let integrity = integrity.trim();
    if let Some(b64) = integrity.strip_prefix("sha512-") {
        let actual = STANDARD.encode(Sha512::digest(bytes));
        return if actual == b64 {
            Ok(())
        } else {
            fail(format!(
                "module integrity mismatch: expected sha512-{b64}, got sha512-{actual}"
            ))
        };
    }
    let rest = integrity.strip_prefix("sha256-").unwrap_or(integrity);
    // Base64 and hex never contain '-': a remaining dash names another algorithm.
    if rest.is_empty() || rest.contains('-') {
        return fail(format!("unsupported integrity {integrity:?}"));
    }
    let digest = sha256(bytes);
    let matches = if rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::encode(digest).eq_ignore_ascii_case(rest)
    } else {
        STANDARD.encode(digest) == rest
    };
    if matches {
        Ok(())
    } else {
        fail(format!(
            "module integrity mismatch: expected {integrity:?}, got sha256-{}",
            hex::encode(digest)
        ))
    }
}
