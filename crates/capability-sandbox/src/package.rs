//! Safe acquisition checks on the host side: the module path stays inside the package root,
//! and its exact bytes match the declared integrity before anything runs.

use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use sha2::{Digest, Sha256, Sha512};

use crate::error::SandboxError;
use crate::types::ModuleSpec;

/// A module whose location and bytes were checked.
#[derive(Clone, Debug)]
pub struct ResolvedModule {
    /// Canonical host path of the module file.
    pub host_path: PathBuf,
    /// Canonical host path of the directory mounted at `/package`.
    pub mount_root: PathBuf,
    /// The module path relative to `mount_root`.
    pub relative: PathBuf,
    /// SHA-256 of the module bytes, hex.
    pub sha256: String,
    /// The first bytes of the module (up to 4 KiB), for shebang / ELF inspection.
    pub head: Vec<u8>,
    /// Whether the file has an execute bit.
    pub executable: bool,
}

/// Resolves `spec.module` inside the package root and verifies its integrity.
///
/// Refuses: a module not starting with `./`, absolute paths, any `..` component, a path whose
/// symlinks lead outside the package root, a non-regular file, and an integrity mismatch.
pub fn resolve_module(spec: &ModuleSpec) -> Result<ResolvedModule, SandboxError> {
    let module = spec.module.as_str();
    let escape = |reason: &str| SandboxError::PathEscape {
        module: module.to_string(),
        reason: reason.to_string(),
    };
    if module.contains('\0') {
        return Err(escape("it contains a NUL byte"));
    }
    let rest = module
        .strip_prefix("./")
        .ok_or_else(|| escape("it must start with ./"))?;
    let rel = Path::new(rest);
    for component in rel.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(escape("it contains a `..` component")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(escape("it is absolute"));
            }
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(escape("it names the package root itself"));
    }
    let root = spec
        .package_root
        .canonicalize()
        .map_err(|e| SandboxError::io(format!("package root {:?}", spec.package_root), e))?;
    let mount_root = match &spec.install_root {
        None => root.clone(),
        Some(install) => {
            let install = install
                .canonicalize()
                .map_err(|e| SandboxError::io(format!("install root {install:?}"), e))?;
            if !root.starts_with(&install) {
                return Err(SandboxError::Invalid {
                    detail: format!(
                        "install root {install:?} does not contain the package root {root:?}"
                    ),
                });
            }
            install
        }
    };
    let joined = root.join(rel);
    let real = match joined.canonicalize() {
        Ok(real) => real,
        Err(_) => {
            // A dangling symlink or a missing file. Tell them apart for a precise error.
            if std::fs::symlink_metadata(&joined).is_ok() {
                return Err(escape(
                    "it is a symlink that does not resolve inside the package",
                ));
            }
            return Err(SandboxError::ModuleNotFound { path: joined });
        }
    };
    if !real.starts_with(&root) {
        return Err(escape(&format!(
            "it resolves to {} outside the package root",
            real.display()
        )));
    }
    let meta = std::fs::metadata(&real).map_err(|e| SandboxError::io(format!("{real:?}"), e))?;
    if !meta.is_file() {
        return Err(SandboxError::ModuleNotFound { path: real });
    }
    let bytes = std::fs::read(&real).map_err(|e| SandboxError::io(format!("{real:?}"), e))?;
    if let Some(integrity) = &spec.integrity {
        verify_integrity(module, &bytes, integrity)?;
    }
    let relative = real
        .strip_prefix(&mount_root)
        .map(Path::to_path_buf)
        .map_err(|_| escape("it is outside the mounted root"))?;
    use std::os::unix::fs::PermissionsExt as _;
    Ok(ResolvedModule {
        sha256: hex(&Sha256::digest(&bytes)),
        head: bytes[..bytes.len().min(4096)].to_vec(),
        executable: meta.permissions().mode() & 0o111 != 0,
        host_path: real,
        mount_root,
        relative,
    })
}

