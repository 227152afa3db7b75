//! Safe acquisition checks on the host side: the module path stays inside the package root
//! (`capability-exec`'s resolution, the one every executor uses),
//! and its exact bytes match the declared integrity before anything runs. The bytes are
//! checked by `capability-exec`'s one integrity checker (the WASM executor uses the same),
//! streamed from the file under a size limit rather than read whole.

use std::path::{Path, PathBuf};

use capability_exec::{
    DEFAULT_MAX_MODULE_BYTES, IntegrityError, ModuleError, digest_file, resolve_module_path,
};

use crate::error::SandboxError;
use crate::types::ModuleSpec;

/// Bytes of the module kept for shebang / ELF inspection.
const HEAD_BYTES: usize = 4096;

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

/// Resolves `spec.module` inside the package root and verifies its integrity, accepting a
/// module file of at most [`DEFAULT_MAX_MODULE_BYTES`] (256 MiB).
///
/// Refuses: a module not starting with `./`, absolute paths, any `..` component, a path whose
/// symlinks lead outside the package root, a non-regular file, a file above the size limit
/// (from its size, before reading it), and an integrity mismatch.
pub fn resolve_module(spec: &ModuleSpec) -> Result<ResolvedModule, SandboxError> {
    resolve_module_limited(spec, DEFAULT_MAX_MODULE_BYTES)
}

/// [`resolve_module`] with a module size limit of `max_module_bytes`.
pub fn resolve_module_limited(
    spec: &ModuleSpec,
    max_module_bytes: u64,
) -> Result<ResolvedModule, SandboxError> {
    let module = spec.module.as_str();
    let path = resolve_module_path(&spec.package_root, module).map_err(module_error)?;
    let mount_root = match &spec.install_root {
        None => path.package_root.clone(),
        Some(install) => {
            let install = install
                .canonicalize()
                .map_err(|e| SandboxError::io(format!("install root {install:?}"), e))?;
            if !path.package_root.starts_with(&install) {
                return Err(SandboxError::Invalid {
                    detail: format!(
                        "install root {install:?} does not contain the package root {:?}",
                        path.package_root
                    ),
                });
            }
            install
        }
    };
    let real = path.file;
    let meta = std::fs::metadata(&real).map_err(|e| SandboxError::io(format!("{real:?}"), e))?;
    let digest = digest_file(
        &real,
        spec.integrity.as_deref(),
        max_module_bytes,
        HEAD_BYTES,
    )
    .map_err(|e| integrity_error(module, e))?;
    let relative = real
        .strip_prefix(&mount_root)
        .map(Path::to_path_buf)
        .map_err(|_| SandboxError::PathEscape {
            module: module.to_string(),
            reason: "it is outside the mounted root".into(),
        })?;
    use std::os::unix::fs::PermissionsExt as _;
    Ok(ResolvedModule {
        sha256: digest.sha256_hex(),
        head: digest.head,
        executable: meta.permissions().mode() & 0o111 != 0,
        host_path: real,
        mount_root,
        relative,
    })
}

/// The sandbox's error for a module path refused by `capability-exec`'s resolution.
fn module_error(e: ModuleError) -> SandboxError {
    match e {
        ModuleError::Escape { module, reason } => SandboxError::PathEscape { module, reason },
        ModuleError::NotFound { path } => SandboxError::ModuleNotFound { path },
        ModuleError::Io { context, source } => SandboxError::Io { context, source },
        other => SandboxError::Invalid {
            detail: other.to_string(),
        },
    }
}

/// Checks `bytes` against an integrity string, with the rules every module kind shares
/// (`capability_exec::integrity`): `sha256-<hex|base64>`, bare 64-digit hex
/// (case-insensitive), bare sha256 base64, and `sha512-<base64>` (SRI). Several
/// whitespace-separated SRI tokens may be given; the strongest algorithm present decides, and
/// any of its tokens may match.
pub fn verify_integrity(module: &str, bytes: &[u8], integrity: &str) -> Result<(), SandboxError> {
    capability_exec::verify_integrity(bytes, integrity).map_err(|e| integrity_error(module, e))
}

/// The sandbox's error for a refused module file.
fn integrity_error(module: &str, e: IntegrityError) -> SandboxError {
    match e {
        IntegrityError::Unsupported { integrity } => {
            SandboxError::UnsupportedIntegrity { integrity }
        }
        IntegrityError::Mismatch { expected, actual } => SandboxError::IntegrityMismatch {
            module: module.to_string(),
            expected,
            actual,
        },
        IntegrityError::TooLarge { size, limit, .. } => SandboxError::ModuleTooLarge {
            module: module.to_string(),
            size,
            limit,
        },
        IntegrityError::Io { path, source } => SandboxError::io(format!("{path:?}"), source),
        other => SandboxError::Invalid {
            detail: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use capability_exec::integrity::hex;
    use sha2::{Digest, Sha256, Sha512};

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