/// Checks `bytes` against an integrity string.
///
/// Accepted forms: `sha256-<hex|base64>`, bare 64-digit hex (case-insensitive), bare sha256
/// base64, and `sha512-<base64>` (SRI). Several whitespace-separated SRI tokens may be given;
/// the strongest algorithm present decides, and any of its tokens may match.
pub fn verify_integrity(module: &str, bytes: &[u8], integrity: &str) -> Result<(), SandboxError> {
    let unsupported = || SandboxError::UnsupportedIntegrity {
        integrity: integrity.to_string(),
    };
    let mut sha256_tokens = Vec::new();
    let mut sha512_tokens = Vec::new();
    for token in integrity.split_whitespace() {
        // SRI options (`?...`) are ignored, as the SRI spec says.
        let token = token.split('?').next().unwrap_or(token);
        if let Some(v) = token.strip_prefix("sha512-") {
            sha512_tokens.push(decode_digest(v, 64).ok_or_else(unsupported)?);
        } else if let Some(v) = token.strip_prefix("sha256-") {
            sha256_tokens.push(decode_digest(v, 32).ok_or_else(unsupported)?);
        } else if token.contains('-') && !token.starts_with(|c: char| c.is_ascii_hexdigit()) {
            return Err(unsupported());
        } else {
            sha256_tokens.push(decode_digest(token, 32).ok_or_else(unsupported)?);
        }
    }
    let (expected, actual): (Vec<Vec<u8>>, Vec<u8>) = if !sha512_tokens.is_empty() {
        (sha512_tokens, Sha512::digest(bytes).to_vec())
    } else if !sha256_tokens.is_empty() {
        (sha256_tokens, Sha256::digest(bytes).to_vec())
    } else {
        return Err(unsupported());
    };
    if expected.iter().any(|e| constant_time_eq(e, &actual)) {
        return Ok(());
    }
    let algo = if actual.len() == 64 {
        "sha512"
    } else {
        "sha256"
    };
    Err(SandboxError::IntegrityMismatch {
        module: module.to_string(),
        expected: integrity.to_string(),
        actual: format!("{algo}-{}", STANDARD.encode(&actual)),
    })
}

/// Decodes a digest written as hex (sha256 only: 64 digits) or base64 (padded or not).
fn decode_digest(text: &str, len: usize) -> Option<Vec<u8>> {
    if text.len() == len * 2 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut out = Vec::with_capacity(len);
        for pair in text.as_bytes().chunks(2) {
            let s = std::str::from_utf8(pair).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
        }
        return Some(out);
    }
    let decoded = STANDARD
        .decode(text)
        .or_else(|_| STANDARD_NO_PAD.decode(text))
        .ok()?;
    (decoded.len() == len).then_some(decoded)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    const DATA: &[u8] = b"export default 1;\n";

    fn sha256_b64() -> String {
        STANDARD.encode(Sha256::digest(DATA))
    }

    #[test]
    fn integrity_forms() {
        let h = hex(&Sha256::digest(DATA));
        for form in [
            h.clone(),
            h.to_uppercase(),
            format!("sha256-{h}"),
            sha256_b64(),
            format!("sha256-{}", sha256_b64()),
            format!("sha256-{}", sha256_b64().trim_end_matches('=')),
            format!("sha512-{}", STANDARD.encode(Sha512::digest(DATA))),
            format!(
                "sha256-AAAA sha512-{}",
                STANDARD.encode(Sha512::digest(DATA))
            ),
        ] {
            // "sha256-AAAA" is not a valid 32-byte digest: the mixed case must be refused.
            let r = verify_integrity("./m.js", DATA, &form);
            if form.starts_with("sha256-AAAA") {
                assert!(matches!(r, Err(SandboxError::UnsupportedIntegrity { .. })));
            } else {
                assert!(r.is_ok(), "{form}: {r:?}");
            }
        }
    }

    #[test]
    fn integrity_mismatch_and_unsupported() {
        let wrong = hex(&Sha256::digest(b"other"));
        assert!(matches!(
            verify_integrity("./m.js", DATA, &wrong),
            Err(SandboxError::IntegrityMismatch { .. })
        ));
        let wrong512 = format!("sha512-{}", STANDARD.encode(Sha512::digest(b"x")));
        assert!(matches!(
            verify_integrity("./m.js", DATA, &wrong512),
            Err(SandboxError::IntegrityMismatch { .. })
        ));
        for bad in [
            "md5-abc",
            "sha1-qUqP5cyxm6YcTAhz05Hph5gvu9M=",
            "",
            "zz",
            "sha256-",
        ] {
            assert!(
                matches!(
                    verify_integrity("./m.js", DATA, bad),
                    Err(SandboxError::UnsupportedIntegrity { .. })
                ),
                "{bad}"
            );
        }
    }
}
